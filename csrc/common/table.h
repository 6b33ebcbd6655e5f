/* table: open-addressing hash map from a two-word key to a fixed-size value.
 *
 * Used for every per-line, per-code and per-thread aggregate the profiler keeps.
 * Slots live in their own mmap region (see arena.h for why not malloc); the table
 * doubles when it is 3/4 full, so its size follows the number of distinct keys,
 * never the length of the run.  Not thread-safe: callers serialise access (the
 * sampler only touches its tables while holding the GIL).
 */
#ifndef PYROMETER_TABLE_H
#define PYROMETER_TABLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    unsigned char *slots;
    size_t capacity;   /* power of two */
    size_t count;
    size_t value_size;
    size_t slot_size;
} table;

typedef struct {
    uint64_t k1, k2;
} table_key;

/* 0 on success, -1 when memory cannot be mapped. */
int table_init(table *t, size_t value_size, size_t initial_capacity);
void table_release(table *t);

/* The value stored under key, or NULL. */
void *table_find(const table *t, table_key key);
/* The value under key, inserted zeroed when absent (*created says which);
 * NULL only when the table cannot grow. */
void *table_upsert(table *t, table_key key, int *created);

/* Removes key's entry: 1 when there was one.  Values of other keys may move
 * (as when the table grows): pointers to them are invalid afterwards. */
int table_remove(table *t, table_key key);

/* Bytes of memory the table holds (for the profiler's own footprint). */
size_t table_memory_bytes(const table *t);

/* Iteration: start with *cursor = 0; returns NULL when done. */
void *table_next(const table *t, size_t *cursor, table_key *key);

#endif
