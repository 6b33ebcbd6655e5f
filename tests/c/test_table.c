/* table: two-word key -> fixed-size value; upsert says whether it created; the table
 * doubles at 3/4 load without losing a value; iteration meets every key once. */
#include "unit.h"
#include "mmap_probe.h"
#include "common/table.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t index, check;
} entry_value;

/* Keys shaped like the profiler's: a code-object address and a line number. */
static table_key code_line_key(uint64_t i)
{
    return (table_key){0x7f3a12000000ULL + (i / 97) * 48, i % 97};
}

static int all_zero(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        if (b[i] != 0) {
            return 0;
        }
    }
    return 1;
}

static void table_init_rounds_capacity_up(void)
{
    const size_t asked[] = {0, 1, 16, 17, 100, 1024, 1025};
    const size_t got[] = {16, 16, 16, 32, 128, 1024, 2048};
    for (size_t i = 0; i < sizeof asked / sizeof asked[0]; i++) {
        table t;
        REQUIRE(table_init(&t, sizeof(entry_value), asked[i]) == 0);
        CHECK_EQ(t.capacity, got[i]);
        CHECK_EQ(t.count, 0);
        size_t cursor = 0;
        table_key k;
        CHECK(table_next(&t, &cursor, &k) == NULL);
        CHECK(table_find(&t, (table_key){0, 0}) == NULL);
        CHECK(table_find(&t, (table_key){1, 2}) == NULL);
        table_release(&t);
    }
}

static void table_upsert_creates_once(void)
{
    table t;
    REQUIRE(table_init(&t, sizeof(entry_value), 0) == 0);
    table_key key = {0x1000, 42};
    int created = -1;
    entry_value *v = table_upsert(&t, key, &created);
    REQUIRE(v != NULL);
    CHECK_EQ(created, 1);
    CHECK(all_zero(v, sizeof *v));
    v->index = 7;
    v->check = 8;

    created = -1;
    entry_value *again = table_upsert(&t, key, &created);
    CHECK(again == v);
    CHECK_EQ(created, 0);
    CHECK_EQ(again->index, 7);
    CHECK_EQ(again->check, 8);
    CHECK(table_find(&t, key) == v);
    CHECK_EQ(t.count, 1);

    /* Keys differing in one word, or swapped, are other keys. */
    CHECK(table_find(&t, (table_key){0x1000, 43}) == NULL);
    CHECK(table_find(&t, (table_key){0x1001, 42}) == NULL);
    CHECK(table_find(&t, (table_key){42, 0x1000}) == NULL);
    entry_value *swapped = table_upsert(&t, (table_key){42, 0x1000}, &created);
    REQUIRE(swapped != NULL);
    CHECK_EQ(created, 1);
    CHECK(swapped != v);
    CHECK(all_zero(swapped, sizeof *swapped));
    CHECK_EQ(t.count, 2);
    table_release(&t);
}

/* A slot's "used" mark is separate from its key, so all-zero keys are ordinary keys. */
static void table_keys_with_zero_words(void)
{
    const table_key keys[] = {
        {0, 0}, {0, 1}, {1, 0}, {0, UINT64_MAX}, {UINT64_MAX, 0}, {UINT64_MAX, UINT64_MAX},
    };
    const size_t n = sizeof keys / sizeof keys[0];
    table t;
    REQUIRE(table_init(&t, sizeof(entry_value), 0) == 0);
    CHECK(table_find(&t, keys[0]) == NULL);
    for (size_t i = 0; i < n; i++) {
        int created = -1;
        entry_value *v = table_upsert(&t, keys[i], &created);
        REQUIRE(v != NULL);
        CHECK_EQ(created, 1);
        CHECK(all_zero(v, sizeof *v));
        v->index = i + 100;
    }
    CHECK_EQ(t.count, n);
    for (size_t i = 0; i < n; i++) {
        entry_value *v = table_find(&t, keys[i]);
        REQUIRE(v != NULL);
        CHECK_EQ(v->index, i + 100);
        int created = -1;
        CHECK(table_upsert(&t, keys[i], &created) == v);
        CHECK_EQ(created, 0);
    }
    table_release(&t);
}

static int holds_every_key(const table *t, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        const entry_value *v = table_find(t, code_line_key(i));
        if (v == NULL || v->index != i || v->check != ~i) {
            return 0;
        }
    }
    return 1;
}

static void table_grows_keeping_values(void)
{
    enum { KEYS = 200000 };
    mmap_usage before = mmap_probe_usage();
    table t;
    REQUIRE(table_init(&t, sizeof(entry_value), 0) == 0);
    int doublings = 0;
    for (uint64_t i = 0; i < KEYS; i++) {
        size_t capacity = t.capacity;
        int created = -1;
        entry_value *v = table_upsert(&t, code_line_key(i), &created);
        REQUIRE(v != NULL);
        CHECK_EQ(created, 1);
        v->index = i;
        v->check = ~i;
        CHECK_EQ(t.count, i + 1);
        if (t.capacity != capacity) {
            doublings++;
            CHECK_EQ(t.capacity, 2 * capacity);
            CHECK(holds_every_key(&t, i + 1));
        }
        CHECK(t.count * 4 <= t.capacity * 3);
    }
    CHECK(doublings >= 14);
    CHECK((t.capacity & (t.capacity - 1)) == 0);
    CHECK(holds_every_key(&t, KEYS));
    for (uint64_t i = KEYS; i < KEYS + 1000; i++) {
        CHECK(table_find(&t, code_line_key(i)) == NULL);
    }
    /* Upserting what is there creates nothing and changes nothing. */
    for (uint64_t i = 0; i < KEYS; i += 101) {
        int created = -1;
        entry_value *v = table_upsert(&t, code_line_key(i), &created);
        CHECK(v != NULL && created == 0 && v->index == i);
    }
    CHECK_EQ(t.count, KEYS);
    /* Each doubling gave the old slots back: one mapping, the current one. */
    mmap_usage during = mmap_probe_usage();
    CHECK_EQ(during.mappings - before.mappings, 1);
    CHECK_EQ(during.bytes - before.bytes, t.capacity * t.slot_size);
    table_release(&t);
    CHECK_EQ(mmap_probe_usage().mappings, before.mappings);
}

/* Fills a fresh table with n keys -- key i is {i, 0} for even i and {0, i} for odd
 * i, zero words on both sides -- and walks it; 1 when each key came up exactly once. */
static int iteration_meets_each_key_once(uint64_t n)
{
    table t;
    if (table_init(&t, sizeof(entry_value), 0) != 0) {
        return 0;
    }
    for (uint64_t i = 0; i < n; i++) {
        table_key key = i % 2 ? (table_key){0, i} : (table_key){i, 0};
        int created;
        entry_value *v = table_upsert(&t, key, &created);
        if (v == NULL) {
            table_release(&t);
            return 0;
        }
        v->index = i;
    }
    unsigned *seen = calloc(n + 1, sizeof *seen);
    int ok = seen != NULL;
    size_t cursor = 0, visited = 0;
    table_key key;
    entry_value *v;
    while (ok && (v = table_next(&t, &cursor, &key)) != NULL) {
        uint64_t i = v->index;
        visited++;
        ok = i < n && key.k1 == (i % 2 ? 0 : i) && key.k2 == (i % 2 ? i : 0) &&
             table_find(&t, key) == v && seen[i]++ == 0;
    }
    /* An exhausted cursor stays exhausted. */
    ok = ok && visited == n && visited == t.count && table_next(&t, &cursor, &key) == NULL;
    free(seen);
    table_release(&t);
    return ok;
}

static void table_iteration_meets_each_key_once(void)
{
    /* Every size up to a few doublings (so the first and last slots are met in use
     * as well as empty), then one large table. */
    for (uint64_t n = 0; n <= 400; n++) {
        if (!iteration_meets_each_key_once(n)) {
            unit_fail(__FILE__, __LINE__, "iteration over %llu keys", (unsigned long long)n);
        }
    }
    CHECK(iteration_meets_each_key_once(50000));
}

/* Values whose size is not a multiple of 8 (or is 0) still get slots of their own. */
static void table_odd_value_sizes(void)
{
    enum { KEYS = 1000, ODD = 13 };
    table t;
    REQUIRE(table_init(&t, ODD, 0) == 0);
    for (uint64_t i = 0; i < KEYS; i++) {
        int created;
        unsigned char *v = table_upsert(&t, code_line_key(i), &created);
        REQUIRE(v != NULL);
        CHECK((uintptr_t)v % 8 == 0);
        CHECK(all_zero(v, ODD));
        memset(v, (int)(i % 255) + 1, ODD);
    }
    for (uint64_t i = 0; i < KEYS; i++) {
        unsigned char *v = table_find(&t, code_line_key(i));
        REQUIRE(v != NULL);
        for (size_t b = 0; b < ODD; b++) {
            CHECK_EQ(v[b], i % 255 + 1);
        }
    }
    table_release(&t);

    REQUIRE(table_init(&t, 0, 0) == 0);
    for (uint64_t i = 0; i < KEYS; i++) {
        int created = -1;
        CHECK(table_upsert(&t, code_line_key(i), &created) != NULL);
        CHECK_EQ(created, 1);
    }
    for (uint64_t i = 0; i < KEYS; i++) {
        int created = -1;
        CHECK(table_find(&t, code_line_key(i)) != NULL);
        CHECK(table_upsert(&t, code_line_key(i), &created) != NULL);
        CHECK_EQ(created, 0);
    }
    CHECK_EQ(t.count, KEYS);
    table_release(&t);
}

/* When the doubled slots cannot be mapped, the insert fails and the table is as it was. */
static void table_upsert_fails_cleanly_when_it_cannot_grow(void)
{
    table t;
    REQUIRE(table_init(&t, sizeof(entry_value), 16) == 0);
    uint64_t fit = 0;
    while ((fit + 1) * 4 <= t.capacity * 3) {
        int created;
        entry_value *v = table_upsert(&t, code_line_key(fit), &created);
        REQUIRE(v != NULL);
        v->index = fit;
        v->check = ~fit;
        fit++;
    }
    CHECK_EQ(t.capacity, 16);
    CHECK_EQ(fit, 12);

    mmap_probe_refuse_after(0);
    int created = -1;
    CHECK(table_upsert(&t, code_line_key(fit), &created) == NULL);
    CHECK_EQ(t.count, fit);
    CHECK_EQ(t.capacity, 16);
    CHECK(holds_every_key(&t, fit));
    CHECK(table_find(&t, code_line_key(fit)) == NULL);
    /* A key already there needs no room. */
    entry_value *v = table_upsert(&t, code_line_key(3), &created);
    CHECK(v != NULL && created == 0 && v->index == 3);
    mmap_probe_refuse_after(-1);

    v = table_upsert(&t, code_line_key(fit), &created);
    REQUIRE(v != NULL);
    CHECK_EQ(created, 1);
    CHECK_EQ(t.capacity, 32);
    v->index = fit;
    v->check = ~fit;
    CHECK(holds_every_key(&t, fit + 1));
    table_release(&t);
}

static void table_release_gives_back_slots(void)
{
    mmap_usage before = mmap_probe_usage();
    table t;
    REQUIRE(table_init(&t, sizeof(entry_value), 1000) == 0);
    int created;
    REQUIRE(table_upsert(&t, (table_key){1, 1}, &created) != NULL);
    table_release(&t);
    CHECK_EQ(mmap_probe_usage().mappings, before.mappings);
    CHECK_EQ(mmap_probe_usage().bytes, before.bytes);

    /* A released table answers "nothing" rather than touching freed slots. */
    CHECK(table_find(&t, (table_key){1, 1}) == NULL);
    CHECK(table_upsert(&t, (table_key){1, 1}, &created) == NULL);
    size_t cursor = 0;
    table_key key;
    CHECK(table_next(&t, &cursor, &key) == NULL);
    table_release(&t);
}

static void table_init_fails_when_refused(void)
{
    table t;
    mmap_probe_refuse_after(0);
    CHECK(table_init(&t, sizeof(entry_value), 64) == -1);
    mmap_probe_refuse_after(-1);
    int created;
    CHECK(table_find(&t, (table_key){1, 1}) == NULL);
    CHECK(table_upsert(&t, (table_key){1, 1}, &created) == NULL);
    table_release(&t);
}

/* Removing keys (in an order unlike their insertion, so that runs of probes
 * wrap and shift back) leaves every other key findable with its value, the
 * removed ones absent, and the count right; re-inserting them works. */
static void table_remove_keeps_the_others_findable(void)
{
    table t;
    REQUIRE(table_init(&t, sizeof(entry_value), 64) == 0);
    const uint64_t n = 3000;
    int created;
    for (uint64_t i = 0; i < n; i++) {
        entry_value *v = table_upsert(&t, code_line_key(i), &created);
        REQUIRE(v != NULL);
        v->index = i;
        v->check = i * 3 + 1;
    }
    uint64_t removed = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t k = (i * 7919) % n;
        if (k % 3 != 0) {
            CHECK(table_remove(&t, code_line_key(k)) == 1);
            removed++;
        }
    }
    CHECK(table_remove(&t, code_line_key(n + 5)) == 0);
    CHECK_EQ(t.count, n - removed);
    int ok = 1;
    for (uint64_t i = 0; i < n; i++) {
        entry_value *v = table_find(&t, code_line_key(i));
        ok &= i % 3 == 0 ? (v != NULL && v->index == i && v->check == i * 3 + 1) : v == NULL;
    }
    CHECK(ok);
    for (uint64_t i = 0; i < n; i++) {
        if (i % 3 != 0) {
            entry_value *v = table_upsert(&t, code_line_key(i), &created);
            ok &= v != NULL && created && v->index == 0 && v->check == 0;
        }
    }
    CHECK(ok);
    CHECK_EQ(t.count, n);
    table_release(&t);
}

const unit_test table_tests[] = {
    UNIT_TEST(table_remove_keeps_the_others_findable),
    UNIT_TEST(table_init_rounds_capacity_up),
    UNIT_TEST(table_upsert_creates_once),
    UNIT_TEST(table_keys_with_zero_words),
    UNIT_TEST(table_grows_keeping_values),
    UNIT_TEST(table_iteration_meets_each_key_once),
    UNIT_TEST(table_odd_value_sizes),
    UNIT_TEST(table_upsert_fails_cleanly_when_it_cannot_grow),
    UNIT_TEST(table_release_gives_back_slots),
    UNIT_TEST(table_init_fails_when_refused),
    {NULL, NULL, NULL},
};
