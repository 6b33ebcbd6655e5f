/* pyframe: the one place that knows how CPython lays out thread states and frames.
 *
 * The sampler reads frames of every thread while it holds the GIL, without
 * creating frame objects: PyThreadState_GetFrame() would allocate a PyFrameObject
 * per frame, which perturbs memory profiles and costs more than the sample.
 * Everything version-specific (3.11/3.12 _PyCFrame, 3.13 f_executable) lives in
 * pyframe_cpython.c behind this interface.  Callers must hold the GIL.
 */
#ifndef PYROMETER_PYFRAME_H
#define PYROMETER_PYFRAME_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <sys/types.h>

typedef const void *pyframe; /* an interpreter frame; NULL ends a walk */

pyframe pyframe_innermost(PyThreadState *ts); /* the thread's current complete frame */
pyframe pyframe_caller(pyframe f);            /* next complete frame outward */
PyCodeObject *pyframe_code(pyframe f);
int pyframe_lasti(pyframe f);                 /* index in code units of the instruction */

/* After Py_AddPendingCall from a thread other than the main one, make the main
 * thread notice the request at its next bytecode boundary.  CPython 3.11/3.12
 * recompute the "eval breaker" in the calling thread, where pending calls do not
 * count, so the request would otherwise wait for an unrelated event (a GIL
 * switch, a signal).  Any thread may call this; it only stores an atomic flag. */
void pyframe_wake_main_thread(PyInterpreterState *interp);

/* Whether the calling thread holds the GIL (callable without it: reads only the
 * thread's own state and the GIL holder, never allocates). */
int pyframe_gil_is_mine(void);
/* The calling thread's state whether or not it holds the GIL; NULL for a thread
 * that never ran Python. */
PyThreadState *pyframe_my_thread_state(void);

uint64_t pyframe_thread_serial(PyThreadState *ts); /* unique for the life of the interpreter */
pid_t pyframe_thread_tid(PyThreadState *ts);       /* kernel thread id */

#endif
