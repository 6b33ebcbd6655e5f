/* stand_in: see stand_in.h. */
#include "stand_in.h"

#include <string.h>

/* One for each original ever replaced (os.fork, forkpty, _exit, waitpid,
 * wait, _signal.signal: six today).  A slot is kept for the life of the
 * process: a stand-in the program took a reference to still works after the
 * original is back (it calls the original), and putting the same original in
 * again (a second profile in one process, a forked child) uses its slot. */
#define STAND_INS 12

typedef struct {
    PyObject *original;   /* NULL: the slot was never used */
    PyObject *stand_in;
    PyObject *modules;    /* the names of the modules it was put in (a tuple) */
    char *name;
    char *doc;
    PyMethodDef def;
    stand_in_call call;   /* NULL: taken back, the original alone */
    void *data;
    PyObject *before, *after; /* the Python face's hooks */
} slot;

static slot S[STAND_INS];

static PyObject *enter(int i, PyObject *args, PyObject *kwargs)
{
    slot *s = &S[i];
    if (s->call == NULL) {
        return PyObject_Call(s->original, args, kwargs);
    }
    return s->call(s->original, args, kwargs, s->data);
}

#define ENTRY(i)                                                                                                \
    static PyObject *enter_##i(PyObject *self, PyObject *args, PyObject *kwargs)                                \
    {                                                                                                           \
        (void)self;                                                                                             \
        return enter(i, args, kwargs);                                                                          \
    }
ENTRY(0)
ENTRY(1)
ENTRY(2)
ENTRY(3)
ENTRY(4)
ENTRY(5)
ENTRY(6)
ENTRY(7)
ENTRY(8)
ENTRY(9)
ENTRY(10)
ENTRY(11)

static PyCFunctionWithKeywords entries[STAND_INS] = {enter_0, enter_1, enter_2, enter_3, enter_4,  enter_5,
                                                     enter_6, enter_7, enter_8, enter_9, enter_10, enter_11};

/* "name(signature)\n--\n\ndoc", as a builtin's doc holds its text signature;
 * NULL where the original has neither (or no memory: a doc is not needed). */
static char *doc_like(PyObject *original, const char *name)
{
    PyObject *sig = PyObject_GetAttrString(original, "__text_signature__");
    PyObject *doc = PyObject_GetAttrString(original, "__doc__");
    PyErr_Clear();
    const char *sig_s = sig != NULL && PyUnicode_Check(sig) ? PyUnicode_AsUTF8(sig) : NULL;
    const char *doc_s = doc != NULL && PyUnicode_Check(doc) ? PyUnicode_AsUTF8(doc) : NULL;
    PyErr_Clear();
    char *out = NULL;
    if (sig_s != NULL || doc_s != NULL) {
        size_t n = strlen(name) + (sig_s ? strlen(sig_s) : 0) + (doc_s ? strlen(doc_s) : 0) + 8;
        out = PyMem_RawMalloc(n);
        if (out != NULL && sig_s != NULL) {
            snprintf(out, n, "%s%s\n--\n\n%s", name, sig_s, doc_s ? doc_s : "");
        } else if (out != NULL) {
            snprintf(out, n, "%s", doc_s);
        }
    }
    Py_XDECREF(sig);
    Py_XDECREF(doc);
    return out;
}

static int slot_for(PyObject *original, const char *name)
{
    for (int i = 0; i < STAND_INS; i++) {
        if (S[i].original == original) {
            return i;
        }
    }
    for (int i = 0; i < STAND_INS; i++) {
        if (S[i].original != NULL) {
            continue;
        }
        slot *s = &S[i];
        s->name = PyMem_RawMalloc(strlen(name) + 1);
        if (s->name == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        strcpy(s->name, name);
        s->doc = doc_like(original, name);
        s->def = (PyMethodDef){s->name, (PyCFunction)(void (*)(void))entries[i], METH_VARARGS | METH_KEYWORDS,
                               s->doc};
        PyObject *module_name = PyObject_GetAttrString(original, "__module__");
        if (module_name == NULL) {
            PyErr_Clear();
        }
        s->stand_in = PyCFunction_NewEx(&s->def, PyCFunction_GET_SELF(original), module_name);
        Py_XDECREF(module_name);
        if (s->stand_in == NULL) {
            PyMem_RawFree(s->name);
            PyMem_RawFree(s->doc);
            memset(s, 0, sizeof *s);
            return -1;
        }
        s->original = Py_NewRef(original);
        return i;
    }
    PyErr_SetString(PyExc_RuntimeError, "pyrometer: no room for another stand-in");
    return -1;
}

/* Sets module.name to value where it holds `expected`. */
/* A module entry "module" holds the original as `name`; "module:alias" as
 * `alias` (threading's `_start_new_thread`, bound at its import). */
static PyObject *module_of(PyObject *entry, const char *name, const char **attr)
{
    const char *spec = PyUnicode_AsUTF8(entry);
    const char *colon = spec != NULL ? strchr(spec, ':') : NULL;
    *attr = colon != NULL ? colon + 1 : name;
    if (colon == NULL) {
        return spec != NULL ? PyImport_Import(entry) : NULL;
    }
    PyObject *module_name = PyUnicode_FromStringAndSize(spec, colon - spec);
    PyObject *module = module_name != NULL ? PyImport_Import(module_name) : NULL;
    Py_XDECREF(module_name);
    return module;
}

static int swap_in(PyObject *modules, const char *name, PyObject *expected, PyObject *value)
{
    int rc = 0;
    for (Py_ssize_t m = 0; m < PyTuple_GET_SIZE(modules) && rc == 0; m++) {
        const char *attr;
        PyObject *module = module_of(PyTuple_GET_ITEM(modules, m), name, &attr);
        PyObject *now = module != NULL ? PyObject_GetAttrString(module, attr) : NULL;
        if (now == expected) {
            rc = PyObject_SetAttrString(module, attr, value);
        } else if (now == NULL) {
            PyErr_Clear(); /* not in that module (a platform without it) */
        }
        Py_XDECREF(now);
        Py_XDECREF(module);
        if (module == NULL) {
            rc = -1;
        }
    }
    return rc;
}

int stand_in_put(const char *const *modules, const char *name, stand_in_call call, void *data)
{
    if (modules[0] == NULL) {
        PyErr_SetString(PyExc_ValueError, "stand_in needs a module");
        return -1;
    }
    PyObject *first = PyImport_ImportModule(modules[0]);
    PyObject *original = first != NULL ? PyObject_GetAttrString(first, name) : NULL;
    Py_XDECREF(first);
    if (original == NULL) {
        if (first != NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            return -2;
        }
        return -1;
    }
    for (int i = 0; i < STAND_INS; i++) {
        if (S[i].stand_in == original) {
            /* Ours already (a forked child's, from its parent's session): the
             * same slot, with its new hooks. */
            Py_DECREF(original);
            original = Py_NewRef(S[i].original);
            break;
        }
    }
    if (!PyCFunction_Check(original)) {
        Py_DECREF(original);
        return -2; /* not a builtin (another tool's): left alone */
    }
    int i = slot_for(original, name);
    if (i < 0) {
        Py_DECREF(original);
        return -1;
    }
    slot *s = &S[i];
    Py_ssize_t n = 0;
    while (modules[n] != NULL) {
        n++;
    }
    PyObject *names = PyTuple_New(n);
    for (Py_ssize_t m = 0; names != NULL && m < n; m++) {
        PyObject *one = PyUnicode_FromString(modules[m]);
        if (one == NULL) {
            Py_CLEAR(names);
            break;
        }
        PyTuple_SET_ITEM(names, m, one);
    }
    if (names == NULL) {
        Py_DECREF(original);
        return -1;
    }
    Py_XSETREF(s->modules, names);
    s->call = call;
    s->data = data;
    int rc = swap_in(s->modules, name, original, s->stand_in);
    Py_DECREF(original);
    if (rc != 0) {
        stand_in_take_back(i);
        return -1;
    }
    return i;
}

void stand_in_take_back(int handle)
{
    if (handle < 0 || handle >= STAND_INS || S[handle].original == NULL) {
        return;
    }
    slot *s = &S[handle];
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (s->modules != NULL && swap_in(s->modules, s->name, s->stand_in, s->original) != 0) {
        PyErr_Clear();
    }
    PyErr_Restore(type, value, traceback);
    s->call = NULL;
    s->data = NULL;
    Py_CLEAR(s->before);
    Py_CLEAR(s->after);
}

/* ---- The Python face ---------------------------------------------------- */

static void hook(PyObject *fn, PyObject *first, PyObject *args, PyObject *kwargs, PyObject *stand_in)
{
    PyObject *r = first != NULL ? PyObject_CallFunctionObjArgs(fn, first, args, kwargs, NULL)
                                : PyObject_CallFunctionObjArgs(fn, args, kwargs, NULL);
    if (r == NULL) {
        PyErr_WriteUnraisable(stand_in); /* pyrometer's own fault: never the program's */
    }
    Py_XDECREF(r);
}

static PyObject *python_hooks(PyObject *original, PyObject *args, PyObject *kwargs, void *data)
{
    slot *s = data;
    PyObject *kw = kwargs != NULL ? Py_NewRef(kwargs) : PyDict_New();
    if (kw == NULL) {
        return NULL;
    }
    if (s->before != NULL) {
        PyObject *before = Py_NewRef(s->before);
        hook(before, NULL, args, kw, s->stand_in);
        Py_DECREF(before);
    }
    PyObject *result = PyObject_Call(original, args, kwargs);
    if (result != NULL && s->after != NULL) {
        PyObject *after = Py_NewRef(s->after);
        hook(after, result, args, kw, s->stand_in);
        Py_DECREF(after);
    }
    Py_DECREF(kw);
    return result;
}

static PyObject *py_stand_in(PyObject *module, PyObject *args, PyObject *kwargs)
{
    (void)module;
    static char *keywords[] = {"modules", "name", "before", "after", NULL};
    PyObject *modules, *before = Py_None, *after = Py_None;
    const char *name;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!s|OO:stand_in", keywords, &PyTuple_Type, &modules, &name,
                                     &before, &after)) {
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(modules);
    if (n < 1 || n > 4) {
        PyErr_SetString(PyExc_ValueError, "stand_in takes one to four module names");
        return NULL;
    }
    const char *names[5] = {NULL, NULL, NULL, NULL, NULL};
    for (Py_ssize_t m = 0; m < n; m++) {
        names[m] = PyUnicode_Check(PyTuple_GET_ITEM(modules, m)) ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(modules, m))
                                                                 : NULL;
        if (names[m] == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_TypeError, "stand_in: module names are strings");
            }
            return NULL;
        }
    }
    /* The hooks are set once the slot is known: put with no call first. */
    int handle = stand_in_put(names, name, NULL, NULL);
    if (handle < 0) {
        if (handle == -2) {
            Py_RETURN_NONE;
        }
        return NULL;
    }
    slot *s = &S[handle];
    Py_XSETREF(s->before, before != Py_None ? Py_NewRef(before) : NULL);
    Py_XSETREF(s->after, after != Py_None ? Py_NewRef(after) : NULL);
    s->call = python_hooks;
    s->data = s;
    return PyLong_FromLong(handle);
}

static PyObject *py_take_back(PyObject *module, PyObject *handle)
{
    (void)module;
    long h = PyLong_AsLong(handle);
    if (h == -1 && PyErr_Occurred()) {
        return NULL;
    }
    stand_in_take_back((int)h);
    Py_RETURN_NONE;
}

PyMethodDef stand_in_methods[] = {
    {"stand_in", (PyCFunction)(void (*)(void))py_stand_in, METH_VARARGS | METH_KEYWORDS,
     "stand_in(modules, name, before=None, after=None) -> handle or None\n"
     "Replace the builtin `name` of the modules (names; the original from the first) with a stand-in that "
     "looks the same and calls before(args, kwargs), the original, then after(result, args, kwargs); None "
     "where there is no such builtin."},
    {"stand_in_take_back", py_take_back, METH_O,
     "stand_in_take_back(handle)\nPut the original back where its stand-in still is."},
    {NULL, NULL, 0, NULL},
};
