/* The sampler's own header, for its files only (the rest of the extension sees
 * sampler.h): the kinds of things a snapshot handles (a location, a thread's
 * track, a peek at a thread, a stored look), the one state of the sampler, and
 * the functions its rooms call across.  The rooms, in the order a sample goes
 * through them:
 *  - sampler.c: the sampler thread, its schedule, requests and the commands
 *    and forks it lives through; start, stop and the totals;
 *  - look.c: where the main thread and the others stand, read without the GIL
 *    (peeks at a request, the second looks while it waits);
 *  - snapshot.c: one snapshot, with the GIL: the window since the last one,
 *    each thread's share of it, and which rule charges it;
 *  - charge.c: the rules that charge a window to a line (the main thread's
 *    answer or its time away, another thread's peek, CPU held until a thread
 *    is seen running);
 *  - locate.c: which line a thread's time goes to, from its frames and what
 *    the looks saw;
 *  - tracks.c: each thread's track between snapshots (its clocks, its
 *    run-queue wait from schedstat), and forgetting the tracks of threads gone.
 */
#ifndef PYROMETER_SAMPLER_STATE_H
#define PYROMETER_SAMPLER_STATE_H

#include "sampler.h"
#include "thread_wait.h"
#include "../common/table.h"
#include "../cpython/pyframe.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

/* The main thread reaches a bytecode boundary within microseconds while it runs
 * Python (the eval loop checks for pending calls at every call and loop back-edge).
 * Answering later than this means it was inside one call into C the whole time:
 * an instruction that is not a call (numpy's a + b is a BINARY_OP) but runs native
 * code that long. */
#define NATIVE_DELAY_NS 100000ULL

/* Where the main thread stood when the request was made (t0), read by the
 * sampler thread (pyframe_peek): in a call into native code, running
 * bytecode, or not known (the read failed; then the answer's delay decides). */
enum standing { STANDING_UNKNOWN, STANDING_PYTHON, STANDING_IN_CALL };

enum snapshot_source { ANSWERED_BY_MAIN, TAKEN_BY_SAMPLER };

/* What a snapshot does with the windows it closes (pause and resume, control.h):
 *  - CHARGE: charges them, as always (with a command_time: the run's stop,
 *    asked for then; the main thread's peeks after it are the stop's, not
 *    the program's: sampler_charge_last_window);
 *  - PAUSE: charges them; the main thread's, for the program's own pause, over
 *    the peeks made before it (not to where the pause finds it: pyrometer.stop(),
 *    the line that calls it), and for a pause from outside as if answered when
 *    the command came (charge_main_answer), or not at all without a request
 *    made before it;
 *  - REBASE: charges nothing and starts every window afresh: the time since the
 *    pause, which no sample may see. */
enum snapshot_mode { SNAPSHOT_CHARGE, SNAPSHOT_PAUSE, SNAPSHOT_REBASE };

/* When a command from outside came, and the main thread's clocks then (read by
 * the signal handler, control.h).  The command is acted on once the GIL is had,
 * which a main thread in a long native call holding it gives up only when the
 * call returns: the pause or resume is placed at this moment, not then, so the
 * call's time on either side goes where it belongs. */
typedef struct {
    uint64_t wall_ns;
    uint64_t main_cpu_ns;  /* CLOCK_UNAVAILABLE: not read */
    uint64_t main_runq_ns; /* CLOCK_UNAVAILABLE: not read */
} command_time;

/* Where a thread's time goes: the nearest reported frame on its stack, and the
 * kind of what it runs.  The kind is decided at the innermost frame, reported or
 * not, so time in the standard library keeps its kind when it is charged to the
 * user's line.  site is SITE_NONE when no reported frame is on the stack.  A
 * location holds the key, not the record: records move when the table grows. */
typedef struct {
    uint32_t site; /* SITE_NONE: no reported frame */
    int lineno;
    int native;
    int ok; /* 0 when memory ran out: the time is dropped */
    int loop_idle; /* in an asyncio event loop's own code: its time off CPU is the loop's idle time */
    uint32_t stack; /* the call stack ending at the line (stacks.h); STACKS_ROOT with no reported frame */
} location;

typedef struct {
    uint64_t last_wall_ns;
    uint64_t last_cpu_ns;
    uint64_t seen_in; /* serial of the last snapshot that met the thread */
    uint64_t cpu_at_pause; /* its CPU clock when the sampler stopped for a fork */
    uint64_t last_runq_ns; /* its run-queue wait when last accounted */
    int schedstat;         /* its /proc/self/task/<tid>/schedstat fd + 1; 0: not open yet,
                            * -1: unavailable (zero, as a new track is, means not open) */
    pid_t tid;
    /* Where the thread was last seen running bytecode at a request (see
     * charge_other_thread), and in which snapshot; serial 0: never. */
    uint64_t running_serial;
    /* The snapshot that last chose it to be peeked (choose_peek); 0: never.
     * passed_over: it used CPU in the last snapshot's window but other threads
     * took the peeks (more than PEEK_THREADS ran). */
    uint64_t peek_serial;
    int passed_over;
    /* CPU the thread used while it was found parked and had not been seen
     * running for a while (or ever): held until it is, and charged there
     * (place_held), or where it last parked once it has been held
     * running_fresh() snapshots or the thread is gone.  busy: the core
     * utilization weight that goes with it (cpu_sums_add_cpu). */
    uint64_t held_ns;
    double held_busy_ns;
    uint64_t held_serial; /* the snapshot that began holding it */
    location held_at;
    location running;
    /* What its peeks last found it blocked in: THREAD_STATE_ON_SPAN (the
     * GIL) or THREAD_STATE_BLOCKED (anything else); 0 (THREAD_STATE_RUNNING):
     * never found blocked. */
    int last_block;
    /* Where its last window's CPU went (charge_other_thread), with the kind
     * it went as; ok 0: none yet. */
    location cpu_at;
    /* Its CPU clock as it ended, when, and its run-queue wait then (ends.c);
     * ended_cpu_ns 0: not ended, or charged. */
    uint64_t ended_cpu_ns;
    uint64_t ended_wall_ns;
    uint64_t ended_runq_ns;
} thread_track;

/* Threads other than the main one whose position is read with the request's
 * (pyframe_peek, a few system calls each): PEEK_THREADS of those that used CPU
 * in the last snapshot's window, the ones that waited longest for a peek
 * (choose_peek), and one more slot for the thread that holds the GIL at the
 * request, the one running bytecode then, when it is none of them. */
#define PEEK_THREADS 8
#define PEEK_SLOTS (PEEK_THREADS + 1)

typedef struct {
    uintptr_t ts; /* the thread state peeked; 0: none */
    pyframe_peeked at;
    /* Whether it slept waiting for the GIL then (thread_wait.h), whatever its
     * position: THREAD_WAIT_IN_SPAN, _ELSEWHERE (the holder among them) or
     * _UNKNOWN. */
    int gil_wait;
    /* What /proc said of it then (THREAD_STATE_*, thread_wait.h); the holder
     * THREAD_STATE_RUNNING. */
    int state;
    int held_gil; /* it held the GIL then */
    /* Whether its CPU clock moved while its position was read: 1 on a CPU, 0
     * off (preempted, waiting for a CPU where it stood), -1 not read (only the
     * holder's is, when its id is known). */
    int on_cpu;
} thread_peek;

/* Where the main thread stood at one look by the sampler thread (pyframe_peek):
 * its standing (enum standing), its innermost frame, code and instruction, and
 * its callers' (entry 0 the innermost; frame 0: not read).  Each field atomic:
 * written by the sampler thread without the GIL, read by the thread answering
 * (store_look, load_look). */
typedef struct {
    atomic_int standing;
    _Atomic uintptr_t frame[1 + PYFRAME_PEEK_CALLERS], code[1 + PYFRAME_PEEK_CALLERS];
    atomic_int lasti[1 + PYFRAME_PEEK_CALLERS];
} stored_look;

/* Set on the sampler thread while it takes a snapshot itself (its own peeks). */
extern _Thread_local int sampler_taking_over;

typedef struct {
    atomic_int running;         /* the sampler thread keeps going while set */
    atomic_int request_pending; /* a snapshot request waits for the main thread */
    _Atomic uint64_t request_wall_ns;     /* when the request was made (t0) */
    _Atomic uint64_t request_main_cpu_ns; /* the main thread's CPU clock at t0 */
    _Atomic uint64_t request_main_runq_ns; /* its run-queue wait at t0 (schedstat) */
    int main_schedstat_fd;                 /* the main thread's schedstat, for the sampler thread */
    /* Whether the main thread slept on the GIL at t0 (thread_wait.h), read
     * through main_wait (the sampler thread's alone, at t0 and at the looks
     * that find it moved). */
    atomic_int request_main_gil_wait;
    thread_wait_file main_wait;
    /* Where the main thread stood at t0, whose line the answer charges when
     * the frame is still there or has returned into one of them. */
    stored_look request_at;
    /* The latest look, while the request waits, that found the main thread
     * somewhere else than the look before it (t0's or an earlier such one:
     * second_look): where, and when on both of its clocks; moved_wall_ns 0:
     * none yet (the next request clears it before it is made).  Written by the
     * sampler thread under moved_seq, odd while it writes (moved_on_before). */
    atomic_uint moved_seq;
    stored_look moved_at;
    _Atomic uint64_t moved_wall_ns;
    _Atomic uint64_t moved_main_cpu_ns;
    atomic_int moved_gil_wait; /* asleep on the GIL at that look (thread_wait.h) */
    /* The sampler thread's own: when its last look (or t0) found the thread
     * where the look before it had, on both clocks. */
    uint64_t still_wall_ns, still_main_cpu_ns;
    /* The other threads' states to peek at (written by snapshots, GIL held; read
     * by the sampler thread without it: each entry atomic, a stale or torn list
     * costs only a peek of no use), and where they stood: at the request (read
     * by the main thread's answer while the request is pending, the only time
     * the sampler thread leaves them alone) and before the sampler thread takes
     * the GIL itself (its own). */
    _Atomic uintptr_t peek_list[PEEK_THREADS];
    _Atomic pid_t peek_tid[PEEK_THREADS]; /* each one's kernel id */
    thread_wait_file peek_waits[PEEK_THREADS]; /* the sampler thread's alone */
    uintptr_t gil_start; /* pyframe_gil_span */
    size_t gil_size;
    int busy_threads; /* threads other than the main one that used CPU in the last window */
    int holding;      /* some thread track may hold CPU (hold) */
    thread_peek request_peeks[PEEK_SLOTS];
    thread_peek takeover_peeks[PEEK_SLOTS];
    int peek_available;                   /* safe_read works here */
    pid_t main_tid;
    atomic_int sampler_tid;
    pthread_t thread;
    int thread_started;
    int active;             /* between sampler_start and sampler_stop, thread or not */
    int suspended_for_fork; /* stopped for a fork, to start again in the parent */
    int joining;            /* a thread waits (GIL released) for the sampler thread to end or park */
    int thread_kept;        /* the thread waits, parked, for the next start (sampler_stop(1)) */
    int fork_guarded;       /* stop_for_fork is registered with forks.c */
    atomic_int main_reporting; /* the main thread makes a periodic report (GIL released while sending) */

    /* Everything below is touched only with the GIL held. */
    /* Where each thread was started from in the program (origins.c, keyed by
     * thread serial): the line that started a thread that runs no code of
     * the program (a library's pool) gets its CPU; and when its start began,
     * where its first window begins (snapshot_thread). */
    table origins;
    int ended_threads; /* tracks with an ended_cpu_ns to charge (ends.c) */
    sampler_options options;
    sampler_peeks peeks; /* the main thread's peeks between snapshots (spread.c) */
    PyInterpreterState *interp;
    PyThreadState *main_ts;
    PyThreadState *sampler_ts;
    pid_t owner_pid;
    long n_cpus;
    table threads; /* thread serial -> thread_track */
    uint64_t serial;
    int gil_alone; /* this snapshot found one Python thread of the program (cpu_window) */
    uint64_t last_wall_ns, last_process_cpu_ns, last_sampler_cpu_ns;
    uint64_t pause_wall_ns, pause_process_cpu_ns; /* when it stopped for a fork */
    uint64_t earlier_samplers_cpu_ns; /* CPU of sampler threads ended by forks */
    uint64_t sampler_cpu_base_ns;     /* a kept thread's CPU clock when this run started */
    int64_t untracked_carry; /* signed: clock-reading noise cancels out over windows */
    int paused;              /* profiling paused (control.h); GIL held */
    int closed;              /* the run's last window charged: no snapshot after it; GIL held */
    uint64_t paused_since_ns;
    uint64_t process_cpu_at_pause_ns; /* the process CPU clock when the pause began */
    sampler_totals totals;
    /* The profiler's helper threads' CPU (clock_helpers_cpu_ns) at start and
     * at the last snapshot. */
    uint64_t helper_cpu_at_start_ns, last_helper_cpu_ns;
} sampler_state;

/* The one sampler of the process (sampler.c). */
extern sampler_state sampler;

static inline uint64_t delta(uint64_t now, uint64_t before)
{
    return now > before ? now - before : 0;
}

/* locate.c */
pyframe_position peeked_position(const pyframe_peeked *at, int i);
location locate(PyThreadState *ts, int native_by_delay, uint64_t delay_ns, uint64_t delay_cpu_ns,
                int standing, const pyframe_peeked *at);
location locate_peek(PyThreadState *ts, int standing, const pyframe_peeked *at, int *unmet);

/* charge.c */
void charge(const location *loc, uint64_t wall_ns, uint64_t cpu_ns, uint64_t runq_ns, double core_fraction);
void charge_cpu(const location *loc, uint64_t ns, int native, double core_fraction);
/* As charge, without the sampling variance of a window charged whole: the
 * spread peeks add their own (charge_variance); parts: what the line got
 * (CPU_VARS), added to. */
void charge_quiet(const location *loc, uint64_t wall_ns, uint64_t cpu_ns, uint64_t runq_ns, double core_fraction,
                  double parts[CPU_VARS]);
void charge_variance(const location *loc, const double var[CPU_VARS]);
void place_held(thread_track *t, const location *loc);
void place_held_of_gone(int all);
/* The program's line that started ts (origins.c), or NULL. */
const location *thread_origin(PyThreadState *ts);
/* When its start began (clock_wall_ns), or 0 when not noted; asked once, at
 * the thread's first snapshot (a note with no origin is dropped then). */
uint64_t thread_begun_ns(PyThreadState *ts);
/* ends.c: GIL held, a thread other than the main one and the sampler's: its
 * CPU clock is read as it ends (thread_track.ended_cpu_ns). */
void thread_end_watch(PyThreadState *ts);
/* The CPU an ended thread used since its last snapshot (charge.c): 1, or 0
 * when it has no place for it. */
int charge_ended_thread(thread_track *t, uint64_t used, uint64_t runq, double core_fraction);
void release_origins(void);
location charge_other_thread(PyThreadState *ts, thread_track *t, const thread_peek *peek, int passed_over,
                             uint64_t wall, uint64_t used, uint64_t runq, double core_fraction);
location charge_main_answer(PyThreadState *ts, thread_track *t, uint64_t now, uint64_t cpu,
                            uint64_t runq_before, uint64_t runq_now, double core_fraction);
location charge_main_away(PyThreadState *ts, uint64_t cpu, uint64_t wall, uint64_t used, uint64_t runq,
                          double core_fraction);

/* spread.c */
/* The most periods one peek stands for (spread.c, SPREAD_LONGER_AFTER). */
#define SPREAD_LONGEST 8
/* A peek standing for `periods` periods of the grid; the periods the next
 * one stands for (sampler.c, next_peek). */
uint64_t spread_peek(uint64_t periods);
void spread_reset(void);
void spread_drop_until(uint64_t until);
void spread_flush(double core_fraction, location *where);
int charge_main_spread(PyThreadState *ts, const thread_track *t, uint64_t until, uint64_t wall, uint64_t used,
                       uint64_t runq, double core_fraction, const pyframe_position *long_op, uint64_t long_op_t0,
                       location *where);

/* tracks.c */
uint64_t read_runq_fd(int fd);
int open_schedstat(pid_t tid);
void close_main_schedstat(void);
uint64_t runq_since(thread_track *t, pid_t tid, int fresh);
void forget_track(thread_track *t);
void forget_all_tracks(void);
void prune_threads(size_t live);

/* look.c */
void store_look(stored_look *into, int standing, const pyframe_peeked *at);
int load_look(stored_look *from, pyframe_peeked *at);
int main_standing(pyframe_peeked *at);
void peek_threads(thread_peek *out);
void second_look(void);

/* sampler.c: the registered clients (sampler.h), each called in turn */
void clients_on_wake(void);
void clients_on_snapshot(void);
void own_work_begin(void);
void own_work_end(void);
/* sampler.c: the asyncio collector, as registered (sampler_awaits) */
int awaits_snapshot_begin(void);
int awaits_loop_is_waiting(PyThreadState *ts);
int awaits_loop_was_waiting(const uintptr_t *codes, int n);
void awaits_charge_window(uint64_t window_ns, cpu_sums *unattributed);

/* snapshot.c */
void snapshot_in(enum snapshot_source source, enum snapshot_mode mode, const command_time *at);
void snapshot(enum snapshot_source source);

#endif
