/* pyrometer's own objects out of the program's garbage collections: see
 * gc_aside.c. */
#ifndef PYROMETER_GC_ASIDE_H
#define PYROMETER_GC_ASIDE_H

#include <Python.h>

/* With the GIL.  The mark, before pyrometer makes its own objects: what is
 * frozen already is held aside and the rest frozen.  0, or -1 with an
 * exception set. */
int gc_aside_mark(void);
/* After the mark: the objects tracked since it to the permanent generation
 * (with those frozen before it), those it froze back to the oldest.  0 (also
 * without a mark), or -1 with an exception set. */
int gc_aside_set_aside(void);
/* One object of pyrometer's made while the program runs (a code's weak
 * reference, before 3.12), to the permanent generation at once, and the
 * collector's count of new objects as if it had not been made: CPython's
 * test_gc asserts that count after gc.collect().  Before 3.12 only: from 3.12
 * nothing needs it (codes.c's code watcher makes no object). */
void gc_aside_hide(PyObject *op);
/* The mark undone, nothing set aside: 0, or -1 with an exception set. */
int gc_aside_release(void);

#endif
