#include "stacks.h"
#include "codes.h"

#include <string.h>

static struct {
    int initialised;
    stack_table table; /* values: cpu_sums */
} stacks_state;

int stacks_init(void)
{
    if (stacks_state.initialised) {
        return 0;
    }
    if (stack_table_init(&stacks_state.table, sizeof(cpu_sums), STACKS_CAP) != 0) {
        return -1;
    }
    stacks_state.initialised = 1;
    return 0;
}

/* The reported frames from `reported` outward, innermost first, at most max
 * (the walk stops there: the cost of a deep recursion is bounded too);
 * known_only: codes_find, never registering; reported_line: the leaf's line when
 * the caller knows it, else -1.  Returns how many, or -1 when a code was not
 * known (known_only) or memory ran out. */
static int walk(pyframe reported, int known_only, int reported_line, stack_frame *out, int max)
{
    int depth = 0;
    for (pyframe f = reported; f != NULL && depth < max; f = pyframe_caller(f)) {
        PyCodeObject *code = pyframe_code(f);
        const code_info *info = known_only ? codes_find(code) : codes_lookup_in(code, f);
        if (info == NULL) {
            return -1;
        }
        if (!info->reported || info->site == SITE_NONE) {
            continue;
        }
        out[depth].site = info->site;
        out[depth].lineno = f == reported && reported_line >= 0 ? reported_line
                                                                : codes_line_known(info, code, pyframe_lasti(f));
        depth++;
    }
    return depth;
}

/* Interns frames given innermost first. */
static uint32_t intern_reversed(const stack_frame *inner_first, int depth)
{
    uint32_t id = STACKS_ROOT;
    for (int i = depth - 1; i >= 0 && id != STACKS_OTHER; i--) {
        id = stack_table_child(&stacks_state.table, id, inner_first[i]);
    }
    return id;
}

uint32_t stacks_of(pyframe reported, int reported_line)
{
    stack_frame frames[STACKS_MAX_DEPTH];
    if (!stacks_state.initialised) {
        return STACKS_OTHER;
    }
    int depth = walk(reported, 0, reported_line, frames, STACKS_MAX_DEPTH);
    return depth < 0 ? STACKS_OTHER : intern_reversed(frames, depth);
}

uint32_t stacks_of_returned(const stack_frame *returned, int n_returned, pyframe caller, int caller_line)
{
    stack_frame frames[STACKS_MAX_DEPTH];
    if (!stacks_state.initialised) {
        return STACKS_OTHER;
    }
    int n = n_returned < STACKS_MAX_DEPTH ? n_returned : STACKS_MAX_DEPTH;
    memcpy(frames, returned, (size_t)n * sizeof *frames);
    int depth = walk(caller, 0, caller_line, frames + n, STACKS_MAX_DEPTH - n);
    return depth < 0 ? STACKS_OTHER : intern_reversed(frames, n + depth);
}

int stacks_of_known(pyframe reported, uint32_t *id)
{
    stack_frame frames[STACKS_MAX_DEPTH];
    if (!stacks_state.initialised) {
        *id = STACKS_OTHER;
        return 1;
    }
    int depth = walk(reported, 1, -1, frames, STACKS_MAX_DEPTH);
    if (depth < 0) {
        return 0;
    }
    *id = intern_reversed(frames, depth);
    return 1;
}

uint32_t stacks_intern(const stack_frame *frames, int depth)
{
    if (!stacks_state.initialised) {
        return STACKS_OTHER;
    }
    return stack_table_intern(&stacks_state.table, frames, depth);
}

cpu_sums *stacks_cpu(uint32_t id)
{
    return stacks_state.initialised ? stack_table_value(&stacks_state.table, id) : NULL;
}

const stack_table *stacks_table(void)
{
    return stacks_state.initialised ? &stacks_state.table : NULL;
}

size_t stacks_memory_bytes(void)
{
    return stacks_state.initialised ? stack_table_memory_bytes(&stacks_state.table) : 0;
}

void stacks_release(void)
{
    if (stacks_state.initialised) {
        stack_table_release(&stacks_state.table);
        stacks_state.initialised = 0;
    }
}
