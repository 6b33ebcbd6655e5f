/* A program that never starts a thread (and is not linked with -pthread), run by
 * test_memhooks with the library preloaded: the hooks' thread-local counters and
 * the sample function work on the main thread alone.  Exit status 0 when they do;
 * otherwise a message on stderr and 1. */
#include "memhooks/memhooks.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB ((int64_t)1 << 20)

static long alloc_samples, free_samples, copy_samples;
static int64_t alloc_bytes;

static uintptr_t count_sample(int kind, int64_t bytes, int64_t python_bytes, void *address)
{
    (void)python_bytes;
    (void)address;
    if (kind == MEMHOOKS_ALLOC) {
        alloc_samples++;
        alloc_bytes += bytes;
    } else if (kind == MEMHOOKS_FREE) {
        free_samples++;
    } else if (kind == MEMHOOKS_COPY) {
        copy_samples++;
    }
    return 0;
}

static int fail(const char *what)
{
    fprintf(stderr, "single_thread: %s\n", what);
    return 1;
}

int main(void)
{
    int (*start)(const memhooks_config *) = NULL;
    void (*stop)(void) = NULL;
    *(void **)&start = dlsym(RTLD_DEFAULT, "pyrometer_memhooks_start");
    *(void **)&stop = dlsym(RTLD_DEFAULT, "pyrometer_memhooks_stop");
    if (start == NULL || stop == NULL) {
        return fail("libpyrometer_memhooks.so is not preloaded");
    }
    memhooks_config config = {MiB, MiB, count_sample, NULL};
    if (start(&config) != 0) {
        return fail("start failed");
    }
    void *block[16];
    for (int i = 0; i < 16; i++) {
        block[i] = malloc((size_t)MiB);
        if (block[i] == NULL) {
            return fail("malloc failed");
        }
    }
    for (int i = 0; i < 15; i++) {
        memcpy(block[i + 1], block[i], (size_t)MiB);
    }
    for (int i = 0; i < 16; i++) {
        free(block[i]);
    }
    stop();
    if (alloc_samples < 15 || alloc_bytes < 15 * MiB || alloc_bytes > 17 * MiB) {
        return fail("wrong ALLOC samples");
    }
    /* Frees take no samples (a sampled block's free is told through its watch). */
    if (free_samples != 0 || copy_samples != 15) {
        return fail("wrong FREE or COPY samples");
    }
    return 0;
}
