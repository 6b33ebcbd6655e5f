/* pymalloc_map: where pymalloc's arenas are.  Every address of an added arena is
 * found, no address outside one is, including the pages beside an arena in a
 * granule it shares with another; removing an arena forgets exactly it; arenas
 * the map cannot represent are refused without changing it. */
#include "unit.h"
#include "memhooks/pymalloc_arenas.h"

#include <stdint.h>

#define KiB ((uintptr_t)1 << 10)
#define MiB ((uintptr_t)1 << 20)
#define GiB ((uintptr_t)1 << 30)

/* Addresses only: nothing is mapped there, the map never touches them. */
static const uintptr_t BASE = 0x7f0000000000ULL;

static int found(const pymalloc_arena_map *m, uintptr_t a)
{
    return pymalloc_arenas_find(m, a);
}

/* Every page of [lo, hi), at its first and last byte, is (expect = 1) or is not
 * (expect = 0) in an arena. */
static void check_span(const pymalloc_arena_map *m, uintptr_t lo, uintptr_t hi, int expect)
{
    for (uintptr_t a = lo; a < hi; a += 4 * KiB) {
        CHECK_EQ(found(m, a), expect);
        CHECK_EQ(found(m, a + 4 * KiB - 1), expect);
    }
}

static void map_finds_exactly_the_arenas(void)
{
    pymalloc_arena_map m;
    REQUIRE(pymalloc_map_init(&m) == 0);
    /* Two 1 MiB arenas not aligned to granules, sharing one granule, with a gap
     * of three pages between them; one aligned 256 KiB arena elsewhere. */
    uintptr_t a = BASE + 40 * KiB, b = a + MiB + 12 * KiB, c = BASE + 3 * GiB;
    REQUIRE(pymalloc_map_add(&m, a, MiB) == 0);
    REQUIRE(pymalloc_map_add(&m, b, MiB) == 0);
    REQUIRE(pymalloc_map_add(&m, c, 256 * KiB) == 0);
    check_span(&m, BASE, a, 0);
    check_span(&m, a, a + MiB, 1);
    check_span(&m, a + MiB, b, 0);
    check_span(&m, b, b + MiB, 1);
    check_span(&m, b + MiB, b + 2 * MiB, 0);
    check_span(&m, c - 256 * KiB, c, 0);
    check_span(&m, c, c + 256 * KiB, 1);
    check_span(&m, c + 256 * KiB, c + MiB, 0);
    CHECK_EQ(found(&m, 0), 0);
    CHECK_EQ(found(&m, UINTPTR_MAX), 0);

    /* Removing one arena of a shared granule leaves the other found. */
    pymalloc_map_remove(&m, a, MiB);
    check_span(&m, a, a + MiB, 0);
    check_span(&m, b, b + MiB, 1);
    REQUIRE(pymalloc_map_add(&m, a, MiB) == 0);
    check_span(&m, a, a + MiB, 1);
    pymalloc_map_release(&m);
}

static void map_refuses_what_it_cannot_represent(void)
{
    pymalloc_arena_map m;
    REQUIRE(pymalloc_map_init(&m) == 0);
    uintptr_t a = BASE + 64 * KiB;
    REQUIRE(pymalloc_map_add(&m, a, MiB) == 0);
    CHECK_EQ(pymalloc_map_add(&m, a + 512 * KiB, MiB), -1);      /* overlaps a */
    CHECK_EQ(pymalloc_map_add(&m, a - 4 * KiB, MiB), -1);        /* overlaps a's first page */
    CHECK_EQ(pymalloc_map_add(&m, BASE + 8 * MiB + 1, MiB), -1); /* not page-aligned */
    CHECK_EQ(pymalloc_map_add(&m, BASE + 8 * MiB, 16 * KiB), -1); /* shorter than a granule */
    CHECK_EQ(pymalloc_map_add(&m, (uintptr_t)1 << 47, MiB), -1); /* beyond the address bits */
    /* The refusals changed nothing. */
    check_span(&m, a - 256 * KiB, a, 0);
    check_span(&m, a, a + MiB, 1);
    check_span(&m, a + MiB, a + 2 * MiB, 0);
    check_span(&m, BASE + 8 * MiB, BASE + 9 * MiB, 0);
    pymalloc_map_release(&m);
}

static void map_handles_many_arenas(void)
{
    /* 4096 arenas of 1 MiB, back to back over 4 GiB (five leaves), then every
     * other one removed. */
    pymalloc_arena_map m;
    REQUIRE(pymalloc_map_init(&m) == 0);
    uintptr_t start = BASE + 3 * GiB + 28 * KiB;
    for (uintptr_t i = 0; i < 4096; i++) {
        REQUIRE(pymalloc_map_add(&m, start + i * MiB, MiB) == 0);
    }
    for (uintptr_t i = 0; i < 4096; i += 2) {
        pymalloc_map_remove(&m, start + i * MiB, MiB);
    }
    for (uintptr_t i = 0; i < 4096; i++) {
        uintptr_t lo = start + i * MiB;
        CHECK_EQ(found(&m, lo), (int)(i % 2));
        CHECK_EQ(found(&m, lo + MiB / 2), (int)(i % 2));
        CHECK_EQ(found(&m, lo + MiB - 1), (int)(i % 2));
    }
    CHECK_EQ(found(&m, start - 1), 0);
    CHECK_EQ(found(&m, start + 4096 * MiB), 0);
    pymalloc_map_release(&m);
}

/* Arenas from a reserved region: each is writable memory in a slot of its own,
 * found without the map; a full region refuses, a slot given back is handed out
 * again (inaccessible meanwhile), and the map still finds what was added
 * outside the region. */
static void region_hands_out_and_takes_back_arenas(void)
{
    pymalloc_arena_map m;
    REQUIRE(pymalloc_map_init(&m) == 0);
    REQUIRE(pymalloc_region_reserve(&m, 64, MiB) == 0);
    CHECK_EQ(m.region_size, 64 * MiB);
    CHECK_EQ(m.region_base % MiB, 0);
    CHECK_EQ(pymalloc_region_reserve(&m, 64, 3 * MiB / 2), -1); /* not a power of two */
    unsigned char *arena[64];
    for (int i = 0; i < 64; i++) {
        arena[i] = pymalloc_region_alloc(&m, MiB);
        REQUIRE(arena[i] != NULL);
        arena[i][0] = (unsigned char)i; /* mapped, writable */
        arena[i][MiB - 1] = (unsigned char)i;
        CHECK_EQ(found(&m, (uintptr_t)arena[i]), 1);
        CHECK_EQ(found(&m, (uintptr_t)arena[i] + MiB - 1), 1);
        for (int j = 0; j < i; j++) {
            CHECK(arena[i] != arena[j]);
        }
    }
    CHECK(pymalloc_region_alloc(&m, MiB) == NULL); /* full */
    CHECK_EQ(pymalloc_region_free(&m, arena[17], MiB), 1);
    CHECK(pymalloc_region_alloc(&m, 2 * MiB) == NULL); /* over a slot */
    unsigned char *again = pymalloc_region_alloc(&m, 256 * KiB);
    CHECK(again == arena[17]);
    CHECK_EQ(again[0], 0); /* fresh memory, not the arena given back */
    CHECK_EQ(arena[63][MiB - 1], 63);
    int not_ours = 0;
    CHECK_EQ(pymalloc_region_free(&m, &not_ours, MiB), 0);
    /* Outside the region, the map answers. */
    CHECK_EQ(found(&m, BASE + 5 * GiB), 0);
    REQUIRE(pymalloc_map_add(&m, BASE + 5 * GiB, MiB) == 0);
    CHECK_EQ(found(&m, BASE + 5 * GiB + 10), 1);
    CHECK_EQ(found(&m, m.region_base - 1), 0);
    CHECK_EQ(found(&m, m.region_base + m.region_size), 0);
    /* Each span of the reservation (1 KiB) has its watch count, zero at
     * first; addresses outside it have none. */
    const uintptr_t span = (uintptr_t)1 << PYMALLOC_SPAN_SHIFT;
    _Atomic uint16_t *first = pymalloc_span_watches(&m, m.region_base, 0);
    _Atomic uint16_t *last = pymalloc_span_watches(&m, m.region_base + m.region_size - 1, 0);
    REQUIRE(first != NULL && last != NULL);
    CHECK_EQ(span, KiB);
    CHECK_EQ(last - first, (long)(64 * MiB / span) - 1);
    CHECK(pymalloc_span_watches(&m, m.region_base + span - 1, 0) == first);
    CHECK(pymalloc_span_watches(&m, m.region_base + span, 1) == first + 1);
    CHECK_EQ(atomic_load(first), 0);
    CHECK_EQ(atomic_load(last), 0);
    CHECK(pymalloc_span_watches(&m, m.region_base - 1, 1) == NULL);
    CHECK(pymalloc_span_watches(&m, m.region_base + m.region_size, 1) == NULL);
    for (int i = 0; i < 64; i++) {
        CHECK_EQ(pymalloc_region_free(&m, i == 17 ? again : arena[i], MiB), 1);
    }
    pymalloc_region_release(&m);
    CHECK_EQ(m.region_size, 0);
    CHECK(m.span_watches == NULL);
    pymalloc_map_release(&m);
}

/* The map's arenas have their spans' watch counts too, in their leaf: one per
 * KiB, distinct across leaves, found only inside an arena and only for a
 * caller holding the GIL (python); a span count outlives its arena's removal
 * (a count raised is lowered at the same place). */
static void map_arenas_have_span_counts(void)
{
    pymalloc_arena_map m;
    REQUIRE(pymalloc_map_init(&m) == 0);
    uintptr_t a = BASE + 40 * KiB, b = BASE + 7 * GiB; /* two leaves */
    REQUIRE(pymalloc_map_add(&m, a, MiB) == 0);
    REQUIRE(pymalloc_map_add(&m, b, MiB) == 0);
    _Atomic uint16_t *first = pymalloc_span_watches(&m, a, 1);
    REQUIRE(first != NULL);
    CHECK(pymalloc_map_span(&m, a) == first);
    CHECK(pymalloc_span_watches(&m, a, 0) == NULL); /* without the GIL: not looked up */
    CHECK(pymalloc_span_watches(&m, a + KiB - 1, 1) == first); /* a starts on a KiB */
    CHECK(pymalloc_span_watches(&m, a + KiB, 1) == first + 1);
    CHECK(pymalloc_span_watches(&m, a + MiB - 1, 1) == first + MiB / KiB - 1);
    CHECK(pymalloc_span_watches(&m, a - 1, 1) == NULL); /* beside the arena */
    CHECK(pymalloc_span_watches(&m, a + MiB, 1) == NULL);
    _Atomic uint16_t *other = pymalloc_span_watches(&m, b, 1);
    REQUIRE(other != NULL);
    CHECK(other != first);
    CHECK_EQ(atomic_load(first), 0);
    atomic_fetch_add(first, 1);
    CHECK_EQ(atomic_load(pymalloc_map_span(&m, a + 100)), 1);
    CHECK_EQ(atomic_load(other), 0);
    pymalloc_map_remove(&m, a, MiB);
    CHECK(pymalloc_map_span(&m, a) == NULL);
    atomic_fetch_sub(first, 1); /* still there */
    REQUIRE(pymalloc_map_add(&m, a, MiB) == 0);
    CHECK(pymalloc_map_span(&m, a) == first);
    CHECK_EQ(atomic_load(first), 0);
    pymalloc_map_release(&m);
}

/* A limit on the address space closes the region: the free slots past the last
 * arena are given back (their addresses no longer found), the arenas it keeps
 * are still found and can be given back, and no new arena is handed out. */
static void region_closes_past_its_last_arena(void)
{
    pymalloc_arena_map m;
    REQUIRE(pymalloc_map_init(&m) == 0);
    REQUIRE(pymalloc_region_reserve(&m, 128, MiB) == 0);
    unsigned char *a = pymalloc_region_alloc(&m, MiB), *b = pymalloc_region_alloc(&m, MiB),
                  *c = pymalloc_region_alloc(&m, MiB);
    REQUIRE(a != NULL && b != NULL && c != NULL);
    CHECK_EQ(pymalloc_region_free(&m, b, MiB), 1); /* a hole below the last arena */
    uintptr_t last = (uintptr_t)c > (uintptr_t)a ? (uintptr_t)c : (uintptr_t)a;
    pymalloc_region_close(&m);
    CHECK_EQ(m.region_size, last + MiB - m.region_base);
    CHECK(pymalloc_region_alloc(&m, MiB) == NULL);
    CHECK_EQ(found(&m, (uintptr_t)a + 100), 1);
    CHECK_EQ(found(&m, (uintptr_t)c + MiB - 1), 1);
    CHECK_EQ(found(&m, last + MiB), 0); /* given back: another mapping may be there */
    /* An arena the map records there later has the map's span counts, which
     * Python's free reads there, not the region's. */
    CHECK(pymalloc_span_watches(&m, last + MiB, 1) == NULL);
    REQUIRE(pymalloc_map_add(&m, last + MiB, MiB) == 0);
    CHECK_EQ(found(&m, last + MiB), 1);
    CHECK(pymalloc_span_watches(&m, last + MiB, 1) == pymalloc_map_span(&m, last + MiB));
    CHECK(pymalloc_span_watches(&m, last + MiB, 1) != NULL);
    CHECK(pymalloc_span_watches(&m, last, 1) == &m.span_watches[(last - m.region_base) / KiB]);
    pymalloc_map_remove(&m, last + MiB, MiB);
    c[0] = 1; /* still mapped */
    pymalloc_region_close(&m); /* once only */
    CHECK_EQ(m.region_size, last + MiB - m.region_base);
    CHECK_EQ(pymalloc_region_free(&m, c, MiB), 1);
    CHECK_EQ(pymalloc_region_free(&m, a, MiB), 1);
    pymalloc_region_release(&m);
    pymalloc_map_release(&m);
}

/* pymalloc's pool header on 64-bit: what init_pool writes for a pool of 32-byte
 * blocks at address at, with `carved` blocks carved and the free list at the
 * block `free_at` bytes in (0: empty, a full pool). */
typedef struct {
    union {
        void *padding;
        unsigned count;
    } ref;
    uintptr_t free_block;
    void *next_pool, *prev_pool;
    unsigned arena_index, size_index, next_offset, max_next_offset;
} pool_header;

static pool_header header_at(uintptr_t at, unsigned carved, uintptr_t free_at)
{
    pool_header h = {{NULL}, 0, NULL, NULL, 3, 1, 48 + 32 * carved, 16 * KiB - 32};
    h.ref.count = carved - 1;
    h.free_block = free_at != 0 ? at + free_at : 0;
    return h;
}

/* A header is taken for a pool's only where it was read: a copy elsewhere (the
 * adoption scan's own buffer holds copies) points its free list at its pool. */
static void pool_header_only_where_it_lies(void)
{
    uintptr_t at = BASE + 64 * 16 * KiB;
    pool_header h = header_at(at, 10, 48 + 32 * 9);
    CHECK_EQ(sizeof h, 48);
    CHECK_EQ(pymalloc_header_is_pool(at, &h), 1);
    CHECK_EQ(pymalloc_header_is_pool(at + 16 * KiB, &h), 0); /* the same bytes in the next pool */
    CHECK_EQ(pymalloc_header_is_pool(at - 16 * KiB, &h), 0);
    CHECK_EQ(pymalloc_header_is_pool(at + MiB, &h), 0);
    h = header_at(at, 10, 48 + 32 * 512); /* past the pool's end */
    CHECK_EQ(pymalloc_header_is_pool(at, &h), 0);
    h = header_at(at, 10, 16); /* inside the header */
    CHECK_EQ(pymalloc_header_is_pool(at, &h), 0);
    h = header_at(at, 10, 0); /* full: an empty free list, anywhere */
    CHECK_EQ(pymalloc_header_is_pool(at, &h), 1);
    h = header_at(at, 10, 48 + 32 * 9);
    h.max_next_offset = 16 * KiB - 48; /* not the size class's */
    CHECK_EQ(pymalloc_header_is_pool(at, &h), 0);
    h = header_at(at, 10, 48 + 32 * 9);
    h.next_offset = 48 + 32 * 9 + 8; /* not on a block */
    CHECK_EQ(pymalloc_header_is_pool(at, &h), 0);
    pool_header zero = {{NULL}, 0, NULL, NULL, 0, 0, 0, 0};
    CHECK_EQ(pymalloc_header_is_pool(at, &zero), 0);
}

/* Which blocks outside the map may lie in an adopted arena's 64th pool: those
 * whose pool is 63 pools past the first pool of an adopted arena, from the
 * lowest to the highest; none while nothing was adopted, and none for an
 * address below 63 pools (the subtraction wraps, and reads as outside). */
static void adopted_tail_bounds(void)
{
    pymalloc_arena_map m;
    REQUIRE(pymalloc_map_init(&m) == 0);
    const uintptr_t pool = PYMALLOC_POOL_BYTES, tail = (PYMALLOC_POOLS_PER_ARENA - 1) * PYMALLOC_POOL_BYTES;
    uintptr_t low = BASE + 64 * pool, high = BASE + 5 * MiB;
    CHECK_EQ(pymalloc_maybe_adopted_tail(&m, low + tail), 0); /* nothing adopted */
    m.adopted_low = low;
    m.adopted_high = high;
    CHECK_EQ(pymalloc_maybe_adopted_tail(&m, low + tail), 1);
    CHECK_EQ(pymalloc_maybe_adopted_tail(&m, low + tail + pool - 1), 1);
    CHECK_EQ(pymalloc_maybe_adopted_tail(&m, low + tail - 1), 0);
    CHECK_EQ(pymalloc_maybe_adopted_tail(&m, high + tail), 1);
    CHECK_EQ(pymalloc_maybe_adopted_tail(&m, high + tail + pool - 1), 1);
    CHECK_EQ(pymalloc_maybe_adopted_tail(&m, high + tail + pool), 0);
    CHECK_EQ(pymalloc_maybe_adopted_tail(&m, 0), 0);
    CHECK_EQ(pymalloc_maybe_adopted_tail(&m, tail - 1), 0);
    CHECK_EQ(pymalloc_maybe_adopted_tail(&m, UINTPTR_MAX), 0);
    pymalloc_map_release(&m);
}

const unit_test pymalloc_map_tests[] = {
    UNIT_TEST(adopted_tail_bounds),
    UNIT_TEST(pool_header_only_where_it_lies),
    UNIT_TEST(region_closes_past_its_last_arena),
    UNIT_TEST(region_hands_out_and_takes_back_arenas),
    UNIT_TEST(map_finds_exactly_the_arenas),
    UNIT_TEST(map_refuses_what_it_cannot_represent),
    UNIT_TEST(map_handles_many_arenas),
    UNIT_TEST(map_arenas_have_span_counts),
    {NULL, NULL, NULL},
};
