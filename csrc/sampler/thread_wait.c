/* thread_wait: see thread_wait.h. */
#include "thread_wait.h"
#include "../common/fd_aside.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Opens that fail for one thread before it is given up: the file is missing
 * where the kernel lacks it, and, for a live thread, an open fails now and
 * then with ENOENT on this machine's kernel (1 in 4 in a loop of opens; a
 * file kept open never failed a read). */
#define OPEN_TRIES 8

void thread_wait_close(thread_wait_file *f)
{
    if (f->fd >= 0) {
        close(f->fd);
    }
    *f = (thread_wait_file)THREAD_WAIT_FILE_INIT;
}

static int open_for(thread_wait_file *f, pid_t tid)
{
    if (f->tid != tid) {
        thread_wait_close(f);
        f->tid = tid;
    }
    if (f->fd == -1 && tid > 0 && f->failures < OPEN_TRIES) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)tid);
        f->fd = fd_aside(open(path, O_RDONLY | O_CLOEXEC));
        f->failures = f->fd >= 0 ? 0 : f->failures + 1;
    }
    return f->fd;
}

int thread_state_in(thread_wait_file *f, pid_t tid, uintptr_t start, size_t size)
{
    int fd = open_for(f, tid);
    if (fd < 0) {
        return THREAD_STATE_UNKNOWN;
    }
    /* "202 0xADDR 0x.. ..." (number, six arguments, stack and instruction
     * pointers), "-1 0xSP 0xPC" (blocked outside a call), or "running". */
    char buf[256];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) {
        thread_wait_close(f); /* the thread is gone (ESRCH): its id may come back for another */
        return THREAD_STATE_UNKNOWN;
    }
    buf[n] = '\0';
    if (buf[0] == 'r') {
        return THREAD_STATE_RUNNING;
    }
    if (buf[0] < '0' || buf[0] > '9') {
        return THREAD_STATE_BLOCKED; /* "-1 ...": blocked, not in a system call */
    }
    char *end;
    long nr = strtol(buf, &end, 10);
    if (nr != SYS_futex || *end != ' ') {
        return THREAD_STATE_BLOCKED;
    }
    unsigned long long addr = strtoull(end + 1, &end, 16);
    if (end == NULL || (*end != ' ' && *end != '\n')) {
        return THREAD_STATE_UNKNOWN;
    }
    return addr >= start && addr - start < size ? THREAD_STATE_ON_SPAN : THREAD_STATE_BLOCKED;
}

int thread_wait_of(int state)
{
    switch (state) {
    case THREAD_STATE_ON_SPAN:
        return THREAD_WAIT_IN_SPAN;
    case THREAD_STATE_UNKNOWN:
        return THREAD_WAIT_UNKNOWN;
    default:
        return THREAD_WAIT_ELSEWHERE;
    }
}

int thread_wait_in(thread_wait_file *f, pid_t tid, uintptr_t start, size_t size)
{
    return thread_wait_of(thread_state_in(f, tid, start, size));
}
