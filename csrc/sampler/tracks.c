/* Each thread's track between snapshots: its run-queue wait (schedstat), and
 * forgetting the tracks of threads that are gone (state.h: the rooms). */
#include "state.h"
#include "../common/clock.h"
#include "../common/fd_aside.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

/* The run-queue wait in an open schedstat file (any thread may call it). */
uint64_t read_runq_fd(int fd)
{
    if (fd < 0) {
        return CLOCK_UNAVAILABLE;
    }
    char buf[96];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) {
        return CLOCK_UNAVAILABLE;
    }
    buf[n] = '\0';
    unsigned long long run, wait;
    return sscanf(buf, "%llu %llu", &run, &wait) == 2 ? (uint64_t)wait : CLOCK_UNAVAILABLE;
}

int open_schedstat(pid_t tid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", (int)tid);
    return fd_aside(open(path, O_RDONLY | O_CLOEXEC));
}

/* How long a thread has waited on the kernel's run queue, runnable but without a
 * CPU (the second field of its schedstat), in ns; CLOCK_UNAVAILABLE where the
 * kernel does not say.  The file stays open for the thread's life (one pread a
 * snapshot), close-on-exec. */
static uint64_t read_runq(thread_track *t, pid_t tid)
{
    if (t->schedstat == 0) {
        int fd = open_schedstat(tid);
        t->schedstat = fd >= 0 ? fd + 1 : -1; /* -1: not to be tried again */
    }
    return t->schedstat < 0 ? CLOCK_UNAVAILABLE : read_runq_fd(t->schedstat - 1);
}

void close_main_schedstat(void)
{
    if (sampler.main_schedstat_fd >= 0) {
        close(sampler.main_schedstat_fd);
        sampler.main_schedstat_fd = -1;
    }
}

void forget_track(thread_track *t)
{
    if (t->schedstat > 0) {
        close(t->schedstat - 1);
    }
    t->schedstat = 0;
    t->running_serial = 0;
    t->held_ns = 0; /* a child's copy of its parent's threads: not its CPU */
    t->held_busy_ns = 0.0;
    t->cpu_at.ok = 0;
    t->last_block = 0;
    t->ended_cpu_ns = 0;
}

/* Closes the schedstat file of every tracked thread. */
void forget_all_tracks(void)
{
    size_t cursor = 0;
    table_key key;
    thread_track *t;
    while (sampler.threads.slots != NULL && (t = table_next(&sampler.threads, &cursor, &key)) != NULL) {
        forget_track(t);
    }
}

/* The run-queue wait since the track was last accounted, and the new baseline. */
uint64_t runq_since(thread_track *t, pid_t tid, int fresh)
{
    uint64_t now = read_runq(t, tid);
    if (now == CLOCK_UNAVAILABLE) {
        return 0;
    }
    uint64_t waited = !fresh && now >= t->last_runq_ns ? now - t->last_runq_ns : 0;
    t->last_runq_ns = now;
    return waited;
}

/* Threads come and go; drop the tracks of those that are gone once they outnumber
 * the living, so the table follows the number of live threads. */
void prune_threads(size_t live)
{
    if (sampler.threads.count < 64 || sampler.threads.count < 2 * live) {
        return;
    }
    table fresh;
    if (table_init(&fresh, sizeof(thread_track), live * 2) != 0) {
        return;
    }
    size_t cursor = 0;
    table_key key;
    thread_track *t;
    while ((t = table_next(&sampler.threads, &cursor, &key)) != NULL) {
        if (t->seen_in == sampler.serial) {
            int created;
            thread_track *copy = table_upsert(&fresh, key, &created);
            if (copy != NULL) {
                *copy = *t;
                continue;
            }
        }
        forget_track(t);
    }
    table_release(&sampler.threads);
    sampler.threads = fresh;
}
