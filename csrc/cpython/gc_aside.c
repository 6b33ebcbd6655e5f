/* pyrometer's own objects out of the program's garbage collections.
 *
 * Before the program's first line, the pyrometer command has imported about
 * 50 modules the program would not have (its own, argparse, json, signal's
 * enums...) and made its session: about 2,400 objects the collector tracks,
 * 22% more than an empty program's 11,100 (CPython 3.11).  Every full
 * collection the program makes or triggers visits them all:
 * pyperformance's gc_collect read 1.10-1.15x under pyrometer for that alone.
 *
 * CPython keeps objects no collection visits in its permanent generation
 * (gc.freeze()).  Freezing everything would be wrong the other way: the
 * program's interpreter start-up objects would no longer be visited, and its
 * collections would be cheaper than bare.  So the command marks where its own
 * objects start (gc_aside_mark): what was frozen already is held aside, and
 * gc.freeze() puts the interpreter's start-up objects, S, in the permanent
 * generation before pyrometer imports anything; just before the program's
 * first line, gc_aside_set_aside swaps them:
 *
 *     S aside (a list of ours)  ->  gc.freeze(): pyrometer's objects, P,
 *     permanent  ->  P aside, S permanent  ->  gc.unfreeze(): S to the oldest
 *     generation, as CPython's unfreeze puts them  ->  P permanent, with
 *     what was frozen before the mark.
 *
 * Only whole lists move, through CPython's own freeze and unfreeze; this file
 * relinks lists with pycore_gc.h's own accessors and nothing else.  P's
 * objects stay tracked, so their deallocation is as before (a deallocator
 * unlinks an object from whichever list holds it).  What a program can see:
 * gc.get_objects() and gc.get_referrers() no longer list pyrometer's objects
 * (which a bare run does not have), and gc.get_freeze_count() counts them; a
 * program's own gc.unfreeze() puts them back, in which case they are visited
 * again, as before this file. */
#define Py_BUILD_CORE 1
#include <Python.h>

#include "gc_aside.h"

#ifndef Py_GIL_DISABLED
#if PY_VERSION_HEX >= 0x030E0000
/* The internal headers' inline helpers leave parameters unused in a build
 * with the GIL. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <internal/pycore_interp.h>
#include <internal/pycore_gc.h> /* 3.14 no longer includes it there */
#pragma GCC diagnostic pop
#else
#include <internal/pycore_interp.h>
#include <internal/pycore_gc.h>
#endif

static void list_init(PyGC_Head *list) {
    list->_gc_prev = (uintptr_t)list;
    list->_gc_next = (uintptr_t)list;
}

static int list_empty(PyGC_Head *list) { return _PyGCHead_NEXT(list) == list; }

/* Every object of `from` appended to `to` (gcmodule.c's gc_list_merge); `from`
 * is left empty. */
static void list_merge(PyGC_Head *from, PyGC_Head *to) {
    if (!list_empty(from)) {
        PyGC_Head *to_tail = _PyGCHead_PREV(to);
        PyGC_Head *from_head = _PyGCHead_NEXT(from);
        PyGC_Head *from_tail = _PyGCHead_PREV(from);
        _PyGCHead_SET_NEXT(to_tail, from_head);
        _PyGCHead_SET_PREV(from_head, to_tail);
        _PyGCHead_SET_NEXT(from_tail, to);
        _PyGCHead_SET_PREV(to, from_tail);
    }
    list_init(from);
}

static int gc_call(PyObject *gc, const char *name) {
    PyObject *r = PyObject_CallMethod(gc, name, NULL);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

static PyGC_Head *permanent(void) { return &PyInterpreterState_Get()->gc.permanent_generation.head; }

/* What was frozen before the mark (3.12 starts with 375 objects frozen; a
 * sitecustomize may have frozen more): kept out of the way while the mark
 * holds the start-up objects in the permanent generation, then put back there,
 * frozen as it was.  An object freed meanwhile unlinks itself from this list
 * as from any. */
static PyGC_Head held;
static int marked;

int gc_aside_mark(void) {
    if (marked) {
        return 0;
    }
    PyObject *gc = PyImport_ImportModule("gc");
    if (gc == NULL) {
        return -1;
    }
    list_init(&held);
    list_merge(permanent(), &held);
    int rc = gc_call(gc, "freeze");
    if (rc == 0) {
        marked = 1;
    } else {
        list_merge(&held, permanent());
    }
    Py_DECREF(gc);
    return rc;
}

int gc_aside_set_aside(void) {
    if (!marked) {
        return 0;
    }
    marked = 0;
    PyObject *gc = PyImport_ImportModule("gc");
    if (gc == NULL) {
        list_merge(&held, permanent());
        return -1;
    }
    /* Both lists live on this stack only while this function runs.  A
     * collection that starts in between (a call below allocates) visits
     * neither, as it visits no frozen object, and an object freed meanwhile
     * unlinks itself from them as from any list. */
    PyGC_Head start_up, own;
    list_init(&start_up);
    list_init(&own);
    list_merge(permanent(), &start_up);
    int rc = gc_call(gc, "freeze");
    if (rc == 0) {
        list_merge(permanent(), &own);
        list_merge(&start_up, permanent());
        rc = gc_call(gc, "unfreeze");
        list_merge(&own, permanent()); /* if unfreeze failed: frozen, with the start-up objects */
    } else {
        list_merge(&start_up, permanent());
        (void)gc_call(gc, "unfreeze");
    }
    list_merge(&held, permanent());
    Py_DECREF(gc);
    return rc;
}

int gc_aside_release(void) {
    if (!marked) {
        return 0;
    }
    marked = 0;
    PyObject *gc = PyImport_ImportModule("gc");
    int rc = gc != NULL ? gc_call(gc, "unfreeze") : -1;
    list_merge(&held, permanent());
    Py_XDECREF(gc);
    return rc;
}

void gc_aside_hide(PyObject *op) {
#if PY_VERSION_HEX < 0x030C0000
    struct _gc_runtime_state *gcstate = &PyInterpreterState_Get()->gc;
    if (gcstate->collecting || !_PyObject_GC_IS_TRACKED(op)) {
        return; /* in a collection its lists are being walked: left where it is */
    }
    PyGC_Head *g = _Py_AS_GC(op);
    PyGC_Head *prev = _PyGCHead_PREV(g), *next = _PyGCHead_NEXT(g);
    _PyGCHead_SET_NEXT(prev, next);
    _PyGCHead_SET_PREV(next, prev);
    PyGC_Head *list = permanent();
    PyGC_Head *tail = _PyGCHead_PREV(list);
    _PyGCHead_SET_NEXT(tail, g);
    _PyGCHead_SET_PREV(g, tail);
    _PyGCHead_SET_NEXT(g, list);
    _PyGCHead_SET_PREV(list, g);
    if (gcstate->generations[0].count > 0) {
        gcstate->generations[0].count--; /* as if never made: its allocation counted one */
    }
#else
    (void)op;
#endif
}

#else /* Py_GIL_DISABLED: no generation lists (pyrometer refuses these builds) */

void gc_aside_hide(PyObject *op) { (void)op; }

int gc_aside_mark(void) { return 0; }

int gc_aside_set_aside(void) { return 0; }

int gc_aside_release(void) { return 0; }

#endif
