/* stack_table: call stacks interned as a tree, each stack an id.
 *
 * A stack is its parent stack (the same stack without its innermost frame) and
 * that frame, a (site, line) as the line table keys it (sites.h): interning a
 * stack from its root takes one lookup per frame, and a stack shares all of its
 * ancestors with the others.  Each stack has a value of a fixed size (the
 * figures charged to it), in chunks that never move, so a pointer to a value
 * stays good while the table grows.  The table is bounded by a cap on distinct
 * stacks: past it, a stack not yet known is STACK_TABLE_OTHER, one bucket for
 * all of them, so that its size follows the distinct stacks up to the cap and
 * never the run time.  Pure C, no CPython; not thread-safe (callers serialise
 * access: the profiler's writers hold the GIL).  Memory comes from mmap
 * (arena.h), never from the hooked allocator, so it may be used inside one.
 */
#ifndef PYROMETER_STACK_TABLE_H
#define PYROMETER_STACK_TABLE_H

#include "../common/arena.h"
#include "../common/table.h"

#include <stddef.h>
#include <stdint.h>

#define STACK_TABLE_ROOT 0u              /* the empty stack: no frame */
#define STACK_TABLE_OTHER UINT32_MAX     /* every stack past the cap */
#define STACK_TABLE_CHUNK 256u           /* stacks per chunk of values */

typedef struct {
    uint32_t site;
    int32_t lineno;
} stack_frame;

typedef struct {
    uint32_t parent; /* STACK_TABLE_ROOT's own parent is STACK_TABLE_OTHER */
    stack_frame frame;
} stack_node;

typedef struct {
    table index;          /* (parent, frame) -> id */
    arena memory;         /* chunks of nodes and values */
    unsigned char **chunks; /* cap / STACK_TABLE_CHUNK + 1 pointers */
    size_t value_size, entry_size;
    uint32_t count, cap;
    unsigned char *other; /* the value of STACK_TABLE_OTHER */
} stack_table;

/* A table of at most cap stacks (the root included), each with value_size bytes
 * of zeroed value; 0, or -1 when memory cannot be mapped. */
int stack_table_init(stack_table *t, size_t value_size, uint32_t cap);
void stack_table_release(stack_table *t);

/* The stack of parent with frame as its innermost frame, interned at first
 * sight; STACK_TABLE_OTHER past the cap, for a parent that is
 * STACK_TABLE_OTHER, and when memory runs out. */
uint32_t stack_table_child(stack_table *t, uint32_t parent, stack_frame frame);
/* The stack of frames[0] (the outermost) to frames[depth - 1] (the innermost). */
uint32_t stack_table_intern(stack_table *t, const stack_frame *frames, int depth);

/* The value of a stack (STACK_TABLE_OTHER included); NULL for an id never given. */
void *stack_table_value(const stack_table *t, uint32_t id);
/* A stack's parent and innermost frame; NULL for STACK_TABLE_OTHER and ids never given. */
const stack_node *stack_table_node(const stack_table *t, uint32_t id);
/* Stacks interned (the root included); ids are 0 .. count - 1. */
uint32_t stack_table_count(const stack_table *t);
size_t stack_table_memory_bytes(const stack_table *t);

#endif
