/*
 * _groundtruth: a test-only extension whose functions do a known amount of a
 * known kind of work, so that the accuracy tests can compare what pyrometer
 * reports with the truth.  Built by the test suite (tests/conftest.py), never
 * installed.
 *
 * One function per idea:
 *   spin_gil(ms)       burn ms of this thread's CPU in C, holding the GIL
 *   spin_nogil(ms)     burn ms of this thread's CPU in C, GIL released
 *   sleep_nogil(ms)    block ms of wall time (nanosleep), GIL released
 *   thread_cpu_time()  this thread's CPU clock, in seconds
 *
 * CPU is burnt by working until clock_gettime(CLOCK_THREAD_CPUTIME_ID) says the
 * calling thread's own CPU clock has advanced by ms: the time is real CPU time of
 * this thread, however long it takes on the wall clock.  spin_gil and spin_nogil
 * return (start, end), the thread's CPU clock in seconds before and after.
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

/* The work itself: a dependent chain of multiply-adds the compiler cannot drop
 * (the result goes to a volatile). */
static volatile uint64_t sink;

static uint64_t
work(uint64_t x, int64_t iterations)
{
    for (int64_t i = 0; i < iterations; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    }
    return x;
}

/* Burns ns of this thread's CPU time; *start and *end get the thread's CPU clock
 * before and after.  The clock is read rarely: each round does about half of the
 * CPU time still to burn (estimated from the speed of the rounds so far), down to
 * rounds of MIN_ROUND_NS, so a 7 ms burn reads the clock about ten times and
 * spends its time in plain user-mode arithmetic, like real native code.  Reading
 * a thread CPU clock is a system call, and a loop made mostly of system calls
 * would be a different kind of truth. */
#define FIRST_ROUND_ITERATIONS 1000
#define MIN_ROUND_NS 20000

static int
burn_cpu_ns(int64_t ns, int64_t *start, int64_t *end)
{
    int64_t t0 = thread_cpu_ns();
    if (t0 < 0) {
        return -1;
    }
    uint64_t x = sink + 1;
    int64_t done_iterations = 0;
    int64_t now = t0;
    int64_t round = FIRST_ROUND_ITERATIONS;
    while (now - t0 < ns) {
        x = work(x, round);
        done_iterations += round;
        now = thread_cpu_ns();
        if (now < 0) {
            return -1;
        }
        int64_t elapsed = now - t0;
        int64_t left = ns - elapsed;
        double ns_per_iteration = elapsed > 0 ? (double)elapsed / (double)done_iterations : 1.0;
        int64_t next_ns = left / 2 > MIN_ROUND_NS ? left / 2 : MIN_ROUND_NS;
        round = (int64_t)((double)next_ns / ns_per_iteration);
        if (round < 1) {
            round = 1;
        }
    }
    sink = x;
    *start = t0;
    *end = now;
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

/* (start, end): the thread's CPU clock in seconds around the burn, so a program
 * knows exactly how much CPU the native code used and when it began and ended,
 * without reading the clock again from Python. */
static PyObject *
cpu_interval(int64_t start, int64_t end)
{
    return Py_BuildValue("(dd)", (double)start * 1e-9, (double)end * 1e-9);
}

static PyObject *
gt_spin_gil(PyObject *self, PyObject *arg)
{
    (void)self;
    int64_t ns;
    if (ms_to_ns(arg, &ns) < 0) {
        return NULL;
    }
    int64_t start, end;
    if (burn_cpu_ns(ns, &start, &end) < 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return cpu_interval(start, end);
}

static PyObject *
gt_spin_nogil(PyObject *self, PyObject *arg)
{
    (void)self;
    int64_t ns, start = 0, end = 0;
    int rc;
    if (ms_to_ns(arg, &ns) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = burn_cpu_ns(ns, &start, &end);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return cpu_interval(start, end);
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
     "spin_gil(ms) -> (start, end): burn ms of this thread's CPU time in C, holding the GIL;\n"
     "start and end are the thread's CPU clock (seconds) before and after."},
    {"spin_nogil", gt_spin_nogil, METH_O,
     "spin_nogil(ms) -> (start, end): burn ms of this thread's CPU time in C with the GIL\n"
     "released; start and end are the thread's CPU clock (seconds) before and after."},
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
