#include "stack_table.h"

#include <string.h>

/* Each entry of a chunk: its node, then its value (padded to 16 bytes, so that
 * values holding doubles and 64-bit counters are aligned). */
static size_t round16(size_t n)
{
    return (n + 15) / 16 * 16;
}

static unsigned char *entry_at(const stack_table *t, uint32_t id)
{
    unsigned char *chunk = t->chunks[id / STACK_TABLE_CHUNK];
    return chunk == NULL ? NULL : chunk + (size_t)(id % STACK_TABLE_CHUNK) * t->entry_size;
}

/* A new id with its node; STACK_TABLE_OTHER past the cap or out of memory. */
static uint32_t add(stack_table *t, uint32_t parent, stack_frame frame)
{
    if (t->count >= t->cap) {
        return STACK_TABLE_OTHER;
    }
    uint32_t id = t->count;
    unsigned char **chunk = &t->chunks[id / STACK_TABLE_CHUNK];
    if (*chunk == NULL) {
        *chunk = arena_alloc(&t->memory, (size_t)STACK_TABLE_CHUNK * t->entry_size);
        if (*chunk == NULL) {
            return STACK_TABLE_OTHER;
        }
    }
    stack_node *node = (stack_node *)entry_at(t, id);
    node->parent = parent;
    node->frame = frame;
    t->count++;
    return id;
}

int stack_table_init(stack_table *t, size_t value_size, uint32_t cap)
{
    memset(t, 0, sizeof *t);
    if (cap == 0 || cap == STACK_TABLE_OTHER) {
        return -1;
    }
    arena_init(&t->memory);
    t->value_size = value_size;
    t->entry_size = round16(sizeof(stack_node)) + round16(value_size);
    t->cap = cap;
    t->chunks = arena_alloc(&t->memory, ((size_t)cap / STACK_TABLE_CHUNK + 1) * sizeof *t->chunks);
    t->other = arena_alloc(&t->memory, value_size == 0 ? 1 : value_size);
    if (t->chunks == NULL || t->other == NULL || table_init(&t->index, sizeof(uint32_t), 256) != 0) {
        arena_release(&t->memory);
        memset(t, 0, sizeof *t);
        return -1;
    }
    stack_frame none = {0, 0};
    (void)add(t, STACK_TABLE_OTHER, none); /* the root: id 0 */
    return 0;
}

void stack_table_release(stack_table *t)
{
    if (t->chunks == NULL) {
        return;
    }
    table_release(&t->index);
    arena_release(&t->memory);
    memset(t, 0, sizeof *t);
}

uint32_t stack_table_child(stack_table *t, uint32_t parent, stack_frame frame)
{
    if (t->chunks == NULL || parent == STACK_TABLE_OTHER) {
        return STACK_TABLE_OTHER;
    }
    table_key key = {(uint64_t)parent, (uint64_t)frame.site << 32 | (uint32_t)frame.lineno};
    uint32_t *known = table_find(&t->index, key);
    if (known != NULL) {
        return *known;
    }
    if (t->count >= t->cap) {
        return STACK_TABLE_OTHER; /* checked first: no index entry for a stack that has no id */
    }
    int created;
    uint32_t *slot = table_upsert(&t->index, key, &created);
    if (slot == NULL) {
        return STACK_TABLE_OTHER;
    }
    uint32_t id = add(t, parent, frame);
    if (id == STACK_TABLE_OTHER) {
        (void)table_remove(&t->index, key);
        return STACK_TABLE_OTHER;
    }
    *slot = id;
    return id;
}

uint32_t stack_table_intern(stack_table *t, const stack_frame *frames, int depth)
{
    uint32_t id = STACK_TABLE_ROOT;
    for (int i = 0; i < depth && id != STACK_TABLE_OTHER; i++) {
        id = stack_table_child(t, id, frames[i]);
    }
    return t->chunks == NULL ? STACK_TABLE_OTHER : id;
}

void *stack_table_value(const stack_table *t, uint32_t id)
{
    if (t->chunks == NULL) {
        return NULL;
    }
    if (id == STACK_TABLE_OTHER) {
        return t->other;
    }
    if (id >= t->count) {
        return NULL;
    }
    return entry_at(t, id) + round16(sizeof(stack_node));
}

const stack_node *stack_table_node(const stack_table *t, uint32_t id)
{
    if (t->chunks == NULL || id >= t->count) {
        return NULL;
    }
    return (const stack_node *)entry_at(t, id);
}

uint32_t stack_table_count(const stack_table *t)
{
    return t->count;
}

size_t stack_table_memory_bytes(const stack_table *t)
{
    return t->chunks == NULL ? 0 : table_memory_bytes(&t->index) + t->memory.bytes_mapped;
}
