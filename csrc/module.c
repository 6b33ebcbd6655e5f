/* pyrometer._core: the Python boundary of the measuring core.
 *
 * Turns Python arguments into C options, C status codes into exceptions, and the
 * C aggregates into plain Python data for the profile model.  No measuring
 * happens here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "asyncio/awaits.h"
#include "common/paused.h"
#include "control/control.h"
#include "profile/codes.h"
#include "profile/filter.h"
#include "profile/line_stats.h"
#include "periodic/periodic.h"
#include "profile/stacks.h"
#include "common/table.h"
#include "ending/ending.h"
#include "gpu/gpu.h"
#include "memory/mem_profile.h"
#include "memory/memhooks_api.h"
#include "memory/pyalloc.h"
#include "cpython/gc_aside.h"
#include "cpython/pyframe.h"
#include "records.h"
#include "sampler/sampler.h"
#include "unseen/audit.h"
#include "unseen/stand_in.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <unistd.h>

/* A list of str as a NULL-terminated array of UTF-8 pointers that stay valid while
 * the list lives (PyUnicode_AsUTF8 caches the encoding in the str object). */
static const char **utf8_list(PyObject *seq, const char *what)
{
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    const char **out = PyMem_Calloc((size_t)n + 1, sizeof *out);
    if (out == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        out[i] = PyUnicode_Check(item) ? PyUnicode_AsUTF8(item) : NULL;
        if (out[i] == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_Format(PyExc_TypeError, "%s must contain only str", what);
            }
            PyMem_Free(out);
            Py_DECREF(fast);
            return NULL;
        }
    }
    Py_DECREF(fast); /* the items are kept alive by the caller's list */
    return out;
}

/* The code objects of a list, by address, NULL-terminated (PyMem; the caller
 * frees it).  The caller's list keeps them alive while they are compared. */
static const void **code_list(PyObject *seq)
{
    PyObject *fast = PySequence_Fast(seq, "program_codes must be a sequence");
    if (fast == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    const void **out = PyMem_Calloc((size_t)n + 1, sizeof *out);
    if (out == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyCode_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "program_codes must contain only code objects");
            PyMem_Free(out);
            Py_DECREF(fast);
            return NULL;
        }
        out[i] = item;
    }
    Py_DECREF(fast);
    return out;
}

/* The memory and GPU collectors' part in the sampler's work (sampler.h),
 * wired here, the one place that knows every collector.  The memory side's
 * state for each piece of the sampler's own work is kept per thread, pieces
 * ending in reverse order.  The sampler's three pieces (a snapshot, its start,
 * its restart after a fork) do not nest today; deeper than OWN_WORK_DEPTH, a
 * piece would be left counted as the program's. */
#define OWN_WORK_DEPTH 8
static _Thread_local pyalloc_own_work own_work[OWN_WORK_DEPTH];
static _Thread_local int own_work_depth;

static void memory_own_work_begin(void)
{
    if (own_work_depth < OWN_WORK_DEPTH) {
        pyalloc_own_work_begin(&own_work[own_work_depth]);
    }
    own_work_depth++;
}

static void memory_own_work_end(void)
{
    own_work_depth--;
    if (own_work_depth < OWN_WORK_DEPTH) {
        pyalloc_own_work_end(&own_work[own_work_depth]);
    }
}

static int register_sampler_clients(void)
{
    static int registered;
    if (registered) {
        return 0;
    }
    const sampler_client memory = {mem_profile_poll, mem_profile_drain, memory_own_work_begin, memory_own_work_end};
    const sampler_client gpu = {NULL, gpu_kernels_drain, NULL, NULL};
    if (sampler_add_client(&memory) != 0 || sampler_add_client(&gpu) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "the CPU sampler has no room for its clients");
        return -1;
    }
    const sampler_awaits asyncio = {awaits_begin, awaits_loop_waiting, awaits_loop_waiting_at, awaits_charge};
    sampler_set_awaits(&asyncio);
    registered = 1;
    return 0;
}

#if PY_VERSION_HEX < 0x030C0000
static PyObject *thread_start_stand_in(PyObject *original, PyObject *args, PyObject *kwargs, void *data)
{
    (void)data;
    sampler_thread_starting();
    return PyObject_Call(original, args, kwargs);
}
#endif

/* Where the program starts a thread, seen without replacing anything of its
 * own (sampler_thread_starting): CPython's audit event for it from 3.12
 * ("_thread.start_new_thread", and 3.13+ threading's
 * "_thread.start_joinable_thread"); before 3.12, which raises none, a
 * stand-in for the builtin _thread.start_new_thread, also where threading
 * holds it (its _start_new_thread: threading.Thread.start calls that).  For
 * the process's life; each does nothing while the sampler is stopped. */
static int see_thread_starts(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    if (audit_watch_native("_thread.start_new_thread", sampler_thread_starting) != 0 ||
        audit_watch_native("_thread.start_joinable_thread", sampler_thread_starting) != 0) {
        return -1;
    }
    return 0;
#else
    static const char *const modules[] = {"_thread", "threading:_start_new_thread", NULL};
    static int put = 0;
    if (!put) {
        if (stand_in_put(modules, "start_new_thread", thread_start_stand_in, NULL) == -1) {
            return -1;
        }
        put = 1;
    }
    return 0;
#endif
}

static PyObject *core_start(PyObject *module, PyObject *args, PyObject *kwargs)
{
    (void)module;
    static char *keywords[] = {"interval", "virtual_time", "include", "exclude", "own",
                               "only", "exclude_substrings", "profile_all", "memory_window",
                               "leak_detector", "program", "program_codes", "gpu", "start_off",
                               "control_file", "gpu_library_dirs", NULL};
    double interval;
    int virtual_time, profile_all, leak_detector = 1, start_off = 0;
    int gpu = 0; /* 0: off, 1: when a GPU is found, 2: asked for (--gpu) */
    long long memory_window = 0;
    PyObject *lists[6] = {NULL};
    PyObject *codes = NULL;
    const char *control_file = NULL;
    const char *gpu_library_dirs = NULL; /* where the kernel tier's library may be, beyond the search path */
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "dpOOOOOp|LpOOiizz:start", keywords, &interval,
                                     &virtual_time, &lists[0], &lists[1], &lists[2], &lists[3],
                                     &lists[4], &profile_all, &memory_window, &leak_detector,
                                     &lists[5], &codes, &gpu, &start_off, &control_file,
                                     &gpu_library_dirs)) {
        return NULL;
    }
    if (sampler_running()) {
        /* Before the rules change under a sampler that reads them. */
        PyErr_SetString(PyExc_RuntimeError, "the CPU sampler is already running");
        return NULL;
    }
    if (start_off < -1 || start_off > 1) {
        PyErr_SetString(PyExc_ValueError, "start_off must be 1 (paused), 0 (profiling) or -1 (as inherited)");
        return NULL;
    }
    if (memory_window < 0) {
        PyErr_SetString(PyExc_ValueError, "memory_window must be positive (0: no memory profiling)");
        return NULL;
    }
    if (!(interval >= 1e-5 && interval <= 10.0)) {
        PyErr_SetString(PyExc_ValueError, "sampling interval must be between 1e-5 and 10 seconds");
        return NULL;
    }
    static const char *names[] = {"include", "exclude", "own", "only", "exclude_substrings",
                                  "program"};
    const char **arrays[6] = {NULL};
    const void **code_array = NULL;
    int ok = 1;
    for (int i = 0; i < 6 && ok; i++) {
        if (lists[i] != NULL) { /* "program" is optional: NULL is an empty list */
            arrays[i] = utf8_list(lists[i], names[i]);
            ok = arrays[i] != NULL;
        }
    }
    if (ok && codes != NULL) {
        code_array = code_list(codes);
        ok = code_array != NULL;
    }
    if (ok) {
        filter_rules rules = {arrays[0], arrays[1], arrays[2], arrays[3], arrays[4], profile_all,
                              arrays[5], code_array};
        /* Other rules than the last run's: the codes' facts worked out under
         * those (which of them are reported) go. */
        if (!filter_is(&rules)) {
            if (codes_forget() != 0) {
                ok = 0;
            } else if (filter_configure(&rules) != 0) {
                PyErr_NoMemory();
                ok = 0;
            }
        }
    }
    for (int i = 0; i < 6; i++) {
        PyMem_Free(arrays[i]);
    }
    PyMem_Free(code_array);
    if (!ok) {
        return NULL;
    }
    sampler_options options = {(uint64_t)(interval * 1e9), virtual_time};
    if (register_sampler_clients() != 0) {
        return NULL;
    }
    if (control_begin(start_off, control_file) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return NULL;
    }
    if (memory_window > 0 && mem_profile_start((int64_t)memory_window, leak_detector) != 0) {
        return NULL;
    }
    if (see_thread_starts() != 0) {
        mem_profile_stop();
        return NULL;
    }
    if (sampler_start(&options) != 0) {
        mem_profile_stop();
        return NULL;
    }
    /* gpu: 0 off, 1 when a GPU is found, 2 asked for (--gpu); plus
     * 4 for the kernel tier (--gpu-kernels). */
    if ((gpu & 3) > 0 && gpu_start((gpu & 3) > 1, (gpu & 4) != 0, gpu_library_dirs, pyalloc_own_thread) != 0) {
        sampler_stop(0);
        mem_profile_stop();
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *core_stop(PyObject *module, PyObject *args, PyObject *kwargs)
{
    (void)module;
    static char *keywords[] = {"keep_thread", "asked", NULL};
    int keep_thread = 0;
    unsigned long long asked = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|pK:stop", keywords, &keep_thread, &asked)) {
        return NULL;
    }
    sampler_charge_last_window((uint64_t)asked);
    gpu_stop();
    mem_profile_stop();
    sampler_stop(keep_thread);
    codes_follow_program(NULL);
    Py_RETURN_NONE;
}

static PyObject *core_end_kept_thread(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    sampler_end_kept_thread();
    Py_RETURN_NONE;
}

/* A record's CPU sums as a named record (records.h), each kind of
 * estimated time with its own unit (see sampler_totals); await time is
 * measured only (awaits.h). */
static PyObject *cpu_sums_record(const cpu_sums *s, const sampler_totals *units)
{
    cpu_totals t, off, runq, wall;
    cpu_sums_resolve(s, units->unit_cpu_ns, &t);
    cpu_sums_resolve(s, units->unit_off_ns, &off);
    cpu_sums_resolve(s, units->unit_runq_ns, &runq);
    cpu_sums_resolve(s, units->unit_ns, &wall);
    double var[CPU_VARS];
    cpu_sums_variance(s, units->unit_ns, var);
    cpu_sums_figures r = {
        .python_ns = t.python_ns,
        .native_ns = t.native_ns,
        .system_ns = off.system_ns,
        .busy_ns = wall.busy_core_ns,
        .samples = s->samples,
        .gil_wait_ns = off.gil_wait_ns,
        .cpu_wait_ns = runq.cpu_wait_ns,
        .loop_idle_ns = off.loop_idle_ns,
        .await_ns = (double)s->await_ns,
        .python_var = var[VAR_PYTHON],
        .native_var = var[VAR_NATIVE],
        .system_var = var[VAR_SYSTEM],
        .gil_wait_var = var[VAR_GIL_WAIT],
        .cpu_wait_var = var[VAR_CPU_WAIT],
        .time_var = var[VAR_TIME],
    };
    return records_cpu_sums(&r);
}

static PyObject *collect_records(const sampler_totals *units)
{
    PyObject *records = PyList_New(0);
    if (records == NULL) {
        return NULL;
    }
    size_t cursor = 0;
    uint32_t id;
    int lineno;
    line_record *rec;
    while ((rec = line_stats_next(&cursor, &id, &lineno)) != NULL) {
        const site *where = sites_get(id);
        if (where == NULL) {
            continue;
        }
        PyObject *item = records_cpu_line(where, lineno, cpu_sums_record(&rec->cpu, units));
        if (item == NULL || PyList_Append(records, item) != 0) {
            Py_XDECREF(item);
            Py_DECREF(records);
            return NULL;
        }
        Py_DECREF(item);
    }
    return records;
}

/* The call stacks (stacks.h) as
 *   {"frames": [(filename, qualname, first line, line)],
 *    "nodes": [_core.StackNode(parent id, frame index, CPU sums or None)],
 *             the index is the id; the root's parent and frame are -1
 *    "other": CPU sums, "cap": ..., "max_depth": ...}
 * with the CPU sums as cpu_sums_record makes them (None: nothing charged, a prefix
 * of other stacks).  The memory and GPU sides give theirs by the same ids. */
static PyObject *collect_stacks(const sampler_totals *units)
{
    const stack_table *st = stacks_table();
    uint32_t count = st != NULL ? stack_table_count(st) : 0;
    PyObject *frames = PyList_New(0), *nodes = PyList_New(0), *other = NULL, *result = NULL;
    table frame_ids; /* (site, line) -> frame index */
    int have_ids = table_init(&frame_ids, sizeof(Py_ssize_t), 1024) == 0;
    static const cpu_sums nothing;
    if (frames == NULL || nodes == NULL || !have_ids) {
        if (!have_ids) {
            PyErr_NoMemory();
        }
        goto done;
    }
    for (uint32_t id = 0; id < count; id++) {
        const stack_node *node = stack_table_node(st, id);
        const cpu_sums *sums = stack_table_value(st, id);
        long parent = -1;
        Py_ssize_t frame = -1;
        if (id != STACKS_ROOT) {
            parent = (long)node->parent;
            table_key key = {node->frame.site, (uint64_t)(uint32_t)node->frame.lineno};
            int created;
            Py_ssize_t *index = table_upsert(&frame_ids, key, &created);
            const site *where = sites_get(node->frame.site);
            if (index == NULL || where == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            if (created) {
                PyObject *f = Py_BuildValue("(OOii)", where->filename, where->qualname, where->firstlineno,
                                            (int)node->frame.lineno);
                if (f == NULL || PyList_Append(frames, f) != 0) {
                    Py_XDECREF(f);
                    goto done;
                }
                Py_DECREF(f);
                *index = PyList_GET_SIZE(frames) - 1;
            }
            frame = *index;
        }
        PyObject *cpu = memcmp(sums, &nothing, sizeof nothing) == 0 ? (Py_INCREF(Py_None), Py_None)
                                                                    : cpu_sums_record(sums, units);
        PyObject *item = records_stack_node(parent, frame, cpu);
        if (item == NULL || PyList_Append(nodes, item) != 0) {
            Py_XDECREF(item);
            goto done;
        }
        Py_DECREF(item);
    }
    other = cpu_sums_record(st != NULL ? stack_table_value(st, STACKS_OTHER) : &nothing, units);
    if (other != NULL) {
        result = Py_BuildValue("{s:O,s:O,s:O,s:i,s:i}", "frames", frames, "nodes", nodes, "other", other, "cap",
                               STACKS_CAP, "max_depth", STACKS_MAX_DEPTH);
    }
done:
    if (have_ids) {
        table_release(&frame_ids);
    }
    Py_XDECREF(frames);
    Py_XDECREF(nodes);
    Py_XDECREF(other);
    return result;
}

static PyObject *collect_all(void);

/* The GPU side's aggregates (gpu.h) added to a collection under "gpu": None
 * when GPU profiling was not started. */
static PyObject *with_gpu(PyObject *all)
{
    if (all == NULL) {
        return NULL;
    }
    PyObject *gpu = records_gpu();
    if (gpu == NULL || PyDict_SetItemString(all, "gpu", gpu) != 0) {
        Py_XDECREF(gpu);
        Py_DECREF(all);
        return NULL;
    }
    Py_DECREF(gpu);
    return all;
}

static PyObject *core_collect(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    /* While profiling (a periodic report, or a run that ends by exec or a
     * signal), what the collection allocates is the profiler's, and a memory
     * sample taken meanwhile would change the tables being read. */
    int64_t paused = mem_profile_pause();
    PyObject *result = collect_all();
    mem_profile_resume(paused);
    return result;
}

static PyObject *collect_all(void)
{
    sampler_totals t;
    sampler_get_totals(&t);
    PyObject *records = collect_records(&t);
    if (records == NULL) {
        return NULL;
    }
    PyObject *unattributed = cpu_sums_record(&t.unattributed, &t);
    if (unattributed == NULL) {
        Py_DECREF(records);
        return NULL;
    }
    PyObject *memory = records_memory();
    if (memory == NULL) {
        Py_DECREF(records);
        Py_DECREF(unattributed);
        return NULL;
    }
    PyObject *stacks = collect_stacks(&t);
    if (stacks == NULL) {
        Py_DECREF(records);
        Py_DECREF(unattributed);
        Py_DECREF(memory);
        return NULL;
    }
    PyObject *all = Py_BuildValue(
        "{s:N,s:N,s:N,s:N,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:l,s:n,s:K,s:K,s:K,s:K,s:K,s:K}", "memory", memory,
        "records", records, "stacks", stacks,
        "unattributed", unattributed, "start_wall_ns", (unsigned long long)t.start_wall_ns,
        "stop_wall_ns", (unsigned long long)t.stop_wall_ns, "snapshots",
        (unsigned long long)t.snapshots, "main_snapshots", (unsigned long long)t.main_snapshots,
        "spreads", (unsigned long long)t.spreads, "spread_peeks", (unsigned long long)t.spread_peeks,
        "threads_seen", (unsigned long long)t.threads_seen, "process_cpu_ns",
        (unsigned long long)t.process_cpu_ns, "sampler_cpu_ns", (unsigned long long)t.sampler_cpu_ns,
        "untracked_native_ns", (unsigned long long)t.untracked_native_ns, "periodic_cpu_ns",
        (unsigned long long)t.periodic_cpu_ns, "mean_interval_ns",
        t.mean_interval_ns, "n_cpus", t.n_cpus, "code_objects",
        (Py_ssize_t)codes_count(), "profiler_memory_bytes",
        (unsigned long long)(t.memory_bytes + codes_memory_bytes() + line_stats_memory_bytes() +
                             stacks_memory_bytes() + mem_profile_memory_bytes()),
        "code_objects_seen", (unsigned long long)codes_registered(), "functions_overflowed",
        (unsigned long long)sites_overflowed(), "paused_ns", (unsigned long long)t.paused_ns,
        "paused_at_end_ns", (unsigned long long)t.paused_at_end_ns, "process_cpu_at_pause_ns",
        (unsigned long long)t.process_cpu_at_pause_ns);
    return with_gpu(all);
}

static PyObject *core_periodic_socketpair(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    int fds[2];
    if (periodic_socketpair(fds) != 0) {
        return NULL;
    }
    return Py_BuildValue("(ii)", fds[0], fds[1]);
}

static PyObject *core_periodic_start(PyObject *module, PyObject *args)
{
    (void)module;
    double interval;
    int fd;
    PyObject *make_payload;
    if (!PyArg_ParseTuple(args, "diO:periodic_start", &interval, &fd, &make_payload)) {
        return NULL;
    }
    if (!(interval > 0.0 && interval < 1e9) || !PyCallable_Check(make_payload)) {
        PyErr_SetString(PyExc_ValueError, "periodic_start needs a positive interval and a callable");
        return NULL;
    }
    if (periodic_start((uint64_t)(interval * 1e9), fd, make_payload) != 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *core_periodic_stop(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    periodic_outcome outcome = periodic_stop();
    PyObject *error = outcome.error != NULL
                          ? PyUnicode_DecodeUTF8(outcome.error, (Py_ssize_t)strlen(outcome.error), "replace")
                          : Py_NewRef(Py_None);
    return error == NULL ? NULL : Py_BuildValue("(lNO)", outcome.written, error, outcome.quiet ? Py_True : Py_False);
}

static PyObject *core_ending_install(PyObject *module, PyObject *args, PyObject *kwargs)
{
    (void)module;
    static char *keywords[] = {"write_profile", "child", NULL};
    PyObject *write_profile;
    int child = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|p:ending_install", keywords, &write_profile, &child)) {
        return NULL;
    }
    if (!PyCallable_Check(write_profile)) {
        PyErr_SetString(PyExc_TypeError, "ending_install needs a callable");
        return NULL;
    }
    if (ending_install(write_profile, child) != 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *core_ending_uninstall(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    ending_uninstall();
    Py_RETURN_NONE;
}

static PyObject *core_ending_reinstall(PyObject *module, PyObject *signum)
{
    (void)module;
    long n = PyLong_AsLong(signum);
    if (n == -1 && PyErr_Occurred()) {
        return NULL;
    }
    ending_reinstall((int)n);
    Py_RETURN_NONE;
}

static PyObject *core_ending_signal(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyLong_FromLong(ending_signal());
}

static PyObject *core_ending_die(PyObject *module, PyObject *signum)
{
    (void)module;
    long n = PyLong_AsLong(signum);
    if (n == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (n <= 0 || n >= NSIG) {
        PyErr_SetString(PyExc_ValueError, "not a signal number");
        return NULL;
    }
    ending_die((int)n);
    Py_RETURN_NONE; /* not reached */
}

static PyObject *core_reset(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    if (sampler_running()) {
        PyErr_SetString(PyExc_RuntimeError, "stop the sampler before resetting the profile");
        return NULL;
    }
    line_stats_release();
    stacks_release();
    awaits_release();
    mem_profile_release();
    gpu_release();
    codes_new_run();
    sampler_release();
    Py_RETURN_NONE;
}

/* Run a program as the interpreter runs a script file or standard input:
 * through its file tokenizer (PyRun_FileExFlags), whose errors differ from
 * compile()'s string tokenizer (a non-UTF-8 source without a coding line, a null
 * byte), and which can honour a coding line only where it can seek its file's
 * descriptor (not a pipe on standard input).  source is a descriptor (read from
 * where it stands) or bytes, read as from a pipe (fmemopen has no descriptor,
 * so a coding line fails there exactly as on a pipe). */
/* A stream reading a pipe that holds n bytes of data, its writing end closed;
 * NULL when they do not fit one (the pipe's capacity, at most the system's
 * limit for one, /proc/sys/fs/pipe-max-size, 1 MiB by default). */
static FILE *pipe_of(const void *data, size_t n)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        return NULL;
    }
    if (n > 0 && n <= (size_t)INT_MAX) {
        (void)fcntl(fds[1], F_SETPIPE_SZ, (int)n); /* stays at 64 KiB where refused */
    }
    (void)fcntl(fds[1], F_SETFL, O_NONBLOCK);
    ssize_t written = n > 0 ? write(fds[1], data, n) : 0;
    close(fds[1]);
    FILE *fp = written == (ssize_t)n ? fdopen(fds[0], "rb") : NULL;
    if (fp == NULL) {
        close(fds[0]);
    }
    return fp;
}

static PyObject *core_run_file(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *source, *filename, *globals;
    if (!PyArg_ParseTuple(args, "OUO!:run_file", &source, &filename, &PyDict_Type, &globals)) {
        return NULL;
    }
    const char *name = PyUnicode_AsUTF8(filename);
    if (name == NULL) {
        return NULL;
    }
    FILE *fp = NULL;
    Py_buffer bytes = {0};
    int have_bytes = 0;
    if (PyLong_Check(source)) {
        int fd = PyLong_AsLong(source) < 0 ? -1 : dup((int)PyLong_AsLong(source));
        if (fd < 0 || (fp = fdopen(fd, "rb")) == NULL) {
            if (fd >= 0) {
                close(fd);
            }
            return PyErr_Occurred() ? NULL : PyErr_SetFromErrno(PyExc_OSError);
        }
    } else {
        if (PyObject_GetBuffer(source, &bytes, PyBUF_SIMPLE) != 0) {
            return NULL;
        }
        have_bytes = 1;
        /* What python read from a pipe is given to the tokenizer as a pipe again,
         * where it fits one: 3.14's takes a coding line by seeking the stream's
         * descriptor, which fails on a pipe as python's own does (ESPIPE), and
         * on fmemopen's stream, which has none, otherwise (EBADF). */
        fp = pipe_of(bytes.buf, (size_t)bytes.len);
        /* fmemopen refuses an empty buffer on older C libraries; one newline runs
         * the same as nothing. */
        static char newline[] = "\n";
        if (fp == NULL) {
            fp = bytes.len > 0 ? fmemopen(bytes.buf, (size_t)bytes.len, "rb") : fmemopen(newline, 1, "rb");
        }
        if (fp == NULL) {
            PyBuffer_Release(&bytes);
            return PyErr_SetFromErrno(PyExc_OSError);
        }
    }
    PyCompilerFlags flags = {0}; /* as the interpreter runs a script: no inherited flags */
    flags.cf_feature_version = PY_MINOR_VERSION;
    PyObject *result = PyRun_FileExFlags(fp, name, Py_file_input, globals, globals, 0, &flags);
    fclose(fp);
    if (have_bytes) {
        PyBuffer_Release(&bytes);
    }
    return result;
}

static PyObject *core_attach_memory(PyObject *module, PyObject *arg)
{
    (void)module;
    PyObject *bytes = NULL;
    if (!PyUnicode_FSConverter(arg, &bytes)) {
        return NULL;
    }
    const char *why = NULL;
    int rc = memhooks_api_attach(PyBytes_AS_STRING(bytes), &why);
    Py_DECREF(bytes);
    if (rc != 0) {
        PyErr_SetString(PyExc_OSError, why != NULL ? why : "cannot attach the memory library");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *core_detach_memory(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    if (sampler_running()) {
        PyErr_SetString(PyExc_RuntimeError, "detach_memory: stop profiling first");
        return NULL;
    }
    if (memhooks_api_detach() != 0) {
        PyErr_SetString(PyExc_OSError, "the memory library's functions could not all be taken out of the "
                                       "loaded objects' tables");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *core_memory_available(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    memhooks_api api;
    return PyBool_FromLong(memhooks_api_find(&api) == 0);
}

/* The program's top-level code, about to run: known from its start, so that a
 * memory sample queued before the first snapshot has registered it finds it
 * past a deep stack (mem_profile.c keeps the frames it cannot tell are not
 * reported, and past 24 only one known reported: without this, 2-11 MB of
 * numpy's ~25 imported on a program's first line were still unattributed). */
static PyObject *core_follow_code(PyObject *module, PyObject *code)
{
    (void)module;
    if (!PyCode_Check(code)) {
        PyErr_SetString(PyExc_TypeError, "follow_code: a code object is needed");
        return NULL;
    }
    if (sampler_running()) {
        codes_lookup((PyCodeObject *)code); /* NULL (out of memory) only loses the head start */
    }
    Py_RETURN_NONE;
}

/* The program's module dictionary, for the run: a sample whose frames have
 * returned into pyrometer's own (the program's last call, a long native one)
 * finds the functions it ran there (codes_find_through). */
static PyObject *core_follow_program(PyObject *module, PyObject *globals)
{
    (void)module;
    if (!PyDict_Check(globals)) {
        PyErr_SetString(PyExc_TypeError, "follow_program: a dictionary is needed");
        return NULL;
    }
    if (sampler_running()) {
        codes_follow_program(globals);
    }
    Py_RETURN_NONE;
}

static PyObject *core_code_lines(PyObject *module, PyObject *code)
{
    (void)module;
    if (!PyCode_Check(code)) {
        PyErr_SetString(PyExc_TypeError, "code_lines: a code object is needed");
        return NULL;
    }
    return codes_lines_both_ways((PyCodeObject *)code);
}

static PyObject *core_running(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyBool_FromLong(sampler_running());
}

/* pyrometer's own objects out of the program's collections (core/gc_aside.py). */
static PyObject *core_gc_mark(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    if (gc_aside_mark() != 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *core_gc_set_aside(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    if (gc_aside_set_aside() != 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *core_gc_release(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    if (gc_aside_release() != 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* The program's own start()/stop() (pyrometer.control): the new count. */
static PyObject *core_control_count(PyObject *module, PyObject *up)
{
    (void)module;
    int n = PyObject_IsTrue(up);
    if (n < 0) {
        return NULL;
    }
    int count = n ? control_count_up() : control_count_down();
    sampler_apply_control();
    return PyLong_FromLong(count);
}

static PyObject *core_control_paused(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyBool_FromLong(paused_now());
}

static PyObject *core_control_send(PyObject *module, PyObject *args)
{
    (void)module;
    int pid, on;
    if (!PyArg_ParseTuple(args, "ip:control_send", &pid, &on)) {
        return NULL;
    }
    if (pid <= 0) {
        PyErr_SetString(PyExc_ValueError, "pid must be positive");
        return NULL;
    }
    if (control_send(pid, on ? CONTROL_ON : CONTROL_OFF) != 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static PyMethodDef core_methods[] = {
    {"control_count", core_control_count, METH_O,
     "control_count(up)\nThe program's own start() (up true) or stop(): pauses or resumes to "
     "match (csrc/control/control.h); returns the new count."},
    {"control_paused", core_control_paused, METH_NOARGS, "Whether profiling is paused now."},
    {"control_send", core_control_send, METH_VARARGS,
     "control_send(pid, on)\nSend a resume (on true) or pause command to a process profiled by "
     "pyrometer (sigqueue of CONTROL_SIGNAL); the caller checks that it is one."},
    {"start", (PyCFunction)(void (*)(void))core_start, METH_VARARGS | METH_KEYWORDS,
     "start(interval, virtual_time, include, exclude, own, only, exclude_substrings, "
     "profile_all, memory_window=0, leak_detector=True, program=[], program_codes=[], gpu=0, "
     "start_off=0, control_file=None)\n"
     "Start the CPU sampler with the given file filter."},
    {"stop", (PyCFunction)(void (*)(void))core_stop, METH_VARARGS | METH_KEYWORDS,
     "stop(keep_thread=False): stop the CPU sampler and join its thread, or with keep_thread park it for "
     "the next start (ended before a fork, or by end_kept_thread())."},
    {"end_kept_thread", core_end_kept_thread, METH_NOARGS,
     "End the sampler thread that stop(keep_thread=True) kept, if any."},
    {"collect", core_collect, METH_NOARGS, "The aggregates measured so far, as plain data."},
    {"ending_install", (PyCFunction)(void (*)(void))core_ending_install, METH_VARARGS | METH_KEYWORDS,
     "ending_install(write_profile, child=False)\nOn a termination signal with its default disposition, call "
     "write_profile(signum) (from the main or the sampler thread), then die of the signal; on a "
     "crash, one line on stderr (see csrc/ending/ending.h), which names a child process as such."},
    {"ending_uninstall", core_ending_uninstall, METH_NOARGS,
     "Put back the signal dispositions that ending_install replaced."},
    {"ending_reinstall", core_ending_reinstall, METH_O,
     "ending_reinstall(signum)\nThe program set signum to SIG_DFL: catch it again."},
    {"ending_signal", core_ending_signal, METH_NOARGS,
     "The termination signal received since ending_install, or 0."},
    {"ending_die", core_ending_die, METH_O,
     "ending_die(signum)\nDie of signum with its default disposition; does not return."},
    {"periodic_socketpair", core_periodic_socketpair, METH_NOARGS,
     "A connected socket pair (mine, the writer's) for periodic reports."},
    {"periodic_start", core_periodic_start, METH_VARARGS,
     "periodic_start(interval, fd, make_payload)\nSend make_payload() over fd every interval "
     "seconds, from the thread that takes a CPU sample (see csrc/profile/periodic.h)."},
    {"periodic_stop", core_periodic_stop, METH_NOARGS,
     "Wait for the report in flight; (reports written, error or None, quiet)."},
    {"run_file", core_run_file, METH_VARARGS,
     "run_file(source, filename, globals)\nRun source (a descriptor, or bytes read as from a "
     "pipe) in globals as python runs a script file named filename, with its own errors."},
    {"reset", core_reset, METH_NOARGS, "Forget every aggregate (the sampler must be stopped)."},
    {"running", core_running, METH_NOARGS, "Whether the sampler is running."},
    {"gc_mark", core_gc_mark, METH_NOARGS,
     "Where pyrometer's own objects start: the frozen held aside, the rest frozen (core/gc_aside.py)."},
    {"gc_set_aside", core_gc_set_aside, METH_NOARGS,
     "The objects tracked since gc_mark() to the permanent generation, those it froze back (core/gc_aside.py)."},
    {"gc_release", core_gc_release, METH_NOARGS, "gc_mark() undone, nothing set aside (core/gc_aside.py)."},
    {"follow_program", core_follow_program, METH_O,
     "follow_program(globals)\nThe program's module dictionary, searched for its functions until stop()."},
    {"follow_code", core_follow_code, METH_O,
     "follow_code(code)\nThe program's top-level code, about to run: known to the profiler from its start."},
    {"code_lines", core_code_lines, METH_O,
     "code_lines(code) -> (asked, filled): each instruction's line as the profiler reads it one "
     "at a time and as it reads them all in one pass (for tests: they must agree)."},
    {"attach_memory", core_attach_memory, METH_O,
     "attach_memory(path): load the memory library at path into this running process "
     "and put its allocator and copy functions in every loaded object's tables "
     "(csrc/memhooks/got.c); OSError when it cannot.  Nothing when it is loaded already."},
    {"detach_memory", core_detach_memory, METH_NOARGS,
     "detach_memory(): undo attach_memory, profiling stopped: every loaded object calls its "
     "allocator and copy functions as before (the library stays loaded, its arena allocator "
     "wrapped); nothing when the library was preloaded.  OSError when a table could not be "
     "put back."},
    {"memory_available", core_memory_available, METH_NOARGS,
     "Whether the memory library is in this process (preloaded, or attached by attach_memory)."},
    {NULL, NULL, 0, NULL},
};

/* What the CLI needs to know before it runs anything: which versions were
 * tested, and whether this build's frame layout is one of them. */
static int core_exec(PyObject *module)
{
    if (PyModule_AddFunctions(module, stand_in_methods) != 0 || PyModule_AddFunctions(module, audit_methods) != 0) {
        return -1;
    }
#ifdef PYROMETER_UNTESTED_VERSION
    int tested = 0;
#else
    int tested = 1;
#endif
    if (PyModule_AddStringConstant(module, "TESTED_VERSIONS", PYROMETER_TESTED_VERSIONS) != 0 ||
        PyModule_AddStringConstant(module, "FRAME_LAYOUT", pyframe_layout) != 0 ||
        PyModule_AddIntConstant(module, "VERSION_TESTED", tested) != 0 ||
        PyModule_AddIntConstant(module, "CONTROL_SIGNAL", control_signal_number()) != 0 ||
        records_add_names(module) != 0) {
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot core_slots[] = {
    {Py_mod_exec, core_exec},
    {0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pyrometer._core",
    .m_doc = "pyrometer's measuring core (C).",
    .m_size = 0,
    .m_methods = core_methods,
    .m_slots = core_slots,
};

PyMODINIT_FUNC PyInit__core(void)
{
    return PyModuleDef_Init(&core_module);
}
