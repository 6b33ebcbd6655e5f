/* arena: zeroed, 16-byte aligned, non-overlapping blocks from mmap; release gives
 * every chunk back; a refused mmap is a NULL, never a broken arena. */
#include "unit.h"
#include "mmap_probe.h"
#include "common/arena.h"

#include <stdint.h>
#include <string.h>

#define MiB ((size_t)1 << 20)

static int all_bytes(const unsigned char *p, size_t n, unsigned char value)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] != value) {
            return 0;
        }
    }
    return 1;
}

static void arena_blocks_are_zeroed_and_aligned(void)
{
    arena a;
    arena_init(&a);
    for (size_t size = 0; size <= 512; size++) {
        unsigned char *p = arena_alloc(&a, size);
        REQUIRE(p != NULL);
        CHECK((uintptr_t)p % 16 == 0);
        CHECK(all_bytes(p, size, 0));
        /* Dirty it: a later block that overlapped this one would not read as zero. */
        memset(p, 0xA5, size);
    }
    arena_release(&a);
}

static void arena_zero_size_gives_distinct_blocks(void)
{
    arena a;
    arena_init(&a);
    void *p = arena_alloc(&a, 0), *q = arena_alloc(&a, 0);
    CHECK(p != NULL);
    CHECK(q != NULL);
    CHECK(p != q);
    arena_release(&a);
}

/* Blocks of assorted sizes spanning several chunks each keep their own contents. */
static void arena_blocks_do_not_overlap(void)
{
    enum { BLOCKS = 3000 };
    static unsigned char *block[BLOCKS];
    static size_t length[BLOCKS];
    arena a;
    arena_init(&a);
    for (size_t i = 0; i < BLOCKS; i++) {
        length[i] = (i * 7919) % 4000 + 1; /* about 6 MiB in all */
        block[i] = arena_alloc(&a, length[i]);
        REQUIRE(block[i] != NULL);
        CHECK(all_bytes(block[i], length[i], 0));
        memset(block[i], (int)(i % 251) + 1, length[i]);
    }
    for (size_t i = 0; i < BLOCKS; i++) {
        CHECK(all_bytes(block[i], length[i], (unsigned char)(i % 251 + 1)));
    }
    CHECK(a.bytes_mapped >= 6 * MiB);
    arena_release(&a);
}

static void arena_large_blocks(void)
{
    mmap_usage before = mmap_probe_usage();
    arena a;
    arena_init(&a);
    unsigned char *small = arena_alloc(&a, 100);
    REQUIRE(small != NULL);
    memset(small, 1, 100);
    /* Sizes around and well past a chunk: each must be usable to its last byte. */
    const size_t sizes[] = {MiB - 64, MiB, MiB + 1, 3 * MiB + 5, 16 * MiB};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = arena_alloc(&a, sizes[i]);
        REQUIRE(p != NULL);
        CHECK((uintptr_t)p % 16 == 0);
        CHECK(p[0] == 0 && p[sizes[i] - 1] == 0);
        CHECK(all_bytes(p, sizes[i], 0));
        memset(p, 0x5A, sizes[i]);
        unsigned char *after = arena_alloc(&a, 32);
        REQUIRE(after != NULL);
        CHECK(all_bytes(after, 32, 0));
        CHECK(after + 32 <= p || after >= p + sizes[i]);
    }
    CHECK(all_bytes(small, 100, 1));
    /* bytes_mapped is the footprint the profiler reports: it must be the truth. */
    mmap_usage during = mmap_probe_usage();
    CHECK_EQ(a.bytes_mapped, during.bytes - before.bytes);
    CHECK(a.bytes_mapped >= 21 * MiB);
    arena_release(&a);
}

static void arena_release_unmaps_every_chunk(void)
{
    mmap_usage before = mmap_probe_usage();
    arena a;
    arena_init(&a);
    arena_release(&a); /* an empty arena releases fine */
    for (int i = 0; i < 40; i++) {
        REQUIRE(arena_alloc(&a, 100 * 1024) != NULL);
    }
    REQUIRE(arena_alloc(&a, 5 * MiB) != NULL);
    mmap_usage during = mmap_probe_usage();
    CHECK(during.mappings - before.mappings >= 4);
    CHECK_EQ(a.bytes_mapped, during.bytes - before.bytes);

    arena_release(&a);
    mmap_usage after = mmap_probe_usage();
    CHECK_EQ(after.mappings, before.mappings);
    CHECK_EQ(after.bytes, before.bytes);
    CHECK(a.head == NULL);
    CHECK_EQ(a.bytes_mapped, 0);

    /* Released is as good as new, and releasing twice is harmless. */
    unsigned char *p = arena_alloc(&a, 64);
    CHECK(p != NULL && all_bytes(p, 64, 0));
    arena_release(&a);
    arena_release(&a);
    CHECK_EQ(mmap_probe_usage().mappings, before.mappings);
}

static void arena_refused_mmap_gives_null(void)
{
    arena a;
    arena_init(&a);
    mmap_probe_refuse_after(0);
    CHECK(arena_alloc(&a, 16) == NULL);
    CHECK(a.head == NULL);
    CHECK_EQ(a.bytes_mapped, 0);
    mmap_probe_refuse_after(-1);

    unsigned char *p = arena_alloc(&a, 16);
    REQUIRE(p != NULL);
    memset(p, 7, 16);
    size_t mapped = a.bytes_mapped;

    mmap_probe_refuse_after(0);
    CHECK(arena_alloc(&a, 16) != NULL); /* room left in the chunk: no mmap needed */
    CHECK(arena_alloc(&a, 2 * MiB) == NULL);
    CHECK_EQ(a.bytes_mapped, mapped);
    mmap_probe_refuse_after(-1);

    CHECK(all_bytes(p, 16, 7));
    CHECK(arena_alloc(&a, 2 * MiB) != NULL);
    arena_release(&a);
}

static void arena_absurd_size_gives_null(void)
{
    mmap_usage before = mmap_probe_usage();
    arena a;
    arena_init(&a);
    CHECK(arena_alloc(&a, SIZE_MAX / 2 + 1) == NULL);
    CHECK(arena_alloc(&a, SIZE_MAX - 15) == NULL);
    CHECK_EQ(mmap_probe_usage().mappings, before.mappings);
    arena_release(&a);
}

/* round_up(size, 16) wraps to 0 for the last 15 sizes below SIZE_MAX, so the
 * `size > SIZE_MAX / 2` guard, which runs after the rounding, never fires. */
static void arena_size_near_size_max_gives_null(void)
{
    arena a;
    arena_init(&a);
    CHECK(arena_alloc(&a, SIZE_MAX) == NULL);
    CHECK(arena_alloc(&a, SIZE_MAX - 14) == NULL);
    arena_release(&a);
}

/* Blocks given back are handed out again for their size class, zeroed, and a
 * class's blocks never serve another class: taking and giving the same sizes
 * over and over maps nothing more. */
static void arena_blocks_given_back_are_reused(void)
{
    arena a;
    arena_init(&a);
    unsigned char *first = arena_take(&a, 100);
    REQUIRE(first != NULL);
    memset(first, 0xAB, 128); /* the class of 100 bytes is 128 */
    arena_give(&a, first, 100);
    unsigned char *again = arena_take(&a, 120);
    CHECK(again == first);
    int zero = 1;
    for (int i = 0; i < 128; i++) {
        zero &= again[i] == 0;
    }
    CHECK(zero);
    unsigned char *other = arena_take(&a, 20); /* class 32: not the 128-byte block */
    CHECK(other != NULL && other != first);
    arena_give(&a, other, 20);
    arena_give(&a, again, 120);
    size_t mapped = a.bytes_mapped;
    for (int round = 0; round < 100000; round++) {
        void *p = arena_take(&a, 1000 + (size_t)round % 24);
        void *q = arena_take(&a, 17);
        REQUIRE(p != NULL && q != NULL);
        arena_give(&a, q, 17);
        arena_give(&a, p, 1000 + (size_t)round % 24);
    }
    CHECK_EQ(a.bytes_mapped, mapped);
    CHECK(arena_take(&a, (size_t)1 << 62) == NULL); /* no class that large */
    arena_release(&a);
}

/* A region given back is kept (within the limit) and handed out again for the
 * same size, all zeros, with no mmap; another size, or one past the limit,
 * is mapped and unmapped as before; lowering the limit unmaps what is kept. */
static void region_kept_for_the_next_map(void)
{
    region_keep(3 * MiB);
    mmap_usage before = mmap_probe_usage();
    unsigned char *p = region_map(MiB);
    REQUIRE(p != NULL);
    memset(p, 0xA5, MiB);
    region_unmap(p, MiB);
    CHECK_EQ(mmap_probe_usage().mappings, before.mappings + 1); /* kept, still mapped */

    mmap_probe_refuse_after(0); /* the kept one needs no mmap */
    unsigned char *again = region_map(MiB);
    CHECK(region_map(2 * MiB) == NULL); /* none kept of that size */
    mmap_probe_refuse_after(-1);
    CHECK(again == p);
    REQUIRE(again != NULL);
    CHECK(all_bytes(again, MiB, 0));

    unsigned char *big = region_map(4 * MiB); /* over the limit: never kept */
    REQUIRE(big != NULL);
    big[0] = 1;
    region_unmap(big, 4 * MiB);
    CHECK_EQ(mmap_probe_usage().mappings, before.mappings + 1);

    /* Two of 1 MiB fit the limit of 3 MiB, a third does not. */
    unsigned char *two = region_map(MiB), *three = region_map(MiB);
    REQUIRE(two != NULL && three != NULL);
    region_unmap(again, MiB);
    region_unmap(two, MiB);
    region_unmap(three, MiB);
    CHECK_EQ(mmap_probe_usage().mappings, before.mappings + 3);
    CHECK_EQ(mmap_probe_usage().bytes, before.bytes + 3 * MiB);

    /* An arena's chunks are regions too: released and taken again, zeroed. */
    arena a;
    arena_init(&a);
    unsigned char *block = arena_alloc(&a, 1000);
    REQUIRE(block != NULL);
    memset(block, 0x77, 1000);
    arena_release(&a);
    block = arena_alloc(&a, 1000);
    REQUIRE(block != NULL);
    CHECK(all_bytes(block, 1000, 0));
    arena_release(&a);

    region_keep(0);
    CHECK_EQ(mmap_probe_usage().mappings, before.mappings);
    CHECK_EQ(mmap_probe_usage().bytes, before.bytes);
}

const unit_test arena_tests[] = {
    UNIT_TEST(arena_blocks_given_back_are_reused),
    UNIT_TEST(arena_blocks_are_zeroed_and_aligned),
    UNIT_TEST(arena_zero_size_gives_distinct_blocks),
    UNIT_TEST(arena_blocks_do_not_overlap),
    UNIT_TEST(arena_large_blocks),
    UNIT_TEST(arena_release_unmaps_every_chunk),
    UNIT_TEST(arena_refused_mmap_gives_null),
    UNIT_TEST(arena_absurd_size_gives_null),
    UNIT_TEST(arena_size_near_size_max_gives_null),
    UNIT_TEST(region_kept_for_the_next_map),
    {NULL, NULL, NULL},
};
