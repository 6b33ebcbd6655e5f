/* stack_table: stacks interned as (parent, frame); a stack and its prefixes
 * share ids; values never move while the table grows; past the cap every new
 * stack is the one "other" bucket, known stacks keep their ids, and the memory
 * stays what the cap allows. */
#include "unit.h"
#include "profile/stack_table.h"

#include <stdint.h>
#include <string.h>

typedef struct {
    uint64_t hits;
    double seconds;
} figures;

static void stack_table_interns_paths(void)
{
    stack_table t;
    REQUIRE(stack_table_init(&t, sizeof(figures), 100) == 0);
    CHECK_EQ(stack_table_count(&t), 1); /* the root */
    stack_frame main_a_c[] = {{1, 10}, {2, 20}, {3, 30}};
    stack_frame main_b_c[] = {{1, 11}, {4, 40}, {3, 30}};
    uint32_t ac = stack_table_intern(&t, main_a_c, 3);
    uint32_t bc = stack_table_intern(&t, main_b_c, 3);
    CHECK(ac != bc);
    CHECK(ac != STACK_TABLE_OTHER && bc != STACK_TABLE_OTHER);
    CHECK_EQ(stack_table_count(&t), 7); /* root + 3 + 3: main at line 10 and 11 differ */
    CHECK_EQ(stack_table_intern(&t, main_a_c, 3), ac);
    CHECK_EQ(stack_table_intern(&t, main_a_c, 0), STACK_TABLE_ROOT);
    uint32_t a = stack_table_intern(&t, main_a_c, 2);
    const stack_node *leaf = stack_table_node(&t, ac);
    REQUIRE(leaf != NULL);
    CHECK_EQ(leaf->parent, a);
    CHECK(leaf->frame.site == 3 && leaf->frame.lineno == 30);
    const stack_node *root = stack_table_node(&t, STACK_TABLE_ROOT);
    REQUIRE(root != NULL);
    CHECK_EQ(root->parent, STACK_TABLE_OTHER);
    CHECK(stack_table_node(&t, STACK_TABLE_OTHER) == NULL);
    CHECK(stack_table_node(&t, 7) == NULL);
    CHECK(stack_table_value(&t, 7) == NULL);
    /* Negative and large line numbers are frames like any other. */
    stack_frame odd[] = {{UINT32_MAX - 2, -1}, {0, INT32_MAX}};
    uint32_t o = stack_table_intern(&t, odd, 2);
    CHECK(o != STACK_TABLE_OTHER && stack_table_node(&t, o)->frame.lineno == INT32_MAX);
    CHECK_EQ(stack_table_intern(&t, odd, 2), o);
    stack_table_release(&t);
}

static void stack_table_values_stay_put(void)
{
    stack_table t;
    REQUIRE(stack_table_init(&t, sizeof(figures), 20000) == 0);
    figures *first = stack_table_value(&t, STACK_TABLE_ROOT);
    REQUIRE(first != NULL);
    first->hits = 7;
    uint32_t id = STACK_TABLE_ROOT;
    uint32_t ids[5000];
    for (uint32_t i = 0; i < 5000; i++) { /* one deep chain: the index grows many times */
        id = stack_table_child(&t, id, (stack_frame){i, (int32_t)i});
        REQUIRE(id == i + 1);
        ids[i] = id;
        figures *v = stack_table_value(&t, id);
        REQUIRE(v != NULL);
        CHECK(v->hits == 0 && v->seconds == 0.0); /* zeroed */
        v->hits = i;
        v->seconds = (double)i / 2;
    }
    CHECK(stack_table_value(&t, STACK_TABLE_ROOT) == first && first->hits == 7);
    for (uint32_t i = 0; i < 5000; i++) {
        figures *v = stack_table_value(&t, ids[i]);
        CHECK(v->hits == i && v->seconds == (double)i / 2);
    }
    stack_table_release(&t);
    CHECK(stack_table_value(&t, STACK_TABLE_ROOT) == NULL);
    CHECK_EQ(stack_table_memory_bytes(&t), 0);
}

static void stack_table_cap_gives_other(void)
{
    stack_table t;
    REQUIRE(stack_table_init(&t, sizeof(figures), 10) == 0);
    stack_frame path[20];
    for (int i = 0; i < 20; i++) {
        path[i] = (stack_frame){(uint32_t)i + 1, i};
    }
    uint32_t known = stack_table_intern(&t, path, 4);
    CHECK(known != STACK_TABLE_OTHER);
    CHECK_EQ(stack_table_intern(&t, path, 20), STACK_TABLE_OTHER); /* 9 fit below the root, then other */
    CHECK_EQ(stack_table_count(&t), 10);
    size_t full = stack_table_memory_bytes(&t);
    for (uint32_t i = 0; i < 100000; i++) { /* many more distinct stacks than the cap */
        stack_frame f = {i + 100, (int32_t)i};
        CHECK_EQ(stack_table_intern(&t, &f, 1), STACK_TABLE_OTHER);
    }
    CHECK_EQ(stack_table_count(&t), 10);
    CHECK_EQ(stack_table_memory_bytes(&t), full);
    CHECK_EQ(stack_table_intern(&t, path, 4), known); /* known stacks keep their ids */
    figures *other = stack_table_value(&t, STACK_TABLE_OTHER);
    REQUIRE(other != NULL);
    other->hits++;
    CHECK(stack_table_value(&t, STACK_TABLE_OTHER) == other);
    CHECK_EQ(stack_table_child(&t, STACK_TABLE_OTHER, path[0]), STACK_TABLE_OTHER);
    stack_table_release(&t);
}

static void stack_table_refuses_bad_caps(void)
{
    stack_table t;
    CHECK(stack_table_init(&t, sizeof(figures), 0) == -1);
    CHECK(stack_table_init(&t, sizeof(figures), STACK_TABLE_OTHER) == -1);
    CHECK_EQ(stack_table_intern(&t, NULL, 0), STACK_TABLE_OTHER); /* not initialised: nothing interned */
    CHECK(stack_table_value(&t, 0) == NULL);
}

const unit_test stack_table_tests[] = {
    UNIT_TEST(stack_table_interns_paths),
    UNIT_TEST(stack_table_values_stay_put),
    UNIT_TEST(stack_table_cap_gives_other),
    UNIT_TEST(stack_table_refuses_bad_caps),
    {NULL, NULL, NULL},
};
