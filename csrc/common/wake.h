/* wake: the sampler thread's sleep between samples, which a signal handler can
 * end early.
 *
 * A command from outside (pyrometer --on/--off, control.h) and a termination
 * signal (ending.h) arrive in a signal handler, which may not signal a
 * condition variable (pthread_cond_signal is not async-signal-safe).  With a
 * condition variable the sampler thread saw them only when its sleep ended, up
 * to ENDING_POLL_NS (20 ms) later: a resume followed within that time by a
 * call that holds the GIL (a C extension's loop, a long numpy operation) was
 * acted on only after the call returned, the sampler thread waiting for the
 * GIL meanwhile instead of looking where the main thread went.  sem_post is
 * async-signal-safe (POSIX lists it), so the sleep is a wait on a semaphore
 * that the handlers post.
 *
 * One semaphore for the process, made once and never destroyed: a handler may
 * post at any moment, before a sampler starts or after it has stopped.  A
 * forked child has its own copy (a process-private semaphore is plain memory),
 * emptied when its sampler starts.
 */
#ifndef PYROMETER_WAKE_H
#define PYROMETER_WAKE_H

#include <stdint.h>

/* Makes the semaphore (once per process; later calls only empty it of posts
 * left from before).  0, or -1 with errno set. */
int wake_prepare(void);
/* Async-signal-safe, any thread: ends the sleeper's wait (at once, or its
 * next one).  errno is kept.  Nothing before wake_prepare. */
void wake_post(void);
/* Sleeps until deadline_ns on the monotonic clock (clock.h's clock_wall_ns)
 * or a post, whichever is first: 1 when a post ended it, 0 otherwise. */
int wake_wait_until(uint64_t deadline_ns);

#endif
