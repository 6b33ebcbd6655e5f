#include "arena.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define ARENA_CHUNK_BYTES ((size_t)1 << 20)

struct arena_chunk {
    arena_chunk *older;
    size_t size; /* bytes mapped for this chunk, header included */
    size_t used;
};

/* Mappings given back, kept for the next region of their size.  A profile
 * started once per test (pytest --pyrometer) releases its tables and chunks at
 * each reset and maps the same sizes again at once: a munmap and an mmap per
 * region, the address space split and merged, some 20 a test (a third of the
 * core's reset, start and stop in perf).  A kept mapping is emptied with
 * MADV_DONTNEED instead, one call that frees its pages (private anonymous
 * memory reads as zeros after it, as fresh mmap pages do), and handed out
 * again as it is.  Callers hold the GIL; the flag only makes a caller that
 * does not go to mmap and munmap as before, never wait. */
#define KEPT_REGIONS 16

static struct {
    void *p;
    size_t size;
} kept[KEPT_REGIONS];
static size_t kept_bytes;
static size_t kept_limit = REGION_KEPT_DEFAULT;
static atomic_flag kept_busy = ATOMIC_FLAG_INIT;

static void *take_kept(size_t size)
{
    void *p = NULL;
    if (atomic_flag_test_and_set_explicit(&kept_busy, memory_order_acquire)) {
        return NULL;
    }
    for (int i = 0; i < KEPT_REGIONS; i++) {
        if (kept[i].p != NULL && kept[i].size == size) {
            p = kept[i].p;
            kept[i].p = NULL;
            kept_bytes -= size;
            break;
        }
    }
    atomic_flag_clear_explicit(&kept_busy, memory_order_release);
    return p;
}

/* 1 when p (already emptied) is kept. */
static int keep(void *p, size_t size)
{
    int stored = 0;
    if (atomic_flag_test_and_set_explicit(&kept_busy, memory_order_acquire)) {
        return 0;
    }
    for (int i = 0; i < KEPT_REGIONS && kept_bytes <= kept_limit && size <= kept_limit - kept_bytes; i++) {
        if (kept[i].p == NULL) {
            kept[i].p = p;
            kept[i].size = size;
            kept_bytes += size;
            stored = 1;
            break;
        }
    }
    atomic_flag_clear_explicit(&kept_busy, memory_order_release);
    return stored;
}

void region_keep(size_t max_bytes)
{
    while (atomic_flag_test_and_set_explicit(&kept_busy, memory_order_acquire)) {
    }
    kept_limit = max_bytes;
    for (int i = 0; i < KEPT_REGIONS && kept_bytes > kept_limit; i++) {
        if (kept[i].p != NULL) {
            munmap(kept[i].p, kept[i].size);
            kept_bytes -= kept[i].size;
            kept[i].p = NULL;
        }
    }
    atomic_flag_clear_explicit(&kept_busy, memory_order_release);
}

void *region_map(size_t size)
{
    void *p = take_kept(size);
    if (p != NULL) {
        return p;
    }
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void region_unmap(void *p, size_t size)
{
    if (p == NULL) {
        return;
    }
    if (size <= kept_limit && madvise(p, size, MADV_DONTNEED) == 0 && keep(p, size)) {
        return;
    }
    munmap(p, size);
}

void arena_init(arena *a)
{
    a->head = NULL;
    a->bytes_mapped = 0;
    memset(a->given_back, 0, sizeof a->given_back);
}

static size_t round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

void *arena_alloc(arena *a, size_t size)
{
    size_t header = round_up(sizeof(arena_chunk), 16);
    if (size > SIZE_MAX / 2) { /* checked before rounding, which wraps near SIZE_MAX */
        return NULL;
    }
    size = round_up(size == 0 ? 1 : size, 16);
    arena_chunk *c = a->head;
    if (c == NULL || c->size - c->used < size) {
        size_t want = header + size;
        want = want < ARENA_CHUNK_BYTES ? ARENA_CHUNK_BYTES : round_up(want, 4096);
        arena_chunk *fresh = region_map(want);
        if (fresh == NULL) {
            return NULL;
        }
        fresh->older = c;
        fresh->size = want;
        fresh->used = header;
        a->head = fresh;
        a->bytes_mapped += want;
        c = fresh;
    }
    void *p = (char *)c + c->used;
    c->used += size;
    return p; /* fresh mmap pages are already zero and never reused */
}

/* The size class of a request: the smallest power of two from 16 that holds it;
 * ARENA_CLASSES when none does. */
static int size_class(size_t size)
{
    int c = 0;
    while (c < ARENA_CLASSES && ((size_t)16 << c) < size) {
        c++;
    }
    return c;
}

void *arena_take(arena *a, size_t size)
{
    int c = size_class(size);
    if (c == ARENA_CLASSES) {
        return NULL;
    }
    size_t block = (size_t)16 << c;
    void *p = a->given_back[c];
    if (p == NULL) {
        return arena_alloc(a, block);
    }
    memcpy(&a->given_back[c], p, sizeof(void *));
    memset(p, 0, block);
    return p;
}

void arena_give(arena *a, void *p, size_t size)
{
    int c = size_class(size);
    if (p == NULL || c == ARENA_CLASSES) {
        return;
    }
    memcpy(p, &a->given_back[c], sizeof(void *));
    a->given_back[c] = p;
}

void arena_release(arena *a)
{
    arena_chunk *c = a->head;
    while (c != NULL) {
        arena_chunk *older = c->older;
        region_unmap(c, c->size);
        c = older;
    }
    a->head = NULL;
    a->bytes_mapped = 0;
    memset(a->given_back, 0, sizeof a->given_back);
}
