#include "launches.h"
#include "gpu.h"
#include "../common/paused.h"
#include "../cpython/pyframe.h"
#include "../profile/codes.h"
#include "../profile/line_timeline.h"
#include "../profile/sites.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

/* Launches noted between two drains (one CPU snapshot, 10 ms by default): a
 * loop of tiny kernels launches one every few microseconds, and a snapshot
 * can be late when the machine is busy.  ~4.6 MB. */
#define QUEUE_SLOTS 16384
/* How many frames of the launching thread a queued note keeps. */
#define STACK_DEPTH 12
/* Placed launches remembered, by correlation id modulo this: a record that
 * arrives more than this many launches after its own finds its slot taken
 * (the ids are checked) and is charged to no line.  The GPU thread flushes the
 * records every 100 ms. */
#define PLACED_SLOTS (1u << 16)
/* Records waiting for the drain to place their launch. */
#define WAITING_MAX 16384

enum note_state {
    NOTE_PLACED,  /* site and lineno read at the launch */
    NOTE_STACK,   /* the frames are queued: placed by the drain */
    NOTE_NOWHERE, /* no reported line on the stack */
    NOTE_PAUSED,  /* launched while profiling was paused: charged nowhere */
};

typedef struct {
    atomic_int ready;
    int state;
    uint32_t correlation;
    uint32_t site;
    int32_t lineno;
    PyThreadState *ts;
    uint64_t thread_serial;
    int holds_refs; /* noted with the GIL: each code below holds a reference */
    int depth;
    const void *frames[STACK_DEPTH]; /* innermost first */
    PyCodeObject *codes[STACK_DEPTH];
    int lastis[STACK_DEPTH];
} launch_note;

typedef struct {
    uint32_t correlation;
    uint32_t site;   /* SITE_NONE: no line; LINE_TIMELINE_PAUSED: charged nowhere */
    int32_t lineno;
    int used;
} placed_launch;

static launch_note queue[QUEUE_SLOTS];
/* Counts launches_start calls: see last_line. */
static atomic_uint run_number;

static struct {
    /* Whether notes may be taken, and how many are being written: stop waits
     * for none (the same handshake as mem_profile.c's callback_enter). */
    atomic_int accepting;
    atomic_int in_note;
    /* A drain is asked of the main thread (see want_drain). */
    atomic_int drain_wanted;
    _Atomic uint64_t head; /* next slot a launching thread claims */
    _Atomic uint64_t tail; /* next slot the drain reads (GIL held) */
    _Atomic uint64_t lost_launches;
    uint64_t lost_records; /* under lock */
    /* The placed launches and the waiting records: written by the drain (GIL)
     * and the delivery thread, under this lock; neither holds it while calling
     * anything that could wait for the other. */
    pthread_mutex_t lock;
    placed_launch placed[PLACED_SLOTS];
    gpu_work waiting[WAITING_MAX];
    size_t waiting_count;
} L = {.lock = PTHREAD_MUTEX_INITIALIZER};

int launches_start(void)
{
    atomic_fetch_add(&run_number, 1);
    pthread_mutex_lock(&L.lock);
    memset(L.placed, 0, sizeof L.placed);
    L.waiting_count = 0;
    L.lost_records = 0;
    pthread_mutex_unlock(&L.lock);
    atomic_store(&L.lost_launches, 0);
    atomic_store(&L.accepting, 1);
    return 0;
}

void launches_stop(void)
{
    atomic_store(&L.accepting, 0);
    while (atomic_load(&L.in_note) > 0) {
        /* A note takes microseconds: the launching thread is inside its own
         * CUDA call, never waiting for this one. */
    }
}

/* The line of the calling thread's previous launch: a loop launches from the
 * same instruction again and again, and finding its line scans the code's
 * line table from the start.  Keyed by the code's site as well as its
 * address, so that a code object freed and another made at its address is
 * not taken for it unless it is the same function's (then the line is the
 * same but for an edit made by exec, which the profile could not tell apart
 * anyway). */
static _Thread_local struct {
    const void *code;
    int lasti;
    uint32_t site;
    int32_t lineno;
    unsigned run; /* a cache from an earlier run (whose sites may be gone) is not used */
} last_line;

/* The nearest reported line of the calling thread, read at once: 1 when every
 * code object up to it is known (codes_find never registers, so it calls
 * nothing that allocates), with *site SITE_NONE when there is none; 0 when one
 * is not known yet.  GIL held. */
static int place_now(PyThreadState *ts, uint32_t *site, int32_t *lineno)
{
    *site = SITE_NONE;
    for (pyframe f = pyframe_innermost(ts); f != NULL; f = pyframe_caller(f)) {
        PyCodeObject *code = pyframe_code(f);
        const code_info *info = codes_find(code);
        if (info == NULL) {
            return 0;
        }
        if (info->reported) {
            int lasti = pyframe_lasti(f);
            *site = info->site;
            unsigned run = atomic_load_explicit(&run_number, memory_order_relaxed);
            if (last_line.code == code && last_line.lasti == lasti && last_line.site == info->site &&
                last_line.run == run) {
                *lineno = last_line.lineno;
                return 1;
            }
            /* PyCode_Addr2Line only reads the code's line table. */
            *lineno = codes_line(code, lasti);
            last_line.code = code;
            last_line.lasti = lasti;
            last_line.site = info->site;
            last_line.lineno = *lineno;
            last_line.run = run;
            return 1;
        }
    }
    return 1;
}

static int drain_as_pending_call(void *unused)
{
    (void)unused;
    /* As in a snapshot: no collection while the drain registers codes (which
     * allocates), or one could free a code it has just found alive. */
    int collecting = PyGC_Disable();
    gpu_kernels_drain();
    if (collecting) {
        PyGC_Enable();
    }
    return 0;
}

/* A note queued without the GIL names codes nobody keeps alive for it: once
 * its frames return, the drain can no longer read their lines.  The snapshots
 * drain every 10 ms, which a short program (a child that launches and ends)
 * can outlive, so the main thread is asked for a drain at its next bytecode
 * boundary: when the launching thread is the main thread, right after the call
 * that launched returns, its frames still there.  At most one request is out
 * at a time (the drain clears the flag), so a loop of launches costs one
 * pending call per drain, not one per launch.  This runs inside the program's
 * CUDA call, not inside an allocator: Py_AddPendingCall may take its lock. */
static void want_drain(void)
{
    if (atomic_exchange(&L.drain_wanted, 1)) {
        return;
    }
    PyInterpreterState *main = PyInterpreterState_Main();
    if (main == NULL || Py_AddPendingCall(drain_as_pending_call, NULL) != 0) {
        atomic_store(&L.drain_wanted, 0); /* the queue is full: at the next launch */
        return;
    }
    pyframe_wake_main_thread(main);
}

/* The launching thread, inside the library's callback (see launches.h). */
void launches_note(uint32_t correlation)
{
    atomic_fetch_add(&L.in_note, 1);
    if (!atomic_load(&L.accepting)) {
        atomic_fetch_sub(&L.in_note, 1);
        return;
    }
    uint64_t head = atomic_load(&L.head);
    do {
        if (head - atomic_load_explicit(&L.tail, memory_order_acquire) >= QUEUE_SLOTS) {
            atomic_fetch_add(&L.lost_launches, 1);
            atomic_fetch_sub(&L.in_note, 1);
            return;
        }
    } while (!atomic_compare_exchange_weak(&L.head, &head, head + 1));
    launch_note *n = &queue[head % QUEUE_SLOTS];
    n->correlation = correlation;
    n->depth = 0;
    n->holds_refs = 0;
    n->site = SITE_NONE;
    n->lineno = 0;
    PyThreadState *ts = pyframe_my_thread_state();
    if (paused_now()) {
        n->state = NOTE_PAUSED;
    } else if (ts == NULL) {
        /* A thread without Python state: the main thread's line, as the CPU
         * side charges such threads' CPU time. */
        line_timeline_entry latest;
        n->state = NOTE_NOWHERE;
        if (line_timeline_latest(&latest) && latest.site != LINE_TIMELINE_PAUSED) {
            n->state = latest.site == SITE_NONE ? NOTE_NOWHERE : NOTE_PLACED;
            n->site = latest.site;
            n->lineno = latest.lineno;
        }
    } else {
        int gil = pyframe_gil_is_mine();
        if (gil && place_now(ts, &n->site, &n->lineno)) {
            n->state = n->site == SITE_NONE ? NOTE_NOWHERE : NOTE_PLACED;
        } else {
            /* The thread's own frames cannot change while it is in here. */
            n->state = NOTE_STACK;
            n->ts = ts;
            n->thread_serial = pyframe_thread_serial(ts);
            n->holds_refs = gil;
            for (pyframe f = pyframe_innermost(ts); f != NULL && n->depth < STACK_DEPTH; f = pyframe_caller(f)) {
                n->frames[n->depth] = f;
                n->codes[n->depth] = pyframe_code(f);
                n->lastis[n->depth] = pyframe_lasti(f);
                if (gil) {
                    Py_INCREF(n->codes[n->depth]); /* with the GIL: no allocation, no lock */
                }
                n->depth++;
            }
        }
    }
    atomic_store_explicit(&n->ready, 1, memory_order_release);
    if (n->state == NOTE_STACK && !n->holds_refs) {
        want_drain();
    }
    atomic_fetch_sub(&L.in_note, 1);
}

/* Caller holds L.lock.  The launch of a correlation id, or NULL when it has
 * not been placed (or was overwritten by one 2^16 launches later). */
static const placed_launch *placed_find_unlocked(uint32_t correlation)
{
    const placed_launch *p = &L.placed[correlation % PLACED_SLOTS];
    return p->used && p->correlation == correlation ? p : NULL;
}

/* Caller holds L.lock. */
static void charge_unlocked(const placed_launch *p, const gpu_work *work)
{
    if (p->site == LINE_TIMELINE_PAUSED) {
        return;
    }
    gpu_charge_work(p->site, p->lineno, work);
}

void launches_charge(const gpu_work *work)
{
    pthread_mutex_lock(&L.lock);
    const placed_launch *p = placed_find_unlocked(work->correlation);
    if (p != NULL) {
        charge_unlocked(p, work);
    } else if (L.waiting_count < WAITING_MAX) {
        L.waiting[L.waiting_count++] = *work;
    } else {
        L.lost_records++;
        gpu_charge_work(SITE_NONE, 0, work);
    }
    pthread_mutex_unlock(&L.lock);
}

/* The line of a queued note.  Codes noted with a reference are alive; the
 * others (noted without the GIL) only if the profiler knows them already or
 * their frame is still on the thread's stack: a code that may have been freed
 * is never touched, and its launch goes to the next frame out.  GIL held. */
static void place_queued(const launch_note *n, uint32_t *site, int32_t *lineno)
{
    PyThreadState *alive = NULL;
    *site = SITE_NONE;
    *lineno = 0;
    if (!n->holds_refs) {
        for (PyThreadState *ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get()); ts != NULL;
             ts = PyThreadState_Next(ts)) {
            if (ts == n->ts && pyframe_thread_serial(ts) == n->thread_serial) {
                alive = ts;
                break;
            }
        }
    }
    for (int i = 0; i < n->depth; i++) {
        PyCodeObject *code = n->codes[i];
        if (!n->holds_refs && codes_find(code) == NULL &&
            (alive == NULL || !pyframe_on_stack(alive, n->frames[i], code))) {
            continue;
        }
        const code_info *info = codes_lookup(code);
        if (info != NULL && info->reported) {
            *site = info->site;
            *lineno = codes_line(code, n->lastis[i]);
            return;
        }
    }
}

void launches_drain(int final)
{
    /* Notes queued from here on ask again. */
    atomic_store(&L.drain_wanted, 0);
    /* Records that arrived before this drain: their launches were noted before
     * (a launch's callback returns before its work can finish). */
    pthread_mutex_lock(&L.lock);
    size_t arrived = L.waiting_count;
    pthread_mutex_unlock(&L.lock);
    for (;;) {
        uint64_t tail = atomic_load(&L.tail);
        launch_note *n = &queue[tail % QUEUE_SLOTS];
        if (!atomic_load_explicit(&n->ready, memory_order_acquire)) {
            break;
        }
        placed_launch p = {n->correlation, n->site, n->lineno, 1};
        if (n->state == NOTE_STACK) {
            place_queued(n, &p.site, &p.lineno);
        } else if (n->state == NOTE_PAUSED) {
            p.site = LINE_TIMELINE_PAUSED;
        } else if (n->state == NOTE_NOWHERE) {
            p.site = SITE_NONE;
        }
        if (n->holds_refs) {
            for (int i = 0; i < n->depth; i++) {
                Py_DECREF(n->codes[i]);
            }
        }
        pthread_mutex_lock(&L.lock);
        placed_launch *slot = &L.placed[p.correlation % PLACED_SLOTS];
        /* The runtime's call and the driver call it makes share one id: the
         * first note (the outer call's) stands. */
        if (!(slot->used && slot->correlation == p.correlation)) {
            *slot = p;
        }
        pthread_mutex_unlock(&L.lock);
        atomic_store_explicit(&n->ready, 0, memory_order_relaxed);
        atomic_store_explicit(&L.tail, tail + 1, memory_order_release);
    }
    /* Every launch noted before the records above arrived is placed now,
     * unless a note is still being written (its slot claimed, not ready):
     * then the records wait for the next drain. */
    int all_placed = atomic_load(&L.head) == atomic_load(&L.tail);
    pthread_mutex_lock(&L.lock);
    size_t kept = 0;
    for (size_t i = 0; i < L.waiting_count; i++) {
        const gpu_work *w = &L.waiting[i];
        const placed_launch *p = placed_find_unlocked(w->correlation);
        if (p != NULL) {
            charge_unlocked(p, w);
        } else if (final || (all_placed && i < arrived)) {
            /* Its launch was never noted (the queue was full, or it came
             * before profiling started): no line. */
            L.lost_records++;
            gpu_charge_work(SITE_NONE, 0, w);
        } else {
            L.waiting[kept++] = *w;
        }
    }
    L.waiting_count = kept;
    pthread_mutex_unlock(&L.lock);
}

void launches_lost(uint64_t *launches, uint64_t *records)
{
    *launches = atomic_load(&L.lost_launches);
    pthread_mutex_lock(&L.lock);
    *records = L.lost_records;
    pthread_mutex_unlock(&L.lock);
}

void launches_forget_in_child(void)
{
    atomic_store(&L.accepting, 0);
    atomic_store(&L.in_note, 0);
    atomic_store(&L.drain_wanted, 0);
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    L.lock = fresh;
}
