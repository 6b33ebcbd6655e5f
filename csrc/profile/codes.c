#include "codes.h"
#include "filter.h"
#include "../common/arena.h"
#include "../common/table.h"
#include "../cpython/gc_aside.h"

#include <string.h>

static table code_table; /* code address -> code_info */
static arena code_arena; /* per-code instruction maps, given back when a code dies */
static int initialised;
static uint64_t registered;

/* Opcodes at which the eval loop checks its eval breaker and so may hand over the
 * GIL while running Python (the layout's list: function entry and loop
 * back-edges).  A thread parked anywhere else released the GIL from inside a call
 * into C (or is waiting to take it back after one), i.e. it was running native
 * code.  Numbers come from the running interpreter's `opcode` module, so they
 * follow the version. */
#define MAX_PARK_OPCODES 8
static int park_opcodes[MAX_PARK_OPCODES];
static int n_park_opcodes;
/* Per opcode: 0, or 1 + its index in pyframe_back_jumps. */
static uint8_t back_jump[256];
static int extended_arg = -1;

/* Opcodes that call something (CALL, PRECALL, CALL_FUNCTION & co., with all
 * their specialised and instrumented forms): a running thread whose innermost
 * frame stands at one is inside a call into code that is not Python (a call of
 * Python code would have pushed a frame of its own).  The intrinsics are the
 * interpreter's own helpers, not calls.  Indexed by the live opcode byte, so it
 * covers specialised numbers too; read without the GIL (set once, at init). */
static uint8_t call_opcodes[256];

/* The forms a call takes once specialised for a Python callee (3.11+:
 * CALL_PY_EXACT_ARGS, CALL_PY_GENERAL, CALL_KW_PY, CALL_EX_PY, the bound
 * methods', a class's __init__): a frame found at one is pushing its callee's
 * frame or has just had it return, the interpreter's own work.  Read as calls,
 * a recursive Python function's call line was 35% native on 3.13, 66% on 3.14
 * and 69% on 3.15 (3.11, 3.12: 0%), with no native code anywhere.  3.11's
 * PRECALL_BOUND_METHOD takes any bound method and stays a call. */
static int names_a_python_call(const char *name)
{
    return strncmp(name, "CALL_", 5) == 0 && strstr(name, "NON_PY") == NULL &&
           (strstr(name, "_PY") != NULL || strstr(name, "BOUND_METHOD") != NULL ||
            strstr(name, "ENTER_INIT") != NULL);
}

static int names_a_call(const char *name)
{
    if (strncmp(name, "CALL_INTRINSIC", 14) == 0 || names_a_python_call(name)) {
        return 0;
    }
    return strncmp(name, "CALL", 4) == 0 || strncmp(name, "PRECALL", 7) == 0 ||
           strncmp(name, "INSTRUMENTED_CALL", 17) == 0;
}

/* Operators in their generic form, where the interpreter specialises (3.11+):
 * once warm, an operator still in it is one the specialiser gave up on, whose
 * operands' type slots do the work, in C as a rule (a numpy or bytes operator,
 * an extension type's); 3.11 runs the generic form as *_ADAPTIVE.  A thread
 * found at one that has left its frame by the time it answers was in native
 * code there (csrc/sampler/locate.c): the interpreter's own forms (BINARY_OP_ADD_INT
 * and the like) are the specialised ones.  Of BINARY_OP, only the operations
 * the specialiser takes for the interpreter's own types (+, -, *, their
 * in-place forms, 3.14's subscript, and @, which none of them has): int % 7
 * stays generic on every version, and is bytecode's work. */
static uint8_t generic_operators[256];
static int specialises; /* 3.11+: generic_operators says something */
static const char *const operator_families[] = {"BINARY_OP", "BINARY_SUBSCR", "STORE_SUBSCR", "COMPARE_OP",
                                                "CONTAINS_OP", NULL};
static int binary_op = -1, binary_op_adaptive = -1; /* their numbers (3.11's adaptive form apart) */
static uint8_t specialised_nb_ops[64];              /* by BINARY_OP's argument */
static const char *const specialised_nb_names[] = {"NB_ADD", "NB_SUBTRACT", "NB_MULTIPLY", "NB_MATRIX_MULTIPLY",
                                                   "NB_INPLACE_ADD", "NB_INPLACE_SUBTRACT", "NB_INPLACE_MULTIPLY",
                                                   "NB_INPLACE_MATRIX_MULTIPLY", "NB_SUBSCR", NULL};

static void find_specialised_nb_ops(PyObject *opcode, PyObject *opmap)
{
    memset(specialised_nb_ops, 0, sizeof specialised_nb_ops);
    PyObject *v = PyDict_GetItemString(opmap, "BINARY_OP");
    binary_op = v != NULL ? (int)PyLong_AsLong(v) : -1;
    PyObject *ops = PyObject_GetAttrString(opcode, "_nb_ops"); /* [(name, symbol)], by argument */
    PyObject *fast = ops != NULL ? PySequence_Fast(ops, "_nb_ops") : NULL;
    for (Py_ssize_t i = 0; fast != NULL && i < PySequence_Fast_GET_SIZE(fast) && i < 64; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(fast, i);
        PyObject *name = PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) > 0 ? PyTuple_GET_ITEM(pair, 0) : NULL;
        const char *text = name != NULL && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
        for (int k = 0; text != NULL && specialised_nb_names[k] != NULL; k++) {
            specialised_nb_ops[i] |= strcmp(text, specialised_nb_names[k]) == 0;
        }
    }
    Py_XDECREF(fast);
    Py_XDECREF(ops);
    PyErr_Clear();
}

static int names_binary_op_adaptive(const char *name)
{
    return strcmp(name, "BINARY_OP_ADAPTIVE") == 0;
}

static int names_a_generic_operator(const char *name)
{
    for (int i = 0; operator_families[i] != NULL; i++) {
        size_t n = strlen(operator_families[i]);
        if (strncmp(name, operator_families[i], n) == 0 && (name[n] == '\0' || strcmp(name + n, "_ADAPTIVE") == 0)) {
            return 1;
        }
    }
    return 0;
}

/* A plain dict with a mapping's items (a new reference; NULL on failure, the
 * mapping released either way): 3.15's opcode module holds its maps as
 * frozendicts, which the PyDict_ functions do not take. */
static PyObject *plain_dict(PyObject *mapping)
{
    if (mapping == NULL || PyDict_CheckExact(mapping)) {
        return mapping;
    }
    PyObject *dict = PyDict_New();
    if (dict != NULL && PyDict_Merge(dict, mapping, 1) != 0) {
        Py_CLEAR(dict);
    }
    Py_DECREF(mapping);
    return dict;
}

static void mark_named(PyObject *map, int (*pick)(const char *), uint8_t *into)
{
    if (map == NULL || !PyDict_Check(map)) {
        return;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(map, &pos, &key, &value)) {
        const char *name = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        long op = PyLong_Check(value) ? PyLong_AsLong(value) : -1;
        if (name != NULL && op >= 0 && op < 256 && pick(name)) {
            into[op] = 1;
        }
    }
    PyErr_Clear();
}

/* The specialised forms' numbers, from the `opcode` module alone (importing
 * `dis`, which knows them too, costs the program's start-up some 10 ms): 3.13
 * lists them in opcode._specialized_opmap; in 3.11 and 3.12 the names in
 * opcode._specialized_instructions take, in order, the numbers whose opname is
 * unused ("<n>"), as dis numbers them; 3.10 has none. */
static void mark_specialised(PyObject *opcode, int (*pick)(const char *), uint8_t *into)
{
    PyObject *map = plain_dict(PyObject_GetAttrString(opcode, "_specialized_opmap"));
    if (map != NULL) {
        mark_named(map, pick, into);
        Py_DECREF(map);
        return;
    }
    PyErr_Clear();
    PyObject *names = PyObject_GetAttrString(opcode, "_specialized_instructions");
    PyObject *opname = names != NULL ? PyObject_GetAttrString(opcode, "opname") : NULL;
    PyObject *fast_names = names != NULL ? PySequence_Fast(names, "specialised names") : NULL;
    PyObject *fast_opname = opname != NULL ? PySequence_Fast(opname, "opname") : NULL;
    if (fast_names != NULL && fast_opname != NULL) {
        Py_ssize_t next = 0, n = PySequence_Fast_GET_SIZE(fast_names);
        for (Py_ssize_t op = 0; op < PySequence_Fast_GET_SIZE(fast_opname) && op < 256 && next < n; op++) {
            PyObject *slot = PySequence_Fast_GET_ITEM(fast_opname, op);
            const char *slot_name = PyUnicode_Check(slot) ? PyUnicode_AsUTF8(slot) : NULL;
            if (slot_name == NULL || slot_name[0] != '<') {
                continue;
            }
            PyObject *item = PySequence_Fast_GET_ITEM(fast_names, next++);
            const char *name = PyUnicode_Check(item) ? PyUnicode_AsUTF8(item) : NULL;
            if (name != NULL && pick(name)) {
                into[op] = 1;
            }
        }
    }
    Py_XDECREF(fast_names);
    Py_XDECREF(fast_opname);
    Py_XDECREF(names);
    Py_XDECREF(opname);
    PyErr_Clear();
}

static void find_call_opcodes(PyObject *opcode, PyObject *opmap)
{
    memset(call_opcodes, 0, sizeof call_opcodes);
    mark_named(opmap, names_a_call, call_opcodes);
    mark_specialised(opcode, names_a_call, call_opcodes);
    memset(generic_operators, 0, sizeof generic_operators);
    specialises = PyObject_HasAttrString(opcode, "_specializations");
    if (specialises) { /* 3.11+: the interpreter specialises */
        mark_named(opmap, names_a_generic_operator, generic_operators);
        mark_specialised(opcode, names_a_generic_operator, generic_operators);
        find_specialised_nb_ops(opcode, opmap);
        uint8_t adaptive[256] = {0};
        mark_specialised(opcode, names_binary_op_adaptive, adaptive);
        for (int op = 0; op < 256; op++) {
            binary_op_adaptive = adaptive[op] ? op : binary_op_adaptive;
        }
    }
    PyErr_Clear();
}

int codes_operators_told_apart(void)
{
    return specialises;
}

int codes_opcode_generic_operator(int opcode, int oparg)
{
    if (opcode < 0 || opcode >= 256 || !generic_operators[opcode]) {
        return 0;
    }
    if (opcode == binary_op || opcode == binary_op_adaptive) {
        return oparg >= 0 && oparg < 64 && specialised_nb_ops[oparg];
    }
    return 1;
}

int codes_opcode_calls(int opcode)
{
    return opcode >= 0 && opcode < 256 && call_opcodes[opcode];
}

/* The interpreter's opcodes, read from its `opcode` module once per process
 * (they never change; reading them again at each start cost a pytest
 * --pyrometer run about 3% of its time per test, in string compares). */
static int opcodes_known;

static int learn_opcodes(void)
{
    if (opcodes_known) {
        return 0;
    }
    PyObject *mod = PyImport_ImportModule("opcode");
    if (mod == NULL) {
        return -1;
    }
    PyObject *opmap = plain_dict(PyObject_GetAttrString(mod, "opmap"));
    if (opmap == NULL) {
        Py_DECREF(mod);
        return -1;
    }
    find_call_opcodes(mod, opmap);
    Py_DECREF(mod);
    n_park_opcodes = 0;
    for (int i = 0; pyframe_python_park_opcodes[i] != NULL && n_park_opcodes < MAX_PARK_OPCODES; i++) {
        PyObject *v = PyDict_GetItemString(opmap, pyframe_python_park_opcodes[i]);
        if (v != NULL) {
            park_opcodes[n_park_opcodes++] = (int)PyLong_AsLong(v);
        }
    }
    memset(back_jump, 0, sizeof back_jump);
    for (int i = 0; pyframe_back_jumps[i].name != NULL; i++) {
        PyObject *v = PyDict_GetItemString(opmap, pyframe_back_jumps[i].name);
        long op = v != NULL ? PyLong_AsLong(v) : -1;
        if (op >= 0 && op < 256) {
            back_jump[op] = (uint8_t)(i + 1);
        }
    }
    PyObject *ext = PyDict_GetItemString(opmap, "EXTENDED_ARG");
    extended_arg = ext != NULL ? (int)PyLong_AsLong(ext) : -1;
    PyErr_Clear();
    Py_DECREF(opmap);
    opcodes_known = 1;
    return 0;
}

int codes_init(void)
{
    if (initialised) {
        return 0;
    }
    if (learn_opcodes() != 0) {
        return -1;
    }
    if (table_init(&code_table, sizeof(code_info), 1024) != 0) {
        PyErr_NoMemory();
        return -1;
    }
    if (sites_init() != 0) {
        table_release(&code_table);
        return -1;
    }
    arena_init(&code_arena);
    initialised = 1;
    return 0;
}

static int parks_python(int op)
{
    for (int i = 0; i < n_park_opcodes; i++) {
        if (op == park_opcodes[i]) {
            return 1;
        }
    }
    return 0;
}

static int file_is_reported(PyCodeObject *code, PyObject *filename)
{
    const char *name = PyUnicode_AsUTF8(filename);
    if (name == NULL) {
        PyErr_Clear();
        return 0;
    }
    return filter_reports_code(name, code);
}

/* The file cloudpickle gives the code of a function it pickles by value (one
 * of the program's main script or notebook, sent to joblib's loky workers,
 * dask's or ray's): the code keeps its first line and its line table; the
 * function's module dictionary keeps the original's `__file__`.  Read with
 * that file, the workers' time on the program's functions was on no line. */
#define DYNAMIC_CODE_FILE "<dynamic-code>"

static int is_dynamic(PyCodeObject *code)
{
    return PyUnicode_Check(code->co_filename) && PyUnicode_CompareWithASCIIString(code->co_filename,
                                                                                   DYNAMIC_CODE_FILE) == 0;
}

/* A dynamic code's original file, from the dictionary its frame runs with (an
 * absolute path; borrowed), else NULL.  Reads a dictionary, no allocation. */
static PyObject *dynamic_file(PyObject *globals)
{
    static PyObject *file_key;
    if (globals == NULL || !PyDict_Check(globals)) {
        return NULL;
    }
    if (file_key == NULL && (file_key = PyUnicode_InternFromString("__file__")) == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *file = PyDict_GetItemWithError(globals, file_key);
    if (file == NULL || !PyUnicode_Check(file) || PyUnicode_GET_LENGTH(file) < 2 ||
        PyUnicode_READ_CHAR(file, 0) != '/') {
        PyErr_Clear();
        return NULL;
    }
    return file;
}

/* The block of python_parked: a byte per unit (and one more), then, 4-aligned,
 * the back edges' pairs. */
static size_t edges_offset(int n_units)
{
    return ((size_t)n_units + 1 + 3) & ~(size_t)3;
}

/* The block of a code's facts: python_parked, back_edges, then, for a reported
 * code, its lines (codes_line_known). */
static size_t lines_offset(const code_info *info)
{
    return edges_offset(info->n_units) + (size_t)info->n_back_edges * 2 * sizeof(int32_t);
}

static size_t block_bytes(const code_info *info, int with_lines)
{
    return lines_offset(info) + (with_lines ? (size_t)info->n_units * sizeof(int32_t) : 0);
}

/* The size of a code's block as it was made: with lines if it has them (a code
 * that became reported later, resolve_dynamic, has none). */
static size_t map_bytes(const code_info *info)
{
    return block_bytes(info, info->lines != NULL);
}

/* The target unit of the jump at unit i when it goes backward (or to itself),
 * else -1.  raw: the unspecialised bytecode, n units. */
static Py_ssize_t back_edge_target(const unsigned char *raw, Py_ssize_t n, Py_ssize_t i)
{
    int kind = back_jump[raw[2 * i]];
    if (kind == 0) {
        return -1;
    }
    const pyframe_jump *jump = &pyframe_back_jumps[kind - 1];
    Py_ssize_t arg = raw[2 * i + 1];
    for (Py_ssize_t k = i - 1, shift = 8; k >= 0 && raw[2 * k] == extended_arg && shift < 32; k--, shift += 8) {
        arg |= (Py_ssize_t)raw[2 * k + 1] << shift;
    }
    Py_ssize_t target = jump->relative ? i + 1 + jump->caches - arg : arg;
    return target >= 0 && target <= i && target < n ? target : -1;
}

/* The unspecialised bytecode, so that adaptive (quickened) instructions map back
 * to the opcodes looked up in codes_init. */
static int map_instructions(PyCodeObject *code, code_info *info)
{
    PyObject *bytes = pyframe_code_bytes(code);
    if (bytes == NULL) {
        PyErr_Clear();
        return -1;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(bytes) / 2;
    const unsigned char *raw = (const unsigned char *)PyBytes_AS_STRING(bytes);
    int edges = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        edges += back_edge_target(raw, n, i) >= 0;
    }
    info->n_units = (int)n;
    info->n_back_edges = edges;
    uint8_t *map = arena_take(&code_arena, block_bytes(info, info->reported));
    if (map == NULL) {
        Py_DECREF(bytes);
        info->n_back_edges = 0;
        return -1;
    }
    int32_t *pairs = (int32_t *)(map + edges_offset((int)n));
    for (Py_ssize_t i = 0, e = 0; i < n; i++) {
        map[i] = (uint8_t)parks_python(raw[2 * i]);
        Py_ssize_t target = back_edge_target(raw, n, i);
        if (target >= 0) {
            pairs[2 * e] = (int32_t)i;
            pairs[2 * e + 1] = (int32_t)target;
            e++;
        }
    }
    Py_DECREF(bytes);
    info->python_parked = map;
    info->back_edges = edges > 0 ? pairs : NULL;
    info->lines = info->reported ? (int32_t *)(map + lines_offset(info)) : NULL; /* zeroed: none known */
    return 0;
}

/* A code is being deallocated, before its memory is freed: its facts go, so
 * that a new code at the same address is met afresh. */
static void forget_code(void *address)
{
    table_key key = {(uint64_t)(uintptr_t)address, 0};
    code_info *info = initialised ? table_find(&code_table, key) : NULL;
    if (info != NULL) {
        PyObject *watch = info->watch;
        arena_give(&code_arena, info->python_parked, map_bytes(info));
        table_remove(&code_table, key);
        Py_XDECREF(watch); /* before 3.12 CPython holds the reference it is calling us for */
    }
}

#if PY_VERSION_HEX >= 0x030C0000
/* 3.12+: a code watcher tells every code's death, and no object of ours is
 * made per code (the collector's counts stay the program's own). */
static int code_watcher = -1;

static int on_code_event(PyCodeEvent event, PyCodeObject *code)
{
    if (event == PY_CODE_EVENT_DESTROY) {
        forget_code(code);
    }
    return 0;
}
#endif

/* Before 3.12, the callback of a code's weak reference; self is the code's
 * address (an int), as the referent is gone by now. */
static PyObject *forget(PyObject *self, PyObject *ref)
{
    (void)ref;
    void *address = PyLong_AsVoidPtr(self);
    if (address == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    forget_code(address);
    Py_RETURN_NONE;
}

static PyMethodDef forget_def = {"pyrometer_code_died", forget, METH_O, NULL};

/* What tells the code's death (a reference to drop when the code goes: None
 * under the code watcher, else a weak reference whose callback forgets it);
 * NULL when out of memory. */
static PyObject *watch_code(PyCodeObject *code)
{
#if PY_VERSION_HEX >= 0x030C0000
    if (code_watcher < 0) {
        code_watcher = PyCode_AddWatcher(on_code_event);
        if (code_watcher < 0) {
            PyErr_Clear(); /* every watcher id taken: the weak references then */
        }
    }
    if (code_watcher >= 0) {
        return Py_NewRef(Py_None);
    }
#endif
    PyObject *address = PyLong_FromVoidPtr(code);
    PyObject *callback = address != NULL ? PyCFunction_New(&forget_def, address) : NULL;
    PyObject *watch = callback != NULL ? PyWeakref_NewRef((PyObject *)code, callback) : NULL;
    if (watch != NULL) {
        gc_aside_hide(callback);
        gc_aside_hide(watch);
    }
    Py_XDECREF(callback);
    Py_XDECREF(address);
    if (watch == NULL) {
        PyErr_Clear();
    }
    return watch;
}

const code_info *codes_find(PyCodeObject *code)
{
    table_key key = {(uint64_t)(uintptr_t)code, 0};
    return initialised ? table_find(&code_table, key) : NULL;
}

const code_info *codes_lookup(PyCodeObject *code)
{
    return codes_lookup_in(code, NULL);
}

/* A dynamic code registered before its file was known (no frame's dictionary
 * at hand): the file, the filter's verdict and the site once it is. */
static code_info *resolve_dynamic(table_key key, PyCodeObject *code, PyObject *globals)
{
    PyObject *file = dynamic_file(globals);
    if (file == NULL) {
        return table_find(&code_table, key);
    }
    Py_INCREF(file);
    int reported = file_is_reported(code, file);
    uint32_t site = reported ? sites_intern_as(code, file) : SITE_NONE; /* calls CPython */
    Py_DECREF(file);
    code_info *info = table_find(&code_table, key); /* again: a collection may have moved it */
    if (info != NULL && (!reported || site != SITE_NONE)) {
        /* Its block keeps the size it was made with (map_bytes): a code that
         * becomes reported reads its lines from the table (lines stays NULL). */
        info->reported = reported;
        info->site = site;
        info->dynamic = 0;
    }
    return info;
}

const code_info *codes_lookup_in(PyCodeObject *code, pyframe frame)
{
    table_key key = {(uint64_t)(uintptr_t)code, 0};
    if (!initialised) {
        return NULL;
    }
    code_info *info = table_find(&code_table, key);
    if (info != NULL) {
        return info->dynamic && frame != NULL ? resolve_dynamic(key, code, pyframe_globals(frame)) : info;
    }
    /* The facts first, then the entry: working them out calls CPython, which
     * allocates (a memory sample taken meanwhile must not find a half-made
     * entry: codes_find would take it for a code of an unreported file) and may
     * collect garbage (whose codes' callbacks remove entries, moving others). */
    code_info fresh = {0};
    PyObject *file = code->co_filename;
    if (is_dynamic(code)) {
        PyObject *original = frame != NULL ? dynamic_file(pyframe_globals(frame)) : NULL;
        fresh.dynamic = original == NULL;
        file = original != NULL ? original : file;
    }
    Py_INCREF(file);
    fresh.reported = file_is_reported(code, file);
    fresh.site = fresh.reported ? sites_intern_as(code, file) : SITE_NONE;
    Py_DECREF(file);
    if (map_instructions(code, &fresh) != 0) {
        fresh.n_units = 0;
        fresh.n_back_edges = 0;
        fresh.back_edges = NULL;
        fresh.python_parked = NULL;
        fresh.lines = NULL;
    }
    fresh.watch = watch_code(code);
    if (fresh.watch == NULL || (fresh.reported && fresh.site == SITE_NONE)) {
        /* Without a watch its death would go unseen: not registered. */
        arena_give(&code_arena, fresh.python_parked, map_bytes(&fresh));
        Py_XDECREF(fresh.watch);
        return NULL;
    }
    int created;
    info = table_upsert(&code_table, key, &created);
    if (info == NULL) {
        arena_give(&code_arena, fresh.python_parked, map_bytes(&fresh));
        Py_DECREF(fresh.watch);
        return NULL;
    }
    *info = fresh; /* created: a lookup of this code could not have run meanwhile */
    registered++;
    return info;
}

/* codes_find_through: the most entries of dictionaries it reads for one code,
 * and the codes it did not find, which it does not look for again until as
 * many others have missed (a function that is never found, a closure made
 * inside its caller, would otherwise cost a scan per sample). */
#define THROUGH_BUDGET 4096
#define THROUGH_MISSES 16
static uintptr_t through_missed[THROUGH_MISSES];
static int through_n_missed;

/* Whether a dictionary holds a function running code: what = 0, among its
 * values; 1, among its classes' methods; 2, among the functions and the
 * classes' methods of the modules it holds (`import helpers`, then
 * `helpers.f(x)`).  At most *budget entries in all, the cheapest looks first
 * (codes_find_through): a large module imported first (numpy's ~600 names)
 * would otherwise use the budget before the program's own functions. */
static int dict_holds_code(PyObject *dict, PyObject *code, int what, int *budget)
{
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (*budget > 0 && PyDict_Next(dict, &pos, &key, &value)) {
        (*budget)--;
        if (what == 0) {
            if (PyFunction_Check(value) && PyFunction_GET_CODE(value) == code) {
                return 1;
            }
        } else if (what == 1) {
            PyObject *methods = PyType_Check(value) ? ((PyTypeObject *)value)->tp_dict : NULL;
            if (methods != NULL && PyDict_Check(methods) && dict_holds_code(methods, code, 0, budget)) {
                return 1;
            }
        } else if (PyModule_Check(value)) {
            PyObject *names = PyModule_GetDict(value); /* borrowed */
            if (names != NULL && PyDict_Check(names) &&
                (dict_holds_code(names, code, 0, budget) || dict_holds_code(names, code, 1, budget))) {
                return 1;
            }
        }
    }
    return 0;
}

/* The program's module dictionary (codes_follow_program), held for the run. */
static PyObject *program_globals;

void codes_follow_program(PyObject *globals)
{
    Py_XINCREF(globals);
    Py_XSETREF(program_globals, globals);
}

/* Whether one of the dictionaries holds a function running code: their own
 * functions first, then their classes' methods, then their modules'. */
static int dicts_hold_code(PyObject *const *dicts, int n, PyObject *code)
{
    int budget = THROUGH_BUDGET;
    for (int what = 0; what <= 2; what++) {
        for (int i = 0; i < n; i++) {
            if (dict_holds_code(dicts[i], code, what, &budget)) {
                return 1;
            }
        }
    }
    return 0;
}

/* Frames of the stack whose codes' constants are searched (codes_find_through),
 * and how deep into nested codes. */
#define THROUGH_FRAMES 8
#define THROUGH_NESTING 3

/* Whether code is among the constants of outer (a code object), or of the codes
 * nested in them, nesting levels deep: a lambda's or a closure's code is a
 * constant of the code it is written in, which holds it alive while alive.
 * At most *budget constants read in all. */
static int consts_hold_code(PyCodeObject *outer, PyObject *code, int nesting, int *budget)
{
    PyObject *consts = outer->co_consts;
    if (consts == NULL || !PyTuple_Check(consts)) {
        return 0;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(consts);
    for (Py_ssize_t i = 0; i < n && *budget > 0; i++) {
        (*budget)--;
        PyObject *k = PyTuple_GET_ITEM(consts, i);
        if (!PyCode_Check(k)) {
            continue; /* another constant may lie where a code that died lay: only a code is one */
        }
        if (k == code || (nesting > 1 && consts_hold_code((PyCodeObject *)k, code, nesting - 1, budget))) {
            return 1;
        }
    }
    return 0;
}

const code_info *codes_find_through(PyCodeObject *code, pyframe frame)
{
    const code_info *info = codes_find(code);
    PyObject *globals = frame != NULL ? pyframe_globals(frame) : NULL;
    if (globals != NULL && !PyDict_Check(globals)) {
        globals = NULL;
    }
    /* Where a frame has returned into a frame of another module (the program's
     * last call, returned into the launcher), its functions are in the
     * program's dictionary. */
    PyObject *dicts[2];
    int n = 0;
    if (globals != NULL) {
        dicts[n++] = globals;
    }
    if (program_globals != NULL && program_globals != globals) {
        dicts[n++] = program_globals;
    }
    if (info != NULL) {
        return info;
    }
    for (int i = 0; i < through_n_missed; i++) {
        if (through_missed[i] == (uintptr_t)code) {
            return NULL;
        }
    }
    /* Reading dictionaries with the GIL: no Python code runs, nothing is
     * allocated, no reference is taken (PyDict_Next, the functions' fields). */
    if (dicts_hold_code(dicts, n, (PyObject *)code)) {
        return codes_lookup(code); /* held by a live function: alive */
    }
    int budget = THROUGH_BUDGET;
    pyframe f = frame;
    for (int depth = 0; f != NULL && depth < THROUGH_FRAMES; depth++, f = pyframe_caller(f)) {
        if (consts_hold_code(pyframe_code(f), (PyObject *)code, THROUGH_NESTING, &budget)) {
            return codes_lookup(code); /* a constant of a running code: alive */
        }
    }
    if (through_n_missed == THROUGH_MISSES) {
        through_n_missed = 0;
    }
    through_missed[through_n_missed++] = (uintptr_t)code;
    return NULL;
}

/* Instructions looked back at for one that has a line (codes_line). */
#define LINE_LOOKBACK 64

/* The line of the instruction at unit lasti, as the line table says.  Some
 * instructions have no line: the compiler's own cleanup code (a with block's or
 * an exception handler's exit, a loop's jump back on 3.10), for which
 * PyCode_Addr2Line answers -1.  They run for the line before them, so the
 * nearest earlier instruction's line is theirs; failing that, the code's first
 * line (a line the profile has, never -1). */
static int table_line(PyCodeObject *code, int lasti)
{
    for (int unit = lasti < 0 ? 0 : lasti, steps = 0; unit >= 0 && steps < LINE_LOOKBACK; unit--, steps++) {
        int line = PyCode_Addr2Line(code, unit * 2);
        if (line >= 0) {
            return line;
        }
    }
    return code->co_firstlineno;
}

/* A loop's jump back is the loop's, not its body's last line, which is where
 * the line table puts it (every version, 3.10 by the rule above): the eval loop
 * checks its eval breaker there, so a thread is found at that instruction far
 * more often than its cost says (it answers requests and waits for the GIL
 * there), and a rarely run last line (the body of an `if` ending the loop) was
 * charged most of a loop's time: 42-58% for a line run 8 times in 8 million
 * turns, with a second thread (austin's target34.py).  It goes to the line of
 * its target, the loop's head (`for`, `while`). */
static int line_of(const code_info *info, PyCodeObject *code, int lasti)
{
    if (info != NULL && info->n_back_edges > 0 && lasti >= 0) {
        for (int e = 0; e < info->n_back_edges; e++) {
            if (info->back_edges[2 * e] == lasti) {
                return table_line(code, info->back_edges[2 * e + 1]);
            }
        }
    }
    return table_line(code, lasti);
}

int codes_line(PyCodeObject *code, int lasti)
{
    table_key key = {(uint64_t)(uintptr_t)code, 0};
    return line_of(initialised ? table_find(&code_table, key) : NULL, code, lasti);
}

/* A reported code's lines are read all at once, in one pass over its line
 * table, when its LINES_FILL_AT-th instruction is asked for the first time:
 * each first ask reads the table from its start (PyCode_Addr2Line), which in
 * regex_v8's functions of thousands of lines took 53,000 instructions under
 * callgrind, 824 times a run (0.25% of the run); the pass reads it once.  Not
 * at the first ask: a code asked for one line or two (most) would pay for
 * all its lines. */
#define LINES_FILL_AT 4

/* Every instruction's line, as line_of has it, into info->lines (+ 1), in one
 * pass: _PyCode_CheckLineNumber (exported by every supported CPython, its
 * range's layout public) moves a range forwards through the table, from the
 * start _PyCode_InitAddressRange would give it (not exported before 3.15; its
 * fields are set here as it sets them, and the caller checks the result).  An
 * instruction without a line has the nearest earlier one's (table_line); a
 * loop's jump back has its target's (line_of), taken from the highest jump
 * down, so that a target that is itself a jump back still has its own. */
static void fill_lines(code_info *info, PyCodeObject *code)
{
    PyObject *table = code->co_linetable;
    if (table == NULL || !PyBytes_Check(table)) {
        return;
    }
    PyCodeAddressRange range;
    range.opaque.lo_next = (__typeof__(range.opaque.lo_next))PyBytes_AS_STRING(table);
    range.opaque.limit = range.opaque.lo_next + PyBytes_GET_SIZE(table);
    range.opaque.computed_line = code->co_firstlineno;
    range.ar_start = -1;
    range.ar_end = 0;
    range.ar_line = -1;
    int last = -1, last_at = 0;
    for (int unit = 0; unit < info->n_units; unit++) {
        int line = _PyCode_CheckLineNumber(unit * 2, &range);
        if (line >= 0) {
            last = line;
            last_at = unit;
        } else {
            line = last >= 0 && unit - last_at < LINE_LOOKBACK ? last : code->co_firstlineno;
        }
        info->lines[unit] = line + 1;
    }
    for (int e = info->n_back_edges - 1; e >= 0; e--) {
        info->lines[info->back_edges[2 * e]] = info->lines[info->back_edges[2 * e + 1]];
    }
}

int codes_line_known(const code_info *info, PyCodeObject *code, int lasti)
{
    /* The entry is the table's, not const: only its memo and its lines are
     * written here. */
    code_info *memo = (code_info *)info;
    int unit = (lasti < 0 ? -1 : lasti) + 2;
    if (memo->memo_unit == unit) {
        return memo->memo_line;
    }
    int known = info->lines != NULL && lasti >= 0 && lasti < info->n_units;
    int line = known && info->lines[lasti] != 0 ? info->lines[lasti] - 1 : line_of(info, code, lasti);
    if (known && info->lines[lasti] == 0 && memo->lines_read >= 0 && ++memo->lines_read == LINES_FILL_AT) {
        fill_lines(memo, code);
        if (memo->lines[lasti] != line + 1) {
            /* Not the line table's answer: the range was not set up as this
             * CPython sets it.  Back to one instruction at a time. */
            memset(memo->lines, 0, (size_t)info->n_units * sizeof(int32_t));
            memo->lines_read = -1;
        }
    }
    if (known) {
        memo->lines[lasti] = line + 1;
    }
    memo->memo_unit = unit;
    memo->memo_line = line;
    return line;
}

int codes_locate(PyThreadState *ts, pyframe *innermost, pyframe *reported)
{
    *innermost = pyframe_innermost(ts);
    return codes_reported_from(*innermost, reported);
}

int codes_reported_from(pyframe f, pyframe *reported)
{
    while (f != NULL) {
        const code_info *info = codes_lookup_in(pyframe_code(f), f);
        if (info == NULL) {
            return 0;
        }
        if (info->reported) {
            break;
        }
        f = pyframe_caller(f);
    }
    *reported = f;
    return 1;
}

int codes_python_at(const code_info *info, int lasti)
{
    if (lasti < 0 || lasti >= info->n_units) {
        return 1; /* before the first instruction: the frame is just starting */
    }
    return info->python_parked[lasti];
}

PyObject *codes_lines_both_ways(PyCodeObject *code)
{
    if (codes_init() != 0) {
        return NULL;
    }
    code_info info = {0};
    info.reported = 1;
    if (map_instructions(code, &info) != 0) {
        return PyErr_NoMemory();
    }
    PyObject *asked = PyList_New(info.n_units);
    PyObject *filled = PyList_New(info.n_units);
    if (asked != NULL && filled != NULL) {
        fill_lines(&info, code);
        for (int unit = 0; unit < info.n_units; unit++) {
            PyList_SET_ITEM(asked, unit, PyLong_FromLong(line_of(&info, code, unit)));
            PyList_SET_ITEM(filled, unit, PyLong_FromLong(info.lines[unit] - 1));
        }
    }
    arena_give(&code_arena, info.python_parked, map_bytes(&info));
    if (asked == NULL || filled == NULL || PyErr_Occurred()) {
        Py_XDECREF(asked);
        Py_XDECREF(filled);
        return NULL;
    }
    return Py_BuildValue("(NN)", asked, filled);
}

size_t codes_count(void)
{
    return initialised ? code_table.count : 0;
}

uint64_t codes_registered(void)
{
    return registered;
}

size_t codes_memory_bytes(void)
{
    if (!initialised) {
        return 0;
    }
    /* Per live code: its weak reference, the callback and the address it carries. */
    size_t per_code = (size_t)_PyWeakref_RefType.tp_basicsize + (size_t)PyCFunction_Type.tp_basicsize +
                      (size_t)PyLong_Type.tp_basicsize + (size_t)PyLong_Type.tp_itemsize;
    return table_memory_bytes(&code_table) + code_arena.bytes_mapped + code_table.count * per_code +
           sites_memory_bytes();
}

void codes_new_run(void)
{
    if (sites_count() > SITES_MAX / 2) {
        codes_release(); /* the sites of a long series of runs, never removed, must not reach the cap */
    }
    registered = 0;
}

/* Drops every code's facts and weak reference (dropping one never calls its
 * callback). */
static void drop_codes(void)
{
    size_t cursor = 0;
    table_key key;
    code_info *info;
    while ((info = table_next(&code_table, &cursor, &key)) != NULL) {
        Py_XDECREF(info->watch);
    }
    table_release(&code_table);
    arena_release(&code_arena);
}

int codes_forget(void)
{
    if (!initialised) {
        return 0;
    }
    drop_codes();
    arena_init(&code_arena);
    if (table_init(&code_table, sizeof(code_info), 1024) != 0) {
        arena_release(&code_arena);
        initialised = 0; /* codes_init makes the table again (the sites stay) */
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

void codes_release(void)
{
    if (initialised) {
        drop_codes();
    }
    sites_release();
    registered = 0;
    initialised = 0;
}
