#include "sampler.h"
#include "../common/quiet_thread.h"
#include "clock.h"
#include "thread_wait.h"
#include "../asyncio/awaits.h"
#include "../control/control.h"
#include "../cpython/pyframe.h"
#include "../ending/ending.h"
#include "../forks/forks.h"
#include "../common/safe_read.h"
#include "../common/wake.h"
#include "../common/table.h"
#include "../profile/codes.h"
#include "../profile/line_stats.h"
#include "../profile/line_timeline.h"
#include "../profile/stacks.h"
#include "../profile/periodic.h"
#include "../memory/mem_profile.h"
#include "../memory/pyalloc.h"
#include "../gpu/gpu.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

/* The main thread reaches a bytecode boundary within microseconds while it runs
 * Python (the eval loop checks for pending calls at every call and loop back-edge).
 * Answering later than this means it was inside one call into C the whole time:
 * an instruction that is not a call (numpy's a + b is a BINARY_OP) but runs native
 * code that long. */
#define NATIVE_DELAY_NS 100000ULL

/* How many intervals the sampler thread waits for an answer, while the main
 * thread holds the GIL, before it takes the GIL itself (sampler_main). */
#define TAKEOVER_PATIENCE 4

/* After a termination signal, the main thread answers a request within
 * microseconds when it runs Python; one that has not answered for this long is
 * blocked or in a call that released the GIL, and the sampler thread writes the
 * profile instead. */
#define ENDING_TAKEOVER_NS (2 * ENDING_POLL_NS)

/* Where the main thread stood when the request was made (t0), read by the
 * sampler thread (pyframe_peek): in a call into native code, running
 * bytecode, or not known (the read failed; then the answer's delay decides). */
enum standing { STANDING_UNKNOWN, STANDING_PYTHON, STANDING_IN_CALL };

enum snapshot_source { ANSWERED_BY_MAIN, TAKEN_BY_SAMPLER };

/* What a snapshot does with the windows it closes (pause and resume, control.h):
 *  - CHARGE: charges them, as always;
 *  - PAUSE: charges them, except the main thread's, whose time is estimated by
 *    the requests it answered (charge_main_answer): its window cut by the pause
 *    holds no request, so it is dropped, not charged to where the pause finds it
 *    (pyrometer.stop(): the line that calls it);
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
static _Thread_local int sampler_taking_over;

static struct {
    atomic_int running;         /* the sampler thread keeps going while set */
    atomic_int request_pending; /* a snapshot request waits for the main thread */
    _Atomic uint64_t request_wall_ns;     /* when the request was made (t0) */
    _Atomic uint64_t request_main_cpu_ns; /* the main thread's CPU clock at t0 */
    _Atomic uint64_t request_main_runq_ns; /* its run-queue wait at t0 (schedstat) */
    int main_schedstat_fd;                 /* the main thread's schedstat, for the sampler thread */
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
    int joining;            /* a thread waits (GIL released) for the sampler thread to end */
    atomic_int main_reporting; /* the main thread makes a periodic report (GIL released while sending) */

    /* Everything below is touched only with the GIL held. */
    sampler_options options;
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
    int64_t untracked_carry; /* signed: clock-reading noise cancels out over windows */
    int paused;              /* profiling paused (control.h); GIL held */
    uint64_t paused_since_ns;
    uint64_t process_cpu_at_pause_ns; /* the process CPU clock when the pause began */
    sampler_totals totals;
} S = {.main_schedstat_fd = -1};

/* ---- snapshot (GIL held) ---------------------------------------------------- */

static uint64_t delta(uint64_t now, uint64_t before)
{
    return now > before ? now - before : 0;
}

/* CPU used by the profiler's other threads (the GPU thread), which have no
 * Python state: each adds its own as it goes (sampler_add_helper_cpu), so that
 * it is the profiler's, not the program's native time of threads without
 * Python state. */
static _Atomic uint64_t helper_cpu_total_ns;
static uint64_t helper_cpu_at_start_ns, last_helper_cpu_ns; /* GIL held */

void sampler_add_helper_cpu(uint64_t ns)
{
    atomic_fetch_add(&helper_cpu_total_ns, ns);
}

static uint64_t helper_cpu_since_start(void)
{
    return delta(atomic_load(&helper_cpu_total_ns), helper_cpu_at_start_ns);
}


/* Position i of a peek: 0 its own frame, i its caller i - 1. */
static pyframe_position peeked_position(const pyframe_peeked *at, int i)
{
    return i == 0 ? (pyframe_position){at->frame, at->code, at->lasti} : at->callers[i - 1];
}

/* Frames of the current stack searched for one seen at t0 (t0_on_stack). */
#define MEET_DEPTH 8

/* Where the position seen at t0 meets the current stack: the innermost frame
 * of it (from innermost outward, at most MEET_DEPTH) that is at's own frame
 * (0) or at's caller k - 1 (k), the same frame running the same code, in
 * *meet; -1 when there is none.  Frames of at's inside *meet have returned
 * since t0; frames of the stack inside *meet were called since. */
static int t0_on_stack(const pyframe_peeked *at, pyframe innermost, pyframe *meet)
{
    pyframe f = innermost;
    for (int depth = 0; f != NULL && depth < MEET_DEPTH; depth++, f = pyframe_caller(f)) {
        uintptr_t frame = (uintptr_t)f, code = (uintptr_t)pyframe_code(f);
        for (int k = 0; k <= PYFRAME_PEEK_CALLERS; k++) {
            pyframe_position p = peeked_position(at, k);
            if (p.frame == 0) {
                break;
            }
            if (p.frame == frame && p.code == code) {
                *meet = f;
                return k;
            }
        }
    }
    return -1;
}

/* The place of a sample whose frames seen at t0 have partly returned (k of
 * them: at's own and its first k - 1 callers) into `innermost` (the frame
 * where t0 meets the stack, t0_on_stack): the nearest of them in a reported
 * file, at its t0 instruction, on the stack through them and on from
 * innermost (at its t0 call, innermost_lasti; -1: not reported).
 * A native operation in a small function (`return a * 3` on a large bytes)
 * holds the thread until it returns, and the caller's jump back is where it
 * answers.  Only codes known alive are read (codes_find_through: registered,
 * and forgotten by their weak reference's callback before their memory can be
 * reused, or found held by a function of the caller's module); 0 when one is
 * not, or when none of them is reported. */
static int locate_returned(location *loc, const pyframe_peeked *at, int k, pyframe innermost, int innermost_lasti)
{
    stack_frame gone[1 + PYFRAME_PEEK_CALLERS];
    int n = 0;
    for (int i = 0; i < k; i++) {
        pyframe_position p = peeked_position(at, i);
        PyCodeObject *code = (PyCodeObject *)p.code;
        const code_info *info = codes_find_through(code, pyframe_globals(innermost));
        if (info == NULL || p.lasti < 0 || p.lasti >= info->n_units) {
            return 0;
        }
        if (info->reported && info->site != SITE_NONE) {
            gone[n].site = info->site;
            gone[n].lineno = codes_line_known(info, code, p.lasti);
            n++;
        }
    }
    if (n == 0) {
        return 0;
    }
    int innermost_line = -1;
    if (innermost_lasti >= 0) {
        const code_info *info = codes_lookup(pyframe_code(innermost)); /* registered by codes_locate */
        if (info != NULL && innermost_lasti < info->n_units) {
            innermost_line = codes_line_known(info, pyframe_code(innermost), innermost_lasti);
        }
    }
    loc->site = gone[0].site;
    loc->lineno = gone[0].lineno;
    loc->stack = stacks_of_returned(gone, n, innermost, innermost_line);
    return 1;
}

/* No frame seen at t0 is on the stack any more: the thread left all of them
 * before answering (a recursion that unwound past the callers the peek keeps:
 * `recurse(x - 1)` 20 deep answers at the caller's loop or at the next call's
 * entry, which took 60% of such a program's time, its `if x == 0` line 0%).
 * The sample is still where t0 saw it, read as locate_returned reads returned
 * frames; what joins those frames to the stack is not known, so they are put on
 * the stack's outermost frame, the program's own loop as a rule. */
static int locate_unmet(location *loc, const pyframe_peeked *at, pyframe innermost)
{
    int k = 0;
    while (k <= PYFRAME_PEEK_CALLERS && peeked_position(at, k).frame != 0) {
        k++;
    }
    pyframe root = innermost;
    while (pyframe_caller(root) != NULL) {
        root = pyframe_caller(root);
    }
    return k > 0 && locate_returned(loc, at, k, root, -1);
}

/* native_by_delay: the main thread answering its request, whose kind is where it
 * stood at t0 (standing), or, for an instruction that outlasts the request, the
 * delay.  Where it stood in Python, only the delay's CPU time counts: a thread
 * kept off the CPU (a busy machine, the GIL) answers late without running any
 * native code.
 * at: where the main thread stood at t0 (NULL: not known).  A thread answers at
 * an eval-breaker check, a loop's jump back or a function's entry, so the line
 * it answers on is biased towards those (a loop whose jump back has no line of
 * its own lost nearly all its samples).  While the innermost frame is still the
 * one seen at t0, running the same code, t0's instruction is where the sample
 * is.  A frame freed and reused meanwhile is noticed unless it runs the same code
 * again (a function called in a loop), where t0's instruction is still one the
 * thread ran in this window; the index is checked against the code's size.
 * Where the frame has returned into one of its callers seen at t0, the sample
 * is where t0 saw it (locate_returned), or, if that cannot be read, at that
 * caller's call; frames called after t0 (a function's entry, where the thread
 * answers) are passed over. */
static location locate(PyThreadState *ts, int native_by_delay, uint64_t delay_ns, uint64_t delay_cpu_ns,
                       int standing, const pyframe_peeked *at)
{
    location loc = {SITE_NONE, 0, 1, 1, 0, STACKS_ROOT};
    pyframe innermost, f;
    loc.loop_idle = awaits_loop_waiting(ts);
    if (!codes_locate(ts, &innermost, &f)) {
        loc.ok = 0;
        return loc;
    }
    if (innermost == NULL) {
        return loc; /* no Python frame at all: native */
    }
    if (native_by_delay) {
        /* Answered right after a call (not at a loop back-edge or a function's
         * entry): a request that found bytecode just before a blocking call was
         * kept waiting by that call. */
        const code_info *info = codes_lookup(pyframe_code(innermost));
        int after_call = info != NULL && !codes_python_at(info, pyframe_lasti(innermost));
        if (standing == STANDING_IN_CALL) {
            loc.native = 1;
        } else if (standing == STANDING_PYTHON) {
            loc.native = delay_cpu_ns > NATIVE_DELAY_NS || (after_call && delay_ns > NATIVE_DELAY_NS);
        } else {
            loc.native = delay_ns > NATIVE_DELAY_NS;
        }
    } else {
        const code_info *info = codes_lookup(pyframe_code(innermost));
        loc.native = info != NULL && !codes_python_at(info, pyframe_lasti(innermost));
    }
    /* Where the stack meets the position seen at t0, and that frame's
     * instruction then: its own, or its call into frames that have returned
     * since.  The frames called since (a function entered after the native
     * work, where the thread answers) are not the sample's. */
    pyframe meet = NULL;
    int returned = at != NULL ? t0_on_stack(at, innermost, &meet) : -1;
    int meet_lasti = returned >= 0 ? peeked_position(at, returned).lasti : -1;
    if (!native_by_delay && returned == 0) {
        /* The line is read where the thread stood at t0 (below), and so is the
         * kind: in a call then, or still in the instruction it stood in then
         * (an operator that released the GIL: numpy's `a += 1.0`), is native;
         * otherwise bytecode.  Read now alone, it was the kind at the moment
         * the GIL came free, which a worker gives up when it enters a native
         * call that releases it: a pool thread's Python loop before hashlib
         * read 100% native. */
        int still = meet == innermost && pyframe_lasti(innermost) == meet_lasti;
        loc.native = codes_opcode_calls(at->opcode) || (still && loc.native);
    } else if (!native_by_delay && at != NULL && at->opcode >= 0 &&
               (codes_opcode_calls(at->opcode) || codes_operators_told_apart())) {
        /* The frame seen at t0 has returned since: where the thread answers
         * (its caller's loop, or the next function's entry) says nothing of
         * what it did then.  In a call then, or in an operator the specialiser
         * gave up on (`SPINNER * ms`, a numpy operation: its type's slot, in
         * C), it was native; else bytecode.  Read from where it answered,
         * the kind had followed the caller's loop: 3.13 parks after the call
         * its loop's test makes (native), 3.14 at the jump back (Python).
         * On 3.10, where every operator is generic, an operator tells
         * nothing: there the kind stays where it answered. */
        loc.native = codes_opcode_calls(at->opcode) || codes_opcode_generic_operator(at->opcode, at->oparg);
    }
    if (meet != NULL && meet != innermost && !codes_reported_from(meet, &f)) {
        loc.ok = 0;
        return loc;
    }
    if (returned > 0 && locate_returned(&loc, at, returned, meet, f == meet ? meet_lasti : -1)) {
        return loc;
    }
    if (returned < 0 && at != NULL && locate_unmet(&loc, at, innermost)) {
        return loc;
    }
    if (f != NULL) {
        const code_info *info = codes_lookup(pyframe_code(f)); /* registered by codes_locate */
        if (info == NULL) {
            loc.ok = 0;
            return loc;
        }
        loc.site = info->site;
        int lasti = pyframe_lasti(f);
        if (f == meet && meet_lasti >= 0 && meet_lasti < info->n_units) {
            lasti = meet_lasti;
        }
        loc.lineno = codes_line_known(info, pyframe_code(f), lasti);
        /* Walked from the line outward, after info is read (the walk may
         * register codes, which calls CPython). */
        loc.stack = loc.site != SITE_NONE ? stacks_of(f, loc.lineno) : STACKS_ROOT;
    }
    return loc;
}

/* The sums a location charges into; NULL when memory ran out. */
static cpu_sums *sums_at(const location *loc)
{
    if (!loc->ok) {
        return NULL;
    }
    if (loc->site == SITE_NONE) {
        return &S.totals.unattributed;
    }
    line_record *rec = line_stats_at(loc->site, loc->lineno);
    return rec != NULL ? &rec->cpu : NULL;
}

/* The sums of the location's stack, which gets whatever its line gets (the
 * same windows, the same estimated units); NULL when there are none. */
static cpu_sums *stack_sums_at(const location *loc)
{
    return loc->ok ? stacks_cpu(loc->stack) : NULL;
}

static void charge(const location *loc, uint64_t wall_ns, uint64_t cpu_ns, uint64_t runq_ns,
                   double core_fraction)
{
    cpu_sums *into = sums_at(loc);
    if (into == NULL) {
        return;
    }
    cpu_window w = {wall_ns, cpu_ns, runq_ns, loc->native, loc->loop_idle, S.gil_alone};
    cpu_sums_add(into, &w, !S.options.virtual_time, core_fraction);
    cpu_sums *stack = stack_sums_at(loc);
    if (stack != NULL) {
        cpu_sums_add(stack, &w, !S.options.virtual_time, core_fraction);
    }
}

/* CPU time alone, to a location's line and stack (cpu_sums_add_cpu). */
static void charge_cpu(const location *loc, uint64_t ns, int native, double core_fraction)
{
    cpu_sums *into = sums_at(loc);
    if (into != NULL) {
        cpu_sums_add_cpu(into, ns, native, core_fraction);
        cpu_sums *stack = stack_sums_at(loc);
        if (stack != NULL) {
            cpu_sums_add_cpu(stack, ns, native, core_fraction);
        }
    }
}

/* How many snapshots old a thread's last running position may be to take the
 * CPU it used while it is found waiting (charge_other_thread): RUNNING_FRESH,
 * or RUNNING_FRESH_PER_THREAD for each thread that ran in the last window when
 * that is more.  A thread is seen running when it holds the GIL at a request,
 * about once every as many snapshots as threads take turns at the GIL. */
#define RUNNING_FRESH 16
#define RUNNING_FRESH_PER_THREAD 4

static uint64_t running_fresh(void)
{
    uint64_t scaled = (uint64_t)S.busy_threads * RUNNING_FRESH_PER_THREAD;
    return scaled > RUNNING_FRESH ? scaled : RUNNING_FRESH;
}

/* A thread's held CPU, charged to loc (a place where it was seen running, or
 * its last parked place when no such place came in time). */
static void place_held(thread_track *t, const location *loc)
{
    if (t->held_ns > 0) {
        charge_cpu(loc, t->held_ns, loc->native, t->held_busy_ns / (double)t->held_ns);
        t->held_ns = 0;
        t->held_busy_ns = 0.0;
    }
}

/* CPU a parked thread used where it has not been seen running: held for the
 * next place it is seen running (charge_other_thread).  Charged where it parked
 * at once, twelve threads' CPU went 23-53% to their loop's head in 2.7 s runs
 * (truth 7-17%), most of it in the first snapshots, before each had held the
 * GIL at a request. */
static void hold(thread_track *t, const location *parked, uint64_t used, double core_fraction)
{
    if (t->held_ns == 0) {
        t->held_serial = S.serial;
    }
    t->held_ns += used;
    t->held_busy_ns += core_fraction * (double)used;
    t->held_at = *parked;
    S.holding = 1;
    if (S.serial - t->held_serial > running_fresh()) {
        place_held(t, parked); /* seen running too seldom: where it waits, as before */
    }
}

/* A thread other than the one answering.  A thread running bytecode is parked
 * where it handed over the GIL (a loop's jump back, a function's entry), so
 * where it stands at the snapshot says where it waited, not where it ran; where
 * the peek at the request found it is where it ran, if it ran then.  When the
 * peek found it at an instruction where bytecode parks, in the frame it stands
 * in now, it was waiting for the GIL at the request: the wait is charged there, and
 * the CPU it used in the window (before, while it held the GIL) where it was
 * last seen running, a sample of where its CPU goes taken a few snapshots
 * earlier.  Charged where it waited, two threads spinning in one loop had most
 * of their CPU on the loop's jump back (the line of the loop's head, or of the
 * body's last line: codes.c, line_of), whatever the body did. */
static location charge_other_thread(PyThreadState *ts, thread_track *t, const thread_peek *peek,
                                    int passed_over, uint64_t wall, uint64_t used, uint64_t runq,
                                    double core_fraction)
{
    const pyframe_peeked *at = peek != NULL ? &peek->at : NULL;
    location loc = locate(ts, 0, 0, 0, STANDING_UNKNOWN, at);
    int in_call = loc.native; /* where it stood at the request (or now) is a call */
    int waiting = 0;
    if (at != NULL && loc.ok && peek->gil_wait == THREAD_WAIT_IN_SPAN) {
        /* Asleep on the GIL at the request (thread_wait.h): waiting for it,
         * even on a call (handed over as the call returned). */
        waiting = 1;
    } else if (at != NULL && loc.ok && in_call && peek->held_gil && peek->on_cpu == 0) {
        /* Holding the GIL in a call, but off its CPU: preempted there, waiting
         * for a CPU.  A busy machine preempts a thread where the scheduler
         * first sees its slice is spent, which is at a tick or in a system
         * call that reads the scheduler's clock (time.thread_time): with two
         * busy processes beside it, a loop testing time.thread_time() every
         * 0.4 ms had 16-31% of its CPU read as native time on that call
         * (truth: 0.2%). */
        waiting = 1;
    } else if (at == NULL && passed_over && loc.ok && !in_call) {
        /* It ran, but other threads took the peeks: not known to have waited
         * at the request, but parked now, where a thread that waits for the
         * GIL stands, and never where its CPU went by more than its share of
         * the time (the loop's head took half of twelve threads' CPU). */
        pyframe now = pyframe_innermost(ts);
        const code_info *info = now != NULL ? codes_lookup(pyframe_code(now)) : NULL;
        waiting = info != NULL && codes_python_at(info, pyframe_lasti(now));
    } else if (at != NULL && loc.ok && !in_call) {
        /* Parked at the request: at an instruction where bytecode parks, in
         * the frame it stands in now (it may have run a little since, if it
         * had the GIL before this snapshot: to the same jump, or another). */
        pyframe now = pyframe_innermost(ts);
        pyframe_position seen = peeked_position(at, 0);
        const code_info *info = now != NULL ? codes_lookup(pyframe_code(now)) : NULL;
        waiting = info != NULL && seen.frame == (uintptr_t)now && seen.code == (uintptr_t)pyframe_code(now) &&
                  codes_python_at(info, seen.lasti);
    }
    if (!waiting) {
        if (in_call && peek != NULL && peek->held_gil && !S.gil_alone && used < wall) {
            /* Holding the GIL in a call: running native code then, and its
             * time off the CPU in the window was spent before, not in that
             * call, as a holder's at a Python instruction is: waiting for the
             * GIL among the program's threads (rather than the system time of
             * a call that blocks, which the peeks that find it blocked carry).
             * As system time, two threads calling a builtin in their loops
             * had 5-15% of their time read as system, where the kernel
             * counted none. */
            location off = loc;
            off.native = 0;
            charge(&off, wall - used, 0, runq, core_fraction);
            charge_cpu(&loc, used, 1, core_fraction);
        } else {
            charge(&loc, wall, used, runq, core_fraction);
        }
        /* Seen running: at bytecode, or in a call it held the GIL in, on its CPU. */
        if (at != NULL && loc.ok && used > 0 && (!in_call || (peek->held_gil && peek->on_cpu == 1))) {
            t->running = loc;
            t->running_serial = S.serial;
            place_held(t, &loc);
        }
        return loc;
    }
    /* Waiting, for the GIL or a CPU, where it stands: that is no native time,
     * and the CPU of its window went where it was last seen running (in a
     * call too), or, not seen lately, stays held for the next place it is
     * (hold); waiting in a call, to that call. */
    location off = loc;
    off.native = 0;
    if (used > 0 && t->running_serial != 0 && S.serial - t->running_serial <= running_fresh()) {
        charge(&off, wall - used, 0, runq, core_fraction);
        charge_cpu(&t->running, used, t->running.native, core_fraction);
        place_held(t, &t->running);
    } else if (used > 0 && in_call) {
        charge(&off, wall - used, 0, runq, core_fraction);
        charge_cpu(&loc, used, 1, core_fraction);
    } else if (used > 0) {
        charge(&off, wall - used, 0, runq, core_fraction);
        hold(t, &off, used, core_fraction);
    } else {
        charge(&off, wall, used, runq, core_fraction);
    }
    return loc;
}

/* The run-queue wait in an open schedstat file (any thread may call it). */
static uint64_t read_runq_fd(int fd)
{
    if (fd < 0) {
        return CLOCK_UNAVAILABLE;
    }
    char buf[96];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) {
        return CLOCK_UNAVAILABLE;
    }
    buf[n] = '\0';
    unsigned long long run, wait;
    return sscanf(buf, "%llu %llu", &run, &wait) == 2 ? (uint64_t)wait : CLOCK_UNAVAILABLE;
}

static int open_schedstat(pid_t tid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", (int)tid);
    return open(path, O_RDONLY | O_CLOEXEC);
}

/* How long a thread has waited on the kernel's run queue, runnable but without a
 * CPU (the second field of its schedstat), in ns; CLOCK_UNAVAILABLE where the
 * kernel does not say.  The file stays open for the thread's life (one pread a
 * snapshot), close-on-exec. */
static uint64_t read_runq(thread_track *t, pid_t tid)
{
    if (t->schedstat == 0) {
        int fd = open_schedstat(tid);
        t->schedstat = fd >= 0 ? fd + 1 : -1; /* -1: not to be tried again */
    }
    return t->schedstat < 0 ? CLOCK_UNAVAILABLE : read_runq_fd(t->schedstat - 1);
}

static void close_main_schedstat(void)
{
    if (S.main_schedstat_fd >= 0) {
        close(S.main_schedstat_fd);
        S.main_schedstat_fd = -1;
    }
}

static void forget_track(thread_track *t)
{
    if (t->schedstat > 0) {
        close(t->schedstat - 1);
    }
    t->schedstat = 0;
    t->running_serial = 0;
    t->held_ns = 0; /* a child's copy of its parent's threads: not its CPU */
    t->held_busy_ns = 0.0;
}

/* Closes the schedstat file of every tracked thread. */
static void forget_all_tracks(void)
{
    size_t cursor = 0;
    table_key key;
    thread_track *t;
    while (S.threads.slots != NULL && (t = table_next(&S.threads, &cursor, &key)) != NULL) {
        forget_track(t);
    }
}

/* The run-queue wait since the track was last accounted, and the new baseline. */
static uint64_t runq_since(thread_track *t, pid_t tid, int fresh)
{
    uint64_t now = read_runq(t, tid);
    if (now == CLOCK_UNAVAILABLE) {
        return 0;
    }
    uint64_t waited = !fresh && now >= t->last_runq_ns ? now - t->last_runq_ns : 0;
    t->last_runq_ns = now;
    return waited;
}

/* Keeps a look (the sampler thread's). */
static void store_look(stored_look *into, int standing, const pyframe_peeked *at)
{
    atomic_store(&into->standing, standing);
    for (int i = 0; i <= PYFRAME_PEEK_CALLERS; i++) {
        pyframe_position p = peeked_position(at, i);
        atomic_store(&into->frame[i], p.frame);
        atomic_store(&into->code[i], p.code);
        atomic_store(&into->lasti[i], p.lasti);
    }
}

/* A stored look's position (frame 0: not known); returns its standing. */
static int load_look(stored_look *from, pyframe_peeked *at)
{
    at->frame = atomic_load(&from->frame[0]);
    at->code = atomic_load(&from->code[0]);
    at->lasti = atomic_load(&from->lasti[0]);
    at->opcode = -1; /* not kept: unknown */
    at->oparg = 0;
    for (int i = 0; i < PYFRAME_PEEK_CALLERS; i++) {
        at->callers[i] = (pyframe_position){atomic_load(&from->frame[i + 1]), atomic_load(&from->code[i + 1]),
                                            atomic_load(&from->lasti[i + 1])};
    }
    return atomic_load(&from->standing);
}

/* Whether a look after t0 found the main thread moved on from where t0 saw it
 * (second_look), at a moment before `now`: then *where is the place that look
 * saw (read as the answer reads t0's), *moved_cpu the main thread's CPU clock
 * at the move, and the move's time is returned; else 0. */
static uint64_t moved_on_before(PyThreadState *ts, uint64_t now, uint64_t cpu, location *where,
                                uint64_t *moved_cpu)
{
    pyframe_peeked there;
    int standing = STANDING_UNKNOWN;
    uint64_t moved = 0;
    /* A whole copy, or none: the sampler thread may be storing a newer look
     * (it is preempted mid-way seldom; then this answer does without). */
    for (int tries = 0; tries < 8; tries++) {
        unsigned seq = atomic_load(&S.moved_seq);
        if (seq & 1u) {
            continue;
        }
        moved = atomic_load(&S.moved_wall_ns);
        standing = load_look(&S.moved_at, &there);
        *moved_cpu = atomic_load(&S.moved_main_cpu_ns);
        if (atomic_load(&S.moved_seq) == seq) {
            break;
        }
        moved = 0;
    }
    if (moved == 0 || moved >= now) {
        return 0;
    }
    *where = locate(ts, 1, delta(now, moved), delta(cpu, *moved_cpu), standing, &there);
    return where->ok ? moved : 0;
}

/* The main thread answering its own request at `now`.  Its time since it was last
 * accounted (at `last`) has two parts:
 *  - the answer delay [t0, now], measured exactly: where t0 saw the thread, up
 *    to a later look that found it moved on (moved_on_before), then there;
 *  - the time before the request, [last, t0], which is estimated: the request
 *    times form a Poisson process over the time the main thread can answer, so
 *    each answered request observes the program in proportion to the time it
 *    spends in each state, and represents one mean interval of that time.
 * Charging the actual length of [last, t0] instead would be biased: `last` is
 * the end of the previous answer, i.e. the end of a native call, so the Python
 * right after native calls would get systematically short windows. */
static location charge_main_answer(PyThreadState *ts, thread_track *t, uint64_t now,
                                   uint64_t cpu, uint64_t runq_before, uint64_t runq_now,
                                   double core_fraction)
{
    uint64_t t0 = atomic_load(&S.request_wall_ns);
    uint64_t cpu_t0 = atomic_load(&S.request_main_cpu_ns);
    uint64_t dead_from = t0, dead_cpu_from = cpu_t0;
    /* The sampler thread looked while the main thread was away: it charged the
     * time before the request and part of the wait; only the rest is left. */
    int looked_meanwhile = t->last_wall_ns > t0;
    if (looked_meanwhile) {
        dead_from = t->last_wall_ns;
        dead_cpu_from = t->last_cpu_ns;
    }
    uint64_t delay = delta(now, t0);
    uint64_t dead = delta(now, dead_from), dead_cpu = delta(cpu, dead_cpu_from);
    dead_cpu = dead_cpu > dead ? dead : dead_cpu;
    uint64_t live = delta(t0, t->last_wall_ns), live_cpu = delta(cpu_t0, t->last_cpu_ns);
    live_cpu = live_cpu > live ? live : live_cpu;
    /* The run-queue wait of each part: read at t0 too by the sampler thread
     * (a late answer on a busy machine is mostly waiting for a CPU); where it
     * could not be, each part gets its share of the window's by wall time. */
    uint64_t runq_t0 = atomic_load(&S.request_main_runq_ns);
    uint64_t dead_runq, live_runq;
    if (runq_now == CLOCK_UNAVAILABLE) {
        dead_runq = live_runq = 0;
    } else if (runq_t0 != CLOCK_UNAVAILABLE && runq_t0 >= runq_before && runq_t0 <= runq_now) {
        dead_runq = runq_now - (looked_meanwhile ? runq_before : runq_t0);
        live_runq = runq_t0 - runq_before;
    } else {
        uint64_t window = delta(now, t->last_wall_ns);
        double share = window > 0 ? (double)delta(runq_now, runq_before) / (double)window : 0.0;
        dead_runq = (uint64_t)(share * (double)dead);
        live_runq = (uint64_t)(share * (double)live);
    }
    double runq_share = live > 0 ? (double)live_runq / (double)live : 0.0;

    pyframe_peeked at;
    int standing = load_look(&S.request_at, &at);
    location loc = locate(ts, 1, delay, delta(cpu, cpu_t0), standing, at.frame != 0 ? &at : NULL);
    location later;
    uint64_t moved_cpu = 0;
    uint64_t moved = moved_on_before(ts, now, cpu, &later, &moved_cpu);
    if (moved != 0) {
        /* The wait up to the latest look that found the thread moved on is
         * t0's; from that look on it is where the look saw it (second_look). */
        uint64_t early = delta(moved, dead_from);
        uint64_t early_cpu = delta(moved_cpu, dead_cpu_from);
        early_cpu = early_cpu > early ? early : early_cpu;
        early_cpu = early_cpu > dead_cpu ? dead_cpu : early_cpu;
        uint64_t early_runq = dead > 0 ? (uint64_t)((double)dead_runq * ((double)early / (double)dead)) : 0;
        charge(&loc, early, early_cpu, early_runq, core_fraction);
        charge(&later, dead - early, dead_cpu - early_cpu, dead_runq - early_runq, core_fraction);
    } else {
        charge(&loc, dead, dead_cpu, dead_runq, core_fraction);
    }
    if (looked_meanwhile) {
        return moved != 0 ? later : loc;
    }
    /* The estimated part: one unit, on and off CPU in the proportion measured for
     * the state it observed.  The unit's length is the measured time before
     * requests divided by the number of requests (a ratio estimator: exact
     * totals, and no bias from the sampler thread waking later than asked). */
    /* A native call's state is what the request's delay saw (blocked or
     * running at t0), where the delay is long enough to measure it: under
     * NATIVE_DELAY_NS the two clocks, read in turn by two threads, skew the
     * fraction down (a loop of time.process_time() calls, on its CPU 99% of
     * the time, read 0.72-0.96 on 3.14, and its line's CPU with it: 5-28% of
     * the main thread's CPU was never charged, the unit for CPU being capped
     * at the common one).  A prompt answer says the thread was running; the
     * window's own measured share says how much. */
    int measurable = delay >= NATIVE_DELAY_NS;
    double on_cpu = loc.native && measurable ? (double)delta(cpu, cpu_t0) / (double)delay
                                             : (live > 0 ? (double)live_cpu / (double)live : 1.0);
    on_cpu = on_cpu > 1.0 ? 1.0 : on_cpu;
    if (S.options.virtual_time) {
        /* Off-CPU time is not counted; the unit then measures CPU time only. */
        live = live_cpu;
        on_cpu = 1.0;
        runq_share = 0.0;
    }
    S.totals.main_live_ns += live;
    S.totals.main_live_units++;
    /* The same split, by kind, of what was measured and of what was estimated
     * (the clamping of cpu_sums_add_estimate), so that each kind's unit can be
     * its own ratio (sampler_get_totals). */
    uint64_t live_runq_kept = S.options.virtual_time ? 0 : live_runq;
    uint64_t live_off = live - live_cpu;
    live_runq_kept = live_runq_kept > live_off ? live_off : live_runq_kept;
    S.totals.main_live_cpu_ns += live_cpu;
    S.totals.main_live_runq_ns += live_runq_kept;
    S.totals.main_live_off_ns += live_off - live_runq_kept;
    double est_runq = runq_share < 0.0 ? 0.0 : runq_share > 1.0 - on_cpu ? 1.0 - on_cpu : runq_share;
    S.totals.est_cpu_units += on_cpu;
    S.totals.est_runq_units += est_runq;
    S.totals.est_off_units += 1.0 - on_cpu - est_runq;
    cpu_sums *into = sums_at(&loc);
    if (into != NULL) {
        cpu_sums_add_estimate(into, loc.native, loc.loop_idle, S.gil_alone, on_cpu, runq_share, core_fraction);
        cpu_sums *stack = stack_sums_at(&loc);
        if (stack != NULL) {
            cpu_sums_add_estimate(stack, loc.native, loc.loop_idle, S.gil_alone, on_cpu, runq_share,
                                  core_fraction);
        }
    }
    return moved != 0 ? later : loc; /* where the thread is now */
}

/* The sampler thread looking at a main thread that has not answered the
 * request it made at t0, within this window: the thread has blocked since (a
 * sleep, a lock, I/O), so where it stands says where it waits, not where the CPU
 * it used since it was last looked at went, which was around t0, before it
 * blocked (a list of 10 million freed as its function returned, then
 * time.sleep(0.5): the freeing's 0.08-0.16 s were native time of the sleep's
 * line).  That CPU goes where t0 saw the thread (locate's rules for the frames
 * seen then), of the kind charge_main_answer would give it (in a call at t0, or
 * CPU since t0 past the native threshold: native); the rest of the window goes
 * where it stands. */
static location charge_main_away(PyThreadState *ts, uint64_t cpu, uint64_t wall, uint64_t used, uint64_t runq,
                                 double core_fraction)
{
    location here = locate(ts, 0, 0, 0, STANDING_UNKNOWN, NULL);
    pyframe_peeked at;
    int standing = load_look(&S.request_at, &at);
    location then = here;
    if (used > 0 && at.frame != 0) {
        then = locate(ts, 0, 0, 0, STANDING_UNKNOWN, &at);
    }
    if (!then.ok || (then.site == here.site && then.lineno == here.lineno && then.stack == here.stack)) {
        charge(&here, wall, used, runq, core_fraction);
        return here;
    }
    if (standing == STANDING_IN_CALL) {
        then.native = 1;
    } else if (standing == STANDING_PYTHON) {
        then.native = delta(cpu, atomic_load(&S.request_main_cpu_ns)) > NATIVE_DELAY_NS;
    }
    charge(&here, wall - used, 0, runq, core_fraction);
    charge_cpu(&then, used, then.native, core_fraction);
    return here;
}

/* The held CPU (hold) of the threads this snapshot did not meet (gone), or of
 * every thread (all: the sampler stops), charged where each last parked. */
static void place_held_of_gone(int all)
{
    if (!S.holding || S.threads.slots == NULL) {
        return;
    }
    int left = 0;
    size_t cursor = 0;
    table_key key;
    thread_track *t;
    while ((t = table_next(&S.threads, &cursor, &key)) != NULL) {
        if (t->held_ns == 0) {
            continue;
        }
        if (all || t->seen_in != S.serial) {
            place_held(t, &t->held_at);
        } else {
            left = 1;
        }
    }
    S.holding = left;
}

/* Threads come and go; drop the tracks of those that are gone once they outnumber
 * the living, so the table follows the number of live threads. */
static void prune_threads(size_t live)
{
    if (S.threads.count < 64 || S.threads.count < 2 * live) {
        return;
    }
    table fresh;
    if (table_init(&fresh, sizeof(thread_track), live * 2) != 0) {
        return;
    }
    size_t cursor = 0;
    table_key key;
    thread_track *t;
    while ((t = table_next(&S.threads, &cursor, &key)) != NULL) {
        if (t->seen_in == S.serial) {
            int created;
            thread_track *copy = table_upsert(&fresh, key, &created);
            if (copy != NULL) {
                *copy = *t;
                continue;
            }
        }
        forget_track(t);
    }
    table_release(&S.threads);
    S.threads = fresh;
}

static void snapshot_unsuspended(enum snapshot_source source, enum snapshot_mode mode,
                                 const command_time *at);

/* A snapshot is the profiler's work, on whichever thread takes it: the code
 * objects it meets for the first time are registered, which calls CPython, which
 * allocates (3.12+ copies the bytecode, 3.11 caches a copy on the code object).
 * Counted, those were samples of the program's, charged to the line the thread
 * stood on: 1 MB over 100 large functions in the test. */
static void snapshot_in(enum snapshot_source source, enum snapshot_mode mode, const command_time *at)
{
    pyalloc_own_work work;
    pyalloc_own_work_begin(&work);
    /* No garbage collection inside a snapshot: registering a code object
     * allocates tracked objects (a weak reference, its callback, a site's key),
     * and on 3.10 and 3.11 such an allocation may collect right there, running
     * the program's finalizers, which may release the GIL while the snapshot
     * holds raw pointers to frames and thread states (and let the sampler start
     * a snapshot of its own).  The collection runs later, in the program. */
    int collecting = PyGC_Disable();
    snapshot_unsuspended(source, mode, at);
    if (collecting) {
        PyGC_Enable();
    }
    pyalloc_own_work_end(&work);
}

static void snapshot(enum snapshot_source source)
{
    snapshot_in(source, SNAPSHOT_CHARGE, NULL);
}

/* The threads to peek at the next request: of those that ran in the window,
 * the PEEK_THREADS chosen longest ago (never: first), the first met on a tie.
 * So with more threads running than that, each is peeked in turn, not the same
 * eight every time (a thread never peeked is charged where it parks: the loop's
 * head had half the CPU of twelve threads, its body 85% alone).  chosen is kept
 * in order of serial; *n: how many it holds. */
typedef struct {
    uintptr_t ts;
    table_key key;
    uint64_t serial;
} peek_choice;

static void choose_peek(peek_choice *chosen, int *n, uintptr_t ts, table_key key, uint64_t serial)
{
    int i = *n;
    if (i == PEEK_THREADS) {
        if (serial >= chosen[PEEK_THREADS - 1].serial) {
            return;
        }
        i--; /* the last is dropped */
    } else {
        (*n)++;
    }
    for (; i > 0 && chosen[i - 1].serial > serial; i--) {
        chosen[i] = chosen[i - 1];
    }
    chosen[i] = (peek_choice){ts, key, serial};
}

/* The positions read for this snapshot (peek_threads), or NULL where other
 * threads are charged by other rules (a pause, a snapshot without a request). */
static const thread_peek *peeks_of(enum snapshot_source source)
{
    if (sampler_taking_over) {
        return S.takeover_peeks;
    }
    if (source == ANSWERED_BY_MAIN && atomic_load(&S.request_pending)) {
        return S.request_peeks;
    }
    return NULL;
}

/* Where thread ts stood when its position was last read for this snapshot, or
 * NULL (not read, or by another thread's rules). */
static const thread_peek *peeked_for(PyThreadState *ts, enum snapshot_source source)
{
    const thread_peek *peeks = peeks_of(source);
    if (peeks == NULL) {
        return NULL;
    }
    for (int i = 0; i < PEEK_SLOTS; i++) {
        if (peeks[i].ts == (uintptr_t)ts) { /* ts is never NULL: an empty entry's 0 matches none */
            return &peeks[i];
        }
    }
    return NULL;
}

/* What one snapshot knows as it goes: how it was asked for, the window since
 * the last one, and what its walk over the threads found. */
typedef struct {
    enum snapshot_source source;
    enum snapshot_mode mode;
    const command_time *at; /* a pause or resume from outside: when it was seen; else NULL */
    uint64_t now, window, process_cpu, sampler_cpu, program_used;
    double core_fraction; /* the program's share of the machine's cores in the window */
    pid_t sampler_tid;
    uint64_t threads_used; /* CPU of the threads with Python state, in their windows */
    size_t live;
    location main_location; /* where the main thread stood */
    int n_peek, busy;
    peek_choice chosen[PEEK_THREADS];
} snapshot_walk;

/* The window since the last snapshot: wall time, and the program's CPU in it
 * (the process's, less the sampler's and the helper threads'). */
static void measure_window(snapshot_walk *w)
{
    w->now = clock_wall_ns();
    w->process_cpu = clock_process_cpu_ns();
    w->sampler_tid = atomic_load(&S.sampler_tid);
    w->sampler_cpu = w->sampler_tid ? clock_thread_cpu_ns(w->sampler_tid) : CLOCK_UNAVAILABLE;
    if (w->sampler_cpu == CLOCK_UNAVAILABLE) {
        w->sampler_cpu = S.last_sampler_cpu_ns;
    }
    w->window = delta(w->now, S.last_wall_ns);
    uint64_t process_used = delta(w->process_cpu, S.last_process_cpu_ns);
    uint64_t sampler_used = delta(w->sampler_cpu, S.last_sampler_cpu_ns);
    uint64_t helper_cpu = atomic_load(&helper_cpu_total_ns);
    w->program_used = delta(process_used, sampler_used + delta(helper_cpu, last_helper_cpu_ns));
    last_helper_cpu_ns = helper_cpu;
    w->core_fraction = 0.0;
    if (w->window > 0) {
        double fraction = (double)w->program_used / ((double)w->window * (double)S.n_cpus);
        w->core_fraction = fraction > 1.0 ? 1.0 : fraction;
    }
}

/* Whether any other thread of the program could have held the GIL. */
static int gil_alone(pid_t sampler_tid)
{
    int program_threads = 0;
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(S.interp); ts != NULL && program_threads < 2;
         ts = PyThreadState_Next(ts)) {
        pid_t tid = pyframe_thread_tid(ts);
        program_threads += tid > 0 && ts != S.sampler_ts && tid != sampler_tid;
    }
    return program_threads <= 1;
}

/* Where thread ts's window is charged, by whichever rule fits the snapshot
 * (runq_before: its run-queue clock at the window's start; runq_now: now). */
static location charge_window(const snapshot_walk *w, PyThreadState *ts, thread_track *t, int fresh,
                              uint64_t cpu, uint64_t wall, uint64_t used, uint64_t runq,
                              uint64_t runq_before, uint64_t runq_now)
{
    const command_time *at = w->at;
    if (w->mode == SNAPSHOT_REBASE) {
        return w->main_location; /* not charged: only the baselines move */
    }
    if (w->mode == SNAPSHOT_PAUSE && ts == S.main_ts) {
        if (at != NULL && at->main_cpu_ns != CLOCK_UNAVAILABLE && atomic_load(&S.request_pending) &&
            atomic_load(&S.request_wall_ns) <= at->wall_ns) {
            /* A pause from outside, with a request made before it was seen
             * (the sampler thread makes one when it sees a command): the
             * main thread is charged as if it had answered then, so the
             * time of a long native call up to the pause is its. */
            return charge_main_answer(ts, t, at->wall_ns, at->main_cpu_ns, fresh ? at->main_runq_ns : runq_before,
                                      at->main_runq_ns, w->core_fraction);
        }
        return locate(ts, 0, 0, 0, STANDING_UNKNOWN, NULL); /* for the untracked time */
    }
    if (w->source == ANSWERED_BY_MAIN && ts == S.main_ts) {
        return charge_main_answer(ts, t, w->now, cpu, fresh ? runq_now : runq_before, runq_now, w->core_fraction);
    }
    if (ts == S.main_ts && atomic_load(&S.request_pending) &&
        atomic_load(&S.request_wall_ns) > t->last_wall_ns) {
        return charge_main_away(ts, cpu, wall, used, runq, w->core_fraction);
    }
    return charge_other_thread(ts, t, ts == S.main_ts ? NULL : peeked_for(ts, w->source),
                               t->passed_over && peeks_of(w->source) != NULL, wall, used, runq, w->core_fraction);
}

/* One thread's window: measured from its clocks, charged, and its baselines
 * moved to now. */
static void snapshot_thread(snapshot_walk *w, PyThreadState *ts, pid_t tid)
{
    uint64_t cpu = clock_thread_cpu_ns(tid);
    if (cpu == CLOCK_UNAVAILABLE) {
        return; /* the thread has exited and its state is being torn down */
    }
    int created;
    table_key key = {pyframe_thread_serial(ts), 0};
    thread_track *t = table_upsert(&S.threads, key, &created);
    if (t == NULL) {
        return;
    }
    uint64_t wall, used;
    int fresh = created || t->tid != tid;
    if (fresh && !created) {
        place_held(t, &t->held_at);
        forget_track(t); /* another thread's file */
    }
    uint64_t runq_before = t->last_runq_ns;
    uint64_t runq = runq_since(t, tid, fresh);
    uint64_t runq_now = t->schedstat > 0 ? t->last_runq_ns : CLOCK_UNAVAILABLE;
    if (fresh) {
        /* First sight (threads that existed at start were seen by
         * sampler_start): the thread started within this window, so all of
         * its CPU so far (at most the window) is new. */
        wall = w->window;
        used = cpu < w->window ? cpu : w->window;
        S.totals.threads_seen++;
        t->last_wall_ns = w->now - wall;
        t->last_cpu_ns = cpu - used;
    } else {
        wall = delta(w->now, t->last_wall_ns);
        used = delta(cpu, t->last_cpu_ns);
    }
    if (used > wall) {
        used = wall; /* clocks of different resolution; never more CPU than wall */
    }
    w->threads_used += used;
    w->live++;
    location loc = charge_window(w, ts, t, fresh, cpu, wall, used, runq, runq_before, runq_now);
    t->passed_over = 0;
    if (ts != S.main_ts && used > 0) {
        /* Threads that ran in this window: an idle pool's workers, parked in
         * a call, are where they answer and would take the places. */
        t->passed_over = 1; /* unless chosen for a peek */
        w->busy++;
        choose_peek(w->chosen, &w->n_peek, (uintptr_t)ts, key, t->peek_serial);
    }
    if (ts == S.main_ts) {
        w->main_location = loc;
    }
    t->last_wall_ns = w->now;
    t->last_cpu_ns = cpu;
    t->seen_in = S.serial;
    t->tid = tid;
    const command_time *at = w->at;
    if (w->mode == SNAPSHOT_REBASE && at != NULL && ts == S.main_ts && at->main_cpu_ns != CLOCK_UNAVAILABLE &&
        at->main_cpu_ns <= cpu && at->wall_ns <= w->now) {
        /* A resume from outside: the main thread's window starts when it was
         * seen, so the rest of a native call it was in then is charged (the
         * request made then measures it, charge_main_answer). */
        t->last_wall_ns = at->wall_ns;
        t->last_cpu_ns = at->main_cpu_ns;
        if (at->main_runq_ns != CLOCK_UNAVAILABLE && at->main_runq_ns <= t->last_runq_ns) {
            t->last_runq_ns = at->main_runq_ns;
        }
    }
}

/* The threads the sampler peeks at before its next request (choose_peek). */
static void publish_peeks(const snapshot_walk *w)
{
    for (int i = 0; i < w->n_peek; i++) {
        thread_track *c = table_find(&S.threads, w->chosen[i].key);
        if (c != NULL) {
            c->peek_serial = S.serial;
            c->passed_over = 0;
        }
        atomic_store(&S.peek_tid[i], c != NULL ? c->tid : 0);
        atomic_store(&S.peek_list[i], w->chosen[i].ts);
    }
    for (int i = w->n_peek; i < PEEK_THREADS; i++) {
        atomic_store(&S.peek_list[i], 0);
    }
    S.busy_threads = w->busy;
}

/* Which line the main thread stood on, and when, for measurements that
 * arrive late with their own time (the GPU's windows: line_timeline.h). */
static void note_main_line(const snapshot_walk *w)
{
    if (!line_timeline_enabled()) {
        return;
    }
    const location *m = &w->main_location;
    if (w->mode == SNAPSHOT_REBASE) {
        line_timeline_note(line_timeline_now_ns(), LINE_TIMELINE_PAUSED, 0, STACKS_ROOT); /* since the pause */
    } else {
        line_timeline_note(line_timeline_now_ns(), m->ok ? m->site : SITE_NONE, m->lineno,
                           m->ok ? m->stack : STACKS_ROOT);
    }
}

/* CPU used by threads that have no Python state (native thread pools, threads
 * started from C) is native time of the program; it is charged to the line the
 * main thread is running, which is the line that is waiting for that work. */
static void charge_untracked(snapshot_walk *w)
{
    S.untracked_carry += (int64_t)w->program_used - (int64_t)w->threads_used;
    if (w->mode == SNAPSHOT_REBASE) {
        S.untracked_carry = 0; /* the paused time's */
    }
    if (S.untracked_carry > 0) {
        uint64_t untracked = (uint64_t)S.untracked_carry;
        S.untracked_carry = 0;
        S.totals.untracked_native_ns += untracked;
        w->main_location.ok = 1;
        charge_cpu(&w->main_location, untracked, 1, w->core_fraction);
    }
}

/* at: for a pause or resume from outside, when it was seen (command_time); NULL
 * for the program's own (it happens where the call is).  The steps: what the
 * other collectors queued, the window, each thread's share of it, the peeks
 * for the next request, the main thread's line for late measurements, the CPU
 * of threads without Python state, await time, and the new baselines. */
static void snapshot_unsuspended(enum snapshot_source source, enum snapshot_mode mode,
                                 const command_time *at)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback); /* the snapshot must not disturb a pending error */
    mem_profile_drain(); /* memory samples queued by threads that did not hold the GIL */
    gpu_kernels_drain(); /* GPU launches whose line could not be read at the launch */
    int asyncio_used = awaits_begin();

    snapshot_walk w = {.source = source, .mode = mode, .at = at,
                       .main_location = {SITE_NONE, 0, 1, 0, 0, STACKS_ROOT}};
    measure_window(&w);
    S.serial++;
    S.gil_alone = gil_alone(w.sampler_tid);
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(S.interp); ts != NULL; ts = PyThreadState_Next(ts)) {
        pid_t tid = pyframe_thread_tid(ts);
        if (tid <= 0) {
            /* Not running yet (or a 3.10 state without a frame): which thread's
             * CPU it will count is not known, so it gets no window; its first
             * one starts where it is first seen with an id. */
            continue;
        }
        if (ts == S.sampler_ts || tid == w.sampler_tid) {
            continue; /* by tid too: its state exists before it first holds the GIL */
        }
        snapshot_thread(&w, ts, tid);
    }
    publish_peeks(&w);
    place_held_of_gone(0);
    note_main_line(&w);
    charge_untracked(&w);

    /* Await time is wall time by nature: with --use-virtual-time none is counted. */
    if (asyncio_used && !S.options.virtual_time && mode != SNAPSHOT_REBASE) {
        awaits_charge(w.window, &S.totals.unattributed);
    }

    prune_threads(w.live);
    S.last_wall_ns = w.now;
    S.last_process_cpu_ns = w.process_cpu;
    S.last_sampler_cpu_ns = w.sampler_cpu;
    if (mode == SNAPSHOT_CHARGE) {
        S.totals.snapshots++;
        if (source == ANSWERED_BY_MAIN) {
            S.totals.main_snapshots++;
        }
    }
    PyErr_Restore(type, value, traceback);
}

/* A periodic report made on the main thread right after its snapshot is the
 * profiler's work, not the program's: the main thread's next window starts after
 * it, and its CPU is left out of the process's (which feeds the time charged to
 * threads without Python state).  On the sampler thread it is left out anyway. */
static void periodic_on_main(uint64_t now)
{
    uint64_t cpu0 = clock_thread_cpu_ns(S.main_tid);
    /* The report is sent with the GIL released: the sampler thread must not take
     * the main thread's time in the send for the program's (sampler_main). */
    atomic_store(&S.main_reporting, 1);
    periodic_tick(now);
    atomic_store(&S.main_reporting, 0);
    uint64_t cpu1 = clock_thread_cpu_ns(S.main_tid);
    if (cpu0 == CLOCK_UNAVAILABLE || cpu1 == CLOCK_UNAVAILABLE) {
        return;
    }
    int created;
    table_key key = {pyframe_thread_serial(S.main_ts), 0};
    thread_track *t = table_upsert(&S.threads, key, &created);
    if (t != NULL) {
        t->last_wall_ns = clock_wall_ns();
        t->last_cpu_ns = cpu1;
        t->tid = S.main_tid;
        t->seen_in = S.serial;
    }
    S.last_process_cpu_ns += delta(cpu1, cpu0);
    S.totals.periodic_cpu_ns += delta(cpu1, cpu0);
}

/* ---- pause and resume (control.h) ----------------------------------------- */

/* GIL held, on any thread.  Brings the sampler to the state control.h wants.
 * A pause charges every window up to it (SNAPSHOT_PAUSE) and then takes no
 * samples; the resume starts every window afresh (SNAPSHOT_REBASE), so that no
 * time in between is charged, and adds the pause to the paused time.  The
 * memory side follows control_paused(): it drops its samples while paused. */
static void apply_control_unlocked(const command_time *at)
{
    int pause = !control_wanted();
    if (pause == S.paused || !S.active || getpid() != S.owner_pid) {
        return;
    }
    uint64_t when = at != NULL ? at->wall_ns : clock_wall_ns();
    if (pause) {
        /* Nothing the memory side samples from here is charged; then what ran
         * up to now is. */
        control_set_paused(1);
        if (!S.suspended_for_fork) {
            snapshot_in(TAKEN_BY_SAMPLER, SNAPSHOT_PAUSE, at);
        }
        S.paused = 1;
        S.paused_since_ns = when;
        S.process_cpu_at_pause_ns = clock_process_cpu_ns();
    } else {
        if (!S.suspended_for_fork) {
            snapshot_in(TAKEN_BY_SAMPLER, SNAPSHOT_REBASE, at);
        }
        S.totals.paused_ns += delta(when, S.paused_since_ns);
        S.paused = 0;
        control_set_paused(0);
    }
}

void sampler_apply_control(void)
{
    apply_control_unlocked(NULL);
}

/* GIL held, on the main thread (answering a request) or the sampler thread:
 * the commands from outside received so far take effect, in order, each at the
 * time it came. */
static void take_commands(void)
{
    control_received received;
    while (control_take(&received)) {
        command_time at = {received.wall_ns, received.main_cpu_ns, CLOCK_UNAVAILABLE};
        control_apply(received.command);
        apply_control_unlocked(&at);
    }
}

/* A pending call: runs on the main thread, with the GIL, at a bytecode boundary. */
static int answer_request(void *unused)
{
    (void)unused;
    if (getpid() == S.owner_pid && ending_claim()) {
        ending_run(); /* a termination signal: the profile, then the same death */
    }
    if (atomic_load(&S.running) && getpid() == S.owner_pid && !ending_signal()) {
        take_commands(); /* before the snapshot: this answer then measures the time after a resume */
    }
    if (atomic_load(&S.running) && getpid() == S.owner_pid && !ending_signal() && !S.paused) {
        int main = PyThreadState_Get() == S.main_ts;
        snapshot(main ? ANSWERED_BY_MAIN : TAKEN_BY_SAMPLER);
        uint64_t now = clock_wall_ns();
        if (periodic_due(now)) {
            if (main) {
                periodic_on_main(now);
            } else {
                periodic_tick(now);
            }
        }
    }
    atomic_store(&S.request_pending, 0);
    return 0;
}

/* ---- the sampler thread ------------------------------------------------------- */

/* Sleeps until end (monotonic) unless sampler_stop() wakes it, or, with watch_ending, a
 * termination signal or a command from outside (control.h) is recorded: their
 * handlers post the wake (wake.h), so the thread acts within microseconds, not
 * at the end of its sleep.  Returns whether to keep going. */
static int wait_for_next_sample(uint64_t end, int watch_ending)
{
    while (atomic_load(&S.running)) {
        if (watch_ending && (ending_signal() != 0 || control_pending())) {
            break;
        }
        if (clock_wall_ns() >= end) {
            break;
        }
        (void)wake_wait_until(end); /* a post: look again (it may be left from before) */
    }
    return atomic_load(&S.running);
}

/* Where the main thread stands now (the sampler thread, without the GIL: the main
 * thread's state lives as long as the interpreter, and everything read from it
 * goes through safe_read). */
static int main_standing(pyframe_peeked *at)
{
    if (!S.peek_available) {
        return STANDING_UNKNOWN;
    }
    switch (pyframe_peek(S.main_ts, at)) {
    case PYFRAME_PEEK_OPCODE:
        return codes_opcode_calls(at->opcode) ? STANDING_IN_CALL : STANDING_PYTHON;
    case PYFRAME_PEEK_STARTING:
        return STANDING_PYTHON;
    case PYFRAME_PEEK_NO_FRAME:
        return STANDING_IN_CALL; /* no Python frame: outside Python */
    default:
        return STANDING_UNKNOWN;
    }
}

/* The sampler thread, without the GIL: where the threads chosen at the last
 * snapshot stand now, and the thread that holds the GIL now.  The holder is the
 * one running bytecode: where it stands is where the CPU of bytecode goes at
 * this moment, and the only place its running position can be seen (threads
 * that wait for the GIL are found parked).  With more threads running than
 * PEEK_THREADS, a holder left out of the list was seen running only when the
 * rotation (choose_peek) happened to meet it holding the GIL. */
static void peek_one(thread_peek *out, uintptr_t ts)
{
    out->ts = 0;
    out->gil_wait = THREAD_WAIT_UNKNOWN;
    out->held_gil = 0;
    out->on_cpu = -1;
    /* A state freed meanwhile is only read through safe_read; what it gives is
     * used only for a live state whose frame and code match. */
    if (ts != 0 && S.peek_available && pyframe_peek((PyThreadState *)ts, &out->at) == PYFRAME_PEEK_OPCODE) {
        out->ts = ts;
    }
}

static void peek_threads(thread_peek *out)
{
    uintptr_t holder = (uintptr_t)pyframe_gil_holder(S.interp);
    if (holder == (uintptr_t)S.main_ts || holder == (uintptr_t)S.sampler_ts) {
        holder = 0; /* the main thread has rules of its own; the sampler thread is not the program */
    }
    for (int i = 0; i < PEEK_THREADS; i++) {
        uintptr_t ts = atomic_load(&S.peek_list[i]);
        pid_t tid = atomic_load(&S.peek_tid[i]);
        int holds = ts != 0 && ts == holder;
        uint64_t cpu_before = holds ? clock_thread_cpu_ns(tid) : CLOCK_UNAVAILABLE;
        peek_one(&out[i], ts);
        if (holds) {
            holder = 0; /* peeked already */
            out[i].gil_wait = THREAD_WAIT_ELSEWHERE;
            out[i].held_gil = 1;
            uint64_t cpu_after = clock_thread_cpu_ns(tid);
            if (cpu_before != CLOCK_UNAVAILABLE && cpu_after != CLOCK_UNAVAILABLE) {
                out[i].on_cpu = cpu_after > cpu_before;
            }
        } else if (out[i].ts != 0) {
            out[i].gil_wait = thread_wait_in(&S.peek_waits[i], tid, S.gil_start, S.gil_size);
        }
    }
    peek_one(&out[PEEK_THREADS], holder);
    out[PEEK_THREADS].gil_wait = THREAD_WAIT_ELSEWHERE;
    out[PEEK_THREADS].held_gil = holder != 0;
}

/* The sampler thread, without the GIL: asks the main thread for a snapshot at
 * its next bytecode boundary, noting where it stands now (t0). */
static void make_request(void)
{
    /* The slow reads first (a pread of schedstat, the peek's process_vm_readv:
     * tens of microseconds each on a virtual machine), then t0 on both clocks
     * together, then the request.  With the reads between the two clocks and
     * the request, a request that found pure bytecode was answered 70-120 us of
     * CPU after its CPU t0 (while 15-80 us of wall after its wall t0), past the
     * 100 us native threshold: up to 27% of a pure-Python line read as native. */
    atomic_store(&S.request_main_runq_ns, read_runq_fd(S.main_schedstat_fd));
    pyframe_peeked at = {.lasti = -1}; /* frame 0: no position (only a full peek sets it) */
    store_look(&S.request_at, main_standing(&at), &at);
    atomic_store(&S.moved_wall_ns, 0);
    peek_threads(S.request_peeks);
    atomic_store(&S.request_wall_ns, clock_wall_ns());
    atomic_store(&S.request_main_cpu_ns, clock_thread_cpu_ns(S.main_tid));
    S.still_wall_ns = atomic_load(&S.request_wall_ns);
    S.still_main_cpu_ns = atomic_load(&S.request_main_cpu_ns);
    atomic_store(&S.request_pending, 1);
    if (Py_AddPendingCall(answer_request, NULL) != 0) {
        atomic_store(&S.request_pending, 0); /* queue full: try at the next tick */
    } else {
        pyframe_wake_main_thread(S.interp);
    }
}

/* The sampler thread, without the GIL, each time it wakes while the main
 * thread's request waits: whether the thread has moved on since the last look
 * (t0's, or the latest that found it moved).  A thread running bytecode
 * answers at its next eval-breaker check, so one that has not answered and
 * stands elsewhere went on through instructions that check nothing (a list's
 * `*`, a store that frees a large list) and perhaps into a call that keeps it;
 * or t0 caught the end of the call before, when the sampler thread lost its
 * CPU between its peek and t0.  Without these looks the whole wait went to
 * t0's line: a loop of `x = big * 4` (16 ms) and a 40 ms call gave the first
 * line 3.5 s of 3.6 (and once in CI a 1.5 s call holding the GIL got nothing
 * on its line, most likely this way).  The move is placed halfway between this look and
 * the one before, which found the thread still where it was (the unbiased
 * place for a move at an unknown moment in between); the time from there on
 * is where this look saw the thread, the time before stays t0's
 * (charge_main_answer). */
static void second_look(void)
{
    if (!S.peek_available || atomic_load(&S.request_at.frame[0]) == 0) {
        return;
    }
    pyframe_peeked at = {.lasti = -1};
    int standing = main_standing(&at);
    uint64_t cpu = clock_thread_cpu_ns(S.main_tid);
    uint64_t now = clock_wall_ns();
    if (at.frame == 0 || cpu == CLOCK_UNAVAILABLE) {
        return;
    }
    stored_look *last = atomic_load(&S.moved_wall_ns) != 0 ? &S.moved_at : &S.request_at;
    if (at.frame == atomic_load(&last->frame[0]) && at.code == atomic_load(&last->code[0]) &&
        at.lasti == atomic_load(&last->lasti[0])) {
        S.still_wall_ns = now; /* still where the last look saw it */
        S.still_main_cpu_ns = cpu;
        return;
    }
    uint64_t move_wall = S.still_wall_ns + delta(now, S.still_wall_ns) / 2;
    uint64_t move_cpu = S.still_main_cpu_ns + delta(cpu, S.still_main_cpu_ns) / 2;
    atomic_fetch_add(&S.moved_seq, 1u); /* odd: being written */
    store_look(&S.moved_at, standing, &at);
    atomic_store(&S.moved_main_cpu_ns, move_cpu);
    atomic_store(&S.moved_wall_ns, move_wall);
    atomic_fetch_add(&S.moved_seq, 1u);
    S.still_wall_ns = now;
    S.still_main_cpu_ns = cpu;
}

/* The sampler thread, without the GIL: a command from outside was received.  It
 * makes a request (unless one is waiting), so that the main thread acts on it
 * at its next bytecode boundary and its answer measures the time after a
 * resume; then it takes the GIL to act on it itself, for a main thread that is
 * blocked (whichever has the GIL first acts, take_commands). */
static void see_commands(int *have_thread_state, PyGILState_STATE *gil_state)
{
    if (!atomic_load(&S.request_pending)) {
        make_request();
    }
    if (!*have_thread_state) {
        *gil_state = PyGILState_Ensure();
        S.sampler_ts = PyThreadState_Get();
        *have_thread_state = 1;
    } else {
        PyEval_RestoreThread(S.sampler_ts);
    }
    if (atomic_load(&S.running)) {
        take_commands();
    }
    PyEval_SaveThread();
}

static void *sampler_main(void *unused)
{
    (void)unused;
    atomic_store(&S.sampler_tid, (int)gettid());
    uint64_t rng = clock_wall_ns() ^ ((uint64_t)getpid() << 32) ^ 0x9E3779B97F4A7C15ULL;
    uint64_t interval = S.options.interval_ns;
    int have_thread_state = 0;
    PyGILState_STATE gil_state = PyGILState_UNLOCKED;

    int ending = 0;
    /* Once a termination signal is recorded (ending.h), no more samples: the
     * thread only sees that the profile gets written, by the main thread when
     * it answers a request (answer_request), or by this one when the main
     * thread has not answered for ENDING_TAKEOVER_NS. */
    /* When the next look is due.  The draws are laid end to end from the last
     * due time, not from the end of the last look: a look that had to wait for
     * the GIL (a snapshot taken while the program's threads pass it between
     * them waits 5-15 ms) would otherwise stretch every interval by its wait.
     * Two threads spinning in one loop, with the main thread in join(), got
     * 28-55 snapshots a second at the default 100 (median 40; now 34-71,
     * median 63), and a loop line's share of the CPU spread over 20-35% in
     * 3 s runs (now 23-29%; truth about 27%; 8 runs each, alternated).  No
     * look comes sooner than a quarter interval after the last one ended (at
     * most ENDING_POLL_NS: an interval can be 10 s, and a termination signal
     * waits on these looks), so one that has fallen behind does not look at
     * once: a look right after a snapshot finds the thread that the GIL went
     * to still where it waited for it (a loop's jump back), and charged there,
     * two such threads had half their CPU on the loop's first line.  The
     * floor also lengthens the draws shorter than it (22% of them): the mean
     * interval is 1.03 times the nominal. */
    uint64_t due = clock_wall_ns();
    for (;;) {
        uint64_t now = clock_wall_ns();
        if (now >= due) {
            due += ending ? ENDING_POLL_NS : clock_random_interval_ns(interval, &rng);
            uint64_t soonest = now + (interval / 4 < ENDING_POLL_NS ? interval / 4 : ENDING_POLL_NS);
            if (due < soonest) {
                due = soonest;
            }
        } else if (ending && due > now + ENDING_POLL_NS) {
            due = now + ENDING_POLL_NS; /* woken by a termination signal: its own pace from now */
        } /* else woken early by a command: the same due time */
        if (!wait_for_next_sample(due, !ending)) {
            break;
        }
        ending = ending_signal() != 0;
        if (!ending) {
            mem_profile_poll();
        } else if (!ending_pending()) {
            continue; /* the main thread writes it */
        }
        if (!ending && control_pending()) {
            see_commands(&have_thread_state, &gil_state);
        }
        if (!ending && control_paused()) {
            continue; /* no samples while paused; the loop still watches for commands */
        }
        if (!atomic_load(&S.request_pending)) {
            make_request();
            continue;
        }
        if (!ending) {
            second_look();
        }
        uint64_t waited = delta(clock_wall_ns(), atomic_load(&S.request_wall_ns));
        if (waited < (ending ? ENDING_TAKEOVER_NS : interval) || atomic_load(&S.main_reporting)) {
            continue;
        }
        if (!ending && waited < TAKEOVER_PATIENCE * interval && pyframe_gil_held_by(S.interp, S.main_ts)) {
            /* The main thread holds the GIL (a long call that keeps it, or one
             * instruction's long work): taking it would wait for the answer,
             * and with it the looks that follow where the thread goes.  The
             * request is signalled again instead: another thread's GIL
             * handover recomputes the eval breaker without pending calls
             * (pyframe_wake_main_thread), and the attempt to take the GIL,
             * whose drop request raised it again, is not made.  Past
             * TAKEOVER_PATIENCE intervals the sampler thread takes it anyway,
             * whatever the reason the answer is late. */
            pyframe_wake_main_thread(S.interp);
            continue;
        }
        /* The main thread has not answered for a whole interval: it is blocked or
         * in a long call that released the GIL.  Take the GIL and look ourselves.
         * The request stays queued, so the main thread's own answer, when it
         * comes, still measures how long it was away.  The other threads are
         * read first: waiting for the GIL moves the one running bytecode to
         * where it hands it over. */
        if (!ending) {
            peek_threads(S.takeover_peeks);
        }
        if (!have_thread_state) {
            gil_state = PyGILState_Ensure();
            S.sampler_ts = PyThreadState_Get();
            have_thread_state = 1;
        } else {
            PyEval_RestoreThread(S.sampler_ts);
        }
        if (ending) {
            if (atomic_load(&S.running) && ending_claim()) {
                ending_run(); /* does not return */
            }
        } else if (atomic_load(&S.running) && atomic_load(&S.request_pending) && !S.paused) {
            sampler_taking_over = 1;
            snapshot(TAKEN_BY_SAMPLER);
            sampler_taking_over = 0;
            uint64_t now = clock_wall_ns();
            if (periodic_due(now)) {
                periodic_tick(now); /* the main thread cannot: it is away */
            }
        }
        PyEval_SaveThread();
    }
    for (int i = 0; i < PEEK_THREADS; i++) {
        thread_wait_close(&S.peek_waits[i]); /* none left open across a fork (the thread is joined first) */
    }
    if (have_thread_state) {
        PyEval_RestoreThread(S.sampler_ts);
        S.sampler_ts = NULL;
        PyGILState_Release(gil_state);
    }
    return NULL;
}

/* In a forked child only the forking thread exists: the sampler is gone, and its
 * thread state is deleted by CPython.  The child starts unprofiled. */
static void forget_sampler_in_child(void)
{
    /* The files of the parent's threads are not this process's threads'. */
    forget_all_tracks();
    close_main_schedstat();
    atomic_store(&S.running, 0);
    atomic_store(&S.request_pending, 0);
    atomic_store(&S.sampler_tid, 0);
    S.thread_started = 0;
    S.active = 0;
    S.suspended_for_fork = 0;
    S.joining = 0;
    S.sampler_ts = NULL;
}

/* Starts the sampler thread; 0, or an errno value. */
static int launch_thread(void)
{
    atomic_store(&S.sampler_tid, 0);
    atomic_store(&S.running, 1);
    int rc = quiet_thread_create(&S.thread, sampler_main, NULL);
    if (rc != 0) {
        atomic_store(&S.running, 0);
        return rc;
    }
    S.thread_started = 1;
    return 0;
}

/* Stops the sampler thread and waits until it has ended; GIL held (released
 * while waiting: the thread may be waiting for it).  Returns its kernel tid. */
static pid_t join_thread(void)
{
    pthread_t thread = S.thread;
    S.thread_started = 0; /* before the GIL is released: another thread may fork */
    S.joining = 1;
    atomic_store(&S.running, 0);
    wake_post();
    Py_BEGIN_ALLOW_THREADS
    pthread_join(thread, NULL);
    Py_END_ALLOW_THREADS
    S.joining = 0;
    return (pid_t)atomic_exchange(&S.sampler_tid, 0); /* its first act was to set it */
}

/* Another Python thread may be in join_thread (it released the GIL there): wait
 * until the sampler thread has ended, GIL released, before going on. */
static void wait_for_other_join(void)
{
    while (S.joining) {
        Py_BEGIN_ALLOW_THREADS
        struct timespec pause = {0, 100000};
        nanosleep(&pause, NULL);
        Py_END_ALLOW_THREADS
    }
}

/* Around the program's forks (forks.h): the thread stops, and starts again in
 * the parent.  The gap between the two is not sampled, so it is measured
 * instead: each thread's time in it is charged to where the thread stands once
 * the fork is done (the forking thread: its call of os.fork), and every baseline
 * moves past the gap, so that the next windows, and the main thread's estimated
 * units (charge_main_answer), cover only time that was sampled.  (Charging the
 * time before the fork at the fork, or leaving the gap in the main thread's
 * next estimated unit, both put the waits between forks on the wrong lines.) */
static void stop_for_fork(void)
{
    wait_for_other_join(); /* two threads forking at once: the second waits */
    if (!(S.active && S.thread_started && getpid() == S.owner_pid)) {
        return;
    }
    pid_t sampler_tid = (pid_t)atomic_load(&S.sampler_tid);
    uint64_t sampler_cpu = sampler_tid ? clock_thread_cpu_ns(sampler_tid) : CLOCK_UNAVAILABLE;
    pid_t tid = join_thread();
    S.suspended_for_fork = 1;
    if (sampler_cpu != CLOCK_UNAVAILABLE) {
        S.earlier_samplers_cpu_ns += sampler_cpu;
        S.last_process_cpu_ns += delta(sampler_cpu, S.last_sampler_cpu_ns);
    }
    S.last_sampler_cpu_ns = 0; /* the next sampler thread's clock starts at 0 */
    S.pause_wall_ns = clock_wall_ns();
    S.pause_process_cpu_ns = clock_process_cpu_ns();
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(S.interp); ts != NULL;
         ts = PyThreadState_Next(ts)) {
        table_key key = {pyframe_thread_serial(ts), 0};
        thread_track *t = table_find(&S.threads, key);
        if (t != NULL) {
            t->cpu_at_pause = clock_thread_cpu_ns(pyframe_thread_tid(ts));
        }
    }
    forks_wait_until_thread_gone(tid);
}

static void start_after_fork_unsuspended(void);

static void start_after_fork(void)
{
    if (!(S.suspended_for_fork && S.active)) {
        return;
    }
    pyalloc_own_work work; /* it registers code objects, as a snapshot does */
    pyalloc_own_work_begin(&work);
    start_after_fork_unsuspended();
    pyalloc_own_work_end(&work);
}

static void start_after_fork_unsuspended(void)
{
    S.suspended_for_fork = 0;
    if (S.paused) {
        /* Nothing to charge: the resume starts every window afresh. */
        (void)launch_thread();
        return;
    }
    uint64_t now = clock_wall_ns();
    uint64_t gap = delta(now, S.pause_wall_ns);
    uint64_t process_cpu = clock_process_cpu_ns();
    double core_fraction = 0.0;
    if (gap > 0) {
        core_fraction = (double)delta(process_cpu, S.pause_process_cpu_ns) / ((double)gap * (double)S.n_cpus);
        core_fraction = core_fraction > 1.0 ? 1.0 : core_fraction;
    }
    uint64_t gap_threads_used = 0;
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(S.interp); ts != NULL;
         ts = PyThreadState_Next(ts)) {
        table_key key = {pyframe_thread_serial(ts), 0};
        thread_track *t = table_find(&S.threads, key);
        uint64_t cpu = clock_thread_cpu_ns(pyframe_thread_tid(ts));
        if (t == NULL || cpu == CLOCK_UNAVAILABLE || t->cpu_at_pause == CLOCK_UNAVAILABLE) {
            continue; /* a thread new since the pause: the next snapshot meets it */
        }
        uint64_t used = delta(cpu, t->cpu_at_pause);
        used = used > gap ? gap : used;
        gap_threads_used += used;
        location loc = locate(ts, 0, 0, 0, STANDING_UNKNOWN, NULL);
        charge(&loc, gap, used, 0, core_fraction);
        t->last_wall_ns += gap;
        t->last_cpu_ns += used;
        (void)runq_since(t, pyframe_thread_tid(ts), 1); /* the gap's run-queue wait is left out */
        if (ts == S.main_ts && atomic_load(&S.request_pending)) {
            /* The request made before the fork is answered after it: its delay
             * must not count the gap again. */
            atomic_store(&S.request_wall_ns, atomic_load(&S.request_wall_ns) + gap);
            atomic_store(&S.request_main_cpu_ns, atomic_load(&S.request_main_cpu_ns) + used);
        }
    }
    S.last_wall_ns += gap;
    S.last_process_cpu_ns += delta(process_cpu, S.pause_process_cpu_ns);
    /* The gap's CPU that no thread above accounts for (threads that ended or
     * started during it, threads without Python state) is the program's
     * untracked native time, as in a snapshot: the next snapshot charges it.
     * Left out, the stress test (a fork every 50 ms among 200 threads coming
     * and going) charged 94% of the process's CPU under the sanitizers. */
    S.untracked_carry += (int64_t)delta(process_cpu, S.pause_process_cpu_ns) - (int64_t)gap_threads_used;
    /* Should the thread not start (out of threads), the program goes on and the
     * profile has no samples from here on. */
    (void)launch_thread();
}

int sampler_start(const sampler_options *options)
{
    static int atfork_registered;
    if (S.active) {
        PyErr_SetString(PyExc_RuntimeError, "the CPU sampler is already running");
        return -1;
    }
    if (!atfork_registered) {
        if (pthread_atfork(NULL, NULL, forget_sampler_in_child) != 0) {
            PyErr_SetString(PyExc_OSError, "cannot register the fork handler");
            return -1;
        }
        atfork_registered = 1;
    }
    pyalloc_own_work work; /* codes_init imports `opcode`: not the program's memory */
    pyalloc_own_work_begin(&work);
    int codes_ready = codes_init();
    pyalloc_own_work_end(&work);
    if (codes_ready != 0) {
        return -1;
    }
    if (line_stats_init() != 0 || stacks_init() != 0 ||
        (S.threads.slots == NULL && table_init(&S.threads, sizeof(thread_track), 64) != 0)) {
        PyErr_NoMemory();
        return -1;
    }
    if (wake_prepare() != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }

    S.options = *options;
    S.interp = PyInterpreterState_Get();
    pyframe_gil_span(S.interp, &S.gil_start, &S.gil_size);
    for (int i = 0; i < PEEK_THREADS; i++) {
        S.peek_waits[i] = (thread_wait_file)THREAD_WAIT_FILE_INIT;
    }
    S.main_ts = PyThreadState_Get();
    S.sampler_ts = NULL;
    S.owner_pid = getpid();
    S.peek_available = safe_read_available();
    S.n_cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (S.n_cpus < 1) {
        S.n_cpus = 1;
    }
    memset(&S.totals, 0, sizeof S.totals);
    S.last_wall_ns = S.totals.start_wall_ns = clock_wall_ns();
    S.last_process_cpu_ns = S.totals.process_cpu_ns = clock_process_cpu_ns();
    S.last_sampler_cpu_ns = 0;
    S.earlier_samplers_cpu_ns = 0;
    helper_cpu_at_start_ns = last_helper_cpu_ns = atomic_load(&helper_cpu_total_ns);
    S.untracked_carry = 0;
    S.main_tid = pyframe_thread_tid(S.main_ts);
    control_set_main_thread(S.main_tid);
    S.main_schedstat_fd = S.main_tid > 0 ? open_schedstat(S.main_tid) : -1;
    atomic_store(&S.request_main_runq_ns, CLOCK_UNAVAILABLE);
    S.serial = 0;
    /* Baselines for the threads that exist now, so that CPU they used before
     * profiling started is never charged. */
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(S.interp); ts != NULL;
         ts = PyThreadState_Next(ts)) {
        int created;
        table_key key = {pyframe_thread_serial(ts), 0};
        thread_track *t = table_upsert(&S.threads, key, &created);
        uint64_t cpu = clock_thread_cpu_ns(pyframe_thread_tid(ts));
        if (t != NULL) {
            t->running_serial = 0; /* an earlier run's place: its sites may be gone */
        }
        if (t != NULL && cpu != CLOCK_UNAVAILABLE) {
            t->last_wall_ns = S.last_wall_ns;
            t->last_cpu_ns = cpu;
            t->tid = pyframe_thread_tid(ts);
            (void)runq_since(t, t->tid, 1);
            S.totals.threads_seen++;
        }
    }
    atomic_store(&S.request_pending, 0);
    S.suspended_for_fork = 0;
    /* Paused from the start: --off, a command given to the run before this
     * process started, or a fork of a paused process (control_begin). */
    S.paused = !control_wanted();
    S.paused_since_ns = S.last_wall_ns;
    control_set_paused(S.paused);
    if (forks_register(stop_for_fork, start_after_fork) != 0) {
        return -1;
    }
    int rc = launch_thread();
    if (rc != 0) {
        forks_unregister(stop_for_fork);
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    S.active = 1;
    return 0;
}

void sampler_stop(void)
{
    wait_for_other_join();
    if (!S.active) {
        return;
    }
    if (S.thread_started) {
        (void)join_thread();
    }
    if (getpid() == S.owner_pid) {
        /* Commands that came before the stop and were not acted on yet, at
         * their times: `pyrometer attach` ends its window with a pause, and
         * the thread that stops the run may get the GIL before the sampler
         * thread could act on it. */
        take_commands();
    }
    place_held_of_gone(1); /* the CPU measured so far, none of it lost */
    forks_unregister(stop_for_fork);
    close_main_schedstat();
    S.active = 0;
    S.suspended_for_fork = 0;
    S.totals.stop_wall_ns = clock_wall_ns();
    S.totals.paused_at_end_ns = 0;
    S.totals.process_cpu_at_pause_ns = 0;
    if (S.paused) {
        S.totals.paused_at_end_ns = delta(S.totals.stop_wall_ns, S.paused_since_ns);
        S.totals.process_cpu_at_pause_ns = delta(S.process_cpu_at_pause_ns, S.totals.process_cpu_ns);
        S.totals.paused_ns += S.totals.paused_at_end_ns;
        S.paused = 0;
    }
    S.totals.process_cpu_ns = delta(clock_process_cpu_ns(), S.totals.process_cpu_ns);
    S.totals.sampler_cpu_ns = S.earlier_samplers_cpu_ns + S.last_sampler_cpu_ns + helper_cpu_since_start();
}

int sampler_running(void)
{
    return S.active;
}

void sampler_get_totals(sampler_totals *out)
{
    *out = S.totals;
    uint64_t end = S.active ? clock_wall_ns() : S.totals.stop_wall_ns;
    out->stop_wall_ns = end;
    if (S.active) {
        /* While running the totals hold the process's CPU clock at the start
         * (sampler_stop makes it the difference): a profile written before the
         * stop (os._exit, exec, a termination signal, a child's end) needs the
         * CPU used so far. */
        out->process_cpu_ns = delta(clock_process_cpu_ns(), S.totals.process_cpu_ns);
        out->sampler_cpu_ns = S.earlier_samplers_cpu_ns + S.last_sampler_cpu_ns + helper_cpu_since_start();
    }
    if (S.active && S.paused) {
        out->paused_at_end_ns = delta(end, S.paused_since_ns);
        out->paused_ns += out->paused_at_end_ns;
    }
    out->memory_bytes = table_memory_bytes(&S.threads);
    out->unit_ns = S.totals.main_live_units
                       ? (double)S.totals.main_live_ns / (double)S.totals.main_live_units
                       : 0.0;
    /* A ratio estimator per kind: the units' CPU shares add up to the main
     * thread's measured CPU before its requests, and likewise off CPU and on the
     * run queue, so that the estimated time's totals are the measured ones and
     * only their split among lines is estimated.  With one unit for all kinds the
     * total was off whenever the share observed at the answer (the request's
     * delay, for a native call) differed from the share before it on average: a
     * main thread starting threads (blocked, then briefly on CPU when it
     * answers) had 2.3 s of CPU estimated for 0.3 s measured.  A kind with less
     * than one unit's worth of estimates keeps the common unit (its ratio would
     * rest on too little). */
    out->unit_cpu_ns = S.totals.est_cpu_units >= 1.0
                           ? (double)S.totals.main_live_cpu_ns / S.totals.est_cpu_units
                           : out->unit_ns;
    out->unit_off_ns = S.totals.est_off_units >= 1.0
                           ? (double)S.totals.main_live_off_ns / S.totals.est_off_units
                           : out->unit_ns;
    out->unit_runq_ns = S.totals.est_runq_units >= 1.0
                            ? (double)S.totals.main_live_runq_ns / S.totals.est_runq_units
                            : out->unit_ns;
    /* The CPU of one unit can never exceed its wall time: a ratio above the
     * common unit comes from CPU the estimates did not see (measured outside
     * them), and would scale every misjudged window up with it.  Measured on the
     * 70/30 split program: the native share read 0.717-0.747 (truth 0.700) with
     * the ratio alone, 0.688-0.737 with it capped, as before the ratio; the
     * threads-starting case it was made for has a ratio below the unit. */
    if (out->unit_cpu_ns > out->unit_ns) {
        out->unit_cpu_ns = out->unit_ns;
    }
    /* Over the time sampled: none is taken while paused. */
    out->mean_interval_ns =
        S.totals.snapshots
            ? (double)delta(delta(end, S.totals.start_wall_ns), out->paused_ns) / (double)S.totals.snapshots
            : 0.0;
}

void sampler_release(void)
{
    forget_all_tracks();
    if (S.threads.slots != NULL) {
        table_release(&S.threads);
    }
}
