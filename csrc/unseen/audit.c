/* audit: see audit.h. */
#include "audit.h"

#include <string.h>

#define WATCHED 8
#define EVENT_NAME 48

static struct {
    int added;                        /* the hook is in: for the life of the process */
    int n;                            /* events[0..n) have a watcher */
    char events[WATCHED][EVENT_NAME];
    PyObject *watchers[WATCHED];
    PyInterpreterState *interp;       /* the watchers' */
} A;

#define WATCHED_NATIVE 4

static struct {
    int n;
    char events[WATCHED_NATIVE][EVENT_NAME];
    void (*fns[WATCHED_NATIVE])(void);
    PyInterpreterState *interp;
} N;

static int on_audit(const char *event, PyObject *args, void *data)
{
    (void)data;
    for (int i = 0; i < N.n; i++) {
        if (strcmp(event, N.events[i]) == 0 && PyInterpreterState_Get() == N.interp) {
            N.fns[i]();
        }
    }
    int at = -1;
    for (int i = 0; i < A.n && at < 0; i++) {
        at = strcmp(event, A.events[i]) == 0 ? i : -1;
    }
    if (at < 0 || PyInterpreterState_Get() != A.interp) {
        return 0;
    }
    PyObject *name = PyUnicode_FromString(event);
    PyObject *watcher = Py_NewRef(A.watchers[at]);
    PyObject *r = name != NULL ? PyObject_CallFunctionObjArgs(watcher, name, args, NULL) : NULL;
    if (r == NULL) {
        PyErr_WriteUnraisable(watcher);
    }
    Py_XDECREF(r);
    Py_XDECREF(name);
    Py_DECREF(watcher);
    return 0;
}

static int add_hook(void)
{
    if (!A.added) {
        if (PySys_AddAuditHook(on_audit, NULL) != 0) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_RuntimeError, "the audit hook was refused");
            }
            return -1;
        }
        A.added = 1;
    }
    return 0;
}

int audit_watch_native(const char *event, void (*fn)(void))
{
    for (int i = 0; i < N.n; i++) {
        if (strcmp(event, N.events[i]) == 0 && N.fns[i] == fn) {
            return 0;
        }
    }
    if (N.n == WATCHED_NATIVE || strlen(event) >= EVENT_NAME) {
        PyErr_SetString(PyExc_RuntimeError, "audit_watch_native: no room for another event");
        return -1;
    }
    if (add_hook() != 0) {
        return -1;
    }
    N.interp = PyInterpreterState_Get();
    strcpy(N.events[N.n], event);
    N.fns[N.n] = fn;
    N.n++;
    return 0;
}

static PyObject *py_audit_watch(PyObject *module, PyObject *args)
{
    (void)module;
    const char *event;
    PyObject *watcher;
    if (!PyArg_ParseTuple(args, "sO:audit_watch", &event, &watcher)) {
        return NULL;
    }
    if (strlen(event) >= EVENT_NAME || (watcher != Py_None && !PyCallable_Check(watcher))) {
        PyErr_SetString(PyExc_ValueError, "audit_watch takes a short event name and a callable or None");
        return NULL;
    }
    if (watcher != Py_None && add_hook() != 0) {
        return NULL;
    }
    if (A.n > 0 && PyInterpreterState_Get() != A.interp) {
        PyErr_SetString(PyExc_RuntimeError, "audit_watch: the main interpreter's only");
        return NULL;
    }
    int at = -1;
    for (int i = 0; i < A.n && at < 0; i++) {
        at = strcmp(event, A.events[i]) == 0 ? i : -1;
    }
    if (at >= 0) {
        /* The last takes its place: on_audit never sees a gap. */
        PyObject *old = A.watchers[at];
        if (watcher != Py_None) {
            A.watchers[at] = Py_NewRef(watcher);
        } else {
            A.n--;
            memmove(A.events[at], A.events[A.n], EVENT_NAME);
            A.watchers[at] = A.watchers[A.n];
            A.watchers[A.n] = NULL;
        }
        Py_DECREF(old);
    } else if (watcher != Py_None) {
        if (A.n == WATCHED) {
            PyErr_SetString(PyExc_RuntimeError, "audit_watch: no room for another event");
            return NULL;
        }
        strcpy(A.events[A.n], event);
        A.watchers[A.n] = Py_NewRef(watcher);
        A.interp = PyInterpreterState_Get();
        A.n++;
    }
    Py_RETURN_NONE;
}

PyMethodDef audit_methods[] = {
    {"audit_watch", py_audit_watch, METH_VARARGS,
     "audit_watch(event, watcher)\nCall watcher(event, args) on each audit event of that name; "
     "watcher None stops."},
    {NULL, NULL, 0, NULL},
};
