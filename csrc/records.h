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

#include "profile/sites.h"

/* The memory part of a collection (GIL held): None when memory was never
 * profiled; NULL with an exception set. */
PyObject *records_memory(void);
/* The GPU part (GIL held): None when GPU profiling was never started. */
PyObject *records_gpu(void);
#include <stdint.h>

/* A line's, a stack's or the run's CPU sums, resolved (module.c): each kind's
 * time in ns, its samples, and each kind's sampling variance in ns^2. */
typedef struct {
    double python_ns, native_ns, system_ns, busy_ns;
    uint64_t samples;
    double gil_wait_ns, cpu_wait_ns, loop_idle_ns, await_ns;
    double python_var, native_var, system_var, gil_wait_var, cpu_wait_var, time_var;
} cpu_sums_figures;

/* The sums as a _core.CpuSums (GIL held, records_add_names done); NULL with
 * an exception set. */
PyObject *records_cpu_sums(const cpu_sums_figures *figures);
/* A line's place and its CPU sums as a _core.CpuLine, a stack node as a
 * _core.StackNode (cpu: a CpuSums or None); each takes the reference to cpu
 * (NULL: an error already set).  NULL with an exception set. */
PyObject *records_cpu_line(const site *where, int lineno, PyObject *cpu);
PyObject *records_stack_node(long parent, Py_ssize_t frame, PyObject *cpu);
/* Adds the tables' names and the record types to the module; -1 with an
 * exception set. */
int records_add_names(PyObject *module);

#endif
