/* thread_wait: whether another thread of this process sleeps in a futex on an
 * address in a given span, read from /proc/self/task/<tid>/syscall (the system
 * call a blocked thread is in and its arguments; "running" for one on a CPU).
 *
 * The sampler thread asks it of the threads it peeks at a request: one that
 * sleeps on the GIL's own lock or condition variable (pyframe_gil_span) waits
 * for the GIL, wherever its frame stands.  Its position cannot tell: since
 * 3.11 a thread also hands over the GIL right after a call to a builtin
 * returns (the eval breaker is checked there), standing on the call, where a
 * thread inside a native call that released the GIL stands too; two threads
 * calling abs() in their loops had 20-45% of their time read as system time
 * (3.11, 3.12) that way.
 *
 * One file per slot, kept open while the slot peeks the same thread (one pread
 * a peek, about 2.3 us here, Python loop included); for the sampler thread
 * only. */
#ifndef PYROMETER_THREAD_WAIT_H
#define PYROMETER_THREAD_WAIT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
    pid_t tid;    /* the thread the file is open for; 0: none */
    int fd;       /* -1: not open */
    int failures; /* opens that failed for this tid in a row */
} thread_wait_file;

#define THREAD_WAIT_FILE_INIT {0, -1, 0}

enum {
    THREAD_WAIT_UNKNOWN = -1, /* no such file, or not readable */
    THREAD_WAIT_ELSEWHERE = 0, /* running, or blocked in anything else */
    THREAD_WAIT_IN_SPAN = 1,   /* asleep in a futex on an address in the span */
};

int thread_wait_in(thread_wait_file *f, pid_t tid, uintptr_t start, size_t size);
/* The same read, telling a thread that runs from one that is blocked: what the
 * main thread's spread peeks keep (spread.c). */
enum {
    THREAD_STATE_UNKNOWN = -1, /* no such file, or not readable */
    THREAD_STATE_RUNNING = 0,  /* on a CPU, or runnable and waiting for one */
    THREAD_STATE_ON_SPAN = 1,  /* asleep in a futex on an address in the span */
    THREAD_STATE_BLOCKED = 2,  /* blocked in any other system call, or outside one */
};
int thread_state_in(thread_wait_file *f, pid_t tid, uintptr_t start, size_t size);
/* thread_wait_in's answer for a state thread_state_in gave. */
int thread_wait_of(int state);
void thread_wait_close(thread_wait_file *f);

#endif
