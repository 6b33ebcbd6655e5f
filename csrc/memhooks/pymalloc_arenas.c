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
 *
 * The arenas themselves come from a region of address space reserved here
 * (inaccessible, no memory committed) and cut into 1 MiB slots, one arena
 * each: an arena is mapped into a free slot when pymalloc asks for one and the
 * slot is made inaccessible again when pymalloc gives it back (the same two
 * system calls as pymalloc's own mmap and munmap).  A block of Python's
 * allocators then lies in an arena when its address lies in the region: one
 * compare in every Python free, where the map above costs two dependent loads
 * that miss the cache when the program's data has pushed the map out (perf on
 * a worker of bench/workloads/multiproc.py: the Python free hook took 5.1% of
 * the samples, most of them on those two loads).  The map stays for the arenas
 * made outside the region: a region that could not be reserved, or that is
 * full.  No region is reserved under a limit on the address space
 * (RLIMIT_AS): the reservation would count against it; a limit the program
 * sets later closes the region first (setrlimit and prlimit, interposed
 * below).  The region shows in the process's virtual size, never in its
 * memory.
 */
#include "pymalloc_arenas.h"
#include "interpose.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/resource.h>

typedef struct {
    void *ctx;
    void *(*alloc)(void *ctx, size_t size);
    void (*free)(void *ctx, void *ptr, size_t size);
} arena_allocator; /* PyObjectArenaAllocator's layout */

#define PAGE ((uintptr_t)1 << PYMALLOC_PAGE_BITS)
#define PAGES PYMALLOC_PAGES_PER_GRANULE

static arena_allocator original;
static pymalloc_arena_map map; /* see pymalloc_arenas.h */
static int installed;

/* The map's memory comes from mmap, never from the hooked malloc. */
static void *map_memory(size_t bytes)
{
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    return m == MAP_FAILED ? NULL : m;
}

int pymalloc_map_init(pymalloc_arena_map *m)
{
    m->region_base = 0;
    atomic_init(&m->region_size, 0);
    m->slot_shift = 0;
    m->slot_count = 0;
    m->span_watches = NULL;
    m->slots_in_use = NULL;
    atomic_init(&m->region_closed, 0);
    m->adopted_low = m->adopted_high = 0;
    m->leaves = map_memory(PYMALLOC_LEAVES * sizeof *m->leaves);
    m->tracking = m->leaves != NULL;
    return m->leaves != NULL ? 0 : -1;
}

void pymalloc_map_release(pymalloc_arena_map *m)
{
    if (m->leaves == NULL) {
        return;
    }
    for (size_t i = 0; i < PYMALLOC_LEAVES; i++) {
        if (m->leaves[i] != NULL) {
            munmap(m->leaves[i], sizeof(pymalloc_leaf));
        }
    }
    munmap(m->leaves, PYMALLOC_LEAVES * sizeof *m->leaves);
    m->leaves = NULL;
    m->tracking = 0;
}

static pymalloc_granule *granule_at(pymalloc_arena_map *m, uintptr_t g, int make)
{
    size_t leaf = g >> (PYMALLOC_LEAF_BITS - PYMALLOC_GRANULE_BITS);
    if (m->leaves[leaf] == NULL) {
        if (!make || (m->leaves[leaf] = map_memory(sizeof(pymalloc_leaf))) == NULL) {
            return NULL;
        }
    }
    return &m->leaves[leaf]->granules[g & (PYMALLOC_GRANULES_PER_LEAF - 1)];
}

/* The pages of granule g that [base, end) covers, as (head, tail) counts; the
 * arena is at least a granule long, so it covers a prefix, a suffix or all. */
static void coverage(uintptr_t g, uintptr_t base, uintptr_t end, unsigned *head, unsigned *tail)
{
    uintptr_t first = g << PYMALLOC_GRANULE_BITS, last = first + ((uintptr_t)PAGES << PYMALLOC_PAGE_BITS);
    *head = *tail = 0;
    if (base <= first) {
        *head = end >= last ? PAGES : (unsigned)((end - first) >> PYMALLOC_PAGE_BITS);
    } else {
        *tail = (unsigned)((last - base) >> PYMALLOC_PAGE_BITS);
    }
}

/* The arena allocator also serves other memory (3.11's frame data stack takes
 * 16 KiB chunks from it); pymalloc's arenas are 256 KiB or 1 MiB, and no Python
 * object lives in the other mappings, so those are not tracked. */
static int is_arena(size_t size)
{
    return size >= ((size_t)1 << PYMALLOC_GRANULE_BITS);
}

int pymalloc_map_add(pymalloc_arena_map *m, uintptr_t base, size_t size)
{
    uintptr_t end = base + size;
    if (m->leaves == NULL || !is_arena(size) || base % PAGE != 0 ||
        size % PAGE != 0 || end < base || (end - 1) >> PYMALLOC_ADDRESS_BITS != 0) {
        return -1;
    }
    /* Checked first, written after: a failure leaves the map as it was. */
    for (int write = 0; write < 2; write++) {
        for (uintptr_t g = base >> PYMALLOC_GRANULE_BITS; g <= (end - 1) >> PYMALLOC_GRANULE_BITS; g++) {
            pymalloc_granule *slot = granule_at(m, g, 1);
            if (slot == NULL) {
                return -1;
            }
            unsigned head, tail;
            coverage(g, base, end, &head, &tail);
            if (!write) {
                if ((head != 0 && slot->head != 0) || (tail != 0 && slot->tail != 0) ||
                    head + slot->tail > PAGES || tail + slot->head > PAGES) {
                    return -1; /* overlaps an arena the map has */
                }
            } else if (head != 0) {
                slot->head = (uint8_t)head;
            } else {
                slot->tail = (uint8_t)tail;
            }
        }
    }
    return 0;
}

void pymalloc_map_remove(pymalloc_arena_map *m, uintptr_t base, size_t size)
{
    uintptr_t end = base + size;
    if (m->leaves == NULL || size == 0 || end < base || (end - 1) >> PYMALLOC_ADDRESS_BITS != 0) {
        return;
    }
    for (uintptr_t g = base >> PYMALLOC_GRANULE_BITS; g <= (end - 1) >> PYMALLOC_GRANULE_BITS; g++) {
        pymalloc_granule *slot = granule_at(m, g, 0);
        unsigned head, tail;
        coverage(g, base, end, &head, &tail);
        if (slot != NULL && head != 0 && slot->head == head) {
            slot->head = 0;
        } else if (slot != NULL && tail != 0 && slot->tail == tail) {
            slot->tail = 0;
        }
    }
}

/* ---- the region -------------------------------------------------------------- */

#define REGION_SLOTS ((size_t)1 << 15)
#define REGION_SLOT_SHIFT 20 /* 1 MiB, pymalloc's arena on 64-bit since 3.10: 32 GiB in all */

int pymalloc_region_reserve(pymalloc_arena_map *m, size_t slots, size_t slot_bytes)
{
    unsigned shift = 0;
    while (((size_t)1 << shift) < slot_bytes) {
        shift++;
    }
    if (slots == 0 || slots % 64 != 0 || ((size_t)1 << shift) != slot_bytes || slot_bytes % PAGE != 0) {
        return -1;
    }
    size_t bytes = slots << shift;
    _Atomic uint64_t *bits = map_memory(slots / 8);
    if (bits == NULL) {
        return -1;
    }
    /* 2 bytes a span: 64 MiB of address space for the 32 GiB region, of which
     * only the pages of spans ever watched are touched.  (A region is at
     * least 64 pages, so it has spans.) */
    size_t watches_bytes = (bytes >> PYMALLOC_SPAN_SHIFT) * sizeof(uint16_t);
    _Atomic uint16_t *watches = map_memory(watches_bytes);
    if (watches == NULL) {
        munmap((void *)bits, slots / 8);
        return -1;
    }
    /* One slot more than needed, to align the region to a slot. */
    void *r = mmap(NULL, bytes + slot_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) {
        munmap((void *)bits, slots / 8);
        munmap((void *)watches, watches_bytes);
        return -1;
    }
    uintptr_t base = ((uintptr_t)r + slot_bytes - 1) & ~(uintptr_t)(slot_bytes - 1);
    if (base != (uintptr_t)r) {
        munmap(r, base - (uintptr_t)r);
    }
    if ((uintptr_t)r + slot_bytes != base) {
        munmap((void *)(base + bytes), (uintptr_t)r + slot_bytes - base);
    }
    m->slots_in_use = bits;
    m->span_watches = watches;
    m->slot_shift = shift;
    m->slot_count = slots;
    m->region_base = base;
    atomic_store(&m->region_size, bytes);
    return 0;
}

void pymalloc_region_release(pymalloc_arena_map *m)
{
    if (m->slot_count == 0) {
        return;
    }
    uintptr_t size = atomic_load(&m->region_size);
    if (size != 0) {
        munmap((void *)m->region_base, size);
    }
    munmap((void *)m->slots_in_use, m->slot_count / 8);
    if (m->span_watches != NULL) {
        munmap((void *)m->span_watches,
               (((uintptr_t)m->slot_count << m->slot_shift) >> PYMALLOC_SPAN_SHIFT) * sizeof(uint16_t));
    }
    m->region_base = 0;
    atomic_store(&m->region_size, 0);
    m->slot_count = 0;
    m->slots_in_use = NULL;
    m->span_watches = NULL;
}

/* Slots are claimed with an atomic or, so that two interpreters with GILs of
 * their own (3.12's isolated subinterpreters) never get the same one.  A slot
 * claimed as the region closes is given up (close reads the slots after it has
 * marked the region closed, and a claim reads the mark after its bit is set:
 * with both sequentially consistent, close sees the claim or the claim sees
 * the mark). */
void *pymalloc_region_alloc(pymalloc_arena_map *m, size_t size)
{
    if (m->slot_count == 0 || atomic_load(&m->region_closed) || size > ((size_t)1 << m->slot_shift)) {
        return NULL;
    }
    size_t words = m->slot_count / 64;
    for (size_t w = 0; w < words; w++) {
        uint64_t used = atomic_load_explicit(&m->slots_in_use[w], memory_order_relaxed);
        while (~used != 0) {
            unsigned bit = (unsigned)__builtin_ctzll(~used);
            uint64_t mask = (uint64_t)1 << bit;
            used = atomic_fetch_or(&m->slots_in_use[w], mask);
            if (used & mask) {
                continue; /* taken meanwhile: look again */
            }
            if (atomic_load(&m->region_closed)) {
                atomic_fetch_and(&m->slots_in_use[w], ~mask);
                return NULL;
            }
            void *at = (void *)(m->region_base + ((w * 64 + bit) << m->slot_shift));
            void *p = mmap(at, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
            if (p == MAP_FAILED) {
                atomic_fetch_and_explicit(&m->slots_in_use[w], ~mask, memory_order_release);
                return NULL; /* out of memory (strict overcommit): as pymalloc's own mmap */
            }
            return p;
        }
    }
    return NULL;
}

int pymalloc_region_free(pymalloc_arena_map *m, void *p, size_t size)
{
    uintptr_t a = (uintptr_t)p;
    if (a - m->region_base >= atomic_load_explicit(&m->region_size, memory_order_relaxed)) {
        return 0;
    }
    size_t slot = (a - m->region_base) >> m->slot_shift;
    /* The slot made inaccessible again (its memory and commit given back), as
     * pymalloc's munmap would.  Should that fail (too many mappings), its pages
     * are dropped and it stays mapped: either way it may be handed out again. */
    if (mmap(p, (size_t)1 << m->slot_shift, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
             -1, 0) == MAP_FAILED) {
        madvise(p, size, MADV_DONTNEED);
    }
    atomic_fetch_and_explicit(&m->slots_in_use[slot / 64], ~((uint64_t)1 << (slot % 64)), memory_order_release);
    return 1;
}

void pymalloc_region_close(pymalloc_arena_map *m)
{
    if (m->slot_count == 0 || atomic_exchange(&m->region_closed, 1)) {
        return;
    }
    size_t kept = 0; /* slots up to the last one in use */
    for (size_t w = 0; w < m->slot_count / 64; w++) {
        uint64_t used = atomic_load(&m->slots_in_use[w]);
        if (used != 0) {
            kept = w * 64 + 64 - (size_t)__builtin_clzll(used);
        }
    }
    uintptr_t size = atomic_load(&m->region_size), keep = (uintptr_t)kept << m->slot_shift;
    /* Smaller first: no block can be found in the part given back, which other
     * mappings may take from here on. */
    atomic_store(&m->region_size, keep);
    if (keep < size) {
        munmap((void *)(m->region_base + keep), size - keep);
    }
}

/* No region under a limit on the address space: 32 GiB reserved would count
 * against it, and the program could run out of address space early. */
static int address_space_unlimited(void)
{
    struct rlimit limit;
    return getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur == RLIM_INFINITY;
}

/* ---- a limit on the address space, set by the program -------------------------- */

/* The program may limit its own address space (resource.setrlimit(RLIMIT_AS,
 * ...), a worker capping its memory) after the region was reserved; the 32 GiB
 * would then count against its limit and its next allocations fail.  So the
 * library interposes the four ways to set a limit, closes the region when one
 * limits the address space, and makes the call itself: glibc's four are each
 * the prlimit64 system call, on 64-bit Linux the same structure either way.
 * No dlsym and no allocation: AddressSanitizer's start-up sets a limit (on
 * core files) before its shadow memory exists, so these functions are also
 * left uninstrumented there (EARLY, interpose.h); only a limit on the
 * address space reaches instrumented code (the close). */

static EARLY int set_limit(pid_t pid, int resource, const struct rlimit *limit, struct rlimit *old)
{
    if (limit != NULL && resource == RLIMIT_AS && limit->rlim_cur != RLIM_INFINITY && installed &&
        (pid == 0 || pid == getpid())) {
        pymalloc_region_close(&map);
    }
    return (int)syscall(SYS_prlimit64, pid, resource, limit, old);
}

/* The four by their symbols' names (asm labels): the build's
 * _FILE_OFFSET_BITS=64 makes the headers' setrlimit and prlimit the 64-bit
 * symbols, and all four must be this library's.  On 64-bit Linux struct rlimit
 * and struct rlimit64 are the same. */
_Static_assert(sizeof(struct rlimit) == 16 && sizeof(rlim_t) == 8, "struct rlimit is struct rlimit64 here");
EXPORT EARLY int limit_set(int resource, const struct rlimit *limit) __asm__("setrlimit");
EXPORT EARLY int limit_set64(int resource, const struct rlimit *limit) __asm__("setrlimit64");
EXPORT EARLY int limit_set_of(pid_t pid, int resource, const struct rlimit *limit, struct rlimit *old)
    __asm__("prlimit");
EXPORT EARLY int limit_set_of64(pid_t pid, int resource, const struct rlimit *limit, struct rlimit *old)
    __asm__("prlimit64");

int limit_set(int resource, const struct rlimit *limit)
{
    return set_limit(0, resource, limit, NULL);
}

int limit_set64(int resource, const struct rlimit *limit)
{
    return set_limit(0, resource, limit, NULL);
}

int limit_set_of(pid_t pid, int resource, const struct rlimit *limit, struct rlimit *old)
{
    return set_limit(pid, resource, limit, old);
}

int limit_set_of64(pid_t pid, int resource, const struct rlimit *limit, struct rlimit *old)
{
    return set_limit(pid, resource, limit, old);
}

/* ---- the arena allocator ------------------------------------------------------ */

static void *arena_alloc(void *ctx, size_t size)
{
    (void)ctx;
    if (is_arena(size)) {
        void *p = pymalloc_region_alloc(&map, size);
        if (p != NULL) {
            return p;
        }
    }
    void *p = original.alloc(original.ctx, size);
    if (p != NULL && map.tracking && is_arena(size) && pymalloc_map_add(&map, (uintptr_t)p, size) != 0) {
        /* Lookups of the arenas already in the map stay right (arenas are
         * forgotten as they go), but a block not found may now be pymalloc's. */
        map.tracking = 0;
    }
    return p;
}

/* ---- arenas made before the library was attached (got.c) ---------------------
 *
 * Attached to a running interpreter, the library has not seen the arenas made
 * so far, and the blocks in them are freed from then on.  They are found from
 * their pools' headers: every anonymous read-write mapping (under 1 TiB) is read (through
 * process_vm_readv, which reports a page another thread unmapped meanwhile
 * instead of faulting) at each 16 KiB boundary, and a header is taken for a
 * pool's only when it is consistent: szidx under 32, maxnextoffset = POOL_SIZE
 * - (szidx + 1) * 16 (what pymalloc's init_pool writes), nextoffset past the
 * header by a whole number of blocks, a count of blocks the pool can hold,
 * and a free list that starts inside the pool or is empty.  The last rules out
 * a copy of a header read elsewhere, as this scan's own buffer holds: a header
 * read into it could lie on a 16 KiB boundary there, and a 1 MiB arena taken
 * there overlapped a real one (the map refused it, and Python memory went
 * unprofiled: CPython 3.13 under jemalloc, one CI run in many).  The buffer
 * is skipped besides, for a full pool's copy (empty free list).
 * pymalloc carves an arena's pools in order from its first 16 KiB boundary and
 * keeps a pool's header once carved, so an arena is a run of consistent headers
 * with the same arenaindex, 16 KiB apart, starting at its first pool F.  An
 * arena is 1 MiB from a page boundary b: it holds 64 pools when b is 16 KiB
 * aligned (F = b), else 63 and a tail shorter than a pool.  A run of 64 is
 * whole; otherwise the map gets F and 63 pools, which the arena holds either
 * way, and the 64th place (F + 63 pools) is told apart when a block there is
 * sized (pymalloc_adopted_tail_size): its header lies inside the arena either
 * way, consistent only once pymalloc carved a 64th pool there.
 * These arenas' entries (F, and whether 64 pools are in the map) are kept in
 * address order until pymalloc gives the arena back. */

#define POOL_BYTES PYMALLOC_POOL_BYTES
#define POOLS_PER_ARENA PYMALLOC_POOLS_PER_ARENA
#define POOL_OVERHEAD 48 /* the header, rounded up to 16 bytes */
/* struct pool_header on 64-bit, as 32-bit words: a union holding the count of
 * blocks in use, three pointers, then these (pymalloc_pool_block_size reads
 * szidx at the same place). */
enum { HEADER_COUNT = 0, HEADER_FREE_BLOCK = 2, HEADER_ARENA = 8, HEADER_SZIDX = 9, HEADER_NEXT = 10, HEADER_MAX_NEXT = 11,
       HEADER_WORDS = 12 };
#define ADOPTED_WHOLE ((uintptr_t)1)
#define ADOPTED_GONE ((uintptr_t)2)

static uintptr_t *adopted; /* F | ADOPTED_WHOLE | ADOPTED_GONE, ascending */
static size_t adopted_count, adopted_capacity;

int pymalloc_header_is_pool(uintptr_t at, const void *header)
{
    const uint32_t *h = header;
    uint32_t szidx = h[HEADER_SZIDX], next = h[HEADER_NEXT], max = h[HEADER_MAX_NEXT];
    if (szidx >= 32) {
        return 0;
    }
    uint32_t size = (szidx + 1) * 16;
    uint64_t free_block;
    memcpy(&free_block, (const unsigned char *)header + HEADER_FREE_BLOCK * 4, sizeof free_block);
    return max == POOL_BYTES - size && next >= POOL_OVERHEAD + size && next <= POOL_BYTES &&
           (next - POOL_OVERHEAD) % size == 0 && h[HEADER_COUNT] <= (POOL_BYTES - POOL_OVERHEAD) / size &&
           (free_block == 0 || free_block - (at + POOL_OVERHEAD) < POOL_BYTES - POOL_OVERHEAD);
}

static int adopt_arena(uintptr_t first, size_t pools)
{
    size_t kept = pools == POOLS_PER_ARENA ? POOLS_PER_ARENA : POOLS_PER_ARENA - 1;
    if (adopted_count == adopted_capacity) {
        size_t capacity = adopted_capacity != 0 ? adopted_capacity * 2 : 512;
        uintptr_t *bigger = map_memory(capacity * sizeof *bigger);
        if (bigger == NULL) {
            return -1;
        }
        if (adopted != NULL) {
            memcpy(bigger, adopted, adopted_count * sizeof *bigger);
            munmap(adopted, adopted_capacity * sizeof *adopted);
        }
        adopted = bigger;
        adopted_capacity = capacity;
    }
    if (pymalloc_map_add(&map, first, kept * POOL_BYTES) != 0) {
        return -1;
    }
    adopted[adopted_count++] = first | (kept == POOLS_PER_ARENA ? ADOPTED_WHOLE : 0);
    if (map.adopted_high == 0) {
        map.adopted_low = first; /* adopted in ascending order */
    }
    map.adopted_high = first;
    return 0;
}

/* The run of consistent headers being followed. */
static struct {
    uintptr_t first, last;
    uint32_t index;
    size_t pools;
    int failed;
} run;

static void end_run(void)
{
    if (run.pools != 0 && adopt_arena(run.first, run.pools) != 0) {
        run.failed = 1;
    }
    run.pools = 0;
}

static void saw_pool(uintptr_t at, const uint32_t *h)
{
    if (!pymalloc_header_is_pool(at, h)) {
        end_run();
        return;
    }
    if (run.pools != 0 && h[HEADER_ARENA] == run.index && at == run.last + POOL_BYTES && run.pools < POOLS_PER_ARENA) {
        run.last = at;
        run.pools++;
        return;
    }
    end_run();
    run.first = run.last = at;
    run.index = h[HEADER_ARENA];
    run.pools = 1;
}

#define BATCH 512
/* A mapping this large is a reservation of address space, not memory: the
 * sanitizers' shadow (AddressSanitizer's is 14 TiB), a runtime's heap.  No arena
 * lies in one (pymalloc's mmap never returns an address inside a mapping), and
 * reading it every 16 KiB would take hours. */
#define RESERVATION ((uintptr_t)1 << 40)

/* The pool boundaries of [start, end), read a batch at a time. */
static void scan_mapping(uintptr_t start, uintptr_t end)
{
    static uint32_t headers[BATCH][HEADER_WORDS];
    static struct iovec local[BATCH], remote[BATCH];
    pid_t self = getpid();
    uintptr_t own = (uintptr_t)headers, own_end = own + sizeof headers;
    if (start < own_end && own < end) { /* the scan's own copies: the parts beside them */
        if (start < own) {
            scan_mapping(start, own);
        }
        end_run();
        start = own_end;
    }
    uintptr_t at = (start + POOL_BYTES - 1) & ~(POOL_BYTES - 1);
    while (at + POOL_OVERHEAD <= end) {
        size_t n = 0;
        for (; n < BATCH && at + POOL_OVERHEAD <= end; n++, at += POOL_BYTES) {
            local[n] = (struct iovec){headers[n], POOL_OVERHEAD};
            remote[n] = (struct iovec){(void *)at, POOL_OVERHEAD};
        }
        size_t done = 0;
        while (done < n) {
            ssize_t got = process_vm_readv(self, &local[done], n - done, &remote[done], n - done, 0);
            if (got < 0 && errno != EFAULT) {
                run.failed = 1; /* refused (a seccomp policy): the arenas cannot be found */
                return;
            }
            size_t whole = got > 0 ? (size_t)got / POOL_OVERHEAD : 0; /* 48 bytes never cross a page */
            for (size_t i = done; i < done + whole; i++) {
                saw_pool((uintptr_t)remote[i].iov_base, headers[i]);
            }
            done += whole;
            if (done < n) {
                end_run(); /* unreadable: gone meanwhile */
                done++;
            }
        }
    }
}

/* Whether a line of /proc/self/maps is an anonymous private read-write mapping
 * (unnamed, or named by prctl: "[anon:...]"); its bounds. */
static int anonymous_mapping(const char *line, uintptr_t *start, uintptr_t *end)
{
    char *rest;
    *start = (uintptr_t)strtoull(line, &rest, 16);
    if (*rest != '-') {
        return 0;
    }
    *end = (uintptr_t)strtoull(rest + 1, &rest, 16);
    if (rest[0] != ' ' || rest[1] != 'r' || rest[2] != 'w' || rest[4] != 'p') {
        return 0;
    }
    rest += 6;
    for (int field = 0; field < 3; field++) { /* offset, device, inode */
        while (*rest == ' ') {
            rest++;
        }
        const char *word = rest;
        while (*rest != ' ' && *rest != '\0') {
            rest++;
        }
        if (field == 2 && !(rest - word == 1 && word[0] == '0')) {
            return 0;
        }
    }
    while (*rest == ' ') {
        rest++;
    }
    return *rest == '\0' || strncmp(rest, "[anon:", 6) == 0;
}

/* Reads /proc/self/maps with read(2) (no stdio: nothing here allocates) and
 * scans its anonymous mappings; -1 when it cannot be read or an arena could not
 * be recorded. */
static int adopt_existing_arenas(void)
{
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    static char buffer[64 * 1024];
    size_t held = 0;
    run.pools = 0;
    run.failed = 0;
    for (;;) {
        ssize_t got = read(fd, buffer + held, sizeof buffer - 1 - held);
        if (got <= 0) {
            break;
        }
        held += (size_t)got;
        buffer[held] = '\0';
        char *line = buffer;
        char *newline;
        while ((newline = strchr(line, '\n')) != NULL) {
            *newline = '\0';
            uintptr_t start, end;
            if (!run.failed && anonymous_mapping(line, &start, &end) && end - start <= RESERVATION) {
                scan_mapping(start, end);
            } else {
                end_run();
            }
            line = newline + 1;
        }
        held = (size_t)(buffer + held - line);
        memmove(buffer, line, held);
    }
    close(fd);
    end_run();
    return run.failed ? -1 : 0;
}

/* The entry of the adopted arena whose first pool is first, or NULL. */
static uintptr_t *adopted_entry(uintptr_t first)
{
    size_t lo = 0, hi = adopted_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uintptr_t f = adopted[mid] & ~(ADOPTED_WHOLE | ADOPTED_GONE);
        if (f == first) {
            return &adopted[mid];
        }
        if (f < first) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return NULL;
}

int pymalloc_adopted_tail_size(uintptr_t a, size_t *size)
{
    uintptr_t pool = a & ~(POOL_BYTES - 1);
    if (!pymalloc_maybe_adopted_tail(&map, a)) {
        return 0; /* malloc's heap, mostly: no search */
    }
    uintptr_t *entry = adopted_entry(pool - (POOLS_PER_ARENA - 1) * POOL_BYTES);
    if (entry == NULL || (*entry & (ADOPTED_WHOLE | ADOPTED_GONE)) != 0) {
        return 0;
    }
    uint32_t h[HEADER_WORDS];
    struct iovec local = {h, sizeof h}, remote = {(void *)pool, sizeof h};
    if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof h || !pymalloc_header_is_pool(pool, h)) {
        return 0;
    }
    *size = ((size_t)h[HEADER_SZIDX] + 1) * 16;
    return 1;
}

static void arena_free(void *ctx, void *p, size_t size)
{
    (void)ctx;
    if (p != NULL && installed && is_arena(size)) {
        if (pymalloc_region_free(&map, p, size)) {
            return;
        }
        uintptr_t first = ((uintptr_t)p + POOL_BYTES - 1) & ~(POOL_BYTES - 1);
        uintptr_t *entry = adopted_count != 0 ? adopted_entry(first) : NULL;
        if (entry != NULL && !(*entry & ADOPTED_GONE)) {
            size_t pools = (*entry & ADOPTED_WHOLE) ? POOLS_PER_ARENA : POOLS_PER_ARENA - 1;
            pymalloc_map_remove(&map, first, pools * POOL_BYTES);
            *entry |= ADOPTED_GONE;
        } else {
            pymalloc_map_remove(&map, (uintptr_t)p, size);
        }
    }
    original.free(original.ctx, p, size);
}

/* Wraps the arena allocator; adopt: the interpreter has made arenas already
 * (attached), which are looked for first. */
static void install(int adopt)
{
    void (*get)(arena_allocator *) = (void (*)(arena_allocator *))dlsym(RTLD_DEFAULT, "PyObject_GetArenaAllocator");
    void (*set)(arena_allocator *) = (void (*)(arena_allocator *))dlsym(RTLD_DEFAULT, "PyObject_SetArenaAllocator");
    if (get == NULL || set == NULL) {
        return; /* not a CPython process (or libpython is loaded later) */
    }
    get(&original);
    if (original.alloc == NULL || original.free == NULL || pymalloc_map_init(&map) != 0) {
        return;
    }
    if (address_space_unlimited()) {
        pymalloc_region_reserve(&map, REGION_SLOTS, (size_t)1 << REGION_SLOT_SHIFT); /* else the map alone */
    }
    if (adopt && adopt_existing_arenas() != 0) {
        map.tracking = 0; /* a block outside the map may be pymalloc's: Python's frees are not sized */
    }
    installed = 1;
    arena_allocator mine = {NULL, arena_alloc, arena_free};
    set(&mine);
}

void pymalloc_arenas_install(void)
{
    install(0);
}

void pymalloc_arenas_adopt(void)
{
    if (!installed) {
        install(1);
    }
}

pymalloc_arena_map *pymalloc_arenas_map(void)
{
    return installed ? &map : NULL;
}
