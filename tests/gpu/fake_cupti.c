/* A test double of libcupti.so: the CUPTI entry points pyrometer uses
 * (csrc/gpu/cupti.c), with CUPTI's semantics as its headers (CUDA 12.9 and
 * 13.5) describe them:
 *  - one subscriber per process: a second cuptiSubscribe gets
 *    CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED (39);
 *  - the subscriber's callback runs on the thread making the "CUDA call", at its
 *    entry and exit, with the call's correlation id, only for the (domain,
 *    callback id) pairs enabled with cuptiEnableCallback or cuptiEnableDomain;
 *    a runtime call makes a driver call inside it that shares its id;
 *  - the work is asynchronous: a kernel runs on a serial "device" after the
 *    work queued before it, and its record exists only once it has finished;
 *  - finished records go into a buffer asked for through the registered
 *    request callback, and the buffer comes back through the completion
 *    callback when it is full (on the double's own thread, as CUPTI's worker
 *    thread does) or at cuptiActivityFlushAll (on the flushing thread); a
 *    forced flush hands over unfinished work too;
 *  - records have the layouts of CUDA 12.9 (CUpti_ActivityKernel9, Memcpy6,
 *    Memset4, Memory4), read with cuptiActivityGetNextRecord.
 *
 * The profiled program drives it through ctypes.CDLL("libcupti.so.13"), the
 * same handle pyrometer's dlopen got: fake_cupti_launch(ns) launches a kernel
 * of that device time through the runtime API, fake_cupti_launch_driver(ns)
 * through the driver API only, fake_cupti_memcpy(kind, bytes) copies
 * (CUpti_ActivityMemcpyKind: 1 HtoD, 2 DtoH, 8 DtoD), fake_cupti_memset(bytes),
 * fake_cupti_malloc(bytes) allocates device memory, fake_cupti_synchronize()
 * waits for the device, fake_cupti_launch_on_native_thread(count, ns, delay_ms)
 * launches from a thread without Python state, fake_cupti_subscribe() tries to subscribe as a second
 * tool would (returns CUPTI's result).
 *
 * Environment: FAKE_CUPTI_OTHER_SUBSCRIBER (another tool subscribed before
 * anyone else), FAKE_CUPTI_SUBSCRIBE_ERROR (cuptiSubscribe returns it, as the
 * real library does without a driver: CUPTI_ERROR_UNKNOWN, 999), FAKE_CUPTI_BUFFER_RECORDS (a buffer is handed back full after
 * that many records; default: when the requested size is full).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUptiResult;
#define CUPTI_SUCCESS 0
#define CUPTI_ERROR_INVALID_PARAMETER 1
#define CUPTI_ERROR_MAX_LIMIT_REACHED 12
#define CUPTI_ERROR_INVALID_KIND 21
#define CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED 39

#define DOMAIN_DRIVER 1
#define DOMAIN_RUNTIME 2
#define RUNTIME_CBIDS 487 /* CUPTI_RUNTIME_TRACE_CBID_SIZE, 12.9 */
#define DRIVER_CBIDS 784  /* CUPTI_DRIVER_TRACE_CBID_SIZE, 12.9 */
#define CB_MALLOC 20      /* cudaMalloc_v3020 */
#define CB_MEMCPY 31      /* cudaMemcpy_v3020 */
#define CB_MEMSET 49      /* cudaMemset_v3020 */
#define CB_LAUNCH 211     /* cudaLaunchKernel_v7000 */
#define CB_CU_LAUNCH 307  /* cuLaunchKernel */
#define CB_CU_MEMALLOC 243 /* cuMemAlloc_v2 */
#define CB_CU_MEMCPY_HTOD 276 /* cuMemcpyHtoD_v2 */
#define CB_CU_MEMSET 294  /* cuMemsetD8_v2 */

#define KIND_MEMCPY 1
#define KIND_MEMSET 2
#define KIND_CONCURRENT_KERNEL 10
#define KIND_MEMORY2 49
#define KINDS_MAX 64

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
typedef void (*callback_fn)(void *, int, uint32_t, const void *);
typedef void (*request_fn)(uint8_t **, size_t *, size_t *);
typedef void (*complete_fn)(void *, uint32_t, uint8_t *, size_t, size_t);

/* The records, whole, as 12.9 lays them out (fields not set stay 0). */
typedef struct __attribute__((packed, aligned(8))) {
    uint32_t kind;
    uint8_t cache_config, shared_memory_config;
    uint16_t registers;
    uint32_t cache_requested, cache_executed;
    uint64_t start, end, completed;
    uint32_t device_id, context_id, stream_id;
    int32_t grid[3], block[3];
    int32_t static_shared, dynamic_shared;
    uint32_t local_per_thread, local_total;
    uint32_t correlation_id;
    uint8_t rest[208 - 96];
} kernel9;
typedef struct __attribute__((packed, aligned(8))) {
    uint32_t kind;
    uint8_t copy_kind, src_kind, dst_kind, flags;
    uint64_t bytes, start, end;
    uint32_t device_id, context_id, stream_id, correlation_id, runtime_correlation_id;
    uint8_t rest[96 - 52];
} memcpy6;
typedef struct __attribute__((packed, aligned(8))) {
    uint32_t kind, value;
    uint64_t bytes, start, end;
    uint32_t device_id, context_id, stream_id, correlation_id;
    uint8_t rest[88 - 48];
} memset4;
typedef struct __attribute__((packed, aligned(8))) {
    uint32_t kind, operation, memory_kind, correlation_id;
    uint64_t address, bytes, timestamp, pc;
    uint8_t rest[128 - 48];
} memory4;
_Static_assert(sizeof(kernel9) == 208 && sizeof(memcpy6) == 96 && sizeof(memset4) == 88 &&
                   sizeof(memory4) == 128, "record sizes");
_Static_assert(offsetof(kernel9, correlation_id) == 92 && offsetof(memcpy6, correlation_id) == 44 &&
                   offsetof(memset4, correlation_id) == 44 && offsetof(memory4, bytes) == 24,
               "record layouts");

typedef union {
    uint32_t kind;
    kernel9 kernel;
    memcpy6 copy;
    memset4 set;
    memory4 memory;
} any_record;

#define PENDING_MAX 200000

static struct {
    pthread_mutex_t lock;
    int subscribed;          /* someone holds the one subscription */
    int other_holds;         /* ... and it is not the registered callback's owner */
    _Atomic(callback_fn) callback; /* read by every "CUDA call", without the lock */
    void *userdata;
    uint8_t enabled[3][DRIVER_CBIDS];
    int kinds[KINDS_MAX];
    request_fn request;
    complete_fn complete;
    _Atomic uint32_t next_correlation;
    uint64_t device_free_ns; /* CLOCK_REALTIME when the serial device is idle */
    any_record *pending;     /* queued work, in device order */
    size_t pending_count;
    uint8_t *buffer;         /* the buffer being filled */
    size_t buffer_size, buffer_used, buffer_records;
    size_t buffer_records_max;
    pthread_t worker;
    int worker_started;
    uint64_t address;
} F = {.lock = PTHREAD_MUTEX_INITIALIZER, .next_correlation = 1};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

__attribute__((constructor)) static void load(void)
{
    F.other_holds = getenv("FAKE_CUPTI_OTHER_SUBSCRIBER") != NULL;
    F.subscribed = F.other_holds;
    const char *max = getenv("FAKE_CUPTI_BUFFER_RECORDS");
    F.buffer_records_max = max != NULL ? (size_t)strtoull(max, NULL, 10) : 0;
    F.pending = calloc(PENDING_MAX, sizeof *F.pending);
}

static size_t record_size(uint32_t kind)
{
    switch (kind) {
    case KIND_CONCURRENT_KERNEL:
        return sizeof(kernel9);
    case KIND_MEMCPY:
        return sizeof(memcpy6);
    case KIND_MEMSET:
        return sizeof(memset4);
    case KIND_MEMORY2:
        return sizeof(memory4);
    default:
        return 0;
    }
}

static uint64_t record_end(const any_record *r)
{
    switch (r->kind) {
    case KIND_CONCURRENT_KERNEL:
        return r->kernel.end;
    case KIND_MEMCPY:
        return r->copy.end;
    case KIND_MEMSET:
        return r->set.end;
    default:
        return r->memory.timestamp;
    }
}

/* ---- delivery (F.lock held, except around the completion callback) -------- */

/* Hands the buffer being filled back; the lock is dropped around the callback,
 * which may take locks of its own (CUPTI does not hold its own either). */
static void deliver_locked(void)
{
    if (F.buffer == NULL || F.complete == NULL) {
        return;
    }
    uint8_t *buffer = F.buffer;
    size_t size = F.buffer_size, used = F.buffer_used;
    F.buffer = NULL;
    F.buffer_used = F.buffer_records = 0;
    complete_fn complete = F.complete;
    pthread_mutex_unlock(&F.lock);
    complete(NULL, 0, buffer, size, used);
    pthread_mutex_lock(&F.lock);
}

/* Moves the finished records (all, when forced) from the queue into buffers. */
static void write_finished_locked(int forced)
{
    uint64_t now = now_ns();
    size_t i = 0;
    while (i < F.pending_count && (forced || record_end(&F.pending[i]) <= now)) {
        const any_record *r = &F.pending[i];
        size_t size = record_size(r->kind);
        if (F.buffer == NULL) {
            if (F.request == NULL) {
                break;
            }
            size_t max_records = 0;
            F.request(&F.buffer, &F.buffer_size, &max_records);
            if (F.buffer == NULL) {
                i++; /* no buffer: the record is dropped, as CUPTI does */
                continue;
            }
        }
        if (F.buffer_used + size > F.buffer_size ||
            (F.buffer_records_max && F.buffer_records == F.buffer_records_max)) {
            /* Full: handed back (the queue stays ours meanwhile, the lock dropped). */
            memmove(F.pending, F.pending + i, (F.pending_count - i) * sizeof *F.pending);
            F.pending_count -= i;
            i = 0;
            deliver_locked();
            continue;
        }
        memcpy(F.buffer + F.buffer_used, r, size);
        F.buffer_used += size;
        F.buffer_records++;
        i++;
    }
    memmove(F.pending, F.pending + i, (F.pending_count - i) * sizeof *F.pending);
    F.pending_count -= i;
}

/* CUPTI's worker: writes finished records as they finish; a buffer goes back
 * from here when it fills. */
static void *worker_main(void *unused)
{
    (void)unused;
    for (;;) {
        struct timespec pause = {0, 5000000};
        nanosleep(&pause, NULL);
        pthread_mutex_lock(&F.lock);
        write_finished_locked(0);
        pthread_mutex_unlock(&F.lock);
    }
    return NULL;
}

/* ---- CUPTI's entry points ------------------------------------------------------ */

EXPORT CUptiResult cuptiGetResultString(CUptiResult result, const char **str)
{
    switch (result) {
    case CUPTI_SUCCESS:
        *str = "CUPTI_SUCCESS";
        break;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
        *str = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED";
        break;
    default:
        *str = "CUPTI_ERROR_UNKNOWN";
    }
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiSubscribe(void **subscriber, callback_fn callback, void *userdata)
{
    const char *error = getenv("FAKE_CUPTI_SUBSCRIBE_ERROR");
    if (error != NULL) {
        return (CUptiResult)atoi(error);
    }
    pthread_mutex_lock(&F.lock);
    if (F.subscribed) {
        pthread_mutex_unlock(&F.lock);
        return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    }
    F.subscribed = 1;
    atomic_store(&F.callback, callback);
    F.userdata = userdata;
    memset(F.enabled, 0, sizeof F.enabled);
    *subscriber = &F;
    pthread_mutex_unlock(&F.lock);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiUnsubscribe(void *subscriber)
{
    pthread_mutex_lock(&F.lock);
    if (subscriber != &F || !F.subscribed || F.other_holds) {
        pthread_mutex_unlock(&F.lock);
        return CUPTI_ERROR_INVALID_PARAMETER;
    }
    F.subscribed = 0;
    atomic_store(&F.callback, (callback_fn)NULL);
    pthread_mutex_unlock(&F.lock);
    return CUPTI_SUCCESS;
}

static int cbid_count(int domain)
{
    return domain == DOMAIN_RUNTIME ? RUNTIME_CBIDS : domain == DOMAIN_DRIVER ? DRIVER_CBIDS : 0;
}

EXPORT CUptiResult cuptiEnableCallback(uint32_t enable, void *subscriber, int domain, uint32_t cbid)
{
    if (subscriber != &F || cbid == 0 || (int)cbid >= cbid_count(domain)) {
        return CUPTI_ERROR_INVALID_PARAMETER;
    }
    F.enabled[domain][cbid] = enable != 0;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiEnableDomain(uint32_t enable, void *subscriber, int domain)
{
    if (subscriber != &F || cbid_count(domain) == 0) {
        return CUPTI_ERROR_INVALID_PARAMETER;
    }
    memset(F.enabled[domain], enable != 0, (size_t)cbid_count(domain));
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetCallbackName(int domain, uint32_t cbid, const char **name)
{
    static char other[DRIVER_CBIDS][32];
    if (name == NULL || cbid == 0 || (int)cbid >= cbid_count(domain)) {
        return CUPTI_ERROR_INVALID_PARAMETER;
    }
    if (domain == DOMAIN_RUNTIME && cbid >= 150 && cbid < 160) {
        /* Ids this "version" refuses in the middle of the range (the real
         * headers keep removed calls' ids; a caller must not stop at a gap). */
        return CUPTI_ERROR_INVALID_PARAMETER;
    }
    const char *known = NULL;
    if (domain == DOMAIN_RUNTIME) {
        known = cbid == CB_MALLOC ? "cudaMalloc" : cbid == CB_MEMCPY ? "cudaMemcpy"
                : cbid == CB_MEMSET ? "cudaMemset" : cbid == CB_LAUNCH ? "cudaLaunchKernel" : NULL;
    } else {
        known = cbid == CB_CU_LAUNCH ? "cuLaunchKernel" : cbid == CB_CU_MEMALLOC ? "cuMemAlloc_v2"
                : cbid == CB_CU_MEMCPY_HTOD ? "cuMemcpyHtoD_v2" : cbid == CB_CU_MEMSET ? "cuMemsetD8_v2" : NULL;
    }
    if (known == NULL) {
        /* Every other call of the domain ("cudaGetDevice", ...): not launches. */
        snprintf(other[cbid], sizeof other[cbid], "%sOther%u", domain == DOMAIN_RUNTIME ? "cuda" : "cu", cbid);
        known = other[cbid];
    }
    *name = known;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityEnable(int kind)
{
    if (kind <= 0 || kind >= KINDS_MAX) {
        return CUPTI_ERROR_INVALID_KIND;
    }
    F.kinds[kind] = 1;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityDisable(int kind)
{
    if (kind <= 0 || kind >= KINDS_MAX) {
        return CUPTI_ERROR_INVALID_KIND;
    }
    F.kinds[kind] = 0;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityRegisterCallbacks(request_fn request, complete_fn complete)
{
    if (request == NULL || complete == NULL) {
        return CUPTI_ERROR_INVALID_PARAMETER;
    }
    pthread_mutex_lock(&F.lock);
    F.request = request;
    F.complete = complete;
    if (!F.worker_started) {
        sigset_t all, previous;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &previous);
        F.worker_started = pthread_create(&F.worker, NULL, worker_main, NULL) == 0;
        pthread_sigmask(SIG_SETMASK, &previous, NULL);
    }
    pthread_mutex_unlock(&F.lock);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag)
{
    pthread_mutex_lock(&F.lock);
    write_finished_locked(flag & 1);
    deliver_locked();
    pthread_mutex_unlock(&F.lock);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, void **record)
{
    if (buffer == NULL || record == NULL) {
        return CUPTI_ERROR_INVALID_PARAMETER;
    }
    uint8_t *next = buffer;
    if (*record != NULL) {
        uint32_t kind;
        memcpy(&kind, *record, sizeof kind);
        next = (uint8_t *)*record + record_size(kind);
    }
    if (next >= buffer + valid) {
        return CUPTI_ERROR_MAX_LIMIT_REACHED;
    }
    *record = next;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(void *context, uint32_t stream, size_t *dropped)
{
    (void)context;
    (void)stream;
    *dropped = 0;
    return CUPTI_SUCCESS;
}

/* ---- the program's side: "CUDA calls" ------------------------------------------- */

static void call_back(int domain, uint32_t cbid, int site, uint32_t correlation, const char *name)
{
    callback_fn callback = atomic_load(&F.callback);
    if (callback == NULL || !F.enabled[domain][cbid]) {
        return;
    }
    CUpti_CallbackData data = {.callbackSite = site, .functionName = name, .correlationId = correlation};
    callback(F.userdata, domain, cbid, &data);
}

/* One API call: the runtime's (calling the driver's inside, same id) or the
 * driver's alone; then the record of its work, queued on the device. */
static void api_call(int runtime, uint32_t runtime_cbid, uint32_t driver_cbid, any_record *work,
                     uint64_t device_ns)
{
    uint32_t correlation = atomic_fetch_add(&F.next_correlation, 1);
    if (runtime) {
        call_back(DOMAIN_RUNTIME, runtime_cbid, 0, correlation, "runtime");
    }
    call_back(DOMAIN_DRIVER, driver_cbid, 0, correlation, "driver");
    pthread_mutex_lock(&F.lock);
    uint64_t now = now_ns();
    uint64_t start = F.device_free_ns > now ? F.device_free_ns : now;
    uint64_t end = start + device_ns;
    if (work->kind != KIND_MEMORY2) {
        F.device_free_ns = end;
    }
    switch (work->kind) {
    case KIND_CONCURRENT_KERNEL:
        work->kernel.start = start, work->kernel.end = end, work->kernel.correlation_id = correlation;
        break;
    case KIND_MEMCPY:
        work->copy.start = start, work->copy.end = end, work->copy.correlation_id = correlation;
        work->copy.runtime_correlation_id = correlation;
        break;
    case KIND_MEMSET:
        work->set.start = start, work->set.end = end, work->set.correlation_id = correlation;
        break;
    default:
        work->memory.timestamp = now, work->memory.correlation_id = correlation;
    }
    if (F.kinds[work->kind] && F.pending_count < PENDING_MAX) {
        F.pending[F.pending_count++] = *work;
    }
    pthread_mutex_unlock(&F.lock);
    call_back(DOMAIN_DRIVER, driver_cbid, 1, correlation, "driver");
    if (runtime) {
        call_back(DOMAIN_RUNTIME, runtime_cbid, 1, correlation, "runtime");
    }
}

EXPORT void fake_cupti_launch(uint64_t device_ns)
{
    any_record r = {.kernel = {.kind = KIND_CONCURRENT_KERNEL}};
    api_call(1, CB_LAUNCH, CB_CU_LAUNCH, &r, device_ns);
}

EXPORT void fake_cupti_launch_driver(uint64_t device_ns)
{
    any_record r = {.kernel = {.kind = KIND_CONCURRENT_KERNEL}};
    api_call(0, 0, CB_CU_LAUNCH, &r, device_ns);
}

/* A copy at 25 GB/s. */
EXPORT void fake_cupti_memcpy(int copy_kind, uint64_t bytes)
{
    any_record r = {.copy = {.kind = KIND_MEMCPY, .copy_kind = (uint8_t)copy_kind, .bytes = bytes}};
    api_call(1, CB_MEMCPY, CB_CU_MEMCPY_HTOD, &r, bytes / 25);
}

EXPORT void fake_cupti_memset(uint64_t bytes)
{
    any_record r = {.set = {.kind = KIND_MEMSET, .bytes = bytes}};
    api_call(1, CB_MEMSET, CB_CU_MEMSET, &r, bytes / 100);
}

EXPORT void fake_cupti_malloc(uint64_t bytes)
{
    pthread_mutex_lock(&F.lock);
    F.address += 1ULL << 32;
    uint64_t address = F.address;
    pthread_mutex_unlock(&F.lock);
    any_record r = {.memory = {.kind = KIND_MEMORY2, .operation = 1, .memory_kind = 3, .address = address,
                               .bytes = bytes}};
    api_call(1, CB_MALLOC, CB_CU_MEMALLOC, &r, 0);
}

/* cudaDeviceSynchronize: returns once the device has done all queued work. */
EXPORT void fake_cupti_synchronize(void)
{
    pthread_mutex_lock(&F.lock);
    uint64_t until = F.device_free_ns;
    pthread_mutex_unlock(&F.lock);
    uint64_t now = now_ns();
    if (until > now) {
        struct timespec wait = {(time_t)((until - now) / 1000000000ULL), (long)((until - now) % 1000000000ULL)};
        nanosleep(&wait, NULL);
    }
}

/* A thread of the library's own (no Python state, as PyTorch's autograd
 * threads): after delay_ms, it launches count kernels of device_ns each; the
 * caller waits for it. */
typedef struct {
    int count;
    uint64_t device_ns;
    unsigned delay_ms;
} native_launches;

static void *native_main(void *arg)
{
    const native_launches *job = arg;
    struct timespec delay = {(time_t)(job->delay_ms / 1000), (long)(job->delay_ms % 1000) * 1000000L};
    nanosleep(&delay, NULL);
    for (int i = 0; i < job->count; i++) {
        fake_cupti_launch(job->device_ns);
    }
    return NULL;
}

EXPORT void fake_cupti_launch_on_native_thread(int count, uint64_t device_ns, unsigned delay_ms)
{
    native_launches job = {count, device_ns, delay_ms};
    pthread_t thread;
    if (pthread_create(&thread, NULL, native_main, &job) == 0) {
        pthread_join(thread, NULL);
    }
}

/* A second tool subscribing: CUPTI's result. */
EXPORT int fake_cupti_subscribe(void)
{
    void *handle = NULL;
    static void (*none)(void *, int, uint32_t, const void *);
    return cuptiSubscribe(&handle, none, NULL);
}
