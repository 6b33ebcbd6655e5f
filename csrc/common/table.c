#include "table.h"
#include "arena.h"

#include <string.h>

/* Slot layout: [used flag (8 bytes)][key (16 bytes)][value, padded to 8]. */
#define SLOT_HEADER (sizeof(uint64_t) + sizeof(table_key))

static size_t slot_size_for(size_t value_size)
{
    return SLOT_HEADER + (value_size + 7) / 8 * 8;
}

static uint64_t mix(table_key key)
{
    /* splitmix64 finaliser over both words: pointers and small integers alike spread well. */
    uint64_t x = key.k1 * 0x9E3779B97F4A7C15ULL ^ (key.k2 + 0x632BE59BD9B4E019ULL);
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBULL;
    x ^= x >> 31;
    return x;
}

static unsigned char *slot_at(const table *t, size_t i)
{
    return t->slots + i * t->slot_size;
}

static int slot_used(const unsigned char *slot)
{
    uint64_t used;
    memcpy(&used, slot, sizeof used);
    return used != 0;
}

static int slot_matches(const unsigned char *slot, table_key key)
{
    table_key k;
    memcpy(&k, slot + sizeof(uint64_t), sizeof k);
    return k.k1 == key.k1 && k.k2 == key.k2;
}

int table_init(table *t, size_t value_size, size_t initial_capacity)
{
    size_t cap = 16;
    while (cap < initial_capacity && cap < ((size_t)1 << 40)) {
        cap *= 2;
    }
    t->value_size = value_size;
    t->slot_size = slot_size_for(value_size);
    t->capacity = cap;
    t->count = 0;
    t->slots = region_map(cap * t->slot_size);
    return t->slots == NULL ? -1 : 0;
}

void table_release(table *t)
{
    region_unmap(t->slots, t->capacity * t->slot_size);
    t->slots = NULL;
    t->capacity = 0;
    t->count = 0;
}

static unsigned char *probe(const table *t, table_key key)
{
    size_t mask = t->capacity - 1;
    size_t i = (size_t)mix(key) & mask;
    for (;;) {
        unsigned char *slot = slot_at(t, i);
        if (!slot_used(slot) || slot_matches(slot, key)) {
            return slot;
        }
        i = (i + 1) & mask;
    }
}

void *table_find(const table *t, table_key key)
{
    if (t->slots == NULL) {
        return NULL;
    }
    unsigned char *slot = probe(t, key);
    return slot_used(slot) ? slot + SLOT_HEADER : NULL;
}

static int grow(table *t)
{
    table bigger = *t;
    bigger.capacity = t->capacity * 2;
    bigger.count = 0;
    bigger.slots = region_map(bigger.capacity * t->slot_size);
    if (bigger.slots == NULL) {
        return -1;
    }
    for (size_t i = 0; i < t->capacity; i++) {
        unsigned char *old = slot_at(t, i);
        if (slot_used(old)) {
            table_key k;
            memcpy(&k, old + sizeof(uint64_t), sizeof k);
            memcpy(probe(&bigger, k), old, t->slot_size);
            bigger.count++;
        }
    }
    region_unmap(t->slots, t->capacity * t->slot_size);
    *t = bigger;
    return 0;
}

void *table_upsert(table *t, table_key key, int *created)
{
    if (t->slots == NULL) {
        return NULL;
    }
    unsigned char *slot = probe(t, key);
    if (slot_used(slot)) {
        *created = 0;
        return slot + SLOT_HEADER;
    }
    if ((t->count + 1) * 4 > t->capacity * 3) {
        if (grow(t) != 0) {
            return NULL;
        }
        slot = probe(t, key);
    }
    uint64_t used = 1;
    memcpy(slot, &used, sizeof used);
    memcpy(slot + sizeof(uint64_t), &key, sizeof key);
    memset(slot + SLOT_HEADER, 0, t->slot_size - SLOT_HEADER);
    t->count++;
    *created = 1;
    return slot + SLOT_HEADER;
}

/* Linear probing without tombstones: after the removed slot, every entry of
 * the same run that could not be found past the new gap moves back into it
 * (backward-shift deletion), so that lookups stay as short as before. */
int table_remove(table *t, table_key key)
{
    if (t->slots == NULL) {
        return 0;
    }
    unsigned char *slot = probe(t, key);
    if (!slot_used(slot)) {
        return 0;
    }
    size_t mask = t->capacity - 1;
    size_t gap = (size_t)(slot - t->slots) / t->slot_size;
    for (size_t j = (gap + 1) & mask;; j = (j + 1) & mask) {
        unsigned char *next = slot_at(t, j);
        if (!slot_used(next)) {
            break;
        }
        table_key k;
        memcpy(&k, next + sizeof(uint64_t), sizeof k);
        size_t home = (size_t)mix(k) & mask;
        /* The entry at j may fill the gap unless its home lies cyclically in
         * (gap, j]: then it would no longer be found from its home. */
        int home_after_gap = gap <= j ? (home > gap && home <= j) : (home > gap || home <= j);
        if (!home_after_gap) {
            memcpy(slot_at(t, gap), next, t->slot_size);
            gap = j;
        }
    }
    memset(slot_at(t, gap), 0, t->slot_size);
    t->count--;
    return 1;
}

size_t table_memory_bytes(const table *t)
{
    return t->slots == NULL ? 0 : t->capacity * t->slot_size;
}

void *table_next(const table *t, size_t *cursor, table_key *key)
{
    if (t->count == 0) {
        /* Not a slot read: a table cleared and mapped afresh for each profile
         * (pytest --pyrometer makes one per test) faulted in every page of its
         * slots here, 11% of a profile's start and collect. */
        return NULL;
    }
    while (t->slots != NULL && *cursor < t->capacity) {
        unsigned char *slot = slot_at(t, (*cursor)++);
        if (slot_used(slot)) {
            memcpy(key, slot + sizeof(uint64_t), sizeof *key);
            return slot + SLOT_HEADER;
        }
    }
    return NULL;
}
