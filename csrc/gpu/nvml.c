/* The NVML backend (gpu.h): NVIDIA's management library, loaded at run time with
 * dlopen("libnvidia-ml.so.1") through the ordinary search path, so that no
 * NVIDIA package is needed to build or install pyrometer, and LD_LIBRARY_PATH
 * reaches a test double (tests/gpu/fake_nvml.c).
 *
 * What NVML does, as measured on an H100 (driver 580; ../shared/gpu/):
 *  - nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES, lastSeen): one sample per
 *    ~200 ms, each the busy percent of the window that ends at its timestamp
 *    (CLOCK_REALTIME us); NOT_FOUND when none is newer than lastSeen; ~1.7 ms a
 *    call.
 *  - nvmlDeviceGetProcessUtilization(lastSeen): the same windows per process
 *    (smUtil); 1.5-3 ms a call; NOT_FOUND when nothing is new.
 *  - nvmlDeviceGetComputeRunningProcesses: pid and GPU memory of each process,
 *    ~30 us; the pids are the program's own.
 * Only the few types and entry points used are declared here (no nvml.h).
 */
#include "gpu.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- NVML's declarations (nvml.h, API 12) ---------------------------------- */

typedef int nvmlReturn_t;
typedef struct nvml_device *nvmlDevice_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7

#define NVML_GPU_UTILIZATION_SAMPLES 1 /* nvmlSamplingType_t */
#define NVML_DEVICE_NAME_BUFFER_SIZE 96
#define NVML_VALUE_NOT_AVAILABLE (~0ULL) /* usedGpuMemory when the driver cannot say */

typedef enum { /* nvmlValueType_t */
    NVML_VALUE_TYPE_DOUBLE = 0,
    NVML_VALUE_TYPE_UNSIGNED_INT = 1,
    NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
    NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
    NVML_VALUE_TYPE_SIGNED_INT = 5,
} nvmlValueType_t;

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

/* nvmlDeviceGetComputeRunningProcesses (the unversioned symbol, API <= 10)
 * fills the two-field v1 record; the _v2 and _v3 symbols fill the four-field
 * one (MIG instance ids added).  Reading one layout through the other's
 * function misreads every record after the first. */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil;
    unsigned int memUtil;
    unsigned int encUtil;
    unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

/* ---- the library -------------------------------------------------------------- */

#define NVML_MAX_DEVICES 64
#define SAMPLES_MAX 256 /* NVML keeps ~100 utilisation samples a device */
#define PROCESSES_MAX 128

static struct {
    void *library;
    int initialised;
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*shutdown)(void);
    const char *(*error_string)(nvmlReturn_t);
    nvmlReturn_t (*device_count)(unsigned int *);
    nvmlReturn_t (*device_handle)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*device_name)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*samples)(nvmlDevice_t, int, unsigned long long, nvmlValueType_t *, unsigned int *,
                            nvmlSample_t *);
    nvmlReturn_t (*process_utilization)(nvmlDevice_t, nvmlProcessUtilizationSample_t *, unsigned int *,
                                        unsigned long long);
    /* One of the two, by the symbol found (see nvmlProcessInfo_v1_t). */
    nvmlReturn_t (*processes_v2)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_v2_t *);
    nvmlReturn_t (*processes_v1)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_v1_t *);
    unsigned count;
    nvmlDevice_t devices[NVML_MAX_DEVICES];
    /* Buffers for the GPU thread's calls (one call at a time). */
    nvmlSample_t samples_buf[SAMPLES_MAX];
    nvmlProcessUtilizationSample_t process_samples_buf[SAMPLES_MAX];
    nvmlProcessInfo_v2_t processes_buf[PROCESSES_MAX];
    nvmlProcessInfo_v1_t processes_v1_buf[PROCESSES_MAX];
} N;

static void say(char *why, size_t size, const char *what, nvmlReturn_t rc)
{
    const char *text = N.error_string != NULL ? N.error_string(rc) : NULL;
    if (text != NULL) {
        snprintf(why, size, "%s failed: %s (NVML error %d)", what, text, rc);
    } else {
        snprintf(why, size, "%s failed (NVML error %d)", what, rc);
    }
}

/* A symbol's address as a function pointer (POSIX guarantees the conversion
 * for dlsym's result; the memcpy keeps -Wpedantic quiet about it). */
static void *symbol(const char *name)
{
    return dlsym(N.library, name);
}

#define FIND(field, name)                                                  \
    do {                                                                   \
        void *p_ = symbol(name);                                           \
        memcpy(&N.field, &p_, sizeof p_);                                  \
    } while (0)

static void nvml_close(void)
{
    if (N.initialised && N.shutdown != NULL) {
        (void)N.shutdown();
    }
    N.initialised = 0;
    /* The library stays loaded: the program may hold it too (ctypes, torch),
     * and NVML leaves threads behind that must not lose their code. */
}

static int find_loaded_nvml(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    const char *path = info->dlpi_name;
    const char *base = path != NULL ? strrchr(path, '/') : NULL;
    if (base != NULL && strncmp(base + 1, "libnvidia-ml.so", 15) == 0) {
        char **out = data;
        snprintf(out[0], (size_t)(out[1] - out[0]), "%s", path);
        return 1;
    }
    return 0;
}

/* A libnvidia-ml the program has loaded by its path (the ordinary search found
 * none): its path in out, 1; else 0. */
static int loaded_nvml(char *out, size_t size)
{
    char *bounds[2] = {out, out + size};
    return dl_iterate_phdr(find_loaded_nvml, bounds) == 1;
}

/* The ordinary search found no library (its words in search_failed, written
 * before nvml_absent is set): read by nvml_known_absent off the GPU thread. */
static char search_failed[256];
static atomic_int nvml_absent;

static int nvml_open(char *why, size_t why_size)
{
    if (N.library == NULL) {
        /* RTLD_LOCAL: NVML's symbols must not be the ones a later library
         * (the program's own NVML bindings) binds to by accident.  Once the
         * search path had none, only a copy the program loaded since, by its
         * path, can be found: it is looked for among the loaded objects, not
         * searched for again (a profile per test under pytest --pyrometer
         * made 4 to 25 failed opens each; RTLD_NOLOAD still searches). */
        static int searched;
        char loaded[PATH_MAX];
        const char *name = !searched ? "libnvidia-ml.so.1" : loaded_nvml(loaded, sizeof loaded) ? loaded : NULL;
        N.library = name != NULL ? dlopen(name, RTLD_NOW | RTLD_LOCAL) : NULL;
        if (N.library == NULL) {
            if (!searched) {
                const char *e = dlerror();
                snprintf(search_failed, sizeof search_failed, "%s", e != NULL ? e : "libnvidia-ml.so.1 not found");
            }
            searched = 1;
            atomic_store_explicit(&nvml_absent, 1, memory_order_release);
            snprintf(why, why_size, "no NVIDIA library (%s)", search_failed);
            return 0; /* nothing to profile here, rather than a failure */
        }
        atomic_store_explicit(&nvml_absent, 0, memory_order_release);
    }
    FIND(init, "nvmlInit_v2");
    FIND(shutdown, "nvmlShutdown");
    FIND(error_string, "nvmlErrorString");
    FIND(device_count, "nvmlDeviceGetCount_v2");
    FIND(device_handle, "nvmlDeviceGetHandleByIndex_v2");
    FIND(device_name, "nvmlDeviceGetName");
    FIND(samples, "nvmlDeviceGetSamples");
    FIND(process_utilization, "nvmlDeviceGetProcessUtilization");
    FIND(processes_v2, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (N.processes_v2 == NULL) {
        FIND(processes_v2, "nvmlDeviceGetComputeRunningProcesses_v2");
    }
    if (N.processes_v2 == NULL) {
        FIND(processes_v1, "nvmlDeviceGetComputeRunningProcesses");
    }
    if (N.init == NULL || N.device_count == NULL || N.device_handle == NULL || N.samples == NULL) {
        snprintf(why, why_size, "libnvidia-ml.so.1 lacks the functions pyrometer needs (driver too old?)");
        return -1;
    }
    nvmlReturn_t rc = N.init();
    if (rc != NVML_SUCCESS) {
        say(why, why_size, "NVML's initialisation (nvmlInit)", rc);
        return -1;
    }
    N.initialised = 1;
    unsigned count = 0;
    rc = N.device_count(&count);
    if (rc != NVML_SUCCESS) {
        say(why, why_size, "counting the GPUs (nvmlDeviceGetCount)", rc);
        nvml_close();
        return -1;
    }
    N.count = 0;
    for (unsigned i = 0; i < count && N.count < NVML_MAX_DEVICES; i++) {
        /* A device that cannot be opened (no permission, lost) is left out. */
        if (N.device_handle(i, &N.devices[N.count]) == NVML_SUCCESS) {
            N.count++;
        }
    }
    if (N.count == 0) {
        snprintf(why, why_size, count ? "no GPU could be opened" : "no NVIDIA GPU found");
        nvml_close();
        return 0;
    }
    return (int)N.count;
}

static void nvml_device_name(int device, char *out, size_t size)
{
    char name[NVML_DEVICE_NAME_BUFFER_SIZE] = "";
    if (N.device_name == NULL || N.device_name(N.devices[device], name, sizeof name) != NVML_SUCCESS) {
        snprintf(name, sizeof name, "NVIDIA GPU %d", device);
    }
    name[sizeof name - 1] = '\0';
    snprintf(out, size, "%s", name);
}

static int nvml_process_usage(int device, pid_t pid, gpu_process_usage *out, char *why, size_t why_size)
{
    memset(out, 0, sizeof *out);
    unsigned count = PROCESSES_MAX;
    nvmlReturn_t rc;
    if (N.processes_v2 != NULL) {
        rc = N.processes_v2(N.devices[device], &count, N.processes_buf);
    } else if (N.processes_v1 != NULL) {
        rc = N.processes_v1(N.devices[device], &count, N.processes_v1_buf);
    } else {
        snprintf(why, why_size, "no nvmlDeviceGetComputeRunningProcesses in this NVML");
        return GPU_UNSUPPORTED;
    }
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
        /* More than PROCESSES_MAX processes on one GPU: this process's memory
         * is not known this time; the device is certainly shared. */
        out->others = 1;
        return GPU_OK;
    }
    if (rc != NVML_SUCCESS) {
        say(why, why_size, "nvmlDeviceGetComputeRunningProcesses", rc);
        return rc == NVML_ERROR_NOT_SUPPORTED ? GPU_UNSUPPORTED : GPU_FAILED;
    }
    for (unsigned i = 0; i < count && i < PROCESSES_MAX; i++) {
        unsigned p = N.processes_v2 != NULL ? N.processes_buf[i].pid : N.processes_v1_buf[i].pid;
        unsigned long long bytes = N.processes_v2 != NULL ? N.processes_buf[i].usedGpuMemory
                                                          : N.processes_v1_buf[i].usedGpuMemory;
        if (p == (unsigned)pid) {
            out->listed = 1;
            out->memory_bytes += bytes == NVML_VALUE_NOT_AVAILABLE ? 0 : bytes;
        } else {
            out->others = 1;
        }
    }
    return GPU_OK;
}

/* NVML's buffers are rings: the samples need not come out in time order. */
static void sort_samples(gpu_busy_sample *s, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        gpu_busy_sample x = s[i];
        size_t j = i;
        while (j > 0 && s[j - 1].end_us > x.end_us) {
            s[j] = s[j - 1];
            j--;
        }
        s[j] = x;
    }
}

static unsigned sample_percent(nvmlValueType_t type, nvmlValue_t v)
{
    double x;
    switch (type) {
    case NVML_VALUE_TYPE_DOUBLE: x = v.dVal; break;
    case NVML_VALUE_TYPE_UNSIGNED_LONG: x = (double)v.ulVal; break;
    case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: x = (double)v.ullVal; break;
    case NVML_VALUE_TYPE_SIGNED_LONG_LONG: x = (double)v.sllVal; break;
    case NVML_VALUE_TYPE_SIGNED_INT: x = (double)v.siVal; break;
    default: x = (double)v.uiVal; break;
    }
    return x <= 0.0 ? 0u : x >= 100.0 ? 100u : (unsigned)(x + 0.5);
}

static int nvml_busy_samples(int device, enum gpu_source source, pid_t pid, uint64_t since_us,
                             gpu_busy_sample *out, size_t max, size_t *count, char *why, size_t why_size)
{
    *count = 0;
    nvmlDevice_t dev = N.devices[device];
    if (source == GPU_SOURCE_DEVICE) {
        nvmlValueType_t type = NVML_VALUE_TYPE_UNSIGNED_INT;
        unsigned n = SAMPLES_MAX;
        nvmlReturn_t rc = N.samples(dev, NVML_GPU_UTILIZATION_SAMPLES, since_us, &type, &n, N.samples_buf);
        if (rc == NVML_ERROR_NOT_FOUND) {
            return GPU_NOTHING_NEW;
        }
        if (rc != NVML_SUCCESS) {
            say(why, why_size, "nvmlDeviceGetSamples", rc);
            return rc == NVML_ERROR_NOT_SUPPORTED ? GPU_UNSUPPORTED : GPU_FAILED;
        }
        for (unsigned i = 0; i < n && i < SAMPLES_MAX && *count < max; i++) {
            if (N.samples_buf[i].timeStamp > since_us) {
                out[*count].end_us = N.samples_buf[i].timeStamp;
                out[*count].percent = sample_percent(type, N.samples_buf[i].sampleValue);
                (*count)++;
            }
        }
    } else {
        if (N.process_utilization == NULL) {
            snprintf(why, why_size, "no nvmlDeviceGetProcessUtilization in this NVML");
            return GPU_UNSUPPORTED;
        }
        unsigned n = SAMPLES_MAX;
        nvmlReturn_t rc = N.process_utilization(dev, N.process_samples_buf, &n, since_us);
        if (rc == NVML_ERROR_NOT_FOUND) {
            return GPU_NOTHING_NEW;
        }
        if (rc != NVML_SUCCESS) {
            say(why, why_size, "nvmlDeviceGetProcessUtilization", rc);
            return rc == NVML_ERROR_NOT_SUPPORTED ? GPU_UNSUPPORTED : GPU_FAILED;
        }
        for (unsigned i = 0; i < n && i < SAMPLES_MAX && *count < max; i++) {
            const nvmlProcessUtilizationSample_t *s = &N.process_samples_buf[i];
            if (s->pid == (unsigned)pid && s->timeStamp > since_us) {
                out[*count].end_us = s->timeStamp;
                out[*count].percent = s->smUtil > 100 ? 100 : s->smUtil;
                (*count)++;
            }
        }
    }
    sort_samples(out, *count);
    return *count ? GPU_OK : GPU_NOTHING_NEW;
}

static int nvml_known_absent(char *why, size_t why_size)
{
    char loaded[PATH_MAX];
    if (!atomic_load_explicit(&nvml_absent, memory_order_acquire) || loaded_nvml(loaded, sizeof loaded)) {
        return 0;
    }
    snprintf(why, why_size, "no NVIDIA library (%s)", search_failed);
    return 1;
}

const gpu_backend gpu_nvml_backend = {
    .name = "NVML",
    .open = nvml_open,
    .known_absent = nvml_known_absent,
    .device_name = nvml_device_name,
    .process_usage = nvml_process_usage,
    .busy_samples = nvml_busy_samples,
    .close = nvml_close,
};
