/* stand_in: a builtin function of a module replaced, while profiling, by one
 * the program cannot tell from it.
 *
 * pyrometer must see a few of the program's calls (os.fork, os._exit,
 * os.waitpid, os.wait, _signal.signal: docs/how-it-works.md, "What pyrometer
 * replaces").  A Python function put in their place is seen: its __module__,
 * its __qualname__, its code and signature, a frame of pyrometer's in every
 * traceback through it (CPython's test_signal checks signal.signal.__module__).
 * A stand-in is a builtin function like the original: the same __name__,
 * __qualname__, __module__, __self__ (the module), __doc__ and
 * __text_signature__ (so inspect.signature gives the same), put in every
 * module that held the original (os and posix), so that `os.fork is
 * posix.fork` stays true.  It calls the original with the same arguments, its
 * exceptions pass through untouched, and no Python frame of pyrometer's is on
 * the stack while the original runs.  What stays different: its identity
 * (nothing of the program's holds the original: it starts after they are put
 * in) and the equality with the original.
 *
 * Callers hold the GIL.
 */
#ifndef PYROMETER_STAND_IN_H
#define PYROMETER_STAND_IN_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* What a stand-in does when called: normally call original(*args, **kwargs)
 * somewhere in between; data is what stand_in_put was given. */
typedef PyObject *(*stand_in_call)(PyObject *original, PyObject *args, PyObject *kwargs, void *data);

/* Puts a stand-in for attribute `name` into each of `modules` (NULL-ended
 * names, "module" or "module:alias" for a module that holds it under another
 * name; the original is taken from the first, a plain name, and only modules
 * holding that same object get the stand-in).  A handle (>= 0); -2 where the first module
 * has no such attribute (a platform without it: nothing done); -1 with an
 * exception set. */
int stand_in_put(const char *const *modules, const char *name, stand_in_call call, void *data);

/* The original back wherever its stand-in still is, and the handle free. */
void stand_in_take_back(int handle);

/* The Python face: stand_in(modules, name, before=None, after=None) and
 * stand_in_take_back(handle), for pyrometer's Python side. */
extern PyMethodDef stand_in_methods[];

#endif
