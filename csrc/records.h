/* records: the collectors' records made Python's, beside module.c at the
 * Python boundary.  Each kind of record's fields are named here once, in one
 * table, which both builds the record and is exported as its list of names
 * (_core.MEMORY_LINE_FIELDS, MEMORY_STACK_SUMS, MEMORY_RUN_FIELDS,
 * GPU_LINE_SUMS, GPU_DEVICE_FIELDS, GPU_RUN_FIELDS, GPU_KERNELS_FIELDS),
 * so that tests/unit/test_contract.py can hold the Python side to them. */
#ifndef PYROMETER_RECORDS_H
#define PYROMETER_RECORDS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The memory part of a collection (GIL held): None when memory was never
 * profiled; NULL with an exception set. */
PyObject *records_memory(void);
/* The GPU part (GIL held): None when GPU profiling was never started. */
PyObject *records_gpu(void);
/* Adds the tables' names to the module; -1 with an exception set. */
int records_add_names(PyObject *module);

#endif
