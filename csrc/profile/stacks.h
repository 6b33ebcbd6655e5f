/* stacks: the profile's call stacks.  Besides its line, each sample is charged
 * to the stack it was taken on: the frames of reported files from the root to
 * the line charged (the stack's leaf), each frame a (site, line) as the line
 * table keys it.  Interned in a stack_table (stack_table.h): at most
 * STACKS_CAP distinct stacks per process, past which the figures go to one
 * "other" bucket, and at most STACKS_MAX_DEPTH reported frames a stack, the
 * innermost (a deeper stack is cut at its root end: its figures stay whole).
 * The CPU figures are the sampler's (cpu_sums, the same windows as the lines);
 * the memory side and the GPU side keep theirs by stack id (mem_profile.c,
 * gpu.c).  Stack STACKS_ROOT (no reported frame) is the header's unattributed.
 * Callers hold the GIL.
 */
#ifndef PYROMETER_STACKS_H
#define PYROMETER_STACKS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "../cpython/pyframe.h"
#include "line_stats.h"
#include "stack_table.h"

#define STACKS_CAP 20000
#define STACKS_MAX_DEPTH 128
#define STACKS_ROOT STACK_TABLE_ROOT
#define STACKS_OTHER STACK_TABLE_OTHER

int stacks_init(void);
/* The stack whose leaf is `reported` (the nearest frame of a reported file, as
 * codes_locate finds it; NULL: STACKS_ROOT).  Registers the code objects it
 * meets (codes_lookup: calls CPython).  Returns STACKS_OTHER past the cap.
 * reported_line: the leaf's line, as the caller charges it (the sampler's may be
 * where the thread stood at its request, not where it answers); -1: read it. */
uint32_t stacks_of(pyframe reported, int reported_line);
/* The stack of a sample whose innermost frames have returned since it was
 * taken: `returned` (their reported frames, innermost first, each charged at
 * its line then), then the reported frames from `caller` (the frame they
 * returned to) outward, caller's line being caller_line (-1: read it). */
uint32_t stacks_of_returned(const stack_frame *returned, int n_returned, pyframe caller, int caller_line);
/* The same inside an allocator (no call into CPython, no lock): 0 when a code
 * object on the way is not known yet (codes_find), else 1 with *id set. */
int stacks_of_known(pyframe reported, uint32_t *id);
/* The stack of frames a memory sample recorded, root first. */
uint32_t stacks_intern(const stack_frame *frames, int depth);
/* The CPU sums of a stack (STACKS_OTHER included); NULL when not known. */
cpu_sums *stacks_cpu(uint32_t id);
/* The table, for collection: nodes, count.  NULL before stacks_init. */
const stack_table *stacks_table(void);
size_t stacks_memory_bytes(void);
void stacks_release(void);

#endif
