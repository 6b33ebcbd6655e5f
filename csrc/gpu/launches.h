/* launches: which Python line launched each piece of GPU work, for the kernel
 * tier (gpu.h).
 *
 * A vendor's tracing library (CUPTI: cupti.c) calls back on the launching
 * thread, inside the API call, with a correlation id; much later, on another
 * thread, it delivers records of what the device did (a kernel's start and end,
 * a copy's bytes) carrying the same id.  So the launch callback notes where the
 * launching thread stands (launches_note), and each record is charged to the
 * line noted under its id (launches_charge).
 *
 * The note runs inside the program's CUDA call, on any thread, GIL held or not:
 * it calls nothing in CPython that allocates or locks, and takes no lock.  With
 * the GIL and every code object on the way already known (codes_find) it reads
 * the line at once; otherwise it queues the thread's frames (holding references
 * when it has the GIL) for launches_drain, which runs at each CPU snapshot with
 * the GIL, as the memory side's queue does (csrc/memory/mem_profile.c).  A
 * thread with no Python state (a native pool, e.g. PyTorch's autograd threads)
 * is charged to the line the main thread stood on at the latest snapshot: the
 * line waiting for that work.
 */
#ifndef PYROMETER_GPU_LAUNCHES_H
#define PYROMETER_GPU_LAUNCHES_H

#include <stddef.h>
#include <stdint.h>

/* What a record says the device did. */
enum gpu_work_kind {
    GPU_WORK_KERNEL,
    GPU_WORK_COPY,
    GPU_WORK_MEMSET,
    GPU_WORK_ALLOC,
};

enum gpu_copy_direction {
    GPU_COPY_HTOD,
    GPU_COPY_DTOH,
    GPU_COPY_DTOD,
    GPU_COPY_OTHER, /* host to host, or a kind the library does not name */
    GPU_COPY_DIRECTIONS,
};

typedef struct {
    enum gpu_work_kind kind;
    enum gpu_copy_direction direction; /* GPU_WORK_COPY */
    uint32_t correlation;
    uint64_t device_ns; /* kernels, copies, memsets: end - start on the device's clock */
    uint64_t bytes;     /* copies, memsets, allocations */
} gpu_work;

/* Starts noting launches (GIL held); 0, or -1 when out of memory. */
int launches_start(void);
/* No more notes are taken; notes in flight finish (GIL held). */
void launches_stop(void);

/* The launching thread, inside the API call: notes where it stands under
 * correlation.  Lock-free; never calls CPython in a way that allocates. */
void launches_note(uint32_t correlation);

/* Any thread (the library's delivery thread): charges one record to its
 * launching line (gpu_charge_work), or keeps it until the drain has placed its
 * launch. */
void launches_charge(const gpu_work *work);

/* GIL held: places the queued launches, then charges the records that waited
 * for them.  final: what is still unplaced is charged to no line. */
void launches_drain(int final);

/* Launches queued too fast to note (the queue was full) and records kept too
 * long to wait for theirs (their time is charged to no line). */
void launches_lost(uint64_t *launches, uint64_t *records);

/* In a forked child: the parent's notes and locks are not this process's. */
void launches_forget_in_child(void);

#endif
