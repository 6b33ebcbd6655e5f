/* gpu: GPU busy time and GPU memory per line, measured from inside the process.
 *
 * A GPU thread (plain C: it never holds the GIL and never calls CPython) loads a
 * vendor backend, then polls it every GPU_POLL_NS (memory: GPU_MEMORY_POLL_NS).  A backend reports
 * utilisation as timestamped samples, each the busy share of a window (~200 ms
 * for NVML) that ended at its timestamp and is published tens of milliseconds
 * after it: each sample's busy time (share x window) is spread over the lines
 * the program's main thread ran *during* that window, read back from the CPU
 * snapshots' line_timeline (csrc/profile/line_timeline.h), in proportion to the
 * time each covers.  The process's own GPU memory is read at each poll and
 * charged to the line of the snapshot nearest in time (average and peak per
 * line).
 *
 * Backends (one file each, behind gpu_backend below): nvml.c, utilisation
 * windows from NVML.
 *
 * The kernel tier (--gpu-kernels; behind gpu_kernel_backend below: cupti.c)
 * is exact where NVML's windows are not: the vendor's tracing library calls
 * back on the launching thread, where the launching line is noted under the
 * call's correlation id (launches.h), and later delivers records of each
 * kernel's device time, each copy's bytes and direction, each allocation,
 * which are charged to the line noted under their id (gpu_charge_work).  Its
 * figures sit beside NVML's per line (kernel seconds beside busy seconds):
 * the two measure different things and are not merged.
 *
 * Nothing here is fatal: no library, no device, a failed call each end in "no
 * GPU data" with a reason (the run record's "why"), never an exception mid-run.
 */
#ifndef PYROMETER_GPU_H
#define PYROMETER_GPU_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "launches.h"

#define GPU_POLL_NS 100000000ULL       /* utilisation: 100 ms, half a window */
#define GPU_MEMORY_POLL_NS 20000000ULL  /* memory: 20 ms (a cheap call), so that a line
                                         * holding memory 1 s gets 50 readings */

/* ---- the subsystem (GIL held for each of these) ---------------------------- */

/* Starts the GPU thread; loading the library and finding devices happen on it
 * (NVML's init can take a while).  0, or -1 with an exception set (out of
 * threads).  explicit: the user asked for --gpu (a missing library is then a
 * notice, not a silent absence).  kernels: also the kernel tier
 * (--gpu-kernels), whose library is loaded and subscribed here, before the
 * program launches anything: a copy already loaded, else from one of
 * kernel_library_dirs (':' between them; NULL: none), else from the search
 * path.  own_thread: called with 1 first on the GPU
 * thread, so that what the vendor library allocates there is counted as the
 * profiler's, not the program's, and with 0 as it ends (the memory side's,
 * given by module.c); NULL: nothing. */
int gpu_start(int explicit_request, int kernels, const char *kernel_library_dirs, void (*own_thread)(int own));
/* Stops and joins the GPU thread (GIL released while waiting; at most a few
 * seconds: a backend call that never returns leaves its thread behind). */
void gpu_stop(void);
/* ---- the records (records.c makes them Python's, naming their fields) ---- */

typedef struct {
    const char *backend, *status, *why;
    int explicit_request;         /* --gpu was given */
    double unattributed_busy_ns;  /* busy time charged to no line */
    uint64_t peak_memory_bytes;
} gpu_run_record;

typedef struct {
    const char *name, *source; /* source: "process" (its share) or "device" */
    double busy_ns;
    uint64_t peak_memory_bytes, samples;
    int shared;
} gpu_device_record;

typedef struct {
    uint32_t site; /* sites.h */
    int lineno;
    double busy_ns, memory_sum_bytes;
    uint64_t memory_samples, memory_peak_bytes;
    /* The kernel tier's: what the line launched. */
    uint64_t kernel_ns, kernels, copy_htod_bytes, copy_dtoh_bytes, copy_dtod_bytes, copy_other_bytes,
        memset_bytes, alloc_bytes;
} gpu_line_record;

typedef struct {
    uint64_t stack; /* the id of the collection's "stacks" (module.c) */
    double busy_ns;
} gpu_stack_record;

typedef struct {
    const char *backend, *status, *why, *library;
    uint64_t kernels, copies, memsets, allocations, kernel_ns;
    uint64_t copy_htod_bytes, copy_dtoh_bytes, copy_dtod_bytes;
    uint64_t unattributed_kernel_ns, unattributed_copy_bytes;
    uint64_t lost_launches, lost_records, dropped_records;
} gpu_kernels_record;

/* 0 when GPU profiling was never started (no records).  Else the records may
 * be read until gpu_records_end, the GPU side's lock held meanwhile: the GPU
 * thread only waits (it never needs the GIL), so Python objects may be made
 * in between. */
int gpu_records_begin(gpu_run_record *run);
/* 0 when the kernel tier was not asked for. */
int gpu_records_kernels(gpu_kernels_record *out);
/* Each returns 0 past the last; *cursor starts at 0. */
int gpu_next_device(size_t *cursor, gpu_device_record *out);
int gpu_next_notice(size_t *cursor, char *text, size_t size);
int gpu_next_line(size_t *cursor, gpu_line_record *out);
int gpu_next_stack(size_t *cursor, gpu_stack_record *out);
void gpu_records_end(void);
/* Forgets every aggregate (the GPU thread is stopped). */
void gpu_release(void);
/* At each CPU snapshot: places the launches the kernel tier noted without
 * being able to read their line (launches_drain).  Cheap when the tier is off. */
void gpu_kernels_drain(void);

/* ---- the backend interface ------------------------------------------------- */

/* One utilisation reading: the share (0-100) of the window ending at end_us
 * (CLOCK_REALTIME microseconds) in which the device, or this process on it,
 * was busy. */
typedef struct {
    uint64_t end_us;
    unsigned percent;
} gpu_busy_sample;

/* Whose busy time a sample measures. */
enum gpu_source {
    GPU_SOURCE_DEVICE,  /* the whole device: right when this process is its only user */
    GPU_SOURCE_PROCESS, /* this process's own share (a device shared with others) */
};

/* This process's use of a device at one poll. */
typedef struct {
    uint64_t memory_bytes; /* device memory this process holds */
    int listed;            /* the process is in the device's list of compute processes */
    int others;            /* other processes are */
} gpu_process_usage;

enum gpu_status {
    GPU_OK = 0,
    GPU_NOTHING_NEW = 1,   /* no sample newer than asked */
    GPU_UNSUPPORTED = -2,  /* the device cannot tell this (e.g. per-process samples) */
    GPU_FAILED = -1,       /* the call failed: why says how */
    GPU_BUSY = -3,         /* the library takes one user, and another holds it */
};

/* Every function runs on the GPU thread only, one call at a time: a backend
 * needs no locking of its own. */
typedef struct {
    const char *name; /* "NVML" */
    /* Loads the vendor library and finds the devices: their number; 0 when
     * there is nothing to profile (no library, no device), -1 when the library
     * failed; why filled in for both. */
    int (*open)(char *why, size_t why_size);
    /* The one function called off the GPU thread (GIL held, no GPU thread of
     * this run started yet): 1, why filled in, when open would find nothing
     * and that is known without blocking (the library was searched for
     * before, in vain, and none is loaded since); else 0.  May be NULL. */
    int (*known_absent)(char *why, size_t why_size);
    void (*device_name)(int device, char *out, size_t size);
    /* GPU_OK or GPU_FAILED/GPU_UNSUPPORTED (why filled in). */
    int (*process_usage)(int device, pid_t pid, gpu_process_usage *out, char *why, size_t why_size);
    /* Samples newer than since_us, oldest first, at most max (*count set);
     * source GPU_SOURCE_PROCESS: pid's own.  GPU_OK, GPU_NOTHING_NEW, or an
     * error (why filled in). */
    int (*busy_samples)(int device, enum gpu_source source, pid_t pid, uint64_t since_us,
                        gpu_busy_sample *out, size_t max, size_t *count, char *why, size_t why_size);
    void (*close)(void);
} gpu_backend;

extern const gpu_backend gpu_nvml_backend;

/* ---- the kernel tier's interface ------------------------------------------- */

/* open runs in gpu_start (GIL held); flush on the GPU thread at each
 * utilisation poll; close in gpu_stop after the GPU thread has ended.  The
 * library's callbacks call launches_note and launches_charge (launches.h). */
typedef struct {
    const char *name; /* "CUPTI" */
    /* Loads (a copy already loaded, else from one of dirs: ':' between them,
     * may be NULL; else from the search path) and subscribes: GPU_OK (why may hold a notice),
     * GPU_UNSUPPORTED (no library), GPU_BUSY (another subscriber holds it) or
     * GPU_FAILED. */
    int (*open)(const char *dirs, char *why, size_t why_size);
    /* Has the records of finished work delivered; final: all of them. */
    void (*flush)(int final);
    /* Stops recording, delivers the rest, unsubscribes. */
    void (*close)(void);
    /* Records the library could not write (no buffer in time). */
    uint64_t (*dropped)(void);
    /* The file the library was loaded from ("" when unknown). */
    const char *(*library)(void);
} gpu_kernel_backend;

extern const gpu_kernel_backend gpu_cupti_backend;

/* Charges one record to a line (site SITE_NONE: to no line); any thread.
 * Takes the subsystem's lock: callers may hold launches.c's, never the other
 * way round. */
void gpu_charge_work(uint32_t site, int32_t lineno, const gpu_work *work);

#endif
