/* pyalloc: wraps Python's "mem" and "object" allocator domains around the
 * existing allocators (PyMem_SetAllocator), so that bytes allocated through them
 * are counted as Python's.  While a wrapped call runs, the thread's python_depth
 * is raised, so whatever the domain passes on to malloc is not counted again as
 * native.  The raw domain is left alone: it is malloc, and what comes through it
 * (interpreter buffers, C extensions) is native. */
#ifndef PYROMETER_PYALLOC_H
#define PYROMETER_PYALLOC_H

#include "memhooks_api.h"

/* How the sizes of Python's blocks are read, which decides whether Python memory
 * can be profiled at all: a free must be counted with the size its allocation
 * was counted with. */
typedef enum {
    PYALLOC_NOT_SIZED,    /* mimalloc, or a layout that failed its check: not wrapped */
    PYALLOC_POOLS,        /* pymalloc (the default): pool headers, malloc above 512 B */
    PYALLOC_MALLOC,       /* PYTHONMALLOC=malloc: malloc_usable_size */
    PYALLOC_DEBUG_HEADER, /* PYTHONMALLOC=*debug: the size the debug hooks record */
} pyalloc_sizing;

/* GIL held.  Chooses the sizing for the running allocator, checks it on blocks
 * of known sizes, and wraps the domains unless it is PYALLOC_NOT_SIZED.
 * window_bytes: the footprint's window (net bytes reported at once);
 * python_window_bytes: the mean distance between samples of Python's blocks
 * (mem_profile.c says why it is smaller). */
pyalloc_sizing pyalloc_install(const memhooks_api *api, int64_t window_bytes, int64_t python_window_bytes);
/* CPython's name of the Python allocator met by pyalloc_install ("pymalloc",
 * "malloc", "pymalloc_debug", "mimalloc", ...; "unknown" for a replaced one). */
const char *pyalloc_allocator_name(void);
/* Why Python's allocator is not sized (after pyalloc_install chose
 * PYALLOC_NOT_SIZED), as the rest of "Python's allocator ...": "was replaced by
 * another tool", "does not tell its block sizes", ... */
const char *pyalloc_not_sized_why(void);
void pyalloc_uninstall(void);
/* Whether a small Python block whose sample was given `born` (the library
 * hands it back at the free, memhooks.h) and freed now is churn: freed before
 * the Python domains allocated a pymalloc pool's worth (16 KiB) more.  0 for
 * any other block.  GIL held (the free of a Python block). */
int pyalloc_is_churn(uint64_t born);
/* Whether a sample given `born` was of Python's blocks (else: native).  Any
 * thread. */
int pyalloc_born_python(uint64_t born);
/* Python's sampling state (GIL held), saved and put back around the profiler's
 * own work (mem_profile_pause), so that nothing it allocates is sampled.  The
 * footprint's count goes on: what the work frees of the program's (its garbage
 * collection runs there too) is freed, and what it allocates it frees again. */
typedef struct {
    int64_t countdown;
    uint64_t rng;
    uint64_t drawn;
} pyalloc_counts;
void pyalloc_save_counts(pyalloc_counts *into);
void pyalloc_restore_counts(const pyalloc_counts *from);

/* The profiler's own work on the calling thread, GIL held throughout (a CPU
 * snapshot: registering a code object calls CPython, which allocates): nothing
 * it allocates, through Python's domains or malloc, is sampled as the program's.
 * The thread's native counting is suspended (the library's busy level) and
 * Python's sampling state is put back as it was afterwards, as for
 * mem_profile_pause; unlike it, the state lives in the caller's `work`, so
 * suspensions nest.  Python's net count goes on (see pyalloc_counts).  Does
 * nothing while memory is not profiled. */
typedef struct {
    memhooks_thread *thread; /* NULL: nothing was suspended */
    pyalloc_counts counts;
} pyalloc_own_work;
void pyalloc_own_work_begin(pyalloc_own_work *work);
void pyalloc_own_work_end(const pyalloc_own_work *work);

/* own 1: everything the calling thread allocates from now on is the
 * profiler's (a thread of its own, without Python state, that calls a vendor
 * library): the memory library's counting is suspended on it, until a call
 * with own 0.  Nothing when the library is not loaded. */
void pyalloc_own_thread(int own);

#endif
