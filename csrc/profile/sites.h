/* sites: what the profile is keyed by.  A site is a function as the report names
 * it: (file name, qualified name, first line).  Every code object of that
 * function (an exec loop or a factory makes a new one each time) shares one
 * site, and the profile's line records are keyed by (site, line number), so
 * that they outlive the code objects, which the profiler never keeps alive (see
 * codes.h).  Sites hold the two strings, interned here, and are never removed:
 * their number follows the distinct functions met, up to SITES_MAX, beyond
 * which every new one shares an overflow site (the report says so).
 * Callers hold the GIL.
 */
#ifndef PYROMETER_SITES_H
#define PYROMETER_SITES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define SITES_MAX 100000
#define SITE_NONE UINT32_MAX

typedef struct {
    PyObject *filename; /* str */
    PyObject *qualname; /* str */
    int firstlineno;
} site;

int sites_init(void);
/* The site of a code object, interned at first sight (calls CPython, which
 * allocates); SITE_NONE with no exception set when memory runs out. */
uint32_t sites_intern(PyCodeObject *code);
/* The same, the code's file named filename (a str): codes.c's dynamic codes. */
uint32_t sites_intern_as(PyCodeObject *code, PyObject *filename);
/* The site of an id from sites_intern; NULL for SITE_NONE. */
const site *sites_get(uint32_t id);
/* How many functions shared the overflow site because SITES_MAX was reached. */
uint64_t sites_overflowed(void);
size_t sites_count(void);
/* What the sites hold, their Python objects included. */
size_t sites_memory_bytes(void);
void sites_release(void);

#endif
