/* quiet_thread: the profiler's own threads (the sampler, the GPU poller). */
#ifndef PYROMETER_COMMON_QUIET_THREAD_H
#define PYROMETER_COMMON_QUIET_THREAD_H

#include <pthread.h>
#include <signal.h>

/* Starts fn(arg) on a new thread with every signal blocked, so that signals
 * meant for the program are never delivered to it and it never interrupts the
 * program's system calls.  0, or pthread_create's errno value. */
static inline int quiet_thread_create(pthread_t *thread, void *(*fn)(void *), void *arg)
{
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    int rc = pthread_create(thread, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    return rc;
}

#endif
