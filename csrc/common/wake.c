#include "wake.h"

#include <errno.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <time.h>

static sem_t sem;
/* Set once the semaphore exists; read by handlers, so lock-free. */
static atomic_int made;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "signal handlers read it");

int wake_prepare(void)
{
    if (!atomic_load(&made)) {
        if (sem_init(&sem, 0, 0) != 0) {
            return -1;
        }
        atomic_store(&made, 1);
        return 0;
    }
    while (sem_trywait(&sem) == 0) {
        /* posts from before this sampler (a command since acted on) */
    }
    return 0;
}

void wake_post(void)
{
    if (!atomic_load(&made)) {
        return;
    }
    int saved_errno = errno;
    (void)sem_post(&sem); /* EOVERFLOW: posts enough are waiting */
    errno = saved_errno;
}

static struct timespec to_timespec(uint64_t ns)
{
    return (struct timespec){(time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL)};
}

int wake_wait_until(uint64_t deadline_ns)
{
    for (;;) {
        int rc;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 30))
        struct timespec deadline = to_timespec(deadline_ns);
        rc = sem_clockwait(&sem, CLOCK_MONOTONIC, &deadline);
#else
        /* sem_timedwait's deadline is on the real-time clock: the monotonic
         * one's distance to the deadline, added to the real time now. */
        struct timespec mono, real;
        clock_gettime(CLOCK_MONOTONIC, &mono);
        clock_gettime(CLOCK_REALTIME, &real);
        uint64_t now = (uint64_t)mono.tv_sec * 1000000000ULL + (uint64_t)mono.tv_nsec;
        uint64_t left = deadline_ns > now ? deadline_ns - now : 0;
        struct timespec deadline =
            to_timespec((uint64_t)real.tv_sec * 1000000000ULL + (uint64_t)real.tv_nsec + left);
        rc = sem_timedwait(&sem, &deadline);
#endif
        if (rc == 0) {
            /* The other posts that came meanwhile are for the same wake (the
             * waker records what it wants seen before it posts). */
            while (sem_trywait(&sem) == 0) {
            }
            return 1;
        }
        if (errno != EINTR) {
            return 0; /* ETIMEDOUT (or a failure, taken as the deadline) */
        }
    }
}
