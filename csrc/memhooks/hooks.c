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
#include "got.h"
#include "interpose.h"
#include "memhooks.h"
#include "pymalloc_arenas.h"
#include "../common/sample_distance.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
/* Slow paths are kept out of line, so that the interposed functions' common path
 * saves no registers and sets up no frame. */
#define COLD __attribute__((noinline, cold))

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
/* This library's malloc (below), by a name that no other object has.  (GCC
 * wants the alias to carry malloc's attributes, which clang has no way to
 * copy and does not ask for.) */
#if defined(__clang__)
#define SAME_ATTRIBUTES_AS_MALLOC
#else
#define SAME_ATTRIBUTES_AS_MALLOC copy(malloc),
#endif
void *own_malloc(size_t size) __attribute__((alias("malloc"), SAME_ATTRIBUTES_AS_MALLOC visibility("hidden")));
/* Whether the library came in with dlopen instead of LD_PRELOAD (attached, see
 * got.c): then it is in no search order, and the real functions are the ones
 * every other object binds to (RTLD_DEFAULT: libc's, or those of an allocator
 * the program preloads), not the next ones after it. */
static int attached;

/* memcpy and memmove, the busiest of the interposed calls, reach their real
 * functions through these, which hold plain_copy until resolve() has the real
 * ones: so a copy tests nothing about resolution (a relaxed load is a plain
 * mov).  Atomic because resolve() may store while another thread copies. */
typedef void *(*copy_fn)(void *, const void *, size_t);
static COLD EARLY void *plain_copy(void *dst, const void *src, size_t n);
static _Atomic(copy_fn) copy_memcpy = plain_copy;
static _Atomic(copy_fn) copy_memmove = plain_copy;

static EARLY void resolve(void)
{
    int expected = 0;
    if (!atomic_compare_exchange_strong(&resolve_state, &expected, 1)) {
        return; /* another call is resolving; callers fall back to the bootstrap heap */
    }
    /* Preloaded, the library's malloc is the one every object binds to.  (A
     * lookup of one of its own names would not tell: dlsym(RTLD_DEFAULT) from
     * a dlopened object searches that object's own scope after the global.)
     * dlsym first: preloaded ahead of everything (the sanitizer job's order),
     * this runs while ASan starts, where only uninstrumented code may
     * (EARLY), which got.c is not; got_definition then sees past an
     * executable's canonical PLT entry, which dlsym gives for malloc in a
     * position-dependent python (Debian's 3.14 and 3.15). */
    attached = dlsym(RTLD_DEFAULT, "malloc") != (void *)own_malloc && got_definition("malloc") != (void *)own_malloc;
#define HOOKED(name, ret, args) real.name = (name##_fn)(attached ? got_definition(#name) : dlsym(RTLD_NEXT, #name));
#include "hooks_list.h"
#undef HOOKED
    if (real.memcpy != NULL) {
        atomic_store_explicit(&copy_memcpy, (copy_fn)real.memcpy, memory_order_relaxed);
    }
    if (real.memmove != NULL) {
        atomic_store_explicit(&copy_memmove, (copy_fn)real.memmove, memory_order_relaxed);
    }
    atomic_store_explicit(&resolve_state, 2, memory_order_release);
}

static inline EARLY int resolved(void)
{
    if (LIKELY(atomic_load_explicit(&resolve_state, memory_order_acquire) == 2)) {
        return 1;
    }
    resolve();
    return atomic_load_explicit(&resolve_state, memory_order_acquire) == 2;
}

static void forget_other_threads(void);

__attribute__((constructor)) static void memhooks_init(void)
{
    resolve();
    if (!attached) {
        pymalloc_arenas_install(); /* before the interpreter makes its first arena */
    }
    /* Registered before any handler of the extension's (it loads later), so it
     * runs first in a child. */
    pthread_atfork(NULL, NULL, forget_other_threads);
}

/* ---- bootstrap heap: allocations made while dlsym runs ------------------------- */

#define BOOTSTRAP_BYTES (256 * 1024)
static _Alignas(64) unsigned char bootstrap_heap[BOOTSTRAP_BYTES];
static atomic_size_t bootstrap_used;

/* Each block is preceded by 16 bytes holding its size, for realloc. */
static EARLY void *bootstrap_alloc(size_t size, size_t align)
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

static EARLY int in_bootstrap(const void *p)
{
    return (const unsigned char *)p >= bootstrap_heap &&
           (const unsigned char *)p < bootstrap_heap + BOOTSTRAP_BYTES;
}

static EARLY size_t bootstrap_size(const void *p)
{
    return ((const size_t *)p)[-2];
}

/* ---- counting ---------------------------------------------------------------- */

static _Thread_local memhooks_thread T __attribute__((tls_model("initial-exec")));

static atomic_int enabled;
/* Written by start() while other threads count: relaxed atomics. */
static _Atomic int64_t window = 1 << 20;
static _Atomic int64_t copy_window = 1 << 20;
static _Atomic(memhooks_sample_fn) sample_fn;
static _Atomic(memhooks_freed_fn) freed_fn;
static _Atomic int64_t footprint;

/* Sampled allocations whose free we watch, for leak detection: a table of
 * buckets of two slots (memhooks.h), so a free costs one load of the occupied
 * map.  A sample whose bucket is full evicts the lighter of the two (its owner
 * is told: its fate is unknown from then on, and its bytes count as live), or
 * is left out itself when it is lighter than both, which keeps the table
 * bounded.  With one slot per address, the churn of small samples evicted
 * large long-lived blocks: a worker's 6.4 MB arrays, all freed when it
 * returned, left 1.5-6.1 MB of growth on their line in 2 runs of 10 (Scalene's
 * mt_two_workers.py).
 *
 * A slot's address and token change together, or a free racing a sample on the
 * same slot reports another block's token, and a sample racing a sample loses
 * one.  So the address word is also the slot's lock: SLOT_BUSY (never a block
 * address) while a thread changes the token.  It is held for a few instructions,
 * never across a callback, and a sample that finds it held gives up watching
 * (its owner is told "evicted") instead of waiting: a signal handler, or a child
 * forked while another thread held it, never spins. */
#define WATCH_SLOTS MEMHOOKS_WATCH_SLOTS
#define SLOT_BUSY ((uintptr_t)1)
#define SLOT_TRIES 64
static _Atomic uintptr_t watch_address[WATCH_SLOTS];
static _Atomic uintptr_t watch_token[WATCH_SLOTS];
static _Atomic int64_t watch_weight[WATCH_SLOTS]; /* changes with the token, under the slot's lock */
/* With the token too: what the owner gave with a Python sample (its block's
 * birth on the owner's clock, 0 for any other block), handed back at the free. */
static _Atomic uint64_t watch_born[WATCH_SLOTS];
/* With the token too: the pymalloc span count raised for the slot's block
 * (span_raise), NULL for none; the one lowered when the block leaves the slot. */
static _Atomic(_Atomic uint16_t *) watch_span[WATCH_SLOTS];
/* One bit per slot, set while the slot holds a block (memhooks.h): a free tests
 * its slot's bit in this 4 KiB map, which stays in the first-level cache, and
 * reads the 256 KiB address table only when the bit is set.  A bit changes only
 * under its slot's lock, before the lock is given back (set before the address
 * is stored, cleared before 0 is), so a thread freeing a watched block (which
 * it can only do after the allocation that watched it returned) sees the bit
 * set.  A set bit with an empty slot only costs a free the second load. */
static _Atomic uint64_t watch_occupied[WATCH_SLOTS / 64];

static inline void occupy(size_t slot)
{
    atomic_fetch_or_explicit(&watch_occupied[slot / 64], (uint64_t)1 << (slot % 64), memory_order_relaxed);
}

static inline void vacate(size_t slot)
{
    atomic_fetch_and_explicit(&watch_occupied[slot / 64], ~((uint64_t)1 << (slot % 64)), memory_order_relaxed);
}

static inline size_t watch_slot(uintptr_t address)
{
    return memhooks_watch_slot(address);
}

/* Threads inside the library's calls out (the sample and freed functions) or
 * changing a slot on their behalf (watch): stop() waits for none to be left, so
 * that once it returns no token is told or put back into the table, and the
 * owner may free what its tokens point to.  Without it, a thread that loaded
 * freed_fn just before stop() called it after the owner had released the
 * tokens' memory.  Only the slow paths (samples, frees of watched blocks) count
 * themselves here; every access is sequentially consistent, which is what makes
 * the exchange with stop() work: stop() clears the functions, then reads the
 * count; a caller raises the count, then reads the functions; so either stop()
 * sees the caller and waits, or the caller sees the functions cleared and does
 * nothing. */
static atomic_int calls_out;

static inline EARLY int counting(void)
{
    return atomic_load_explicit(&enabled, memory_order_relaxed) && T.busy == 0 && T.python_depth == 0;
}

/* The callbacks run inside malloc and free, which must leave errno as libc does
 * (free keeps it; a failed realloc leaves ENOMEM): save it around them. */
static COLD void tell(uintptr_t token, int evicted, int64_t weight, uint64_t born)
{
    if (token == 0) {
        return;
    }
    atomic_fetch_add(&calls_out, 1);
    memhooks_freed_fn freed = atomic_load(&freed_fn);
    if (freed != NULL) {
        int saved = errno;
        T.busy++;
        freed(token, evicted, weight, born);
        T.busy--;
        errno = saved;
    }
    atomic_fetch_sub(&calls_out, 1);
}

/* Takes a slot's lock; 0 when another thread held it all along.  *held: the
 * address the slot held (0: none). */
static int slot_lock(size_t slot, uintptr_t *held)
{
    uintptr_t seen = atomic_load_explicit(&watch_address[slot], memory_order_relaxed);
    for (int i = 0; i < SLOT_TRIES; i++) {
        if (seen != SLOT_BUSY &&
            atomic_compare_exchange_weak_explicit(&watch_address[slot], &seen, SLOT_BUSY,
                                                  memory_order_acquire, memory_order_relaxed)) {
            *held = seen;
            return 1;
        }
        seen = atomic_load_explicit(&watch_address[slot], memory_order_relaxed);
    }
    return 0;
}

/* The watch count of the pymalloc span holding address (pymalloc_arenas.h),
 * which Python's free tests instead of this table: raised before a watch of the
 * address is published, lowered after it is taken out (through the slot's
 * watch_span, so that the count lowered is the one raised, wherever the map
 * says the address lies by then), so that it is never below the number of
 * watched blocks there.  Blocks outside pymalloc's arenas have none; the map's
 * arenas are looked up only for a Python object's block (python: a Python
 * sample, or a code object a sample names), the only kind that can lie in
 * them. */
static _Atomic uint16_t *span_raise(uintptr_t address, int python)
{
    pymalloc_arena_map *m = pymalloc_arenas_map();
    _Atomic uint16_t *count = m != NULL ? pymalloc_span_watches(m, address, python) : NULL;
    if (count != NULL) {
        atomic_fetch_add_explicit(count, 1, memory_order_relaxed);
    }
    return count;
}

static void span_lower(_Atomic uint16_t *count)
{
    if (count != NULL) {
        atomic_fetch_sub_explicit(count, 1, memory_order_relaxed);
    }
}

/* Whether a slot is free for a new watch: empty, or holding no token. */
static int slot_free(size_t slot)
{
    uintptr_t held = atomic_load_explicit(&watch_address[slot], memory_order_acquire);
    return held == 0 || (held != SLOT_BUSY && atomic_load_explicit(&watch_token[slot], memory_order_relaxed) == 0);
}

/* The slot of address's bucket that a watch of weight takes, or -1 for none
 * (the bucket is full and evict is off, or both blocks there are heavier).
 * The reads race other threads' changes: a slot chosen empty may be taken by
 * the time it is locked, and is then evicted, as with one slot per bucket. */
static long choose_slot(size_t bucket, uintptr_t address, int64_t weight, int evict)
{
    for (size_t way = 0; way < 2; way++) {
        if (atomic_load_explicit(&watch_address[bucket + way], memory_order_relaxed) == address) {
            return (long)(bucket + way); /* watched already: its token changes */
        }
    }
    for (size_t way = 0; way < 2; way++) {
        if (slot_free(bucket + way)) {
            return (long)(bucket + way);
        }
    }
    if (!evict) {
        return -1;
    }
    int64_t w0 = atomic_load_explicit(&watch_weight[bucket], memory_order_relaxed);
    int64_t w1 = atomic_load_explicit(&watch_weight[bucket + 1], memory_order_relaxed);
    /* The lighter goes; between equals, one picked by the address's next bit. */
    size_t victim = w0 < w1 ? bucket : w1 < w0 ? bucket + 1 : bucket + ((address >> 5) & 1);
    int64_t lighter = w0 < w1 ? w0 : w1;
    return weight < lighter ? -1 : (long)victim;
}

/* evict: whether a block watched in a full bucket gives way (a sample's block:
 * the lighter of the two goes, choose_slot); without it, a full bucket leaves
 * the new watch out (told "evicted" at once), so that following an object that
 * is not a sample (code_life's code objects) never costs a sample its fate. */
static COLD void watch(void *address, uintptr_t token, int64_t weight, int evict, uint64_t born, int python)
{
    uintptr_t evicted = token; /* not watched after all */
    int64_t evicted_weight = weight;
    atomic_fetch_add(&calls_out, 1);
    /* Stopped meanwhile (see calls_out): the token is not put in a table that
     * stop() has already cleared. */
    long chosen = atomic_load(&freed_fn) != NULL ? choose_slot(watch_slot((uintptr_t)address), (uintptr_t)address,
                                                               weight, evict)
                                                 : -1;
    size_t slot = chosen >= 0 ? (size_t)chosen : 0;
    uintptr_t held = 0;
    if (chosen >= 0 && slot_lock(slot, &held)) {
        evicted = atomic_load_explicit(&watch_token[slot], memory_order_relaxed);
        evicted_weight = atomic_load_explicit(&watch_weight[slot], memory_order_relaxed);
        atomic_store_explicit(&watch_token[slot], token, memory_order_relaxed);
        atomic_store_explicit(&watch_weight[slot], weight, memory_order_relaxed);
        atomic_store_explicit(&watch_born[slot], born, memory_order_relaxed);
        occupy(slot);
        _Atomic uint16_t *evicted_span = atomic_load_explicit(&watch_span[slot], memory_order_relaxed);
        atomic_store_explicit(&watch_span[slot], span_raise((uintptr_t)address, python), memory_order_relaxed);
        atomic_store_explicit(&watch_address[slot], (uintptr_t)address, memory_order_release);
        span_lower(evicted_span);
    }
    tell(evicted, 1, evicted_weight, 0);
    atomic_fetch_sub(&calls_out, 1);
}

/* The slot of address's bucket that holds it, or -1 (a racy read: the lock
 * taken afterwards from that address is what counts). */
static inline long find_slot(uintptr_t address)
{
    size_t bucket = watch_slot(address);
    unsigned bits = memhooks_bucket_occupied((const volatile uint64_t *)watch_occupied, bucket);
    if (LIKELY(bits == 0)) {
        return -1;
    }
    if ((bits & 1) && atomic_load_explicit(&watch_address[bucket], memory_order_relaxed) == address) {
        return (long)bucket;
    }
    if ((bits & 2) && atomic_load_explicit(&watch_address[bucket + 1], memory_order_relaxed) == address) {
        return (long)(bucket + 1);
    }
    return -1;
}

/* Stops watching address; its token (0 if it was not watched), weight and
 * birth (watch_born), not told yet. */
static inline uintptr_t unwatch_quietly(void *address, int64_t *weight, uint64_t *born)
{
    long found = find_slot((uintptr_t)address);
    uintptr_t expected = (uintptr_t)address;
    if (LIKELY(found < 0)) {
        return 0;
    }
    size_t slot = (size_t)found;
    if (!atomic_compare_exchange_strong_explicit(&watch_address[slot], &expected, SLOT_BUSY,
                                                 memory_order_acquire, memory_order_relaxed)) {
        return 0;
    }
    uintptr_t token = atomic_load_explicit(&watch_token[slot], memory_order_relaxed);
    *weight = atomic_load_explicit(&watch_weight[slot], memory_order_relaxed);
    *born = atomic_load_explicit(&watch_born[slot], memory_order_relaxed);
    atomic_store_explicit(&watch_token[slot], 0, memory_order_relaxed);
    _Atomic uint16_t *span = atomic_exchange_explicit(&watch_span[slot], NULL, memory_order_relaxed);
    vacate(slot);
    atomic_store_explicit(&watch_address[slot], 0, memory_order_release);
    span_lower(span);
    return token;
}

static inline void unwatch(void *address)
{
    int64_t weight = 0;
    uint64_t born = 0;
    uintptr_t token = unwatch_quietly(address, &weight, &born);
    if (UNLIKELY(token != 0)) {
        tell(token, 0, weight, born);
    }
}

static COLD void emit(int kind, int64_t bytes, int64_t python_bytes, void *address, uint64_t born)
{
    atomic_fetch_add(&calls_out, 1);
    memhooks_sample_fn fn = atomic_load(&sample_fn);
    if (fn != NULL) {
        int saved = errno;
        T.busy++;
        uintptr_t token = fn(kind, bytes, python_bytes, address);
        if (token != 0 && address != NULL) {
            watch(address, token, bytes, 1, born, born != 0); /* born: a Python sample's block */
        }
        T.busy--;
        errno = saved;
    }
    atomic_fetch_sub(&calls_out, 1);
}

/* The thread's net bytes passed a window: they go to the footprint. */
static COLD void report_net(void)
{
    atomic_fetch_add_explicit(&footprint, T.net, memory_order_relaxed);
    T.net = 0;
}

static _Atomic uint64_t seed_counter;

/* A different stream for every thread (splitmix64 of a counter and the
 * thread's address). */
static uint64_t new_seed(const void *salt)
{
    uint64_t z = atomic_fetch_add_explicit(&seed_counter, 0x9E3779B97F4A7C15ULL, memory_order_relaxed) ^
                 (uint64_t)(uintptr_t)salt;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return z != 0 ? z : 1;
}

/* The countdown reached zero inside a block: one sample for each crossing,
 * weighing a window each.  A thread's first crossing only starts its process
 * (drawing from the first allocation on), so that no thread's first block is
 * sampled for certain. */
static COLD void allocation_crossed(int64_t w, void *address)
{
    int64_t crossings = 0;
    if (UNLIKELY(T.rng == 0)) {
        T.rng = new_seed(&T);
        T.countdown += sample_distance(&T.rng, w);
    }
    while (T.countdown <= 0) {
        crossings++;
        T.countdown += sample_distance(&T.rng, w);
    }
    if (crossings > 0) {
        emit(MEMHOOKS_ALLOC, crossings * w, 0, address, 0);
    }
}

/* A native block allocated (bytes > 0) or freed (bytes < 0). */
static inline void note(int64_t bytes, void *address)
{
    int64_t w = atomic_load_explicit(&window, memory_order_relaxed);
    int64_t net = T.net + bytes;
    T.net = net;
    if (UNLIKELY(net >= w || net <= -w)) {
        report_net();
    }
    if (bytes <= 0) {
        return;
    }
    if (UNLIKELY(bytes >= w)) {
        emit(MEMHOOKS_ALLOC, bytes, 0, address, 0); /* always a sample, of its own size */
        return;
    }
    int64_t left = T.countdown - bytes;
    T.countdown = left;
    if (UNLIKELY(left <= 0)) {
        allocation_crossed(w, address);
    }
}

static COLD void copy_sample(void)
{
    int64_t copied = (int64_t)T.copied;
    T.copied = 0;
    emit(MEMHOOKS_COPY, copied, 0, NULL, 0);
}

static inline void note_copy(size_t n)
{
    uint64_t copied = T.copied + n;
    T.copied = copied;
    if (UNLIKELY(copied >= (uint64_t)atomic_load_explicit(&copy_window, memory_order_relaxed))) {
        copy_sample();
    }
}

static inline EARLY void counted_alloc(void *p)
{
    if (p != NULL && counting()) {
        note((int64_t)real.malloc_usable_size(p), p);
    }
}

static inline EARLY void counted_free(void *p)
{
    if (atomic_load_explicit(&enabled, memory_order_relaxed)) {
        unwatch(p);
        if (T.busy == 0 && T.python_depth == 0) {
            note(-(int64_t)real.malloc_usable_size(p), NULL);
        }
    }
}

/* ---- the interposed functions --------------------------------------------------- */

EXPORT EARLY void *malloc(size_t size)
{
    if (UNLIKELY(!resolved())) {
        return bootstrap_alloc(size, 16);
    }
    void *p = real.malloc(size);
    counted_alloc(p);
    return p;
}

EXPORT EARLY void *calloc(size_t n, size_t size)
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

EXPORT EARLY void free(void *p)
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

EXPORT EARLY void *realloc(void *p, size_t size)
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
    /* Counted as a free of the old block and a new allocation.  The old block's
     * watch is taken out before the real realloc (after it, another thread may
     * already have the address) and its owner told only once the block is gone. */
    uintptr_t token = 0;
    int64_t weight = 0;
    uint64_t born = 0;
    if (p != NULL && atomic_load_explicit(&enabled, memory_order_relaxed)) {
        token = unwatch_quietly(p, &weight, &born);
        if (T.busy == 0 && T.python_depth == 0) {
            note(-(int64_t)real.malloc_usable_size(p), NULL);
        }
    }
    void *q = real.realloc(p, size);
    if (q == NULL && p != NULL && size != 0) {
        int saved = errno;
        if (token != 0) {
            watch(p, token, weight, 1, born, 0); /* failed: the old block is still there, still watched */
        }
        counted_alloc(p);
        errno = saved;
        return NULL;
    }
    if (token != 0) {
        tell(token, 0, weight, born);
    }
    counted_alloc(q);
    return q;
}

EXPORT EARLY void *reallocarray(void *p, size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, total);
}

EXPORT EARLY int posix_memalign(void **out, size_t align, size_t size)
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

EXPORT EARLY void *aligned_alloc(size_t align, size_t size)
{
    if (UNLIKELY(!resolved())) {
        return bootstrap_alloc(size, align);
    }
    void *p = real.aligned_alloc(align, size);
    counted_alloc(p);
    return p;
}

EXPORT EARLY void *memalign(size_t align, size_t size)
{
    if (UNLIKELY(!resolved())) {
        return bootstrap_alloc(size, align);
    }
    void *p = real.memalign(align, size);
    counted_alloc(p);
    return p;
}

EXPORT EARLY void *valloc(size_t size)
{
    if (UNLIKELY(!resolved())) {
        return bootstrap_alloc(size, 4096);
    }
    void *p = real.valloc(size);
    counted_alloc(p);
    return p;
}

EXPORT EARLY void *pvalloc(size_t size)
{
    if (UNLIKELY(!resolved())) {
        return bootstrap_alloc((size + 4095) / 4096 * 4096, 4096);
    }
    void *p = real.pvalloc(size);
    counted_alloc(p);
    return p;
}

EXPORT EARLY size_t malloc_usable_size(void *p)
{
    return pyrometer_memhooks_usable_size(p);
}

/* Before resolution (inside the dynamic loader) copies go byte by byte; volatile
 * keeps the compiler from turning this loop back into a call to memcpy. */
static COLD EARLY void *plain_copy(void *dst, const void *src, size_t n)
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

/* Before resolution nothing counts (enabled is 0) and the copy is plain_copy. */
EXPORT EARLY void *memcpy(void *restrict dst, const void *restrict src, size_t n)
{
    if (counting()) {
        note_copy(n);
    }
    return atomic_load_explicit(&copy_memcpy, memory_order_relaxed)(dst, src, n);
}

EXPORT EARLY void *memmove(void *dst, const void *src, size_t n)
{
    if (counting()) {
        note_copy(n);
    }
    return atomic_load_explicit(&copy_memmove, memory_order_relaxed)(dst, src, n);
}

/* The fortified variants check the destination size themselves (and abort on
 * overflow, as glibc's do); the real ones are used when the library has them. */
EXPORT EARLY void *__memcpy_chk(void *dst, const void *src, size_t n, size_t dst_len)
{
    if (UNLIKELY(atomic_load_explicit(&resolve_state, memory_order_acquire) != 2) ||
        real.__memcpy_chk == NULL) {
        if (n > dst_len) {
            abort();
        }
        return memcpy(dst, src, n);
    }
    if (counting()) {
        note_copy(n);
    }
    return real.__memcpy_chk(dst, src, n, dst_len);
}

EXPORT EARLY void *__memmove_chk(void *dst, const void *src, size_t n, size_t dst_len)
{
    if (UNLIKELY(atomic_load_explicit(&resolve_state, memory_order_acquire) != 2) ||
        real.__memmove_chk == NULL) {
        if (n > dst_len) {
            abort();
        }
        return memmove(dst, src, n);
    }
    if (counting()) {
        note_copy(n);
    }
    return real.__memmove_chk(dst, src, n, dst_len);
}

/* ---- the interface for the extension ---------------------------------------------- */

EXPORT int pyrometer_memhooks_start(const memhooks_config *config)
{
    if (!resolved() || config->window <= 0 || config->copy_window <= 0) {
        return -1;
    }
    atomic_store(&window, config->window);
    atomic_store(&copy_window, config->copy_window);
    atomic_store(&freed_fn, config->freed);
    atomic_store(&sample_fn, config->sample);
    atomic_store(&enabled, 1);
    return 0;
}

/* Waits (yielding) until no thread is in a call out or a slot change.  Each
 * lasts a callback or a few instructions, and neither ever waits for the thread
 * that stops: the callbacks take no lock (mem_profile.c, code_life.c).  In a
 * forked child, the threads that were inside are gone: forget_other_threads
 * has cleared what they left. */
static void wait_for_calls_out(void)
{
    while (atomic_load(&calls_out) != 0) {
        sched_yield();
    }
}

/* Stopping clears the watch table, so that no token of this run is told after
 * it.  A slot whose lock another thread holds is waited for, not cleared under
 * it: that thread is about to store the slot's address (and, in watch(), a
 * token) after the clearing, which would leave a token of this run in the table
 * for a free of the next run to tell (to an owner whose memory is gone). */
EXPORT void pyrometer_memhooks_stop(void)
{
    atomic_store(&enabled, 0);
    atomic_store(&sample_fn, NULL);
    atomic_store(&freed_fn, NULL);
    /* From here no call out starts (see calls_out); those under way end. */
    wait_for_calls_out();
    /* Only the occupied slots: no watch() is under way any more (it runs inside
     * calls_out), so a slot that holds a block has its bit set, and one whose
     * bit is clear is empty or about to be (a free that took its lock stores 0
     * itself).  Sweeping the whole table wrote 384 KiB each time, and in a
     * forked child (which stops at reset and again at its end) copied every
     * page of it: 11% of a short-lived child's time. */
    for (size_t word = 0; word < WATCH_SLOTS / 64; word++) {
        uint64_t bits = atomic_load_explicit(&watch_occupied[word], memory_order_relaxed);
        while (bits != 0) {
            size_t i = word * 64 + (size_t)__builtin_ctzll(bits);
            bits &= bits - 1;
            uintptr_t held = 0;
            while (!slot_lock(i, &held)) {
                sched_yield(); /* a free or a retoken changing this slot: instructions */
            }
            atomic_store_explicit(&watch_token[i], 0, memory_order_relaxed);
            _Atomic uint16_t *span = atomic_exchange_explicit(&watch_span[i], NULL, memory_order_relaxed);
            vacate(i);
            atomic_store_explicit(&watch_address[i], 0, memory_order_release);
            span_lower(span);
        }
    }
}

/* In a forked child only the forking thread is left: a count or a slot lock that
 * another thread held at the fork would never be given back, and stop() (the
 * extension stops in the child) would wait for it forever.  The tokens of such
 * slots are the parent's. */
static void forget_other_threads(void)
{
    got_after_fork_in_child();
    atomic_store(&calls_out, 0);
    for (size_t i = 0; i < WATCH_SLOTS; i++) {
        if (atomic_load_explicit(&watch_address[i], memory_order_relaxed) == SLOT_BUSY) {
            atomic_store_explicit(&watch_token[i], 0, memory_order_relaxed);
            /* Its span count stays raised: above the truth, which costs only time. */
            atomic_store_explicit(&watch_span[i], NULL, memory_order_relaxed);
            vacate(i);
            atomic_store_explicit(&watch_address[i], 0, memory_order_relaxed);
        }
    }
}

EXPORT memhooks_thread *pyrometer_memhooks_thread(void)
{
    return &T;
}

EXPORT void pyrometer_memhooks_sample_python(int64_t bytes, void *address, uint64_t born)
{
    if (!atomic_load_explicit(&enabled, memory_order_relaxed) || T.busy != 0 || bytes <= 0) {
        return;
    }
    emit(MEMHOOKS_ALLOC, bytes, bytes, address, born);
}

EXPORT int pyrometer_memhooks_is_watched(void *address, uintptr_t token)
{
    size_t bucket = watch_slot((uintptr_t)address);
    for (size_t slot = bucket; slot < bucket + 2; slot++) {
        if (atomic_load_explicit(&watch_address[slot], memory_order_acquire) == (uintptr_t)address &&
            atomic_load_explicit(&watch_token[slot], memory_order_relaxed) == token) {
            return 1;
        }
    }
    return 0;
}

EXPORT void pyrometer_memhooks_watch(void *address, uintptr_t token)
{
    if (address != NULL && token != 0) {
        T.busy++;
        watch(address, token, 0, 0, 0, 1);
        T.busy--;
    }
}

EXPORT int pyrometer_memhooks_retoken(void *address, uintptr_t from, uintptr_t to)
{
    long found = find_slot((uintptr_t)address);
    if (found < 0) {
        return 0;
    }
    size_t slot = (size_t)found;
    uintptr_t expected = (uintptr_t)address;
    /* Locked only while the slot holds this address (as unwatch_quietly). */
    if (!atomic_compare_exchange_strong_explicit(&watch_address[slot], &expected, SLOT_BUSY,
                                                 memory_order_acquire, memory_order_relaxed)) {
        return 0;
    }
    int done = 0;
    uintptr_t owner = atomic_load_explicit(&watch_token[slot], memory_order_relaxed);
    if (owner == from) {
        atomic_store_explicit(&watch_token[slot], to, memory_order_relaxed);
        done = 1;
    }
    atomic_store_explicit(&watch_address[slot], (uintptr_t)address, memory_order_release);
    return done;
}

EXPORT void pyrometer_memhooks_footprint_add(int64_t bytes)
{
    if (atomic_load_explicit(&enabled, memory_order_relaxed)) {
        atomic_fetch_add_explicit(&footprint, bytes, memory_order_relaxed);
    }
}

EXPORT const volatile uintptr_t *pyrometer_memhooks_watch_table(void)
{
    return (const volatile uintptr_t *)watch_address;
}

EXPORT const volatile uint64_t *pyrometer_memhooks_watch_occupied(void)
{
    return (const volatile uint64_t *)watch_occupied;
}

EXPORT void pyrometer_memhooks_unwatch(void *address)
{
    /* Whatever the thread is doing: a watched block freed inside the profiler's
     * own work (a periodic report frees the program's garbage too) is freed. */
    unwatch(address);
}

EXPORT EARLY size_t pyrometer_memhooks_usable_size(void *p)
{
    if (p == NULL) {
        return 0;
    }
    if (in_bootstrap(p)) {
        return bootstrap_size(p);
    }
    size_t pooled;
    if (UNLIKELY(attached) && pymalloc_adopted_tail_size((uintptr_t)p, &pooled)) {
        return pooled; /* a Python block sized by the extension (pymalloc_arenas.c) */
    }
    return resolved() ? real.malloc_usable_size(p) : 0;
}

EXPORT memhooks_size_fn pyrometer_memhooks_malloc_sizer(void)
{
    return resolved() ? real.malloc_usable_size : NULL;
}

EXPORT size_t pyrometer_memhooks_python_tail_size(void *p)
{
    size_t size;
    return p != NULL && pymalloc_adopted_tail_size((uintptr_t)p, &size) ? size : 0;
}

EXPORT void *pyrometer_memhooks_python_arenas(void)
{
    pymalloc_arena_map *m = pymalloc_arenas_map();
    return m != NULL && m->tracking ? m : NULL;
}

EXPORT int64_t pyrometer_memhooks_footprint(void)
{
    return atomic_load_explicit(&footprint, memory_order_relaxed);
}

/* ---- attaching to a running process (got.c) -------------------------------------- */

/* The functions put in the objects' tables: every interposed one (hooks_list.h
 * and the limits of pymalloc_arenas.c), found in this library through its own
 * handle, and dlopen and dlsym. */
static const char *const replaced[] = {
#define HOOKED(name, ret, args) #name,
#include "hooks_list.h"
#undef HOOKED
    "setrlimit", "setrlimit64", "prlimit", "prlimit64",
};
#define REPLACED (sizeof replaced / sizeof replaced[0])
static got_replacement replacements[REPLACED + 2];

/* 1: not tried (or detached since); then what the attempt gave. */
static int attach_result = 1;

EXPORT int pyrometer_memhooks_attach(void *own_handle)
{
    if (!attached) {
        return 0; /* preloaded: every object binds to this library already */
    }
    if (attach_result != 1) {
        return attach_result;
    }
    Dl_info own;
    if (!resolved() || real.malloc == NULL || real.free == NULL ||
        dladdr((void *)pyrometer_memhooks_attach, &own) == 0) {
        return -1;
    }
    size_t n = 0;
    for (size_t i = 0; i < REPLACED; i++) {
        void *fn = dlsym(own_handle, replaced[i]);
        Dl_info where;
        if (fn == NULL || dladdr(fn, &where) == 0 || where.dli_fbase != own.dli_fbase) {
            return -1; /* not this library's: binding a call there would skip the count */
        }
        replacements[n++] =
            (got_replacement){replaced[i], fn, dlsym(RTLD_DEFAULT, replaced[i]), got_definition(replaced[i]), 0};
    }
    void *real_dlopen = got_definition("dlopen");
    void *real_dlsym = got_definition("dlsym");
    if (real_dlopen == NULL || real_dlsym == NULL) {
        return -1;
    }
    replacements[n++] = (got_replacement){"dlopen", (void *)got_dlopen, dlsym(RTLD_DEFAULT, "dlopen"), real_dlopen, 0};
    replacements[n++] = (got_replacement){"dlsym", (void *)got_dlsym, dlsym(RTLD_DEFAULT, "dlsym"), real_dlsym, 1};
    /* Before any Python free reaches the hooks; once: the arena allocator
     * stays wrapped after a detach, so the map is still whole at a second
     * attach. */
    static int adopted;
    if (!adopted) {
        pymalloc_arenas_adopt();
        adopted = 1;
    }
    attach_result = got_attach(replacements, n, (uintptr_t)own.dli_fbase, real_dlopen, real_dlsym);
    return attach_result;
}

EXPORT int pyrometer_memhooks_detach(void)
{
    if (!attached || attach_result == 1) {
        return 0; /* preloaded (nothing to undo), or not attached */
    }
    /* Also after an attach that failed part-way (-1): what it changed goes back. */
    int rc = got_detach();
    attach_result = 1;
    return rc;
}
