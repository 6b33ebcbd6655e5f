/* A test double of libnvidia-ml.so.1: the few NVML entry points pyrometer uses
 * (csrc/gpu/nvml.c), replaying what NVML was measured to do on an H100
 * (../shared/gpu/nvml-*-h100.json):
 *  - utilisation is one sample per window (FAKE_NVML_PERIOD_MS, 200 ms), the busy
 *    percent of the window ending at the sample's CLOCK_REALTIME us timestamp,
 *    published FAKE_NVML_LAG_MS (30 ms) after the window ends;
 *  - nvmlDeviceGetSamples / nvmlDeviceGetProcessUtilization return the samples
 *    newer than lastSeen, NOT_FOUND when there are none; NVML keeps the last
 *    100 or so;
 *  - nvmlDeviceGetComputeRunningProcesses lists this process (once it "used" the
 *    GPU) with its memory, and another process when FAKE_NVML_OTHER_PID is set.
 *
 * The profiled program drives it through ctypes.CDLL("libnvidia-ml.so.1"), the
 * same handle pyrometer's dlopen got: fake_nvml_busy(device, on) marks the GPU
 * busy or idle from now, fake_nvml_memory(device, bytes) sets the memory this
 * process holds.  Busy intervals are kept with CLOCK_REALTIME, as NVML's times.
 *
 * Environment: FAKE_NVML_INIT_ERROR (nvmlInit_v2 returns it), FAKE_NVML_DEVICES
 * (default 1), FAKE_NVML_OTHER_PID and FAKE_NVML_OTHER_BUSY (another process
 * busy that percent of every window on device 0), FAKE_NVML_CALL_US (each
 * sample call costs that long: 1700 is NVML's), FAKE_NVML_FAIL_AFTER (sample
 * calls fail with NVML_ERROR_UNKNOWN after that many), FAKE_NVML_NO_PROCESS_UTIL
 * (nvmlDeviceGetProcessUtilization is NOT_SUPPORTED), FAKE_NVML_INIT_ALLOC
 * (the first nvmlInit_v2 mallocs and touches that many bytes, held until the
 * last nvmlShutdown: what a vendor library allocates on pyrometer's GPU thread).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_UNKNOWN 999

typedef union {
    double dVal;
    int siVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
} nvmlValue_t;
typedef struct {
    unsigned long long timeStamp;
    nvmlValue_t sampleValue;
} nvmlSample_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;
typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

#define DEVICES_MAX 4
#define INTERVALS_MAX 4096
#define KEPT_SAMPLES 100

typedef struct {
    int index;
    uint64_t busy_from[INTERVALS_MAX], busy_to[INTERVALS_MAX]; /* us; to == 0: still busy */
    int intervals;
    unsigned long long memory;
    int used; /* this process made a "context" on it */
} device;

static struct {
    pthread_mutex_t lock;
    int inits;
    void *held; /* FAKE_NVML_INIT_ALLOC bytes, from the first init to the last shutdown */
    uint64_t origin_us; /* the windows' grid */
    unsigned devices;
    device dev[DEVICES_MAX];
    uint64_t period_us, lag_us, call_us;
    unsigned other_pid, other_busy;
    long fail_after, sample_calls;
    int no_process_util;
} F = {.lock = PTHREAD_MUTEX_INITIALIZER};

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000ULL + (uint64_t)ts.tv_nsec / 1000ULL;
}

static long env_long(const char *name, long fallback)
{
    const char *v = getenv(name);
    return v != NULL && *v ? strtol(v, NULL, 10) : fallback;
}

static void configure(void)
{
    F.period_us = (uint64_t)env_long("FAKE_NVML_PERIOD_MS", 200) * 1000ULL;
    F.lag_us = (uint64_t)env_long("FAKE_NVML_LAG_MS", 30) * 1000ULL;
    F.call_us = (uint64_t)env_long("FAKE_NVML_CALL_US", 0);
    long n = env_long("FAKE_NVML_DEVICES", 1);
    F.devices = n < 0 ? 0 : n > DEVICES_MAX ? DEVICES_MAX : (unsigned)n;
    F.other_pid = (unsigned)env_long("FAKE_NVML_OTHER_PID", 0);
    F.other_busy = (unsigned)env_long("FAKE_NVML_OTHER_BUSY", 0);
    F.fail_after = env_long("FAKE_NVML_FAIL_AFTER", -1);
    F.no_process_util = env_long("FAKE_NVML_NO_PROCESS_UTIL", 0) != 0;
    for (int i = 0; i < DEVICES_MAX; i++) {
        F.dev[i].index = i;
    }
    /* The grid starts somewhere inside a window, as the driver's does. */
    F.origin_us = now_us() - 73000ULL;
}

static device *valid(void *handle)
{
    for (unsigned i = 0; i < F.devices; i++) {
        if (handle == (void *)&F.dev[i]) {
            return &F.dev[i];
        }
    }
    return NULL;
}

/* Microseconds of [a, b) in which this process kept the device busy; lock held. */
static uint64_t busy_in(const device *d, uint64_t a, uint64_t b)
{
    uint64_t total = 0, now = now_us();
    for (int i = 0; i < d->intervals; i++) {
        uint64_t from = d->busy_from[i], to = d->busy_to[i] ? d->busy_to[i] : now;
        from = from < a ? a : from;
        to = to > b ? b : to;
        total += to > from ? to - from : 0;
    }
    return total;
}

static unsigned percent(uint64_t part, uint64_t whole)
{
    double p = whole ? 100.0 * (double)part / (double)whole : 0.0;
    return p >= 100.0 ? 100u : (unsigned)(p + 0.5);
}

/* The windows published by now and newer than last_seen, each call visiting
 * their ends in order: the count; lock held. */
typedef void (*window_fn)(uint64_t end, uint64_t start, void *ctx);
static void each_window(uint64_t last_seen, window_fn fn, void *ctx)
{
    uint64_t now = now_us();
    if (now < F.origin_us + F.period_us + F.lag_us) {
        return;
    }
    uint64_t newest = (now - F.lag_us - F.origin_us) / F.period_us; /* windows 1..newest are out */
    uint64_t first = newest > KEPT_SAMPLES ? newest - KEPT_SAMPLES + 1 : 1;
    for (uint64_t k = first; k <= newest; k++) {
        uint64_t end = F.origin_us + k * F.period_us;
        if (end > last_seen) {
            fn(end, end - F.period_us, ctx);
        }
    }
}

static void pay_call(void)
{
    if (F.call_us) {
        usleep((useconds_t)F.call_us);
    }
}

/* ---- the NVML entry points ---------------------------------------------------- */

EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    long error = env_long("FAKE_NVML_INIT_ERROR", 0);
    if (error) {
        return (nvmlReturn_t)error;
    }
    pthread_mutex_lock(&F.lock);
    if (F.inits++ == 0 && F.origin_us == 0) {
        configure();
    }
    long held = env_long("FAKE_NVML_INIT_ALLOC", 0);
    if (held > 0 && F.held == NULL && (F.held = malloc((size_t)held)) != NULL) {
        memset(F.held, 1, (size_t)held);
    }
    pthread_mutex_unlock(&F.lock);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&F.lock);
    int ok = F.inits > 0;
    F.inits -= ok;
    if (F.inits == 0) {
        free(F.held);
        F.held = NULL;
    }
    pthread_mutex_unlock(&F.lock);
    return ok ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t rc)
{
    switch (rc) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case 9: return "Driver Not Loaded";
    default: return "Unknown Error";
    }
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (F.inits == 0) {
        return NVML_ERROR_UNINITIALIZED;
    }
    *count = F.devices;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **handle)
{
    if (F.inits == 0) {
        return NVML_ERROR_UNINITIALIZED;
    }
    if (index >= F.devices) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *handle = &F.dev[index];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(void *handle, char *name, unsigned int length)
{
    device *d = valid(handle);
    if (d == NULL || length == 0) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    snprintf(name, length, "Fake H100 80GB HBM3 #%d", d->index);
    return NVML_SUCCESS;
}

typedef struct {
    device *d;
    nvmlSample_t *out;
    unsigned max, n;
} samples_ctx;

static void add_device_sample(uint64_t end, uint64_t start, void *p)
{
    samples_ctx *c = p;
    unsigned ours = percent(busy_in(c->d, start, end), end - start);
    unsigned other = c->d->index == 0 && F.other_pid ? F.other_busy : 0;
    if (c->n < c->max && c->out != NULL) {
        c->out[c->n].timeStamp = end;
        c->out[c->n].sampleValue.uiVal = ours + other > 100 ? 100 : ours + other;
    }
    c->n++;
}

EXPORT nvmlReturn_t nvmlDeviceGetSamples(void *handle, int type, unsigned long long last_seen, int *value_type,
                                         unsigned int *count, nvmlSample_t *samples)
{
    pay_call();
    pthread_mutex_lock(&F.lock);
    device *d = valid(handle);
    nvmlReturn_t rc = NVML_SUCCESS;
    if (F.inits == 0) {
        rc = NVML_ERROR_UNINITIALIZED;
    } else if (d == NULL || type != 1 || count == NULL || value_type == NULL) {
        rc = NVML_ERROR_INVALID_ARGUMENT;
    } else if (F.fail_after >= 0 && F.sample_calls++ >= F.fail_after) {
        rc = NVML_ERROR_UNKNOWN;
    } else if (samples == NULL) {
        *count = KEPT_SAMPLES; /* as NVML: the size of its buffer */
    } else {
        samples_ctx c = {d, samples, *count, 0};
        each_window(last_seen, add_device_sample, &c);
        *value_type = 1; /* NVML_VALUE_TYPE_UNSIGNED_INT */
        if (c.n > c.max) {
            rc = NVML_ERROR_INSUFFICIENT_SIZE;
        } else if (c.n == 0) {
            rc = NVML_ERROR_NOT_FOUND;
        }
        *count = c.n;
    }
    pthread_mutex_unlock(&F.lock);
    return rc;
}

typedef struct {
    device *d;
    nvmlProcessUtilizationSample_t *out;
    unsigned max, n;
} process_ctx;

static void add_process_samples(uint64_t end, uint64_t start, void *p)
{
    process_ctx *c = p;
    unsigned pids[2] = {c->d->used ? (unsigned)getpid() : 0, c->d->index == 0 ? F.other_pid : 0};
    unsigned utils[2] = {percent(busy_in(c->d, start, end), end - start), F.other_busy};
    for (int i = 0; i < 2; i++) {
        if (pids[i] == 0) {
            continue;
        }
        if (c->n < c->max && c->out != NULL) {
            nvmlProcessUtilizationSample_t *s = &c->out[c->n];
            memset(s, 0, sizeof *s);
            s->pid = pids[i];
            s->timeStamp = end;
            s->smUtil = utils[i];
        }
        c->n++;
    }
}

EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(void *handle, nvmlProcessUtilizationSample_t *utilization,
                                                    unsigned int *count, unsigned long long last_seen)
{
    pay_call();
    pthread_mutex_lock(&F.lock);
    device *d = valid(handle);
    nvmlReturn_t rc = NVML_SUCCESS;
    if (F.inits == 0) {
        rc = NVML_ERROR_UNINITIALIZED;
    } else if (d == NULL || count == NULL) {
        rc = NVML_ERROR_INVALID_ARGUMENT;
    } else if (F.no_process_util) {
        rc = NVML_ERROR_NOT_SUPPORTED;
    } else {
        process_ctx c = {d, utilization, utilization != NULL ? *count : 0, 0};
        each_window(last_seen, add_process_samples, &c);
        if (c.n == 0) {
            rc = NVML_ERROR_NOT_FOUND;
        } else if (c.n > c.max) {
            rc = NVML_ERROR_INSUFFICIENT_SIZE;
        }
        *count = c.n;
    }
    pthread_mutex_unlock(&F.lock);
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void *handle, unsigned int *count,
                                                            nvmlProcessInfo_t *infos)
{
    pthread_mutex_lock(&F.lock);
    device *d = valid(handle);
    nvmlReturn_t rc = NVML_SUCCESS;
    if (F.inits == 0) {
        rc = NVML_ERROR_UNINITIALIZED;
    } else if (d == NULL || count == NULL) {
        rc = NVML_ERROR_INVALID_ARGUMENT;
    } else {
        nvmlProcessInfo_t list[2];
        unsigned n = 0;
        if (d->used) {
            list[n++] = (nvmlProcessInfo_t){(unsigned)getpid(), d->memory, 0xFFFFFFFFu, 0xFFFFFFFFu};
        }
        if (d->index == 0 && F.other_pid) {
            list[n++] = (nvmlProcessInfo_t){F.other_pid, 3ULL << 30, 0xFFFFFFFFu, 0xFFFFFFFFu};
        }
        if (infos == NULL || *count < n) {
            rc = n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
        } else {
            memcpy(infos, list, n * sizeof list[0]);
        }
        *count = n;
    }
    pthread_mutex_unlock(&F.lock);
    return rc;
}

/* ---- driven by the test program ------------------------------------------------ */

EXPORT int fake_nvml_busy(int index, int on)
{
    if (index < 0 || index >= DEVICES_MAX) {
        return -1;
    }
    pthread_mutex_lock(&F.lock);
    device *d = &F.dev[index];
    d->used = 1;
    uint64_t now = now_us();
    int open = d->intervals > 0 && d->busy_to[d->intervals - 1] == 0;
    if (on && !open && d->intervals < INTERVALS_MAX) {
        d->busy_from[d->intervals] = now;
        d->busy_to[d->intervals] = 0;
        d->intervals++;
    } else if (!on && open) {
        d->busy_to[d->intervals - 1] = now;
    }
    pthread_mutex_unlock(&F.lock);
    return 0;
}

EXPORT int fake_nvml_memory(int index, unsigned long long bytes)
{
    if (index < 0 || index >= DEVICES_MAX) {
        return -1;
    }
    pthread_mutex_lock(&F.lock);
    F.dev[index].used = 1;
    F.dev[index].memory = bytes;
    pthread_mutex_unlock(&F.lock);
    return 0;
}
