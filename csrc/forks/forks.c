#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "forks.h"
#include "../unseen/stand_in.h"

#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 4

static struct {
    void (*stop[MAX_THREADS])(void);
    void (*start[MAX_THREADS])(void);
    int count;
    int hooks_registered;   /* os.register_at_fork is for the life of the process */
    int stopped;            /* the threads were stopped for a fork in progress */
    int in_wrapper;         /* inside our os.fork: it starts the threads itself */
    pid_t owner_pid;
    int stand_ins[2];       /* os.fork's and os.forkpty's (unseen/stand_in.h); -1: none */
} F = {.stand_ins = {-1, -1}};

static const char *const wrapped_names[2] = {"fork", "forkpty"};

void forks_wait_until_thread_gone(pid_t tid)
{
    /* pthread_join returns when the kernel clears the thread's tid, a little
     * before the thread stops counting among the process's threads (what
     * /proc/self/stat shows, and CPython 3.12+ reads).  The thread's
     * /proc/self/task entry goes at the same moment as the count. */
    if (tid <= 0) {
        return;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d", (int)tid);
    struct stat st;
    struct timespec pause = {0, 20000};
    for (int i = 0; i < 5000 && stat(path, &st) == 0; i++) {
        nanosleep(&pause, NULL);
    }
}

static void stop_all(void)
{
    if (F.stopped || getpid() != F.owner_pid) {
        return;
    }
    for (int i = F.count - 1; i >= 0; i--) {
        F.stop[i]();
    }
    F.stopped = 1;
}

static void start_all(void)
{
    if (!F.stopped || getpid() != F.owner_pid) {
        return;
    }
    F.stopped = 0;
    for (int i = 0; i < F.count; i++) {
        F.start[i]();
    }
}

static PyObject *before_fork(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    stop_all();
    Py_RETURN_NONE;
}

/* 3.13 warns after the after_in_parent hooks have run, so a thread started there
 * would still be counted: inside our os.fork, the wrapper starts the threads
 * once os.fork has returned.  A fork through a reference to the original
 * function taken before profiling started only has this hook. */
static PyObject *after_fork_in_parent(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    if (!F.in_wrapper) {
        start_all();
    }
    Py_RETURN_NONE;
}

/* os.fork and os.forkpty while profiling: the original, then the profiler's
 * threads again in the parent. */
static PyObject *fork_then_restart(PyObject *original, PyObject *args, PyObject *kwargs, void *data)
{
    (void)data;
    pid_t caller = getpid();
    F.in_wrapper++;
    PyObject *result = PyObject_Call(original, args, kwargs);
    if (getpid() != caller) {
        /* The child: forget_in_child has reset the count, and whatever profiles
         * the child (pyrometer's children.py) has registered its threads anew. */
        return result;
    }
    F.in_wrapper--;
    if (F.in_wrapper == 0) {
        start_all(); /* also when the fork failed: the threads were stopped */
    }
    return result;
}

static PyMethodDef hook_defs[] = {
    {"pyrometer_before_fork", before_fork, METH_NOARGS, NULL},
    {"pyrometer_after_fork_in_parent", after_fork_in_parent, METH_NOARGS, NULL},
};

static int register_hooks(void)
{
    PyObject *os = PyImport_ImportModule("os");
    PyObject *reg = os != NULL ? PyObject_GetAttrString(os, "register_at_fork") : NULL;
    Py_XDECREF(os);
    if (reg == NULL) {
        return -1;
    }
    PyObject *before = PyCFunction_New(&hook_defs[0], NULL);
    PyObject *parent = PyCFunction_New(&hook_defs[1], NULL);
    PyObject *args = PyTuple_New(0);
    PyObject *kwargs = before && parent && args
                           ? Py_BuildValue("{s:O,s:O}", "before", before, "after_in_parent", parent)
                           : NULL;
    PyObject *done = kwargs != NULL ? PyObject_Call(reg, args, kwargs) : NULL;
    Py_XDECREF(done);
    Py_XDECREF(kwargs);
    Py_XDECREF(args);
    Py_XDECREF(before);
    Py_XDECREF(parent);
    Py_DECREF(reg);
    return done != NULL ? 0 : -1;
}

/* Puts our stand-ins in os (and posix, the module os takes them from). */
static int wrap_os_functions(void)
{
    static const char *const modules[] = {"os", "posix", NULL};
    for (int i = 0; i < 2; i++) {
        int handle = stand_in_put(modules, wrapped_names[i], fork_then_restart, NULL);
        if (handle == -1) {
            return -1;
        }
        F.stand_ins[i] = handle; /* -2: a platform without it */
    }
    return 0;
}

/* Puts the originals back, where our stand-ins are still in place.  Keeps an
 * exception that is set (a failed registration reports it). */
static void unwrap_os_functions(void)
{
    for (int i = 0; i < 2; i++) {
        stand_in_take_back(F.stand_ins[i]);
        F.stand_ins[i] = -1;
    }
}

/* A forked child has none of the parent's profiler threads: whatever profiles
 * it registers its own.  The wrappers stay in os until then (forks_register
 * puts the originals back before it wraps them again). */
static void forget_in_child(void)
{
    F.count = 0;
    F.stopped = 0;
    F.in_wrapper = 0;
}

int forks_register(void (*stop)(void), void (*start)(void))
{
    if (F.count == MAX_THREADS) {
        PyErr_SetString(PyExc_RuntimeError, "too many profiler threads for the fork guard");
        return -1;
    }
    if (!F.hooks_registered) {
        if (register_hooks() != 0) {
            return -1;
        }
        if (pthread_atfork(NULL, NULL, forget_in_child) != 0) {
            PyErr_SetString(PyExc_OSError, "cannot register the fork handler");
            return -1;
        }
        F.hooks_registered = 1;
    }
    if (F.count == 0) {
        /* A forked child that profiles itself still has its parent's wrappers in
         * os (forget_in_child runs where no Python may): the originals go back
         * first, so that the wrappers never wrap a wrapper. */
        unwrap_os_functions();
        F.owner_pid = getpid();
        F.stopped = 0;
        F.in_wrapper = 0;
        if (wrap_os_functions() != 0) {
            unwrap_os_functions();
            return -1;
        }
    }
    F.stop[F.count] = stop;
    F.start[F.count] = start;
    F.count++;
    return 0;
}

void forks_unregister(void (*stop)(void))
{
    for (int i = 0; i < F.count; i++) {
        if (F.stop[i] == stop) {
            for (int j = i + 1; j < F.count; j++) {
                F.stop[j - 1] = F.stop[j];
                F.start[j - 1] = F.start[j];
            }
            F.count--;
            break;
        }
    }
    if (F.count == 0) {
        unwrap_os_functions();
    }
}
