#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "pyalloc.h"

#include <dlfcn.h>

int memhooks_api_find(memhooks_api *api)
{
    api->start = (int (*)(const memhooks_config *))dlsym(RTLD_DEFAULT, "pyrometer_memhooks_start");
    api->stop = (void (*)(void))dlsym(RTLD_DEFAULT, "pyrometer_memhooks_stop");
    api->thread = (memhooks_thread * (*)(void)) dlsym(RTLD_DEFAULT, "pyrometer_memhooks_thread");
    api->note_python = (void (*)(int64_t, void *))dlsym(RTLD_DEFAULT, "pyrometer_memhooks_note_python");
    api->python_block_size = (size_t(*)(void *))dlsym(RTLD_DEFAULT, "pyrometer_memhooks_python_block_size");
    api->footprint = (int64_t(*)(void))dlsym(RTLD_DEFAULT, "pyrometer_memhooks_footprint");
    api->watch_table =
        (const volatile uintptr_t * (*)(void)) dlsym(RTLD_DEFAULT, "pyrometer_memhooks_watch_table");
    api->unwatch = (void (*)(void *))dlsym(RTLD_DEFAULT, "pyrometer_memhooks_unwatch");
    api->settle = (void (*)(void *))dlsym(RTLD_DEFAULT, "pyrometer_memhooks_settle");
    return api->start && api->stop && api->thread && api->note_python && api->python_block_size &&
                   api->footprint && api->watch_table && api->unwatch && api->settle
               ? 0
               : -1;
}

typedef struct {
    PyMemAllocatorDomain domain;
    PyMemAllocatorEx original;
} wrapped_domain;

static wrapped_domain domains[2] = {{PYMEM_DOMAIN_MEM, {0}}, {PYMEM_DOMAIN_OBJ, {0}}};
static memhooks_api hooks;
static int installed;
static int frees_counted;
static int64_t window;
static const volatile uintptr_t *watched;

/* Counts a Python block on this thread, with the library's rules (memhooks.h),
 * inline: this runs for every Python allocation and free.  The library is
 * called only to stop watching a sampled block or to take a due sample. */
static inline void count(memhooks_thread *t, int64_t bytes, void *p)
{
    if (t->busy != 0) {
        return;
    }
    if (bytes >= window || -bytes >= window) {
        hooks.note_python(bytes, p); /* a sample by itself (see note() in hooks.c) */
        return;
    }
    if (bytes < 0 && watched[memhooks_watch_slot((uintptr_t)p)] == (uintptr_t)p) {
        hooks.unwatch(p);
    }
    t->net += bytes;
    t->python_net += bytes;
    if (t->net >= window || t->net <= -window) {
        hooks.settle(bytes > 0 ? p : NULL);
    }
}

/* What a new block counts for: its real size when sizes can be read back (so that
 * its free subtracts exactly what was added), else what was asked for. */
static size_t counted_size(void *p, size_t asked)
{
    if (!frees_counted) {
        return asked;
    }
    if (asked - 1 < 512) {
        /* 1 to 512 bytes: pymalloc's size class, without the arena lookup
         * (frees_counted means block_sizes_readable() saw pymalloc serve such
         * requests).  0 wraps around: pymalloc hands it to malloc. */
        return (asked + 15) & ~(size_t)15;
    }
    size_t n = hooks.python_block_size(p);
    return n != 0 ? n : asked;
}

/* Allocator hooks: called with the GIL held, for every Python allocation.  They
 * only forward and count; the count may call the sample function, which runs with
 * counting suspended on this thread. */

static void *wrapped_malloc(void *ctx, size_t size)
{
    wrapped_domain *d = ctx;
    memhooks_thread *t = hooks.thread();
    t->python_depth++;
    void *p = d->original.malloc(d->original.ctx, size);
    t->python_depth--;
    if (p != NULL) {
        count(t, (int64_t)counted_size(p, size), p);
    }
    return p;
}

static void *wrapped_calloc(void *ctx, size_t nelem, size_t elsize)
{
    wrapped_domain *d = ctx;
    memhooks_thread *t = hooks.thread();
    t->python_depth++;
    void *p = d->original.calloc(d->original.ctx, nelem, elsize);
    t->python_depth--;
    if (p != NULL) {
        count(t, (int64_t)counted_size(p, nelem * elsize), p);
    }
    return p;
}

static void *wrapped_realloc(void *ctx, void *ptr, size_t size)
{
    wrapped_domain *d = ctx;
    size_t before = ptr != NULL && frees_counted ? hooks.python_block_size(ptr) : 0;
    memhooks_thread *t = hooks.thread();
    t->python_depth++;
    void *p = d->original.realloc(d->original.ctx, ptr, size);
    t->python_depth--;
    if (p != NULL) {
        if (before != 0) {
            count(t, -(int64_t)before, ptr);
        }
        count(t, (int64_t)counted_size(p, size), p);
    }
    return p;
}

static void wrapped_free(void *ctx, void *ptr)
{
    wrapped_domain *d = ctx;
    memhooks_thread *t = hooks.thread();
    if (ptr != NULL && frees_counted) {
        size_t size = hooks.python_block_size(ptr); /* before: the block may vanish */
        if (size != 0) {
            count(t, -(int64_t)size, ptr);
        }
    }
    t->python_depth++;
    d->original.free(d->original.ctx, ptr);
    t->python_depth--;
}

/* The layout facts pymalloc_arenas.c relies on, checked on this interpreter:
 * blocks of known size classes must read back their size. */
static int block_sizes_readable(void)
{
    static const size_t asked[] = {1, 17, 40, 500};
    static const size_t expect[] = {16, 32, 48, 512};
    for (size_t i = 0; i < sizeof asked / sizeof asked[0]; i++) {
        void *p = PyObject_Malloc(asked[i]);
        size_t got = p != NULL ? hooks.python_block_size(p) : 0;
        PyObject_Free(p);
        if (got != expect[i]) {
            return 0;
        }
    }
    return 1;
}

int pyalloc_install(const memhooks_api *api, int64_t window_bytes)
{
    if (installed) {
        return frees_counted;
    }
    hooks = *api;
    window = window_bytes;
    watched = api->watch_table();
    frees_counted = 1;
    frees_counted = block_sizes_readable();
    for (int i = 0; i < 2; i++) {
        PyMem_GetAllocator(domains[i].domain, &domains[i].original);
        PyMemAllocatorEx mine = {&domains[i], wrapped_malloc, wrapped_calloc, wrapped_realloc,
                                 wrapped_free};
        PyMem_SetAllocator(domains[i].domain, &mine);
    }
    installed = 1;
    return frees_counted;
}

void pyalloc_uninstall(void)
{
    if (!installed) {
        return;
    }
    for (int i = 1; i >= 0; i--) {
        PyMem_SetAllocator(domains[i].domain, &domains[i].original);
    }
    installed = 0;
}
