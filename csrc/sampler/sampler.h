/* sampler: CPU time per thread and per line, measured from inside the process.
 *
 * A sampler thread (plain C, no signals) wakes at exponentially distributed
 * intervals and asks the main thread, through Py_AddPendingCall, to take a
 * snapshot at its next bytecode boundary.  The snapshot reads every thread's frames
 * with the GIL held and each thread's own CPU clock, and charges the window since
 * that thread's previous snapshot to the nearest reported line on its stack.
 * How long the main thread took to answer is how long it spent inside native code:
 * that delay, measured on both ends, is what tells native time from Python time.
 * When the main thread cannot answer (blocked in join(), a read, a GIL-free
 * native call) the sampler thread takes the GIL itself and snapshots all threads.
 * See docs/how-it-works.md for the accounting rules and why no signals are used.
 */
#ifndef PYROMETER_SAMPLER_H
#define PYROMETER_SAMPLER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "../profile/line_stats.h"

typedef struct {
    uint64_t interval_ns; /* mean time between samples */
    int virtual_time;     /* count CPU time only: no system (off-CPU) time */
} sampler_options;

/* How the sampler thread peeks at the main thread between snapshots (spread.c),
 * set by sampler_start from the interval and, for the benchmark that chose
 * them (bench/precision.py), the environment variable PYROMETER_SAMPLER
 * ("peeks=N,spacing=jittered|exponential|regular,longest=N"). */
enum peek_spacing { SPACING_JITTERED, SPACING_EXPONENTIAL, SPACING_REGULAR };
typedef struct {
    uint64_t period_ns; /* one peek a period; 0: none (each window charged by its look at t0) */
    int spacing;        /* enum peek_spacing */
    uint64_t longest;   /* the most periods one peek stands for (spread.c, SPREAD_LONGEST) */
} sampler_peeks;

typedef struct {
    uint64_t start_wall_ns, stop_wall_ns;
    uint64_t paused_ns;          /* wall time paused (control.h), monotonic clock */
    uint64_t paused_at_end_ns;   /* of which the pause still on when the run stopped (or now) */
    uint64_t process_cpu_at_pause_ns; /* with that pause: the process's CPU up to it (as process_cpu_ns) */
    uint64_t snapshots;          /* samples taken */
    uint64_t main_snapshots;     /* of which answered by the main thread */
    uint64_t threads_seen;       /* distinct Python threads sampled */
    uint64_t process_cpu_ns;     /* CPU of the whole process over the run */
    uint64_t sampler_cpu_ns;     /* CPU the sampler thread itself used, and the profiler's other threads */
    uint64_t untracked_native_ns;/* CPU of threads without Python state, charged as native */
    double mean_interval_ns;     /* achieved time between samples */
    /* The main thread's spreads (runs of windows divided among their peeks,
     * spread.c), and the peeks they were divided among. */
    uint64_t spreads, spread_peeks;
    long n_cpus;                 /* CPUs online, as the run's shares of them were computed */
    double unit_ns;              /* length of one estimated unit (see cpu_sums) */
    /* What one estimated unit's share of each kind stands for (sampler_units):
     * on CPU, off CPU (system or GIL wait), on the run queue. */
    double unit_cpu_ns, unit_off_ns, unit_runq_ns;
    uint64_t main_live_ns;       /* measured main-thread time before its requests */
    uint64_t main_live_units;    /* requests it answered: the estimated units */
    /* The same time by kind, measured, and the estimated units' shares of each
     * kind summed over the requests. */
    uint64_t main_live_cpu_ns, main_live_off_ns, main_live_runq_ns;
    double est_cpu_units, est_off_units, est_runq_units;
    uint64_t memory_bytes;       /* the sampler's own bookkeeping */
    uint64_t periodic_cpu_ns;    /* main-thread CPU spent on periodic reports (left out) */
    cpu_sums unattributed;       /* threads with no reported frame on their stack */
} sampler_totals;

/* Called with the GIL held, on the main thread.  0, or -1 with an exception set. */
int sampler_start(const sampler_options *options);
/* GIL held, before the run's collectors stop: the windows still open (each
 * thread's time since its last snapshot) charged as a snapshot charges them,
 * the main thread's over the peeks made in it before asked_ns (monotonic, when
 * the stop was asked for; 0: now).  Those after it found the stop's own path,
 * whose Python frames are pyrometer's and so are located at the line that
 * called it: in process (pyrometer.profile_this, the pytest plugin), that line
 * got time.  Without this snapshot the run's last window was dropped: a
 * program's last 10 ms line read 0-9.5 ms (0 in 5 runs of 8), and the lines'
 * times fell short of the run's by up to an interval.  Not while paused (a
 * pause charged its windows already). */
void sampler_charge_last_window(uint64_t asked_ns);
/* Stops the sampler thread and joins it; GIL held (released while joining).
 * keep_thread: the thread is parked instead, and the next sampler_start in
 * this process wakes it (pytest --pyrometer starts once per test); a fork
 * ends it first, as sampler_end_kept_thread does. */
void sampler_stop(int keep_thread);
void sampler_end_kept_thread(void);
int sampler_running(void);
/* GIL held: pauses or resumes to match control_wanted() (control.h), charging
 * what ran up to a pause and nothing of the pause itself. */
void sampler_apply_control(void);
void sampler_get_totals(sampler_totals *out);
/* GIL held, on a thread starting another, at the start's audit event, before
 * the new thread's state is made: where the calling thread stands in the
 * program is where the started thread's CPU goes while it runs no code of the
 * program, and the thread's first window begins now (origins.c). */
void sampler_thread_starting(void);
/* Per-thread bookkeeping and counters; the line records stay in line_stats. */
void sampler_release(void);

/* What the sampler does for the other collectors, which the Python boundary
 * (module.c) registers once, so that the sampler includes none of their
 * headers and they none of its.  Any function may be NULL. */
typedef struct {
    /* On the sampler thread at each wake, without the GIL (memory: asks for a
     * drain when samples were queued). */
    void (*on_wake)(void);
    /* GIL held, at each snapshot, before its threads are charged: work the
     * client queued where it could not be done (memory samples of threads
     * without the GIL, GPU launches whose line was not read). */
    void (*on_snapshot)(void);
    /* Around the sampler's own work on the calling thread, GIL held (a
     * snapshot registers code objects, which allocates): nothing allocated
     * between them is the program's.  Nested pieces end in reverse order. */
    void (*own_work_begin)(void);
    void (*own_work_end)(void);
} sampler_client;
#define SAMPLER_CLIENTS 4
/* 0, or -1 when SAMPLER_CLIENTS are registered already.  Before the first
 * sampler_start; never removed. */
int sampler_add_client(const sampler_client *client);

/* What the sampler asks of the asyncio collector (awaits.h), registered by
 * module.c in the same way.  Unregistered (or with a NULL function), no
 * program is taken to use asyncio. */
typedef struct {
    /* GIL held, at each snapshot: whether the program uses asyncio now. */
    int (*snapshot_begin)(void);
    /* GIL held: whether the event loop of the thread of ts is waiting for its
     * selector (the thread is idle, not running a task). */
    int (*loop_waiting)(PyThreadState *ts);
    /* GIL held: the same, of the codes a peek saw, innermost first (n of
     * them; a stack cut short reads as not waiting). */
    int (*loop_waiting_at)(const uintptr_t *codes, int n);
    /* GIL held, at the end of a snapshot of window_ns: each suspended task's
     * await time to its awaiting line (what finds none, to unattributed). */
    void (*charge)(uint64_t window_ns, cpu_sums *unattributed);
} sampler_awaits;
void sampler_set_awaits(const sampler_awaits *awaits);

#endif
