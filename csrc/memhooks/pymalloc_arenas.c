/* pymalloc_arenas: which blocks belong to CPython's small-object allocator, and
 * their size, without linking libpython.
 *
 * A Python-domain free needs the size of the block to keep "net bytes" right.
 * Blocks of 512 bytes or less live in pymalloc pools, whose header holds the size
 * class; larger ones come from malloc (malloc_usable_size).  Telling the two
 * apart needs to know where pymalloc's arenas are, for every arena, so the arena
 * allocator is wrapped in this library's constructor -- before the interpreter
 * has made its first arena -- through PyObject_SetArenaAllocator found with
 * dlsym.  Arenas are made and released with the GIL held (or before there are
 * threads), and lookups come from Python-domain frees, also under the GIL.
 *
 * Layout facts (CPython 3.10+ on 64-bit, WITH_PYMALLOC_RADIX_TREE): pools are
 * 16 KiB and aligned to 16 KiB inside an arena; struct pool_header holds
 * `uint szidx` after a union and three pointers; block size = (szidx + 1) * 16.
 * The extension verifies them on the running interpreter (a block of known size
 * class must read back that size) before it relies on them.
 */
#include "pymalloc_arenas.h"

#include <dlfcn.h>
#include <stdint.h>
#include <sys/mman.h>

typedef struct {
    void *ctx;
    void *(*alloc)(void *ctx, size_t size);
    void (*free)(void *ctx, void *ptr, size_t size);
} arena_allocator; /* PyObjectArenaAllocator's layout */

typedef pymalloc_granule_slot granule_slot;

#define GRANULE_BITS PYMALLOC_GRANULE_BITS
/* The arena allocator also serves other memory (3.11's frame data stack takes
 * 16 KiB chunks from it); pymalloc's arenas are 256 KiB or 1 MiB, and no Python
 * object lives in the other mappings, so those are not tracked. */
#define MIN_ARENA ((size_t)1 << GRANULE_BITS)

static arena_allocator original;
static pymalloc_arena_map map; /* see pymalloc_arenas.h */
static size_t used;
static int installed;

static granule_slot *map_slots(size_t n)
{
    void *m = mmap(NULL, n * sizeof(granule_slot), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return m == MAP_FAILED ? NULL : m;
}

static granule_slot *slot_for(uintptr_t granule, int insert)
{
    size_t mask = map.capacity - 1;
    for (size_t n = 0, i = pymalloc_granule_index(granule, map.capacity); n < map.capacity;
         n++, i = (i + 1) & mask) {
        if (map.slots[i].granule == granule + 1) {
            return &map.slots[i];
        }
        if (map.slots[i].granule == 0) {
            if (!insert) {
                return NULL;
            }
            map.slots[i].granule = granule + 1;
            used++;
            return &map.slots[i];
        }
    }
    return NULL;
}

static int grow(void)
{
    size_t bigger = map.capacity * 2;
    granule_slot *fresh = map_slots(bigger);
    if (fresh == NULL) {
        return -1;
    }
    granule_slot *old = map.slots;
    size_t old_capacity = map.capacity;
    map.slots = fresh;
    map.capacity = bigger;
    used = 0;
    for (size_t i = 0; i < old_capacity; i++) {
        if (old[i].granule != 0 && (old[i].base[0] != 0 || old[i].base[1] != 0)) {
            granule_slot *s = slot_for(old[i].granule - 1, 1);
            *s = old[i];
        }
    }
    munmap(old, old_capacity * sizeof(granule_slot));
    return 0;
}

/* Lookups of the arenas still in the table stay right (arenas are forgotten as
 * they go), but a block not found may now be pymalloc's all the same. */
static void stop_tracking(void)
{
    map.tracking = 0;
}

static void remember(uintptr_t base, size_t size)
{
    if (size < MIN_ARENA) {
        return;
    }
    for (uintptr_t g = base >> GRANULE_BITS; g <= (base + size - 1) >> GRANULE_BITS; g++) {
        if ((used + 1) * 2 > map.capacity && grow() != 0) {
            stop_tracking();
            return;
        }
        granule_slot *s = slot_for(g, 1);
        int k = s == NULL ? -1 : s->base[0] == 0 ? 0 : s->base[1] == 0 ? 1 : -1;
        if (k < 0) {
            stop_tracking(); /* cannot record it: stop trusting lookups */
            return;
        }
        s->base[k] = base;
        s->size[k] = size;
    }
}

static void forget(uintptr_t base, size_t size)
{
    for (int i = 0; i < PYMALLOC_RECENT; i++) {
        if (map.recent[i].base == base) {
            map.recent[i].base = 0;
            map.recent[i].size = 0;
        }
    }
    for (uintptr_t g = base >> GRANULE_BITS; g <= (base + size - 1) >> GRANULE_BITS; g++) {
        granule_slot *s = slot_for(g, 0);
        for (int k = 0; s != NULL && k < 2; k++) {
            if (s->base[k] == base) {
                s->base[k] = 0;
                s->size[k] = 0;
            }
        }
    }
}

static void *arena_alloc(void *ctx, size_t size)
{
    (void)ctx;
    void *p = original.alloc(original.ctx, size);
    if (p != NULL && map.tracking) {
        remember((uintptr_t)p, size);
    }
    return p;
}

static void arena_free(void *ctx, void *p, size_t size)
{
    (void)ctx;
    if (p != NULL && installed) {
        forget((uintptr_t)p, size);
    }
    original.free(original.ctx, p, size);
}

void pymalloc_arenas_install(void)
{
    void (*get)(arena_allocator *) = (void (*)(arena_allocator *))dlsym(RTLD_DEFAULT, "PyObject_GetArenaAllocator");
    void (*set)(arena_allocator *) = (void (*)(arena_allocator *))dlsym(RTLD_DEFAULT, "PyObject_SetArenaAllocator");
    if (get == NULL || set == NULL) {
        return; /* not a CPython process (or libpython is loaded later) */
    }
    map.capacity = 1024;
    map.slots = map_slots(map.capacity);
    if (map.slots == NULL) {
        return;
    }
    get(&original);
    if (original.alloc == NULL || original.free == NULL) {
        return;
    }
    installed = 1;
    map.tracking = 1;
    arena_allocator mine = {NULL, arena_alloc, arena_free};
    set(&mine);
}

pymalloc_arena_map *pymalloc_arenas_map(void)
{
    return installed ? &map : NULL;
}
