/* The CUPTI kernel tier (gpu.h): NVIDIA's tracing library, loaded at run time
 * with dlopen (libcupti.so.13, .12, ...), so that nothing of CUDA is needed to
 * build or install pyrometer: a copy already loaded, else from the
 * directories the caller names (LD_LIBRARY_PATH's, which reach a test double,
 * tests/gpu/fake_cupti.c; then where pip's CUDA packages and the CUDA toolkit
 * keep it, which no search path names: PyTorch loads its copy only once
 * imported), else through the ordinary search path.
 *
 * What CUPTI does (its headers, and the H100 trace in ../shared/gpu/):
 *  - cuptiSubscribe registers the one callback function of a process: a second
 *    subscriber (torch.profiler, JAX's profiler) gets
 *    CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED.
 *  - The callback runs on the thread making the CUDA call, at its entry and
 *    exit, with a correlation id; the runtime's call and the driver calls it
 *    makes share that id.
 *  - Activity records (a kernel's device start and end, a copy's bytes and
 *    direction, an allocation) are written into buffers that the library asks
 *    for through a callback, and handed back full, or at cuptiActivityFlushAll,
 *    through another callback, on a thread of the library's or the flushing
 *    one; each carries the correlation id of the call that caused it.
 * So the callback notes the launching line under the id (launches.h), and the
 * records are charged to it.  Only the few types, values and record layouts
 * used are declared here (no CUDA headers); each says the header it was
 * checked against.
 */
#include "gpu.h"
#include "launches.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- CUPTI's declarations ---------------------------------------------------
 * Checked against the headers of CUDA 12.9 (CUPTI_API_VERSION 28) and CUDA 13.5
 * (130500): the same values, the same CUpti_CallbackData, and the same record
 * prefixes below (12.9's Kernel9, Memcpy6, Memset4, Memory4; 13.5's Kernel13,
 * Memcpy7, Memset5, Memory4). */

typedef int CUptiResult;                  /* cupti_result.h */
#define CUPTI_SUCCESS 0
#define CUPTI_ERROR_MAX_LIMIT_REACHED 12
#define CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED 39

typedef struct cupti_subscriber *CUpti_SubscriberHandle; /* cupti_callbacks.h */
typedef uint32_t CUpti_CallbackId;
enum { /* CUpti_CallbackDomain */
    CUPTI_CB_DOMAIN_DRIVER_API = 1,
    CUPTI_CB_DOMAIN_RUNTIME_API = 2,
};
enum { /* CUpti_ApiCallbackSite */
    CUPTI_API_ENTER = 0,
};
/* CUpti_CallbackData: what the callback gets for the driver and runtime
 * domains.  Only the first field and correlationId are read; the others are
 * declared for the layout. */
typedef struct {
    int callbackSite;
    const char *functionName;
    const void *functionParams;
    void *functionReturnValue;
    const char *symbolName;
    void *context;
    uint32_t contextUid;
    uint64_t *correlationData;
    uint32_t correlationId;
} CUpti_CallbackData;
_Static_assert(offsetof(CUpti_CallbackData, correlationId) == 64, "CUpti_CallbackData layout");
typedef void (*CUpti_CallbackFunc)(void *userdata, int domain, CUpti_CallbackId cbid, const void *cbdata);

enum { /* CUpti_ActivityKind (cupti_activity.h) */
    CUPTI_ACTIVITY_KIND_MEMCPY = 1,
    CUPTI_ACTIVITY_KIND_MEMSET = 2,
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL = 10,
    CUPTI_ACTIVITY_KIND_MEMORY2 = 49,
};
enum { /* CUpti_ActivityMemcpyKind */
    CUPTI_ACTIVITY_MEMCPY_KIND_HTOD = 1,
    CUPTI_ACTIVITY_MEMCPY_KIND_DTOH = 2,
    CUPTI_ACTIVITY_MEMCPY_KIND_HTOA = 3,
    CUPTI_ACTIVITY_MEMCPY_KIND_ATOH = 4,
    CUPTI_ACTIVITY_MEMCPY_KIND_ATOA = 5,
    CUPTI_ACTIVITY_MEMCPY_KIND_ATOD = 6,
    CUPTI_ACTIVITY_MEMCPY_KIND_DTOA = 7,
    CUPTI_ACTIVITY_MEMCPY_KIND_DTOD = 8,
    CUPTI_ACTIVITY_MEMCPY_KIND_PTOP = 10,
};
enum { /* CUpti_ActivityMemoryOperationType, CUpti_ActivityMemoryKind */
    CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION = 1,
    CUPTI_ACTIVITY_MEMORY_KIND_DEVICE = 3,
};
#define CUPTI_ACTIVITY_FLAG_FLUSH_FORCED 1u
/* Records are 8-byte aligned (ACTIVITY_RECORD_ALIGNMENT), and so must the
 * buffers be. */
#define ACTIVITY_RECORD_ALIGNMENT 8

/* The records read, as the prefixes (the fields up to the last one read) of
 * the layouts the library writes: each version writes its newest layout of a
 * kind, and these prefixes are the same in 12.9's and 13.5's.  Packed, so the
 * offsets are the headers', checked below. */
typedef struct __attribute__((packed)) { /* CUpti_ActivityKernel9 */
    uint32_t kind;
    uint8_t cache_config, shared_memory_config;
    uint16_t registers_per_thread;
    uint32_t partitioned_cache_requested, partitioned_cache_executed;
    uint64_t start, end, completed;
    uint32_t device_id, context_id, stream_id;
    int32_t grid[3], block[3];
    int32_t static_shared_memory, dynamic_shared_memory;
    uint32_t local_memory_per_thread, local_memory_total;
    uint32_t correlation_id;
} cupti_kernel_record;
_Static_assert(offsetof(cupti_kernel_record, start) == 16 && offsetof(cupti_kernel_record, correlation_id) == 92,
               "CUpti_ActivityKernel9 layout");

typedef struct __attribute__((packed)) { /* CUpti_ActivityMemcpy6 */
    uint32_t kind;
    uint8_t copy_kind, src_kind, dst_kind, flags;
    uint64_t bytes, start, end;
    uint32_t device_id, context_id, stream_id;
    uint32_t correlation_id;
} cupti_memcpy_record;
_Static_assert(offsetof(cupti_memcpy_record, bytes) == 8 && offsetof(cupti_memcpy_record, correlation_id) == 44,
               "CUpti_ActivityMemcpy6 layout");

typedef struct __attribute__((packed)) { /* CUpti_ActivityMemset4 */
    uint32_t kind;
    uint32_t value;
    uint64_t bytes, start, end;
    uint32_t device_id, context_id, stream_id;
    uint32_t correlation_id;
} cupti_memset_record;
_Static_assert(offsetof(cupti_memset_record, correlation_id) == 44, "CUpti_ActivityMemset4 layout");

typedef struct __attribute__((packed)) { /* CUpti_ActivityMemory4 (kind MEMORY2) */
    uint32_t kind;
    uint32_t operation;   /* CUpti_ActivityMemoryOperationType */
    uint32_t memory_kind; /* CUpti_ActivityMemoryKind */
    uint32_t correlation_id;
    uint64_t address, bytes, timestamp;
} cupti_memory_record;
_Static_assert(offsetof(cupti_memory_record, bytes) == 24, "CUpti_ActivityMemory4 layout");

/* ---- the library -------------------------------------------------------------- */

/* Each buffer CUPTI asks for: room for ~20,000 kernel records.  Mapped, not
 * malloc'd: the profiler's memory is not the program's (the memory side
 * counts malloc). */
#define BUFFER_BYTES (4u << 20)

static struct {
    void *library;
    char path[PATH_MAX]; /* the file it was loaded from, as the loader says */
    CUpti_SubscriberHandle subscriber;
    int subscribed;
    CUptiResult (*get_result_string)(CUptiResult, const char **);
    CUptiResult (*subscribe)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
    CUptiResult (*unsubscribe)(CUpti_SubscriberHandle);
    CUptiResult (*enable_callback)(uint32_t, CUpti_SubscriberHandle, int, CUpti_CallbackId);
    CUptiResult (*enable_domain)(uint32_t, CUpti_SubscriberHandle, int);
    CUptiResult (*get_callback_name)(int, uint32_t, const char **); /* CUDA 11.5+; else whole domains */
    CUptiResult (*activity_enable)(int);
    CUptiResult (*activity_disable)(int);
    CUptiResult (*register_callbacks)(void (*)(uint8_t **, size_t *, size_t *),
                                      void (*)(void *, uint32_t, uint8_t *, size_t, size_t));
    CUptiResult (*flush_all)(uint32_t);
    CUptiResult (*next_record)(uint8_t *, size_t, void **);
    CUptiResult (*dropped_records)(void *, uint32_t, size_t *);
    int kinds_enabled[4];
    _Atomic uint64_t dropped; /* records the library could not write (no buffer in time) */
} C;

static const int activity_kinds[4] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                      CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_MEMORY2};

static void say(char *why, size_t size, const char *what, CUptiResult rc)
{
    const char *text = NULL;
    if (C.get_result_string == NULL || C.get_result_string(rc, &text) != CUPTI_SUCCESS || text == NULL) {
        text = "unknown error";
    }
    snprintf(why, size, "%s failed: %s (%d)", what, text, rc);
}

/* The calls whose launch line is wanted: those that put work on the device or
 * allocate on it (names from cupti_runtime_cbid.h and cupti_driver_cbid.h).
 * Asking for every call of the two domains would run the callback on each of
 * the many small calls a framework makes per operation. */
static int wanted(int domain, const char *name)
{
    static const char *const runtime[] = {"cudaLaunch", "cudaGraphLaunch", "cudaMemcpy", "cudaMemset",
                                          "cudaMalloc", NULL};
    static const char *const driver[] = {"cuLaunch", "cuGraphLaunch", "cuMemcpy", "cuMemset", "cuMemAlloc",
                                         NULL};
    for (const char *const *p = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? runtime : driver; *p != NULL; p++) {
        if (strncmp(name, *p, strlen(*p)) == 0) {
            return 1;
        }
    }
    return 0;
}

/* The id of the runtime call this thread is inside: the driver calls it makes
 * share it and need no note of their own (a note costs a frame walk, and the
 * queue's room).  Only a driver call made directly (Triton, CuPy's raw
 * kernels, JAX) is noted in the driver domain. */
static _Thread_local uint32_t runtime_correlation;

/* On the thread making the CUDA call, inside it (see launches.h). */
static void on_api_call(void *userdata, int domain, CUpti_CallbackId cbid, const void *cbdata)
{
    (void)userdata;
    (void)cbid;
    const CUpti_CallbackData *call = cbdata;
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
        runtime_correlation = call->callbackSite == CUPTI_API_ENTER ? call->correlationId : 0;
    } else if (runtime_correlation != 0 && call->correlationId == runtime_correlation) {
        return;
    }
    if (call->callbackSite == CUPTI_API_ENTER) {
        launches_note(call->correlationId);
    }
}

/* Buffers handed back are kept for the next request (up to SPARE_BUFFERS):
 * a fresh mapping costs a page fault per 4 KiB as CUPTI fills it. */
#define SPARE_BUFFERS 4
static struct {
    pthread_mutex_t lock;
    void *buffers[SPARE_BUFFERS];
    int count;
} spare = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void on_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    void *p = MAP_FAILED;
    pthread_mutex_lock(&spare.lock);
    if (spare.count > 0) {
        p = spare.buffers[--spare.count];
    }
    pthread_mutex_unlock(&spare.lock);
    if (p == MAP_FAILED) {
        p = mmap(NULL, BUFFER_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    /* mmap's pages are page-aligned: ACTIVITY_RECORD_ALIGNMENT holds. */
    *buffer = p == MAP_FAILED ? NULL : p;
    *size = p == MAP_FAILED ? 0 : BUFFER_BYTES;
    *max_records = 0; /* as many as fit */
}

static enum gpu_copy_direction copy_direction(unsigned copy_kind)
{
    switch (copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
        return GPU_COPY_HTOD;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
        return GPU_COPY_DTOH;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
        return GPU_COPY_DTOD;
    default:
        return GPU_COPY_OTHER;
    }
}

static uint64_t duration(uint64_t start, uint64_t end)
{
    return end > start ? end - start : 0; /* 0s: a record whose end the device never wrote */
}

/* One record into what launches_charge takes; 0 for a record not charged. */
static int read_record(const void *record, gpu_work *work)
{
    uint32_t kind;
    memcpy(&kind, record, sizeof kind);
    memset(work, 0, sizeof *work);
    switch (kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const cupti_kernel_record *k = record;
        work->kind = GPU_WORK_KERNEL;
        work->correlation = k->correlation_id;
        work->device_ns = duration(k->start, k->end);
        return 1;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const cupti_memcpy_record *m = record;
        work->kind = GPU_WORK_COPY;
        work->direction = copy_direction(m->copy_kind);
        work->correlation = m->correlation_id;
        work->device_ns = duration(m->start, m->end);
        work->bytes = m->bytes;
        return 1;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const cupti_memset_record *m = record;
        work->kind = GPU_WORK_MEMSET;
        work->correlation = m->correlation_id;
        work->device_ns = duration(m->start, m->end);
        work->bytes = m->bytes;
        return 1;
    }
    case CUPTI_ACTIVITY_KIND_MEMORY2: {
        const cupti_memory_record *m = record;
        if (m->operation != CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION ||
            m->memory_kind != CUPTI_ACTIVITY_MEMORY_KIND_DEVICE) {
            return 0; /* frees, pinned host memory */
        }
        work->kind = GPU_WORK_ALLOC;
        work->correlation = m->correlation_id;
        work->bytes = m->bytes;
        return 1;
    }
    default:
        return 0;
    }
}

/* On a thread of the library's, or the one calling cuptiActivityFlushAll. */
static void on_buffer_completed(void *context, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    void *record = NULL;
    while (C.next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
        gpu_work work;
        if (read_record(record, &work)) {
            launches_charge(&work);
        }
    }
    size_t dropped = 0;
    if (C.dropped_records != NULL && C.dropped_records(context, stream, &dropped) == CUPTI_SUCCESS) {
        atomic_fetch_add(&C.dropped, (uint64_t)dropped);
    }
    if (buffer == NULL || size != BUFFER_BYTES) {
        return; /* not one of ours */
    }
    pthread_mutex_lock(&spare.lock);
    int kept = spare.count < SPARE_BUFFERS;
    if (kept) {
        spare.buffers[spare.count++] = buffer;
    }
    pthread_mutex_unlock(&spare.lock);
    if (!kept) {
        munmap(buffer, size);
    }
}

/* A symbol's address as a function pointer (POSIX guarantees the conversion
 * for dlsym's result; the memcpy keeps -Wpedantic quiet about it). */
#define FIND(field, name, missing)                                         \
    do {                                                                   \
        void *p_ = dlsym(C.library, name);                                 \
        memcpy(&C.field, &p_, sizeof p_);                                  \
        if (p_ == NULL) {                                                  \
            (missing) = 1;                                                 \
        }                                                                  \
    } while (0)

static void enable_calls(int domain)
{
    if (C.get_callback_name == NULL) {
        C.enable_domain(1, C.subscriber, domain);
        return;
    }
    /* The ids of a domain run from 1 to its size (487 runtime and 784 driver
     * ids in CUDA 12.9, more in 13); the headers keep the ids of removed calls,
     * but should a version refuse some in the middle, the search goes on past
     * them: it ends after 256 refused in a row. */
    int refused = 0;
    for (uint32_t cbid = 1; cbid < 65536 && refused < 256; cbid++) {
        const char *name = NULL;
        if (C.get_callback_name(domain, cbid, &name) != CUPTI_SUCCESS || name == NULL) {
            refused++;
            continue;
        }
        refused = 0;
        if (wanted(domain, name)) {
            C.enable_callback(1, C.subscriber, domain, cbid);
        }
    }
}

static const char *const library_names[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so.11.8", "libcupti.so",
                                            NULL};

/* The library: a copy the process has already loaded (by its soname: the
 * program's framework, under pytest --pyrometer or attach), else the first of
 * dirs (':' between them) that holds one of library_names, else the ordinary
 * search's. */
static void *load_library(const char *dirs)
{
    void *library = NULL;
    for (const char *const *n = library_names; *n != NULL && library == NULL; n++) {
        library = dlopen(*n, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    }
    for (const char *d = dirs != NULL ? dirs : ""; library == NULL && *d != '\0';) {
        const char *end = strchr(d, ':');
        size_t length = end != NULL ? (size_t)(end - d) : strlen(d);
        for (const char *const *n = library_names; *n != NULL && library == NULL && length > 0; n++) {
            char path[PATH_MAX];
            int written = snprintf(path, sizeof path, "%.*s/%s", (int)length, d, *n);
            if (written > 0 && (size_t)written < sizeof path && access(path, R_OK) == 0) {
                library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            }
        }
        d += length + (end != NULL);
    }
    for (const char *const *n = library_names; *n != NULL && library == NULL; n++) {
        library = dlopen(*n, RTLD_NOW | RTLD_LOCAL);
    }
    return library;
}

static int cupti_open(const char *dirs, char *why, size_t why_size)
{
    memset(&C, 0, sizeof C);
    C.library = load_library(dirs);
    if (C.library == NULL) {
        snprintf(why, why_size, "no CUPTI library (libcupti.so.13 or .12) on the library search path, in "
                                "Python's nvidia packages or in the CUDA toolkit");
        return GPU_UNSUPPORTED;
    }
    int missing = 0;
    FIND(get_result_string, "cuptiGetResultString", missing);
    FIND(subscribe, "cuptiSubscribe", missing);
    FIND(unsubscribe, "cuptiUnsubscribe", missing);
    FIND(enable_callback, "cuptiEnableCallback", missing);
    FIND(enable_domain, "cuptiEnableDomain", missing);
    FIND(activity_enable, "cuptiActivityEnable", missing);
    FIND(activity_disable, "cuptiActivityDisable", missing);
    FIND(register_callbacks, "cuptiActivityRegisterCallbacks", missing);
    FIND(flush_all, "cuptiActivityFlushAll", missing);
    FIND(next_record, "cuptiActivityGetNextRecord", missing);
    int optional_missing = 0; /* each has a fallback */
    FIND(get_callback_name, "cuptiGetCallbackName", optional_missing);
    FIND(dropped_records, "cuptiActivityGetNumDroppedRecords", optional_missing);
    (void)optional_missing;
    if (missing) {
        snprintf(why, why_size, "the CUPTI library lacks entry points pyrometer uses (too old?)");
        return GPU_FAILED;
    }
    Dl_info info;
    void *subscribe;
    memcpy(&subscribe, &C.subscribe, sizeof subscribe);
    if (dladdr(subscribe, &info) != 0 && info.dli_fname != NULL) {
        snprintf(C.path, sizeof C.path, "%s", info.dli_fname);
    }
    CUptiResult rc = C.subscribe(&C.subscriber, on_api_call, NULL);
    if (rc == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
        snprintf(why, why_size, "another profiler (torch.profiler, JAX's, Nsight) holds CUPTI, which takes one "
                                "subscriber");
        return GPU_BUSY;
    }
    if (rc != CUPTI_SUCCESS) {
        say(why, why_size, "cuptiSubscribe", rc);
        return GPU_FAILED;
    }
    C.subscribed = 1;
    rc = C.register_callbacks(on_buffer_requested, on_buffer_completed);
    if (rc != CUPTI_SUCCESS) {
        say(why, why_size, "cuptiActivityRegisterCallbacks", rc);
        C.unsubscribe(C.subscriber);
        C.subscribed = 0;
        return GPU_FAILED;
    }
    int enabled = 0;
    for (int i = 0; i < 4; i++) {
        C.kinds_enabled[i] = C.activity_enable(activity_kinds[i]) == CUPTI_SUCCESS;
        enabled += C.kinds_enabled[i];
    }
    if (!C.kinds_enabled[0]) {
        snprintf(why, why_size, "CUPTI would not record kernels (cuptiActivityEnable)");
        for (int i = 0; i < 4; i++) {
            if (C.kinds_enabled[i]) {
                C.activity_disable(activity_kinds[i]);
            }
        }
        C.unsubscribe(C.subscriber);
        C.subscribed = 0;
        return GPU_FAILED;
    }
    enable_calls(CUPTI_CB_DOMAIN_RUNTIME_API);
    enable_calls(CUPTI_CB_DOMAIN_DRIVER_API);
    why[0] = '\0';
    if (enabled < 4) {
        snprintf(why, why_size, "CUPTI records kernels but not every copy, memset or allocation kind");
    }
    return GPU_OK;
}

static void cupti_flush(int final)
{
    if (C.subscribed) {
        C.flush_all(final ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
    }
}

static void cupti_close(void)
{
    if (!C.subscribed) {
        return;
    }
    for (int i = 0; i < 4; i++) {
        if (C.kinds_enabled[i]) {
            C.activity_disable(activity_kinds[i]);
        }
    }
    C.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    C.unsubscribe(C.subscriber);
    C.subscribed = 0;
    /* The library stays loaded: CUPTI does not support being unloaded while
     * CUDA is, and its threads may still run. */
}

static uint64_t cupti_dropped(void)
{
    return atomic_load(&C.dropped);
}

static const char *cupti_library(void)
{
    return C.path;
}

const gpu_kernel_backend gpu_cupti_backend = {
    .name = "CUPTI",
    .open = cupti_open,
    .flush = cupti_flush,
    .close = cupti_close,
    .dropped = cupti_dropped,
    .library = cupti_library,
};
