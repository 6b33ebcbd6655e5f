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
 *   malloc_bytes(n)    malloc n bytes and touch every page; returns a handle (int)
 *   malloc_bytes_nogil(n)
 *                      the same, with the GIL released around malloc and the
 *                      touching (the sample callback then runs without it)
 *   free_handle(h)     free the block of a handle from malloc_bytes
 *   malloc_free(n)     malloc n bytes, touch them and free them at once
 *   memcpy_bytes(total, chunk)
 *                      copy total bytes with memcpy calls of chunk bytes between
 *                      two buffers allocated once per call
 *   c_thread_malloc(total, chunk)
 *                      start a pthread from C (no Python state) that mallocs total
 *                      bytes in chunks, then frees them all; join it, GIL released
 *   hold_unstarted_thread_state() / drop_unstarted_thread_state()
 *                      make (and later delete) a thread state that no thread runs,
 *                      as CPython makes one for a thread it is starting, before the
 *                      thread runs: its ids are its creator's (3.10, 3.11) or 0
 *                      (3.12+)
 *   crash(how)         end the process from C, the way native code can: "segv" (a
 *                      store to a page mapped without access: a real fault),
 *                      "abort" (abort()), "exit" (_exit(3), no Python involved)
 *
 * CPU is burnt by working until clock_gettime(CLOCK_THREAD_CPUTIME_ID) says the
 * calling thread's own CPU clock has advanced by ms: the time is real CPU time of
 * this thread, however long it takes on the wall clock.  spin_gil and spin_nogil
 * return (start, end), the thread's CPU clock in seconds before and after.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

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

/* ---- memory ----------------------------------------------------------------
 *
 * Every block is malloc'd by this library, so it reaches the profiler as a
 * native allocation (the interposed malloc), never through Python's allocators.
 * The handle table is static, so keeping or dropping a handle allocates nothing.
 */
#define MAX_HANDLES 65536
#define PAGE_BYTES 4096

static void *handles[MAX_HANDLES];
static Py_ssize_t next_handle; /* handles below it were given out (reused once freed); GIL held */

/* Writes one byte per page, so the block is really mapped, not just reserved. */
static void
touch(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i += PAGE_BYTES) {
        p[i] = (unsigned char)(i | 1);
    }
    if (n > 0) {
        p[n - 1] = 1;
    }
}

static int
size_arg(PyObject *arg, size_t *n, const char *what)
{
    Py_ssize_t v = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (v < 0) {
        PyErr_Format(PyExc_ValueError, "%s must be >= 0", what);
        return -1;
    }
    *n = (size_t)v;
    return 0;
}

static PyObject *
malloc_bytes(PyObject *arg, int release_gil)
{
    size_t n;
    if (size_arg(arg, &n, "n") < 0) {
        return NULL;
    }
    unsigned char *p;
    if (release_gil) {
        Py_BEGIN_ALLOW_THREADS
        p = malloc(n > 0 ? n : 1);
        if (p != NULL) {
            touch(p, n);
        }
        Py_END_ALLOW_THREADS
    } else {
        p = malloc(n > 0 ? n : 1);
        if (p != NULL) {
            touch(p, n);
        }
    }
    if (p == NULL) {
        return PyErr_NoMemory();
    }
    /* The slot is chosen with the GIL held again: chosen before the GIL was
     * released, another thread could take the same one meanwhile, and both
     * got one handle (the stress test's second free of it failed). */
    Py_ssize_t h = 0;
    while (h < next_handle && handles[h] != NULL) {
        h++;
    }
    if (h == MAX_HANDLES) {
        free(p);
        PyErr_SetString(PyExc_MemoryError, "no free handle");
        return NULL;
    }
    handles[h] = p;
    if (h == next_handle) {
        next_handle++;
    }
    return PyLong_FromSsize_t(h);
}

static PyObject *
gt_malloc_bytes(PyObject *self, PyObject *arg)
{
    (void)self;
    return malloc_bytes(arg, 0);
}

static PyObject *
gt_malloc_bytes_nogil(PyObject *self, PyObject *arg)
{
    (void)self;
    return malloc_bytes(arg, 1);
}

static PyObject *
gt_free_handle(PyObject *self, PyObject *arg)
{
    (void)self;
    Py_ssize_t h = PyLong_AsSsize_t(arg);
    if (h == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (h < 0 || h >= next_handle || handles[h] == NULL) {
        PyErr_Format(PyExc_ValueError, "%zd is not a live handle", h);
        return NULL;
    }
    free(handles[h]);
    handles[h] = NULL;
    Py_RETURN_NONE;
}

static PyObject *
gt_malloc_free(PyObject *self, PyObject *arg)
{
    (void)self;
    size_t n;
    if (size_arg(arg, &n, "n") < 0) {
        return NULL;
    }
    unsigned char *p = malloc(n > 0 ? n : 1);
    if (p == NULL) {
        return PyErr_NoMemory();
    }
    touch(p, n);
    free(p);
    Py_RETURN_NONE;
}

/* Called through a volatile pointer: the compiler can neither inline the copies
 * nor drop them as dead stores, so every one reaches the (interposed) memcpy. */
static void *(*volatile copy_fn)(void *restrict, const void *restrict, size_t) = memcpy;

static PyObject *
gt_memcpy_bytes(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *total_arg, *chunk_arg;
    size_t total, chunk;
    if (!PyArg_ParseTuple(args, "OO:memcpy_bytes", &total_arg, &chunk_arg) ||
        size_arg(total_arg, &total, "total") < 0 || size_arg(chunk_arg, &chunk, "chunk") < 0) {
        return NULL;
    }
    if (chunk == 0) {
        PyErr_SetString(PyExc_ValueError, "chunk must be > 0");
        return NULL;
    }
    unsigned char *a = malloc(chunk), *b = malloc(chunk);
    if (a == NULL || b == NULL) {
        free(a);
        free(b);
        return PyErr_NoMemory();
    }
    memset(a, 7, chunk);
    memset(b, 9, chunk);
    size_t done = 0;
    int flip = 0;
    while (done < total) {
        size_t n = total - done < chunk ? total - done : chunk;
        if (flip) {
            copy_fn(a, b, n);
        } else {
            copy_fn(b, a, n);
        }
        flip = !flip;
        done += n;
    }
    sink += a[chunk / 2] + b[chunk - 1];
    free(a);
    free(b);
    return PyLong_FromSize_t(done);
}

struct thread_job {
    size_t total, chunk;
    int failed;
};

static void *
thread_malloc_main(void *arg)
{
    struct thread_job *job = arg;
    size_t count = (job->total + job->chunk - 1) / job->chunk;
    /* The list of blocks is itself malloc'd by this thread (count pointers: a few
     * hundred bytes for 100 MB in 1 MiB chunks), so it is native memory too. */
    void **blocks = malloc((count > 0 ? count : 1) * sizeof *blocks);
    if (blocks == NULL) {
        job->failed = 1;
        return NULL;
    }
    size_t made = 0, done = 0;
    while (done < job->total) {
        size_t n = job->total - done < job->chunk ? job->total - done : job->chunk;
        blocks[made] = malloc(n);
        if (blocks[made] == NULL) {
            job->failed = 1;
            break;
        }
        touch(blocks[made], n);
        made++;
        done += n;
    }
    for (size_t i = 0; i < made; i++) {
        free(blocks[i]);
    }
    free(blocks);
    return NULL;
}

static PyObject *
gt_c_thread_malloc(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *total_arg, *chunk_arg;
    struct thread_job job = {0, 0, 0};
    if (!PyArg_ParseTuple(args, "OO:c_thread_malloc", &total_arg, &chunk_arg) ||
        size_arg(total_arg, &job.total, "total_bytes") < 0 || size_arg(chunk_arg, &job.chunk, "chunk") < 0) {
        return NULL;
    }
    if (job.chunk == 0) {
        PyErr_SetString(PyExc_ValueError, "chunk must be > 0");
        return NULL;
    }
    pthread_t thread;
    int rc = pthread_create(&thread, NULL, thread_malloc_main, &job);
    if (rc != 0) {
        errno = rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_BEGIN_ALLOW_THREADS
    rc = pthread_join(thread, NULL);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        errno = rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (job.failed) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}

/* ---- a thread being started --------------------------------------------------
 *
 * CPython makes a new thread's state in the thread that starts it
 * (_PyThreadState_Prealloc, exported by every supported version), and the new
 * thread fills in its own ids only when it first runs.  A thread that is slow to
 * start is that state for as long as it likes; holding one here makes the
 * moment last. */
static PyThreadState *unstarted;

static PyObject *
gt_hold_unstarted_thread_state(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    PyThreadState *(*prealloc)(PyInterpreterState *) =
        (PyThreadState * (*)(PyInterpreterState *)) dlsym(RTLD_DEFAULT, "_PyThreadState_Prealloc");
    if (prealloc == NULL) {
        PyErr_SetString(PyExc_NotImplementedError, "this CPython does not export _PyThreadState_Prealloc");
        return NULL;
    }
    if (unstarted != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "one unstarted thread state is held already");
        return NULL;
    }
    unstarted = prealloc(PyInterpreterState_Get());
    if (unstarted == NULL) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}

static PyObject *
gt_drop_unstarted_thread_state(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    if (unstarted != NULL) {
        PyThreadState_Clear(unstarted);
        PyThreadState_Delete(unstarted);
        unstarted = NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
gt_crash(PyObject *self, PyObject *arg)
{
    (void)self;
    const char *how = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
    if (how == NULL) {
        PyErr_SetString(PyExc_TypeError, "crash(how): how is 'segv', 'abort' or 'exit'");
        return NULL;
    }
    fflush(stdout);
    fflush(stderr);
    if (strcmp(how, "segv") == 0) {
        /* A fault from an instruction, as a bug in native code makes: a page that
         * exists but may not be touched (not a null pointer, whose use the
         * compiler may assume away). */
        long page = sysconf(_SC_PAGESIZE);
        void *p = mmap(NULL, (size_t)page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        *(volatile char *)p = 1;
    } else if (strcmp(how, "abort") == 0) {
        abort();
    } else if (strcmp(how, "exit") == 0) {
        _exit(3);
    }
    PyErr_Format(PyExc_ValueError, "crash(how): unknown %R", arg);
    return NULL;
}

/* Spinner: an object whose multiplication burns CPU holding the GIL, `spinner *
 * ms` -> (start, end) as spin_gil(ms): native work done by an operator (a
 * BINARY_OP, not a call), as a bytes repeat or a numpy operation does. */
static PyObject *
gt_spinner_multiply(PyObject *left, PyObject *right)
{
    return gt_spin_gil(NULL, right == NULL ? left : right);
}

static PyNumberMethods gt_spinner_number = {
    .nb_multiply = gt_spinner_multiply,
};

static PyTypeObject gt_spinner_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_groundtruth.Spinner",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Spinner() * ms -> (start, end): burn ms of this thread's CPU time in C holding the GIL,\n"
              "inside the multiplication (start and end as spin_gil's).",
    .tp_new = PyType_GenericNew,
    .tp_as_number = &gt_spinner_number,
};

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
    {"malloc_bytes", gt_malloc_bytes, METH_O,
     "malloc_bytes(n) -> handle: malloc n bytes in C and touch every page; the block\n"
     "stays allocated until free_handle(handle)."},
    {"malloc_bytes_nogil", gt_malloc_bytes_nogil, METH_O,
     "malloc_bytes_nogil(n) -> handle: as malloc_bytes, with the GIL released around the\n"
     "malloc and the touching."},
    {"free_handle", gt_free_handle, METH_O,
     "free_handle(handle): free the block malloc_bytes returned the handle of."},
    {"malloc_free", gt_malloc_free, METH_O,
     "malloc_free(n): malloc n bytes in C, touch them and free them at once."},
    {"memcpy_bytes", gt_memcpy_bytes, METH_VARARGS,
     "memcpy_bytes(total, chunk) -> total: copy total bytes in memcpy calls of chunk bytes\n"
     "between two buffers of chunk bytes, allocated once (GIL held)."},
    {"c_thread_malloc", gt_c_thread_malloc, METH_VARARGS,
     "c_thread_malloc(total_bytes, chunk): a pthread started from C (no Python state)\n"
     "mallocs total_bytes in chunks, then frees them all; joined with the GIL released."},
    {"hold_unstarted_thread_state", gt_hold_unstarted_thread_state, METH_NOARGS,
     "hold_unstarted_thread_state(): make a thread state that no thread runs yet, as CPython\n"
     "makes one for a thread it starts (its ids are not a running thread's)."},
    {"drop_unstarted_thread_state", gt_drop_unstarted_thread_state, METH_NOARGS,
     "drop_unstarted_thread_state(): delete the state hold_unstarted_thread_state made."},
    {"crash", gt_crash, METH_O,
     "crash(how): end the process from C: 'segv' (a real fault), 'abort' (abort()), 'exit' (_exit(3))."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef gt_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_groundtruth",
    .m_doc = "Test-only ground truth: known amounts of native CPU, GIL-free CPU, blocking,\n"
              "native allocation and copying.",
    .m_size = 0,
    .m_methods = gt_methods,
};

PyMODINIT_FUNC
PyInit__groundtruth(void)
{
    if (PyType_Ready(&gt_spinner_type) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&gt_module);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(&gt_spinner_type);
    if (PyModule_AddObject(module, "Spinner", (PyObject *)&gt_spinner_type) < 0) {
        Py_DECREF(&gt_spinner_type);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
