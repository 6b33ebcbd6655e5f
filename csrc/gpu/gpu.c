#include "gpu.h"
#include "../forks/forks.h"
#include "../common/quiet_thread.h"
#include "../common/table.h"
#include "../profile/line_timeline.h"
#include "../profile/sites.h"
#include "../common/clock.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define GPU_DEVICES_MAX 16
#define NOTICES_MAX 8
#define NOTICE_SIZE 256
#define NAME_SIZE 96
/* Samples handled in one call; NVML keeps about 100 a device. */
#define BATCH_MAX 256
/* A window's length is the time since the device's previous sample; a gap out
 * of this range (the first sample, samples the driver dropped, a process that
 * was idle and had no samples) takes the device's usual period instead. */
#define WINDOW_MIN_US 50000ULL
#define WINDOW_MAX_US 300000ULL
#define WINDOW_DEFAULT_US 200000ULL
/* A sample whose window is not yet covered by CPU snapshots waits (NVML is
 * asked again from the same lastSeen) at most this long. */
#define DEFER_MAX_US 1000000ULL
/* A device whose calls fail this many polls in a row is given up. */
#define FAILURES_MAX 5
/* How long gpu_stop waits for the GPU thread: a backend call can be slow
 * (nvmlInit takes up to a second on a cold driver) but never this slow unless
 * it hangs. */
#define JOIN_WAIT_S 5

/* A line's GPU aggregates: busy device-time, and the process's GPU memory as
 * sampled at the polls that found the program on this line. */
typedef struct {
    double busy_ns;
    double memory_sum_bytes;
    uint64_t memory_samples;
    uint64_t memory_peak_bytes;
    /* The kernel tier's (gpu_charge_work): what the line launched. */
    uint64_t kernel_ns;
    uint64_t kernels;
    uint64_t copy_bytes[GPU_COPY_DIRECTIONS];
    uint64_t memset_bytes;
    uint64_t alloc_bytes;
} gpu_line;

enum kernel_tier_status {
    KERNELS_OFF,     /* not asked for */
    KERNELS_ON,      /* subscribed, recording */
    KERNELS_ABSENT,  /* no library */
    KERNELS_BUSY,    /* another subscriber holds it: the NVML tier only */
    KERNELS_FAILED,  /* the library refused */
};

/* The kernel tier's totals, under G.lock. */
typedef struct {
    uint64_t kernels, copies, memsets, allocations;
    uint64_t kernel_ns;
    uint64_t copy_bytes[GPU_COPY_DIRECTIONS];
    uint64_t unattributed_kernel_ns;   /* records whose launch has no reported line */
    uint64_t unattributed_copy_bytes;
} kernel_totals;

typedef struct {
    char name[NAME_SIZE];
    uint64_t last_seen_us;  /* the newest sample charged: NVML's lastSeen */
    uint64_t prev_end_us;   /* that sample's end, which opens the next window */
    uint64_t period_us;     /* the usual time between samples */
    int shared;             /* other processes use it: this process's share only */
    int process_unsupported;/* per-process samples cannot be had: the device's are used */
    int self_listed;        /* this process was in its list of compute processes */
    int failures;           /* polls in a row whose utilisation call failed */
    int given_up;           /* no more utilisation polls */
    int memory_failures;    /* the same for the memory call */
    int memory_given_up;
    int used_process;       /* samples of this process's share were charged */
    int used_device;        /* samples of the whole device were charged */
    double busy_ns;
    uint64_t memory_peak_bytes;
    uint64_t samples;
} gpu_device;

enum gpu_phase {
    PHASE_OFF,         /* not started */
    PHASE_STARTING,    /* the thread is loading the backend */
    PHASE_RUNNING,     /* devices found, polling */
    PHASE_ABSENT,      /* no library or no device */
    PHASE_FAILED,      /* the library failed to start */
    PHASE_ENDED,       /* stopped after running */
};

static struct {
    const gpu_backend *backend;
    atomic_int phase;
    atomic_int running;   /* the thread keeps polling while set */
    atomic_int abandoned; /* gpu_stop gave up waiting: the thread must touch nothing */
    int explicit_request;
    void (*own_thread)(int own); /* gpu_start */
    int started;          /* by gpu_start, until gpu_stop */
    int thread_started;   /* the thread is to be joined */
    pthread_t thread;
    pid_t tid;            /* the thread's, for forks_wait_until_thread_gone */
    int pausing;          /* the thread is told to end for a fork, to go on after it */
    int paused;           /* it has: resume_after_fork starts it again */
    pthread_mutex_t wake_lock;
    pthread_cond_t wake;
    pid_t pid;
    uint64_t start_ns; /* CLOCK_REALTIME at gpu_start */

    /* Written by the GPU thread under lock; read under it by the records (gpu_records_begin). */
    pthread_mutex_t lock;
    table lines; /* (site, line) -> gpu_line */
    table stacks; /* (call stack id, 0) -> busy ns (double): the stacks the lines ran on (stacks.h) */
    int device_count;
    gpu_device devices[GPU_DEVICES_MAX];
    double unattributed_busy_ns; /* busy time in windows no CPU snapshot covered */
    uint64_t memory_peak_bytes;  /* the process's, summed over devices, at any poll */
    int notice_count;
    char notices[NOTICES_MAX][NOTICE_SIZE];
    char why[NOTICE_SIZE]; /* PHASE_ABSENT or PHASE_FAILED: the reason */

    /* The kernel tier: its status is set at gpu_start and read by the
     * sampler's snapshots (gpu_kernels_drain). */
    const gpu_kernel_backend *kernel_backend;
    atomic_int kernel_status;
    char kernel_why[NOTICE_SIZE];
    kernel_totals kernel_totals;
    /* The launches and records lost (launches_lost), read as the records are
     * (gpu_records_begin). */
    uint64_t lost_launches, lost_records;
} G = {.wake_lock = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER};

/* ---- the GPU thread (no GIL, no CPython) ------------------------------------ */

/* Caller holds G.lock. */
static void notice_unlocked(const char *text)
{
    if (G.notice_count < NOTICES_MAX) {
        snprintf(G.notices[G.notice_count++], NOTICE_SIZE, "%s", text);
    }
}

static void notice(const char *text)
{
    pthread_mutex_lock(&G.lock);
    notice_unlocked(text);
    pthread_mutex_unlock(&G.lock);
}

/* Caller holds G.lock.  NULL when the table cannot grow: the time is then
 * counted as unattributed. */
static gpu_line *line_at_unlocked(uint32_t site, int32_t lineno)
{
    int created;
    table_key key = {site, (uint64_t)(uint32_t)lineno};
    return table_upsert(&G.lines, key, &created);
}

/* Caller holds G.lock.  Busy time of the main thread's call stack (the
 * snapshot noted it beside the line): where its table cannot grow, the root
 * (no reported frame), as the line's goes to the unattributed time. */
static void charge_stack_unlocked(uint32_t stack, double busy)
{
    int created;
    table_key key = {stack, 0};
    double *into = table_upsert(&G.stacks, key, &created);
    if (into == NULL && stack != 0) {
        key.k1 = 0;
        into = table_upsert(&G.stacks, key, &created);
    }
    if (into != NULL) {
        *into += busy;
    }
}

void gpu_charge_work(uint32_t site, int32_t lineno, const gpu_work *work)
{
    pthread_mutex_lock(&G.lock);
    kernel_totals *t = &G.kernel_totals;
    gpu_line *line = site == SITE_NONE ? NULL : line_at_unlocked(site, (int32_t)lineno);
    switch (work->kind) {
    case GPU_WORK_KERNEL:
        t->kernels++;
        t->kernel_ns += work->device_ns;
        if (line != NULL) {
            line->kernel_ns += work->device_ns;
            line->kernels++;
        } else {
            t->unattributed_kernel_ns += work->device_ns;
        }
        break;
    case GPU_WORK_COPY:
        t->copies++;
        t->copy_bytes[work->direction] += work->bytes;
        if (line != NULL) {
            line->copy_bytes[work->direction] += work->bytes;
        } else {
            t->unattributed_copy_bytes += work->bytes;
        }
        break;
    case GPU_WORK_MEMSET:
        t->memsets++;
        if (line != NULL) {
            line->memset_bytes += work->bytes;
        }
        break;
    case GPU_WORK_ALLOC:
        t->allocations++;
        if (line != NULL) {
            line->alloc_bytes += work->bytes;
        }
        break;
    }
    pthread_mutex_unlock(&G.lock);
}

/* Entries copied out of the line timeline for one window (GPU thread only). */
static line_timeline_entry window_entries[LINE_TIMELINE_SLOTS];

/* Spreads a sample's busy time over the lines that ran in its window
 * (window_us ending at end_us): each timeline interval inside the window gets
 * percent% of the time it overlaps the window.  Within one window the busy
 * time cannot be placed more precisely than that: the GPU says only how much
 * of the window was busy, not when. */
static void charge_window(gpu_device *dev, uint64_t end_us, uint64_t window_us, unsigned percent)
{
    uint64_t end = end_us * 1000ULL, start = (end_us - window_us) * 1000ULL;
    double share = (double)percent / 100.0;
    size_t n = line_timeline_read(start, window_entries, LINE_TIMELINE_SLOTS);
    double covered = 0.0, paused = 0.0;
    pthread_mutex_lock(&G.lock);
    for (size_t i = 1; i < n; i++) {
        uint64_t a = window_entries[i - 1].t_ns, b = window_entries[i].t_ns;
        a = a < start ? start : a;
        b = b > end ? end : b;
        if (b <= a) {
            continue;
        }
        if (window_entries[i].site == LINE_TIMELINE_PAUSED) {
            paused += (double)(b - a); /* profiling was paused (csrc/control): charged nowhere */
            continue;
        }
        double busy = share * (double)(b - a);
        covered += (double)(b - a);
        if (window_entries[i].site == SITE_NONE) {
            G.unattributed_busy_ns += busy;
            charge_stack_unlocked(0, busy);
            continue;
        }
        gpu_line *line = line_at_unlocked(window_entries[i].site, window_entries[i].lineno);
        if (line != NULL) {
            line->busy_ns += busy;
            charge_stack_unlocked(window_entries[i].stack, busy);
        } else {
            G.unattributed_busy_ns += busy;
            charge_stack_unlocked(0, busy);
        }
    }
    double whole = ((double)(end - start) - paused) * share;
    double uncovered = whole - covered * share;
    if (uncovered > 0.0) {
        G.unattributed_busy_ns += uncovered;
        charge_stack_unlocked(0, uncovered); /* the unattributed time is the root stack's */
    }
    dev->busy_ns += whole;
    dev->samples++;
    pthread_mutex_unlock(&G.lock);
}

/* Memory readings wait until a CPU snapshot has passed their time, then go to
 * the line of the snapshot nearest to them.  Charged to the newest snapshot
 * at the time of reading instead, a reading taken just after the program
 * moved to a new line went to the line before: in the phase test, one of the
 * ten readings of a line holding 4 GiB for 1 s (10% of its average) landed on
 * the line that ran before it. */
#define MEMORY_PENDING_MAX 256

static struct {
    uint64_t t_ns[MEMORY_PENDING_MAX];
    uint64_t bytes[MEMORY_PENDING_MAX];
    size_t count;
} pending_memory;

static void charge_memory_at(uint32_t site, int32_t lineno, uint64_t bytes)
{
    if (site == SITE_NONE || site == LINE_TIMELINE_PAUSED) {
        return;
    }
    pthread_mutex_lock(&G.lock);
    gpu_line *line = line_at_unlocked(site, lineno);
    if (line != NULL) {
        line->memory_sum_bytes += (double)bytes;
        line->memory_samples++;
        if (bytes > line->memory_peak_bytes) {
            line->memory_peak_bytes = bytes;
        }
    }
    pthread_mutex_unlock(&G.lock);
}

/* Charges the readings that a snapshot has passed; final: the rest are
 * dropped (no line ran after them that the profile knows of). */
static void charge_pending_memory(int final)
{
    line_timeline_entry around[2];
    size_t kept = 0;
    for (size_t i = 0; i < pending_memory.count; i++) {
        uint64_t t = pending_memory.t_ns[i];
        size_t n = line_timeline_read(t, around, 2);
        const line_timeline_entry *after = n == 0 ? NULL : around[0].t_ns >= t ? &around[0]
                                                      : n == 2 ? &around[1] : NULL;
        /* Of the snapshots on either side of the reading, the nearer one:
         * where the program was when the memory was read is known no better
         * than that. */
        const line_timeline_entry *before = n == 2 && around[0].t_ns < t ? &around[0] : NULL;
        if (after != NULL && after->site == LINE_TIMELINE_PAUSED) {
            continue; /* read while profiling was paused (csrc/control): charged nowhere */
        }
        if (after != NULL && before != NULL && t - before->t_ns < after->t_ns - t) {
            after = before;
        }
        if (after != NULL) {
            charge_memory_at(after->site, after->lineno, pending_memory.bytes[i]);
        } else if (!final) {
            pending_memory.t_ns[kept] = t;
            pending_memory.bytes[kept++] = pending_memory.bytes[i];
        }
    }
    pending_memory.count = kept;
}

/* The process's GPU memory at t_ns (summed over devices). */
static void note_memory(uint64_t t_ns, uint64_t bytes)
{
    pthread_mutex_lock(&G.lock);
    if (bytes > G.memory_peak_bytes) {
        G.memory_peak_bytes = bytes;
    }
    pthread_mutex_unlock(&G.lock);
    if (pending_memory.count == MEMORY_PENDING_MAX) {
        return; /* no snapshot for 5 s: the program is stopped; this reading is dropped */
    }
    pending_memory.t_ns[pending_memory.count] = t_ns;
    pending_memory.bytes[pending_memory.count++] = bytes;
}

/* A call failed: after FAILURES_MAX polls in a row, that call is given up
 * (the other, utilisation or memory, goes on while it works). */
static void device_failed(gpu_device *dev, int *failures, int *given_up, const char *what, const char *why)
{
    if (++*failures < FAILURES_MAX) {
        return;
    }
    *given_up = 1;
    char text[NOTICE_SIZE];
    snprintf(text, sizeof text, "GPU %s: %s sampling stopped after %d failed polls (%s)", dev->name, what,
             FAILURES_MAX, why);
    notice(text);
}

static gpu_busy_sample batch[BATCH_MAX];

/* Charges the device's new samples; final: the last poll, which charges what
 * the timeline covers so far instead of waiting for more snapshots. */
static void poll_utilisation(int index, gpu_device *dev, uint64_t now_us, int final)
{
    char why[NOTICE_SIZE] = "";
    enum gpu_source source = dev->shared && !dev->process_unsupported ? GPU_SOURCE_PROCESS : GPU_SOURCE_DEVICE;
    size_t count = 0;
    int rc = G.backend->busy_samples(index, source, G.pid, dev->last_seen_us, batch, BATCH_MAX, &count, why,
                                     sizeof why);
    if (rc == GPU_UNSUPPORTED && source == GPU_SOURCE_PROCESS) {
        dev->process_unsupported = 1;
        char text[NOTICE_SIZE];
        snprintf(text, sizeof text,
                 "GPU %s is shared with other processes, but their shares cannot be told apart (%s): "
                 "the whole device's utilisation is charged", dev->name, why);
        notice(text);
        return; /* the next poll asks for the device's samples */
    }
    if (rc == GPU_NOTHING_NEW) {
        dev->failures = 0;
        return;
    }
    if (rc != GPU_OK) {
        device_failed(dev, &dev->failures, &dev->given_up, "utilisation", why);
        return;
    }
    dev->failures = 0;
    line_timeline_entry latest;
    uint64_t covered_to_us = line_timeline_latest(&latest) ? latest.t_ns / 1000ULL : 0;
    for (size_t i = 0; i < count; i++) {
        const gpu_busy_sample *s = &batch[i];
        if (s->end_us <= dev->last_seen_us) {
            continue;
        }
        if (!final && s->end_us > covered_to_us && now_us < s->end_us + DEFER_MAX_US) {
            break; /* the snapshots have not reached the window's end yet */
        }
        uint64_t gap = dev->prev_end_us ? s->end_us - dev->prev_end_us : 0;
        uint64_t window = dev->period_us;
        if (gap >= WINDOW_MIN_US && gap <= WINDOW_MAX_US) {
            window = gap;
            /* The device's period, for the windows whose gap says nothing. */
            dev->period_us = (dev->period_us * 7 + gap) / 8;
        }
        if (s->end_us * 1000ULL > G.start_ns) {
            /* A window reaching back before the start: only the part after it
             * can be charged (the timeline starts there); the rest counts as
             * unattributed, as the device did work then. */
            charge_window(dev, s->end_us, window, s->percent);
            if (source == GPU_SOURCE_PROCESS) {
                dev->used_process = 1;
            } else {
                dev->used_device = 1;
            }
        }
        dev->prev_end_us = s->end_us;
        dev->last_seen_us = s->end_us;
    }
}

/* One tick: the process's memory (a cheap call, ~30 us with NVML), and, when
 * with_utilisation, the utilisation samples (~1.7 ms a device). */
static void poll_once(int final, int with_utilisation)
{
    uint64_t now_us = line_timeline_now_ns() / 1000ULL;
    uint64_t memory = 0;
    int memory_known = 0;
    for (int i = 0; i < G.device_count; i++) {
        gpu_device *dev = &G.devices[i];
        gpu_process_usage usage;
        char why[NOTICE_SIZE] = "";
        int rc = dev->memory_given_up ? GPU_UNSUPPORTED
                                      : G.backend->process_usage(i, G.pid, &usage, why, sizeof why);
        if (rc == GPU_FAILED) {
            device_failed(dev, &dev->memory_failures, &dev->memory_given_up, "memory", why);
        } else if (rc == GPU_UNSUPPORTED && !dev->memory_given_up) {
            dev->memory_given_up = 1; /* not a failure: this device does not say */
        }
        if (rc == GPU_OK) {
            dev->memory_failures = 0;
            memory += usage.memory_bytes;
            memory_known = 1;
            pthread_mutex_lock(&G.lock);
            if (usage.memory_bytes > dev->memory_peak_bytes) {
                dev->memory_peak_bytes = usage.memory_bytes;
            }
            pthread_mutex_unlock(&G.lock);
            dev->self_listed |= usage.listed;
            if (usage.others && !dev->shared) {
                /* From now on this process's share (sticky: switching back and
                 * forth would charge a window twice or not at all). */
                dev->shared = 1;
            }
        }
        if (with_utilisation && !dev->given_up) {
            poll_utilisation(i, dev, now_us, final);
        }
    }
    if (with_utilisation && atomic_load(&G.kernel_status) == KERNELS_ON) {
        /* The records of finished work, every 100 ms: a record waits in the
         * library's buffer until it is full (~20,000 kernels) otherwise. */
        G.kernel_backend->flush(0);
    }
    if (memory_known) {
        note_memory(line_timeline_now_ns(), memory);
    }
    charge_pending_memory(final);
}

/* This thread's CPU is the profiler's: handed to the sampler, which leaves it
 * out of the program's (its threads without Python state) and reports it as
 * the profiler's own. */
static uint64_t own_cpu_reported_ns;

static void report_own_cpu(void)
{
    uint64_t cpu = clock_self_cpu_ns();
    if (cpu != CLOCK_UNAVAILABLE && cpu > own_cpu_reported_ns) {
        clock_helpers_cpu_add(cpu - own_cpu_reported_ns);
        own_cpu_reported_ns = cpu;
    }
}

/* Sleeps for ns unless gpu_stop wakes it; returns whether to keep going. */
static int wait_for_next_poll(uint64_t ns)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    uint64_t until = (uint64_t)now.tv_sec * 1000000000ULL + (uint64_t)now.tv_nsec + ns;
    struct timespec deadline = {(time_t)(until / 1000000000ULL), (long)(until % 1000000000ULL)};
    pthread_mutex_lock(&G.wake_lock);
    while (atomic_load(&G.running)) {
        if (pthread_cond_timedwait(&G.wake, &G.wake_lock, &deadline) == ETIMEDOUT) {
            break;
        }
    }
    pthread_mutex_unlock(&G.wake_lock);
    return atomic_load(&G.running);
}

static void *gpu_main(void *unused)
{
    (void)unused;
    if (G.own_thread != NULL) {
        G.own_thread(1); /* what the vendor library allocates here is the profiler's */
    }
    own_cpu_reported_ns = 0; /* a new thread's clock starts at 0 */
    G.tid = gettid();
    /* Started again after a fork (resume_after_fork): the devices are open. */
    if (atomic_load(&G.phase) == PHASE_STARTING) {
        char why[NOTICE_SIZE] = "";
        int n = G.backend->open(why, sizeof why);
        if (atomic_load(&G.abandoned)) {
            return NULL;
        }
        report_own_cpu();
        if (n <= 0) {
            pthread_mutex_lock(&G.lock);
            snprintf(G.why, sizeof G.why, "%s", why[0] ? why : "no GPU found");
            pthread_mutex_unlock(&G.lock);
            atomic_store(&G.phase, n < 0 ? PHASE_FAILED : PHASE_ABSENT);
            return NULL;
        }
        pthread_mutex_lock(&G.lock);
        G.device_count = n > GPU_DEVICES_MAX ? GPU_DEVICES_MAX : n;
        for (int i = 0; i < G.device_count; i++) {
            gpu_device *dev = &G.devices[i];
            memset(dev, 0, sizeof *dev);
            G.backend->device_name(i, dev->name, sizeof dev->name);
            /* Samples from before the start open the first window, uncharged. */
            dev->last_seen_us = G.start_ns / 1000ULL - DEFER_MAX_US;
            dev->period_us = WINDOW_DEFAULT_US;
        }
        pthread_mutex_unlock(&G.lock);
        atomic_store(&G.phase, PHASE_RUNNING);
    }
    for (unsigned tick = 1; wait_for_next_poll(GPU_MEMORY_POLL_NS); tick++) {
        poll_once(0, tick % (GPU_POLL_NS / GPU_MEMORY_POLL_NS) == 0);
        report_own_cpu();
    }
    if (G.pausing) {
        report_own_cpu(); /* the backend stays open for the thread started after the fork */
    } else {
        if (!atomic_load(&G.abandoned)) {
            poll_once(1, 1);
            G.backend->close();
            report_own_cpu();
        }
        atomic_store(&G.phase, PHASE_ENDED);
    }
    if (G.own_thread != NULL) {
        G.own_thread(0);
    }
    return NULL;
}

/* ---- the Python boundary (GIL held) ----------------------------------------- */

/* In a forked child the GPU thread is gone, and NVML's state (locks its own
 * threads held at the fork) cannot be trusted: the child does not profile the
 * GPU (children.py starts forked children without it). */
static void forget_in_child(void)
{
    atomic_store(&G.running, 0);
    G.started = 0;
    G.thread_started = 0;
    G.pausing = 0;
    G.paused = 0;
    line_timeline_enable(0); /* nobody reads it here */
    /* CUPTI's state (its threads, the driver's) is not usable after a fork. */
    atomic_store(&G.kernel_status, KERNELS_OFF);
    launches_forget_in_child();
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    G.wake_lock = fresh;
    G.lock = fresh;
    if (atomic_load(&G.phase) == PHASE_STARTING || atomic_load(&G.phase) == PHASE_RUNNING) {
        atomic_store(&G.phase, PHASE_ENDED);
    }
}

/* The kernel tier's start, before the program launches anything: a failure
 * leaves the NVML tier on its own, with one notice saying why. */
static void kernels_start(const char *library_dirs)
{
    char why[NOTICE_SIZE] = "";
    G.kernel_backend = &gpu_cupti_backend;
    pthread_mutex_lock(&G.lock);
    memset(&G.kernel_totals, 0, sizeof G.kernel_totals);
    G.kernel_why[0] = '\0';
    pthread_mutex_unlock(&G.lock);
    launches_start();
    int rc = G.kernel_backend->open(library_dirs, why, sizeof why);
    char text[NOTICE_SIZE];
    if (rc == GPU_OK) {
        atomic_store(&G.kernel_status, KERNELS_ON);
        if (why[0]) {
            notice(why);
        }
        return;
    }
    launches_stop();
    atomic_store(&G.kernel_status, rc == GPU_UNSUPPORTED ? KERNELS_ABSENT : rc == GPU_BUSY ? KERNELS_BUSY
                                                                                           : KERNELS_FAILED);
    snprintf(G.kernel_why, sizeof G.kernel_why, "%s", why);
    snprintf(text, sizeof text, "GPU kernel tier off, NVML utilisation only: %s", why);
    notice(text);
}

/* Starts the polling thread (signals blocked: quiet_thread.h).  0 or an errno
 * value. */
static int start_thread(void)
{
    atomic_store(&G.running, 1);
    int rc = quiet_thread_create(&G.thread, gpu_main, NULL);
    if (rc != 0) {
        atomic_store(&G.running, 0);
    } else {
        G.thread_started = 1;
    }
    return rc;
}

/* Joins the thread, waiting at most JOIN_WAIT_S with the GIL released; on a
 * backend call that does not return, leaves it behind, told to touch nothing
 * when it wakes (its condition variable and tables are never freed).  0 when
 * joined. */
static int join_thread(void)
{
    G.thread_started = 0;
    pthread_mutex_lock(&G.wake_lock);
    atomic_store(&G.running, 0);
    pthread_cond_signal(&G.wake);
    pthread_mutex_unlock(&G.wake_lock);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline); /* pthread_timedjoin_np's clock */
    deadline.tv_sec += JOIN_WAIT_S;
    rc = pthread_timedjoin_np(G.thread, NULL, &deadline);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        atomic_store(&G.abandoned, 1);
        pthread_detach(G.thread);
        pthread_mutex_lock(&G.lock);
        notice_unlocked("the GPU library did not answer within 5 s: GPU figures end there");
        pthread_mutex_unlock(&G.lock);
    }
    return rc;
}

/* A fork (forks.h): the thread is ended before it (a thread alive at the fork
 * makes it a multi-threaded one: CPython 3.12+ warns, even while the thread is
 * only looking for the GPU library at the start) and started again after it in
 * the parent, the backend left open between the two. */
static void pause_for_fork(void)
{
    if (!G.thread_started) {
        return;
    }
    G.pausing = 1;
    if (join_thread() != 0) {
        G.pausing = 0;
        return;
    }
    forks_wait_until_thread_gone(G.tid);
    G.paused = 1;
}

static void resume_after_fork(void)
{
    if (!G.paused) {
        return;
    }
    G.paused = 0;
    G.pausing = 0;
    if (atomic_load(&G.phase) == PHASE_RUNNING) { /* absent or failed: the thread had ended anyway */
        start_thread();
    }
}

int gpu_start(int explicit_request, int kernels, const char *kernel_library_dirs, void (*own_thread)(int own))
{
    static int atfork_registered;
    if (G.started || G.thread_started) {
        PyErr_SetString(PyExc_RuntimeError, "GPU profiling is already running");
        return -1;
    }
    if (!atfork_registered) {
        if (pthread_atfork(NULL, NULL, forget_in_child) != 0) {
            PyErr_SetString(PyExc_OSError, "cannot register the GPU side's fork handler");
            return -1;
        }
        atfork_registered = 1;
    }
    if ((G.lines.slots == NULL && table_init(&G.lines, sizeof(gpu_line), 64) != 0) ||
        (G.stacks.slots == NULL && table_init(&G.stacks, sizeof(double), 64) != 0)) {
        PyErr_NoMemory();
        return -1;
    }
    G.backend = &gpu_nvml_backend;
    G.explicit_request = explicit_request;
    G.own_thread = own_thread;
    atomic_store(&G.kernel_status, KERNELS_OFF);
    G.pid = getpid();
    G.start_ns = line_timeline_now_ns();
    G.device_count = 0;
    G.notice_count = 0;
    G.why[0] = '\0';
    G.unattributed_busy_ns = 0.0;
    G.memory_peak_bytes = 0;
    pending_memory.count = 0;
    atomic_store(&G.abandoned, 0);
    line_timeline_clear();
    line_timeline_enable(1);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&G.wake, &attr);
    pthread_condattr_destroy(&attr);
    atomic_store(&G.phase, PHASE_STARTING);
    G.pausing = 0;
    G.paused = 0;
    char why[NOTICE_SIZE];
    if (!kernels && G.backend->known_absent != NULL && G.backend->known_absent(why, sizeof why)) {
        /* What the thread would find at once, told without starting it (a
         * profile per test under pytest --pyrometer started and ended a
         * thread for nothing each time); no GPU measurement will look back
         * at the lines. */
        pthread_mutex_lock(&G.lock);
        snprintf(G.why, sizeof G.why, "%s", why);
        pthread_mutex_unlock(&G.lock);
        atomic_store(&G.phase, PHASE_ABSENT);
        line_timeline_enable(0);
        G.started = 1;
        return 0;
    }
    if (forks_register(pause_for_fork, resume_after_fork) != 0) {
        atomic_store(&G.phase, PHASE_OFF);
        line_timeline_enable(0);
        pthread_cond_destroy(&G.wake);
        return -1;
    }
    int rc = start_thread();
    if (rc != 0) {
        forks_unregister(pause_for_fork);
        atomic_store(&G.phase, PHASE_OFF);
        line_timeline_enable(0);
        pthread_cond_destroy(&G.wake);
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    G.started = 1;
    if (kernels) {
        kernels_start(kernel_library_dirs);
    }
    return 0;
}

void gpu_kernels_drain(void)
{
    if (atomic_load(&G.kernel_status) == KERNELS_ON) {
        launches_drain(0);
    }
}

void gpu_stop(void)
{
    if (!G.started) {
        return;
    }
    G.started = 0;
    forks_unregister(pause_for_fork);
    /* Not restarted after a fork (no GPU): nothing to join.  A backend call
     * that does not return: the program must still end. */
    if (!G.thread_started || join_thread() == 0) {
        pthread_cond_destroy(&G.wake);
        if (atomic_load(&G.kernel_status) == KERNELS_ON) {
            /* The last records are delivered on this thread (a forced flush),
             * then every launch is placed and every record charged. */
            G.kernel_backend->close();
            launches_stop();
            /* No collection meanwhile, as in a snapshot: registering a code
             * object allocates, and a collection could free one the drain has
             * found alive a moment before. */
            int collecting = PyGC_Disable();
            launches_drain(1);
            if (collecting) {
                PyGC_Enable();
            }
        }
    }
    line_timeline_enable(0);
}

int gpu_records_begin(gpu_run_record *run)
{
    int phase = atomic_load(&G.phase);
    if (phase == PHASE_OFF) {
        return 0;
    }
    launches_lost(&G.lost_launches, &G.lost_records); /* its lock is never taken inside G.lock */
    pthread_mutex_lock(&G.lock);
    *run = (gpu_run_record){
        .backend = G.backend->name,
        .status = phase == PHASE_STARTING ? "starting"
                  : phase == PHASE_ABSENT ? "absent"
                  : phase == PHASE_FAILED ? "failed"
                                          : "ok",
        .why = G.why,
        .explicit_request = G.explicit_request,
        .unattributed_busy_ns = G.unattributed_busy_ns,
        .peak_memory_bytes = G.memory_peak_bytes,
    };
    return 1;
}

void gpu_records_end(void)
{
    pthread_mutex_unlock(&G.lock);
}

int gpu_records_kernels(gpu_kernels_record *out)
{
    int status = atomic_load(&G.kernel_status);
    if (status == KERNELS_OFF) {
        return 0;
    }
    static const char *const names[] = {"off", "on", "absent", "busy", "failed"};
    const kernel_totals *t = &G.kernel_totals;
    *out = (gpu_kernels_record){
        .backend = G.kernel_backend != NULL ? G.kernel_backend->name : "",
        .status = names[status],
        .why = G.kernel_why,
        .library = status == KERNELS_ON && G.kernel_backend->library != NULL ? G.kernel_backend->library() : "",
        .kernels = t->kernels,
        .copies = t->copies,
        .memsets = t->memsets,
        .allocations = t->allocations,
        .kernel_ns = t->kernel_ns,
        .copy_htod_bytes = t->copy_bytes[GPU_COPY_HTOD],
        .copy_dtoh_bytes = t->copy_bytes[GPU_COPY_DTOH],
        .copy_dtod_bytes = t->copy_bytes[GPU_COPY_DTOD],
        .unattributed_kernel_ns = t->unattributed_kernel_ns,
        .unattributed_copy_bytes = t->unattributed_copy_bytes,
        .lost_launches = G.lost_launches,
        .lost_records = G.lost_records,
        .dropped_records = G.kernel_backend != NULL ? G.kernel_backend->dropped() : 0,
    };
    return 1;
}

int gpu_next_device(size_t *cursor, gpu_device_record *out)
{
    if (*cursor >= (size_t)G.device_count) {
        return 0;
    }
    const gpu_device *dev = &G.devices[(*cursor)++];
    *out = (gpu_device_record){dev->name, dev->used_process ? "process" : "device", dev->busy_ns,
                               dev->memory_peak_bytes, dev->samples, dev->shared};
    return 1;
}

/* A device whose share reads this process's though it never saw it listed. */
static int unlisted(const gpu_device *dev)
{
    return dev->shared && !dev->self_listed && dev->used_process;
}

int gpu_next_notice(size_t *cursor, char *text, size_t size)
{
    while (*cursor < (size_t)G.device_count) {
        const gpu_device *dev = &G.devices[(*cursor)++];
        if (unlisted(dev)) {
            snprintf(text, size,
                     "GPU %s: other processes use it and this one never appeared in its process list "
                     "(a PID namespace?): this process's share may read as 0", dev->name);
            return 1;
        }
    }
    size_t i = *cursor - (size_t)G.device_count;
    if (i >= (size_t)G.notice_count) {
        return 0;
    }
    (*cursor)++;
    snprintf(text, size, "%s", G.notices[i]);
    return 1;
}

int gpu_next_line(size_t *cursor, gpu_line_record *out)
{
    table_key key;
    gpu_line *line;
    while (G.lines.slots != NULL && (line = table_next(&G.lines, cursor, &key)) != NULL) {
        if (sites_get((uint32_t)key.k1) == NULL) {
            continue;
        }
        *out = (gpu_line_record){
            .site = (uint32_t)key.k1,
            .lineno = (int)(int32_t)(uint32_t)key.k2,
            .busy_ns = line->busy_ns,
            .memory_sum_bytes = line->memory_sum_bytes,
            .memory_samples = line->memory_samples,
            .memory_peak_bytes = line->memory_peak_bytes,
            .kernel_ns = line->kernel_ns,
            .kernels = line->kernels,
            .copy_htod_bytes = line->copy_bytes[GPU_COPY_HTOD],
            .copy_dtoh_bytes = line->copy_bytes[GPU_COPY_DTOH],
            .copy_dtod_bytes = line->copy_bytes[GPU_COPY_DTOD],
            .copy_other_bytes = line->copy_bytes[GPU_COPY_OTHER],
            .memset_bytes = line->memset_bytes,
            .alloc_bytes = line->alloc_bytes,
        };
        return 1;
    }
    return 0;
}

int gpu_next_stack(size_t *cursor, gpu_stack_record *out)
{
    table_key key;
    double *busy;
    if (G.stacks.slots == NULL || (busy = table_next(&G.stacks, cursor, &key)) == NULL) {
        return 0;
    }
    *out = (gpu_stack_record){key.k1, *busy};
    return 1;
}

void gpu_release(void)
{
    if (G.thread_started || atomic_load(&G.abandoned)) {
        return; /* a thread may still write them */
    }
    if (G.lines.slots != NULL) {
        table_release(&G.lines);
    }
    if (G.stacks.slots != NULL) {
        table_release(&G.stacks);
    }
    atomic_store(&G.phase, PHASE_OFF);
    atomic_store(&G.kernel_status, KERNELS_OFF);
    G.device_count = 0;
    G.notice_count = 0;
}
