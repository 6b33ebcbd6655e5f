/* The CPU sampler: its thread, the schedule of requests to the main thread,
 * the commands and forks it lives through; start, stop and the totals
 * (state.h: the rooms). */
#include "state.h"
#include "../common/quiet_thread.h"
#include "../common/clock.h"
#include "../common/paused.h"
#include "../control/control.h"
#include "../ending/ending.h"
#include "../forks/forks.h"
#include "../common/safe_read.h"
#include "../common/wake.h"
#include "../profile/codes.h"
#include "../profile/stacks.h"
#include "../periodic/periodic.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* How many intervals the sampler thread waits for an answer, while the main
 * thread holds the GIL, before it takes the GIL itself (sampler_main). */
#define TAKEOVER_PATIENCE 4

/* After a termination signal, the main thread answers a request within
 * microseconds when it runs Python; one that has not answered for this long is
 * blocked or in a call that released the GIL, and the sampler thread writes the
 * profile instead. */
#define ENDING_TAKEOVER_NS (2 * ENDING_POLL_NS)

sampler_state sampler = {.main_schedstat_fd = -1};
_Thread_local int sampler_taking_over;

static sampler_client clients[SAMPLER_CLIENTS];
static int n_clients;

int sampler_add_client(const sampler_client *client)
{
    if (n_clients == SAMPLER_CLIENTS) {
        return -1;
    }
    clients[n_clients++] = *client;
    return 0;
}

static sampler_awaits awaits;

void sampler_set_awaits(const sampler_awaits *with)
{
    awaits = *with;
}

int awaits_snapshot_begin(void)
{
    return awaits.snapshot_begin != NULL ? awaits.snapshot_begin() : 0;
}

int awaits_loop_is_waiting(PyThreadState *ts)
{
    return awaits.loop_waiting != NULL ? awaits.loop_waiting(ts) : 0;
}

int awaits_loop_was_waiting(const uintptr_t *codes, int n)
{
    return awaits.loop_waiting_at != NULL ? awaits.loop_waiting_at(codes, n) : 0;
}

void awaits_charge_window(uint64_t window_ns, cpu_sums *unattributed)
{
    if (awaits.charge != NULL) {
        awaits.charge(window_ns, unattributed);
    }
}

void clients_on_wake(void)
{
    for (int i = 0; i < n_clients; i++) {
        if (clients[i].on_wake != NULL) {
            clients[i].on_wake();
        }
    }
}

void clients_on_snapshot(void)
{
    for (int i = 0; i < n_clients; i++) {
        if (clients[i].on_snapshot != NULL) {
            clients[i].on_snapshot();
        }
    }
}

void own_work_begin(void)
{
    for (int i = 0; i < n_clients; i++) {
        if (clients[i].own_work_begin != NULL) {
            clients[i].own_work_begin();
        }
    }
}

void own_work_end(void)
{
    for (int i = n_clients - 1; i >= 0; i--) {
        if (clients[i].own_work_end != NULL) {
            clients[i].own_work_end();
        }
    }
}

static uint64_t helper_cpu_since_start(void)
{
    return delta(clock_helpers_cpu_ns(), sampler.helper_cpu_at_start_ns);
}

/* A periodic report made on the main thread right after its snapshot is the
 * profiler's work, not the program's: the main thread's next window starts after
 * it, and its CPU is left out of the process's (which feeds the time charged to
 * threads without Python state).  On the sampler thread it is left out anyway. */
static void periodic_on_main(uint64_t now)
{
    uint64_t cpu0 = clock_thread_cpu_ns(sampler.main_tid);
    /* The report is sent with the GIL released: the sampler thread must not take
     * the main thread's time in the send for the program's (sampler_main). */
    atomic_store(&sampler.main_reporting, 1);
    periodic_tick(now);
    atomic_store(&sampler.main_reporting, 0);
    uint64_t cpu1 = clock_thread_cpu_ns(sampler.main_tid);
    if (cpu0 == CLOCK_UNAVAILABLE || cpu1 == CLOCK_UNAVAILABLE) {
        return;
    }
    int created;
    table_key key = {pyframe_thread_serial(sampler.main_ts), 0};
    thread_track *t = table_upsert(&sampler.threads, key, &created);
    if (t != NULL) {
        t->last_wall_ns = clock_wall_ns();
        t->last_cpu_ns = cpu1;
        t->tid = sampler.main_tid;
        t->seen_in = sampler.serial;
    }
    sampler.last_process_cpu_ns += delta(cpu1, cpu0);
    sampler.totals.periodic_cpu_ns += delta(cpu1, cpu0);
}

/* ---- pause and resume (control.h) ----------------------------------------- */

/* GIL held, on any thread.  Brings the sampler to the state control.h wants.
 * A pause charges every window up to it (SNAPSHOT_PAUSE) and then takes no
 * samples; the resume starts every window afresh (SNAPSHOT_REBASE), so that no
 * time in between is charged, and adds the pause to the paused time.  The
 * memory side follows paused_now(): it drops its samples while paused. */
static void apply_control_unlocked(const command_time *at)
{
    int pause = !control_wanted();
    if (pause == sampler.paused || !sampler.active || getpid() != sampler.owner_pid) {
        return;
    }
    uint64_t when = at != NULL ? at->wall_ns : clock_wall_ns();
    if (pause) {
        /* Nothing the memory side samples from here is charged; then what ran
         * up to now is. */
        paused_set(1);
        if (!sampler.suspended_for_fork) {
            snapshot_in(TAKEN_BY_SAMPLER, SNAPSHOT_PAUSE, at);
        }
        sampler.paused = 1;
        sampler.paused_since_ns = when;
        sampler.process_cpu_at_pause_ns = clock_process_cpu_ns();
    } else {
        if (!sampler.suspended_for_fork) {
            snapshot_in(TAKEN_BY_SAMPLER, SNAPSHOT_REBASE, at);
        }
        sampler.totals.paused_ns += delta(when, sampler.paused_since_ns);
        sampler.paused = 0;
        paused_set(0);
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
    if (getpid() == sampler.owner_pid && ending_claim()) {
        ending_run(); /* a termination signal: the profile, then the same death */
    }
    if (atomic_load(&sampler.running) && getpid() == sampler.owner_pid && !ending_signal()) {
        take_commands(); /* before the snapshot: this answer then measures the time after a resume */
    }
    if (atomic_load(&sampler.running) && getpid() == sampler.owner_pid && !ending_signal() && !sampler.paused) {
        int main = PyThreadState_Get() == sampler.main_ts;
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
    atomic_store(&sampler.request_pending, 0);
    return 0;
}

/* ---- the sampler thread ------------------------------------------------------- */

/* Sleeps until end (monotonic) unless sampler_stop() wakes it, or, with watch_ending, a
 * termination signal or a command from outside (control.h) is recorded: their
 * handlers post the wake (wake.h), so the thread acts within microseconds, not
 * at the end of its sleep.  Returns whether to keep going. */
static int wait_for_next_sample(uint64_t end, int watch_ending)
{
    while (atomic_load(&sampler.running)) {
        if (watch_ending && (ending_signal() != 0 || control_pending())) {
            break;
        }
        if (clock_wall_ns() >= end) {
            break;
        }
        (void)wake_wait_until(end); /* a post: look again (it may be left from before) */
    }
    return atomic_load(&sampler.running);
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
    atomic_store(&sampler.request_main_runq_ns, read_runq_fd(sampler.main_schedstat_fd));
    atomic_store(&sampler.request_main_gil_wait, thread_wait_in(&sampler.main_wait, sampler.main_tid,
                                                                sampler.gil_start, sampler.gil_size));
    pyframe_peeked at = {.lasti = -1}; /* frame 0: no position (only a full peek sets it) */
    store_look(&sampler.request_at, main_standing(&at), &at);
    atomic_store(&sampler.moved_wall_ns, 0);
    peek_threads(sampler.request_peeks);
    atomic_store(&sampler.request_wall_ns, clock_wall_ns());
    atomic_store(&sampler.request_main_cpu_ns, clock_thread_cpu_ns(sampler.main_tid));
    sampler.still_wall_ns = atomic_load(&sampler.request_wall_ns);
    sampler.still_main_cpu_ns = atomic_load(&sampler.request_main_cpu_ns);
    atomic_store(&sampler.request_pending, 1);
    if (Py_AddPendingCall(answer_request, NULL) != 0) {
        atomic_store(&sampler.request_pending, 0); /* queue full: try at the next tick */
    } else {
        pyframe_wake_main_thread(sampler.interp);
    }
}

/* The sampler thread, without the GIL: a command from outside was received.  It
 * makes a request (unless one is waiting), so that the main thread acts on it
 * at its next bytecode boundary and its answer measures the time after a
 * resume; then it takes the GIL to act on it itself, for a main thread that is
 * blocked (whichever has the GIL first acts, take_commands). */
static void see_commands(int *have_thread_state, PyGILState_STATE *gil_state)
{
    if (!atomic_load(&sampler.request_pending)) {
        make_request();
    }
    if (!*have_thread_state) {
        *gil_state = PyGILState_Ensure();
        sampler.sampler_ts = PyThreadState_Get();
        *have_thread_state = 1;
    } else {
        PyEval_RestoreThread(sampler.sampler_ts);
    }
    if (atomic_load(&sampler.running)) {
        take_commands();
    }
    PyEval_SaveThread();
}

/* The peeks at the main thread between snapshots (spread.c): PEEKS_PER_INTERVAL
 * a mean interval, one at a random moment in each period of a grid, but never
 * more often than PEEK_PERIOD_MIN_NS apart: a peek costs the sampler thread
 * about 35-45 us of CPU here (a timed wake, 25-33 us on this virtual machine, and
 * 10-16 us of reads), so 3.6-4.5% of a core at the default rate.  Five a mean
 * interval cost half as much, but the window's time divided among fewer
 * peeks carries more of the single look's bias: a loop of 10 ms periods read
 * 0.5-2.4 points off with five, 0.2-0.5 with ten (bench/precision.py).  Chosen by bench/precision.py, which
 * runs the others through PYROMETER_SAMPLER (sampler.h, sampler_peeks). */
#define PEEKS_PER_INTERVAL 10
#define PEEK_PERIOD_MIN_NS 1000000ULL

static sampler_peeks peeks_chosen(uint64_t interval)
{
    uint64_t per = PEEKS_PER_INTERVAL;
    sampler_peeks p = {0, SPACING_JITTERED, SPREAD_LONGEST};
    const char *choices = getenv("PYROMETER_SAMPLER");
    for (const char *c = choices; c != NULL && *c != '\0'; c = strchr(c, ',') ? strchr(c, ',') + 1 : NULL) {
        if (strncmp(c, "peeks=", 6) == 0) {
            per = strtoull(c + 6, NULL, 10);
        } else if (strncmp(c, "spacing=exponential", 19) == 0) {
            p.spacing = SPACING_EXPONENTIAL;
        } else if (strncmp(c, "spacing=regular", 15) == 0) {
            p.spacing = SPACING_REGULAR;
        } else if (strncmp(c, "longest=", 8) == 0) {
            p.longest = strtoull(c + 8, NULL, 10);
            p.longest = p.longest < 1 ? 1 : p.longest;
        }
    }
    if (per > 0) {
        p.period_ns = interval / per;
        p.period_ns = p.period_ns < PEEK_PERIOD_MIN_NS && choices == NULL ? PEEK_PERIOD_MIN_NS : p.period_ns;
    }
    return p;
}

/* When the next peek is due: in the next period of the grid (grid: the start
 * of the period of the last peek), at a random moment in it; a grid fallen
 * behind (the sampler thread held the GIL) starts again now. */
static uint64_t next_peek(uint64_t *grid, uint64_t now, uint64_t *rng, uint64_t periods, uint64_t next_periods)
{
    uint64_t period = sampler.peeks.period_ns * next_periods;
    if (sampler.peeks.spacing == SPACING_EXPONENTIAL) {
        return now + clock_random_interval_ns(period, rng);
    }
    *grid += sampler.peeks.period_ns * periods;
    if (*grid + period <= now) {
        *grid = now;
    }
    if (sampler.peeks.spacing == SPACING_REGULAR) {
        return *grid;
    }
    uint64_t x = *rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *rng = x;
    return *grid + (uint64_t)((double)(x >> 11) / 9007199254740992.0 * (double)period);
}

/* Sleeps until due as wait_for_next_sample does, peeking at the main thread at
 * each peek time before it (not after a termination signal, nor while
 * paused).  Returns whether to keep going. */
static int wait_peeking(uint64_t due, int watch_ending, uint64_t *peek_at, uint64_t *grid, uint64_t *rng,
                        uint64_t *periods)
{
    for (;;) {
        int peeking = sampler.peeks.period_ns > 0 && watch_ending && *peek_at < due;
        uint64_t until = peeking ? *peek_at : due;
        if (!wait_for_next_sample(until, watch_ending)) {
            return 0;
        }
        uint64_t now = clock_wall_ns();
        if (!peeking || now < until) {
            return 1; /* due, or woken early (a signal, a command) */
        }
        uint64_t next_periods = paused_now() ? 1 : spread_peek(*periods);
        *peek_at = next_peek(grid, clock_wall_ns(), rng, *periods, next_periods);
        *periods = next_periods;
    }
}

/* When the next look is due.  The draws are laid end to end from the last due
 * time, not from the end of the last look: a look that had to wait for the GIL
 * (a snapshot taken while the program's threads pass it between them waits
 * 5-15 ms) would otherwise stretch every interval by its wait.  Two threads
 * spinning in one loop, with the main thread in join(), got 28-55 snapshots a
 * second at the default 100 (median 40; now 34-71, median 63), and a loop
 * line's share of the CPU spread over 20-35% in 3 s runs (now 23-29%; truth
 * about 27%; 8 runs each, alternated).  No look comes sooner than a quarter
 * interval after the last one ended (at most ENDING_POLL_NS: an interval can
 * be 10 s, and a termination signal waits on these looks), so one that has
 * fallen behind does not look at once: a look right after a snapshot finds the
 * thread that the GIL went to still where it waited for it (a loop's jump
 * back), and charged there, two such threads had half their CPU on the loop's
 * first line.  The floor also lengthens the draws shorter than it (22% of
 * them): the mean interval is 1.03 times the nominal. */
static uint64_t next_due(uint64_t due, uint64_t now, uint64_t interval, int ending, uint64_t *rng)
{
    if (now >= due) {
        due += ending ? ENDING_POLL_NS : clock_random_interval_ns(interval, rng);
        uint64_t soonest = now + (interval / 4 < ENDING_POLL_NS ? interval / 4 : ENDING_POLL_NS);
        return due < soonest ? soonest : due;
    }
    if (ending && due > now + ENDING_POLL_NS) {
        return now + ENDING_POLL_NS; /* woken by a termination signal: its own pace from now */
    }
    return due; /* woken early by a command: the same due time */
}

/* Whether the main thread has been away from the pending request long enough
 * for the sampler thread to take the GIL and look itself. */
static int time_to_take_over(uint64_t interval, int ending)
{
    uint64_t waited = delta(clock_wall_ns(), atomic_load(&sampler.request_wall_ns));
    if (waited < (ending ? ENDING_TAKEOVER_NS : interval) || atomic_load(&sampler.main_reporting)) {
        return 0;
    }
    if (!ending && waited < TAKEOVER_PATIENCE * interval && pyframe_gil_held_by(sampler.interp, sampler.main_ts)) {
        /* The main thread holds the GIL (a long call that keeps it, or one
         * instruction's long work): taking it would wait for the answer,
         * and with it the looks that follow where the thread goes.  The
         * request is signalled again instead: another thread's GIL
         * handover recomputes the eval breaker without pending calls
         * (pyframe_wake_main_thread), and the attempt to take the GIL,
         * whose drop request raised it again, is not made.  Past
         * TAKEOVER_PATIENCE intervals the sampler thread takes it anyway,
         * whatever the reason the answer is late. */
        pyframe_wake_main_thread(sampler.interp);
        return 0;
    }
    return 1;
}

/* The main thread has not answered for a whole interval: it is blocked or in a
 * long call that released the GIL.  The sampler thread takes the GIL and looks
 * itself (or, after a termination signal, writes the profile).  The request
 * stays queued, so the main thread's own answer, when it comes, still measures
 * how long it was away.  The other threads are read first: waiting for the GIL
 * moves the one running bytecode to where it hands it over. */
static void take_over(int ending, int *have_thread_state, PyGILState_STATE *gil_state)
{
    if (!ending) {
        peek_threads(sampler.takeover_peeks);
    }
    if (!*have_thread_state) {
        *gil_state = PyGILState_Ensure();
        sampler.sampler_ts = PyThreadState_Get();
        *have_thread_state = 1;
    } else {
        PyEval_RestoreThread(sampler.sampler_ts);
    }
    if (ending) {
        if (atomic_load(&sampler.running) && ending_claim()) {
            ending_run(); /* does not return */
        }
    } else if (atomic_load(&sampler.running) && atomic_load(&sampler.request_pending) && !sampler.paused) {
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

/* One run of the thread: samples until the sampler stops. */
static void sample_until_stopped(void)
{
    uint64_t rng = clock_wall_ns() ^ ((uint64_t)getpid() << 32) ^ 0x9E3779B97F4A7C15ULL;
    uint64_t interval = sampler.options.interval_ns;
    int have_thread_state = 0;
    PyGILState_STATE gil_state = PyGILState_UNLOCKED;
    /* Once a termination signal is recorded (ending.h), no more samples: the
     * thread only sees that the profile gets written, by the main thread when
     * it answers a request (answer_request), or by this one when the main
     * thread has not answered for ENDING_TAKEOVER_NS. */
    int ending = 0;
    uint64_t due = clock_wall_ns();
    uint64_t periods = 1, grid = due, peek_at = next_peek(&grid, due, &rng, 1, 1);
    for (;;) {
        due = next_due(due, clock_wall_ns(), interval, ending, &rng);
        if (!wait_peeking(due, !ending, &peek_at, &grid, &rng, &periods)) {
            break;
        }
        ending = ending_signal() != 0;
        if (!ending) {
            clients_on_wake();
        } else if (!ending_pending()) {
            continue; /* the main thread writes it */
        }
        if (!ending && control_pending()) {
            see_commands(&have_thread_state, &gil_state);
        }
        if (!ending && paused_now()) {
            continue; /* no samples while paused; the loop still watches for commands */
        }
        if (!atomic_load(&sampler.request_pending)) {
            make_request();
            if (ending && atomic_load(&sampler.request_pending)) {
                ending_asked(); /* the main thread, held in the handler, goes on to answer it */
            }
            continue;
        }
        if (ending) {
            ending_asked(); /* a request waits already */
        }
        if (!ending) {
            second_look();
        }
        if (time_to_take_over(interval, ending)) {
            take_over(ending, &have_thread_state, &gil_state);
        }
    }
    for (int i = 0; i < PEEK_THREADS; i++) {
        thread_wait_close(&sampler.peek_waits[i]); /* none left open across a fork (the thread is joined first) */
    }
    thread_wait_close(&sampler.main_wait);
    if (have_thread_state) {
        PyEval_RestoreThread(sampler.sampler_ts);
        sampler.sampler_ts = NULL;
        PyGILState_Release(gil_state);
    }
}

/* A sampler thread kept between runs (sampler_stop(1): pytest --pyrometer
 * starts and stops once per test, and a thread's creation and end were a
 * third of the core's start and stop under perf) waits here, holding nothing:
 * no GIL, no thread state, no file.  park_state says what the thread is to
 * do; park_lock guards it, park_cond tells each side the other's move. */
enum { THREAD_RUNS, THREAD_TO_PARK, THREAD_PARKED, THREAD_TO_END };
static pthread_mutex_t park_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t park_cond = PTHREAD_COND_INITIALIZER;
static int park_state = THREAD_RUNS;

/* After a run: 1 when the thread is to run again, 0 when it is to end.  It
 * parks until one or the other; a stop that came before the thread woke from
 * its last parking is answered by parking again, without a run. */
static int park(void)
{
    pthread_mutex_lock(&park_lock);
    while (park_state != THREAD_TO_END && !(park_state == THREAD_RUNS && atomic_load(&sampler.running))) {
        if (park_state == THREAD_TO_PARK) {
            park_state = THREAD_PARKED;
            pthread_cond_broadcast(&park_cond);
        }
        pthread_cond_wait(&park_cond, &park_lock);
    }
    int again = park_state == THREAD_RUNS;
    pthread_mutex_unlock(&park_lock);
    return again;
}

static void set_park_state(int state)
{
    pthread_mutex_lock(&park_lock);
    park_state = state;
    pthread_cond_broadcast(&park_cond);
    pthread_mutex_unlock(&park_lock);
}

static void *sampler_main(void *unused)
{
    (void)unused;
    atomic_store(&sampler.sampler_tid, (int)gettid());
    /* Its wakes at their own times: with the default 50 us of timer slack the
     * kernel fired a wake due within 50 us before another thread's timer at
     * that timer (a peek pulled to the moment the main thread woke from a
     * sleep saw it still in the sleep): a loop of 1 ms periods, 0.3 ms of it
     * Python, read its Python 12-17% (truth 20%). */
    (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    do {
        sample_until_stopped();
    } while (park());
    return NULL;
}

/* In a forked child only the forking thread exists: the sampler is gone, and its
 * thread state is deleted by CPython.  The child starts unprofiled. */
static void forget_sampler_in_child(void)
{
    /* The files of the parent's threads are not this process's threads'. */
    forget_all_tracks();
    close_main_schedstat();
    spread_reset();
    atomic_store(&sampler.running, 0);
    atomic_store(&sampler.request_pending, 0);
    atomic_store(&sampler.sampler_tid, 0);
    sampler.thread_started = 0;
    sampler.thread_kept = 0; /* a kept thread is the parent's */
    sampler.fork_guarded = 0; /* forks.c forgets its clients in the child */
    sampler.active = 0;
    sampler.suspended_for_fork = 0;
    sampler.joining = 0;
    sampler.sampler_ts = NULL;
    /* The parent's lock may have been held at the fork (by its kept thread). */
    pthread_mutex_init(&park_lock, NULL);
    pthread_cond_init(&park_cond, NULL);
    park_state = THREAD_RUNS;
}

static void wait_for_other_join(void);

/* Starts the sampler thread, or wakes the one kept; 0, or an errno value. */
static int launch_thread(void)
{
    if (sampler.thread_kept) {
        sampler.thread_kept = 0;
        atomic_store(&sampler.running, 1);
        set_park_state(THREAD_RUNS);
        sampler.thread_started = 1;
        return 0;
    }
    set_park_state(THREAD_RUNS);
    atomic_store(&sampler.sampler_tid, 0);
    atomic_store(&sampler.running, 1);
    int rc = quiet_thread_create(&sampler.thread, sampler_main, NULL);
    if (rc != 0) {
        atomic_store(&sampler.running, 0);
        return rc;
    }
    sampler.thread_started = 1;
    return 0;
}

/* Tells the sampler thread to stop sampling and then `then` (THREAD_TO_END or
 * THREAD_TO_PARK); GIL held, and released by the caller while it waits. */
static void tell_thread(int then)
{
    sampler.thread_started = 0; /* before the GIL is released: another thread may fork */
    sampler.thread_kept = 0;
    sampler.joining = 1;
    set_park_state(then);
    atomic_store(&sampler.running, 0);
    wake_post();
}

/* Stops the sampler thread and waits until it has ended; GIL held (released
 * while waiting: the thread may be waiting for it).  Returns its kernel tid. */
static pid_t join_thread(void)
{
    pthread_t thread = sampler.thread;
    tell_thread(THREAD_TO_END); /* a running thread ends after its run, a parked one now */
    Py_BEGIN_ALLOW_THREADS
    pthread_join(thread, NULL);
    Py_END_ALLOW_THREADS
    sampler.joining = 0;
    return (pid_t)atomic_exchange(&sampler.sampler_tid, 0); /* its first act was to set it */
}

/* Stops the sampler thread and waits until it is parked, to run again at the
 * next start; GIL held (released while waiting). */
static void park_thread(void)
{
    tell_thread(THREAD_TO_PARK);
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&park_lock);
    while (park_state == THREAD_TO_PARK) {
        pthread_cond_wait(&park_cond, &park_lock);
    }
    pthread_mutex_unlock(&park_lock);
    Py_END_ALLOW_THREADS
    sampler.joining = 0;
    sampler.thread_kept = 1;
}

/* Ends the kept thread, if there is one, and waits until it is gone from the
 * process's threads; GIL held. */
static void end_kept_thread(void)
{
    wait_for_other_join();
    if (!sampler.thread_kept || getpid() != sampler.owner_pid) {
        return;
    }
    forks_wait_until_thread_gone(join_thread());
}

/* Another Python thread may be in join_thread (it released the GIL there): wait
 * until the sampler thread has ended, GIL released, before going on. */
static void wait_for_other_join(void)
{
    while (sampler.joining) {
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
    if (sampler.thread_kept) {
        end_kept_thread(); /* a process that forks has no thread of ours (3.12+ warns) */
        return;
    }
    if (!(sampler.active && sampler.thread_started && getpid() == sampler.owner_pid)) {
        return;
    }
    pid_t sampler_tid = (pid_t)atomic_load(&sampler.sampler_tid);
    uint64_t sampler_cpu = sampler_tid ? clock_thread_cpu_ns(sampler_tid) : CLOCK_UNAVAILABLE;
    pid_t tid = join_thread();
    sampler.suspended_for_fork = 1;
    if (sampler_cpu != CLOCK_UNAVAILABLE) {
        sampler.earlier_samplers_cpu_ns += delta(sampler_cpu, sampler.sampler_cpu_base_ns);
        sampler.last_process_cpu_ns += delta(sampler_cpu, sampler.last_sampler_cpu_ns);
    }
    sampler.last_sampler_cpu_ns = 0; /* the next sampler thread's clock starts at 0 */
    sampler.sampler_cpu_base_ns = 0;
    sampler.pause_wall_ns = clock_wall_ns();
    sampler.pause_process_cpu_ns = clock_process_cpu_ns();
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(sampler.interp); ts != NULL;
         ts = PyThreadState_Next(ts)) {
        table_key key = {pyframe_thread_serial(ts), 0};
        thread_track *t = table_find(&sampler.threads, key);
        if (t != NULL) {
            t->cpu_at_pause = clock_thread_cpu_ns(pyframe_thread_tid(ts));
        }
    }
    forks_wait_until_thread_gone(tid);
}

static void start_after_fork_unsuspended(void);

static void start_after_fork(void)
{
    if (!(sampler.suspended_for_fork && sampler.active)) {
        return;
    }
    own_work_begin(); /* it registers code objects, as a snapshot does */
    start_after_fork_unsuspended();
    own_work_end();
}

static void start_after_fork_unsuspended(void)
{
    sampler.suspended_for_fork = 0;
    if (sampler.paused) {
        /* Nothing to charge: the resume starts every window afresh. */
        (void)launch_thread();
        return;
    }
    uint64_t now = clock_wall_ns();
    uint64_t gap = delta(now, sampler.pause_wall_ns);
    uint64_t process_cpu = clock_process_cpu_ns();
    double core_fraction = 0.0;
    if (gap > 0) {
        core_fraction = (double)delta(process_cpu, sampler.pause_process_cpu_ns) / ((double)gap * (double)sampler.n_cpus);
        core_fraction = core_fraction > 1.0 ? 1.0 : core_fraction;
    }
    uint64_t gap_threads_used = 0;
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(sampler.interp); ts != NULL;
         ts = PyThreadState_Next(ts)) {
        table_key key = {pyframe_thread_serial(ts), 0};
        thread_track *t = table_find(&sampler.threads, key);
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
        if (ts == sampler.main_ts && atomic_load(&sampler.request_pending)) {
            /* The request made before the fork is answered after it: its delay
             * must not count the gap again. */
            atomic_store(&sampler.request_wall_ns, atomic_load(&sampler.request_wall_ns) + gap);
            atomic_store(&sampler.request_main_cpu_ns, atomic_load(&sampler.request_main_cpu_ns) + used);
        }
    }
    sampler.last_wall_ns += gap;
    sampler.last_process_cpu_ns += delta(process_cpu, sampler.pause_process_cpu_ns);
    /* The gap's CPU that no thread above accounts for (threads that ended or
     * started during it, threads without Python state) is the program's
     * untracked native time, as in a snapshot: the next snapshot charges it.
     * Left out, the stress test (a fork every 50 ms among 200 threads coming
     * and going) charged 94% of the process's CPU under the sanitizers. */
    sampler.untracked_carry += (int64_t)delta(process_cpu, sampler.pause_process_cpu_ns) - (int64_t)gap_threads_used;
    /* Should the thread not start (out of threads), the program goes on and the
     * profile has no samples from here on. */
    (void)launch_thread();
}

/* The stores a snapshot writes into (codes, lines, stacks, the thread tracks)
 * and the wake-up pipe; 0, or -1 with an exception set. */
static int prepare_stores(void)
{
    own_work_begin(); /* codes_init imports `opcode`: not the program's memory */
    int codes_ready = codes_init();
    own_work_end();
    if (codes_ready != 0) {
        return -1;
    }
    if (line_stats_init() != 0 || stacks_init() != 0 ||
        (sampler.threads.slots == NULL && table_init(&sampler.threads, sizeof(thread_track), 64) != 0)) {
        PyErr_NoMemory();
        return -1;
    }
    if (wake_prepare() != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

/* Baselines for the threads that exist at start, so that CPU they used before
 * profiling started is never charged. */
static void track_threads_at_start(void)
{
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(sampler.interp); ts != NULL;
         ts = PyThreadState_Next(ts)) {
        int created;
        table_key key = {pyframe_thread_serial(ts), 0};
        thread_track *t = table_upsert(&sampler.threads, key, &created);
        uint64_t cpu = clock_thread_cpu_ns(pyframe_thread_tid(ts));
        if (t != NULL) {
            t->running_serial = 0; /* an earlier run's place: its sites may be gone */
        }
        if (t != NULL && cpu != CLOCK_UNAVAILABLE) {
            t->last_wall_ns = sampler.last_wall_ns;
            t->last_cpu_ns = cpu;
            t->tid = pyframe_thread_tid(ts);
            (void)runq_since(t, t->tid, 1);
            sampler.totals.threads_seen++;
            thread_end_watch(ts);
        }
    }
}
/* The CPUs online, read once per process (GIL held): sysconf reads
 * /sys/devices/system/cpu/online, two system calls at each start, and
 * pytest --pyrometer starts once per test. */
static long online_cpus(void)
{
    static long n;
    if (n < 1) {
        n = sysconf(_SC_NPROCESSORS_ONLN);
        n = n < 1 ? 1 : n;
    }
    return n;
}


int sampler_start(const sampler_options *options)
{
    static int atfork_registered;
    if (sampler.active) {
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
    if (prepare_stores() != 0) {
        return -1;
    }

    sampler.options = *options;
    sampler.peeks = peeks_chosen(options->interval_ns);
    spread_reset();
    sampler.interp = PyInterpreterState_Get();
    pyframe_gil_span(sampler.interp, &sampler.gil_start, &sampler.gil_size);
    for (int i = 0; i < PEEK_THREADS; i++) {
        sampler.peek_waits[i] = (thread_wait_file)THREAD_WAIT_FILE_INIT;
    }
    sampler.main_wait = (thread_wait_file)THREAD_WAIT_FILE_INIT;
    atomic_store(&sampler.request_main_gil_wait, THREAD_WAIT_UNKNOWN);
    sampler.main_ts = PyThreadState_Get();
    sampler.sampler_ts = NULL;
    sampler.owner_pid = getpid();
    sampler.peek_available = safe_read_available();
    sampler.n_cpus = online_cpus();
    memset(&sampler.totals, 0, sizeof sampler.totals);
    sampler.totals.n_cpus = sampler.n_cpus;
    sampler.last_wall_ns = sampler.totals.start_wall_ns = clock_wall_ns();
    sampler.last_process_cpu_ns = sampler.totals.process_cpu_ns = clock_process_cpu_ns();
    /* A kept thread's clock has run through earlier runs. */
    pid_t kept_tid = sampler.thread_kept ? (pid_t)atomic_load(&sampler.sampler_tid) : 0;
    uint64_t kept_cpu = kept_tid > 0 ? clock_thread_cpu_ns(kept_tid) : CLOCK_UNAVAILABLE;
    sampler.sampler_cpu_base_ns = kept_cpu != CLOCK_UNAVAILABLE ? kept_cpu : 0;
    sampler.last_sampler_cpu_ns = sampler.sampler_cpu_base_ns;
    sampler.earlier_samplers_cpu_ns = 0;
    sampler.helper_cpu_at_start_ns = sampler.last_helper_cpu_ns = clock_helpers_cpu_ns();
    sampler.untracked_carry = 0;
    sampler.main_tid = pyframe_thread_tid(sampler.main_ts);
    control_set_main_thread(sampler.main_tid);
    sampler.main_schedstat_fd = sampler.main_tid > 0 ? open_schedstat(sampler.main_tid) : -1;
    atomic_store(&sampler.request_main_runq_ns, CLOCK_UNAVAILABLE);
    sampler.serial = 0;
    track_threads_at_start();
    atomic_store(&sampler.request_pending, 0);
    sampler.suspended_for_fork = 0;
    /* Paused from the start: --off, a command given to the run before this
     * process started, or a fork of a paused process (control_begin). */
    sampler.paused = !control_wanted();
    sampler.closed = 0;
    sampler.paused_since_ns = sampler.last_wall_ns;
    paused_set(sampler.paused);
    if (!sampler.fork_guarded && forks_register(stop_for_fork, start_after_fork) != 0) {
        return -1;
    }
    sampler.fork_guarded = 1;
    int rc = launch_thread();
    if (rc != 0) {
        forks_unregister(stop_for_fork);
        sampler.fork_guarded = 0;
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    sampler.active = 1;
    return 0;
}

/* The main thread's time carried to a next peek, charged as the run stops
 * (spread_flush): its peeks are located, which registers code objects and so
 * calls CPython, as a snapshot does (snapshot_in): no collection meanwhile,
 * the program's pending error kept, the profiler's own allocations apart. */
static void stop_spread(void)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    own_work_begin();
    int collecting = PyGC_Disable();
    spread_flush(0.0, NULL);
    if (collecting) {
        PyGC_Enable();
    }
    own_work_end();
    PyErr_Restore(type, value, traceback);
}

void sampler_charge_last_window(uint64_t asked_ns)
{
    if (!sampler.active || sampler.suspended_for_fork || getpid() != sampler.owner_pid || ending_signal()) {
        return;
    }
    take_commands(); /* a pause that came before the stop ends the run's time there (pyrometer attach) */
    if (!sampler.paused) {
        command_time asked = {asked_ns != 0 ? asked_ns : clock_wall_ns(), CLOCK_UNAVAILABLE, CLOCK_UNAVAILABLE};
        snapshot_in(TAKEN_BY_SAMPLER, SNAPSHOT_CHARGE, &asked); /* not an answer: no bytecode boundary of the program's */
    }
    /* What runs from here is the stop's: no snapshot charges it, not the
     * main thread's answer on the way, nor the sampler thread taking the GIL
     * while the stop waits for it to end (one found the line that called the
     * stop, in 1 of 15 in-process stops). */
    sampler.closed = 1;
}

void sampler_stop(int keep_thread)
{
    wait_for_other_join();
    if (!sampler.active) {
        return;
    }
    if (sampler.thread_started && keep_thread && getpid() == sampler.owner_pid) {
        park_thread();
    } else if (sampler.thread_started) {
        (void)join_thread();
    }
    if (getpid() == sampler.owner_pid) {
        /* Commands that came before the stop and were not acted on yet, at
         * their times: `pyrometer attach` ends its window with a pause, and
         * the thread that stops the run may get the GIL before the sampler
         * thread could act on it. */
        take_commands();
    }
    place_held_of_gone(1); /* the CPU measured so far, none of it lost */
    stop_spread();
    if (!sampler.thread_kept) {
        /* Kept, the thread is ended before a fork (stop_for_fork): the guard stays. */
        forks_unregister(stop_for_fork);
        sampler.fork_guarded = 0;
    }
    close_main_schedstat();
    sampler.active = 0;
    sampler.suspended_for_fork = 0;
    sampler.totals.stop_wall_ns = clock_wall_ns();
    sampler.totals.paused_at_end_ns = 0;
    sampler.totals.process_cpu_at_pause_ns = 0;
    if (sampler.paused) {
        sampler.totals.paused_at_end_ns = delta(sampler.totals.stop_wall_ns, sampler.paused_since_ns);
        sampler.totals.process_cpu_at_pause_ns = delta(sampler.process_cpu_at_pause_ns, sampler.totals.process_cpu_ns);
        sampler.totals.paused_ns += sampler.totals.paused_at_end_ns;
        sampler.paused = 0;
    }
    sampler.totals.process_cpu_ns = delta(clock_process_cpu_ns(), sampler.totals.process_cpu_ns);
    sampler.totals.sampler_cpu_ns = sampler.earlier_samplers_cpu_ns +
                                    delta(sampler.last_sampler_cpu_ns, sampler.sampler_cpu_base_ns) +
                                    helper_cpu_since_start();
}

void sampler_end_kept_thread(void)
{
    end_kept_thread();
    if (!sampler.active && sampler.fork_guarded) {
        forks_unregister(stop_for_fork);
        sampler.fork_guarded = 0;
    }
}

int sampler_running(void)
{
    return sampler.active;
}

void sampler_get_totals(sampler_totals *out)
{
    *out = sampler.totals;
    if (out->n_cpus < 1) {
        out->n_cpus = online_cpus(); /* never started */
    }
    uint64_t end = sampler.active ? clock_wall_ns() : sampler.totals.stop_wall_ns;
    out->stop_wall_ns = end;
    if (sampler.active) {
        /* While running the totals hold the process's CPU clock at the start
         * (sampler_stop makes it the difference): a profile written before the
         * stop (os._exit, exec, a termination signal, a child's end) needs the
         * CPU used so far. */
        out->process_cpu_ns = delta(clock_process_cpu_ns(), sampler.totals.process_cpu_ns);
        out->sampler_cpu_ns = sampler.earlier_samplers_cpu_ns +
                              delta(sampler.last_sampler_cpu_ns, sampler.sampler_cpu_base_ns) +
                              helper_cpu_since_start();
    }
    if (sampler.active && sampler.paused) {
        out->paused_at_end_ns = delta(end, sampler.paused_since_ns);
        out->paused_ns += out->paused_at_end_ns;
    }
    out->memory_bytes = table_memory_bytes(&sampler.threads);
    out->unit_ns = sampler.totals.main_live_units
                       ? (double)sampler.totals.main_live_ns / (double)sampler.totals.main_live_units
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
    out->unit_cpu_ns = sampler.totals.est_cpu_units >= 1.0
                           ? (double)sampler.totals.main_live_cpu_ns / sampler.totals.est_cpu_units
                           : out->unit_ns;
    out->unit_off_ns = sampler.totals.est_off_units >= 1.0
                           ? (double)sampler.totals.main_live_off_ns / sampler.totals.est_off_units
                           : out->unit_ns;
    out->unit_runq_ns = sampler.totals.est_runq_units >= 1.0
                            ? (double)sampler.totals.main_live_runq_ns / sampler.totals.est_runq_units
                            : out->unit_ns;
    /* Not capped at the common unit: a cap (a unit's CPU never above its wall
     * time), meant to keep misjudged windows from scaling up, broke the totals
     * it capped.  A main thread burning 1 s of CPU was charged 0.93-0.99 s with
     * it on an idle machine (0.90 s beside two busy processes on two CPUs,
     * where CPU the estimates put on the run queue pushed the ratio over the
     * unit), and 0.94-0.99 s (0.97-0.98 s loaded) without it.  The 70/30 split
     * program it was measured on, 8 runs each (rates 2 and 10 ms): native share
     * 0.699-0.745 capped, 0.695-0.732 not (truth 0.695-0.700). */
    /* Over the time sampled: none is taken while paused. */
    out->mean_interval_ns =
        sampler.totals.snapshots
            ? (double)delta(delta(end, sampler.totals.start_wall_ns), out->paused_ns) / (double)sampler.totals.snapshots
            : 0.0;
}

void sampler_release(void)
{
    release_origins();
    forget_all_tracks();
    if (sampler.threads.slots != NULL) {
        table_release(&sampler.threads);
    }
}
