/* pymalloc_arenas: tells CPython's small-object blocks from malloc blocks, with
 * their size.  See pymalloc_arenas.c. */
#ifndef PYROMETER_PYMALLOC_ARENAS_H
#define PYROMETER_PYMALLOC_ARENAS_H

#include <stddef.h>

/* From the library's constructor; does nothing in a process without CPython. */
void pymalloc_arenas_install(void);
/* Whether every arena of the process is known (installed before the first one
 * and never out of room). */
int pymalloc_arenas_tracking(void);
/* The size class of a pymalloc block, or 0 if p is not in a pymalloc arena.
 * Callers hold the GIL. */
size_t pymalloc_arenas_block_size(const void *p);

#endif
