#include "code_life.h"
#include "leak_site.h"

#include <stdatomic.h>

/* An open-addressed table of the codes that queued samples name.  A slot's code
 * word is also its lock: CLAIMING while a thread fills a fresh slot, FORGETTING
 * while the drain (GIL held) decides whether to clear it; `last` is the newest
 * ring position that named the code.  A thread that names a code raises `last`
 * and then checks that the slot still holds it, so the drain either sees the
 * raised `last` (and keeps the slot) or the thread sees the slot go and claims
 * another.  A code may so have two slots (the second watch evicts the first's,
 * which then reads as not alive): a code is alive if any of its slots says so.
 * Races lose a code (it reads as not alive, and its sample goes to an outer
 * frame), never pass a freed one for alive: a slot's life says "freed" or
 * "evicted" from the moment its code stops being watched. */
#define SLOTS 1024
#define PROBES 16
#define CLAIMING ((uintptr_t)1)
#define FORGETTING ((uintptr_t)2)

typedef struct {
    _Atomic uintptr_t code;
    _Atomic uint64_t last;
    leak_site life; /* the watch's token: freed or evicted means not alive */
} slot;

static slot table[SLOTS];
static memhooks_api api;
static atomic_int following;
/* Whether a slot was claimed since the last start: a start clears the table
 * only then (1024 slots of about 100 bytes each, cleared at every start of a
 * pytest --pyrometer run, were about 7% of its cost per test), and a drain
 * looks for slots to forget only then (code_life_forget). */
static atomic_int claimed;

static size_t home(uintptr_t code)
{
    return (size_t)((code >> 4) * 0x9E3779B97F4A7C15ULL >> 54) & (SLOTS - 1);
}

void code_life_start(const memhooks_api *library)
{
    api = *library;
    if (atomic_exchange(&claimed, 0)) {
        for (size_t i = 0; i < SLOTS; i++) {
            if (atomic_load_explicit(&table[i].code, memory_order_relaxed) != 0) {
                atomic_store(&table[i].code, 0);
            }
        }
    }
    atomic_store(&following, 1);
}

void code_life_stop(void)
{
    atomic_store(&following, 0);
}

static void raise_last(slot *s, uint64_t index)
{
    uint64_t seen = atomic_load(&s->last);
    while (seen < index && !atomic_compare_exchange_weak(&s->last, &seen, index)) {
    }
}

int code_life_note(const void *code, uint64_t index)
{
    uintptr_t c = (uintptr_t)code;
    if (c <= FORGETTING || !atomic_load_explicit(&following, memory_order_relaxed)) {
        return 0;
    }
    size_t h = home(c);
    for (int attempt = 0; attempt < 4; attempt++) {
        for (size_t p = 0; p < PROBES; p++) {
            slot *s = &table[(h + p) & (SLOTS - 1)];
            uintptr_t seen = atomic_load(&s->code);
            if (seen == c) {
                raise_last(s, index);
                if (atomic_load(&s->code) == c) {
                    return 1;
                }
                break; /* being forgotten meanwhile: look again */
            }
            if (seen == 0 && atomic_compare_exchange_strong(&s->code, &seen, CLAIMING)) {
                atomic_store_explicit(&claimed, 1, memory_order_relaxed);
                /* Until the watch is in place the code is alive anyway: this
                 * thread's frame holds it, and it cannot lose it before it leaves
                 * this allocator and takes the GIL back. */
                atomic_store(&s->life.freed, 0);
                atomic_store(&s->life.evicted, 0);
                atomic_store(&s->last, index);
                api.watch((void *)c, (uintptr_t)&s->life);
                atomic_store(&s->code, c);
                return 1;
            }
        }
    }
    return 0;
}

int code_life_alive(const void *code)
{
    uintptr_t c = (uintptr_t)code;
    if (!atomic_load(&following) || c <= FORGETTING) {
        return 0;
    }
    size_t h = home(c);
    for (size_t p = 0; p < PROBES; p++) {
        slot *s = &table[(h + p) & (SLOTS - 1)];
        if (atomic_load(&s->code) == c && atomic_load(&s->life.freed) == 0 &&
            atomic_load(&s->life.evicted) == 0) {
            return 1;
        }
    }
    return 0;
}

void code_life_forget(uint64_t tail)
{
    if (!atomic_load_explicit(&claimed, memory_order_relaxed)) {
        return; /* no slot taken since the start cleared them: each test of pytest --pyrometer drains twice */
    }
    for (size_t i = 0; i < SLOTS; i++) {
        slot *s = &table[i];
        uintptr_t c = atomic_load(&s->code);
        if (c <= FORGETTING || atomic_load(&s->last) >= tail ||
            !atomic_compare_exchange_strong(&s->code, &c, FORGETTING)) {
            continue;
        }
        if (atomic_load(&s->last) >= tail) {
            atomic_store(&s->code, c); /* named again meanwhile: kept */
            continue;
        }
        /* Quietly: the block stays in the watch table with no token, and its
         * free (or a newer sample there) tells nobody. */
        if (atomic_load(&following)) {
            api.retoken((void *)c, (uintptr_t)&s->life, 0);
        }
        atomic_store(&s->code, 0);
    }
}
