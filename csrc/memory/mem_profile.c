#include "mem_profile.h"
#include "../common/paused.h"
#include "memhooks_api.h"
#include "code_life.h"
#include "leak_site.h"
#include "pyalloc.h"
#include "../common/arena.h"
#include "../common/table.h"
#include "../profile/codes.h"
#include "../profile/stacks.h"
#include "../common/clock.h"
#include "../cpython/pyframe.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#define LINE_POINTS 100   /* memory_samples per line */
#define RUN_POINTS 300    /* footprint timeline */
/* Samples queued between two drains.  A drain needs the GIL and a bytecode
 * boundary: one C call that allocates (sum(range(32_000_000)): 1 GB of ints
 * made and freed; list(range(10**8)): 3.2 GB kept) queues every sample it
 * takes in a function met for the first time, 16,000 of them at the 64 KiB
 * window for the first; 2,048 slots dropped seven of eight, silently.  16,384
 * slots (about 10 MB with pending, deferred and pending_freed_ns) hold 1 GB of
 * such a call's samples; past them samples are dropped, counted, and the
 * profile says so (memory_samples_dropped, memory_dropped_mb, a notice).  Only
 * what a burst fills is ever in memory: a drain that empties the ring starts
 * the next sample at its first slot again (rewind_ring).  Left to go round,
 * the ring was in memory a little more with every sample queued: 200 threads
 * allocating without the GIL grew the process by 12 MB in 60 s, flat without
 * the profile (tests/end_to_end/test_stress.py). */
#define RING_SLOTS 16384

/* A timeline that keeps at most `cap` points by dropping every other point and
 * halving its rate when full: its size is fixed, whatever the run length. */
typedef struct mem_series {
    uint32_t cap, count, stride, skipped;
    uint64_t *t_ns;
    double *mb;
} series;

/* The sampled allocations of one line, followed to their frees, are a
 * leak_site. */

typedef struct {
    uint64_t alloc_bytes, python_bytes, copy_bytes;
    /* Of alloc_bytes, the samples that stand for a whole number of sampling
     * windows (the countdown's crossings inside a smaller block), whose count
     * is Poisson: the part of the estimate that has a sampling error; native
     * (window_bytes, at M.window) and Python's (python_window_bytes, at
     * M.python_window) apart, their windows differing.  The others are blocks
     * of a window or more, each its own exact sample (a block whose size is
     * itself a whole number of windows is taken for the first kind: its error
     * is overstated, never understated). */
    uint64_t window_bytes, python_window_bytes;
    uint64_t alloc_samples, copy_samples;
    int64_t peak;     /* the largest live (allocated - freed) seen at an allocation */
    leak_site *fate;  /* its sampled blocks followed to their frees; arena memory, stable while the table grows */
    series *timeline;
    leak_site *other_fate; /* its blocks allocated on stacks past the cap (stacks.h); made when first needed */
} mem_line;

/* The sampled allocations and copies of one call stack (stacks.h).  Its blocks'
 * frees are told to its fate, which tells its line's (leak_site.also), so that
 * a block has one token and both figures stay exact.  The stacks past the cap
 * share one bucket, whose frees are told to each line's other_fate. */
typedef struct {
    uint64_t alloc_bytes, python_bytes, copy_bytes;
    leak_site *fate; /* arena memory, stable while the table grows */
} mem_stack;

/* How many frames of the allocating thread's stack a queued sample keeps: the
 * nearest reported frame is searched among them when the sample is charged. */
#define STACK_DEPTH 24
/* How many frames a queued sample taken with the GIL walks at most to fill them. */
#define QUEUED_WALK 512

/* A sample that could not be charged where it was taken (see on_sample), with
 * where the allocating thread stood when it allocated. */
typedef struct {
    atomic_int ready;
    PyThreadState *ts;
    uint64_t thread_serial; /* ts's, so that a new thread reusing a freed state's address is not taken for it */
    void *address; /* the sampled block (ALLOC) */
    int kind;
    int holds_refs; /* taken with the GIL: each code below holds a reference */
    int depth;
    int64_t bytes, python_bytes;
    uint64_t t_ns;
    int64_t footprint; /* the library's footprint counter at t_ns */
    uint32_t mark;     /* its token's index in pending (pending_mark) */
    const void *frames[STACK_DEPTH]; /* innermost first: the call stack charged is their reported frames
                                      * (a deeper stack is cut: see stacks_of_queued) */
    PyCodeObject *codes[STACK_DEPTH];
    int lastis[STACK_DEPTH];
} ring_slot;

static struct {
    int active, initialised;
    pyalloc_sizing python_sizing; /* how Python's blocks are sized; NOT_SIZED: not profiled */
    int leak_detector; /* report leaks (sampled blocks are followed to their frees either way) */
    memhooks_api api;
    int64_t window;        /* native blocks' sampling window, and the footprint's */
    int64_t python_window; /* Python's blocks' sampling window (python_window_for) */
    uint64_t start_ns;
    table lines; /* (code, lineno) -> mem_line */
    table stacks; /* (call stack id, 0) -> mem_stack */
    uint64_t other_alloc, other_python, other_copy; /* the stacks past the cap */
    arena mem;
    series *footprint;
    int64_t max_footprint;
    /* The library's footprint when this profile started.  Its counter runs on
     * across the profiles one process makes (in-process runs, the pytest
     * plugin's one per test, a forked child's fresh profile), so a profile's
     * footprint is counted from here: since profiling started. */
    int64_t footprint_base;
    uint32_t max_site; /* where the footprint peaked: a site (sites.h), SITE_NONE for no line */
    int max_lineno;
    uint64_t max_t_ns;
    uint64_t unattributed_alloc, unattributed_python, unattributed_copy;
    _Atomic uint64_t native_thread_alloc, native_thread_copy;
    /* Where the frees of samples with no line go: no reported line on the stack,
     * and a thread without Python state. */
    leak_site unattributed_site, native_thread_site;
    /* The interpreter profiled (the one that started the profile): a thread
     * of another (a subinterpreter's, 3.12+ with its own allocator) counts as
     * a thread without Python state, as no reference of ours to its code may
     * be dropped from this one. */
    PyInterpreterState *interp;
    _Atomic uint64_t dropped, dropped_bytes; /* samples the full queue refused, and their weights */
    _Atomic uint64_t queued; /* samples that could not be charged where they were taken */
    _Atomic uint64_t ring_head; /* next slot a writer claims */
    _Atomic uint64_t ring_tail; /* next slot the drain reads (GIL held) */
    _Atomic uint64_t marks;     /* pending marks given out (pending_mark) */
    uint64_t ring_start; /* the first slot of this run: older ones were queued by an earlier run */
    /* Whether the callbacks may touch the profile's memory, and how many are
     * running: release waits for none before unmapping (see callback_enter). */
    atomic_int accepting;
    atomic_int in_callback;
    atomic_int drain_requested;
} M;

static ring_slot ring[RING_SLOTS];
/* The drain after the library stopped (its watch table cleared): blocks not seen
 * freed by then stay live. */
static int final_drain;
/* The token of a queued allocation sample until its line is known: as many as
 * ring slots, so that no two samples in the queue share one (a block freed and
 * its address reused by another queued sample must not pass for it).  Given
 * out in turn, not by ring slot: a mark is taken again only after RING_SLOTS
 * other samples, so that a free that took its block out of the watch table
 * just before the drain and tells the mark just after does not tell the next
 * sample's (the ring's first slots are taken again after every drain). */
static leak_site pending[RING_SLOTS];
/* When each pending mark's block was freed (0: not freed, or not known when),
 * so that the drain tells a queued sample's free in its place among the
 * samples' allocations (see drain_queue).  Written inside free(): an atomic
 * store of the vDSO's clock. */
static _Atomic uint64_t pending_freed_ns[RING_SLOTS];

static series *series_new(uint32_t cap)
{
    series *s = arena_alloc(&M.mem, sizeof *s);
    if (s == NULL) {
        return NULL;
    }
    s->t_ns = arena_alloc(&M.mem, cap * sizeof *s->t_ns);
    s->mb = arena_alloc(&M.mem, cap * sizeof *s->mb);
    if (s->t_ns == NULL || s->mb == NULL) {
        return NULL;
    }
    s->cap = cap;
    s->stride = 1;
    return s;
}

static void series_add(series *s, uint64_t t_ns, double mb)
{
    if (s == NULL || ++s->skipped < s->stride) {
        return;
    }
    if (s->count > 0 && t_ns < s->t_ns[s->count - 1]) {
        /* A queued sample, charged late, is older than the last point; the
         * value it brings is today's: it goes at the last point's time. */
        t_ns = s->t_ns[s->count - 1];
    }
    s->skipped = 0;
    if (s->count == s->cap) {
        for (uint32_t i = 0; i < s->cap / 2; i++) {
            s->t_ns[i] = s->t_ns[2 * i];
            s->mb[i] = s->mb[2 * i];
        }
        s->count = s->cap / 2;
        s->stride *= 2;
    }
    s->t_ns[s->count] = t_ns;
    s->mb[s->count] = mb;
    s->count++;
}

static mem_line *line_for(uint32_t site, int lineno)
{
    table_key key = {(uint64_t)site, (uint64_t)(int64_t)lineno};
    int created;
    mem_line *m = table_upsert(&M.lines, key, &created);
    if (m != NULL && created) {
        m->fate = arena_alloc(&M.mem, sizeof *m->fate);
        m->timeline = series_new(LINE_POINTS);
    }
    return m;
}

/* The sums of a call stack whose line's frees are told to line_fate; NULL when
 * memory runs out.  A stack's leaf is its line, so line_fate is the same at
 * every call for one stack. */
static mem_stack *stack_for(uint32_t stack, leak_site *line_fate)
{
    table_key key = {(uint64_t)stack, 0};
    int created;
    mem_stack *ms = table_upsert(&M.stacks, key, &created);
    if (ms != NULL && created) {
        ms->fate = arena_alloc(&M.mem, sizeof *ms->fate);
        if (ms->fate != NULL) {
            ms->fate->also = line_fate;
        }
    }
    return ms != NULL && ms->fate != NULL ? ms : NULL;
}

/* Where a sample of a line goes among the stacks: its stack's sums, or the
 * bucket of the stacks past the cap.  Returns the token its block is followed
 * under (an allocation), whose frees reach the line's fate too. */
static leak_site *charge_stack(mem_line *m, uint32_t stack, int kind, uint64_t b, uint64_t python_bytes)
{
    mem_stack *ms = stack != STACKS_OTHER ? stack_for(stack, m->fate) : NULL;
    if (ms != NULL) {
        if (kind == MEMHOOKS_COPY) {
            ms->copy_bytes += b;
        } else {
            ms->alloc_bytes += b;
            ms->python_bytes += python_bytes;
        }
        return ms->fate;
    }
    if (kind == MEMHOOKS_COPY) {
        M.other_copy += b;
        return NULL;
    }
    M.other_alloc += b;
    M.other_python += python_bytes;
    if (m->other_fate == NULL) {
        m->other_fate = arena_alloc(&M.mem, sizeof *m->other_fate);
        if (m->other_fate != NULL) {
            m->other_fate->also = m->fate;
        }
    }
    return m->other_fate != NULL ? m->other_fate : m->fate;
}

/* Which kind of sample a weight is, by the rule charge_line keeps its bytes
 * apart by: 1 for native samples of whole windows, 2 for Python's, 0 for a
 * block that was its own exact sample. */
static int windowed_kind(int python, uint64_t bytes)
{
    int64_t w = python ? M.python_window : M.window; /* 0 only before the first start */
    if (w <= 0 || bytes % (uint64_t)w != 0) {
        return 0;
    }
    return python ? 2 : 1;
}

static int64_t live_bytes(const mem_line *m)
{
    return (int64_t)m->alloc_bytes - (int64_t)atomic_load_explicit(&m->fate->freed_bytes, memory_order_relaxed);
}

/* The run's footprint at t_ns, for its timeline and peak (GIL held):
 * `library` is the library's footprint counter read then.  A sample is charged
 * with the counter read when it was taken, not when it is charged: a queued one
 * is charged at the next drain, by when what was allocated may be freed again
 * (a test of a few milliseconds that kept 45 MiB read a peak of 0). */
static void note_footprint(uint64_t t_ns, uint32_t site, int lineno, int64_t library)
{
    int64_t footprint = library - M.footprint_base;
    series_add(M.footprint, t_ns - M.start_ns, (double)footprint / 1048576.0);
    if (footprint > M.max_footprint) {
        M.max_footprint = footprint;
        M.max_t_ns = t_ns - M.start_ns;
        if (site != SITE_NONE || lineno == 0) {
            M.max_site = site;
            M.max_lineno = lineno;
        }
    }
}

/* Charges one sample to a line (code NULL: no reported line) and to its call
 * stack (stacks.h: its leaf is that line; STACKS_ROOT with no line); GIL held,
 * no call into CPython that allocates or locks, so that it may run inside an
 * allocator.  Returns the token under which an allocation sample's block is
 * followed to its free (on_freed). */
static uintptr_t charge_line(PyCodeObject *code, int lasti, uint32_t stack, int kind, int64_t bytes,
                             int64_t python_bytes, uint64_t t_ns, int64_t footprint)
{
    mem_line *m = NULL;
    int lineno = 0;
    const code_info *info = code != NULL ? codes_find(code) : NULL; /* registered by the caller */
    uint32_t site = info != NULL ? info->site : SITE_NONE;
    if (site != SITE_NONE) {
        /* PyCode_Addr2Line only reads the code's line table. */
        lineno = codes_line_known(info, code, lasti);
        m = line_for(site, lineno);
    }
    uint64_t b = (uint64_t)bytes;
    if (m == NULL || m->fate == NULL) {
        /* No reported line on the stack: counted for the run only, and for
         * the empty stack, which is the run's unattributed part. */
        mem_stack *root = stack_for(STACKS_ROOT, &M.unattributed_site);
        if (kind == MEMHOOKS_COPY) {
            M.unattributed_copy += b;
            if (root != NULL) {
                root->copy_bytes += b;
            }
            return 0;
        }
        M.unattributed_alloc += b;
        M.unattributed_python += (uint64_t)python_bytes;
        note_footprint(t_ns, SITE_NONE, 0, footprint);
        if (root == NULL) {
            return (uintptr_t)&M.unattributed_site;
        }
        root->alloc_bytes += b;
        root->python_bytes += (uint64_t)python_bytes;
        return (uintptr_t)root->fate;
    }
    leak_site *token = charge_stack(m, stack, kind, b, (uint64_t)python_bytes);
    if (kind == MEMHOOKS_COPY) {
        m->copy_bytes += b;
        m->copy_samples++;
        return 0;
    }
    m->alloc_bytes += b;
    m->python_bytes += (uint64_t)python_bytes;
    switch (windowed_kind(python_bytes > 0, b)) {
    case 1:
        m->window_bytes += b;
        break;
    case 2:
        m->python_window_bytes += b;
        break;
    default:
        break;
    }
    m->alloc_samples++;
    int64_t live = live_bytes(m);
    if (live > m->peak) {
        m->peak = live;
    }
    series_add(m->timeline, t_ns - M.start_ns, (double)live / 1048576.0);
    note_footprint(t_ns, site, lineno, footprint);
    atomic_fetch_add(&m->fate->watched, 1);
    return (uintptr_t)token;
}

/* Inside an allocator, with the GIL: the nearest reported frame of the thread's
 * stack and the call stack from it to the root, if every code object on the
 * stack is one the profiler already knows (codes_find never registers:
 * registering calls CPython, which allocates).  Returns 0 when one is not
 * known yet: the sample is then queued.
 *
 * The whole stack is read (up to STACKS_MAX_DEPTH reported frames), not just
 * the nearest reported frame: a pointer walk, one code lookup and one stack
 * lookup per frame, and the line of each frame whose instruction moved since
 * it was last asked (codes_line_known).  It is affordable because it runs once
 * per window of bytes allocated (1 MiB by default), not per allocation:
 * measured with callgrind on alloc_churn with full profiling, about 5,000
 * instructions a sample (most of them CPython's line-table search), 0.02% of
 * the run's instructions (docs/benchmarks.md).  Reading only the nearest
 * frame here and the rest at the next snapshot would save that and give the
 * bytes the stack of another moment. */
static int locate_known(PyThreadState *ts, PyCodeObject **code, int *lasti, uint32_t *stack)
{
    *code = NULL;
    *stack = STACKS_ROOT;
    for (pyframe f = pyframe_innermost(ts); f != NULL; f = pyframe_caller(f)) {
        const code_info *info = codes_find(pyframe_code(f));
        if (info == NULL) {
            return 0;
        }
        if (info->reported) {
            *code = pyframe_code(f);
            *lasti = pyframe_lasti(f);
            return info->site == SITE_NONE || stacks_of_known(f, stack);
        }
    }
    return 1; /* no reported frame: unattributed */
}

/* The library may be inside a callback when profiling stops (it read the
 * callback's address just before it was cleared), and the callbacks write into
 * the profile's memory, which release unmaps.  So accepting says whether they
 * may touch it, in_callback counts those inside, and release waits for none
 * before unmapping.  A callback raises in_callback before it reads accepting;
 * release clears accepting before it reads in_callback (sequentially consistent
 * both): either release sees the callback and waits for it, or the callback
 * sees the profile closed and leaves.  Atomics only: any thread, inside an
 * allocator. */
static int callback_enter(void)
{
    atomic_fetch_add(&M.in_callback, 1);
    if (!atomic_load(&M.accepting)) {
        atomic_fetch_sub(&M.in_callback, 1);
        return 0;
    }
    return 1;
}

static void callback_leave(void)
{
    atomic_fetch_sub(&M.in_callback, 1);
}

/* A queued sample's stack: the thread's frames, innermost first, into slot s
 * (claimed at ring position head), each code kept alive until the drain: by a
 * reference with the GIL, else followed (code_life_note). */
static void walk_into_slot(ring_slot *s, PyThreadState *ts, int gil, uint64_t head)
{
    int depth = 0;
    int walked = 0;
    for (pyframe f = pyframe_innermost(ts); f != NULL && walked < QUEUED_WALK; f = pyframe_caller(f), walked++) {
        PyCodeObject *code = pyframe_code(f);
        const code_info *known = NULL;
        if (gil) {
            /* With the GIL the code table can be read (codes_find, no call into
             * CPython): a frame known to be of a file not reported (importlib's
             * frames, a library's) is left out, so that the STACK_DEPTH kept
             * reach the program's own frames through a deep import (numpy's
             * import nests some 60 frames: most of its 20-30 MB were
             * unattributed);
             * once they are full, only a frame known reported is still looked
             * for, into the last slot: the nearest the sample has. */
            known = codes_find(code);
            if (known != NULL && !known->reported) {
                continue;
            }
            if (depth == STACK_DEPTH) {
                if (known == NULL) {
                    continue;
                }
                depth--;
                Py_DECREF(s->codes[depth]); /* not its last reference: the frame holds the code */
            }
        } else if (depth == STACK_DEPTH) {
            break;
        }
        s->frames[depth] = f;
        s->codes[depth] = code;
        s->lastis[depth] = pyframe_lasti(f);
        if (gil) {
            Py_INCREF(code); /* with the GIL: no allocation, no lock */
        } else {
            code_life_note(code, head); /* alive now: followed to the drain */
        }
        depth++;
        if (depth == STACK_DEPTH && known != NULL) {
            break; /* the last slot holds a reported frame: the nearest one past the cut */
        }
    }
    s->depth = depth;
}

/* The sample function: runs on the allocating thread, from inside malloc or a
 * Python allocator, with this thread's counting suspended by the library.  It
 * calls nothing in CPython that may allocate or take a lock (pymalloc may be in
 * the middle of new_arena; Py_AddPendingCall locks): it reads the thread's own
 * frames (they cannot change while the thread is in here) and either charges
 * the sample at once, when it holds the GIL and knows every code object on the
 * way, or queues it with where the thread stands, for the next drain. */
static uintptr_t sample(int kind, int64_t bytes, int64_t python_bytes, void *address)
{
    /* Paused (control.h): the sample is dropped, not charged, and its block is
     * not watched.  Checked here, once per sample, rather than in the library's
     * fast path: the countdown goes on, so the samples taken once resumed are
     * still one per window of bytes, unbiased; blocks sampled before the pause
     * stay watched, so their frees still count and live bytes stay right. */
    if (!M.active || paused_now()) {
        return 0;
    }
    PyThreadState *ts = pyframe_my_thread_state();
    if (ts == NULL || PyThreadState_GetInterpreter(ts) != M.interp) {
        if (kind == MEMHOOKS_COPY) {
            atomic_fetch_add(&M.native_thread_copy, (uint64_t)bytes);
            return 0;
        }
        atomic_fetch_add(&M.native_thread_alloc, (uint64_t)bytes);
        return (uintptr_t)&M.native_thread_site;
    }
    uint64_t now = clock_wall_ns();
    int64_t footprint = M.api.footprint(); /* an atomic load, lock-free */
    int gil = pyframe_gil_is_mine();
    if (gil) {
        PyCodeObject *code;
        int lasti = 0;
        uint32_t stack;
        if (locate_known(ts, &code, &lasti, &stack)) {
            return charge_line(code, lasti, stack, kind, bytes, python_bytes, now, footprint);
        }
    }
    uint64_t head = atomic_load(&M.ring_head);
    do {
        /* Signed: the drain moves the tail first when it rewinds (rewind_ring). */
        if ((int64_t)(head - atomic_load_explicit(&M.ring_tail, memory_order_acquire)) >= RING_SLOTS) {
            atomic_fetch_add(&M.dropped, 1);
            if (kind == MEMHOOKS_ALLOC) {
                atomic_fetch_add(&M.dropped_bytes, (uint64_t)bytes);
            }
            return 0;
        }
    } while (!atomic_compare_exchange_weak(&M.ring_head, &head, head + 1));
    atomic_fetch_add(&M.queued, 1);
    ring_slot *s = &ring[head % RING_SLOTS];
    s->mark = (uint32_t)(atomic_fetch_add(&M.marks, 1) % RING_SLOTS);
    leak_site *mark = &pending[s->mark];
    atomic_store_explicit(&pending_freed_ns[s->mark], 0, memory_order_relaxed);
    atomic_store(&mark->freed, 0);
    atomic_store(&mark->evicted, 0);
    atomic_store(&mark->freed_bytes, 0);
    atomic_store(&mark->churn_bytes, 0);
    s->ts = ts;
    s->thread_serial = pyframe_thread_serial(ts);
    s->address = address;
    s->kind = kind;
    s->bytes = bytes;
    s->python_bytes = python_bytes;
    s->t_ns = now;
    s->footprint = footprint;
    s->holds_refs = gil;
    walk_into_slot(s, ts, gil, head);
    atomic_store_explicit(&s->ready, 1, memory_order_release);
    /* The sampler thread asks for a drain at its next wake (mem_profile_poll). */
    atomic_store(&M.drain_requested, 1);
    /* The block is followed from now on; its line's token replaces this one at
     * the drain (pyrometer_memhooks_retoken), or, freed before that, is charged
     * freed there. */
    return kind == MEMHOOKS_ALLOC ? (uintptr_t)mark : 0;
}

static uintptr_t on_sample(int kind, int64_t bytes, int64_t python_bytes, void *address)
{
    if (!callback_enter()) {
        return 0;
    }
    uintptr_t token = sample(kind, bytes, python_bytes, address);
    callback_leave();
    return token;
}

static int drain_as_pending_call(void *unused)
{
    (void)unused;
    mem_profile_drain();
    return 0;
}

void mem_profile_poll(void)
{
    if (M.active && atomic_exchange(&M.drain_requested, 0) &&
        Py_AddPendingCall(drain_as_pending_call, NULL) != 0) {
        atomic_store(&M.drain_requested, 1); /* the queue is full: at the next wake */
    }
}

/* The library saw a watched block freed (or gave its slot to a newer one, after
 * which its fate is unknown and its bytes stay live).  Runs on the freeing
 * thread, inside free(): atomics only. */
static void tell_freed(uintptr_t token, int evicted, int64_t bytes, int churn, int windowed)
{
    for (leak_site *site = (leak_site *)token; site != NULL; site = site->also) {
        if (evicted) {
            atomic_fetch_add(&site->evicted, 1);
            continue;
        }
        atomic_fetch_add(&site->freed, 1);
        atomic_fetch_add(&site->freed_bytes, (uint64_t)bytes);
        if (churn) {
            atomic_fetch_add(&site->churn_bytes, (uint64_t)bytes);
        }
        if (windowed != 0) {
            atomic_fetch_add(windowed == 1 ? &site->freed_window_bytes : &site->freed_python_window_bytes,
                             (uint64_t)bytes);
        }
    }
}

static void on_freed(uintptr_t token, int evicted, int64_t bytes, uint64_t born)
{
    int churn = !evicted && pyalloc_is_churn(born);
    int windowed = windowed_kind(pyalloc_born_python(born), (uint64_t)bytes);
    leak_site *site = (leak_site *)token;
    if (!evicted && site >= pending && site < pending + RING_SLOTS) {
        atomic_store_explicit(&pending_freed_ns[site - pending], clock_wall_ns(), memory_order_relaxed);
    }
    if (callback_enter()) {
        tell_freed(token, evicted, bytes, churn, windowed);
        callback_leave();
    }
}

static void drain_queue(void);
static void rewind_ring(void);

/* The nearest reported frame of a queued sample's stack.  Codes recorded with a
 * reference are alive; the others (taken without the GIL) only if the profiler
 * holds them already, their frame is still on the thread's stack, or they were
 * followed from the sample to now without being freed (code_life: a thread that
 * allocated and ended before this drain).  A code that may have been freed is
 * never touched. */
static PyCodeObject *locate_queued(const ring_slot *s, int *lasti, uint32_t *stack)
{
    *stack = STACKS_ROOT;
    PyThreadState *alive = NULL;
    if (!s->holds_refs) {
        for (PyThreadState *ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get()); ts != NULL;
             ts = PyThreadState_Next(ts)) {
            if (ts == s->ts && pyframe_thread_serial(ts) == s->thread_serial) {
                alive = ts;
                break;
            }
        }
    }
    PyCodeObject *found = NULL;
    stack_frame frames[STACK_DEPTH]; /* the call stack, innermost first */
    int depth = 0;
    for (int i = 0; i < s->depth; i++) {
        PyCodeObject *code = s->codes[i];
        if (!s->holds_refs && codes_find(code) == NULL && !code_life_alive(code) &&
            (alive == NULL || !pyframe_on_stack(alive, s->frames[i], code))) {
            continue;
        }
        const code_info *info = codes_lookup(code);
        if (info == NULL || !info->reported) {
            continue;
        }
        if (found == NULL) {
            found = code;
            *lasti = s->lastis[i];
            if (info->site == SITE_NONE) {
                return found; /* charged as unattributed: the empty stack */
            }
        }
        if (info->site != SITE_NONE) {
            frames[depth].site = info->site;
            frames[depth].lineno = codes_line_known(info, code, s->lastis[i]);
            depth++;
        }
    }
    /* A queued sample's stack is its reported frames among the STACK_DEPTH
     * innermost frames it kept: a deeper stack is cut at its root end (its
     * bytes stay whole, on a shorter path).  Samples are queued only by
     * threads without the GIL and by frames younger than the last snapshot. */
    stack_frame root_first[STACK_DEPTH];
    for (int i = 0; i < depth; i++) {
        root_first[i] = frames[depth - 1 - i];
    }
    *stack = stacks_intern(root_first, depth);
    return found;
}

void mem_profile_drain(void)
{
    if (!M.initialised) {
        return;
    }
    /* No garbage collection meanwhile (see csrc/sampler/snapshot.c, snapshot_in): a code object
     * known alive only by code_life may be a cycle's, and registering it
     * allocates. */
    int collecting = PyGC_Disable();
    /* What the drain allocates or copies (a table growing) is the profiler's:
     * counted, a copy sample could re-enter the table being grown. */
    memhooks_thread *self = M.api.thread != NULL ? M.api.thread() : NULL;
    if (self != NULL) {
        self->busy++;
    }
    drain_queue();
    if (M.active) {
        /* Frees take no samples: the footprint's timeline also gets a point at
         * every drain (every CPU snapshot), so that it shows memory going down
         * (after the queued samples, which are older). */
        note_footprint(clock_wall_ns(), SITE_NONE, -1, M.api.footprint());
    }
    if (self != NULL) {
        self->busy--;
    }
    if (collecting) {
        PyGC_Enable();
    }
}

/* The frees of queued samples' blocks, freed before the drain charged them,
 * told in time order among the samples' allocations: told right after its own
 * charge, the free of each of 40 blocks of 1 MiB allocated and freed before one
 * drain left the line's live bytes at 1 MiB for its peak.  A min-heap on the
 * free's time; the drain runs with the GIL, one at a time. */
typedef struct {
    uint64_t ns;
    uintptr_t token;
    int64_t bytes;
    int churn;
    int windowed; /* windowed_kind */
} deferred_free;

static deferred_free deferred[RING_SLOTS];
static size_t deferred_count;

static void defer_free(uint64_t ns, uintptr_t token, int64_t bytes, int churn, int windowed)
{
    size_t i = deferred_count++;
    while (i > 0 && deferred[(i - 1) / 2].ns > ns) {
        deferred[i] = deferred[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    deferred[i] = (deferred_free){ns, token, bytes, churn, windowed};
}

/* Tells the deferred frees made up to `until` (all of them: UINT64_MAX). */
static void tell_deferred(uint64_t until)
{
    while (deferred_count > 0 && deferred[0].ns <= until) {
        tell_freed(deferred[0].token, 0, deferred[0].bytes, deferred[0].churn, deferred[0].windowed);
        deferred_free last = deferred[--deferred_count];
        size_t i = 0;
        for (;;) {
            size_t child = 2 * i + 1;
            if (child >= deferred_count) {
                break;
            }
            if (child + 1 < deferred_count && deferred[child + 1].ns < deferred[child].ns) {
                child++;
            }
            if (deferred[child].ns >= last.ns) {
                break;
            }
            deferred[i] = deferred[child];
            i = child;
        }
        deferred[i] = last;
    }
}

static void drain_queue(void)
{
    for (;;) {
        uint64_t tail = atomic_load(&M.ring_tail);
        ring_slot *s = &ring[tail % RING_SLOTS];
        if (!atomic_load_explicit(&s->ready, memory_order_acquire)) {
            break;
        }
        leak_site *mark = &pending[s->mark];
        int watched_yet = 1;
        if (s->kind == MEMHOOKS_ALLOC && s->address != NULL && !final_drain &&
            atomic_load(&mark->freed) == 0 && atomic_load(&mark->evicted) == 0 &&
            !M.api.is_watched(s->address, (uintptr_t)mark)) {
            /* The allocating thread has queued the sample but not yet put its
             * block in the watch table (it does so right after): this sample,
             * and those after it, wait for the next drain. */
            watched_yet = 0;
        }
        if (!watched_yet) {
            break;
        }
        tell_deferred(s->t_ns); /* the frees made before this sample's allocation */
        int lasti = 0;
        uint32_t stack = STACKS_ROOT;
        /* Queued by an earlier run (a writer that finished after its last
         * drain): not this profile's. */
        PyCodeObject *code = tail >= M.ring_start ? locate_queued(s, &lasti, &stack) : NULL;
        uintptr_t token = tail >= M.ring_start
                              ? charge_line(code, lasti, stack, s->kind, s->bytes, s->python_bytes, s->t_ns,
                                            s->footprint)
                              : 0;
        if (s->kind == MEMHOOKS_ALLOC && token != 0 && s->address != NULL &&
            !M.api.retoken(s->address, (uintptr_t)mark, token)) {
            /* Freed, or evicted, before its line was known.  (A free whose
             * thread has taken the block out of the table but not yet told us
             * counts as freed, which it is.)  After the library stopped, its
             * table says nothing: only what the block's own token heard counts. */
            int freed = atomic_load(&mark->freed) != 0;
            int evicted = atomic_load(&mark->evicted) != 0 && !freed;
            uint64_t freed_ns = atomic_load_explicit(&pending_freed_ns[s->mark], memory_order_relaxed);
            int churn = atomic_load(&mark->churn_bytes) != 0;
            int windowed = windowed_kind(s->python_bytes > 0, (uint64_t)s->bytes);
            if (freed && freed_ns != 0 && deferred_count < RING_SLOTS) {
                defer_free(freed_ns, token, s->bytes, churn, windowed);
            } else if (!final_drain || freed || evicted) {
                tell_freed(token, evicted, s->bytes, churn, windowed);
            }
        }
        if (s->holds_refs) {
            for (int i = 0; i < s->depth; i++) {
                Py_DECREF(s->codes[i]);
            }
        }
        atomic_store_explicit(&s->ready, 0, memory_order_relaxed);
        atomic_store_explicit(&M.ring_tail, tail + 1, memory_order_release);
    }
    tell_deferred(UINT64_MAX);
    code_life_forget(atomic_load(&M.ring_tail));
    rewind_ring();
}

/* GIL held, after a drain: an empty ring's next sample goes into its first
 * slot (see RING_SLOTS).  The tail moves first (a writer's check of a full
 * ring is signed), then the head, unless a writer claimed the slot at the
 * tail meanwhile: the tail then goes back to it. */
static void rewind_ring(void)
{
    uint64_t tail = atomic_load(&M.ring_tail);
    uint64_t first = tail + (RING_SLOTS - tail % RING_SLOTS) % RING_SLOTS;
    if (first == tail || atomic_load(&M.ring_head) != tail) {
        return;
    }
    atomic_store(&M.ring_tail, first);
    uint64_t expected = tail;
    if (!atomic_compare_exchange_strong(&M.ring_head, &expected, first)) {
        atomic_store(&M.ring_tail, tail);
    }
}

/* A forked child stops the parent's memory profile: its samples would charge
 * lines of the parent's profile.  A child that is profiled starts a fresh one
 * (reset, then start: see mem_profile_release).  The threads that were inside
 * a callback at the fork do not exist here: the count forgets them, or release
 * would wait for them.  Only atomics are touched here. */
static void stop_in_child(void)
{
    atomic_store(&M.in_callback, 0);
    if (M.active) {
        M.active = 0;
        M.api.stop();
        code_life_stop();
    }
}

/* Samples queued and not drained when profiling stopped belong to the profile
 * that ended: dropped, with the references they hold.  A slot claimed and
 * never filled (its thread was inside a callback at a fork, and is gone in the
 * child) would otherwise stop every later drain.  GIL held; no callback inside
 * (callbacks_quiet). */
static void discard_queue(void)
{
    uint64_t head = atomic_load(&M.ring_head);
    for (uint64_t tail = atomic_load(&M.ring_tail); tail != head; tail++) {
        ring_slot *s = &ring[tail % RING_SLOTS];
        if (atomic_load_explicit(&s->ready, memory_order_acquire) && s->holds_refs) {
            for (int i = 0; i < s->depth; i++) {
                Py_DECREF(s->codes[i]);
            }
        }
        atomic_store_explicit(&s->ready, 0, memory_order_relaxed);
    }
    atomic_store(&M.ring_tail, head);
}

/* Python's blocks are sampled every 64 KiB on average (or at the window, when
 * that is smaller), native blocks at the window (1 MiB by default).  A line of
 * Python's small objects (a dict, parsed JSON) is estimated from the count of
 * its samples, whose error is sqrt(bytes x window): at 1 MiB, 20 MiB of them
 * read 18-37 MB in five runs of the same program (about 20 samples, 22% of
 * deviation); at 64 KiB, some 320 samples, 5.6%.  Native lines are mostly
 * large blocks, each its own exact sample, and their samples cost more (a
 * thread-local countdown, any thread, often without the GIL: queued). */
#ifndef PYTHON_WINDOW_MAX /* overridden only to measure its cost */
#define PYTHON_WINDOW_MAX (64 * 1024)
#endif

static int64_t python_window_for(int64_t window_bytes)
{
    return window_bytes < PYTHON_WINDOW_MAX ? window_bytes : PYTHON_WINDOW_MAX;
}

int mem_profile_start(int64_t window_bytes, int leak_detector)
{
    static int atfork_registered;
    if (!atfork_registered) {
        if (pthread_atfork(NULL, NULL, stop_in_child) != 0) {
            PyErr_SetString(PyExc_OSError, "cannot register the fork handler");
            return -1;
        }
        atfork_registered = 1;
    }
    if (M.active) {
        PyErr_SetString(PyExc_RuntimeError, "memory profiling is already running");
        return -1;
    }
    memhooks_api api;
    if (memhooks_api_find(&api) != 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "memory profiling needs libpyrometer_memhooks.so preloaded "
                        "(run the program through the pyrometer command)");
        return -1;
    }
    if (!M.initialised) {
        arena_init(&M.mem);
        if (table_init(&M.lines, sizeof(mem_line), 1024) != 0 || table_init(&M.stacks, sizeof(mem_stack), 1024) != 0 ||
            (M.footprint = series_new(RUN_POINTS)) == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        M.max_site = SITE_NONE;
        M.footprint_base = api.footprint != NULL ? api.footprint() : 0;
        M.initialised = 1;
    }
    if (codes_init() != 0) {
        return -1;
    }
    if (stacks_init() != 0) {
        PyErr_NoMemory();
        return -1;
    }
    M.api = api;
    M.interp = PyInterpreterState_Get();
    M.window = window_bytes;
    M.python_window = python_window_for(window_bytes);
    M.leak_detector = leak_detector;
    M.start_ns = clock_wall_ns();
    M.ring_start = atomic_load(&M.ring_head);
    atomic_store(&M.accepting, 1);
    M.python_sizing = pyalloc_install(&api, window_bytes, M.python_window);
    if (M.python_sizing != PYALLOC_NOT_SIZED) {
        code_life_start(&api); /* code objects' frees are seen: see code_life.h */
    }
    M.active = 1;
    memhooks_config config = {window_bytes, window_bytes, on_sample, on_freed};
    if (api.start(&config) != 0) {
        M.active = 0;
        code_life_stop();
        pyalloc_uninstall();
        PyErr_SetString(PyExc_RuntimeError, "the memory hooks refused to start");
        return -1;
    }
    return 0;
}

void mem_profile_stop(void)
{
    if (!M.active) {
        return;
    }
    mem_profile_drain(); /* while the watch table still tells freed blocks from live ones */
    M.api.stop();
    pyalloc_uninstall();
    final_drain = 1;
    mem_profile_drain(); /* the GIL held since the library stopped: no code freed meanwhile */
    final_drain = 0;
    code_life_stop();
    M.active = 0;
}

int mem_profile_active(void)
{
    return M.active;
}

uint32_t mem_series_count(const mem_series *s)
{
    return s != NULL ? s->count : 0;
}

void mem_series_point(const mem_series *s, uint32_t i, double *t_sec, double *mb)
{
    *t_sec = (double)s->t_ns[i] * 1e-9;
    *mb = s->mb[i];
}

int mem_profile_collect_begin(void)
{
    if (!M.initialised) {
        return 0;
    }
    mem_profile_drain();
    return 1;
}

int mem_profile_next_line(size_t *cursor, mem_line_record *out)
{
    table_key key;
    mem_line *m;
    while ((m = table_next(&M.lines, cursor, &key)) != NULL) {
        if (m->fate == NULL || sites_get((uint32_t)key.k1) == NULL) {
            continue; /* out of memory when the line was made: nothing was charged */
        }
        const leak_site *fate = m->fate;
        *out = (mem_line_record){
            .site = (uint32_t)key.k1,
            .lineno = (int)(int64_t)key.k2,
            .alloc_bytes = m->alloc_bytes,
            .python_bytes = m->python_bytes,
            .free_bytes = atomic_load(&fate->freed_bytes),
            .churn_bytes = atomic_load(&fate->churn_bytes),
            .copy_bytes = m->copy_bytes,
            .window_sampled_bytes = m->window_bytes,
            .python_window_sampled_bytes = m->python_window_bytes,
            .freed_window_sampled_bytes = atomic_load(&fate->freed_window_bytes),
            .freed_python_window_sampled_bytes = atomic_load(&fate->freed_python_window_bytes),
            .alloc_samples = m->alloc_samples,
            .free_samples = atomic_load(&fate->freed),
            .copy_samples = m->copy_samples,
            .net_bytes = live_bytes(m),
            /* An estimate from samples: never above the process's measured peak. */
            .peak_bytes = M.max_footprint > 0 && m->peak > M.max_footprint ? M.max_footprint : m->peak,
            .watched = atomic_load(&fate->watched),
            .watched_freed = atomic_load(&fate->freed),
            .watched_evicted = atomic_load(&fate->evicted),
            .timeline = m->timeline,
        };
        return 1;
    }
    return 0;
}

int mem_profile_next_stack(size_t *cursor, mem_stack_record *out)
{
    table_key key;
    mem_stack *ms = table_next(&M.stacks, cursor, &key);
    if (ms == NULL) {
        return 0;
    }
    *out = (mem_stack_record){key.k1, ms->alloc_bytes, ms->python_bytes, atomic_load(&ms->fate->freed_bytes),
                              ms->copy_bytes, atomic_load(&ms->fate->churn_bytes)};
    return 1;
}

void mem_profile_other_stacks(mem_stack_record *out)
{
    /* Their frees and churn were told to each line's other_fate. */
    uint64_t freed = 0, churn = 0;
    size_t cursor = 0;
    table_key key;
    mem_line *m;
    while ((m = table_next(&M.lines, &cursor, &key)) != NULL) {
        if (m->other_fate != NULL) {
            freed += atomic_load(&m->other_fate->freed_bytes);
            churn += atomic_load(&m->other_fate->churn_bytes);
        }
    }
    *out = (mem_stack_record){0, M.other_alloc, M.other_python, freed, M.other_copy, churn};
}

void mem_profile_run(mem_run_record *out)
{
    *out = (mem_run_record){
        .max_footprint_bytes = M.max_footprint,
        .footprint_bytes = M.api.footprint ? M.api.footprint() - M.footprint_base : 0,
        .window_bytes = M.window,
        .python_window_bytes = M.python_window,
        .max_footprint_time_sec = (double)M.max_t_ns * 1e-9,
        .max_footprint_site = M.max_site,
        .max_footprint_lineno = M.max_lineno,
        .unattributed_alloc_bytes = M.unattributed_alloc,
        .unattributed_python_bytes = M.unattributed_python,
        .unattributed_free_bytes = atomic_load(&M.unattributed_site.freed_bytes),
        .unattributed_churn_bytes = atomic_load(&M.unattributed_site.churn_bytes),
        .unattributed_copy_bytes = M.unattributed_copy,
        .native_thread_alloc_bytes = atomic_load(&M.native_thread_alloc),
        .native_thread_free_bytes = atomic_load(&M.native_thread_site.freed_bytes),
        .native_thread_copy_bytes = atomic_load(&M.native_thread_copy),
        .dropped_samples = atomic_load(&M.dropped),
        .dropped_bytes = atomic_load(&M.dropped_bytes),
        .queued_samples = atomic_load(&M.queued),
        .python_memory_profiled = M.python_sizing != PYALLOC_NOT_SIZED,
        .leak_detector = M.leak_detector,
        .python_allocator = pyalloc_allocator_name(),
        .python_memory_why = pyalloc_not_sized_why(),
        .footprint = M.footprint,
    };
}

size_t mem_profile_memory_bytes(void)
{
    return sizeof ring + sizeof pending +
           (M.initialised ? table_memory_bytes(&M.lines) + table_memory_bytes(&M.stacks) + M.mem.bytes_mapped : 0);
}

/* Waits (up to about a second) until no callback is inside: 1 when none is. */
static int callbacks_quiet(void)
{
    atomic_store(&M.accepting, 0);
    for (int i = 0; i < 1000 && atomic_load(&M.in_callback) != 0; i++) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    return atomic_load(&M.in_callback) == 0;
}

void mem_profile_release(void)
{
    if (M.active || !M.initialised) {
        return;
    }
    /* A forked child stopped in stop_in_child, where the Python allocators
     * could not be put back: here they are, so that a fresh start wraps the
     * originals and counts from zero. */
    pyalloc_uninstall();
    if (callbacks_quiet()) {
        discard_queue();
        table_release(&M.lines);
        table_release(&M.stacks);
        arena_release(&M.mem);
    } /* else a callback is stuck inside (a stopped thread): its memory is left mapped */
    M.initialised = 0;
    M.footprint = NULL;
    M.max_footprint = 0;
    M.max_site = SITE_NONE;
    M.unattributed_alloc = M.unattributed_python = M.unattributed_copy = 0;
    M.other_alloc = M.other_python = M.other_copy = 0;
    atomic_store(&M.native_thread_alloc, 0);
    leak_site none = {0};
    M.unattributed_site = none; /* not active: no free reaches them now */
    M.native_thread_site = none;
    atomic_store(&M.native_thread_copy, 0);
    atomic_store(&M.dropped, 0);
    atomic_store(&M.dropped_bytes, 0);
    atomic_store(&M.queued, 0);
}

/* The profiler's own work on a thread that holds the GIL (a periodic report):
 * nothing it allocates, frees or copies is counted.  The thread's native counting
 * is suspended, and Python's process-wide count is put back as it was, so blocks
 * made and dropped inside are never seen.  The work must not release the GIL
 * (another thread's Python allocations would be put back too). */
static pyalloc_counts paused_counts; /* one pause at a time (GIL held throughout) */
static int pause_depth;              /* pauses nest: only the outermost saves and restores */

int64_t mem_profile_pause(void)
{
    if (!M.active) {
        return 0;
    }
    M.api.thread()->busy++;
    if (pause_depth++ == 0) {
        pyalloc_save_counts(&paused_counts);
    }
    return 1;
}

void mem_profile_resume(int64_t paused)
{
    if (!M.active || !paused) {
        return;
    }
    if (--pause_depth == 0) {
        pyalloc_restore_counts(&paused_counts);
    }
    M.api.thread()->busy--;
}
