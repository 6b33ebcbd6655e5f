/* mmap_probe: sees every mapping the code under test makes, and can refuse them.
 *
 * The arena and the table take their memory straight from mmap, where neither
 * ASan's nor valgrind's leak checker looks; counting live mappings is how these
 * tests see a leak.  Refusing mmap is how they reach the out-of-memory paths.
 * The test binary is linked with -Wl,--wrap=mmap,--wrap=munmap, which sends the
 * calls made by the objects in that link (and only those: libc, the sanitizer
 * runtimes and valgrind keep the real ones) through here.
 */
#ifndef PYROMETER_MMAP_PROBE_H
#define PYROMETER_MMAP_PROBE_H

#include <stddef.h>

typedef struct {
    long mappings;
    size_t bytes;
} mmap_usage;

mmap_usage mmap_probe_usage(void);
/* Let `successes` more mmap calls through, then refuse every one (ENOMEM) until
 * called again; a negative count never refuses. */
void mmap_probe_refuse_after(long successes);

#endif
