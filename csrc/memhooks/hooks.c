/* The interposed allocator and copy functions.  See memhooks.h.
 *
 * Rules for everything in this file, which runs inside every malloc of the
 * process, in any thread, before main() and after fork():
 *  - never allocate through the hooked allocator, never take a lock, never touch
 *    Python; the fast path reads one relaxed atomic flag and thread-local counters;
 *  - the real functions come from dlsym(RTLD_NEXT), and dlsym itself may allocate,
 *    so allocations made before they are known come from a static bootstrap heap;
 *  - the sample function runs with this thread's counting suspended (busy), so
 *    whatever it allocates is neither counted nor re-entered.
 */
#include "memhooks.h"
#include "pymalloc_arenas.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- the real functions ---------------------------------------------------- */

#define HOOKED(name, ret, args) typedef ret(*name##_fn) args;
#include "hooks_list.h"
#undef HOOKED

static struct {
#define HOOKED(name, ret, args) name##_fn name;
#include "hooks_list.h"
#undef HOOKED
} real;

static atomic_int resolve_state; /* 0: not started, 1: in progress, 2: done */

static void resolve(void)
{
    int expected = 0;
    if (!atomic_compare_exchange_strong(&resolve_state, &expected, 1)) {
        return; /* another call is resolving; callers fall back to the bootstrap heap */
    }
#define HOOKED(name, ret, args) real.name = (name##_fn)dlsym(RTLD_NEXT, #name);
#include "hooks_list.h"
#undef HOOKED
    atomic_store_explicit(&resolve_state, 2, memory_order_release);
}

static inline int resolved(void)
{
    if (LIKELY(atomic_load_explicit(&resolve_state, memory_order_acquire) == 2)) {
        return 1;
    }
    resolve();
    return atomic_load_explicit(&resolve_state, memory_order_acquire) == 2;
}

__attribute__((constructor)) static void memhooks_init(void)
{
    resolve();
    pymalloc_arenas_install(); /* before the interpreter makes its first arena */
}

/* ---- bootstrap heap: allocations made while dlsym runs ------------------------- */

#define BOOTSTRAP_BYTES (256 * 1024)
static _Alignas(64) unsigned char bootstrap_heap[BOOTSTRAP_BYTES];
static atomic_size_t bootstrap_used;

/* Each block is preceded by 16 bytes holding its size, for realloc. */
static void *bootstrap_alloc(size_t size, size_t align)
{
    if (align < 16) {
        align = 16;
    }
    if (size > BOOTSTRAP_BYTES) {
        return NULL;
    }
    size_t need = (size + 15) / 16 * 16 + 16 + align;
    size_t start = atomic_fetch_add(&bootstrap_used, need);
    if (start + need > BOOTSTRAP_BYTES) {
        return NULL;
    }
    uintptr_t base = (uintptr_t)(bootstrap_heap + start) + 16;
    uintptr_t p = (base + align - 1) / align * align;
    ((size_t *)p)[-2] = size;
    return (void *)p; /* static storage is zero, and never reused: calloc-safe */
}

static int in_bootstrap(const void *p)
{
    return (const unsigned char *)p >= bootstrap_heap &&
           (const unsigned char *)p < bootstrap_heap + BOOTSTRAP_BYTES;
}

static size_t bootstrap_size(const void *p)
{
    return ((const size_t *)p)[-2];
}

/* ---- counting ---------------------------------------------------------------- */

static _Thread_local memhooks_thread T __attribute__((tls_model("initial-exec")));

static atomic_int enabled;
static int64_t window = 1 << 20;
static int64_t copy_window = 1 << 20;
static _Atomic(memhooks_sample_fn) sample_fn;
static _Atomic(memhooks_freed_fn) freed_fn;
static _Atomic int64_t footprint;

/* Sampled allocations whose free we watch, for leak detection: a direct-mapped
 * table, so a free costs one load.  A newer sample that hashes to the same slot
 * evicts the older one (its owner is told), which keeps the table bounded. */
#define WATCH_SLOTS 4096
static _Atomic uintptr_t watch_address[WATCH_SLOTS];
static _Atomic uintptr_t watch_token[WATCH_SLOTS];

static inline size_t watch_slot(uintptr_t address)
{
    return (size_t)((address >> 4) * 0x9E3779B97F4A7C15ULL >> 52) & (WATCH_SLOTS - 1);
}

static inline int counting(void)
{
    return atomic_load_explicit(&enabled, memory_order_relaxed) && T.busy == 0 && T.python_depth == 0;
}

static void watch(void *address, uintptr_t token)
{
    size_t slot = watch_slot((uintptr_t)address);
    uintptr_t old_token = atomic_exchange(&watch_token[slot], 0);
    atomic_store(&watch_address[slot], 0);
    memhooks_freed_fn freed = atomic_load(&freed_fn);
    if (old_token != 0 && freed != NULL) {
        freed(old_token, 1);
    }
    atomic_store(&watch_token[slot], token);
    atomic_store_explicit(&watch_address[slot], (uintptr_t)address, memory_order_release);
}

static inline void unwatch(void *address)
{
    size_t slot = watch_slot((uintptr_t)address);
    uintptr_t expected = (uintptr_t)address;
    if (UNLIKELY(atomic_load_explicit(&watch_address[slot], memory_order_relaxed) == expected) &&
        atomic_compare_exchange_strong(&watch_address[slot], &expected, 0)) {
        uintptr_t token = atomic_exchange(&watch_token[slot], 0);
        memhooks_freed_fn freed = atomic_load(&freed_fn);
        if (token != 0 && freed != NULL) {
            T.busy++;
            freed(token, 0);
            T.busy--;
        }
    }
}

static void emit(int kind, int64_t bytes, int64_t python_bytes, void *address)
{
    memhooks_sample_fn fn = atomic_load(&sample_fn);
    if (kind != MEMHOOKS_COPY) {
        atomic_fetch_add_explicit(&footprint, kind == MEMHOOKS_ALLOC ? bytes : -bytes,
                                  memory_order_relaxed);
    }
    if (fn == NULL) {
        return;
    }
    T.busy++;
    uintptr_t token = fn(kind, bytes, python_bytes, address);
    if (token != 0 && address != NULL) {
        watch(address, token);
    }
    T.busy--;
}

/* Net allocation crossed a window: one sample carries the whole net volume. */
static inline void note(int64_t bytes, int python, void *address)
{
    T.net += bytes;
    if (python) {
        T.python_net += bytes;
    }
    if (UNLIKELY(T.net >= window || T.net <= -window)) {
        int64_t net = T.net, py = T.python_net;
        T.net = 0;
        T.python_net = 0;
        if (net > 0) {
            emit(MEMHOOKS_ALLOC, net, py > 0 ? (py < net ? py : net) : 0, bytes > 0 ? address : NULL);
        } else {
            emit(MEMHOOKS_FREE, -net, py < 0 ? (-py < -net ? -py : -net) : 0, NULL);
        }
    }
}

static inline void note_copy(size_t n)
{
    T.copied += n;
    if (UNLIKELY(T.copied >= (uint64_t)copy_window)) {
        int64_t copied = (int64_t)T.copied;
        T.copied = 0;
        emit(MEMHOOKS_COPY, copied, 0, NULL);
    }
}

static inline void counted_alloc(void *p)
{
    if (p != NULL && counting()) {
        note((int64_t)real.malloc_usable_size(p), 0, p);
    }
}

static inline void counted_free(void *p)
{
    if (atomic_load_explicit(&enabled, memory_order_relaxed)) {
        unwatch(p);
        if (T.busy == 0 && T.python_depth == 0) {
            note(-(int64_t)real.malloc_usable_size(p), 0, NULL);
        }
    }
}

/* ---- the interposed functions --------------------------------------------------- */

EXPORT void *malloc(size_t size)
{
    if (UNLIKELY(!resolved())) {
        return bootstrap_alloc(size, 16);
    }
    void *p = real.malloc(size);
    counted_alloc(p);
    return p;
}

EXPORT void *calloc(size_t n, size_t size)
{
    if (UNLIKELY(!resolved())) {
        size_t total;
        if (__builtin_mul_overflow(n, size, &total)) {
            errno = ENOMEM;
            return NULL;
        }
        return bootstrap_alloc(total, 16);
    }
    void *p = real.calloc(n, size);
    counted_alloc(p);
    return p;
}

EXPORT void free(void *p)
{
    if (p == NULL || UNLIKELY(in_bootstrap(p))) {
        return;
    }
    if (UNLIKELY(!resolved())) {
        return; /* cannot happen for a real block: it was allocated after resolution */
    }
    counted_free(p);
    real.free(p);
}

EXPORT void *realloc(void *p, size_t size)
{
    if (UNLIKELY(p != NULL && in_bootstrap(p))) {
        void *fresh = malloc(size);
        if (fresh != NULL) {
            size_t old = bootstrap_size(p);
            memcpy(fresh, p, old < size ? old : size);
        }
        return fresh;
    }
    if (UNLIKELY(!resolved())) {
        return bootstrap_alloc(size, 16);
    }
    if (p != NULL) {
        counted_free(p); /* counted as a free of the old block and a new allocation */
    }
    void *q = real.realloc(p, size);
    if (q == NULL && p != NULL && size != 0) {
        counted_alloc(p); /* failed: the old block is still there */
        return NULL;
    }
    counted_alloc(q);
    return q;
}

EXPORT void *reallocarray(void *p, size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, total);
}

EXPORT int posix_memalign(void **out, size_t align, size_t size)
{
    if (UNLIKELY(!resolved())) {
        *out = bootstrap_alloc(size, align);
        return *out == NULL ? ENOMEM : 0;
    }
    int rc = real.posix_memalign(out, align, size);
    if (rc == 0) {
        counted_alloc(*out);
    }
    return rc;
}

EXPORT void *aligned_alloc(size_t align, size_t size)
{
    if (UNLIKELY(!resolved())) {
        return bootstrap_alloc(size, align);
    }
    void *p = real.aligned_alloc(align, size);
    counted_alloc(p);
    return p;
}

EXPORT void *memalign(size_t align, size_t size)
{
    if (UNLIKELY(!resolved())) {
        return bootstrap_alloc(size, align);
    }
    void *p = real.memalign(align, size);
    counted_alloc(p);
    return p;
}

EXPORT void *valloc(size_t size)
{
    if (UNLIKELY(!resolved())) {
        return bootstrap_alloc(size, 4096);
    }
    void *p = real.valloc(size);
    counted_alloc(p);
    return p;
}

EXPORT void *pvalloc(size_t size)
{
    if (UNLIKELY(!resolved())) {
        return bootstrap_alloc((size + 4095) / 4096 * 4096, 4096);
    }
    void *p = real.pvalloc(size);
    counted_alloc(p);
    return p;
}

EXPORT size_t malloc_usable_size(void *p)
{
    return pyrometer_memhooks_usable_size(p);
}

/* Before resolution (inside the dynamic loader) copies go byte by byte; volatile
 * keeps the compiler from turning this loop back into a call to memcpy. */
static void *plain_copy(void *dst, const void *src, size_t n)
{
    volatile unsigned char *d = dst;
    const volatile unsigned char *s = src;
    if (d < s) {
        for (size_t i = 0; i < n; i++) {
            d[i] = s[i];
        }
    } else {
        for (size_t i = n; i > 0; i--) {
            d[i - 1] = s[i - 1];
        }
    }
    return dst;
}

EXPORT void *memcpy(void *restrict dst, const void *restrict src, size_t n)
{
    if (UNLIKELY(atomic_load_explicit(&resolve_state, memory_order_acquire) != 2)) {
        return plain_copy(dst, src, n);
    }
    if (counting()) {
        note_copy(n);
    }
    return real.memcpy(dst, src, n);
}

EXPORT void *memmove(void *dst, const void *src, size_t n)
{
    if (UNLIKELY(atomic_load_explicit(&resolve_state, memory_order_acquire) != 2)) {
        return plain_copy(dst, src, n);
    }
    if (counting()) {
        note_copy(n);
    }
    return real.memmove(dst, src, n);
}

/* ---- the interface for the extension ---------------------------------------------- */

EXPORT int pyrometer_memhooks_start(const memhooks_config *config)
{
    if (!resolved() || config->window <= 0 || config->copy_window <= 0) {
        return -1;
    }
    window = config->window;
    copy_window = config->copy_window;
    atomic_store(&freed_fn, config->freed);
    atomic_store(&sample_fn, config->sample);
    atomic_store(&enabled, 1);
    return 0;
}

EXPORT void pyrometer_memhooks_stop(void)
{
    atomic_store(&enabled, 0);
    atomic_store(&sample_fn, NULL);
    atomic_store(&freed_fn, NULL);
    for (size_t i = 0; i < WATCH_SLOTS; i++) {
        atomic_store(&watch_address[i], 0);
        atomic_store(&watch_token[i], 0);
    }
}

EXPORT memhooks_thread *pyrometer_memhooks_thread(void)
{
    return &T;
}

EXPORT void pyrometer_memhooks_note_python(int64_t bytes, void *address)
{
    if (!atomic_load_explicit(&enabled, memory_order_relaxed) || T.busy != 0) {
        return;
    }
    if (bytes < 0 && address != NULL) {
        unwatch(address);
    }
    note(bytes, 1, address);
}

EXPORT size_t pyrometer_memhooks_usable_size(void *p)
{
    if (p == NULL) {
        return 0;
    }
    if (in_bootstrap(p)) {
        return bootstrap_size(p);
    }
    return resolved() ? real.malloc_usable_size(p) : 0;
}

EXPORT size_t pyrometer_memhooks_python_block_size(void *p)
{
    if (p == NULL || !pymalloc_arenas_tracking()) {
        return 0;
    }
    size_t small = pymalloc_arenas_block_size(p);
    return small != 0 ? small : pyrometer_memhooks_usable_size(p);
}

EXPORT int64_t pyrometer_memhooks_footprint(void)
{
    return atomic_load_explicit(&footprint, memory_order_relaxed);
}
