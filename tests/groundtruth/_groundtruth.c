/*
 * _groundtruth: a test-only extension whose functions do a known amount of a
 * known kind of work, so that the accuracy tests can compare what pyrometer
 * reports with the truth.  Built by the test suite (tests/conftest.py), never
 * installed.
 *
 * One function per idea:
 *   spin_gil(ms)     burn ms of this thread's CPU in C, holding the GIL
 *   spin_nogil(ms)   burn ms of this thread's CPU in C, GIL released
 *   sleep_nogil(ms)  block ms of wall time (nanosleep), GIL released
 *
 * CPU is burnt by looping on clock_gettime(CLOCK_THREAD_CPUTIME_ID) until the
 * calling thread's own CPU clock has advanced by ms: the time is real CPU time of
 * this thread, however long it takes on the wall clock.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <time.h>

static int64_t
thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) {
        return -1;
    }
    return (int64_t)ts.tv_sec * 1000000000LL + (int64_t)ts.tv_nsec;
}

/* Some work between clock reads, so that the loop is not all system-call time:
 * volatile keeps the compiler from removing it. */
static volatile uint64_t sink;

static int
burn_cpu_ns(int64_t ns)
{
    int64_t start = thread_cpu_ns();
    if (start < 0) {
        return -1;
    }
    uint64_t x = sink + 1;
    for (;;) {
        for (int i = 0; i < 2000; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        }
        int64_t now = thread_cpu_ns();
        if (now < 0) {
            return -1;
        }
        if (now - start >= ns) {
            break;
        }
    }
    sink = x;
    return 0;
}

static int
sleep_ns(int64_t ns)
{
    struct timespec req = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
    struct timespec rem;
    while (nanosleep(&req, &rem) != 0) {
        if (errno != EINTR) {
            return -1;
        }
        req = rem; /* a signal (the profiler's timer) woke us: sleep the rest */
    }
    return 0;
}

static int
ms_to_ns(PyObject *arg, int64_t *ns)
{
    double ms = PyFloat_AsDouble(arg);
    if (ms == -1.0 && PyErr_Occurred()) {
        return -1;
    }
    if (!(ms >= 0.0) || ms > 1e9) {
        PyErr_SetString(PyExc_ValueError, "ms must be a number between 0 and 1e9");
        return -1;
    }
    *ns = (int64_t)(ms * 1e6);
    return 0;
}

static PyObject *
gt_spin_gil(PyObject *self, PyObject *arg)
{
    (void)self;
    int64_t ns;
    if (ms_to_ns(arg, &ns) < 0) {
        return NULL;
    }
    if (burn_cpu_ns(ns) < 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static PyObject *
gt_spin_nogil(PyObject *self, PyObject *arg)
{
    (void)self;
    int64_t ns;
    int rc;
    if (ms_to_ns(arg, &ns) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = burn_cpu_ns(ns);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static PyObject *
gt_sleep_nogil(PyObject *self, PyObject *arg)
{
    (void)self;
    int64_t ns;
    int rc;
    if (ms_to_ns(arg, &ns) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = sleep_ns(ns);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static PyObject *
gt_thread_cpu_time(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    int64_t ns = thread_cpu_ns();
    if (ns < 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyFloat_FromDouble((double)ns * 1e-9);
}

static PyMethodDef gt_methods[] = {
    {"spin_gil", gt_spin_gil, METH_O,
     "spin_gil(ms): burn ms of this thread's CPU time in C, holding the GIL."},
    {"spin_nogil", gt_spin_nogil, METH_O,
     "spin_nogil(ms): burn ms of this thread's CPU time in C with the GIL released."},
    {"sleep_nogil", gt_sleep_nogil, METH_O,
     "sleep_nogil(ms): block for ms of wall time (nanosleep) with the GIL released."},
    {"thread_cpu_time", gt_thread_cpu_time, METH_NOARGS,
     "thread_cpu_time(): this thread's CPU time in seconds (CLOCK_THREAD_CPUTIME_ID)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef gt_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_groundtruth",
    .m_doc = "Test-only ground truth: known amounts of native CPU, GIL-free CPU and blocking.",
    .m_size = 0,
    .m_methods = gt_methods,
};

PyMODINIT_FUNC
PyInit__groundtruth(void)
{
    return PyModule_Create(&gt_module);
}
