/* pyrometer's own objects out of the program's garbage collections: see
 * gc_aside.c. */
#ifndef PYROMETER_GC_ASIDE_H
#define PYROMETER_GC_ASIDE_H

#include <Python.h>

/* With the GIL, gc.freeze() having been called before pyrometer made its own
 * objects and nothing frozen before that: the objects tracked since the freeze
 * to the permanent generation, those frozen then back to the oldest.  Returns
 * how many are set aside, or -1 with an exception set. */
Py_ssize_t gc_aside_set_aside(void);

#endif
