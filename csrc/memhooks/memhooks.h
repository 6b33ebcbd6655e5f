/* memhooks: the preloaded library (libpyrometer_memhooks.so) that measures the
 * program's memory and copy traffic.  Its public face, used by the extension
 * module through dlsym so that the library never links libpython.
 *
 * Allocations are sampled by their bytes, unbiased per allocation site: every
 * thread counts down, in thread-local memory, the bytes it allocates with malloc
 * and friends, from a random distance of mean `window` (a renewal process over
 * the bytes allocated, see next_distance in hooks.c); the allocation that
 * reaches zero is a sample, weighing `window` bytes per crossing, and a block of
 * a window or more is always a sample, weighing its own size.  So each site is
 * sampled in proportion to the bytes it allocates, whatever the other sites do.
 * Each sampled block is watched until it is freed (the sample function returns
 * a token; freed() gets it back, with the sample's weight): that gives per site
 * the bytes allocated, freed and still live.  Sampling the *net* volume instead
 * (this library's earlier scheme, and Scalene's) charged the growth to whichever
 * line happened to cross the threshold: a small kept buffer beside a big freed
 * temporary was reported backwards.
 *
 * The footprint (the process's live heap) is counted separately and exactly, to
 * within one window per thread: each thread's net bytes since it last reported
 * are added to a process-wide counter when they pass +window or -window.  Copies
 * (memcpy/memmove) are sampled by volume: every copy_window bytes copied.
 *
 * Python's own allocators are counted by the extension (csrc/memory/pyalloc.c),
 * which hands its samples over with pyrometer_memhooks_sample_python.
 */
#ifndef PYROMETER_MEMHOOKS_H
#define PYROMETER_MEMHOOKS_H

#include <stddef.h>
#include <stdint.h>

enum memhooks_kind { MEMHOOKS_ALLOC = 1, MEMHOOKS_FREE = 2, MEMHOOKS_COPY = 3 };

/* Per-thread counters.  The Python allocator wrapper raises python_depth around
 * calls into Python's own allocators that may reach malloc, so that what those
 * pass on to malloc is not counted a second time as native. */
typedef struct {
    int64_t net;        /* bytes malloc'd - freed, not yet added to the footprint */
    int64_t countdown;  /* bytes to allocate until the next allocation sample */
    uint64_t rng;       /* the thread's random state; 0: not drawn yet */
    uint64_t copied;    /* bytes copied since the last copy sample */
    int busy;           /* > 0 inside the profiler's own code: nothing is counted */
    int python_depth;   /* > 0 inside a Python allocator call */
} memhooks_thread;

/* A sample on the calling thread.  ALLOC: bytes is the sample's weight (the
 * bytes it stands for), python_bytes the part through Python's allocators,
 * address the sampled block; the returned token, when not zero, makes the
 * library watch that block: freeing it calls freed(token, 0, bytes).  COPY:
 * bytes copied since the last copy sample.  (No sample is taken of frees: a
 * sampled block's free is seen through its watch.) */
typedef uintptr_t (*memhooks_sample_fn)(int kind, int64_t bytes, int64_t python_bytes, void *address);
/* The watched block of a sample was freed (evicted = 0), or is no longer watched
 * because a newer sample took its slot (evicted = 1: its fate is unknown);
 * bytes: the sample's weight; born: what pyrometer_memhooks_sample_python was
 * given for the block (0 for any other sample), handed back at its free. */
typedef void (*memhooks_freed_fn)(uintptr_t token, int evicted, int64_t bytes, uint64_t born);

typedef struct {
    int64_t window;      /* mean bytes allocated between samples; the footprint's step */
    int64_t copy_window; /* bytes copied between samples */
    memhooks_sample_fn sample;
    memhooks_freed_fn freed;
} memhooks_config;

/* Exported with default visibility; looked up by name with dlsym, in the global
 * scope (preloaded) or through the handle dlopen gave (attached). */
/* The library loaded into a running process with dlopen (RTLD_LOCAL) instead of
 * preloaded: own_handle is what dlopen returned.  Called with the GIL held (the
 * interpreter's arenas are read, pymalloc_arenas.c), before counting starts;
 * from then on every loaded object's calls reach the library (got.c).  0, or -1
 * when it could not be attached.  Nothing to do (0) when preloaded. */
int pyrometer_memhooks_attach(void *own_handle);
/* Undoes pyrometer_memhooks_attach (counting stopped first): every object's
 * calls reach their functions again as before, the library stays loaded and
 * its arena allocator wrapped (pymalloc_arenas.c), so that attaching again
 * needs no new search of the arenas.  0, or -1 when a slot could not be put
 * back.  Nothing to do (0) when preloaded. */
int pyrometer_memhooks_detach(void);
int pyrometer_memhooks_start(const memhooks_config *config);
void pyrometer_memhooks_stop(void);
memhooks_thread *pyrometer_memhooks_thread(void);
/* The watch table of sampled allocations, for callers that count Python blocks
 * themselves: a free of p needs pyrometer_memhooks_unwatch(p) only when
 * memhooks_is_watched(occupied, table, p), which keeps the common free to one
 * load from a 4 KiB map of the occupied slots.  An address hashes to a bucket
 * of two slots side by side (their bits are in one word of the map): it may be
 * watched in either. */
/* 32,768 slots: Python's blocks are sampled every 64 KiB (mem_profile.c), so a
 * program keeping 1 GiB of small objects has some 16,000 samples live, which
 * filled the 16,384 slots of before (a full bucket evicts: the evicted block's
 * bytes stay live, whatever becomes of it). */
#define MEMHOOKS_WATCH_BITS 15
#define MEMHOOKS_WATCH_SLOTS (1u << MEMHOOKS_WATCH_BITS)
/* The first slot of address's bucket (even). */
static inline size_t memhooks_watch_slot(uintptr_t address)
{
    return (size_t)((address >> 4) * 0x9E3779B97F4A7C15ULL >> (64 - MEMHOOKS_WATCH_BITS)) & ~(size_t)1;
}
static inline int memhooks_slot_occupied(const volatile uint64_t *occupied, size_t slot)
{
    return (int)((occupied[slot / 64] >> (slot % 64)) & 1);
}
/* The bucket's two bits: 1 for its first slot, 2 for its second. */
static inline unsigned memhooks_bucket_occupied(const volatile uint64_t *occupied, size_t slot)
{
    return (unsigned)((occupied[slot / 64] >> (slot % 64)) & 3);
}
static inline int memhooks_is_watched(const volatile uint64_t *occupied, const volatile uintptr_t *table,
                                      uintptr_t address)
{
    size_t slot = memhooks_watch_slot(address);
    unsigned bits = memhooks_bucket_occupied(occupied, slot);
    return __builtin_expect(bits != 0, 0) &&
           (((bits & 1) && table[slot] == address) || ((bits & 2) && table[slot + 1] == address));
}
/* malloc's own malloc_usable_size (the one this process's malloc came with,
 * preloaded or not), called without the library's checks: for blocks known to
 * be malloc's, allocated after the library resolved it.  NULL before. */
typedef size_t (*memhooks_size_fn)(void *);
memhooks_size_fn pyrometer_memhooks_malloc_sizer(void);
const volatile uintptr_t *pyrometer_memhooks_watch_table(void);
const volatile uint64_t *pyrometer_memhooks_watch_occupied(void);
void pyrometer_memhooks_unwatch(void *address);
/* An allocation sample of Python's allocators, taken now on the calling thread:
 * bytes is its weight (> 0), address the sampled block (watched if the sample
 * function asks).  Nothing happens while counting is off or suspended on this
 * thread (inside the sample function).  With the GIL held; born is never 0. */
void pyrometer_memhooks_sample_python(int64_t bytes, void *address, uint64_t born);
/* Changes the token of a watched block from `from` to `to`, atomically with its
 * free: 1 when done, 0 when the block is no longer watched with `from` (freed, or
 * evicted).  For samples whose owner is known only after they were taken. */
int pyrometer_memhooks_retoken(void *address, uintptr_t from, uintptr_t to);
/* Watches address under token, with no weight, as a sample's block is watched:
 * its free (or its eviction by a newer sample) is told to the freed function.
 * Callable from inside the sample function.  For objects that samples name, to
 * know whether they are still alive when the samples are charged.  It never
 * evicts a sampled block: where the slot is taken, token is told "evicted" at
 * once.  address is a live Python object's block (it may lie in pymalloc's
 * arenas: their watch counts are raised). */
void pyrometer_memhooks_watch(void *address, uintptr_t token);
/* Whether the block at address is watched under token now (a racy read: a slot
 * being changed reads as not watched). */
int pyrometer_memhooks_is_watched(void *address, uintptr_t token);
/* Python's net bytes since it last reported, added to the footprint. */
void pyrometer_memhooks_footprint_add(int64_t bytes);
/* malloc_usable_size that also knows the library's bootstrap blocks. */
size_t pyrometer_memhooks_usable_size(void *p);
/* The size class of a pymalloc block in the last pool of an arena adopted
 * while attaching (pymalloc_arenas.c: an arena whose pools were not all carved
 * when it was found is recorded without its last pool, which may lie past its
 * end), read from that pool's header; 0 for any other block. */
size_t pyrometer_memhooks_python_tail_size(void *p);
/* The table of pymalloc's arenas (a pymalloc_arena_map, see pymalloc_arenas.h),
 * for a caller holding the GIL to find a block's size itself; NULL when not every
 * arena is known. */
void *pyrometer_memhooks_python_arenas(void);
/* The footprint: net bytes allocated since counting started, to within one
 * window per thread (and one for Python's allocators). */
int64_t pyrometer_memhooks_footprint(void);

#endif
