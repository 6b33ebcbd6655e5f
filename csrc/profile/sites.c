#include "sites.h"
#include "../common/arena.h"
#include "../cpython/pyframe.h"

/* The sites by id, in mmap'd memory grown by doubling (never through the
 * hooked allocator), and a dict from (filename, qualname, firstlineno) to id.
 * The dict's keys hold the strings that the entries point to. */
static struct {
    site *entries;
    size_t count, capacity;
    PyObject *ids;
    uint32_t overflow; /* the overflow site, SITE_NONE until needed */
    uint64_t overflowed;
    size_t object_bytes; /* the key tuples, their strings and the ids, as added */
    int initialised;
} sites_state;

static size_t object_size(PyObject *o);

int sites_init(void)
{
    if (sites_state.initialised) {
        return 0;
    }
    sites_state.ids = PyDict_New();
    if (sites_state.ids == NULL) {
        return -1;
    }
    sites_state.overflow = SITE_NONE;
    sites_state.initialised = 1;
    return 0;
}

static int grow(void)
{
    size_t capacity = sites_state.capacity == 0 ? 1024 : sites_state.capacity * 2;
    site *bigger = region_map(capacity * sizeof(site));
    if (bigger == NULL) {
        return -1;
    }
    if (sites_state.entries != NULL) {
        memcpy(bigger, sites_state.entries, sites_state.count * sizeof(site));
        region_unmap(sites_state.entries, sites_state.capacity * sizeof(site));
    }
    sites_state.entries = bigger;
    sites_state.capacity = capacity;
    return 0;
}

/* A new site for key (a (filename, qualname, firstlineno) tuple, which the
 * dict keeps); SITE_NONE when memory runs out. */
static uint32_t add(PyObject *key)
{
    if (sites_state.count == sites_state.capacity && grow() != 0) {
        return SITE_NONE;
    }
    uint32_t id = (uint32_t)sites_state.count;
    PyObject *value = PyLong_FromUnsignedLong(id);
    if (value == NULL || PyDict_SetItem(sites_state.ids, key, value) != 0) {
        Py_XDECREF(value);
        PyErr_Clear();
        return SITE_NONE;
    }
    site *s = &sites_state.entries[id];
    s->filename = PyTuple_GET_ITEM(key, 0);
    s->qualname = PyTuple_GET_ITEM(key, 1);
    s->firstlineno = (int)PyLong_AsLong(PyTuple_GET_ITEM(key, 2));
    sites_state.count++;
    /* A file's name, interned, is counted once per site that names it: an
     * overestimate, never an underestimate. */
    sites_state.object_bytes += object_size(key) + object_size(s->filename) + object_size(s->qualname) +
                                object_size(value);
    Py_DECREF(value);
    return id;
}

static uint32_t overflow_site(void)
{
    sites_state.overflowed++;
    if (sites_state.overflow == SITE_NONE) {
        PyObject *key = Py_BuildValue("(ssi)", "<other functions>", "<other functions>", 0);
        if (key == NULL) {
            PyErr_Clear();
            return SITE_NONE;
        }
        sites_state.overflow = add(key);
        Py_DECREF(key);
    }
    return sites_state.overflow;
}

uint32_t sites_intern(PyCodeObject *code)
{
    return sites_intern_as(code, code->co_filename);
}

uint32_t sites_intern_as(PyCodeObject *code, PyObject *filename)
{
    if (!sites_state.initialised) {
        return SITE_NONE;
    }
    PyObject *qualname = pyframe_code_qualname(code);
    if (filename == NULL || !PyUnicode_Check(filename) || qualname == NULL || !PyUnicode_Check(qualname)) {
        return SITE_NONE;
    }
    PyObject *key = Py_BuildValue("(OOi)", filename, qualname, code->co_firstlineno);
    if (key == NULL) {
        PyErr_Clear();
        return SITE_NONE;
    }
    uint32_t id = SITE_NONE;
    PyObject *known = PyDict_GetItemWithError(sites_state.ids, key);
    if (known != NULL) {
        id = (uint32_t)PyLong_AsUnsignedLong(known);
    } else if (PyErr_Occurred()) {
        PyErr_Clear();
    } else if (sites_state.count >= SITES_MAX) {
        id = overflow_site();
    } else {
        /* Interned, so that the many code objects of one file share one string. */
        PyObject *filename = PyTuple_GET_ITEM(key, 0);
        Py_INCREF(filename);
        PyUnicode_InternInPlace(&filename);
        PyObject *interned = Py_BuildValue("(NOi)", filename, qualname, code->co_firstlineno);
        if (interned != NULL) {
            id = add(interned);
            Py_DECREF(interned);
        } else {
            PyErr_Clear();
        }
    }
    Py_DECREF(key);
    return id;
}

const site *sites_get(uint32_t id)
{
    return id < sites_state.count ? &sites_state.entries[id] : NULL;
}

uint64_t sites_overflowed(void)
{
    return sites_state.overflowed;
}

size_t sites_count(void)
{
    return sites_state.count;
}

/* sys.getsizeof(o), 0 when it cannot tell. */
static size_t object_size(PyObject *o)
{
    PyObject *getsizeof = PySys_GetObject("getsizeof"); /* borrowed */
    PyObject *n = getsizeof != NULL ? PyObject_CallOneArg(getsizeof, o) : NULL;
    size_t bytes = n != NULL ? PyLong_AsSize_t(n) : 0;
    Py_XDECREF(n);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        bytes = 0;
    }
    return bytes;
}

size_t sites_memory_bytes(void)
{
    if (!sites_state.initialised) {
        return 0;
    }
    return sites_state.capacity * sizeof(site) + object_size(sites_state.ids) + sites_state.object_bytes;
}

void sites_release(void)
{
    if (!sites_state.initialised) {
        return;
    }
    Py_CLEAR(sites_state.ids);
    region_unmap(sites_state.entries, sites_state.capacity * sizeof(site));
    sites_state.entries = NULL;
    sites_state.count = sites_state.capacity = 0;
    sites_state.overflow = SITE_NONE;
    sites_state.overflowed = 0;
    sites_state.object_bytes = 0;
    sites_state.initialised = 0;
}
