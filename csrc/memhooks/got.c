/* got: the library attached to a running process.
 *
 * Preloaded (LD_PRELOAD), the library's malloc, free, memcpy... come before
 * libc's in the search order, so every object's calls bind to them; that takes
 * the process being started with the library, which for `python -m pyrometer`
 * meant a second interpreter start (about 35 ms here, 15 ms in a clean venv:
 * 1.5% of a 2.3 s benchmark run).  Loaded later with dlopen, the library is
 * found by nobody: every object still calls libc's functions through the slots
 * of its global offset table, which the dynamic loader filled in.  Attaching
 * rewrites those slots: for each loaded object (dl_iterate_phdr), its dynamic
 * section gives its relocations (DT_JMPREL: calls through the PLT;
 * DT_RELA: GLOB_DAT, calls of -fno-plt code and function addresses taken), and
 * each relocation of a symbol the library replaces names a slot to point at
 * the replacement.  So does an absolute relocation (R_X86_64_64: a pointer to
 * the function in initialised data, `static void *(*copy)() = memcpy;`).
 * Slots in the read-only-after-relocation segment (PT_GNU_RELRO, all of them
 * under -z now) are made writable for the store and read-only again.  memray
 * attaches the same way.
 *
 * The rule that keeps the program's behaviour (leads_to_original): a slot is
 * rewritten only where it leads to the function the replacement forwards to
 * (the global definition, or a position-dependent executable's PLT entry for
 * it), or is a call slot not bound yet in an object that binds to the global
 * definition.  Left alone: slots bound elsewhere (a plugin loaded with
 * RTLD_DEEPBIND, or linked -Bsymbolic, against an allocator of its own; an
 * object in another namespace, dlmopen, with a libc of its own), a call slot
 * not yet bound in an object that looks in its own scope first (what it will
 * bind to is not known), pointers the program changed, and slots in segments
 * the loader left read-only outside RELRO (text relocations).  Their calls go
 * where they went, uncounted.
 *
 * Objects loaded afterwards bind to libc again, so dlopen is replaced too: the
 * replacement loads, then patches the objects it has not seen.  The loader
 * searches a bare name in its caller's DT_RPATH and DT_RUNPATH, and the caller
 * is then this library: open_as() searches the caller's own directories first
 * (PyTorch finds cuDNN's parts so; memray met the same, its issue 212).  The
 * loader's own private loads (NSS modules, iconv's gconv modules, through
 * glibc's internal dlopen) and dlmopen's are not seen until the next dlopen:
 * what they allocate meanwhile is not counted.
 *
 * A function found by name (dlsym) is the original too: ctypes and cffi (ABI
 * mode) name C functions so, `ctypes.CDLL(None).malloc`.  dlsym is replaced in
 * Python's extension modules (named *.cpython-*, *.abi3.so), where the
 * replacement answers a replaced function's name with the library's.  Only
 * there, because dlsym(RTLD_NEXT) searches after its caller, which would then
 * be this library: an interposer's lookups (a preloaded library's) must stay
 * its own.
 *
 * Not patched: the library itself (its own calls must reach libc), the dynamic
 * loader (it allocates through pointers it resolved at start-up, and frees
 * through the same), and the sanitizers' runtimes (their allocator is the real
 * one, reached from here by dlsym).
 */
#include "got.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__)
#define R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define R_GLOB_DAT R_X86_64_GLOB_DAT
#define R_ABSOLUTE R_X86_64_64
#elif defined(__aarch64__)
#define R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define R_GLOB_DAT R_AARCH64_GLOB_DAT
#define R_ABSOLUTE R_AARCH64_ABS64
#else
/* Elsewhere attaching fails (got_attach), and the command preloads instead. */
#define GOT_UNKNOWN_MACHINE 1
#define R_JUMP_SLOT 0xFFFFFFFFul
#define R_GLOB_DAT 0xFFFFFFFFul
#define R_ABSOLUTE 0xFFFFFFFFul
#endif

static const got_replacement *replacements;
static size_t replacement_count;
static uintptr_t own;
static void *(*loader_dlopen)(const char *, int);
static void *(*loader_dlsym)(void *, const char *);
static pthread_mutex_t patching = PTHREAD_MUTEX_INITIALIZER;

/* The objects patched already, by load address and program headers (an object
 * unloaded and another loaded at the same place: when anything was unloaded
 * since, every object is walked again). */
#define SEEN_MAX 4096
static struct {
    uintptr_t base;
    const void *phdr;
} seen[SEEN_MAX];
static size_t seen_count;
static unsigned long long subs_seen;
static int failed;

static int skipped(const char *name)
{
    static const char *const names[] = {"/ld-linux", "/ld64.so", "linux-vdso", "linux-gate", "/libasan.",
                                        "/libubsan.", "/libtsan.", "/liblsan.", "/libhwasan."};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strstr(name, names[i]) != NULL) {
            return 1;
        }
    }
    return 0;
}

static const got_replacement *replacement_of(const char *symbol)
{
    for (size_t i = 0; i < replacement_count; i++) {
        if (symbol[0] == replacements[i].name[0] && strcmp(symbol, replacements[i].name) == 0) {
            return &replacements[i];
        }
    }
    return NULL;
}

/* A pointer of the dynamic section: relocated in place by glibc on most
 * machines, left as an offset on others. */
static uintptr_t dynamic_address(uintptr_t base, ElfW(Addr) value)
{
    return value < base ? base + value : value;
}

/* Every slot changed, with what it held and the object it belongs to, so that
 * got_detach can put it back where that object is still loaded: in memory of
 * its own (mmap), grown by doubling, under `patching`. */
typedef struct {
    void **slot;
    void *previous;
    void *written;
    uintptr_t base;       /* the object: its load address and program headers */
    const void *phdr;
    int read_only;        /* in PT_GNU_RELRO's whole pages */
    int loaded;           /* got_detach: the object is still there */
} changed_slot;
static changed_slot *changes;
static size_t change_count, change_capacity;
static int detached; /* under `patching`: no object is patched any more */
/* The object being patched (visit), for remember. */
static uintptr_t patching_base;
static const void *patching_phdr;

static int remember(void **slot, void *previous, void *written, int read_only)
{
    if (change_count == change_capacity) {
        size_t capacity = change_capacity != 0 ? change_capacity * 2 : 1024;
        changed_slot *bigger = mmap(NULL, capacity * sizeof *bigger, PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (bigger == MAP_FAILED) {
            return -1;
        }
        if (changes != NULL) {
            memcpy(bigger, changes, change_count * sizeof *bigger);
            munmap(changes, change_capacity * sizeof *changes);
        }
        changes = bigger;
        change_capacity = capacity;
    }
    changes[change_count++] = (changed_slot){slot, previous, written, patching_base, patching_phdr, read_only, 0};
    return 0;
}

static int write_slot(void **slot, void *value, int read_only)
{
    uintptr_t a = (uintptr_t)slot;
    if (read_only) {
        uintptr_t page = a & ~((uintptr_t)sysconf(_SC_PAGESIZE) - 1);
        if (mprotect((void *)page, sizeof(void *) + (a - page), PROT_READ | PROT_WRITE) != 0) {
            return -1;
        }
        __atomic_store_n(slot, value, __ATOMIC_RELAXED);
        mprotect((void *)page, sizeof(void *) + (a - page), PROT_READ); /* as the loader left it */
        return 0;
    }
    __atomic_store_n(slot, value, __ATOMIC_RELAXED);
    return 0;
}

static int store(void **slot, void *value, uintptr_t relro_start, uintptr_t relro_end)
{
    void *previous = __atomic_load_n(slot, __ATOMIC_RELAXED);
    if (previous == value) {
        return 0;
    }
    uintptr_t a = (uintptr_t)slot;
    int read_only = a >= relro_start && a < relro_end;
    if (remember(slot, previous, value, read_only) != 0) {
        return -1; /* not changed: it could not have been put back */
    }
    return write_slot(slot, value, read_only);
}

/* A Python extension module, by the file names CPython's importer loads. */
static int extension_module(const char *name)
{
    size_t n = strlen(name);
    return strstr(name, ".cpython-") != NULL || (n > 8 && strcmp(name + n - 8, ".abi3.so") == 0);
}

/* The object being patched, as visit() found it. */
typedef struct {
    uintptr_t base;
    const ElfW(Phdr) *phdr;
    ElfW(Half) phnum;
    uintptr_t relro_start, relro_end; /* PT_GNU_RELRO's whole pages */
    int extension;                    /* a Python extension module */
    int own_scope_first;              /* deep-bound, or in another namespace (dlmopen) */
} object;

/* The flags of the load segment an address of the object is in; 0 outside them. */
static ElfW(Word) segment_flags(const object *o, uintptr_t address)
{
    for (ElfW(Half) i = 0; i < o->phnum; i++) {
        const ElfW(Phdr) *ph = &o->phdr[i];
        uintptr_t start = o->base + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && address >= start && address - start < ph->p_memsz) {
            return ph->p_flags | PF_R; /* PF_R: in a segment, even one of no access */
        }
    }
    return 0;
}

/* Whether a slot leads to the function the replacement forwards to, so that
 * pointing it at the replacement changes what is counted and nothing else.
 * A slot bound to another definition of the name is the object's own business:
 * a plugin loaded with RTLD_DEEPBIND against tcmalloc frees tcmalloc's blocks
 * with tcmalloc's free, and glibc's free given one of them aborts the program;
 * an object of another namespace (dlmopen) has a libc of its own.  A call slot
 * not bound yet (lazy binding: it holds the object's own PLT code, which asks
 * the loader on the first call) binds to the global definition unless the
 * object looks in its own scope first: deep-bound, -Bsymbolic, or in another
 * namespace. */
static int leads_to_original(const got_replacement *r, void *value, unsigned long type, const ElfW(Sym) *sym,
                             const object *o)
{
    if (value == r->original || value == r->definition) {
        return 1;
    }
    int own_definition = sym->st_shndx != SHN_UNDEF && (uintptr_t)value == o->base + sym->st_value;
    return type == R_JUMP_SLOT && !o->own_scope_first && value != NULL && !own_definition &&
           segment_flags(o, (uintptr_t)value) != 0;
}

static int patch_relocations(const object *o, const ElfW(Rela) *rela, size_t bytes, const ElfW(Sym) *symbols,
                             const char *strings)
{
    int rc = 0;
    for (size_t i = 0; i < bytes / sizeof *rela; i++) {
        unsigned long type = ELF64_R_TYPE(rela[i].r_info);
        if (type != R_JUMP_SLOT && type != R_GLOB_DAT && !(type == R_ABSOLUTE && rela[i].r_addend == 0)) {
            continue;
        }
        const ElfW(Sym) *sym = &symbols[ELF64_R_SYM(rela[i].r_info)];
        const got_replacement *r = sym->st_name != 0 ? replacement_of(strings + sym->st_name) : NULL;
        if (r == NULL || (r->extensions_only && !o->extension)) {
            continue;
        }
        uintptr_t a = o->base + rela[i].r_offset;
        /* A slot in a segment the loader left read-only outside RELRO (text
         * relocations, -z notext) is left alone: writing there faults. */
        int in_relro = a >= o->relro_start && a < o->relro_end;
        if (!in_relro && (segment_flags(o, a) & PF_W) == 0) {
            continue;
        }
        void **slot = (void **)a;
        void *value = __atomic_load_n(slot, __ATOMIC_RELAXED);
        if (value == r->replacement || !leads_to_original(r, value, type, sym, o)) {
            continue; /* a pointer the program has changed since is its own, too */
        }
        if (store(slot, r->replacement, o->relro_start, o->relro_end) != 0) {
            rc = -1;
        }
    }
    return rc;
}

static int patch_object(object *o)
{
    uintptr_t base = o->base;
    const ElfW(Dyn) *dyn = NULL;
    for (ElfW(Half) i = 0; i < o->phnum; i++) {
        const ElfW(Phdr) *ph = &o->phdr[i];
        if (ph->p_type == PT_DYNAMIC) {
            dyn = (const ElfW(Dyn) *)(base + ph->p_vaddr);
        } else if (ph->p_type == PT_GNU_RELRO) {
            /* What the loader made read-only: whole pages only, the last
             * partial one stays writable (glibc's _dl_protect_relro). */
            uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
            o->relro_start = (base + ph->p_vaddr) & ~(page - 1);
            o->relro_end = (base + ph->p_vaddr + ph->p_memsz) & ~(page - 1);
        }
    }
    if (dyn == NULL) {
        return 0;
    }
    const ElfW(Sym) *symbols = NULL;
    const char *strings = NULL;
    const ElfW(Rela) *plt = NULL, *rela = NULL;
    size_t plt_bytes = 0, rela_bytes = 0;
    long plt_kind = DT_RELA;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        switch (dyn->d_tag) {
        case DT_SYMTAB: symbols = (const ElfW(Sym) *)dynamic_address(base, dyn->d_un.d_ptr); break;
        case DT_STRTAB: strings = (const char *)dynamic_address(base, dyn->d_un.d_ptr); break;
        case DT_JMPREL: plt = (const ElfW(Rela) *)dynamic_address(base, dyn->d_un.d_ptr); break;
        case DT_PLTRELSZ: plt_bytes = dyn->d_un.d_val; break;
        case DT_PLTREL: plt_kind = (long)dyn->d_un.d_val; break;
        case DT_RELA: rela = (const ElfW(Rela) *)dynamic_address(base, dyn->d_un.d_ptr); break;
        case DT_RELASZ: rela_bytes = dyn->d_un.d_val; break;
        case DT_SYMBOLIC: o->own_scope_first = 1; break; /* -Bsymbolic: its own definitions first */
        case DT_FLAGS: o->own_scope_first |= (dyn->d_un.d_val & DF_SYMBOLIC) != 0; break;
        default: break;
        }
    }
    if (symbols == NULL || strings == NULL) {
        return 0;
    }
    int rc = 0;
    if (plt != NULL && plt_kind == DT_RELA && patch_relocations(o, plt, plt_bytes, symbols, strings) != 0) {
        rc = -1;
    }
    if (rela != NULL && patch_relocations(o, rela, rela_bytes, symbols, strings) != 0) {
        rc = -1;
    }
    return rc;
}

/* Whether the object is in the main namespace: its dynamic section is one of
 * the main namespace's list (walked from the executable's entry, under the
 * lock dl_iterate_phdr holds, which the loader takes to change the list). */
static struct link_map *main_namespace;

static int in_main_namespace(const struct dl_phdr_info *info)
{
    uintptr_t dynamic = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) {
            dynamic = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
        }
    }
    for (const struct link_map *m = main_namespace; m != NULL; m = m->l_next) {
        if ((uintptr_t)m->l_ld == dynamic) {
            return 1;
        }
    }
    return main_namespace == NULL; /* not known: as everything was before dlmopen */
}

/* dlopen calls with RTLD_DEEPBIND under way: the objects found meanwhile may
 * be theirs, and are taken as deep-bound (a call slot of theirs not yet bound
 * is left alone: what it will bind to is not known). */
static atomic_int deep_loads;

static int visit(struct dl_phdr_info *info, size_t size, void *unused)
{
    (void)size;
    (void)unused;
    if (info->dlpi_subs != subs_seen) {
        subs_seen = info->dlpi_subs; /* something was unloaded: walk everything again */
        seen_count = 0;
    }
    const char *name = info->dlpi_name != NULL ? info->dlpi_name : "";
    if (info->dlpi_addr == own || skipped(name)) {
        return 0;
    }
    for (size_t i = 0; i < seen_count; i++) {
        if (seen[i].base == info->dlpi_addr && seen[i].phdr == info->dlpi_phdr) {
            return 0;
        }
    }
    patching_base = info->dlpi_addr;
    patching_phdr = info->dlpi_phdr;
    object o = {.base = info->dlpi_addr, .phdr = info->dlpi_phdr, .phnum = info->dlpi_phnum,
                .extension = extension_module(name),
                .own_scope_first = atomic_load(&deep_loads) > 0 || !in_main_namespace(info)};
    if (patch_object(&o) != 0) {
        failed = 1;
    }
    if (seen_count < SEEN_MAX) {
        seen[seen_count].base = info->dlpi_addr;
        seen[seen_count].phdr = info->dlpi_phdr;
        seen_count++;
    }
    return 0;
}

static int patch_new_objects(void)
{
    pthread_mutex_lock(&patching);
    if (detached) { /* a dlopen that began before got_detach ended */
        pthread_mutex_unlock(&patching);
        return 0;
    }
    failed = 0;
    dl_iterate_phdr(visit, NULL);
    int rc = failed ? -1 : 0;
    pthread_mutex_unlock(&patching);
    return rc;
}

int got_attach(const got_replacement *table, size_t n, uintptr_t own_base, void *real_dlopen, void *real_dlsym)
{
    pthread_mutex_lock(&patching);
    detached = 0;
    seen_count = 0; /* a second attach after got_detach walks everything again */
    pthread_mutex_unlock(&patching);
    replacements = table;
    replacement_count = n;
    own = own_base;
    loader_dlopen = (void *(*)(const char *, int))real_dlopen;
    loader_dlsym = (void *(*)(void *, const char *))real_dlsym;
    void *program = dlopen(NULL, RTLD_LAZY | RTLD_NOLOAD);
    if (program == NULL || dlinfo(program, RTLD_DI_LINKMAP, &main_namespace) != 0) {
        main_namespace = NULL;
    }
#ifdef GOT_UNKNOWN_MACHINE
    return -1;
#endif
    return patch_new_objects();
}

/* The directories dlopen searches for a bare name from `handle`'s object, in
 * order (its DT_RPATH chain, LD_LIBRARY_PATH, its DT_RUNPATH, the system's);
 * the ld.so.cache lookup, which comes before the system's directories, is not
 * among them.  NULL when not known; free() it. */
static Dl_serinfo *search_path(void *handle)
{
    Dl_serinfo size;
    if (dlinfo(handle, RTLD_DI_SERINFOSIZE, &size) != 0) {
        return NULL;
    }
    Dl_serinfo *paths = malloc(size.dls_size); /* libc's: this library's own calls are not counted */
    if (paths == NULL) {
        return NULL;
    }
    *paths = size;
    if (dlinfo(handle, RTLD_DI_SERINFOSIZE, paths) != 0 || dlinfo(handle, RTLD_DI_SERINFO, paths) != 0) {
        free(paths);
        return NULL;
    }
    return paths;
}

/* dlopen as the object at `caller` would: the loader searches a bare name in
 * its caller's DT_RPATH and DT_RUNPATH ($ORIGIN included), and the caller it
 * sees is now this library, which has neither.  So, for a name not loaded yet,
 * the directories the caller's search has and this library's has not (the
 * part of its list before the tail both share: the system's directories) are
 * tried in order first, by path; then the loader searches as it would have
 * (LD_LIBRARY_PATH, its cache, the system's directories), which also gives
 * dlerror its usual message.  PyTorch loads cuDNN's parts so. */
static void *open_as(const void *caller, const char *file, int mode)
{
    Dl_info info;
    struct link_map *map = NULL;
    if (file == NULL || strchr(file, '/') != NULL || (mode & RTLD_NOLOAD) != 0 ||
        dladdr1(caller, &info, (void **)&map, RTLD_DL_LINKMAP) == 0 || map == NULL) {
        return loader_dlopen(file, mode);
    }
    void *loaded = loader_dlopen(file, RTLD_LAZY | RTLD_NOLOAD); /* by its name or soname */
    if (loaded != NULL) {
        dlclose(loaded);
        return loader_dlopen(file, mode);
    }
    Dl_info self;
    struct link_map *own_map = NULL;
    Dl_serinfo *theirs = search_path(map);
    Dl_serinfo *ours = dladdr1((void *)open_as, &self, (void **)&own_map, RTLD_DL_LINKMAP) != 0 && own_map != NULL
                           ? search_path(own_map) : NULL;
    void *handle = NULL;
    if (theirs != NULL && ours != NULL) {
        unsigned int shared = 0;
        while (shared < theirs->dls_cnt && shared < ours->dls_cnt &&
               strcmp(theirs->dls_serpath[theirs->dls_cnt - 1 - shared].dls_name,
                      ours->dls_serpath[ours->dls_cnt - 1 - shared].dls_name) == 0) {
            shared++;
        }
        char path[4096];
        for (unsigned int i = 0; handle == NULL && i < theirs->dls_cnt - shared; i++) {
            int n = snprintf(path, sizeof path, "%s/%s", theirs->dls_serpath[i].dls_name, file);
            if (n > 0 && (size_t)n < sizeof path && access(path, F_OK) == 0) {
                handle = loader_dlopen(path, mode); /* one that does not load: the search goes on */
                if (handle == NULL) {
                    dlerror(); /* its error is not the caller's: the loader's own search says */
                }
            }
        }
    }
    free(theirs);
    free(ours);
    return handle != NULL ? handle : loader_dlopen(file, mode);
}

void *got_dlopen(const char *file, int mode)
{
    int deep = (mode & RTLD_DEEPBIND) != 0;
    if (deep) {
        atomic_fetch_add(&deep_loads, 1);
    }
    void *handle = open_as(__builtin_return_address(0), file, mode);
    if (handle != NULL) {
        patch_new_objects(); /* nothing once detached (checked under the lock) */
    }
    if (deep) {
        atomic_fetch_sub(&deep_loads, 1);
    }
    return handle;
}

/* Marks the changes of an object that is still loaded. */
static int mark_loaded(struct dl_phdr_info *info, size_t size, void *unused)
{
    (void)size;
    (void)unused;
    for (size_t i = 0; i < change_count; i++) {
        if (changes[i].base == info->dlpi_addr && changes[i].phdr == info->dlpi_phdr) {
            changes[i].loaded = 1;
        }
    }
    return 0;
}

int got_detach(void)
{
    pthread_mutex_lock(&patching);
    int rc = 0;
    /* An object unloaded since took its slots along (their pages may be
     * unmapped, or reused by another mapping): only the loaded ones' are
     * touched.  One unloaded and another loaded at its place with the same
     * headers is taken for the same, as visit() does. */
    dl_iterate_phdr(mark_loaded, NULL);
    /* Newest first: a slot changed twice ends with what it held first. */
    for (size_t i = change_count; i-- > 0;) {
        changed_slot *c = &changes[i];
        if (c->loaded && __atomic_load_n(c->slot, __ATOMIC_RELAXED) == c->written &&
            write_slot(c->slot, c->previous, c->read_only) != 0) {
            rc = -1;
        }
    }
    change_count = 0;
    seen_count = 0;
    detached = 1;
    pthread_mutex_unlock(&patching);
    return rc;
}

void *got_dlsym(void *handle, const char *name)
{
    void *found = loader_dlsym(handle, name);
    for (size_t i = 0; found != NULL && i < replacement_count; i++) {
        if (found == replacements[i].original || found == replacements[i].definition) {
            return replacements[i].replacement;
        }
    }
    return found;
}

/* The objects a definition is looked for in: each one's load segments. */
#define DEFINERS_MAX 512
typedef struct {
    const char *name;
    uintptr_t base;
    const ElfW(Phdr) *phdr;
    ElfW(Half) phnum;
} definer;
typedef struct {
    definer objects[DEFINERS_MAX];
    size_t count;
    int past_main;
} definers;

static int collect_definer(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    definers *d = data;
    if (!d->past_main) {
        d->past_main = 1; /* the first object is the executable */
        return 0;
    }
    if (d->count < DEFINERS_MAX && info->dlpi_name != NULL && info->dlpi_name[0] != '\0') {
        d->objects[d->count++] = (definer){info->dlpi_name, info->dlpi_addr, info->dlpi_phdr, info->dlpi_phnum};
    }
    return 0;
}

static int in_object(const definer *o, uintptr_t address)
{
    for (ElfW(Half) i = 0; i < o->phnum; i++) {
        const ElfW(Phdr) *ph = &o->phdr[i];
        uintptr_t start = o->base + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && address >= start && address - start < ph->p_memsz) {
            return 1;
        }
    }
    return 0;
}

void *got_definition(const char *name)
{
    void *found = dlsym(RTLD_DEFAULT, name);
    Dl_info info;
    struct link_map *map = NULL;
    /* Anywhere but in the executable (the head of the loader's list), the
     * answer is a definition: the answer dlsym always gave. */
    if (found == NULL || dladdr1(found, &info, (void **)&map, RTLD_DL_LINKMAP) == 0 || map == NULL ||
        map->l_prev != NULL) {
        return found;
    }
    const ElfW(Sym) *symbol = NULL;
    if (dladdr1(found, &info, (void **)&symbol, RTLD_DL_SYMENT) != 0 && symbol != NULL &&
        symbol->st_shndx != SHN_UNDEF && info.dli_saddr == found) {
        return found; /* the executable's own definition */
    }
    /* A canonical PLT entry (an undefined symbol with a value): the definition
     * is in another object. */
    static definers d; /* big; callers are serialised (resolution, attaching) */
    memset(&d, 0, sizeof d);
    dl_iterate_phdr(collect_definer, &d);
    /* In load order: an allocator preloaded comes before libc; this library,
     * attached, after it (preloaded, it is the definition looked for). */
    for (size_t i = 0; i < d.count; i++) {
        void *handle = dlopen(d.objects[i].name, RTLD_LAZY | RTLD_NOLOAD);
        if (handle == NULL) {
            continue; /* the vDSO */
        }
        /* A handle's lookup starts in its own object, then its dependencies. */
        void *definition = dlsym(handle, name);
        dlclose(handle);
        if (definition != NULL && in_object(&d.objects[i], (uintptr_t)definition)) {
            return definition;
        }
    }
    return found;
}

void got_after_fork_in_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    patching = fresh;
}
