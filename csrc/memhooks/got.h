/* got: attaches the library's functions to a process that did not preload it,
 * by rewriting the slots of the global offset tables through which every loaded
 * object calls malloc & co.  See got.c. */
#ifndef PYROMETER_MEMHOOKS_GOT_H
#define PYROMETER_MEMHOOKS_GOT_H

#include <stddef.h>
#include <stdint.h>

/* A function the library puts in place of the one of the same name. */
typedef struct {
    const char *name;
    void *replacement;
    void *original; /* what the name resolves to without the library */
    void *definition; /* the function itself (got_definition): the same, or what
                       * a position-dependent executable's PLT entry, the
                       * original then, jumps to */
    int extensions_only; /* only in Python's extension modules (got.c: dlsym) */
} got_replacement;

/* Points every slot of every loaded object (but the library itself at own_base,
 * the dynamic loader and the sanitizers' runtimes) that names one of the n
 * functions at its replacement (and every pointer to the original in the
 * objects' data, where it still holds it), and does the same for each object dlopen loads
 * from then on (dlopen is replaced too: real_dlopen is what it calls; and
 * dlsym in Python's extension modules: real_dlsym).  The
 * table must live as long as the process.  0, or -1 when an object could not be
 * patched (its table is left as it was: calls there are not counted). */
int got_attach(const got_replacement *table, size_t n, uintptr_t own_base, void *real_dlopen, void *real_dlsym);
/* Puts back what every slot got_attach changed held before, where it still
 * holds the replacement (an object unloaded since: its slots are gone with it,
 * and one loaded at its place has slots of its own), and stops patching the
 * objects dlopen loads.  The library stays loaded: a thread may still be in
 * one of its functions.  0, or -1 when a slot could not be written. */
int got_detach(void);
/* The dlopen and dlsym that got_attach puts in place. */
void *got_dlopen(const char *file, int mode);
void *got_dlsym(void *handle, const char *name);
/* What a shared object's reference to `name` binds to: dlsym(RTLD_DEFAULT)'s
 * answer, except where that is the executable's canonical PLT entry (a
 * position-dependent executable that takes the address of a function it
 * imports, as Debian's python3.14 does malloc's, gives that stub as the
 * function's address, and the stub jumps through the executable's own slot,
 * which attaching rewrites): then the first other object in load order that
 * defines it.  Not from inside dl_iterate_phdr; may allocate. */
void *got_definition(const char *name);
/* In a forked child: the lock another thread may have held at the fork. */
void got_after_fork_in_child(void);

#endif
