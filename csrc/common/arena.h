/* arena: bump allocation of profiler-internal memory straight from mmap.
 *
 * Why not malloc: the memory profiler interposes malloc, and the profiler's own
 * bookkeeping must never be seen by (or recurse into) the hooks that measure the
 * user's program.  Everything an arena hands out lives until arena_release().
 */
#ifndef PYROMETER_ARENA_H
#define PYROMETER_ARENA_H

#include <stddef.h>

typedef struct arena_chunk arena_chunk;

typedef struct {
    arena_chunk *head;   /* chunk being filled; older chunks are linked behind it */
    size_t bytes_mapped; /* total mapped, for the profiler's own footprint report */
} arena;

void arena_init(arena *a);
/* Zeroed memory aligned to 16 bytes, or NULL when the system refuses memory. */
void *arena_alloc(arena *a, size_t size);
void arena_release(arena *a);

/* Whole mappings for data that is replaced as a unit (hash table slots). */
void *region_map(size_t size);
void region_unmap(void *p, size_t size);

#endif
