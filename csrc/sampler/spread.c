/* The main thread's window spread over where it was seen: the sampler thread
 * reads the main thread's position and state often between snapshots (a peek
 * at a random moment in each period of a grid, without the GIL), and a
 * snapshot divides the window it measured among those peeks (state.h: the
 * rooms).
 *
 * Why: a snapshot comes every 10 ms on average, and charged to one place (the
 * line seen at the request, the answer's delay measured), each window stood for
 * one point of the program's time.  Six kinds of work interleaved in 40 rounds
 * (bench/precision.py `mixed`) read 0.7-1.8 points from the truth per line at
 * the default rate on 3.11, and 1.9-2.3 at ten times the rate: the charge of
 * the answer's window to t0's line, and the estimated unit before it, carry a
 * bias that more requests do not remove.  A loop with a 10 ms period, 30%
 * Python and 70% asleep, read 4-10 points off.  With the windows' measured
 * time divided among ten peeks or more, the line of the time is a
 * stratified sample of the program's (one point placed at random in each
 * period: no lock-in with a periodic program, and less variance than
 * exponential intervals), and its kind comes from the measured clocks.
 *
 * The kinds: the window's CPU time (its clock) and run-queue wait
 * (schedstat) go to the peeks that found the thread running (the kernel's
 * /proc/self/task/<tid>/syscall says "running" for a thread on a CPU or
 * waiting for one); its time off the CPU, blocked, to the peeks that found it
 * blocked: asleep on the GIL's own state is GIL wait, anywhere else system
 * time.  So the window's totals by kind are what its clocks measured, and
 * only their places come from the peeks.  A running peek is native when the
 * thread stood in a call, or at the same instruction for SPREAD_STUCK
 * peeks in a row, on its CPU between them (one instruction's long C work: a
 * 10 ms `del` of a large list, a `*` on a large bytes), or at an instruction
 * where a request's answer measured such work: over NATIVE_DELAY_NS of CPU
 * from t0 where t0 saw it at bytecode (a numpy operator: the old rule of a
 * single look, kept for every later peek there where the peeks bear it out:
 * long_ops, long_op_confirmed).  Not by its
 * opcode alone: `i % 7` on ints stays a generic BINARY_OP on 3.11, and its
 * line read 7-10% native so. */
#include "state.h"
#include "../common/clock.h"
#include "../profile/codes.h"
#include "../profile/line_timeline.h"
#include "../profile/stack_table.h"
#include "../profile/stacks.h"

#include <sched.h>
#include <string.h>

/* Peeks kept between two snapshots of the main thread, runs of identical peeks
 * merged into one (a long call is one entry, whatever its length). */
#define SPREAD_RING 256
/* Identical running peeks in a row, at an instruction that is not a call, that
 * make it one instruction's native work, each after the first found still
 * there while on its CPU (SPREAD_STILL_READS).  Identical peeks alone are not
 * enough: a loop meets its instructions in proportion to their time, not one
 * in seven, and `for i in range(n): pass`, three instructions of which
 * FOR_ITER takes about half the time, was found at FOR_ITER five times in a
 * row often enough to read 8-19% native on 3.11 and 3.12 (`while i < n: i +=
 * 1` 1.3-5.2%).  A pure-Python loop beside two busy processes read 20% native
 * when a peek finding it waiting for a CPU counted as one still there. */
#define SPREAD_STUCK 5
/* The same, where the peeks found the thread waiting for a CPU, having run
 * since the peek before: a busy machine.  The reads a few us apart cannot
 * tell then (a thread preempted stands still whatever it runs), and the
 * sampler thread's own wake preempts the main thread on its CPU when the
 * other CPUs are busy: beside two busy processes, 38 of 38 peeks of a
 * `big * 3` found it waiting, and the first two of such instructions read
 * Python (the 4-19% of that line, until answers measured it: LONG_OPS).  A
 * loop that ran between two peeks is found at one instruction with the
 * probability of its share of the loop's time (FOR_ITER's 0.6 on 3.10: 12
 * in a row 0.2%), so it takes this many; not ran since (preempted all the
 * while), a peek counts neither way. */
#define SPREAD_STUCK_WAITING 13
/* What a peek found still there on its CPU counts for, against one found
 * waiting (count_stuck), and what makes native. */
#define STUCK_ON_CPU ((SPREAD_STUCK_WAITING - 1) / (SPREAD_STUCK - 1))
#define STUCK_NATIVE (SPREAD_STUCK_WAITING - 1)
/* How many times a peek that finds the thread running where the one before
 * did reads its innermost position again (pyframe_peek_leaf, a few us apart,
 * hundreds of a loop's instructions) before it counts as still there: a loop
 * whose instruction takes a fraction f of its time passes all of them about
 * f^(reads+1) of the time, one instruction's C work always, and it takes
 * SPREAD_STUCK - 1 such peeks in a row.  With 3 reads, FOR_ITER of `for i in
 * range(n): pass` (f about 0.6 on 3.10) passed often enough to make 5-6 peeks
 * native in 2 of 12 runs (the line 0.8-3.3% native); with 8, 0.00-0.25% in 32
 * runs on 3.10-3.13.  The reads stop at the first move, so a loop pays one or
 * two of them (the sampler thread's CPU per peek the same, 43-56 us, 4 runs
 * alternated with 3 reads); a long instruction all of them: a `big * 3` of a
 * 2M-element list, 55-64 us per peek with 3, 73-86 with 8. */
#define SPREAD_STILL_READS 8
/* Instructions where an answer measured one instruction's native work (the
 * code object and the instruction; code 0: a free slot), kept for the run:
 * compared only, never followed (a code freed and its address reused costs at
 * most the kind of some peeks). */
#define LONG_OPS 1024
/* Answers that measured it there before an instruction is kept: one was
 * enough, and now and then an answer of a pure-Python loop came more than
 * NATIVE_DELAY_NS of CPU late (the cause not found: on 3.15, 4 runs in 36 of
 * a 1.5 s loop, quiet machine or busy), and its instruction, where most peeks
 * of the loop land, read native for the rest of the run: the line 8-20%
 * native, 0-0.9% in 12 runs without the rule.  A numpy operator in a loop is
 * measured again at the next request that lands on it; a single long
 * instruction is found by its peeks (SPREAD_STUCK). */
#define LONG_OP_ANSWERS 2
/* A peek that finds the main thread running where the one before found it
 * blocked, having used less CPU than this since, found it at the moment it was
 * woken, not running: the sampler thread's wake, due within the timer slack of
 * the main thread's sleep (50 us by default, the program's), fires that timer
 * too, and the peek sees the sleep end at once.  Read as running, a loop of
 * 1 ms periods (0.3 ms of Python, then a sleep) had 0.35 s of CPU on its sleep
 * line of the 0.12 s the sleeps used, and its Python line 14-18% of the time
 * (truth 19-20%). */
#define SPREAD_WOKEN_CPU_NS 20000ULL
/* How many peeks a spread takes at least, and how long its windows' time is
 * carried to reach them (in mean intervals) before it is spread over fewer
 * (charge_main_spread). */
#define SPREAD_MIN_PEEKS 10
#define SPREAD_CARRY_INTERVALS 16
/* A run of peeks that found the thread blocked at one place, standing for
 * this many periods, makes the next peek stand for twice the periods of the
 * one before (one at a random moment in a stratum that much longer), up to
 * SPREAD_LONGEST; any change makes it one period again.  Each peek weighs the
 * periods it stands for, so the sample stays a stratified one.  A peek costs
 * the sampler thread about 45 us of CPU on this machine, 33 of them the timed
 * wake: a program asleep for 4 s cost 0.27 s of CPU profiled, 0.14 s of it
 * the peeks; 0.16-0.18 s with longer strata.  Only after a long run: after 4
 * periods, a loop of 10 ms periods (3 ms of Python, 7 asleep) read 3.3-6.1
 * points off (0.04-0.60 without), the `mixed` program 0.37-0.93 (0.11-0.20),
 * a peek that finds the thread just woken reading as asleep
 * (SPREAD_WOKEN_CPU_NS) with the weight of the longer stratum; the programs
 * that wait long in one place (a server between requests, a worker on its
 * queue) are the ones whose peeks cost for nothing. */
#define SPREAD_LONGER_AFTER 32
/* Located peeks a window keeps apart; beyond it, the last one takes the rest. */
#define SPREAD_PLACES 64

enum peek_state { PEEK_UNKNOWN, PEEK_RUNNING, PEEK_GIL, PEEK_BLOCKED };

typedef struct {
    uint64_t first_ns, last_ns; /* the first and the latest peek merged into it */
    uint64_t cpu_ns;            /* the main thread's CPU clock at the latest (CLOCK_UNAVAILABLE: not read) */
    pyframe_peeked at;
    int standing;
    int state;      /* enum peek_state */
    int native;     /* its kind, were it running */
    uint32_t count; /* peeks merged into it */
    uint64_t periods; /* the periods of the grid they stand for (SPREAD_LONGER_AFTER) */
    uint64_t queued;  /* of them, those of running peeks that found it off its CPU (queued_at) */
    uint32_t stuck; /* the evidence of C work of them, after the first (count_stuck) */
} main_peek;

static struct {
    atomic_flag lock;
    unsigned head, len; /* under lock */
    main_peek ring[SPREAD_RING];
    main_peek run;        /* the latest peek, and the periods of the peeks in a row at its place */
    uint64_t run_periods; /* (0: none yet), whatever snapshots took out */
} ring = {.lock = ATOMIC_FLAG_INIT};

/* GIL held: the main thread's time of windows not spread yet, and the peeks
 * made in them, until there are SPREAD_MIN_PEEKS (charge_main_spread). */
static struct {
    uint64_t wall, used, runq;
} carry;
static main_peek held[SPREAD_PLACES];
static int n_held;
static uint64_t held_peeks; /* their counts added up (peeks, not the periods they stand for) */

/* GIL held (the snapshots'): LONG_OPS. */
static struct {
    uintptr_t code;
    int lasti;
    int answers; /* that measured it (LONG_OP_ANSWERS) */
} long_ops[LONG_OPS];
static int long_ops_full;

static size_t long_op_slot(uintptr_t code, int lasti)
{
    uint64_t h = ((uint64_t)code ^ ((uint64_t)(uint32_t)lasti << 40)) * 0x9E3779B97F4A7C15ULL;
    return (size_t)(h >> 54) % LONG_OPS;
}

/* Its slot, or -1. */
static long long_op_find(uintptr_t code, int lasti)
{
    for (size_t i = long_op_slot(code, lasti), n = 0; n < LONG_OPS && long_ops[i].code != 0;
         i = (i + 1) % LONG_OPS, n++) {
        if (long_ops[i].code == code && long_ops[i].lasti == lasti) {
            return (long)i;
        }
    }
    return -1;
}

static int long_op_known(uintptr_t code, int lasti)
{
    long i = long_op_find(code, lasti);
    return i >= 0 && long_ops[i].answers >= LONG_OP_ANSWERS;
}

static void long_op_note(uintptr_t code, int lasti)
{
    long found = code != 0 ? long_op_find(code, lasti) : -1;
    if (found >= 0) {
        long_ops[found].answers += long_ops[found].answers < LONG_OP_ANSWERS;
        return;
    }
    if (code == 0 || long_ops_full) {
        return;
    }
    size_t n = 0, i = long_op_slot(code, lasti);
    while (long_ops[i].code != 0 && n++ < LONG_OPS / 2) {
        i = (i + 1) % LONG_OPS;
    }
    if (long_ops[i].code != 0) {
        long_ops_full = 1; /* half full: probes stay short; no more are kept */
        return;
    }
    long_ops[i].code = code;
    long_ops[i].lasti = lasti;
    long_ops[i].answers = 1;
}

/* The variance of a line's figures from the spread peeks: the peeks are a
 * stratified sample (one in each period of a grid), whose variance the
 * squared differences of successive peeks estimate (half their sum, for each
 * line and kind: a peek's part of it against the one before's), rather than
 * the sum of squares of a Poisson process's draws.  A line run for long
 * stretches at a time changes only at their ends: a 34% line of the `mixed`
 * program of bench/precision.py is within 0.1-0.3 points of the truth at 4 s,
 * where draws of a Poisson process at the peeks' rate would give it +-1.9.
 * prev: the latest peek's place and parts (have 0: none yet, or since the
 * sampler started). */
static struct {
    int have;
    location at;
    double parts[CPU_VARS];
} prev;

static void ring_lock(void)
{
    while (atomic_flag_test_and_set_explicit(&ring.lock, memory_order_acquire)) {
        sched_yield();
    }
}

static void ring_unlock(void)
{
    atomic_flag_clear_explicit(&ring.lock, memory_order_release);
}

/* The stacks of the latest met peeks (GIL held), for the unmet ones whose
 * kept frames join one of them (join_met). */
#define RECENT_MET 16
static uint32_t recent_met[RECENT_MET];
static int n_recent_met, next_recent_met;

void spread_reset(void)
{
    atomic_flag_clear(&ring.lock); /* a fork's child: the parent's sampler thread may have held it */
    ring.head = ring.len = 0;
    ring.run_periods = 0;
    prev.have = 0;
    memset(long_ops, 0, sizeof long_ops);
    long_ops_full = 0;
    carry.wall = carry.used = carry.runq = 0;
    n_held = 0;
    held_peeks = 0;
    n_recent_met = next_recent_met = 0;
}

static int same_place(const main_peek *a, const main_peek *b)
{
    return a->at.frame == b->at.frame && a->at.code == b->at.code && a->at.lasti == b->at.lasti &&
           a->standing == b->standing && a->state == b->state;
}

/* The periods the next peek stands for (SPREAD_LONGER_AFTER), after a peek
 * of `periods` found the thread at `p`; under the ring's lock. */
static uint64_t next_periods(const main_peek *p, uint64_t periods)
{
    int same = ring.run_periods > 0 && same_place(&ring.run, p);
    ring.run = *p;
    ring.run_periods = same ? ring.run_periods + periods : periods;
    int still = p->state == PEEK_BLOCKED || p->state == PEEK_GIL;
    if (!same || !still || ring.run_periods < SPREAD_LONGER_AFTER) {
        return 1;
    }
    return periods * 2 > sampler.peeks.longest ? sampler.peeks.longest : periods * 2;
}

/* What the reads of stands_still found. */
enum stillness { STILL_MOVED, STILL_ON_CPU, STILL_WAITING };

/* The sampler thread, without the GIL: whether the main thread, found at p's
 * instruction, stays there through SPREAD_STILL_READS more reads, and if so
 * whether it ran meanwhile (on its CPU at least half the time) or waited for
 * a CPU, which says nothing either way: a thread preempted stands still
 * whatever it runs. */
static enum stillness stands_still(const main_peek *p)
{
    uint64_t wall0 = clock_wall_ns();
    for (int i = 0; i < SPREAD_STILL_READS; i++) {
        pyframe_position at;
        if (pyframe_peek_leaf(sampler.main_ts, &at) != PYFRAME_PEEK_OPCODE || at.frame != p->at.frame ||
            at.code != p->at.code || at.lasti != p->at.lasti) {
            return STILL_MOVED;
        }
    }
    uint64_t cpu = clock_thread_cpu_ns(sampler.main_tid);
    if (p->cpu_ns == CLOCK_UNAVAILABLE || cpu == CLOCK_UNAVAILABLE) {
        return STILL_MOVED; /* not known: no evidence of C work */
    }
    return 2 * delta(cpu, p->cpu_ns) >= delta(clock_wall_ns(), wall0) ? STILL_ON_CPU : STILL_WAITING;
}

/* A peek's evidence for one instruction's C work, added to the run of
 * identical peeks it joins: found still there while on its CPU, STUCK_ON_CPU
 * (SPREAD_STUCK); waiting for a CPU, one if it ran since the peek before (on
 * its CPU an eighth of the time at least), none if not
 * (SPREAD_STUCK_WAITING); the count starts again at anything else. */
static void count_stuck(main_peek *run, const main_peek *p, enum stillness still)
{
    if (!same_place(run, p) || p->state != PEEK_RUNNING || still == STILL_MOVED) {
        run->stuck = 0;
    } else if (still == STILL_ON_CPU) {
        run->stuck += STUCK_ON_CPU;
    } else if (p->cpu_ns != CLOCK_UNAVAILABLE && run->cpu_ns != CLOCK_UNAVAILABLE &&
               8 * delta(p->cpu_ns, run->cpu_ns) >= delta(p->last_ns, run->last_ns)) {
        run->stuck++;
    }
    if (run->stuck >= STUCK_NATIVE) {
        run->native = 1;
    }
}

/* Whether a thread the kernel says is running (on a CPU or waiting for one)
 * was off its CPU at a peek: its CPU clock, read before and after the state's
 * read (some us apart), did not move.  The clock of a thread on a CPU is read
 * to the nanosecond (the kernel brings its runtime up to date), so a thread
 * on its CPU moves it by the gap; one in the run queue not at all.  Why: the
 * window's CPU time went to every peek that found the thread running, and a
 * thread that gives up the GIL in a call (`os.path.exists`) then waits for a
 * CPU when it is woken with the GIL, on a busy machine: its call's line was
 * found "running" as often as its Python loop's and took their CPU (0.27-0.30
 * s native of the 0.05-0.07 s its calls used in a 1.5 s window, the Python
 * loop beside it short by as much, 3.15 beside a busy process).  Not where
 * it ran half the time since the peek before (spread_peek): preempted just
 * now, by the sampler thread's own wake most often on a busy machine, it was
 * running there. */
static int queued_at(uint64_t cpu_before, uint64_t cpu_after)
{
    return cpu_before != CLOCK_UNAVAILABLE && cpu_after != CLOCK_UNAVAILABLE && cpu_after == cpu_before;
}

/* The sampler thread, without the GIL: where the main thread stands now, a
 * peek standing for `periods` periods of the grid; the periods the next one
 * stands for. */
uint64_t spread_peek(uint64_t periods)
{
    if (!sampler.peek_available) {
        return 1;
    }
    main_peek p;
    memset(&p, 0, sizeof p);
    p.at.lasti = -1;
    p.standing = main_standing(&p.at);
    if (p.standing == STANDING_UNKNOWN) {
        return 1; /* a torn read: no peek (the others share the window) */
    }
    uint64_t cpu_before = clock_thread_cpu_ns(sampler.main_tid);
    switch (thread_state_in(&sampler.main_wait, sampler.main_tid, sampler.gil_start, sampler.gil_size)) {
    case THREAD_STATE_RUNNING:
        p.state = PEEK_RUNNING;
        break;
    case THREAD_STATE_ON_SPAN:
        p.state = PEEK_GIL;
        break;
    case THREAD_STATE_BLOCKED:
        p.state = PEEK_BLOCKED;
        break;
    default:
        p.state = PEEK_UNKNOWN;
    }
    p.cpu_ns = clock_thread_cpu_ns(sampler.main_tid);
    p.native = p.standing == STANDING_IN_CALL;
    p.first_ns = p.last_ns = clock_wall_ns();
    p.count = 1;
    p.periods = periods;
    /* ring.run: the latest peek, written by this thread only (next_periods). */
    int ran_since = ring.run_periods > 0 && ring.run.cpu_ns != CLOCK_UNAVAILABLE && p.cpu_ns != CLOCK_UNAVAILABLE &&
                    2 * delta(p.cpu_ns, ring.run.cpu_ns) >= delta(p.last_ns, ring.run.last_ns);
    p.queued = p.state == PEEK_RUNNING && queued_at(cpu_before, p.cpu_ns) && !ran_since ? periods : 0;
    enum stillness still = p.state == PEEK_RUNNING && p.standing == STANDING_PYTHON && ring.run_periods > 0 &&
                                   same_place(&ring.run, &p)
                               ? stands_still(&p)
                               : STILL_MOVED;
    ring_lock();
    main_peek *newest = ring.len > 0 ? &ring.ring[(ring.head + ring.len - 1) % SPREAD_RING] : NULL;
    if (newest != NULL && p.state == PEEK_RUNNING && (newest->state == PEEK_BLOCKED || newest->state == PEEK_GIL) &&
        newest->at.frame == p.at.frame && newest->at.code == p.at.code && newest->at.lasti == p.at.lasti &&
        p.cpu_ns != CLOCK_UNAVAILABLE && newest->cpu_ns != CLOCK_UNAVAILABLE &&
        delta(p.cpu_ns, newest->cpu_ns) < SPREAD_WOKEN_CPU_NS) {
        p.state = newest->state; /* just woken (SPREAD_WOKEN_CPU_NS) */
        p.queued = 0;
    }
    if (newest != NULL && (same_place(newest, &p) || ring.len == SPREAD_RING)) {
        /* The same place again (or no room: the newest takes it) */
        count_stuck(newest, &p, still);
        newest->count++;
        newest->periods += periods;
        newest->queued += p.queued;
        newest->last_ns = p.last_ns;
        newest->cpu_ns = p.cpu_ns;
    } else {
        newest = &ring.ring[(ring.head + ring.len) % SPREAD_RING];
        *newest = p;
        ring.len++;
    }
    uint64_t next = next_periods(&p, periods);
    ring_unlock();
    return next;
}

/* The peeks made before `until`, taken out of the ring (those before `since`,
 * left from a window not spread, are dropped); how many went into out. */
static int take_peeks(uint64_t since, uint64_t until, main_peek *out, int max)
{
    int n = 0;
    ring_lock();
    while (ring.len > 0) {
        main_peek *oldest = &ring.ring[ring.head];
        if (oldest->first_ns > until) {
            break;
        }
        if (oldest->last_ns > since && n < max) {
            out[n++] = *oldest;
        } else if (oldest->last_ns > since && n > 0) {
            out[n - 1].count += oldest->count; /* more places than kept apart: the last takes them */
            out[n - 1].periods += oldest->periods;
            out[n - 1].queued += oldest->queued; /* counted where it is a running one's */
        }
        ring.head = (ring.head + 1) % SPREAD_RING;
        ring.len--;
    }
    ring_unlock();
    return n;
}

void spread_drop_until(uint64_t until)
{
    main_peek none[1];
    (void)take_peeks(UINT64_MAX, until, none, 0);
}


static void add_variance(const location *loc, const double parts[CPU_VARS])
{
    double var[CPU_VARS];
    int same = prev.have && prev.at.site == loc->site && prev.at.lineno == loc->lineno;
    if (!same && prev.have) {
        for (int k = 0; k < CPU_VARS; k++) {
            var[k] = prev.parts[k] * prev.parts[k] / 2.0;
        }
        charge_variance(&prev.at, var);
    }
    for (int k = 0; k < CPU_VARS; k++) {
        double d = same ? parts[k] - prev.parts[k] : parts[k];
        var[k] = d * d / 2.0;
    }
    charge_variance(loc, var);
    prev.have = 1;
    prev.at = *loc;
    memcpy(prev.parts, parts, sizeof prev.parts);
}

/* One peek's part of the window, by kind: CPU (its kind the peek's), run-queue
 * wait, and time off the CPU, GIL wait or system (or an event loop's idle). */
static void charge_part(location loc, const main_peek *p, uint64_t cpu, uint64_t runq, uint64_t off,
                        double core_fraction)
{
    double parts[CPU_VARS] = {0};
    int gil = p->state == PEEK_GIL || (p->state != PEEK_BLOCKED && !p->native);
    location on = loc;
    on.native = p->native;
    if (off > 0 && gil != !on.native) {
        /* Its CPU of one kind and its time off the CPU of the other's: the
         * two charged apart (the off part's kind is its own). */
        location waits = loc;
        waits.native = !gil;
        charge_quiet(&waits, off, 0, 0, core_fraction, parts);
        off = 0;
    }
    if (cpu + runq + off > 0) {
        charge_quiet(&on, cpu + runq + off, cpu, runq, core_fraction, parts);
    }
    for (int k = 0; k < CPU_VARS; k++) {
        parts[k] /= (double)p->count; /* one peek's, with the periods it stands for: the merged ones
                                          differ in nothing else */
    }
    add_variance(&loc, parts);
}

/* Shares of `total` in proportion to weight of all, the last taking what the
 * rounding left, so that the parts add up to the total. */
typedef struct {
    uint64_t total, given;
    uint64_t all, seen;
} share;

static uint64_t share_of(share *s, uint64_t weight)
{
    s->seen += weight;
    uint64_t upto = s->all > 0 ? (uint64_t)((double)s->total * ((double)s->seen / (double)s->all)) : 0;
    if (s->seen >= s->all) {
        upto = s->total;
    }
    uint64_t part = upto > s->given ? upto - s->given : 0;
    s->given += part;
    return part;
}

/* CLOCK_REALTIME of a moment of the monotonic clock (the line time line's). */
static uint64_t realtime_of(uint64_t mono_ns, uint64_t mono_now, uint64_t real_now)
{
    uint64_t ago = delta(mono_now, mono_ns);
    return real_now > ago ? real_now - ago : 0;
}

/* Whether two peeks kept the same code objects, their own frame's and their
 * callers' (the same path of calls, as far as they saw it). */
static int same_codes(const pyframe_peeked *a, const pyframe_peeked *b)
{
    for (int k = 0; k <= PYFRAME_PEEK_CALLERS; k++) {
        if (peeked_position(a, k).code != peeked_position(b, k).code) {
            return 0;
        }
    }
    return 1;
}

static void remember_met(uint32_t stack)
{
    for (int i = 0; i < n_recent_met; i++) {
        if (recent_met[i] == stack) {
            return;
        }
    }
    recent_met[next_recent_met] = stack;
    next_recent_met = (next_recent_met + 1) % RECENT_MET;
    n_recent_met += n_recent_met < RECENT_MET;
}

/* The frames of a stack, root first (at most STACKS_MAX_DEPTH); how many. */
static int stack_path(uint32_t id, stack_frame *out)
{
    const stack_table *st = stacks_table();
    stack_frame reversed[STACKS_MAX_DEPTH];
    int n = 0;
    while (st != NULL && id != STACKS_ROOT && id != STACKS_OTHER && n < STACKS_MAX_DEPTH) {
        const stack_node *node = stack_table_node(st, id);
        reversed[n++] = node->frame;
        id = node->parent;
    }
    for (int i = 0; i < n; i++) {
        out[i] = reversed[n - 1 - i];
    }
    return n;
}

/* An unmet peek's stack (its kept frames, put on no known caller: the
 * program returned past them) joined under a recent met stack through the
 * function of its outermost kept frame: `main` -> b -> c, met before as
 * `<module>` -> main -> a -> c, is `<module>` -> main -> b -> c. */
static int join_met(uint32_t partial, uint32_t *joined)
{
    stack_frame kept[STACKS_MAX_DEPTH], met[STACKS_MAX_DEPTH];
    int n_kept = stack_path(partial, kept);
    for (int r = 0; n_kept > 0 && r < n_recent_met; r++) {
        int n_met = stack_path(recent_met[r], met);
        for (int i = n_met - 1; i >= 0; i--) {
            if (met[i].site == kept[0].site && i + n_kept <= STACKS_MAX_DEPTH) {
                memcpy(met + i, kept, (size_t)n_kept * sizeof kept[0]);
                *joined = stacks_intern(met, i + n_kept);
                return i > 0; /* something above the kept frames */
            }
        }
    }
    return 0;
}

/* The held peeks' places (locate_peek), in locs.  A peek none of whose
 * frames is on the stack any more (unmet) knows its line but not the stack
 * above the frames it kept: where a peek of this spread met the stack on the
 * same line, its stack is taken (a recursion 300 deep, unwound before the
 * snapshot, read as `<module>` -> down -> down -> spin, a stack that never
 * ran), of one that kept the same codes (the same path of calls: c called
 * by b, not by a) where there is one; else the kept frames are put on the
 * stack's outermost frame, as for the look at t0 (locate_unmet: the
 * program's last call, `main` -> `burn`). */
static void locate_held(PyThreadState *ts, location *locs)
{
    int unmet[SPREAD_PLACES];
    for (int i = 0; i < n_held; i++) {
        const main_peek *p = &held[i];
        locs[i] = locate_peek(ts, p->standing, p->at.frame != 0 ? &p->at : NULL, &unmet[i]);
        uintptr_t codes[1 + PYFRAME_PEEK_CALLERS];
        for (int k = 0; k <= PYFRAME_PEEK_CALLERS; k++) {
            codes[k] = peeked_position(&p->at, k).code;
        }
        locs[i].loop_idle = awaits_loop_was_waiting(codes, 1 + PYFRAME_PEEK_CALLERS);
    }
    for (int i = 0; i < n_held; i++) {
        if (!unmet[i] && locs[i].ok && locs[i].site != SITE_NONE) {
            remember_met(locs[i].stack);
        }
    }
    for (int i = 0; i < n_held; i++) {
        int same_line = -1, same_path = -1;
        for (int j = n_held - 1; unmet[i] && j >= 0 && same_path < 0; j--) {
            if (unmet[j] || !locs[j].ok || locs[j].site != locs[i].site || locs[j].lineno != locs[i].lineno) {
                continue;
            }
            same_line = same_line < 0 ? j : same_line;
            same_path = same_codes(&held[i].at, &held[j].at) ? j : -1;
        }
        if (!unmet[i] || !locs[i].ok || locs[i].site == SITE_NONE) {
            continue;
        }
        uint32_t joined;
        if (same_path >= 0) {
            locs[i].stack = locs[same_path].stack;
        } else if (join_met(locs[i].stack, &joined)) {
            locs[i].stack = joined;
        } else if (same_line >= 0) {
            locs[i].stack = locs[same_line].stack;
        }
    }
}

/* The carried time spread over the held peeks (see the top of this file);
 * *where: the latest peek's place. */
static void spread_held(PyThreadState *ts, double core_fraction, location *where)
{
    uint64_t wall = carry.wall, used = carry.used, runq = carry.runq;
    carry.wall = carry.used = carry.runq = 0;
    uint64_t off = wall - used - runq;
    uint64_t running = 0, queued = 0, blocked = 0, all = 0, made = 0;
    for (int i = 0; i < n_held; i++) {
        main_peek *p = &held[i];
        if (p->standing == STANDING_PYTHON && p->at.code != 0 && long_op_known(p->at.code, p->at.lasti)) {
            p->native = 1;
        }
        all += p->periods;
        made += p->count;
        running += p->state == PEEK_RUNNING ? p->periods : 0;
        queued += p->state == PEEK_RUNNING ? p->queued : 0;
        blocked += p->state == PEEK_GIL || p->state == PEEK_BLOCKED ? p->periods : 0;
    }
    /* The CPU to the running peeks that found the thread on its CPU, the
     * run-queue wait to those that found it off (queued_at).  Where no peek
     * saw the state a clock measured (a window of one peek, or a kernel
     * without the syscall file), every peek shares it; every running one
     * where none was on its CPU (or off it). */
    uint64_t on_cpu = running - queued;
    share cpu = {used, 0, on_cpu > 0 ? on_cpu : running > 0 ? running : all, 0};
    share wait = {runq, 0, queued > 0 ? queued : running > 0 ? running : all, 0};
    share away = {off, 0, blocked > 0 ? blocked : all, 0};
    location locs[SPREAD_PLACES];
    locate_held(ts, locs);
    int timeline = line_timeline_enabled();
    uint64_t mono_now = clock_wall_ns(), real_now = timeline ? line_timeline_now_ns() : 0;
    line_timeline_entry latest = {0, 0, 0, 0};
    if (timeline && !line_timeline_latest(&latest)) {
        latest.t_ns = 0;
    }
    for (int i = 0; i < n_held; i++) {
        const main_peek *p = &held[i];
        int on = running == 0 || p->state == PEEK_RUNNING;
        int away_here = blocked == 0 || p->state == PEEK_GIL || p->state == PEEK_BLOCKED;
        uint64_t p_queued = p->state == PEEK_RUNNING ? p->queued : 0;
        uint64_t c = on ? share_of(&cpu, on_cpu > 0 ? p->periods - p_queued : p->periods) : 0;
        uint64_t q = on ? share_of(&wait, queued > 0 ? p_queued : p->periods) : 0;
        uint64_t o = away_here ? share_of(&away, p->periods) : 0;
        charge_part(locs[i], p, c, q, o, core_fraction);
        uint64_t at = timeline ? realtime_of(p->last_ns, mono_now, real_now) : 0;
        if (timeline && locs[i].ok && at > latest.t_ns) {
            /* Where the thread stood up to this peek, for the GPU's late
             * windows: by peek, not by snapshot (the time line's entries
             * never go back: the snapshots of carried windows wrote theirs). */
            line_timeline_note(at, locs[i].site, locs[i].lineno, locs[i].stack);
            latest.t_ns = at;
        }
    }
    if (n_held > 0) {
        *where = locs[n_held - 1];
        where->native = held[n_held - 1].native;
    }
    sampler.totals.spread_peeks += made;
    sampler.totals.spreads++;
    n_held = 0;
    held_peeks = 0;
}

/* Whether the held peeks bear out an answer's measure of one instruction's
 * native work at `at` since t0: no peek after t0 found the thread elsewhere,
 * and one found it there after t0 (it stood there a peek's period at least),
 * or, with none after t0, one found it there before at an operator the
 * specialiser left generic (a numpy operation of a few hundred us: its type's
 * slot).  Without this, a request made in a Python loop just before a 7 ms
 * call that keeps the GIL was answered after the call, and the loop's
 * instruction kept as native work for the run: a pure-Python line read 23%
 * native. */
static int long_op_confirmed(const pyframe_position *at, uint64_t t0)
{
    int after = 0, operator = 0;
    for (int i = 0; i < n_held; i++) {
        const main_peek *p = &held[i];
        int there = p->at.frame == at->frame && p->at.code == at->code && p->at.lasti == at->lasti;
        if (!there && p->first_ns > t0) {
            return 0; /* moved on */
        }
        after |= there && p->last_ns >= t0;
        operator |= there && codes_opcode_generic_operator(p->at.opcode, p->at.oparg);
    }
    return after || operator;
}

/* The main thread's window [t->last_wall_ns, now] (wall, of which `used` on a
 * CPU and `runq` waiting for one), spread over the peeks made in it before
 * `until` (now, or when the run's stop was asked for), with
 * those of the windows before it not spread yet: until SPREAD_MIN_PEEKS peeks
 * are held, the windows' time is carried.  Divided among two or three peeks,
 * a window's time kept the single look's bias (its ends are where the thread
 * answers: after a native call, a sleep): the 70/30 split of a 7 ms native
 * call and 3 ms of Python at a 2 ms rate (peeks every 1 ms) read 0.785
 * native.  long_op: the place where the request's answer (its t0: long_op_t0)
 * measured one instruction's native work (NULL: none), kept for every later
 * peek there (LONG_OPS) where the peeks bear it out (long_op_confirmed).  *where: the place of the latest peek spread, or where the
 * thread stands (for the GPU's time line and the CPU of threads without
 * Python state).  Returns 1: the window is taken (charged or carried). */
int charge_main_spread(PyThreadState *ts, const thread_track *t, uint64_t until, uint64_t wall, uint64_t used,
                       uint64_t runq, double core_fraction, const pyframe_position *long_op, uint64_t long_op_t0,
                       location *where)
{
    int n = take_peeks(n_held > 0 || carry.wall > 0 ? 0 : t->last_wall_ns, until, held + n_held,
                       SPREAD_PLACES - n_held);
    for (int i = n_held; i < n_held + n; i++) {
        held_peeks += held[i].count;
    }
    n_held += n;
    used = used > wall ? wall : used;
    runq = runq > wall - used ? wall - used : runq;
    carry.wall += wall;
    carry.used += used;
    carry.runq += runq;
    if (long_op != NULL && long_op_confirmed(long_op, long_op_t0)) {
        long_op_note(long_op->code, long_op->lasti);
    }
    if (held_peeks < SPREAD_MIN_PEEKS && n_held < SPREAD_PLACES &&
        carry.wall <= SPREAD_CARRY_INTERVALS * sampler.options.interval_ns) {
        *where = locate(ts, 0, 0, 0, STANDING_UNKNOWN, NULL);
        return 1; /* carried, with its peeks, to the next window */
    }
    if (n_held == 0) {
        /* No peek for long (they fail): charged where it stands. */
        location here = locate(ts, 0, 0, 0, STANDING_UNKNOWN, NULL);
        charge(&here, carry.wall, carry.used, carry.runq, core_fraction);
        carry.wall = carry.used = carry.runq = 0;
        *where = here;
        return 1;
    }
    spread_held(ts, core_fraction, where);
    return 1;
}

/* GIL held: the time carried and the peeks held, spread now (the run stops,
 * or profiling pauses): over the held peeks, or, with none, where the last
 * peek was (the main thread stands in the stop's or the pause's own path:
 * located, that is the line that called it), or with none yet, where it
 * stands.  *where (may be NULL): the place charged last, left alone when
 * nothing was charged. */
void spread_flush(double core_fraction, location *where)
{
    if (carry.wall == 0 && n_held == 0) {
        return;
    }
    PyThreadState *ts = NULL;
    for (PyThreadState *o = PyInterpreterState_ThreadHead(sampler.interp); o != NULL; o = PyThreadState_Next(o)) {
        ts = o == sampler.main_ts ? o : ts; /* it may be gone: stopped from another thread */
    }
    location at;
    if (ts != NULL && n_held > 0) {
        spread_held(ts, core_fraction, &at);
    } else if (prev.have || ts != NULL) {
        at = prev.have ? prev.at : locate(ts, 0, 0, 0, STANDING_UNKNOWN, NULL);
        charge(&at, carry.wall, carry.used, carry.runq, core_fraction);
    } else {
        where = NULL; /* no main thread, no peek: nowhere to charge it */
    }
    carry.wall = carry.used = carry.runq = 0;
    n_held = 0;
    held_peeks = 0;
    if (where != NULL) {
        *where = at;
    }
}
