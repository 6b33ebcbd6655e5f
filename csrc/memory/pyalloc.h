/* pyalloc: wraps Python's "mem" and "object" allocator domains around the
 * existing allocators (PyMem_SetAllocator), so that bytes allocated through them
 * are counted as Python's.  While a wrapped call runs, the thread's python_depth
 * is raised, so whatever the domain passes on to malloc is not counted again as
 * native.  The raw domain is left alone: it is malloc, and what comes through it
 * (interpreter buffers, C extensions) is native. */
#ifndef PYROMETER_PYALLOC_H
#define PYROMETER_PYALLOC_H

#include "memhooks_api.h"

/* GIL held.  Verifies that block sizes can be read back (see pymalloc_arenas.c);
 * returns whether Python frees are counted by size (1) or not at all (0). */
int pyalloc_install(const memhooks_api *api, int64_t window_bytes);
void pyalloc_uninstall(void);
/* Python's process-wide net count since its last sample (GIL held): for the
 * profiler's own work, which puts it back as it was (mem_profile_pause). */
int64_t pyalloc_net(void);
void pyalloc_set_net(int64_t net);

#endif
