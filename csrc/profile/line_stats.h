/* line_stats: the profile's per-location aggregates, keyed by (code object,
 * instruction index).  The instruction is resolved to a line number only when the
 * profile is collected, so the sample path never decodes line tables.  Size
 * follows the number of distinct locations sampled, never the run time.
 * Callers hold the GIL (the only writers are sampler snapshots).
 */
#ifndef PYROMETER_LINE_STATS_H
#define PYROMETER_LINE_STATS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct {
    uint64_t python_ns;  /* CPU time executing bytecode */
    uint64_t native_ns;  /* CPU time in C called from this location */
    uint64_t system_ns;  /* wall time not on a CPU: I/O, sleeping, waiting */
    double busy_core_ns; /* attributed time weighted by the fraction of cores busy */
    uint64_t samples;
    /* Estimated time, in units of the main thread's mean time between requests
     * (known only when the profile is collected; see sampler.c). */
    double est_python, est_native, est_system, est_busy;
} cpu_sums;

typedef struct {
    cpu_sums cpu;
} line_record;

int line_stats_init(void);
/* The record for a location (code must be registered in codes.h, which keeps it
 * alive); NULL when memory runs out. */
line_record *line_stats_at(PyCodeObject *code, int lasti);
/* Iteration: start with *cursor = 0; NULL when done. */
line_record *line_stats_next(size_t *cursor, PyCodeObject **code, int *lasti);
void line_stats_release(void);
size_t line_stats_memory_bytes(void);

/* One estimated unit (a request interval) of time, on CPU for on_cpu of it. */
void cpu_sums_add_estimate(cpu_sums *into, int native, double on_cpu, double core_fraction);
/* Measured plus estimated time in nanoseconds, given the length of one unit. */
void cpu_sums_resolve(const cpu_sums *s, double unit_ns, double *python_ns, double *native_ns,
                      double *system_ns, double *busy_core_ns);
void cpu_sums_add(cpu_sums *into, uint64_t python_ns, uint64_t native_ns, uint64_t system_ns,
                  double core_fraction);

#endif
