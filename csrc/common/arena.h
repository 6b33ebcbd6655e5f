/* arena: bump allocation of profiler-internal memory straight from mmap.
 *
 * Why not malloc: the memory profiler interposes malloc, and the profiler's own
 * bookkeeping must never be seen by (or recurse into) the hooks that measure the
 * user's program.  What arena_alloc hands out lives until arena_release(); what
 * arena_take hands out may be given back (arena_give) and is reused for blocks
 * of its size class, so that data which comes and goes with the program's
 * objects takes what the live ones need, not what all of them ever needed.
 */
#ifndef PYROMETER_ARENA_H
#define PYROMETER_ARENA_H

#include <stddef.h>

typedef struct arena_chunk arena_chunk;

#define ARENA_CLASSES 40 /* size classes 16 B, 32 B, ... 2^43 B */

typedef struct {
    arena_chunk *head;   /* chunk being filled; older chunks are linked behind it */
    size_t bytes_mapped; /* total mapped, for the profiler's own footprint report */
    void *given_back[ARENA_CLASSES]; /* per size class, a list through each block's first word */
} arena;

void arena_init(arena *a);
/* Zeroed memory aligned to 16 bytes, or NULL when the system refuses memory. */
void *arena_alloc(arena *a, size_t size);
/* Zeroed memory of at least size bytes (a power of two from 16), reused from
 * blocks given back; NULL when the system refuses memory. */
void *arena_take(arena *a, size_t size);
/* Gives back a block from arena_take of the same size, for reuse. */
void arena_give(arena *a, void *p, size_t size);
void arena_release(arena *a);

/* Whole mappings for data that is replaced as a unit (hash table slots, the
 * arenas' chunks): zeroed, page-aligned memory, or NULL when the system
 * refuses it.  A region given back is kept for the next region_map of the
 * same size, emptied of its pages (arena.c says why), up to a limit on the
 * bytes kept: REGION_KEPT_DEFAULT, or what region_keep sets (0: none kept,
 * and those kept are unmapped; the C unit tests count mappings so). */
#define REGION_KEPT_DEFAULT ((size_t)8 << 20)
void *region_map(size_t size);
void region_unmap(void *p, size_t size);
void region_keep(size_t max_bytes);

#endif
