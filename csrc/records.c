#include "records.h"

#include "gpu/gpu.h"
#include "memory/mem_profile.h"
#include "profile/sites.h"

#include <stddef.h>
#include <string.h>

typedef enum { FIELD_U64, FIELD_I64, FIELD_DOUBLE, FIELD_BOOL, FIELD_STR } field_kind;

/* One field of a C record: its name in the Python record, and where and what
 * it is in the struct. */
typedef struct {
    const char *name;
    field_kind kind;
    size_t offset;
} record_field;

#define FIELD(type, member, kind) {#member, kind, offsetof(type, member)}
#define COUNT(table) (sizeof(table) / sizeof((table)[0]))

/* A record's CPU sums: _core.CpuSums's fields. */
static const record_field CPU_SUMS_FIELDS[] = {
    FIELD(cpu_sums_figures, python_ns, FIELD_DOUBLE),
    FIELD(cpu_sums_figures, native_ns, FIELD_DOUBLE),
    FIELD(cpu_sums_figures, system_ns, FIELD_DOUBLE),
    FIELD(cpu_sums_figures, busy_ns, FIELD_DOUBLE),
    FIELD(cpu_sums_figures, samples, FIELD_U64),
    FIELD(cpu_sums_figures, gil_wait_ns, FIELD_DOUBLE),
    FIELD(cpu_sums_figures, cpu_wait_ns, FIELD_DOUBLE),
    FIELD(cpu_sums_figures, loop_idle_ns, FIELD_DOUBLE),
    FIELD(cpu_sums_figures, await_ns, FIELD_DOUBLE),
    /* the sampling variance of each kind and of their total (line_stats.h, CPU_VARS) */
    FIELD(cpu_sums_figures, python_var, FIELD_DOUBLE),
    FIELD(cpu_sums_figures, native_var, FIELD_DOUBLE),
    FIELD(cpu_sums_figures, system_var, FIELD_DOUBLE),
    FIELD(cpu_sums_figures, gil_wait_var, FIELD_DOUBLE),
    FIELD(cpu_sums_figures, cpu_wait_var, FIELD_DOUBLE),
    FIELD(cpu_sums_figures, time_var, FIELD_DOUBLE),
};

/* A line's memory record: these, and its place (filename, lineno, function,
 * function_lineno) and timeline (a list of (seconds, MB)). */
static const record_field LINE_FIELDS[] = {
    FIELD(mem_line_record, alloc_bytes, FIELD_U64),
    FIELD(mem_line_record, python_bytes, FIELD_U64),
    FIELD(mem_line_record, free_bytes, FIELD_U64),
    FIELD(mem_line_record, churn_bytes, FIELD_U64),
    FIELD(mem_line_record, copy_bytes, FIELD_U64),
    FIELD(mem_line_record, window_sampled_bytes, FIELD_U64),
    FIELD(mem_line_record, python_window_sampled_bytes, FIELD_U64),
    FIELD(mem_line_record, freed_window_sampled_bytes, FIELD_U64),
    FIELD(mem_line_record, freed_python_window_sampled_bytes, FIELD_U64),
    FIELD(mem_line_record, alloc_samples, FIELD_U64),
    FIELD(mem_line_record, free_samples, FIELD_U64),
    FIELD(mem_line_record, copy_samples, FIELD_U64),
    FIELD(mem_line_record, net_bytes, FIELD_I64),
    FIELD(mem_line_record, peak_bytes, FIELD_I64),
    FIELD(mem_line_record, watched, FIELD_U64),
    FIELD(mem_line_record, watched_freed, FIELD_U64),
    FIELD(mem_line_record, watched_evicted, FIELD_U64),
};
static const char *const LINE_PLACE[] = {"filename", "lineno", "function", "function_lineno", "timeline"};

/* A call stack's memory sums (_core.MemoryStackSums), after its id
 * ("stacks"), and alone for the bucket of the stacks past the cap
 * ("other_stacks"). */
static const record_field STACK_SUMS[] = {
    FIELD(mem_stack_record, alloc_bytes, FIELD_U64),
    FIELD(mem_stack_record, python_bytes, FIELD_U64),
    FIELD(mem_stack_record, free_bytes, FIELD_U64),
    FIELD(mem_stack_record, copy_bytes, FIELD_U64),
    FIELD(mem_stack_record, churn_bytes, FIELD_U64),
};

/* The run's memory record: these, and lines, stacks, other_stacks, footprint
 * (a timeline) and max_footprint_where ((filename, lineno) or None). */
static const record_field RUN_FIELDS[] = {
    FIELD(mem_run_record, max_footprint_bytes, FIELD_I64),
    FIELD(mem_run_record, max_footprint_time_sec, FIELD_DOUBLE),
    FIELD(mem_run_record, footprint_bytes, FIELD_I64),
    FIELD(mem_run_record, window_bytes, FIELD_I64),
    FIELD(mem_run_record, python_window_bytes, FIELD_I64),
    FIELD(mem_run_record, unattributed_alloc_bytes, FIELD_U64),
    FIELD(mem_run_record, unattributed_python_bytes, FIELD_U64),
    FIELD(mem_run_record, unattributed_free_bytes, FIELD_U64),
    FIELD(mem_run_record, unattributed_churn_bytes, FIELD_U64),
    FIELD(mem_run_record, unattributed_copy_bytes, FIELD_U64),
    FIELD(mem_run_record, native_thread_alloc_bytes, FIELD_U64),
    FIELD(mem_run_record, native_thread_free_bytes, FIELD_U64),
    FIELD(mem_run_record, native_thread_copy_bytes, FIELD_U64),
    FIELD(mem_run_record, dropped_samples, FIELD_U64),
    FIELD(mem_run_record, dropped_bytes, FIELD_U64),
    FIELD(mem_run_record, queued_samples, FIELD_U64),
    FIELD(mem_run_record, python_memory_profiled, FIELD_BOOL),
    FIELD(mem_run_record, leak_detector, FIELD_BOOL),
    FIELD(mem_run_record, python_allocator, FIELD_STR),
    FIELD(mem_run_record, python_memory_why, FIELD_STR),
};
static const char *const RUN_PARTS[] = {"lines", "stacks", "other_stacks", "footprint", "max_footprint_where"};

/* A line's GPU sums (_core.GpuLineSums), after its place (filename, lineno,
 * function, function_lineno) in the GPU record's "lines". */
static const record_field GPU_LINE_SUMS[] = {
    FIELD(gpu_line_record, busy_ns, FIELD_DOUBLE),
    FIELD(gpu_line_record, memory_sum_bytes, FIELD_DOUBLE),
    FIELD(gpu_line_record, memory_samples, FIELD_U64),
    FIELD(gpu_line_record, memory_peak_bytes, FIELD_U64),
    FIELD(gpu_line_record, kernel_ns, FIELD_U64),
    FIELD(gpu_line_record, kernels, FIELD_U64),
    FIELD(gpu_line_record, copy_htod_bytes, FIELD_U64),
    FIELD(gpu_line_record, copy_dtoh_bytes, FIELD_U64),
    FIELD(gpu_line_record, copy_dtod_bytes, FIELD_U64),
    FIELD(gpu_line_record, copy_other_bytes, FIELD_U64),
    FIELD(gpu_line_record, memset_bytes, FIELD_U64),
    FIELD(gpu_line_record, alloc_bytes, FIELD_U64),
};

static const record_field GPU_DEVICE_FIELDS[] = {
    FIELD(gpu_device_record, name, FIELD_STR),
    FIELD(gpu_device_record, busy_ns, FIELD_DOUBLE),
    FIELD(gpu_device_record, peak_memory_bytes, FIELD_U64),
    FIELD(gpu_device_record, samples, FIELD_U64),
    FIELD(gpu_device_record, source, FIELD_STR),
    FIELD(gpu_device_record, shared, FIELD_BOOL),
};

/* The run's GPU record: these, and devices, lines, stacks ((id, busy ns)),
 * notices and kernels (the kernel tier's record, or None). */
static const record_field GPU_RUN_FIELDS[] = {
    FIELD(gpu_run_record, backend, FIELD_STR),
    FIELD(gpu_run_record, status, FIELD_STR),
    FIELD(gpu_run_record, why, FIELD_STR),
    {"explicit", FIELD_BOOL, offsetof(gpu_run_record, explicit_request)},
    FIELD(gpu_run_record, unattributed_busy_ns, FIELD_DOUBLE),
    FIELD(gpu_run_record, peak_memory_bytes, FIELD_U64),
};
static const char *const GPU_RUN_PARTS[] = {"devices", "lines", "stacks", "notices", "kernels"};

static const record_field GPU_KERNELS_FIELDS[] = {
    FIELD(gpu_kernels_record, backend, FIELD_STR),
    FIELD(gpu_kernels_record, status, FIELD_STR),
    FIELD(gpu_kernels_record, why, FIELD_STR),
    FIELD(gpu_kernels_record, library, FIELD_STR),
    FIELD(gpu_kernels_record, kernels, FIELD_U64),
    FIELD(gpu_kernels_record, copies, FIELD_U64),
    FIELD(gpu_kernels_record, memsets, FIELD_U64),
    FIELD(gpu_kernels_record, allocations, FIELD_U64),
    FIELD(gpu_kernels_record, kernel_ns, FIELD_U64),
    FIELD(gpu_kernels_record, copy_htod_bytes, FIELD_U64),
    FIELD(gpu_kernels_record, copy_dtoh_bytes, FIELD_U64),
    FIELD(gpu_kernels_record, copy_dtod_bytes, FIELD_U64),
    FIELD(gpu_kernels_record, unattributed_kernel_ns, FIELD_U64),
    FIELD(gpu_kernels_record, unattributed_copy_bytes, FIELD_U64),
    FIELD(gpu_kernels_record, lost_launches, FIELD_U64),
    FIELD(gpu_kernels_record, lost_records, FIELD_U64),
    FIELD(gpu_kernels_record, dropped_records, FIELD_U64),
};

static PyObject *field_value(const record_field *f, const void *record)
{
    const char *at = (const char *)record + f->offset;
    switch (f->kind) {
    case FIELD_U64:
        return PyLong_FromUnsignedLongLong(*(const uint64_t *)(const void *)at);
    case FIELD_I64:
        return PyLong_FromLongLong(*(const int64_t *)(const void *)at);
    case FIELD_DOUBLE:
        return PyFloat_FromDouble(*(const double *)(const void *)at);
    case FIELD_BOOL:
        return PyBool_FromLong(*(const int *)(const void *)at);
    default: /* FIELD_STR */
        return PyUnicode_FromString(*(const char *const *)(const void *)at);
    }
}

/* dict[name] = value for each field; 0, or -1 with an exception set. */
static int put_fields(PyObject *dict, const record_field *fields, size_t n, const void *record)
{
    for (size_t i = 0; i < n; i++) {
        PyObject *value = field_value(&fields[i], record);
        if (value == NULL || PyDict_SetItemString(dict, fields[i].name, value) != 0) {
            Py_XDECREF(value);
            return -1;
        }
        Py_DECREF(value);
    }
    return 0;
}

/* dict[name] = value, taking the reference to value (NULL: an error already
 * set); 0, or -1. */
static int put(PyObject *dict, const char *name, PyObject *value)
{
    int rc = value != NULL ? PyDict_SetItemString(dict, name, value) : -1;
    Py_XDECREF(value);
    return rc;
}

/* Records of Python objects (a place and its sums), not of a C struct: their
 * fields' names. */
static const char *const CPU_LINE[] = {"filename", "lineno", "qualname", "first_lineno", "cpu"};
static const char *const GPU_LINE[] = {"filename", "lineno", "qualname", "first_lineno", "gpu"};
/* A call stack's node: its parent's id (-1: the root), its frame's index in
 * the stacks' "frames" (-1: the root), its CPU sums (None: nothing charged,
 * a prefix of other stacks); a node's id is its index. */
static const char *const STACK_NODE[] = {"parent", "frame", "cpu"};

/* The named records (struct sequences: tuples, fast to make, with a name
 * for each field), one type per table, made once per process (the
 * collections are made in the main interpreter only): of a C struct's
 * fields (fields), or of objects (names). */
typedef enum {
    RECORD_CPU_SUMS,
    RECORD_MEMORY_STACK_SUMS,
    RECORD_GPU_LINE_SUMS,
    RECORD_CPU_LINE,
    RECORD_GPU_LINE,
    RECORD_STACK_NODE,
    RECORD_KINDS
} record_kind;

static struct {
    const char *name, *doc;
    const record_field *fields;
    size_t n;
    PyTypeObject *type;
    const char *const *names;
} record_types[RECORD_KINDS] = {
    [RECORD_CPU_SUMS] = {"pyrometer._core.CpuSums",
                         "A record's CPU sums: each kind's time (ns), its samples, and each kind's sampling "
                         "variance (ns^2).",
                         CPU_SUMS_FIELDS, COUNT(CPU_SUMS_FIELDS), NULL},
    [RECORD_MEMORY_STACK_SUMS] = {"pyrometer._core.MemoryStackSums", "A call stack's memory sums (bytes).",
                                  STACK_SUMS, COUNT(STACK_SUMS), NULL},
    [RECORD_GPU_LINE_SUMS] = {"pyrometer._core.GpuLineSums",
                              "A line's GPU sums: NVML's busy time and memory, then the kernel tier's launches.",
                              GPU_LINE_SUMS, COUNT(GPU_LINE_SUMS), NULL},
    [RECORD_CPU_LINE] = {"pyrometer._core.CpuLine", "A line's place and its CPU sums (a CpuSums).", NULL,
                         COUNT(CPU_LINE), NULL, CPU_LINE},
    [RECORD_GPU_LINE] = {"pyrometer._core.GpuLine", "A line's place and its GPU sums (a GpuLineSums).", NULL,
                         COUNT(GPU_LINE), NULL, GPU_LINE},
    [RECORD_STACK_NODE] = {"pyrometer._core.StackNode",
                           "A call stack's node: its parent's id and its frame's index (-1: the root), and its "
                           "CPU sums (a CpuSums, or None).",
                           NULL, COUNT(STACK_NODE), NULL, STACK_NODE},
};

static int make_record_types(void)
{
    enum { MOST_FIELDS = 32 };
    static PyStructSequence_Field members[RECORD_KINDS][MOST_FIELDS + 1];
    for (int k = 0; k < RECORD_KINDS; k++) {
        if (record_types[k].type != NULL) {
            continue;
        }
        if (record_types[k].n > MOST_FIELDS) {
            PyErr_SetString(PyExc_SystemError, "a record with more fields than MOST_FIELDS");
            return -1;
        }
        for (size_t i = 0; i < record_types[k].n; i++) {
            members[k][i].name =
                record_types[k].names != NULL ? record_types[k].names[i] : record_types[k].fields[i].name;
            members[k][i].doc = NULL;
        }
        members[k][record_types[k].n].name = NULL;
        PyStructSequence_Desc desc = {record_types[k].name, record_types[k].doc, members[k],
                                      (int)record_types[k].n};
        record_types[k].type = PyStructSequence_NewType(&desc);
        if (record_types[k].type == NULL) {
            return -1;
        }
    }
    return 0;
}

/* One C record as its named record; NULL with an exception set. */
static PyObject *fields_record(record_kind kind, const void *record)
{
    PyObject *out = PyStructSequence_New(record_types[kind].type);
    for (size_t i = 0; out != NULL && i < record_types[kind].n; i++) {
        PyObject *value = field_value(&record_types[kind].fields[i], record);
        if (value == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyStructSequence_SetItem(out, (Py_ssize_t)i, value);
    }
    return out;
}

PyObject *records_cpu_sums(const cpu_sums_figures *figures)
{
    return fields_record(RECORD_CPU_SUMS, figures);
}

/* A record of objects, taking the references to items (NULL: an error
 * already set, and the others are released); NULL with an exception set. */
static PyObject *objects_record(record_kind kind, PyObject **items)
{
    PyObject *out = NULL;
    int complete = 1;
    for (size_t i = 0; i < record_types[kind].n; i++) {
        complete &= items[i] != NULL;
    }
    if (complete) {
        out = PyStructSequence_New(record_types[kind].type);
    }
    for (size_t i = 0; i < record_types[kind].n; i++) {
        if (out != NULL) {
            PyStructSequence_SetItem(out, (Py_ssize_t)i, items[i]);
        } else {
            Py_XDECREF(items[i]);
        }
    }
    return out;
}

/* A line's place and its sums (records_cpu_line, gpu_line). */
static PyObject *line_place_record(record_kind kind, const site *where, int lineno, PyObject *sums)
{
    PyObject *items[] = {Py_NewRef(where->filename), PyLong_FromLong(lineno), Py_NewRef(where->qualname),
                         PyLong_FromLong(where->firstlineno), sums};
    return objects_record(kind, items);
}

PyObject *records_cpu_line(const site *where, int lineno, PyObject *cpu)
{
    return line_place_record(RECORD_CPU_LINE, where, lineno, cpu);
}

PyObject *records_stack_node(long parent, Py_ssize_t frame, PyObject *cpu)
{
    PyObject *items[] = {PyLong_FromLong(parent), PyLong_FromSsize_t(frame), cpu};
    return objects_record(RECORD_STACK_NODE, items);
}

static PyObject *timeline_list(const mem_series *s)
{
    uint32_t n = mem_series_count(s);
    PyObject *out = PyList_New(n);
    for (uint32_t i = 0; out != NULL && i < n; i++) {
        double t_sec, mb;
        mem_series_point(s, i, &t_sec, &mb);
        PyObject *point = Py_BuildValue("(dd)", t_sec, mb);
        if (point == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, point);
    }
    return out;
}

static PyObject *line_record(const mem_line_record *r)
{
    const site *where = sites_get(r->site);
    PyObject *d = PyDict_New();
    if (d == NULL || put(d, "filename", Py_NewRef(where->filename)) != 0 ||
        put(d, "lineno", PyLong_FromLong(r->lineno)) != 0 || put(d, "function", Py_NewRef(where->qualname)) != 0 ||
        put(d, "function_lineno", PyLong_FromLong(where->firstlineno)) != 0 ||
        put_fields(d, LINE_FIELDS, COUNT(LINE_FIELDS), r) != 0 || put(d, "timeline", timeline_list(r->timeline)) != 0) {
        Py_XDECREF(d);
        return NULL;
    }
    return d;
}

/* Appends each record of a collector's (next(cursor, record) -> 0 at the end)
 * made Python's by make. */
#define APPEND_ALL(list, record_type, next, make)                                                                  \
    do {                                                                                                           \
        size_t cursor_ = 0;                                                                                        \
        record_type record_;                                                                                       \
        while ((list) != NULL && next(&cursor_, &record_)) {                                                       \
            PyObject *item_ = make;                                                                                \
            if (item_ == NULL || PyList_Append((list), item_) != 0) {                                              \
                Py_CLEAR(list);                                                                                    \
            }                                                                                                      \
            Py_XDECREF(item_);                                                                                     \
        }                                                                                                          \
    } while (0)

static PyObject *peak_place(const mem_run_record *run)
{
    const site *where = sites_get(run->max_footprint_site);
    return where != NULL ? Py_BuildValue("(Oi)", where->filename, run->max_footprint_lineno) : Py_NewRef(Py_None);
}

/* A call stack's entry in the memory record's "stacks": (its id, its sums). */
static PyObject *stack_entry(const mem_stack_record *r)
{
    PyObject *sums = fields_record(RECORD_MEMORY_STACK_SUMS, r);
    return sums != NULL ? Py_BuildValue("(KN)", (unsigned long long)r->stack, sums) : NULL;
}

PyObject *records_memory(void)
{
    if (!mem_profile_collect_begin()) {
        Py_RETURN_NONE;
    }
    PyObject *lines = PyList_New(0);
    APPEND_ALL(lines, mem_line_record, mem_profile_next_line, line_record(&record_));
    PyObject *stacks = PyList_New(0);
    APPEND_ALL(stacks, mem_stack_record, mem_profile_next_stack, stack_entry(&record_));
    mem_stack_record other;
    mem_profile_other_stacks(&other);
    mem_run_record run;
    mem_profile_run(&run);
    PyObject *d = PyDict_New();
    if (d == NULL || put(d, "lines", lines) != 0 || put(d, "stacks", stacks) != 0 ||
        put(d, "other_stacks", fields_record(RECORD_MEMORY_STACK_SUMS, &other)) != 0 ||
        put(d, "footprint", timeline_list(run.footprint)) != 0 ||
        put(d, "max_footprint_where", peak_place(&run)) != 0 || put_fields(d, RUN_FIELDS, COUNT(RUN_FIELDS), &run) != 0) {
        Py_XDECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *fields_dict(const record_field *fields, size_t n, const void *record)
{
    PyObject *d = PyDict_New();
    if (d != NULL && put_fields(d, fields, n, record) != 0) {
        Py_CLEAR(d);
    }
    return d;
}

static PyObject *gpu_line(const gpu_line_record *r)
{
    const site *where = sites_get(r->site);
    return line_place_record(RECORD_GPU_LINE, where, r->lineno, fields_record(RECORD_GPU_LINE_SUMS, r));
}

static int next_notice(size_t *cursor, PyObject **out)
{
    char text[512];
    if (!gpu_next_notice(cursor, text, sizeof text)) {
        return 0;
    }
    *out = PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace");
    return 1;
}

static PyObject *gpu_kernels(void)
{
    gpu_kernels_record k;
    return gpu_records_kernels(&k) ? fields_dict(GPU_KERNELS_FIELDS, COUNT(GPU_KERNELS_FIELDS), &k)
                                   : Py_NewRef(Py_None);
}

PyObject *records_gpu(void)
{
    gpu_run_record run;
    if (!gpu_records_begin(&run)) {
        Py_RETURN_NONE;
    }
    PyObject *devices = PyList_New(0);
    APPEND_ALL(devices, gpu_device_record, gpu_next_device,
               fields_dict(GPU_DEVICE_FIELDS, COUNT(GPU_DEVICE_FIELDS), &record_));
    PyObject *lines = PyList_New(0);
    APPEND_ALL(lines, gpu_line_record, gpu_next_line, gpu_line(&record_));
    PyObject *stacks = PyList_New(0);
    APPEND_ALL(stacks, gpu_stack_record, gpu_next_stack,
               Py_BuildValue("(Kd)", (unsigned long long)record_.stack, record_.busy_ns));
    PyObject *notices = PyList_New(0);
    APPEND_ALL(notices, PyObject *, next_notice, record_);
    PyObject *d = PyDict_New();
    if (d == NULL || put(d, "devices", devices) != 0 || put(d, "lines", lines) != 0 ||
        put(d, "stacks", stacks) != 0 || put(d, "notices", notices) != 0 || put(d, "kernels", gpu_kernels()) != 0 ||
        put_fields(d, GPU_RUN_FIELDS, COUNT(GPU_RUN_FIELDS), &run) != 0) {
        Py_CLEAR(d);
    }
    gpu_records_end();
    return d;
}

/* A tuple of the names of `lead` and then of fields. */
static PyObject *names(const char *const *lead, size_t n_lead, const record_field *fields, size_t n)
{
    PyObject *t = PyTuple_New((Py_ssize_t)(n_lead + n));
    for (size_t i = 0; t != NULL && i < n_lead + n; i++) {
        PyObject *name = PyUnicode_FromString(i < n_lead ? lead[i] : fields[i - n_lead].name);
        if (name == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, (Py_ssize_t)i, name);
    }
    return t;
}

int records_add_names(PyObject *module)
{
    struct {
        const char *name;
        PyObject *value;
    } all[] = {
        {"CPU_SUMS", names(NULL, 0, CPU_SUMS_FIELDS, COUNT(CPU_SUMS_FIELDS))},
        {"MEMORY_LINE_FIELDS", names(LINE_PLACE, COUNT(LINE_PLACE), LINE_FIELDS, COUNT(LINE_FIELDS))},
        {"MEMORY_STACK_SUMS", names(NULL, 0, STACK_SUMS, COUNT(STACK_SUMS))},
        {"MEMORY_RUN_FIELDS", names(RUN_PARTS, COUNT(RUN_PARTS), RUN_FIELDS, COUNT(RUN_FIELDS))},
        {"GPU_LINE_SUMS", names(NULL, 0, GPU_LINE_SUMS, COUNT(GPU_LINE_SUMS))},
        {"GPU_DEVICE_FIELDS", names(NULL, 0, GPU_DEVICE_FIELDS, COUNT(GPU_DEVICE_FIELDS))},
        {"GPU_RUN_FIELDS", names(GPU_RUN_PARTS, COUNT(GPU_RUN_PARTS), GPU_RUN_FIELDS, COUNT(GPU_RUN_FIELDS))},
        {"GPU_KERNELS_FIELDS", names(NULL, 0, GPU_KERNELS_FIELDS, COUNT(GPU_KERNELS_FIELDS))},
    };
    int rc = 0;
    for (size_t i = 0; i < COUNT(all); i++) {
        if (rc == 0 && (all[i].value == NULL || PyModule_AddObjectRef(module, all[i].name, all[i].value) != 0)) {
            rc = -1;
        }
        Py_XDECREF(all[i].value);
    }
    if (rc == 0 && make_record_types() != 0) {
        rc = -1;
    }
    for (int k = 0; rc == 0 && k < RECORD_KINDS; k++) {
        const char *dot = strrchr(record_types[k].name, '.');
        if (PyModule_AddObjectRef(module, dot + 1, (PyObject *)record_types[k].type) != 0) {
            rc = -1;
        }
    }
    return rc;
}
