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
/* The memory part of the profile as Python data; GIL held. */
PyObject *mem_profile_collect(void);
void mem_profile_release(void);
/* What the memory side holds (its tables, timelines and queue). */
size_t mem_profile_memory_bytes(void);
/* The profiler's own work on this thread (GIL held, not released meanwhile) is
 * not counted: pause returns what resume needs. */
int64_t mem_profile_pause(void);
void mem_profile_resume(int64_t paused);

#endif
