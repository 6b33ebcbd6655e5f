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

typedef struct {
    uintptr_t granule; /* (address >> GRANULE_BITS) + 1; 0 = empty slot */
    uintptr_t base[2]; /* arenas overlapping the granule; 0 = none */
    size_t size[2];
} granule_slot;

#define GRANULE_BITS 18 /* the smallest arena (256 KiB): a granule meets at most two arenas */
/* The arena allocator also serves other memory (3.11's frame data stack takes
 * 16 KiB chunks from it); pymalloc's arenas are 256 KiB or 1 MiB, and no Python
 * object lives in the other mappings, so those are not tracked. */
#define MIN_ARENA ((size_t)1 << GRANULE_BITS)
#define POOL_SIZE ((uintptr_t)16 * 1024)

static arena_allocator original;
/* Open addressing over granules, sized to the arenas in use (grown x2 at half
 * load, tombstones dropped then): a free's lookup touches a small, hot table. */
static granule_slot *slots;
static size_t capacity, used;
static uintptr_t last_base;  /* the arena of the previous lookup: frees cluster */
static size_t last_size;
static int state;            /* 0: not installed, 1: tracking every arena, -1: incomplete */

static granule_slot *map_slots(size_t n)
{
    void *m = mmap(NULL, n * sizeof(granule_slot), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return m == MAP_FAILED ? NULL : m;
}

static size_t slot_index(uintptr_t granule, size_t n)
{
    return (size_t)(granule * 0x9E3779B97F4A7C15ULL >> 32) & (n - 1);
}

static granule_slot *slot_for(uintptr_t granule, int insert)
{
    size_t mask = capacity - 1;
    for (size_t n = 0, i = slot_index(granule, capacity); n < capacity; n++, i = (i + 1) & mask) {
        if (slots[i].granule == granule + 1) {
            return &slots[i];
        }
        if (slots[i].granule == 0) {
            if (!insert) {
                return NULL;
            }
            slots[i].granule = granule + 1;
            used++;
            return &slots[i];
        }
    }
    return NULL;
}

static int grow(void)
{
    size_t bigger = capacity * 2;
    granule_slot *fresh = map_slots(bigger);
    if (fresh == NULL) {
        return -1;
    }
    granule_slot *old = slots;
    size_t old_capacity = capacity;
    slots = fresh;
    capacity = bigger;
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

static void remember(uintptr_t base, size_t size)
{
    if (size < MIN_ARENA) {
        return;
    }
    for (uintptr_t g = base >> GRANULE_BITS; g <= (base + size - 1) >> GRANULE_BITS; g++) {
        if ((used + 1) * 2 > capacity && grow() != 0) {
            state = -1;
            return;
        }
        granule_slot *s = slot_for(g, 1);
        int k = s == NULL ? -1 : s->base[0] == 0 ? 0 : s->base[1] == 0 ? 1 : -1;
        if (k < 0) {
            state = -1; /* cannot record it: stop trusting lookups */
            return;
        }
        s->base[k] = base;
        s->size[k] = size;
    }
}

static void forget(uintptr_t base, size_t size)
{
    if (last_base == base) {
        last_base = 0;
        last_size = 0;
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
    if (p != NULL && state == 1) {
        remember((uintptr_t)p, size);
    }
    return p;
}

static void arena_free(void *ctx, void *p, size_t size)
{
    (void)ctx;
    if (p != NULL && state == 1) {
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
    capacity = 1024;
    slots = map_slots(capacity);
    if (slots == NULL) {
        return;
    }
    get(&original);
    if (original.alloc == NULL || original.free == NULL) {
        return;
    }
    state = 1;
    arena_allocator mine = {NULL, arena_alloc, arena_free};
    set(&mine);
}

size_t pymalloc_arenas_block_size(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    if (a - last_base >= last_size) {
        granule_slot *s = slot_for(a >> GRANULE_BITS, 0);
        int k = 0;
        while (s != NULL && k < 2 && !(s->base[k] != 0 && a - s->base[k] < s->size[k])) {
            k++;
        }
        if (s == NULL || k == 2) {
            return 0;
        }
        last_base = s->base[k];
        last_size = s->size[k];
    }
    const unsigned char *pool = (const unsigned char *)(a & ~(POOL_SIZE - 1));
    unsigned int szidx = *(const unsigned int *)(pool + 4 * sizeof(void *) + sizeof(unsigned int));
    return ((size_t)szidx + 1) << 4;
}

int pymalloc_arenas_tracking(void)
{
    return state == 1;
}
