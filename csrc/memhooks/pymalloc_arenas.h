/* pymalloc_arenas: tells CPython's small-object blocks from malloc blocks, with
 * their size.  See pymalloc_arenas.c. */
#ifndef PYROMETER_PYMALLOC_ARENAS_H
#define PYROMETER_PYMALLOC_ARENAS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Where pymalloc's arenas are: a two-level map over the address space, as
 * CPython's own obmalloc radix tree.  The root has one entry per GiB (1 MiB of
 * virtual memory, touched only where arenas are); a leaf, made on demand, has
 * one entry per 256 KiB granule of that GiB.  An arena (page-aligned, at least a
 * granule long) covers whole granules except at its two ends, so a granule holds
 * at most the tail of one arena and the head of the next: two page counts.  A
 * lookup is two dependent loads and a compare, with no loop, whatever the number
 * of arenas.  Read and changed only with the GIL held (arenas come and go inside
 * pymalloc), so a caller holding the GIL may look a block up itself, inline. */
#define PYMALLOC_PAGE_BITS 12
#define PYMALLOC_GRANULE_BITS 18
#define PYMALLOC_LEAF_BITS 30
#define PYMALLOC_ADDRESS_BITS 47 /* user space on x86-64 and aarch64 (4-level tables) */
#define PYMALLOC_PAGES_PER_GRANULE (1u << (PYMALLOC_GRANULE_BITS - PYMALLOC_PAGE_BITS))
#define PYMALLOC_GRANULES_PER_LEAF ((size_t)1 << (PYMALLOC_LEAF_BITS - PYMALLOC_GRANULE_BITS))
#define PYMALLOC_LEAVES ((size_t)1 << (PYMALLOC_ADDRESS_BITS - PYMALLOC_LEAF_BITS))

/* Pages of the granule in an arena: the first `head` (an arena that ends here,
 * or covers the whole granule: head = PAGES_PER_GRANULE) and the last `tail` (an
 * arena that starts here).  All zero: no arena. */
/* Atomic (plain loads and stores on x86-64 and aarch64 for reads): a block's
 * own arena is found by a thread that does not hold the GIL too (a code
 * object that a native thread's sample names, code_life.c), while another
 * thread adds or removes an arena; the entries of a live block's arena do not
 * change meanwhile, so such a read is right, and no longer a data race. */
typedef struct {
    _Atomic uint8_t head, tail;
} pymalloc_granule;

/* 1 KiB spans: with Python's blocks sampled every 64 KiB, spans of a pool
 * (16 KiB) sent so many of chaos's frees to the watch table's test that the
 * free wrapper took 38.9 M instructions of its 2,048 M under callgrind (21.3 M
 * at a 1 MiB window); with 1 KiB spans, 23.1 M.  Each span costs 2 bytes of a
 * mapping touched only where watched (64 MiB of address space for the 32 GiB
 * region, 2 MiB for each GiB of the map). */
#define PYMALLOC_SPAN_SHIFT 10
#define PYMALLOC_SPANS_PER_LEAF ((size_t)1 << (PYMALLOC_LEAF_BITS - PYMALLOC_SPAN_SHIFT))

/* A leaf: the granules of one GiB, and the watch count of each 1 KiB span of
 * it (as the region's, below) for the blocks of the map's arenas there.  The
 * arenas made before the library was attached are all in the map, and a short
 * program's objects live in them: without the counts, every free there hashed
 * into the watch table (integer arithmetic: 60 instructions a free under
 * callgrind against 27 in the region).  Leaves are never freed while the map
 * is in use, so a count, once raised, is there to be lowered. */
typedef struct {
    pymalloc_granule granules[PYMALLOC_GRANULES_PER_LEAF];
    _Atomic uint16_t span_watches[PYMALLOC_SPANS_PER_LEAF];
} pymalloc_leaf;

typedef struct {
    _Atomic(pymalloc_leaf *) *leaves; /* PYMALLOC_LEAVES entries; atomic, as the granules */
    int tracking;              /* every arena of the process is in the region or the map */
    /* The address range reserved for arenas (pymalloc_arenas.c): an arena made
     * there is not in the map, and any block a caller can hold that lies in the
     * range is in one of them.  region_size 0: no region.  Set in the library's
     * constructor, before the first arena, and never changed. */
    uintptr_t region_base;
    /* The part of the region in service: all of it, until a limit on the
     * address space closes the region (pymalloc_region_close), which keeps only
     * the slots up to the last one that holds an arena. */
    _Atomic uintptr_t region_size;
    unsigned slot_shift;            /* log2 of a slot's bytes */
    size_t slot_count;              /* slots reserved at first: the bits below */
    _Atomic uint64_t *slots_in_use; /* one bit per slot */
    _Atomic int region_closed;      /* no new arena in the region */
    /* For every 1 KiB of the region's reservation (PYMALLOC_SPAN_SHIFT), how
     * many blocks starting there the library watches (hooks.c: raised before a
     * watch is published, lowered once it is taken out; never lower than the
     * truth).  A free of a Python block in the region tests its span's count
     * (one load beside the region test) instead of hashing into the watch
     * table, which it reads only in a span holding a watched block.  NULL
     * without a region. */
    _Atomic uint16_t *span_watches;
    /* The first pools of the lowest and the highest arena adopted while
     * attaching (pymalloc_arenas.c: arenas made before the library came, whose
     * 64th pool the map may leave out); adopted_high 0: none.  Set with the GIL
     * held, before Python's blocks are counted. */
    uintptr_t adopted_low, adopted_high;
} pymalloc_arena_map;

/* pymalloc's pools: 16 KiB, aligned to 16 KiB inside an arena of 1 MiB, which
 * holds 64 of them (63 where the arena does not start on a pool boundary). */
#define PYMALLOC_POOL_BYTES ((uintptr_t)16 * 1024)
#define PYMALLOC_POOLS_PER_ARENA 64

/* Whether a, a live block outside the map, may lie in an adopted arena's 64th
 * pool (pymalloc_adopted_tail_size says whether it does): two compares, so that
 * a block of malloc's, which nearly every block outside the map is, is sized
 * by malloc at once. */
static inline int pymalloc_maybe_adopted_tail(const pymalloc_arena_map *m, uintptr_t a)
{
    uintptr_t first = (a & ~(PYMALLOC_POOL_BYTES - 1)) - (PYMALLOC_POOLS_PER_ARENA - 1) * PYMALLOC_POOL_BYTES;
    return m->adopted_high != 0 && first >= m->adopted_low && first <= m->adopted_high;
}

/* Whether a lies in the part of the region in service: one compare against
 * two values that (but for the region's close) never change. */
static inline int pymalloc_in_region(const pymalloc_arena_map *m, uintptr_t a)
{
    return a - m->region_base < atomic_load_explicit(&m->region_size, memory_order_relaxed);
}

/* The watch count of the span holding a when a lies in one of the map's
 * arenas, else NULL: two dependent loads and a compare, with no loop, whatever
 * the number of arenas.  Right for a live Python block whether or not the GIL
 * is held (the granules say why); for other addresses only with the GIL. */
static inline _Atomic uint16_t *pymalloc_map_span(const pymalloc_arena_map *m, uintptr_t a)
{
    uintptr_t leaf = a >> PYMALLOC_LEAF_BITS;
    pymalloc_leaf *l = leaf < PYMALLOC_LEAVES ? atomic_load_explicit(&m->leaves[leaf], memory_order_acquire) : NULL;
    if (l == NULL) {
        return NULL;
    }
    const pymalloc_granule *g = &l->granules[(a >> PYMALLOC_GRANULE_BITS) & (PYMALLOC_GRANULES_PER_LEAF - 1)];
    unsigned page = (unsigned)(a >> PYMALLOC_PAGE_BITS) & (PYMALLOC_PAGES_PER_GRANULE - 1);
    if (page < g->head || page >= PYMALLOC_PAGES_PER_GRANULE - g->tail) {
        return &l->span_watches[(a >> PYMALLOC_SPAN_SHIFT) & (PYMALLOC_SPANS_PER_LEAF - 1)];
    }
    return NULL;
}

/* The watch count of the span holding a, a block about to be watched: the
 * region's where a lies in it, the map's where a lies in one of its arenas
 * (only for a Python object's block, python: a native block is never in an
 * arena), else NULL.  Python's free tests the same
 * count, found the same way, so a watched block's free always sees its count
 * raised. */
static inline _Atomic uint16_t *pymalloc_span_watches(const pymalloc_arena_map *m, uintptr_t a, int python)
{
    if (pymalloc_in_region(m, a)) {
        return &m->span_watches[(a - m->region_base) >> PYMALLOC_SPAN_SHIFT];
    }
    return python ? pymalloc_map_span(m, a) : NULL;
}

/* Whether address a, a live block of Python's allocators, lies in one of
 * pymalloc's arenas.  Most arenas are in the region, and the map holds the
 * rest. */
static inline int pymalloc_arenas_find(const pymalloc_arena_map *m, uintptr_t a)
{
    return __builtin_expect(pymalloc_in_region(m, a), 1) || pymalloc_map_span(m, a) != NULL;
}

/* The map itself, apart from the interpreter (for tests): 0, or -1 when out of
 * memory.  add fails (-1) too for an arena it cannot represent (not page-aligned,
 * shorter than a granule, beyond the address bits, or overlapping one it has):
 * the caller then stops trusting the map (tracking = 0). */
int pymalloc_map_init(pymalloc_arena_map *m);
int pymalloc_map_add(pymalloc_arena_map *m, uintptr_t base, size_t size);
void pymalloc_map_remove(pymalloc_arena_map *m, uintptr_t base, size_t size);
void pymalloc_map_release(pymalloc_arena_map *m);

/* The size of the pymalloc block at address a, read from its pool's header (the
 * layout facts in pymalloc_arenas.c): a must lie in a pymalloc arena. */
static inline size_t pymalloc_pool_block_size(uintptr_t a)
{
    const unsigned char *pool = (const unsigned char *)(a & ~(PYMALLOC_POOL_BYTES - 1));
    unsigned int szidx = *(const unsigned int *)(pool + 4 * sizeof(void *) + sizeof(unsigned int));
    return ((size_t)szidx + 1) << 4;
}

/* Whether the 48 bytes at header, read from address at (a 16 KiB boundary),
 * are a pymalloc pool's header there (pymalloc_arenas.c: the rules); for tests. */
int pymalloc_header_is_pool(uintptr_t at, const void *header);

/* The region's arena slots, apart from the interpreter (for tests): a region of
 * `slots` slots of `slot_bytes` (a power of two, 1 MiB in the library) reserved
 * into m (region_base, region_size), or -1 when the address space cannot be
 * reserved (m left without a region); an arena of `size` bytes handed out from
 * it, or NULL (the region full, the size over a slot, or the mapping refused);
 * an arena given back (1), or 0 when p is not the region's. */
int pymalloc_region_reserve(pymalloc_arena_map *m, size_t slots, size_t slot_bytes);
void *pymalloc_region_alloc(pymalloc_arena_map *m, size_t size);
int pymalloc_region_free(pymalloc_arena_map *m, void *p, size_t size);
void pymalloc_region_release(pymalloc_arena_map *m);
/* A finite limit on the address space is being set (the program's setrlimit
 * or prlimit, which the library interposes): the region's free slots past the
 * last arena are given back, so that only address space pymalloc uses counts
 * against the limit, and no new arena goes there (they go to the map).  Slots
 * freed below the last arena stay reserved. */
void pymalloc_region_close(pymalloc_arena_map *m);

/* From the library's constructor; does nothing in a process without CPython. */
void pymalloc_arenas_install(void);
/* The same for a library attached to a running interpreter (got.c), with the
 * GIL held: the arenas the interpreter has made are found and put in the map
 * first (pymalloc_arenas.c says how).  Nothing when installed already. */
void pymalloc_arenas_adopt(void);
/* A block at a, outside the map, in the 64th pool place of an arena found so
 * whose 64th pool may exist (pymalloc_arenas.c): 1 and its size when a pool is
 * there, else 0. */
int pymalloc_adopted_tail_size(uintptr_t a, size_t *size);
/* The table, or NULL when it was not installed before the interpreter's first
 * arena.  Its `tracking` turns 0 if an arena cannot be recorded (out of memory, or
 * an arena the map cannot represent). */
pymalloc_arena_map *pymalloc_arenas_map(void);

#endif
