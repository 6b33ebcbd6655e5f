/* memhooks_api: the preloaded library's entry points, found with dlsym so that
 * the extension works (without memory profiling) when the library is absent. */
#ifndef PYROMETER_MEMHOOKS_API_H
#define PYROMETER_MEMHOOKS_API_H

#include "../memhooks/memhooks.h"

typedef struct {
    int (*start)(const memhooks_config *);
    void (*stop)(void);
    memhooks_thread *(*thread)(void);
    void (*sample_python)(int64_t, void *, uint64_t); /* born: handed back to freed (memhooks.h) */
    void *(*python_arenas)(void);
    int64_t (*footprint)(void);
    void (*footprint_add)(int64_t);
    const volatile uintptr_t *(*watch_table)(void);
    const volatile uint64_t *(*watch_occupied)(void);
    void (*unwatch)(void *);
    void (*watch)(void *, uintptr_t);
    int (*retoken)(void *, uintptr_t, uintptr_t);
    int (*is_watched)(void *, uintptr_t);
    size_t (*python_tail_size)(void *);
    memhooks_size_fn (*malloc_sizer)(void);
} memhooks_api;

/* Loads the library at path into this running process and attaches it
 * (pyrometer_memhooks_attach), with the GIL held: 0 (also when it is preloaded
 * or attached already), or -1 and why. */
int memhooks_api_attach(const char *path, const char **why);
/* Undoes memhooks_api_attach, with the GIL held and memory profiling stopped:
 * 0 (also when preloaded or not attached), or -1 when the objects' tables
 * could not all be put back. */
int memhooks_api_detach(void);
/* 0 when the library is loaded in this process, -1 otherwise. */
int memhooks_api_find(memhooks_api *api);

#endif
