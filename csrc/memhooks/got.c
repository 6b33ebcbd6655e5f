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
 * each relocation of a symbol the library replaces names the slot to point at
 * the replacement.  So does an absolute relocation (R_X86_64_64: a pointer to
 * the function in initialised data, `static void *(*copy)() = memcpy;`) whose
 * slot still holds the original.  Slots in the read-only-after-relocation segment
 * (PT_GNU_RELRO, all of them under -z now) are made writable for the store
 * and read-only again.  memray attaches the same way.
 *
 * Objects loaded afterwards bind to libc again, so dlopen is replaced too: the
 * replacement loads, then patches the objects it has not seen.  The loader's
 * own private loads (NSS modules, iconv's gconv modules, through glibc's
 * internal dlopen) are not seen until the next dlopen: what they allocate
 * meanwhile is not counted.  A library that dlopens by bare name and relies on
 * its own DT_RPATH (not DT_RUNPATH) for the search is found from this library
 * instead, which has none (dlopen searches the caller's DT_RPATH): Python's
 * imports and ctypes pass paths or have none.
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

static int patch_relocations(uintptr_t base, const ElfW(Rela) *rela, size_t bytes, const ElfW(Sym) *symbols,
                             const char *strings, uintptr_t relro_start, uintptr_t relro_end, int extension)
{
    int rc = 0;
    for (size_t i = 0; i < bytes / sizeof *rela; i++) {
        unsigned long type = ELF64_R_TYPE(rela[i].r_info);
        if (type != R_JUMP_SLOT && type != R_GLOB_DAT && !(type == R_ABSOLUTE && rela[i].r_addend == 0)) {
            continue;
        }
        const ElfW(Sym) *sym = &symbols[ELF64_R_SYM(rela[i].r_info)];
        const got_replacement *r = sym->st_name != 0 ? replacement_of(strings + sym->st_name) : NULL;
        void **slot = (void **)(base + rela[i].r_offset);
        if (r == NULL || (r->extensions_only && !extension) ||
            (type == R_ABSOLUTE && __atomic_load_n(slot, __ATOMIC_RELAXED) != r->original)) {
            continue; /* a pointer the program has changed since is its own */
        }
        if (store(slot, r->replacement, relro_start, relro_end) != 0) {
            rc = -1;
        }
    }
    return rc;
}

static int patch_object(const struct dl_phdr_info *info, int extension)
{
    uintptr_t base = info->dlpi_addr;
    const ElfW(Dyn) *dyn = NULL;
    uintptr_t relro_start = 0, relro_end = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_DYNAMIC) {
            dyn = (const ElfW(Dyn) *)(base + ph->p_vaddr);
        } else if (ph->p_type == PT_GNU_RELRO) {
            /* What the loader made read-only: whole pages only, the last
             * partial one stays writable (glibc's _dl_protect_relro). */
            uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
            relro_start = (base + ph->p_vaddr) & ~(page - 1);
            relro_end = (base + ph->p_vaddr + ph->p_memsz) & ~(page - 1);
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
        default: break;
        }
    }
    if (symbols == NULL || strings == NULL) {
        return 0;
    }
    int rc = 0;
    if (plt != NULL && plt_kind == DT_RELA &&
        patch_relocations(base, plt, plt_bytes, symbols, strings, relro_start, relro_end, extension) != 0) {
        rc = -1;
    }
    if (rela != NULL && patch_relocations(base, rela, rela_bytes, symbols, strings, relro_start, relro_end, extension) != 0) {
        rc = -1;
    }
    return rc;
}

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
    if (patch_object(info, extension_module(name)) != 0) {
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
#ifdef GOT_UNKNOWN_MACHINE
    return -1;
#endif
    return patch_new_objects();
}

void *got_dlopen(const char *file, int mode)
{
    void *handle = loader_dlopen(file, mode);
    if (handle != NULL) {
        patch_new_objects(); /* nothing once detached (checked under the lock) */
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
        if (found == replacements[i].original) {
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
