/* pymalloc_arenas: tells CPython's small-object blocks from malloc blocks, with
 * their size.  See pymalloc_arenas.c. */
#ifndef PYROMETER_PYMALLOC_ARENAS_H
#define PYROMETER_PYMALLOC_ARENAS_H

#include <stddef.h>
#include <stdint.h>

/* Where pymalloc's arenas are: open addressing over 256 KiB granules (a granule
 * meets at most two arenas), grown x2 at half load.  Read and changed only with
 * the GIL held (arenas come and go inside pymalloc), so a caller holding the GIL
 * may look a block up itself, inline (pymalloc_arenas_find). */
#define PYMALLOC_GRANULE_BITS 18

typedef struct {
    uintptr_t granule; /* (address >> GRANULE_BITS) + 1; 0 = empty slot */
    uintptr_t base[2]; /* arenas overlapping the granule; 0 = none */
    size_t size[2];
} pymalloc_granule_slot;

/* Recently found arenas, direct-mapped by granule: frees cluster in a few arenas. */
#define PYMALLOC_RECENT 16

typedef struct {
    uintptr_t base;
    size_t size; /* 0: none */
} pymalloc_recent_arena;

typedef struct {
    pymalloc_recent_arena recent[PYMALLOC_RECENT];
    pymalloc_granule_slot *slots;
    size_t capacity;     /* a power of two */
    int tracking;        /* every arena of the process is in the table */
} pymalloc_arena_map;

static inline size_t pymalloc_granule_index(uintptr_t granule, size_t capacity)
{
    return (size_t)(granule * 0x9E3779B97F4A7C15ULL >> 32) & (capacity - 1);
}

/* Whether address a lies in one of pymalloc's arenas (which becomes the last). */
static inline int pymalloc_arenas_find(pymalloc_arena_map *m, uintptr_t a)
{
    pymalloc_recent_arena *r = &m->recent[(a >> PYMALLOC_GRANULE_BITS) & (PYMALLOC_RECENT - 1)];
    if (a - r->base < r->size) {
        return 1;
    }
    uintptr_t key = (a >> PYMALLOC_GRANULE_BITS) + 1;
    size_t mask = m->capacity - 1;
    for (size_t n = 0, i = pymalloc_granule_index(key - 1, m->capacity); n < m->capacity;
         n++, i = (i + 1) & mask) {
        const pymalloc_granule_slot *s = &m->slots[i];
        if (s->granule == key) {
            for (int k = 0; k < 2; k++) {
                if (s->base[k] != 0 && a - s->base[k] < s->size[k]) {
                    r->base = s->base[k];
                    r->size = s->size[k];
                    return 1;
                }
            }
            return 0;
        }
        if (s->granule == 0) {
            return 0;
        }
    }
    return 0;
}

/* The size of the pymalloc block at address a, read from its pool's header (the
 * layout facts in pymalloc_arenas.c): a must lie in a pymalloc arena. */
static inline size_t pymalloc_pool_block_size(uintptr_t a)
{
    const unsigned char *pool = (const unsigned char *)(a & ~((uintptr_t)16 * 1024 - 1));
    unsigned int szidx = *(const unsigned int *)(pool + 4 * sizeof(void *) + sizeof(unsigned int));
    return ((size_t)szidx + 1) << 4;
}

/* From the library's constructor; does nothing in a process without CPython. */
void pymalloc_arenas_install(void);
/* The table, or NULL when it was not installed before the interpreter's first
 * arena.  Its `tracking` turns 0 if it runs out of room. */
pymalloc_arena_map *pymalloc_arenas_map(void);

#endif
