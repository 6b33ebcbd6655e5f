#include "line_timeline.h"

#include <stdatomic.h>
#include <time.h>

typedef struct {
    _Atomic uint64_t t_ns;  /* 0 while the slot is being rewritten */
    _Atomic uint64_t where; /* site << 32 | (uint32_t)lineno */
    _Atomic uint32_t stack;
} slot;

static struct {
    atomic_int enabled;
    _Atomic uint64_t written; /* entries ever written: the next one goes to written % SLOTS */
    slot slots[LINE_TIMELINE_SLOTS];
} timeline;

#define MASK (LINE_TIMELINE_SLOTS - 1u)
_Static_assert((LINE_TIMELINE_SLOTS & MASK) == 0, "the ring's size is a power of two");

void line_timeline_enable(int on) { atomic_store(&timeline.enabled, on); }

int line_timeline_enabled(void) { return atomic_load_explicit(&timeline.enabled, memory_order_relaxed); }

uint64_t line_timeline_now_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return 0;
    }
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void line_timeline_note(uint64_t t_ns, uint32_t site, int32_t lineno, uint32_t stack)
{
    if (t_ns == 0) {
        return; /* 0 marks a slot being written */
    }
    uint64_t n = atomic_load_explicit(&timeline.written, memory_order_relaxed);
    slot *s = &timeline.slots[n & MASK];
    atomic_store(&s->t_ns, 0);
    atomic_store(&s->where, (uint64_t)site << 32 | (uint32_t)lineno);
    atomic_store(&s->stack, stack);
    atomic_store(&s->t_ns, t_ns);
    atomic_store(&timeline.written, n + 1);
}

/* Entry n, when it is still in the ring and whole: 1, else 0. */
static int read_entry(uint64_t n, line_timeline_entry *out)
{
    slot *s = &timeline.slots[n & MASK];
    uint64_t t1 = atomic_load(&s->t_ns);
    uint64_t where = atomic_load(&s->where);
    uint32_t stack = atomic_load(&s->stack);
    uint64_t t2 = atomic_load(&s->t_ns);
    /* Read after the entry: when the writer has since come round to this slot
     * (or is one slot away, possibly rewriting it now), the entry is gone. */
    uint64_t written = atomic_load(&timeline.written);
    if (t1 == 0 || t1 != t2 || written - n >= LINE_TIMELINE_SLOTS - 1) {
        return 0;
    }
    out->t_ns = t1;
    out->site = (uint32_t)(where >> 32);
    out->lineno = (int32_t)(uint32_t)where;
    out->stack = stack;
    return 1;
}

size_t line_timeline_read(uint64_t from_ns, line_timeline_entry *out, size_t max)
{
    uint64_t written = atomic_load(&timeline.written);
    if (written == 0 || max == 0) {
        return 0;
    }
    /* Walk back from the newest to the first entry before from_ns. */
    uint64_t oldest = written > LINE_TIMELINE_SLOTS - 1 ? written - (LINE_TIMELINE_SLOTS - 1) : 0;
    uint64_t first = written;
    while (first > oldest) {
        line_timeline_entry e;
        if (!read_entry(first - 1, &e)) {
            break; /* lapped: what is older is gone too */
        }
        first--;
        if (e.t_ns < from_ns) {
            break;
        }
    }
    size_t count = 0;
    for (uint64_t n = first; n < written && count < max; n++) {
        if (read_entry(n, &out[count])) {
            count++;
        } else {
            count = 0; /* lapped while copying: keep only the unbroken newer part */
        }
    }
    return count;
}

int line_timeline_latest(line_timeline_entry *out)
{
    uint64_t written = atomic_load(&timeline.written);
    return written > 0 && read_entry(written - 1, out);
}

void line_timeline_clear(void) { atomic_store(&timeline.written, 0); }
