#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "pyalloc.h"
#include "../memhooks/pymalloc_arenas.h"
#include "../common/sample_distance.h"

#include <dlfcn.h>
#include <unistd.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>

#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define COLD __attribute__((noinline, cold))
/* Out of the fast wrappers' way (they keep no frame), but not cold: the paths
 * of blocks over 512 bytes, taken hundreds of thousands of times a second by
 * programs that build large strings and lists.  (Cold, they were compiled for
 * size, without their helpers inlined.) */
#define WARM __attribute__((noinline))

/* Where the library's entry points are: the global scope when preloaded, its
 * own handle once attached (memhooks_api_attach). */
static void *memhooks_scope = RTLD_DEFAULT;

int memhooks_api_attach(const char *path, const char **why)
{
    if (memhooks_scope != RTLD_DEFAULT) {
        return 0;
    }
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (handle == NULL) {
        *why = dlerror();
        return -1;
    }
    int (*attach)(void *) = (int (*)(void *))dlsym(handle, "pyrometer_memhooks_attach");
    if (attach == NULL || attach(handle) != 0) {
        *why = "its functions could not be put in the loaded objects' tables";
        return -1;
    }
    memhooks_scope = handle;
    return 0;
}

int memhooks_api_detach(void)
{
    if (memhooks_scope == RTLD_DEFAULT) {
        return 0; /* preloaded, or not attached */
    }
    int (*detach)(void) = (int (*)(void))dlsym(memhooks_scope, "pyrometer_memhooks_detach");
    int rc = detach != NULL ? detach() : -1;
    /* Detached either way (a slot not put back still reaches functions that
     * count nothing once stopped): the next attach starts afresh. */
    memhooks_scope = RTLD_DEFAULT;
    return rc;
}

int memhooks_api_find(memhooks_api *api)
{
    api->start = (int (*)(const memhooks_config *))dlsym(memhooks_scope, "pyrometer_memhooks_start");
    api->stop = (void (*)(void))dlsym(memhooks_scope, "pyrometer_memhooks_stop");
    api->thread = (memhooks_thread * (*)(void)) dlsym(memhooks_scope, "pyrometer_memhooks_thread");
    api->sample_python = (void (*)(int64_t, void *, uint64_t))dlsym(memhooks_scope, "pyrometer_memhooks_sample_python");
    api->python_arenas = (void *(*)(void))dlsym(memhooks_scope, "pyrometer_memhooks_python_arenas");
    api->footprint = (int64_t(*)(void))dlsym(memhooks_scope, "pyrometer_memhooks_footprint");
    api->footprint_add = (void (*)(int64_t))dlsym(memhooks_scope, "pyrometer_memhooks_footprint_add");
    api->watch_table =
        (const volatile uintptr_t * (*)(void)) dlsym(memhooks_scope, "pyrometer_memhooks_watch_table");
    api->watch_occupied =
        (const volatile uint64_t * (*)(void)) dlsym(memhooks_scope, "pyrometer_memhooks_watch_occupied");
    api->unwatch = (void (*)(void *))dlsym(memhooks_scope, "pyrometer_memhooks_unwatch");
    api->watch = (void (*)(void *, uintptr_t))dlsym(memhooks_scope, "pyrometer_memhooks_watch");
    api->retoken = (int (*)(void *, uintptr_t, uintptr_t))dlsym(memhooks_scope, "pyrometer_memhooks_retoken");
    api->is_watched = (int (*)(void *, uintptr_t))dlsym(memhooks_scope, "pyrometer_memhooks_is_watched");
    api->python_tail_size = (size_t(*)(void *))dlsym(memhooks_scope, "pyrometer_memhooks_python_tail_size");
    api->malloc_sizer = (memhooks_size_fn(*)(void))dlsym(memhooks_scope, "pyrometer_memhooks_malloc_sizer");
    return api->start && api->stop && api->thread && api->sample_python &&
                   api->python_arenas && api->footprint && api->footprint_add && api->watch_table &&
                   api->watch_occupied &&
                   api->unwatch && api->watch && api->retoken && api->is_watched && api->python_tail_size &&
                   api->malloc_sizer
               ? 0
               : -1;
}

typedef struct {
    PyMemAllocatorDomain domain;
    PyMemAllocatorEx original;
} wrapped_domain;

static wrapped_domain domains[2] = {{PYMEM_DOMAIN_MEM, {0}}, {PYMEM_DOMAIN_OBJ, {0}}};
static memhooks_api hooks;
static int installed;
/* The footprint's window: the net bytes reported to the library at once. */
static int64_t window;
/* The mean distance between samples of Python's blocks (pyalloc_install):
 * smaller than the window, because Python's objects are small and many. */
static int64_t python_window;
static const volatile uintptr_t *watched;
static const volatile uint64_t *watched_slots; /* which slots of `watched` hold a block */
/* The library's arena map itself (not a copy: a limit on the address space
 * shrinks its region while the program runs).  Read only with sizing ==
 * PYALLOC_POOLS, which install() chooses only with a map (else NULL). */
static const pymalloc_arena_map *arenas;
/* malloc's own sizing (pyrometer_memhooks_malloc_sizer), called directly for
 * Python's blocks over 512 bytes, each sized at its allocation and its free:
 * through the library's malloc_usable_size, which checks for its own start-up
 * blocks and the adopted arenas' tails first, sizing took some 70 instructions
 * a block under callgrind, 94 M of regex_v8's 3,216 M at BENCH_SCALE 0.1.  Set
 * by pyalloc_install before any block is sized (not initialised to a function:
 * attaching rewrites such a pointer in the data to the library's wrapper). */
static memhooks_size_fn malloc_sized;
/* Requests of 1 to small_limit bytes are served by pymalloc from its pools, never
 * by malloc, and their blocks' sizes can be read back; 0 under any other Python
 * allocator (PYTHONMALLOC=malloc, debug hooks), which sends every call the slow
 * way. */
static size_t small_limit;
static pyalloc_sizing sizing;
static char allocator_name[32];
/* Why Python's memory is not profiled, when it is not (pyalloc_not_sized_why). */
static char not_sized_why[256];

/* Python's allocations are counted here, not in the library's per-thread
 * counters: the "mem" and "object" domains are called only with the GIL held, so
 * process-wide counts, guarded by the GIL, need no thread-local lookup.  Two of
 * them, as in the library (memhooks.h): python_net, the net bytes not yet added
 * to the footprint, and python_countdown, the bytes to allocate until the next
 * allocation sample (byte-weighted Poisson sampling: each allocation site is
 * sampled in proportion to the bytes it allocates).  A sample goes to the thread
 * that crosses (it holds the GIL, and is the one allocating).  Not for a
 * free-threaded build. */
static int64_t python_net;
static int64_t python_countdown;
static uint64_t python_rng;
/* Every distance drawn for python_countdown: python_drawn - python_countdown is
 * the bytes the Python domains allocated (blocks under a window), a clock kept
 * at no cost on the fast path (python_clock). */
static uint64_t python_drawn;

/* The Python allocation clock: bytes allocated so far (GIL held). */
static inline uint64_t python_clock(void)
{
    return python_drawn - (uint64_t)python_countdown;
}

/* A small object freed before the Python domains allocated this much since its
 * sample is churn: one pymalloc pool (16 KiB).  A block freed that soon goes
 * back to the free list its successors are taken from: the temporaries of
 * arithmetic and calls (freed within a few hundred bytes of allocation) never
 * move the footprint; 2,000 objects of 300 bytes held in a list and dropped
 * together (600 KB) do, and all but the last 16 KiB of them are allocations. */
#define CHURN_BYTES (16 * 1024)

/* A Python sample's `born`, handed back at its block's free (memhooks.h):
 * never 0, so that the free tells a Python sample from a native one
 * (pyalloc_born_python); the block's birth on the allocation clock, shifted,
 * and in the low bit whether the block is small (churn is decided for small
 * blocks only). */
#define BORN_CLOCK_MASK (UINT64_MAX >> 1)

static inline uint64_t born_now(int small)
{
    return (python_clock() + 1) << 1 | (uint64_t)(small != 0);
}

int pyalloc_is_churn(uint64_t born)
{
    return (born & 1) != 0 && ((python_clock() + 1 - (born >> 1)) & BORN_CLOCK_MASK) < CHURN_BYTES;
}

int pyalloc_born_python(uint64_t born)
{
    return born != 0;
}

/* window - 1 and twice that, kept beside the window so that the fast paths'
 * test below is one add and one compare. */
static int64_t window_less_1;
static uint64_t window_span;

/* A small object (pymalloc's limit, whichever allocator serves it): one freed
 * soon after its sample is churn (pyalloc_is_churn). */
#define SMALL_OBJECT_BYTES 512

/* Whether v is a window or more away from 0, in one comparison. */
static inline int beyond_window(int64_t v)
{
    return (uint64_t)(v + window_less_1) > window_span;
}

/* The slow part of counting a Python block of `bytes` (allocated: > 0, freed:
 * < 0) already added to python_net and, if smaller than python_window, taken
 * from python_countdown: the footprint's report, and the allocation sample. */
static COLD void settle(int64_t bytes, void *p)
{
    if (beyond_window(python_net)) {
        hooks.footprint_add(python_net);
        python_net = 0;
    }
    if (bytes >= python_window) {
        /* a block of a sampling window or more: its own sample */
        hooks.sample_python(bytes, p, born_now(bytes <= SMALL_OBJECT_BYTES));
        return;
    }
    int64_t crossings = 0;
    while (python_countdown <= 0) {
        crossings++;
        int64_t distance = sample_distance(&python_rng, python_window);
        python_countdown += distance;
        python_drawn += (uint64_t)distance;
    }
    if (bytes > 0 && crossings > 0) {
        hooks.sample_python(crossings * python_window, p, born_now(bytes <= SMALL_OBJECT_BYTES));
    }
}

/* Counts a pymalloc block (smaller than a window) allocated, before it is:
 * 1 when that is all (the block needs no sample and the net no report), so
 * that the caller's call to pymalloc can be its last (a tail call: no frame,
 * no saved registers); 0, with nothing counted, when the block must be counted
 * after the call (count_small, which settles).  Counting first counts a block
 * that pymalloc then fails to give (out of memory: a MemoryError follows) as
 * allocated: at most 512 bytes of net a failure, never a sample. */
static inline int counted_before(int64_t bytes)
{
    int64_t net = python_net + bytes;
    int64_t left = python_countdown - bytes;
    if (UNLIKELY(beyond_window(net) | (left <= 0))) {
        return 0;
    }
    python_net = net;
    python_countdown = left;
    return 1;
}

/* Counts a pymalloc block (smaller than a window) allocated. */
static inline void count_small(int64_t bytes, void *p)
{
    int64_t net = python_net + bytes;
    python_net = net;
    int64_t left = python_countdown - bytes;
    python_countdown = left;
    if (UNLIKELY(beyond_window(net) | (left <= 0))) {
        settle(bytes, p);
    }
}

/* Counts a pymalloc block moved by realloc from a size class of `before` bytes
 * to one of `after`: a new allocation of `after` bytes, and the net change. */
static inline void count_moved_small(int64_t before, int64_t after, void *p)
{
    int64_t net = python_net + after - before;
    python_net = net;
    int64_t left = python_countdown - after;
    python_countdown = left;
    if (UNLIKELY(beyond_window(net) | (left <= 0))) {
        settle(after, p);
    }
}

/* Counts a Python block allocated (bytes > 0) or freed (bytes < 0). */
static inline void count(int64_t bytes, void *p)
{
    int64_t net = python_net + bytes;
    python_net = net;
    int slow = beyond_window(net) || bytes >= python_window;
    if (bytes > 0 && bytes < python_window) {
        int64_t left = python_countdown - bytes;
        python_countdown = left;
        slow |= left <= 0;
    }
    if (UNLIKELY(slow)) {
        settle(bytes, p);
    }
}

static inline int64_t small_size(size_t asked)
{
    return (int64_t)((asked + 15) & ~(size_t)15); /* pymalloc's size class */
}

/* The size CPython's debug hooks (PYTHONMALLOC=debug, pymalloc_debug,
 * malloc_debug, mimalloc_debug; the same layout from 3.6 to 3.13) write before
 * every block: the size asked for, big-endian, in the size_t two words before the
 * block, then the API id byte and size_t - 1 bytes of 0xFD.  install() checks it
 * on known sizes before trusting it. */
static size_t debug_header_size(const void *ptr)
{
    const unsigned char *header = (const unsigned char *)ptr - 2 * sizeof(size_t);
    size_t n = 0;
    for (size_t i = 0; i < sizeof(size_t); i++) {
        n = (n << 8) | header[i];
    }
    return n;
}

static int debug_header_intact(const void *ptr)
{
    const unsigned char *pad = (const unsigned char *)ptr - sizeof(size_t) + 1;
    for (size_t i = 0; i < sizeof(size_t) - 1; i++) {
        if (pad[i] != 0xFD) {
            return 0;
        }
    }
    return 1;
}

/* The size of a live Python block outside the known arenas, under pymalloc's
 * sizing: malloc's (above 512 bytes), sized by malloc's own malloc_usable_size
 * (malloc_sized), or by the library's where it may lie in the 64th pool of an
 * arena adopted while attaching, which the library tells apart.  0 when not
 * every arena is known (tracking off): the block may then be pymalloc's. */
static inline size_t unpooled_size(void *ptr)
{
    if (UNLIKELY(!arenas->tracking)) {
        return 0;
    }
    if (UNLIKELY(pymalloc_maybe_adopted_tail(arenas, (uintptr_t)ptr))) {
        return malloc_usable_size(ptr); /* the library's: it tells an adopted arena's tail */
    }
    return malloc_sized(ptr);
}

/* The size of a live Python block, and whether it is pymalloc's (pooled: freed
 * without reaching free()) or not.  With pymalloc, its arenas are looked up
 * inline and the block's pool header read; a block outside them is sized by
 * unpooled_size.  Not called with PYALLOC_NOT_SIZED. */
static inline size_t block_size(void *ptr, int *pooled)
{
    uintptr_t a = (uintptr_t)ptr;
    if (LIKELY(sizing == PYALLOC_POOLS) && LIKELY(pymalloc_arenas_find(arenas, a))) {
        *pooled = 1;
        return pymalloc_pool_block_size(a);
    }
    *pooled = 0;
    switch (sizing) {
    case PYALLOC_DEBUG_HEADER:
        return debug_header_size(ptr);
    case PYALLOC_MALLOC:
        return malloc_usable_size(ptr); /* the library's, which never reads 0 for a live block */
    default: /* PYALLOC_POOLS */
        return unpooled_size(ptr);
    }
}

/* The size of the block that a Python allocator call asking for `asked` bytes
 * (malloc, calloc, realloc) just gave.  pymalloc passes every request over 512
 * bytes on to malloc, a realloc to such a size included, so such a block is
 * malloc's, sized by malloc at once.  (block_size, which looked every such
 * block up in the arenas at its allocation, at its realloc and at its free, took
 * 313 M of regex_v8's 20,104 M instructions under the full profile, some 50 a
 * call; wrapped_free's miss in the arenas now goes to free_unpooled.) */
static inline size_t new_block_size(void *p, size_t asked)
{
    if (LIKELY(sizing == PYALLOC_POOLS) && asked > SMALL_OBJECT_BYTES && LIKELY(arenas->tracking)) {
        return malloc_sized(p);
    }
    int pooled;
    return block_size(p, &pooled);
}

/* A block stops being watched (for leaks) before it is given back: afterwards
 * another thread may already have its address. */
static inline void unwatch(void *ptr)
{
    if (UNLIKELY(memhooks_is_watched(watched_slots, watched, (uintptr_t)ptr))) {
        hooks.unwatch(ptr);
    }
}

/* The watch count of the 1 KiB span (pymalloc_arenas.h) holding a, a live
 * Python block, when a lies in one of pymalloc's arenas: in the region (nearly
 * every arena made while profiling) or in the map (the arenas made before the
 * library came, where a short program's objects live); else NULL. */
static inline const _Atomic uint16_t *pymalloc_span(uintptr_t a)
{
    uintptr_t off = a - arenas->region_base;
    if (LIKELY(off < atomic_load_explicit(&arenas->region_size, memory_order_relaxed))) {
        return &arenas->span_watches[off >> PYMALLOC_SPAN_SHIFT];
    }
    return pymalloc_map_span(arenas, a);
}

/* Whether pymalloc's block a, whose span is `span`, is not watched by the
 * library: one load of the span's watch count, and the watch table only in a
 * span holding a watched block.  (A span holding a watched block sent every
 * free there the slow way: with Python's blocks sampled every 64 KiB, 7.5 M
 * instructions of alloc_churn's 1,196 M under callgrind went to free_slow,
 * against 0.6 M at 1 MiB.) */
static inline int unwatched_in(const _Atomic uint16_t *span, uintptr_t a)
{
    return LIKELY(atomic_load_explicit(span, memory_order_relaxed) == 0) ||
           !memhooks_is_watched(watched_slots, watched, a);
}

/* Whether a is a block of pymalloc's that the library does not watch. */
static inline int unwatched_pymalloc_block(uintptr_t a)
{
    const _Atomic uint16_t *span = pymalloc_span(a);
    return span != NULL && unwatched_in(span, a);
}

/* Allocator hooks: called with the GIL held, for every Python allocation.  They
 * forward and count.  Calls that may reach malloc (large requests, realloc, and
 * every call when sizes cannot be read back) raise the thread's python_depth, so
 * that the library does not count that malloc again as native. */

static WARM void *malloc_through(wrapped_domain *d, size_t size)
{
    memhooks_thread *t = hooks.thread();
    t->python_depth++;
    void *p = d->original.malloc(d->original.ctx, size);
    t->python_depth--;
    if (p != NULL) {
        size_t n = new_block_size(p, size);
        count((int64_t)(n != 0 ? n : size), p);
    }
    return p;
}

/* A pymalloc block that settles: a sample, or the net's report. */
static COLD void *malloc_settling(wrapped_domain *d, size_t size)
{
    void *p = d->original.malloc(d->original.ctx, size);
    if (LIKELY(p != NULL)) {
        count_small(small_size(size), p);
    }
    return p;
}

static void *wrapped_malloc(void *ctx, size_t size)
{
    wrapped_domain *d = ctx;
    if (LIKELY(size - 1 < small_limit)) { /* 0 wraps around: pymalloc hands it to malloc */
        if (LIKELY(counted_before(small_size(size)))) {
            return d->original.malloc(d->original.ctx, size);
        }
        return malloc_settling(d, size);
    }
    return malloc_through(d, size);
}

static WARM void *calloc_through(wrapped_domain *d, size_t nelem, size_t elsize)
{
    memhooks_thread *t = hooks.thread();
    t->python_depth++;
    void *p = d->original.calloc(d->original.ctx, nelem, elsize);
    t->python_depth--;
    if (p != NULL) {
        size_t n = new_block_size(p, nelem * elsize); /* no overflow: calloc gave a block */
        count((int64_t)(n != 0 ? n : nelem * elsize), p);
    }
    return p;
}

static COLD void *calloc_settling(wrapped_domain *d, size_t nelem, size_t elsize, size_t size)
{
    void *p = d->original.calloc(d->original.ctx, nelem, elsize);
    if (LIKELY(p != NULL)) {
        count_small(small_size(size), p);
    }
    return p;
}

static void *wrapped_calloc(void *ctx, size_t nelem, size_t elsize)
{
    wrapped_domain *d = ctx;
    size_t size;
    if (!__builtin_mul_overflow(nelem, elsize, &size) && LIKELY(size - 1 < small_limit)) {
        if (LIKELY(counted_before(small_size(size)))) {
            return d->original.calloc(d->original.ctx, nelem, elsize);
        }
        return calloc_settling(d, nelem, elsize, size);
    }
    return calloc_through(d, nelem, elsize);
}

/* Counted as a free of the old block and an allocation of the new one.  The old
 * block's watch ends before the call (if the call fails, that sample counts as
 * freed: rare, and never a false leak). */
static WARM void *realloc_slow(wrapped_domain *d, void *ptr, size_t size)
{
    size_t before = 0;
    if (ptr != NULL) {
        int pooled;
        before = block_size(ptr, &pooled);
        unwatch(ptr);
    }
    memhooks_thread *t = hooks.thread();
    t->python_depth++;
    void *p = d->original.realloc(d->original.ctx, ptr, size);
    t->python_depth--;
    if (p != NULL) {
        if (before != 0) {
            count(-(int64_t)before, ptr);
        }
        size_t n = new_block_size(p, size);
        count((int64_t)(n != 0 ? n : size), p);
    }
    return p;
}

/* The common realloc (strings and lists being built) moves an unwatched pymalloc
 * block to a size pymalloc serves itself: no malloc underneath, so no
 * python_depth; the footprint takes the difference of the two size classes, the
 * sampling the new block.
 * pymalloc keeps the block in place only when the new size fits its class (and
 * is over 3/4 of it): then nothing changed. */
static void *wrapped_realloc(void *ctx, void *ptr, size_t size)
{
    wrapped_domain *d = ctx;
    uintptr_t a = (uintptr_t)ptr;
    if (LIKELY(size - 1 < small_limit) && LIKELY(unwatched_pymalloc_block(a))) {
        int64_t before = (int64_t)pymalloc_pool_block_size(a);
        void *p = d->original.realloc(d->original.ctx, ptr, size);
        if (LIKELY(p != NULL) && p != ptr) {
            count_moved_small(before, small_size(size), p);
        }
        return p;
    }
    return realloc_slow(d, ptr, size);
}

static inline void free_through(wrapped_domain *d, void *ptr)
{
    memhooks_thread *t = hooks.thread();
    t->python_depth++;
    d->original.free(d->original.ctx, ptr);
    t->python_depth--;
}

/* A free counted: the block's watch ended and its size taken from the net (a
 * size of 0: not known, not counted), then the block given back, through
 * free() for one that is not pymalloc's (pooled 0). */
static WARM void free_counted(wrapped_domain *d, void *ptr, size_t size, int pooled)
{
    if (size != 0) {
        unwatch(ptr);
        count(-(int64_t)size, ptr);
    }
    if (pooled) {
        d->original.free(d->original.ctx, ptr); /* a pymalloc block: no free() underneath */
    } else {
        free_through(d, ptr);
    }
}

/* A free under any sizing: NULL, or a block sized (block_size) before it is
 * given back, as it may vanish. */
static WARM void free_slow(wrapped_domain *d, void *ptr)
{
    if (ptr == NULL) {
        free_through(d, ptr);
        return;
    }
    int pooled;
    size_t size = block_size(ptr, &pooled);
    free_counted(d, ptr, size, pooled);
}

/* A free under pymalloc's sizing of NULL or a block outside pymalloc's arenas
 * (malloc's), sized without looking the arenas up again. */
static WARM void free_unpooled(wrapped_domain *d, void *ptr)
{
    if (ptr == NULL) {
        free_through(d, ptr);
        return;
    }
    free_counted(d, ptr, unpooled_size(ptr), 0);
}

/* free under pymalloc's sizing.  The common free, of an unwatched pymalloc
 * block below the window, has no call but the final one (a tail call), so it
 * saves no registers and sets up no frame; a block outside pymalloc's arenas
 * (NULL, malloc's) is sized without looking the arenas up again, and a watched
 * block or a net crossing the window goes to free_counted. */
static void wrapped_free(void *ctx, void *ptr)
{
    wrapped_domain *d = ctx;
    uintptr_t a = (uintptr_t)ptr;
    const _Atomic uint16_t *span = pymalloc_span(a);
    if (LIKELY(span != NULL)) {
        int64_t size = (int64_t)pymalloc_pool_block_size(a);
        int64_t net = python_net - size;
        if (LIKELY(unwatched_in(span, a)) && LIKELY(!beyond_window(net))) {
            python_net = net;
            d->original.free(d->original.ctx, ptr);
            return;
        }
        free_counted(d, ptr, (size_t)size, 1);
        return;
    }
    free_unpooled(d, ptr);
}

/* free without pymalloc's fast path (small_limit 0: the sizes of its blocks
 * are not read from its pools, or the window is too small for them). */
static void wrapped_free_unpooled(void *ctx, void *ptr)
{
    free_slow(ctx, ptr);
}

/* Blocks of known sizes must read back as expected under the chosen sizing: the
 * layout facts each one relies on, checked on this interpreter.  What went
 * wrong is said in `why` (size bytes), so that a failure seen once in a
 * thousand runs (CI) tells its cause. */
static int sizes_read_back(char *why, size_t size)
{
    static const size_t asked[] = {1, 17, 40, 500, 3000};
    static const size_t pooled_class[] = {16, 32, 48, 512, 0};
    for (size_t i = 0; i < sizeof asked / sizeof asked[0]; i++) {
        void *p = PyObject_Malloc(asked[i]);
        if (p == NULL) {
            return 0;
        }
        int ok;
        size_t got = 0;
        int known = sizing == PYALLOC_POOLS && pymalloc_arenas_find(arenas, (uintptr_t)p);
        if (sizing == PYALLOC_DEBUG_HEADER) {
            got = debug_header_size(p);
            ok = debug_header_intact(p) && got == asked[i];
        } else if (sizing == PYALLOC_POOLS && pooled_class[i] != 0) {
            /* Only pymalloc blocks: a pointer of another allocator must never reach
             * malloc_usable_size (it may crash there).  A block outside the map may
             * lie in the last pool of an arena adopted while attaching, which the
             * map leaves out and the library sizes (as block_size has it sized
             * through malloc_usable_size): on 3.13 the self-check's 40-byte block
             * landed in one, and Python memory went unprofiled. */
            got = known ? pymalloc_pool_block_size((uintptr_t)p) : hooks.python_tail_size(p);
            ok = got == pooled_class[i];
        } else {
            /* malloc's usable size: the request rounded up to the allocator's
             * size class (glibc: 16 bytes; jemalloc and tcmalloc, preloaded
             * by many services: up to a quarter more, 3072 for 3000). */
            int pooled;
            got = block_size(p, &pooled);
            ok = got >= asked[i] && got <= asked[i] + asked[i] / 4 + 64;
        }
        if (!ok) {
            snprintf(why, size, "a block of %zu bytes read back as %zu%s%s", asked[i], got,
                     sizing != PYALLOC_POOLS ? ""
                     : known                 ? " in a known arena"
                                             : " outside the known arenas",
                     sizing == PYALLOC_POOLS && !arenas->tracking ? ", not every arena followed" : "");
        }
        PyObject_Free(p);
        if (!ok) {
            return 0;
        }
    }
    return 1;
}

/* Which allocator Python's "mem" and "object" domains use, by CPython's own
 * name for it (the PYTHONMALLOC values).  The function is internal but exported
 * from 3.8 on; NULL when it is missing or the allocators were replaced (by
 * tracemalloc, another tool). */
static const char *current_allocator_name(void)
{
    const char *(*name)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "_PyMem_GetCurrentAllocatorName");
    return name != NULL ? name() : NULL;
}

static pyalloc_sizing choose_sizing(const char *name, const pymalloc_arena_map *map)
{
    if (name == NULL) {
        /* Replaced by another tool (tracemalloc, another profiler): what its
         * blocks are is unknown, and a block that is not malloc's must never
         * reach malloc_usable_size. */
        return PYALLOC_NOT_SIZED;
    }
    if (strcmp(name, "pymalloc") == 0) {
        return map != NULL ? PYALLOC_POOLS : PYALLOC_NOT_SIZED;
    }
    if (strcmp(name, "malloc") == 0) {
        return PYALLOC_MALLOC;
    }
    size_t n = strlen(name);
    if (n > 6 && strcmp(name + n - 6, "_debug") == 0) {
        return PYALLOC_DEBUG_HEADER;
    }
    return PYALLOC_NOT_SIZED; /* mimalloc: its block sizes cannot be read from outside */
}

pyalloc_sizing pyalloc_install(const memhooks_api *api, int64_t window_bytes, int64_t python_window_bytes)
{
    if (installed) {
        return sizing;
    }
    hooks = *api;
    malloc_sized = api->malloc_sizer();
    if (malloc_sized == NULL) {
        malloc_sized = malloc_usable_size; /* the library's, where malloc's own is not resolved (never by now) */
    }
    window = window_bytes;
    python_window = python_window_bytes;
    window_less_1 = window_bytes - 1;
    window_span = 2 * (uint64_t)window_less_1;
    watched = api->watch_table();
    watched_slots = api->watch_occupied();
    pymalloc_arena_map *map = api->python_arenas();
    if (map != NULL) {
        arenas = map;
    }
    const char *name = current_allocator_name();
    snprintf(allocator_name, sizeof allocator_name, "%s", name != NULL ? name : "unknown");
    sizing = choose_sizing(name, map);
    if (sizing == PYALLOC_NOT_SIZED) {
        snprintf(not_sized_why, sizeof not_sized_why, "%s",
                 name == NULL ? "was replaced by another tool"
                 : strcmp(name, "pymalloc") == 0 ? "(pymalloc) has arenas the memory library could not follow"
                                                 : "does not tell its block sizes");
    } else {
        char what[96];
        if (!sizes_read_back(what, sizeof what)) {
            sizing = PYALLOC_NOT_SIZED;
            snprintf(not_sized_why, sizeof not_sized_why,
                     "(%s): blocks of known sizes did not read back as asked under this process's malloc (%s)",
                     allocator_name, what);
        }
    }
    if (sizing == PYALLOC_NOT_SIZED) {
        /* Counting allocations whose frees cannot be counted would make every
         * Python line look like it keeps all it ever allocated: better none. */
        return sizing;
    }
    /* The fast paths count a block against the net only: it must be under a window. */
    small_limit = sizing == PYALLOC_POOLS && window > 512 ? 512 : 0;
    python_net = 0;
    python_rng = (0x9E3779B97F4A7C15ULL ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&python_net) | 1;
    python_countdown = sample_distance(&python_rng, python_window);
    python_drawn = (uint64_t)python_countdown;
    for (int i = 0; i < 2; i++) {
        PyMem_GetAllocator(domains[i].domain, &domains[i].original);
        PyMemAllocatorEx mine = {&domains[i], wrapped_malloc, wrapped_calloc, wrapped_realloc,
                                 small_limit != 0 ? wrapped_free : wrapped_free_unpooled};
        PyMem_SetAllocator(domains[i].domain, &mine);
    }
    installed = 1;
    return sizing;
}

const char *pyalloc_allocator_name(void)
{
    return allocator_name[0] != '\0' ? allocator_name : "unknown";
}

const char *pyalloc_not_sized_why(void)
{
    return not_sized_why[0] != '\0' ? not_sized_why : "does not tell its block sizes";
}

void pyalloc_uninstall(void)
{
    if (!installed) {
        return;
    }
    for (int i = 1; i >= 0; i--) {
        PyMem_SetAllocator(domains[i].domain, &domains[i].original);
    }
    installed = 0;
}

void pyalloc_save_counts(pyalloc_counts *into)
{
    into->countdown = python_countdown;
    into->rng = python_rng;
    into->drawn = python_drawn;
}

void pyalloc_restore_counts(const pyalloc_counts *from)
{
    python_countdown = from->countdown;
    python_rng = from->rng;
    python_drawn = from->drawn;
}

void pyalloc_own_work_begin(pyalloc_own_work *work)
{
    /* hooks is set from the first start on, and stays: the library never goes
     * away.  Suspending while the library is stopped is harmless. */
    work->thread = hooks.thread != NULL ? hooks.thread() : NULL;
    if (work->thread == NULL) {
        return;
    }
    work->thread->busy++;
    pyalloc_save_counts(&work->counts);
}

void pyalloc_own_work_end(const pyalloc_own_work *work)
{
    if (work->thread == NULL) {
        return;
    }
    pyalloc_restore_counts(&work->counts);
    work->thread->busy--;
}

void pyalloc_own_thread(int own)
{
    memhooks_api api;
    memhooks_thread *self = memhooks_api_find(&api) == 0 ? api.thread() : NULL;
    if (self != NULL) {
        self->busy += own ? 1 : -1; /* the library counts nothing on a thread while busy is raised */
    }
}
