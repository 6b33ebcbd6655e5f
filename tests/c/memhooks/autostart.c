/* libmemhooks_autostart.so: preloaded after libpyrometer_memhooks.so into real
 * programs (python3 with numpy, sqlite3, git, ls; see tests/c/test_c_units.py) so
 * that they run with the hooks started, every sampled allocation watched, and the
 * sample and freed functions called from whatever threads the program has.  The
 * program's output must not change.
 *
 * Environment:
 *   MEMHOOKS_AUTOSTART_WINDOW  the window and copy window in bytes (default 4096)
 *   MEMHOOKS_AUTOSTART_REPORT  a file; at exit each process appends one line:
 *     "pid ALLOC FREE COPY freed evicted footprint" (sample counts, callbacks, bytes)
 *
 * The callbacks run inside malloc: they use atomics only, and the report is made
 * with snprintf into the stack and write(2).
 */
#include "memhooks/memhooks.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static atomic_long samples[4];
static atomic_long freed_calls, evicted_calls;
static atomic_uintptr_t next_token;
static void (*stop_hooks)(void);
static int64_t (*footprint)(void);

static uintptr_t count_sample(int kind, int64_t bytes, int64_t python_bytes, void *address)
{
    (void)bytes;
    (void)python_bytes;
    if (kind >= MEMHOOKS_ALLOC && kind <= MEMHOOKS_COPY) {
        atomic_fetch_add_explicit(&samples[kind], 1, memory_order_relaxed);
    }
    return kind == MEMHOOKS_ALLOC && address != NULL ? atomic_fetch_add(&next_token, 1) + 1 : 0;
}

static void count_freed(uintptr_t token, int evicted, int64_t bytes, uint64_t born)
{
    (void)token;
    (void)bytes;
    (void)born;
    atomic_fetch_add_explicit(evicted ? &evicted_calls : &freed_calls, 1, memory_order_relaxed);
}

__attribute__((constructor)) static void autostart(void)
{
    int (*start)(const memhooks_config *) = NULL;
    *(void **)&start = dlsym(RTLD_DEFAULT, "pyrometer_memhooks_start");
    *(void **)&stop_hooks = dlsym(RTLD_DEFAULT, "pyrometer_memhooks_stop");
    *(void **)&footprint = dlsym(RTLD_DEFAULT, "pyrometer_memhooks_footprint");
    if (start == NULL || stop_hooks == NULL || footprint == NULL) {
        static const char message[] =
            "memhooks_autostart: libpyrometer_memhooks.so is not preloaded\n";
        (void)!write(2, message, sizeof message - 1);
        _exit(121);
    }
    const char *w = getenv("MEMHOOKS_AUTOSTART_WINDOW");
    int64_t window = w != NULL ? atoll(w) : 4096;
    memhooks_config config = {window, window, count_sample, count_freed};
    if (start(&config) != 0) {
        static const char message[] = "memhooks_autostart: start failed\n";
        (void)!write(2, message, sizeof message - 1);
        _exit(122);
    }
}

__attribute__((destructor)) static void report(void)
{
    stop_hooks();
    const char *path = getenv("MEMHOOKS_AUTOSTART_REPORT");
    if (path == NULL) {
        return;
    }
    char line[256];
    int n = snprintf(line, sizeof line, "%ld %ld %ld %ld %ld %ld %lld\n", (long)getpid(),
                     atomic_load(&samples[MEMHOOKS_ALLOC]), atomic_load(&samples[MEMHOOKS_FREE]),
                     atomic_load(&samples[MEMHOOKS_COPY]), atomic_load(&freed_calls),
                     atomic_load(&evicted_calls), (long long)footprint());
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0 && n > 0) {
        (void)!write(fd, line, (size_t)n);
        close(fd);
    }
}

