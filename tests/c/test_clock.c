/* clock: the sampler's time sources.  Wall time never goes back; CPU clocks advance
 * with work and not with sleep; a thread's CPU clock is readable by kernel tid from
 * another thread and unavailable once the thread is gone; intervals are exponential
 * with the requested mean and capped at 10x. */
#include "unit.h"
#include "common/clock.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MS 1000000ULL

static pid_t current_tid(void)
{
    return (pid_t)syscall(SYS_gettid);
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Burns CPU until this thread's own clock has advanced by ns; gives up (returning
 * 0) after 20 s of wall time, which only a machine starved of CPU would need. */
static int burn_cpu_ns(uint64_t ns)
{
    uint64_t start = clock_self_cpu_ns(), wall_start = clock_wall_ns();
    volatile uint64_t sink = 0;
    while (clock_self_cpu_ns() - start < ns) {
        for (int i = 0; i < 1000; i++) {
            sink += (uint64_t)i * 2654435761u;
        }
        if (clock_wall_ns() - wall_start > 20000 * MS) {
            return 0;
        }
    }
    (void)sink; /* read once: GCC 16 calls a volatile that is only written unused */
    return 1;
}

static void clock_wall_is_monotonic(void)
{
    uint64_t previous = clock_wall_ns();
    CHECK(previous != CLOCK_UNAVAILABLE);
    for (int i = 0; i < 100000; i++) {
        uint64_t now = clock_wall_ns();
        CHECK(now >= previous);
        previous = now;
    }
    uint64_t before = clock_wall_ns();
    sleep_ns(5 * MS);
    uint64_t slept = clock_wall_ns() - before;
    CHECK(slept >= 5 * MS);
    CHECK(slept < 10000 * MS);
}

static void clock_cpu_advances_with_work_not_sleep(void)
{
    uint64_t self0 = clock_self_cpu_ns(), process0 = clock_process_cpu_ns();
    CHECK(self0 != CLOCK_UNAVAILABLE && process0 != CLOCK_UNAVAILABLE);
    CHECK(self0 <= process0);
    REQUIRE(burn_cpu_ns(20 * MS));
    uint64_t self1 = clock_self_cpu_ns(), process1 = clock_process_cpu_ns();
    CHECK(self1 - self0 >= 20 * MS);
    CHECK(process1 - process0 >= 20 * MS);
    CHECK(self1 <= process1);

    sleep_ns(50 * MS);
    CHECK(clock_self_cpu_ns() - self1 < 25 * MS);
}

static void clock_thread_cpu_of_current_thread(void)
{
    pid_t tid = current_tid();
    uint64_t self0 = clock_self_cpu_ns();
    uint64_t by_tid0 = clock_thread_cpu_ns(tid);
    REQUIRE(by_tid0 != CLOCK_UNAVAILABLE);
    REQUIRE(burn_cpu_ns(20 * MS));
    uint64_t by_tid1 = clock_thread_cpu_ns(tid);
    uint64_t self1 = clock_self_cpu_ns();
    /* Both read the same kernel counter, so they interleave in order. */
    CHECK(self0 <= by_tid0);
    CHECK(by_tid0 < by_tid1);
    CHECK(by_tid1 <= self1);
    CHECK(by_tid1 - by_tid0 >= 15 * MS);
}

typedef struct {
    atomic_int tid;
    atomic_int stop;
} worker_state;

static void *burn_until_stopped(void *arg)
{
    worker_state *w = arg;
    atomic_store(&w->tid, (int)current_tid());
    while (!atomic_load(&w->stop)) {
        burn_cpu_ns(1 * MS);
    }
    return NULL;
}

/* The sampler's use: reading a thread's CPU from another thread, by tid. */
static void clock_thread_cpu_of_another_thread(void)
{
    worker_state w = {0, 0};
    pthread_t thread;
    REQUIRE(pthread_create(&thread, NULL, burn_until_stopped, &w) == 0);
    while (atomic_load(&w.tid) == 0) {
        sleep_ns(1 * MS);
    }
    pid_t tid = (pid_t)atomic_load(&w.tid);
    CHECK(tid != current_tid());

    uint64_t mine0 = clock_self_cpu_ns();
    uint64_t its0 = clock_thread_cpu_ns(tid);
    CHECK(its0 != CLOCK_UNAVAILABLE);
    uint64_t its = its0, wall_start = clock_wall_ns();
    while (its != CLOCK_UNAVAILABLE && its - its0 < 30 * MS &&
           clock_wall_ns() - wall_start < 20000 * MS) {
        sleep_ns(2 * MS);
        its = clock_thread_cpu_ns(tid);
    }
    uint64_t mine = clock_self_cpu_ns() - mine0;
    CHECK(its != CLOCK_UNAVAILABLE);
    CHECK(its - its0 >= 30 * MS);
    /* It is the worker's CPU, not ours: we mostly slept. */
    CHECK(mine < its - its0);

    atomic_store(&w.stop, 1);
    REQUIRE(pthread_join(thread, NULL) == 0);
    /* The kernel wakes pthread_join a moment before it lets go of the thread. */
    uint64_t after = clock_thread_cpu_ns(tid);
    for (int i = 0; i < 2000 && after != CLOCK_UNAVAILABLE; i++) {
        sleep_ns(1 * MS);
        after = clock_thread_cpu_ns(tid);
    }
    CHECK(after == CLOCK_UNAVAILABLE);
}

static void clock_thread_cpu_of_missing_tid(void)
{
    /* Above PID_MAX_LIMIT (4 Mi), so no thread has this id on any Linux system. */
    CHECK(clock_thread_cpu_ns(0x0FFFFFFF) == CLOCK_UNAVAILABLE);
    CHECK(clock_thread_cpu_ns(4194304 + 1) == CLOCK_UNAVAILABLE);
    FILE *f = fopen("/proc/sys/kernel/pid_max", "r");
    if (f != NULL) {
        long pid_max = 0;
        if (fscanf(f, "%ld", &pid_max) == 1 && pid_max > 0) {
            CHECK(clock_thread_cpu_ns((pid_t)pid_max) == CLOCK_UNAVAILABLE);
        }
        fclose(f);
    }
}

/* A live thread of another process is not ours to read. */
static void clock_thread_cpu_of_another_process(void)
{
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        for (;;) {
            pause();
        }
    }
    CHECK(clock_thread_cpu_ns(child) == CLOCK_UNAVAILABLE);
    kill(child, SIGKILL);
    int status;
    CHECK(waitpid(child, &status, 0) == child);
}

typedef struct {
    double mean, above_mean;
    uint64_t min, max;
} draw_stats;

static draw_stats draw(uint64_t mean_ns, uint64_t seed, int n)
{
    draw_stats s = {0, 0, UINT64_MAX, 0};
    uint64_t rng = seed;
    double sum = 0;
    int above = 0;
    for (int i = 0; i < n; i++) {
        uint64_t x = clock_random_interval_ns(mean_ns, &rng);
        sum += (double)x;
        above += x > mean_ns;
        s.min = x < s.min ? x : s.min;
        s.max = x > s.max ? x : s.max;
    }
    s.mean = sum / n;
    s.above_mean = (double)above / n;
    return s;
}

static void clock_random_interval_has_requested_mean(void)
{
    /* 10 us is the shortest interval the module accepts; 1 ms the usual one. */
    const uint64_t means[] = {10000, 1 * MS, 10 * MS, 1000 * MS};
    const uint64_t seeds[] = {0x9E3779B97F4A7C15ULL, 1, 0xDEADBEEFCAFEF00DULL};
    for (size_t m = 0; m < sizeof means / sizeof means[0]; m++) {
        for (size_t k = 0; k < sizeof seeds / sizeof seeds[0]; k++) {
            draw_stats s = draw(means[m], seeds[k], 100000);
            double mean = (double)means[m];
            if (!(fabs(s.mean - mean) <= 0.05 * mean)) {
                unit_fail(__FILE__, __LINE__, "mean %.0f ns for requested %.0f ns (seed %zu)",
                          s.mean, mean, k);
            }
            CHECK(s.max <= 10 * means[m]);
            CHECK(s.min >= 1000);
            /* Exponential, not merely the right mean: P(X > mean) = 1/e. */
            if (!(fabs(s.above_mean - exp(-1.0)) < 0.01)) {
                unit_fail(__FILE__, __LINE__, "%.4f of draws above the mean, want 1/e",
                          s.above_mean);
            }
        }
    }
}

static void clock_random_interval_capped_at_ten_times_mean(void)
{
    /* P(X > 10 mean) = e^-10: about 45 of a million draws reach the cap. */
    draw_stats s = draw(1 * MS, 12345, 1000000);
    CHECK_EQ(s.max, 10 * MS);
}

static void clock_random_interval_is_reproducible(void)
{
    uint64_t a = 42, b = 42, c = 43;
    int same = 1, differs = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t before = a;
        uint64_t x = clock_random_interval_ns(1 * MS, &a);
        CHECK(a != before);
        same &= x == clock_random_interval_ns(1 * MS, &b);
        differs |= x != clock_random_interval_ns(1 * MS, &c);
    }
    CHECK(same);
    CHECK(differs);
}

const unit_test clock_tests[] = {
    UNIT_TEST(clock_wall_is_monotonic),
    UNIT_TEST(clock_cpu_advances_with_work_not_sleep),
    UNIT_TEST(clock_thread_cpu_of_current_thread),
    UNIT_TEST(clock_thread_cpu_of_another_thread),
    UNIT_TEST(clock_thread_cpu_of_missing_tid),
    UNIT_TEST(clock_thread_cpu_of_another_process),
    UNIT_TEST(clock_random_interval_has_requested_mean),
    UNIT_TEST(clock_random_interval_capped_at_ten_times_mean),
    UNIT_TEST(clock_random_interval_is_reproducible),
    {NULL, NULL, NULL},
};
