/* memhooks: the preloaded library (libpyrometer_memhooks.so) that measures the
 * program's memory and copy traffic.  Its public face, used by the extension
 * module through dlsym so that the library never links libpython.
 *
 * Every thread counts, in thread-local memory, the bytes it allocated with malloc
 * and friends minus the bytes it freed since its last sample ("net"), and the
 * bytes it copied with memcpy/memmove.  When net crosses +window or -window, or
 * copies cross copy_window, the thread calls the registered sample function (on
 * itself, with counting suspended).  Sampling by volume keeps large allocations
 * exact and makes the cost proportional to the bytes that matter.
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
    int64_t net;        /* bytes malloc'd - freed since the last sample */
    uint64_t copied;    /* bytes copied since the last copy sample */
    int busy;           /* > 0 inside the profiler's own code: nothing is counted */
    int python_depth;   /* > 0 inside a Python allocator call */
} memhooks_thread;

/* A sample on the calling thread.  bytes: the volume that crossed the window
 * (positive); python_bytes: the part through Python's allocators; address: the
 * allocation that crossed it (ALLOC only).  The returned token, when not zero,
 * makes the library watch that address: freeing it calls freed(token). */
typedef uintptr_t (*memhooks_sample_fn)(int kind, int64_t bytes, int64_t python_bytes, void *address);
/* The watched allocation of a sample was freed (evicted = 0), or is no longer
 * watched because a newer sample took its slot (evicted = 1). */
typedef void (*memhooks_freed_fn)(uintptr_t token, int evicted);

typedef struct {
    int64_t window;      /* bytes of net allocation between samples */
    int64_t copy_window; /* bytes copied between samples */
    memhooks_sample_fn sample;
    memhooks_freed_fn freed;
} memhooks_config;

/* Exported with default visibility; looked up by name with dlsym(RTLD_DEFAULT). */
int pyrometer_memhooks_start(const memhooks_config *config);
void pyrometer_memhooks_stop(void);
memhooks_thread *pyrometer_memhooks_thread(void);
/* The watch table of sampled allocations, for callers that count Python blocks
 * themselves: a free of p needs pyrometer_memhooks_unwatch(p) only when
 * table[memhooks_watch_slot(p)] == p, which keeps the common free to one load. */
#define MEMHOOKS_WATCH_SLOTS 4096
static inline size_t memhooks_watch_slot(uintptr_t address)
{
    return (size_t)((address >> 4) * 0x9E3779B97F4A7C15ULL >> 52) & (MEMHOOKS_WATCH_SLOTS - 1);
}
const volatile uintptr_t *pyrometer_memhooks_watch_table(void);
void pyrometer_memhooks_unwatch(void *address);
/* A sample of Python's allocators, taken now on the calling thread: bytes is the
 * net volume allocated (>0; address: the block that crossed the window, watched
 * if the sample function asks) or freed (<0).  Nothing happens while counting is
 * off or suspended on this thread (inside the sample function). */
void pyrometer_memhooks_sample_python(int64_t bytes, void *address);
/* malloc_usable_size that also knows the library's bootstrap blocks. */
size_t pyrometer_memhooks_usable_size(void *p);
/* The size of a block from Python's object or memory allocators (a pymalloc size
 * class, or malloc's usable size); 0 when it cannot tell (pymalloc's arenas not
 * all known).  Caller holds the GIL. */
size_t pyrometer_memhooks_python_block_size(void *p);
/* The table of pymalloc's arenas (a pymalloc_arena_map, see pymalloc_arenas.h),
 * for a caller holding the GIL to find a block's size itself; NULL when not every
 * arena is known. */
void *pyrometer_memhooks_python_arenas(void);
/* Net bytes of all samples so far: the footprint, to within one window per thread. */
int64_t pyrometer_memhooks_footprint(void);

#endif
