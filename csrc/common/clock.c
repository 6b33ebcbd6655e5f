#include "clock.h"

#include <math.h>
#include <stdatomic.h>
#include <time.h>

static uint64_t read_clock(clockid_t id)
{
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0) {
        return CLOCK_UNAVAILABLE;
    }
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

uint64_t clock_wall_ns(void) { return read_clock(CLOCK_MONOTONIC); }
uint64_t clock_process_cpu_ns(void) { return read_clock(CLOCK_PROCESS_CPUTIME_ID); }
uint64_t clock_self_cpu_ns(void) { return read_clock(CLOCK_THREAD_CPUTIME_ID); }

uint64_t clock_thread_cpu_ns(pid_t tid)
{
    /* tid 0 encodes the *calling* thread's clock (the kernel reads pid 0 as
     * "self"), and 0 is what a thread state says before its thread has run
     * (3.12+; see pyframe_thread_tid): read as is, a sampler looking at a thread
     * that is only being started would charge its own CPU, or its creator's, to
     * that thread. */
    if (tid <= 0) {
        return CLOCK_UNAVAILABLE;
    }
    /* Linux encodes a thread's CPU clock as ~tid << 3 | CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED
     * (what glibc's pthread_getcpuclockid computes).  Building it from the kernel tid
     * instead of a pthread_t matters: a pthread_t of a thread that has exited is
     * undefined behaviour to use, while a stale tid only makes clock_gettime fail. */
    unsigned int encoded = (~(unsigned int)tid << 3) | 6u;
    return read_clock((clockid_t)encoded);
}

uint64_t clock_random_interval_ns(uint64_t mean_ns, uint64_t *rng_state)
{
    uint64_t x = *rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *rng_state = x;
    double u = ((double)(x >> 11) + 0.5) / 9007199254740992.0; /* (0, 1) */
    double interval = -log(u) * (double)mean_ns;
    /* Cap at 10x the mean: a pathological draw must not leave a long gap in a short run. */
    if (interval > 10.0 * (double)mean_ns) {
        interval = 10.0 * (double)mean_ns;
    }
    return interval < 1000.0 ? 1000 : (uint64_t)interval;
}

static _Atomic uint64_t helpers_cpu_ns;

void clock_helpers_cpu_add(uint64_t ns)
{
    atomic_fetch_add_explicit(&helpers_cpu_ns, ns, memory_order_relaxed);
}

uint64_t clock_helpers_cpu_ns(void)
{
    return atomic_load_explicit(&helpers_cpu_ns, memory_order_relaxed);
}
