/* The rules that charge a window of a thread's time to a line: the main
 * thread's answer to a request and its time away, another thread's window by
 * its peek, and CPU held until a thread is seen running (state.h: the rooms). */
#include "state.h"
#include "../common/clock.h"
#include "../profile/codes.h"
#include "../profile/stacks.h"

/* The sums a location charges into; NULL when memory ran out. */
static cpu_sums *sums_at(const location *loc)
{
    if (!loc->ok) {
        return NULL;
    }
    if (loc->site == SITE_NONE) {
        return &sampler.totals.unattributed;
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

void charge(const location *loc, uint64_t wall_ns, uint64_t cpu_ns, uint64_t runq_ns,
            double core_fraction)
{
    cpu_sums *into = sums_at(loc);
    if (into == NULL) {
        return;
    }
    cpu_window w = {wall_ns, cpu_ns, runq_ns, loc->native, loc->loop_idle, sampler.gil_alone};
    cpu_sums_add(into, &w, !sampler.options.virtual_time, core_fraction);
    cpu_sums *stack = stack_sums_at(loc);
    if (stack != NULL) {
        cpu_sums_add(stack, &w, !sampler.options.virtual_time, core_fraction);
    }
}

void charge_quiet(const location *loc, uint64_t wall_ns, uint64_t cpu_ns, uint64_t runq_ns, double core_fraction,
                  double parts[CPU_VARS])
{
    cpu_sums *into = sums_at(loc);
    if (into == NULL) {
        return;
    }
    cpu_window w = {wall_ns, cpu_ns, runq_ns, loc->native, loc->loop_idle, sampler.gil_alone};
    double added[CPU_VARS];
    cpu_sums_add_parts(into, &w, !sampler.options.virtual_time, core_fraction, added);
    for (int k = 0; k < CPU_VARS; k++) {
        parts[k] += added[k];
    }
    cpu_sums *stack = stack_sums_at(loc);
    if (stack != NULL) {
        cpu_sums_add_parts(stack, &w, !sampler.options.virtual_time, core_fraction, added);
    }
}

void charge_variance(const location *loc, const double var[CPU_VARS])
{
    cpu_sums *into = sums_at(loc);
    for (int k = 0; into != NULL && k < CPU_VARS; k++) {
        into->var[k] += var[k];
    }
}

/* CPU time alone, to a location's line and stack (cpu_sums_add_cpu). */
void charge_cpu(const location *loc, uint64_t ns, int native, double core_fraction)
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
    uint64_t scaled = (uint64_t)sampler.busy_threads * RUNNING_FRESH_PER_THREAD;
    return scaled > RUNNING_FRESH ? scaled : RUNNING_FRESH;
}

/* A thread's held CPU, charged to loc (a place where it was seen running, or
 * its last parked place when no such place came in time). */
void place_held(thread_track *t, const location *loc)
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
        t->held_serial = sampler.serial;
    }
    t->held_ns += used;
    t->held_busy_ns += core_fraction * (double)used;
    t->held_at = *parked;
    sampler.holding = 1;
    if (sampler.serial - t->held_serial > running_fresh()) {
        place_held(t, parked); /* seen running too seldom: where it waits, as before */
    }
}

/* Whether another thread was waiting, for the GIL or for a CPU, at the request
 * (charge_other_thread): loc is where it is located, in_call its kind there. */
static int waited_at_request(PyThreadState *ts, const thread_peek *peek, const location *loc, int in_call,
                             int passed_over)
{
    const pyframe_peeked *at = peek != NULL ? &peek->at : NULL;
    if (at != NULL && loc->ok && peek->gil_wait == THREAD_WAIT_IN_SPAN) {
        /* Asleep on the GIL at the request (thread_wait.h): waiting for it,
         * even on a call (handed over as the call returned). */
        return 1;
    } else if (at != NULL && loc->ok && in_call && peek->held_gil && peek->on_cpu == 0) {
        /* Holding the GIL in a call, but off its CPU: preempted there, waiting
         * for a CPU.  A busy machine preempts a thread where the scheduler
         * first sees its slice is spent, which is at a tick or in a system
         * call that reads the scheduler's clock (time.thread_time): with two
         * busy processes beside it, a loop testing time.thread_time() every
         * 0.4 ms had 16-31% of its CPU read as native time on that call
         * (truth: 0.2%). */
        return 1;
    } else if (at == NULL && passed_over && loc->ok && !in_call) {
        /* It ran, but other threads took the peeks: not known to have waited
         * at the request, but parked now, where a thread that waits for the
         * GIL stands, and never where its CPU went by more than its share of
         * the time (the loop's head took half of twelve threads' CPU). */
        pyframe now = pyframe_innermost(ts);
        const code_info *info = now != NULL ? codes_lookup(pyframe_code(now)) : NULL;
        return info != NULL && codes_python_at(info, pyframe_lasti(now));
    } else if (at != NULL && loc->ok && !in_call) {
        /* Parked at the request: at an instruction where bytecode parks, in
         * the frame it stands in now (it may have run a little since, if it
         * had the GIL before this snapshot: to the same jump, or another). */
        pyframe now = pyframe_innermost(ts);
        pyframe_position seen = peeked_position(at, 0);
        const code_info *info = now != NULL ? codes_lookup(pyframe_code(now)) : NULL;
        return info != NULL && seen.frame == (uintptr_t)now && seen.code == (uintptr_t)pyframe_code(now) &&
               codes_python_at(info, seen.lasti);
    }
    return 0;
}

/* Whether a thread that was not waiting at the request, standing in a call
 * without the GIL, spent its window's time off the CPU waiting for the GIL
 * rather than blocked in a call of its own (system time).  Read as system
 * time, a thread calling a C function that keeps the GIL, beside a Python
 * loop, had 1-6% of its time (0.02-0.12 s in 2 s) read as system on 3.10
 * (truth: none), from two or three windows of 10-46 ms a run:
 * - peeked, found on its CPU (or runnable) but not holding the GIL, and last
 *   found asleep on the GIL: it has just left that wait (woken, on its way to
 *   taking the GIL);
 * - not peeked, in its first window: asleep on the GIL now, at the snapshot,
 *   which holds the GIL.  One read of /proc (a transient descriptor, above
 *   the program's range: fd_aside), once in a thread's life at most.
 * before: what its peeks found it blocked in until this one (last_block). */
static int waited_for_gil_in_call(const thread_track *t, const thread_peek *peek, int before)
{
    if (peek != NULL) {
        return peek->state == THREAD_STATE_RUNNING && !peek->held_gil && before == THREAD_STATE_ON_SPAN;
    }
    if (t->seen_in != 0) {
        /* Not its first window (more threads ran than there are peeks): no
         * read, or an idle pool of fifty threads would cost fifty opens a
         * snapshot. */
        return 0;
    }
    thread_wait_file f = THREAD_WAIT_FILE_INIT;
    int now = thread_state_in(&f, t->tid, sampler.gil_start, sampler.gil_size);
    thread_wait_close(&f);
    return now == THREAD_STATE_ON_SPAN;
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
location charge_other_thread(PyThreadState *ts, thread_track *t, const thread_peek *peek,
                             int passed_over, uint64_t wall, uint64_t used, uint64_t runq,
                             double core_fraction)
{
    const pyframe_peeked *at = peek != NULL ? &peek->at : NULL;
    location loc = locate(ts, 0, 0, 0, STANDING_UNKNOWN, at);
    const location *origin = loc.ok && loc.site == SITE_NONE && used > 0 ? thread_origin(ts) : NULL;
    if (origin != NULL) {
        /* No frame of the program on its stack, but started from one of its
         * lines (origins.c): the CPU it uses is that line's; its time off the
         * CPU (an idle pool's wait for work) stays unattributed. */
        charge(&loc, wall - used, 0, runq, core_fraction);
        charge_cpu(origin, used, loc.native, core_fraction);
        t->cpu_at = *origin;
        t->cpu_at.native = loc.native;
        return loc;
    }
    int in_call = loc.native; /* where it stood at the request (or now) is a call */
    int waiting = waited_at_request(ts, peek, &loc, in_call, passed_over);
    int block_before = t->last_block;
    if (peek != NULL && (peek->state == THREAD_STATE_ON_SPAN || peek->state == THREAD_STATE_BLOCKED)) {
        t->last_block = peek->state;
    }
    if (!waiting) {
        if (in_call && !sampler.gil_alone && used < wall &&
            ((peek != NULL && peek->held_gil) || waited_for_gil_in_call(t, peek, block_before))) {
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
        t->cpu_at = loc;
        /* Seen running: at bytecode, or in a call it held the GIL in, on its CPU. */
        if (at != NULL && loc.ok && used > 0 && (!in_call || (peek->held_gil && peek->on_cpu == 1))) {
            t->running = loc;
            t->running_serial = sampler.serial;
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
    if (used > 0 && t->running_serial != 0 && sampler.serial - t->running_serial <= running_fresh()) {
        charge(&off, wall - used, 0, runq, core_fraction);
        charge_cpu(&t->running, used, t->running.native, core_fraction);
        place_held(t, &t->running);
        t->cpu_at = t->running;
    } else if (used > 0 && in_call) {
        charge(&off, wall - used, 0, runq, core_fraction);
        charge_cpu(&loc, used, 1, core_fraction);
        t->cpu_at = loc;
    } else if (used > 0) {
        charge(&off, wall - used, 0, runq, core_fraction);
        hold(t, &off, used, core_fraction);
        t->cpu_at = off;
    } else {
        charge(&off, wall, used, runq, core_fraction);
    }
    return loc;
}

/* Whether a look after t0 found the main thread moved on from where t0 saw it
 * (second_look), at a moment before `now`: then *where is the place that look
 * saw (read as the answer reads t0's), *moved_cpu the main thread's CPU clock
 * at the move, and the move's time is returned; else 0. */
static uint64_t moved_on_before(PyThreadState *ts, uint64_t now, uint64_t cpu, location *where,
                                uint64_t *moved_cpu, int *gil_wait)
{
    pyframe_peeked there;
    int standing = STANDING_UNKNOWN;
    uint64_t moved = 0;
    /* A whole copy, or none: the sampler thread may be storing a newer look
     * (it is preempted mid-way seldom; then this answer does without). */
    for (int tries = 0; tries < 8; tries++) {
        unsigned seq = atomic_load(&sampler.moved_seq);
        if (seq & 1u) {
            continue;
        }
        moved = atomic_load(&sampler.moved_wall_ns);
        standing = load_look(&sampler.moved_at, &there);
        *moved_cpu = atomic_load(&sampler.moved_main_cpu_ns);
        *gil_wait = atomic_load(&sampler.moved_gil_wait) == THREAD_WAIT_IN_SPAN;
        if (atomic_load(&sampler.moved_seq) == seq) {
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

/* The main thread's window at its answer, in two parts: live, from its last
 * snapshot to the request (t0), for which one unit is estimated; dead, from t0
 * (or from the sampler thread's look meanwhile) to the answer, measured. */
typedef struct {
    uint64_t t0, cpu_t0; /* the request, on both clocks */
    int looked_meanwhile; /* the sampler thread looked while the thread was away */
    uint64_t dead_from, dead_cpu_from;
    uint64_t delay; /* from t0 to the answer */
    uint64_t dead, dead_cpu, dead_runq;
    uint64_t live, live_cpu, live_runq;
} answer_window;

static answer_window split_answer(const thread_track *t, uint64_t now, uint64_t cpu, uint64_t runq_before,
                                  uint64_t runq_now)
{
    answer_window a;
    a.t0 = atomic_load(&sampler.request_wall_ns);
    a.cpu_t0 = atomic_load(&sampler.request_main_cpu_ns);
    a.dead_from = a.t0;
    a.dead_cpu_from = a.cpu_t0;
    /* The sampler thread looked while the main thread was away: it charged the
     * time before the request and part of the wait; only the rest is left. */
    a.looked_meanwhile = t->last_wall_ns > a.t0;
    if (a.looked_meanwhile) {
        a.dead_from = t->last_wall_ns;
        a.dead_cpu_from = t->last_cpu_ns;
    }
    a.delay = delta(now, a.t0);
    a.dead = delta(now, a.dead_from);
    a.dead_cpu = delta(cpu, a.dead_cpu_from);
    a.dead_cpu = a.dead_cpu > a.dead ? a.dead : a.dead_cpu;
    a.live = delta(a.t0, t->last_wall_ns);
    a.live_cpu = delta(a.cpu_t0, t->last_cpu_ns);
    a.live_cpu = a.live_cpu > a.live ? a.live : a.live_cpu;
    /* The run-queue wait of each part: read at t0 too by the sampler thread
     * (a late answer on a busy machine is mostly waiting for a CPU); where it
     * could not be, each part gets its share of the window's by wall time. */
    uint64_t runq_t0 = atomic_load(&sampler.request_main_runq_ns);
    if (runq_now == CLOCK_UNAVAILABLE) {
        a.dead_runq = a.live_runq = 0;
    } else if (runq_t0 != CLOCK_UNAVAILABLE && runq_t0 >= runq_before && runq_t0 <= runq_now) {
        a.dead_runq = runq_now - (a.looked_meanwhile ? runq_before : runq_t0);
        a.live_runq = runq_t0 - runq_before;
    } else {
        uint64_t window = delta(now, t->last_wall_ns);
        double share = window > 0 ? (double)delta(runq_now, runq_before) / (double)window : 0.0;
        a.dead_runq = (uint64_t)(share * (double)a.dead);
        a.live_runq = (uint64_t)(share * (double)a.live);
    }
    return a;
}

/* The estimated part: one unit, on and off CPU in the proportion measured for
 * the state it observed.  The unit's length is the measured time before
 * requests divided by the number of requests (a ratio estimator: exact
 * totals, and no bias from the sampler thread waking later than asked).
 * A native call's state is what the request's delay saw (blocked or
 * running at t0), where the delay is long enough to measure it: under
 * NATIVE_DELAY_NS the two clocks, read in turn by two threads, skew the
 * fraction down (a loop of time.process_time() calls, on its CPU 99% of
 * the time, read 0.72-0.96 on 3.14, and its line's CPU with it: 5-28% of
 * the main thread's CPU was never charged, the unit for CPU being capped
 * at the common one).  A prompt answer says the thread was running; the
 * window's own measured share says how much. */
static void charge_estimate(const location *loc, const answer_window *a, uint64_t cpu, double core_fraction)
{
    uint64_t live = a->live, live_cpu = a->live_cpu;
    double runq_share = live > 0 ? (double)a->live_runq / (double)live : 0.0;
    int measurable = a->delay >= NATIVE_DELAY_NS;
    double on_cpu = loc->native && measurable ? (double)delta(cpu, a->cpu_t0) / (double)a->delay
                                              : (live > 0 ? (double)live_cpu / (double)live : 1.0);
    on_cpu = on_cpu > 1.0 ? 1.0 : on_cpu;
    if (sampler.options.virtual_time) {
        /* Off-CPU time is not counted; the unit then measures CPU time only. */
        live = live_cpu;
        on_cpu = 1.0;
        runq_share = 0.0;
    }
    sampler.totals.main_live_ns += live;
    sampler.totals.main_live_units++;
    /* The same split, by kind, of what was measured and of what was estimated
     * (the clamping of cpu_sums_add_estimate), so that each kind's unit can be
     * its own ratio (sampler_get_totals). */
    uint64_t live_runq_kept = sampler.options.virtual_time ? 0 : a->live_runq;
    uint64_t live_off = live - live_cpu;
    live_runq_kept = live_runq_kept > live_off ? live_off : live_runq_kept;
    sampler.totals.main_live_cpu_ns += live_cpu;
    sampler.totals.main_live_runq_ns += live_runq_kept;
    sampler.totals.main_live_off_ns += live_off - live_runq_kept;
    double est_runq = runq_share < 0.0 ? 0.0 : runq_share > 1.0 - on_cpu ? 1.0 - on_cpu : runq_share;
    sampler.totals.est_cpu_units += on_cpu;
    sampler.totals.est_runq_units += est_runq;
    sampler.totals.est_off_units += 1.0 - on_cpu - est_runq;
    cpu_sums *into = sums_at(loc);
    if (into != NULL) {
        cpu_sums_add_estimate(into, loc->native, loc->loop_idle, sampler.gil_alone, on_cpu, runq_share, core_fraction);
        cpu_sums *stack = stack_sums_at(loc);
        if (stack != NULL) {
            cpu_sums_add_estimate(stack, loc->native, loc->loop_idle, sampler.gil_alone, on_cpu, runq_share,
                                  core_fraction);
        }
    }
}

/* A measured part of the main thread's answer window: where the thread slept
 * on the GIL at t0 (another thread held it: a worker's long native call that
 * keeps it, while the main thread returns from a lock or I/O), its time off
 * the CPU is GIL wait, even standing in a call, as another thread's is
 * (waited_at_request).  Read as system time, the main thread's `t.start()`
 * beside a worker running a 0.4 s operator held 38% system and no GIL wait. */
static void charge_answer_part(const location *loc, int gil_wait, uint64_t wall, uint64_t cpu, uint64_t runq,
                               double core_fraction)
{
    if (!gil_wait || !loc->native || sampler.gil_alone || cpu >= wall) {
        charge(loc, wall, cpu, runq, core_fraction);
        return;
    }
    location off = *loc;
    off.native = 0;
    charge(&off, wall - cpu, 0, runq, core_fraction);
    charge_cpu(loc, cpu, 1, core_fraction);
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
location charge_main_answer(PyThreadState *ts, thread_track *t, uint64_t now, uint64_t cpu, uint64_t runq_before,
                            uint64_t runq_now, double core_fraction)
{
    answer_window a = split_answer(t, now, cpu, runq_before, runq_now);
    int gil_wait = atomic_load(&sampler.request_main_gil_wait) == THREAD_WAIT_IN_SPAN;
    pyframe_peeked at;
    int standing = load_look(&sampler.request_at, &at);
    location loc = locate(ts, 1, a.delay, delta(cpu, a.cpu_t0), standing, at.frame != 0 ? &at : NULL);
    location later;
    uint64_t moved_cpu = 0;
    int later_gil_wait = 0;
    uint64_t moved = moved_on_before(ts, now, cpu, &later, &moved_cpu, &later_gil_wait);
    if (moved != 0) {
        /* The wait up to the latest look that found the thread moved on is
         * t0's; from that look on it is where the look saw it (second_look). */
        uint64_t early = delta(moved, a.dead_from);
        uint64_t early_cpu = delta(moved_cpu, a.dead_cpu_from);
        early_cpu = early_cpu > early ? early : early_cpu;
        early_cpu = early_cpu > a.dead_cpu ? a.dead_cpu : early_cpu;
        uint64_t early_runq = a.dead > 0 ? (uint64_t)((double)a.dead_runq * ((double)early / (double)a.dead)) : 0;
        charge_answer_part(&loc, gil_wait, early, early_cpu, early_runq, core_fraction);
        charge_answer_part(&later, later_gil_wait, a.dead - early, a.dead_cpu - early_cpu, a.dead_runq - early_runq,
                           core_fraction);
    } else {
        charge_answer_part(&loc, gil_wait, a.dead, a.dead_cpu, a.dead_runq, core_fraction);
    }
    if (!a.looked_meanwhile) {
        charge_estimate(&loc, &a, cpu, core_fraction);
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
location charge_main_away(PyThreadState *ts, uint64_t cpu, uint64_t wall, uint64_t used, uint64_t runq,
                          double core_fraction)
{
    location here = locate(ts, 0, 0, 0, STANDING_UNKNOWN, NULL);
    pyframe_peeked at;
    int standing = load_look(&sampler.request_at, &at);
    location then = here;
    if (used > 0 && at.frame != 0) {
        then = locate(ts, 0, 0, 0, STANDING_UNKNOWN, &at);
    }
    /* Asleep on the GIL where the sampler thread's latest look found it (t0's,
     * or the latest that found it moved: second_look): another thread had it. */
    int gil_wait = atomic_load(atomic_load(&sampler.moved_wall_ns) != 0 ? &sampler.moved_gil_wait
                                                                        : &sampler.request_main_gil_wait) ==
                   THREAD_WAIT_IN_SPAN;
    if (!then.ok || (then.site == here.site && then.lineno == here.lineno && then.stack == here.stack)) {
        charge_answer_part(&here, gil_wait, wall, used, runq, core_fraction);
        return here;
    }
    if (standing == STANDING_IN_CALL) {
        then.native = 1;
    } else if (standing == STANDING_PYTHON) {
        then.native = delta(cpu, atomic_load(&sampler.request_main_cpu_ns)) > NATIVE_DELAY_NS;
    }
    charge_answer_part(&here, gil_wait, wall - used, 0, runq, core_fraction);
    charge_cpu(&then, used, then.native, core_fraction);
    return here;
}

/* An ended thread's last CPU and run-queue wait (ends.c): where its last
 * window's CPU went, of that kind (charge_other_thread's rules, cpu_at), and
 * what it held, there.  Its time blocked since, of a kind no peek saw, is
 * charged nowhere.  0 when no window of its CPU went anywhere (then it is
 * untracked CPU). */
int charge_ended_thread(thread_track *t, uint64_t used, uint64_t runq, double core_fraction)
{
    if (!t->cpu_at.ok) {
        return 0;
    }
    if (used + runq > 0) {
        charge(&t->cpu_at, used + runq, used, runq, core_fraction);
    }
    place_held(t, &t->cpu_at);
    return 1;
}

/* The held CPU (hold) of the threads this snapshot did not meet (gone), or of
 * every thread (all: the sampler stops), charged where each last parked. */
void place_held_of_gone(int all)
{
    if (!sampler.holding || sampler.threads.slots == NULL) {
        return;
    }
    int left = 0;
    size_t cursor = 0;
    table_key key;
    thread_track *t;
    while ((t = table_next(&sampler.threads, &cursor, &key)) != NULL) {
        if (t->held_ns == 0) {
            continue;
        }
        if (all || t->seen_in != sampler.serial) {
            place_held(t, &t->held_at);
        } else {
            left = 1;
        }
    }
    sampler.holding = left;
}
