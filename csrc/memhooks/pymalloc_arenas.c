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
    uintptr_t base[2];
    size_t size[2];
} granule_slot;

#define GRANULE_BITS 18 /* the smallest arena (256 KiB): a granule meets at most two arenas */
#define SLOTS ((size_t)1 << 18)
#define POOL_SIZE ((uintptr_t)16 * 1024)

static arena_allocator original;
static granule_slot *slots; /* mmap'ed: SLOTS entries */
static int state;           /* 0: not installed, 1: tracking every arena, -1: incomplete */

static granule_slot *slot_for(uintptr_t granule, int insert)
{
    size_t i = (size_t)(granule * 0x9E3779B97F4A7C15ULL >> 40) & (SLOTS - 1);
    for (size_t n = 0; n < SLOTS; n++, i = (i + 1) & (SLOTS - 1)) {
        if (slots[i].granule == granule + 1) {
            return &slots[i];
        }
        if (slots[i].granule == 0) {
            if (!insert) {
                return NULL;
            }
            slots[i].granule = granule + 1;
            return &slots[i];
        }
    }
    return NULL;
}

static void remember(uintptr_t base, size_t size)
{
    for (uintptr_t g = base >> GRANULE_BITS; g <= (base + size - 1) >> GRANULE_BITS; g++) {
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
    void *m = mmap(NULL, SLOTS * sizeof(granule_slot), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        return;
    }
    slots = m;
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
    granule_slot *s = slot_for(a >> GRANULE_BITS, 0);
    for (int k = 0; s != NULL && k < 2; k++) {
        if (s->base[k] != 0 && a >= s->base[k] && a < s->base[k] + s->size[k]) {
            const unsigned char *pool = (const unsigned char *)(a & ~(POOL_SIZE - 1));
            unsigned int szidx = *(const unsigned int *)(pool + 4 * sizeof(void *) + sizeof(unsigned int));
            return ((size_t)szidx + 1) << 4;
        }
    }
    return 0;
}

int pymalloc_arenas_tracking(void)
{
    return state == 1;
}
