/* line_stats: the profile's per-line aggregates, keyed by (site, line number):
 * the function as the report names it (sites.h) and the line, resolved when the
 * sample is taken (the code object may be gone by the time the profile is
 * collected).  Size follows the number of distinct lines sampled, never the run
 * time or the number of code objects.
 * Callers hold the GIL (the only writers are sampler snapshots).
 */
#ifndef PYROMETER_LINE_STATS_H
#define PYROMETER_LINE_STATS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* The figures whose sampling variance a cpu_sums keeps: each kind, and the
 * time of all five kinds together. */
enum { VAR_PYTHON, VAR_NATIVE, VAR_SYSTEM, VAR_GIL_WAIT, VAR_CPU_WAIT, VAR_TIME, CPU_VARS };

typedef struct {
    uint64_t python_ns;   /* CPU time executing bytecode */
    uint64_t native_ns;   /* CPU time in C called from this location */
    uint64_t system_ns;   /* off CPU, blocked in native code: I/O, sleeping, a lock */
    uint64_t gil_wait_ns; /* off CPU while running Python: waiting for the GIL */
    uint64_t cpu_wait_ns; /* runnable but waiting for a CPU (the kernel's run queue) */
    /* Off CPU in an asyncio event loop's own code, waiting for events: the loop
     * was idle, not this line; kept apart, in no percentage (the waiting is the
     * suspended tasks' await_ns at their own lines; see awaits.h). */
    uint64_t loop_idle_ns;
    /* Time coroutines spent suspended at an await here: each snapshot adds its
     * window once per task suspended here (task-seconds, not wall time). */
    uint64_t await_ns;
    double busy_core_ns;  /* attributed time weighted by the fraction of cores busy */
    uint64_t samples;
    /* Estimated time, in units of the main thread's mean time between requests
     * (known only when the profile is collected; see sampler_get_totals). */
    double est_python, est_native, est_system, est_gil_wait, est_cpu_wait, est_loop_idle, est_busy;
    /* The variance of each figure's sampling (CPU_VARS), in ns^2: a window
     * charged whole is one draw of a Poisson process of samples, its square
     * (cpu_sums_add); the main thread's spread peeks, a stratified sample,
     * add the squared differences of successive peeks (sampler/spread.c).
     * est_var: the estimated units', in units^2. */
    double var[CPU_VARS], est_var[CPU_VARS];
} cpu_sums;

/* Where a window's time went, before it is charged: wall and CPU time, the time
 * the thread waited on the run queue, and whether it was running Python (then
 * its other time off CPU was waiting for the GIL) or native code (then it was
 * blocked: system, or, in an event loop's own code, the loop's idle time). */
typedef struct {
    uint64_t wall_ns, cpu_ns, runq_ns;
    int native;
    int loop_idle; /* the thread stood in an asyncio event loop's own code */
    /* No other thread of the program could hold the GIL (it has one Python
     * thread): time off CPU while running Python was a wait for a CPU that the
     * run-queue figure missed (schedstat counts a wait when it ends), not for
     * the GIL. */
    int gil_alone;
} cpu_window;

typedef struct {
    cpu_sums cpu;
} line_record;

int line_stats_init(void);
/* The record for a line of a site; NULL when memory runs out. */
line_record *line_stats_at(uint32_t site, int lineno);
/* Iteration: start with *cursor = 0; NULL when done. */
line_record *line_stats_next(size_t *cursor, uint32_t *site, int *lineno);
void line_stats_release(void);
size_t line_stats_memory_bytes(void);

/* One estimated unit (a request interval) of time: on CPU for on_cpu of it, on
 * the run queue for runq of it, the rest off CPU (loop_idle, gil_alone: as in cpu_window). */
void cpu_sums_add_estimate(cpu_sums *into, int native, int loop_idle, int gil_alone, double on_cpu, double runq,
                           double core_fraction);
/* Measured plus estimated time in nanoseconds, given the length of one unit. */
typedef struct {
    double python_ns, native_ns, system_ns, gil_wait_ns, cpu_wait_ns, loop_idle_ns, busy_core_ns;
} cpu_totals;
void cpu_sums_resolve(const cpu_sums *s, double unit_ns, cpu_totals *out);
/* The variance of each figure (CPU_VARS), in ns^2, given the length of one unit. */
void cpu_sums_variance(const cpu_sums *s, double unit_ns, double out[CPU_VARS]);
/* A measured window; off-CPU time is left out with count_off_cpu 0 (virtual time). */
void cpu_sums_add(cpu_sums *into, const cpu_window *w, int count_off_cpu, double core_fraction);
/* The same, without its variance; parts: what it added to each figure (CPU_VARS). */
void cpu_sums_add_parts(cpu_sums *into, const cpu_window *w, int count_off_cpu, double core_fraction,
                        double parts[CPU_VARS]);
/* Adds each figure's variance from parts (cpu_sums_add_parts): one draw. */
void cpu_sums_add_draw(cpu_sums *into, const double parts[CPU_VARS]);
/* CPU time alone, not a sample of its own: native time of threads without Python
 * state, charged to the main thread's location; a thread's Python time charged
 * where it was last seen running (csrc/sampler/charge.c). */
void cpu_sums_add_cpu(cpu_sums *into, uint64_t ns, int native, double core_fraction);

#endif
