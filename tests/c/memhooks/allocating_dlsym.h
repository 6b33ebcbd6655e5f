/* Force-included (gcc -include) into hooks.c for the bootstrap variant of the
 * library, libpyrometer_memhooks.so in $(BUILD)/bootstrap.
 *
 * glibc 2.34+ resolves dlsym(RTLD_NEXT) without allocating, so the bootstrap heap
 * (the static buffer that serves malloc & co. while the real functions are being
 * looked up) is never used in an ordinary run.  It is used where dlsym allocates:
 * older glibc (libdl's dlerror buffer), a failed lookup, another libc.  Here the
 * first dlsym of resolve() allocates with every function the heap serves, and
 * leaves the blocks in memhooks_test_bootstrap for test_memhooks to check. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

__attribute__((visibility("default"))) void *memhooks_test_bootstrap[5];

static void *allocating_dlsym(void *handle, const char *name)
{
    void **b = memhooks_test_bootstrap;
    if (b[0] == NULL) {
        b[0] = malloc(100);
        if (b[0] != NULL) {
            memset(b[0], 0x5A, 100);
        }
        b[1] = calloc(10, 30);
        if (posix_memalign(&b[2], 256, 1000) != 0) {
            b[2] = NULL;
        }
        b[3] = aligned_alloc(4096, 4096);
        b[4] = realloc(NULL, 50);
    }
    return dlsym(handle, name);
}

#define dlsym(handle, name) allocating_dlsym(handle, name)
