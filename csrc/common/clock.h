/* clock: the time sources the profiler reads, all in nanoseconds.  Every
 * function here is async-signal-safe (clock_gettime or an atomic only). */
#ifndef PYROMETER_CLOCK_H
#define PYROMETER_CLOCK_H

#include <stdint.h>
#include <sys/types.h>

#define CLOCK_UNAVAILABLE UINT64_MAX

uint64_t clock_wall_ns(void);         /* monotonic wall clock */
uint64_t clock_process_cpu_ns(void);  /* CPU of every thread of the process */
uint64_t clock_self_cpu_ns(void);     /* CPU of the calling thread */
/* CPU of the thread with kernel id tid, read from any thread of the process;
 * CLOCK_UNAVAILABLE when that thread no longer exists, or tid is not a thread
 * id (0 or less: never the calling thread's clock). */
uint64_t clock_thread_cpu_ns(pid_t tid);
/* The CPU of the profiler's threads that have no Python state (the GPU
 * thread), which is the profiler's, not the program's native time: each adds
 * its own as it goes (any thread, no GIL); the sampler reads the total. */
void clock_helpers_cpu_add(uint64_t ns);
uint64_t clock_helpers_cpu_ns(void);

/* Exponentially distributed interval with the given mean, from a xorshift state
 * (which must start non-zero):
 * memoryless sampling times cannot alias with periodic work in the program. */
uint64_t clock_random_interval_ns(uint64_t mean_ns, uint64_t *rng_state);

#endif
