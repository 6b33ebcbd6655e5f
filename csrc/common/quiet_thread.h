/* quiet_thread: the profiler's own threads (the sampler, the GPU poller). */
#ifndef PYROMETER_COMMON_QUIET_THREAD_H
#define PYROMETER_COMMON_QUIET_THREAD_H

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

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

/* The calling thread asks the scheduler for the shortest time slice (0.1 ms,
 * Linux 6.12's custom slices of EEVDF; older kernels ignore the request),
 * keeping its nice value, so that its wakeups preempt the running task at
 * once.  With the default slice a woken sampler waited on a busy CPU until the
 * thread running there was descheduled, which happens at a tick or at the first
 * system call that reads the scheduler's clock (clock_gettime of a CPU clock:
 * time.thread_time, time.process_time): the sampler then always found that
 * thread inside such a call, and a loop testing time.thread_time() every 0.4 ms
 * had 10-30% of its CPU read as native time on that call (truth: 0.2%). */
static inline void quiet_thread_prompt(void)
{
#ifdef SYS_sched_setattr
    struct {
        uint32_t size, policy;
        uint64_t flags;
        int32_t nice;
        uint32_t priority;
        uint64_t runtime, deadline, period;
    } attr = {48, 0 /* SCHED_OTHER */, 0, 0, 0, 100000 /* ns */, 0, 0};
    pid_t self = (pid_t)syscall(SYS_gettid);
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, (id_t)self);
    if (errno != 0) {
        return;
    }
    attr.nice = nice;
    int saved = errno;
    (void)syscall(SYS_sched_setattr, self, &attr, 0);
    errno = saved;
#endif
}

#endif
