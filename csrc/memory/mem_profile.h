/* mem_profile: memory, copy and leak samples from the preloaded library, charged
 * to lines.
 *
 * A sample arrives on the thread that crossed its window.  If that thread holds
 * the GIL, its own frames say where it is and the sample is charged at once.  A
 * thread without the GIL (native code that released it) queues the sample in a
 * lock-free ring, charged at the next CPU snapshot to where that thread then
 * stands.  A thread that never ran Python is native: its bytes are counted for the
 * run, never guessed onto a line.
 */
#ifndef PYROMETER_MEM_PROFILE_H
#define PYROMETER_MEM_PROFILE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* GIL held.  0, or -1 with an exception set (e.g. the library is not preloaded).
 * leak_detector: whether sampled allocations are watched until they are freed. */
int mem_profile_start(int64_t window_bytes, int leak_detector);
void mem_profile_stop(void);
int mem_profile_active(void);
/* Charge queued samples; GIL held (called by every CPU snapshot). */
void mem_profile_drain(void);
/* From the sampler thread at each wake (no GIL, not inside an allocator): asks
 * the main thread for a drain when samples were queued. */
void mem_profile_poll(void);
/* The memory part of the profile, as records (records.c makes them Python's:
 * the fields' names are written there once).  GIL held; each after
 * mem_profile_collect_begin, which charges the queued samples and says
 * whether there is a profile at all. */
int mem_profile_collect_begin(void);

/* A timeline's points: (seconds since the start, MB). */
typedef struct mem_series mem_series;
uint32_t mem_series_count(const mem_series *s);
void mem_series_point(const mem_series *s, uint32_t i, double *t_sec, double *mb);

typedef struct {
    uint32_t site;               /* sites.h: the line's function */
    int lineno;
    uint64_t alloc_bytes, python_bytes, free_bytes, churn_bytes, copy_bytes;
    /* Of alloc_bytes and free_bytes, the samples of whole windows (native and
     * Python's apart): the part of each with a sampling error. */
    uint64_t window_sampled_bytes, python_window_sampled_bytes;
    uint64_t freed_window_sampled_bytes, freed_python_window_sampled_bytes;
    uint64_t alloc_samples, free_samples, copy_samples;
    int64_t net_bytes, peak_bytes;
    uint64_t watched, watched_freed, watched_evicted;
    const mem_series *timeline;
} mem_line_record;
/* The next line with a record from *cursor (0 at first); 0 at the end. */
int mem_profile_next_line(size_t *cursor, mem_line_record *out);

/* A call stack's sums (stack: the id of the collection's "stacks", module.c). */
typedef struct {
    uint64_t stack;
    uint64_t alloc_bytes, python_bytes, free_bytes, copy_bytes, churn_bytes;
} mem_stack_record;
int mem_profile_next_stack(size_t *cursor, mem_stack_record *out);
/* The bucket of the stacks past the cap (its stack: unused). */
void mem_profile_other_stacks(mem_stack_record *out);

/* The run's own figures. */
typedef struct {
    int64_t max_footprint_bytes, footprint_bytes, window_bytes, python_window_bytes;
    double max_footprint_time_sec;
    uint32_t max_footprint_site; /* SITE_NONE: at no line */
    int max_footprint_lineno;
    uint64_t unattributed_alloc_bytes, unattributed_python_bytes, unattributed_free_bytes,
        unattributed_churn_bytes, unattributed_copy_bytes;
    uint64_t native_thread_alloc_bytes, native_thread_free_bytes, native_thread_copy_bytes;
    uint64_t dropped_samples, dropped_bytes, queued_samples;
    int python_memory_profiled, leak_detector;
    const char *python_allocator, *python_memory_why;
    const mem_series *footprint;
} mem_run_record;
void mem_profile_run(mem_run_record *out);
void mem_profile_release(void);
/* What the memory side holds (its tables, timelines and queue). */
size_t mem_profile_memory_bytes(void);
/* The profiler's own work on this thread (GIL held, not released meanwhile) is
 * not counted: pause returns what resume needs. */
int64_t mem_profile_pause(void);
void mem_profile_resume(int64_t paused);

#endif
