/* One snapshot, with the GIL held, on whichever thread takes it: the window
 * since the last one, each thread's share of it and the rule that charges it,
 * the threads to peek at next (state.h: the rooms). */
#include "state.h"
#include "../common/clock.h"
#include "../profile/codes.h"
#include "../profile/line_timeline.h"
#include "../profile/stacks.h"

static void snapshot_unsuspended(enum snapshot_source source, enum snapshot_mode mode,
                                 const command_time *at);

/* A snapshot is the profiler's work, on whichever thread takes it: the code
 * objects it meets for the first time are registered, which calls CPython, which
 * allocates (3.12+ copies the bytecode, 3.11 caches a copy on the code object).
 * Counted, those were samples of the program's, charged to the line the thread
 * stood on: 1 MB over 100 large functions in the test. */
void snapshot_in(enum snapshot_source source, enum snapshot_mode mode, const command_time *at)
{
    if (sampler.closed) {
        return; /* the stop's own path (sampler_charge_last_window) */
    }
    own_work_begin();
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
    own_work_end();
}

void snapshot(enum snapshot_source source)
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
        return sampler.takeover_peeks;
    }
    if (source == ANSWERED_BY_MAIN && atomic_load(&sampler.request_pending)) {
        return sampler.request_peeks;
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
    w->sampler_tid = atomic_load(&sampler.sampler_tid);
    w->sampler_cpu = w->sampler_tid ? clock_thread_cpu_ns(w->sampler_tid) : CLOCK_UNAVAILABLE;
    if (w->sampler_cpu == CLOCK_UNAVAILABLE) {
        w->sampler_cpu = sampler.last_sampler_cpu_ns;
    }
    w->window = delta(w->now, sampler.last_wall_ns);
    uint64_t process_used = delta(w->process_cpu, sampler.last_process_cpu_ns);
    uint64_t sampler_used = delta(w->sampler_cpu, sampler.last_sampler_cpu_ns);
    uint64_t helper_cpu = clock_helpers_cpu_ns();
    w->program_used = delta(process_used, sampler_used + delta(helper_cpu, sampler.last_helper_cpu_ns));
    sampler.last_helper_cpu_ns = helper_cpu;
    w->core_fraction = 0.0;
    if (w->window > 0) {
        double fraction = (double)w->program_used / ((double)w->window * (double)sampler.n_cpus);
        w->core_fraction = fraction > 1.0 ? 1.0 : fraction;
    }
}

/* Whether any other thread of the program could have held the GIL. */
static int gil_alone(pid_t sampler_tid)
{
    int program_threads = 0;
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(sampler.interp); ts != NULL && program_threads < 2;
         ts = PyThreadState_Next(ts)) {
        pid_t tid = pyframe_thread_tid(ts);
        program_threads += tid > 0 && ts != sampler.sampler_ts && tid != sampler_tid;
    }
    return program_threads <= 1;
}

/* Whether the main thread's answer at CPU clock cpu measured one instruction's
 * native work: where t0 saw it at bytecode, not in a call, it used more than
 * NATIVE_DELAY_NS of CPU before it answered (a numpy operator, a large list's
 * `*`); *at: that place. */
static int long_op_answered(uint64_t cpu, pyframe_position *at)
{
    if (!atomic_load(&sampler.request_pending)) {
        return 0;
    }
    pyframe_peeked seen;
    int standing = load_look(&sampler.request_at, &seen);
    *at = peeked_position(&seen, 0);
    return standing == STANDING_PYTHON && at->frame != 0 &&
           delta(cpu, atomic_load(&sampler.request_main_cpu_ns)) > NATIVE_DELAY_NS;
}

/* Where thread ts's window is charged, by whichever rule fits the snapshot
 * (runq_before: its run-queue clock at the window's start; runq_now: now). */
static location charge_window(const snapshot_walk *w, PyThreadState *ts, thread_track *t, int fresh,
                              uint64_t cpu, uint64_t wall, uint64_t used, uint64_t runq,
                              uint64_t runq_before, uint64_t runq_now)
{
    const command_time *at = w->at;
    if (ts == sampler.main_ts && w->mode != SNAPSHOT_CHARGE) {
        spread_flush(w->core_fraction, NULL); /* the time carried before the pause is charged, not the pause's */
    }
    if (w->mode == SNAPSHOT_REBASE) {
        return w->main_location; /* not charged: only the baselines move */
    }
    if (w->mode == SNAPSHOT_PAUSE && ts == sampler.main_ts) {
        if (at != NULL && at->main_cpu_ns != CLOCK_UNAVAILABLE && atomic_load(&sampler.request_pending) &&
            atomic_load(&sampler.request_wall_ns) <= at->wall_ns) {
            /* A pause from outside, with a request made before it was seen
             * (the sampler thread makes one when it sees a command): the
             * main thread is charged as if it had answered then, so the
             * time of a long native call up to the pause is its. */
            return charge_main_answer(ts, t, at->wall_ns, at->main_cpu_ns, fresh ? at->main_runq_ns : runq_before,
                                      at->main_runq_ns, w->core_fraction);
        }
        if (at != NULL || sampler.peeks.period_ns == 0) {
            return locate(ts, 0, 0, 0, STANDING_UNKNOWN, NULL); /* dropped; for the untracked time */
        }
        /* The program's own pause (pyrometer.stop(), a profiled region's
         * end): spread below, as the run's stop is.  Dropped, 60 regions of
         * 5 ms under --off read 0.06-0.09 s of their 0.30. */
    }
    location spread;
    if (ts == sampler.main_ts && sampler.peeks.period_ns > 0) {
        pyframe_position long_op;
        int measured = w->source == ANSWERED_BY_MAIN && long_op_answered(cpu, &long_op);
        /* The last window before the program's own pause, or before the
         * run's stop (asked for at `at`: the peeks after it are the stop's
         * own path): nothing is carried past it. */
        int last = w->mode == SNAPSHOT_PAUSE || at != NULL;
        uint64_t until = at != NULL && at->wall_ns < w->now ? at->wall_ns : w->now;
        if (charge_main_spread(ts, t, until, wall, used, runq, w->core_fraction, measured ? &long_op : NULL,
                               atomic_load(&sampler.request_wall_ns), &spread)) {
            if (last) {
                spread_flush(w->core_fraction, &spread);
            }
            return spread; /* over the peeks made in the window (spread.c) */
        }
    }
    if (w->source == ANSWERED_BY_MAIN && ts == sampler.main_ts) {
        return charge_main_answer(ts, t, w->now, cpu, fresh ? runq_now : runq_before, runq_now, w->core_fraction);
    }
    if (ts == sampler.main_ts && atomic_load(&sampler.request_pending) &&
        atomic_load(&sampler.request_wall_ns) > t->last_wall_ns) {
        return charge_main_away(ts, cpu, wall, used, runq, w->core_fraction);
    }
    return charge_other_thread(ts, t, ts == sampler.main_ts ? NULL : peeked_for(ts, w->source),
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
    thread_track *t = table_upsert(&sampler.threads, key, &created);
    if (t == NULL) {
        return;
    }
    uint64_t wall, used;
    int fresh = created || t->tid != tid;
    if (fresh && !created) {
        place_held(t, &t->held_at);
        forget_track(t); /* another thread's file */
    }
    t->tid = tid;
    uint64_t runq_before = t->last_runq_ns;
    uint64_t runq = runq_since(t, tid, fresh);
    uint64_t runq_now = t->schedstat > 0 ? t->last_runq_ns : CLOCK_UNAVAILABLE;
    if (fresh) {
        /* First sight (threads that existed at start were seen by
         * sampler_start): the thread started within this window, so all of
         * its CPU so far (at most the window) is new, and its window begins
         * when its start began, where that was noted (origins.c).
         * From the window's start, the time before the thread existed was
         * charged as time off the CPU where it stands: up to a window (10-46
         * ms here) of system time or GIL wait that did not happen, for every
         * thread started. */
        uint64_t begun = created ? thread_begun_ns(ts) : 0;
        wall = begun != 0 && begun < w->now && w->now - begun < w->window ? w->now - begun : w->window;
        used = cpu < wall ? cpu : wall;
        if (created && runq_now != CLOCK_UNAVAILABLE && cpu <= wall) {
            /* Started within the window (all its CPU fits): its run-queue
             * wait so far is the window's too.  Read as none, that wait was
             * time off the CPU at bytecode, GIL wait: threads started one
             * after another read 3-7% GIL wait where none happened. */
            runq = runq_now < wall - used ? runq_now : wall - used;
        }
        sampler.totals.threads_seen++;
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
    if (created) {
        thread_end_watch(ts);
    }
    if (ts == sampler.main_ts) {
        spread_drop_until(w->now); /* peeks of a window charged by another rule, or none */
    }
    t->passed_over = 0;
    if (ts != sampler.main_ts && used > 0) {
        /* Threads that ran in this window: an idle pool's workers, parked in
         * a call, are where they answer and would take the places. */
        t->passed_over = 1; /* unless chosen for a peek */
        w->busy++;
        choose_peek(w->chosen, &w->n_peek, (uintptr_t)ts, key, t->peek_serial);
    }
    if (ts == sampler.main_ts) {
        w->main_location = loc;
    }
    t->last_wall_ns = w->now;
    t->last_cpu_ns = cpu;
    t->seen_in = sampler.serial;
    const command_time *at = w->at;
    if (w->mode == SNAPSHOT_REBASE && at != NULL && ts == sampler.main_ts && at->main_cpu_ns != CLOCK_UNAVAILABLE &&
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
        thread_track *c = table_find(&sampler.threads, w->chosen[i].key);
        if (c != NULL) {
            c->peek_serial = sampler.serial;
            c->passed_over = 0;
        }
        atomic_store(&sampler.peek_tid[i], c != NULL ? c->tid : 0);
        atomic_store(&sampler.peek_list[i], w->chosen[i].ts);
    }
    for (int i = w->n_peek; i < PEEK_THREADS; i++) {
        atomic_store(&sampler.peek_list[i], 0);
    }
    sampler.busy_threads = w->busy;
}

/* The threads that ended since the last snapshot (ends.c): the CPU each used
 * after it, in this window, where its last window's CPU went; what is left of
 * the window's CPU once they and the live threads have theirs is untracked
 * (charge_untracked).  A pause's window charges none. */
static void charge_ended(snapshot_walk *w)
{
    if (sampler.ended_threads == 0 || sampler.threads.slots == NULL) {
        return;
    }
    sampler.ended_threads = 0;
    size_t cursor = 0;
    table_key key;
    thread_track *t;
    while ((t = table_next(&sampler.threads, &cursor, &key)) != NULL) {
        if (t->ended_cpu_ns == 0) {
            continue;
        }
        if (w->mode != SNAPSHOT_REBASE && t->seen_in != sampler.serial) {
            uint64_t wall = delta(t->ended_wall_ns, t->last_wall_ns);
            uint64_t used = delta(t->ended_cpu_ns, t->last_cpu_ns);
            used = used > wall ? wall : used;
            uint64_t runq = t->ended_runq_ns != CLOCK_UNAVAILABLE && t->ended_runq_ns >= t->last_runq_ns
                                ? t->ended_runq_ns - t->last_runq_ns
                                : 0;
            runq = runq > wall - used ? wall - used : runq;
            if (charge_ended_thread(t, used, runq, w->core_fraction)) {
                w->threads_used += used;
            }
        }
        t->last_cpu_ns = t->ended_cpu_ns;
        t->ended_cpu_ns = 0;
    }
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
    sampler.untracked_carry += (int64_t)w->program_used - (int64_t)w->threads_used;
    if (w->mode == SNAPSHOT_REBASE) {
        sampler.untracked_carry = 0; /* the paused time's */
    }
    if (sampler.untracked_carry > 0) {
        uint64_t untracked = (uint64_t)sampler.untracked_carry;
        sampler.untracked_carry = 0;
        sampler.totals.untracked_native_ns += untracked;
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
    clients_on_snapshot(); /* memory samples and GPU launches queued without the GIL */
    int asyncio_used = awaits_snapshot_begin();

    snapshot_walk w = {.source = source, .mode = mode, .at = at,
                       .main_location = {SITE_NONE, 0, 1, 0, 0, STACKS_ROOT}};
    measure_window(&w);
    sampler.serial++;
    sampler.gil_alone = gil_alone(w.sampler_tid);
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(sampler.interp); ts != NULL; ts = PyThreadState_Next(ts)) {
        pid_t tid = pyframe_thread_tid(ts);
        if (tid <= 0) {
            /* Not running yet (or a 3.10 state without a frame): which thread's
             * CPU it will count is not known, so it gets no window; its first
             * one starts where it is first seen with an id. */
            continue;
        }
        if (ts == sampler.sampler_ts || tid == w.sampler_tid) {
            continue; /* by tid too: its state exists before it first holds the GIL */
        }
        snapshot_thread(&w, ts, tid);
    }
    publish_peeks(&w);
    charge_ended(&w);
    place_held_of_gone(0);
    note_main_line(&w);
    charge_untracked(&w);

    /* Await time is wall time by nature: with --use-virtual-time none is counted. */
    if (asyncio_used && !sampler.options.virtual_time && mode != SNAPSHOT_REBASE) {
        awaits_charge_window(w.window, &sampler.totals.unattributed);
    }

    prune_threads(w.live);
    sampler.last_wall_ns = w.now;
    sampler.last_process_cpu_ns = w.process_cpu;
    sampler.last_sampler_cpu_ns = w.sampler_cpu;
    if (mode == SNAPSHOT_CHARGE) {
        sampler.totals.snapshots++;
        if (source == ANSWERED_BY_MAIN) {
            sampler.totals.main_snapshots++;
        }
    }
    PyErr_Restore(type, value, traceback);
}
