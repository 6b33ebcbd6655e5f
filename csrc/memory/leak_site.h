/* leak_site: where the frees of sampled blocks are told (a sample's token points
 * to one).  Updated from any thread, inside free(): atomics only.  An evicted
 * block's fate is unknown: its bytes stay live. */
#ifndef PYROMETER_LEAK_SITE_H
#define PYROMETER_LEAK_SITE_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct leak_site leak_site;
struct leak_site {
    _Atomic uint64_t watched, freed, evicted;
    _Atomic uint64_t freed_bytes; /* weights of the sampled blocks freed */
    _Atomic uint64_t churn_bytes; /* of those, the small Python blocks freed at once (memhooks.h) */
    /* Of freed_bytes, the samples of a whole number of windows (mem_line's
     * window_bytes and python_window_bytes): what is left of those is the
     * part of the growth with a sampling error. */
    _Atomic uint64_t freed_window_bytes, freed_python_window_bytes;
    /* Told too, of every free told here (NULL: none): a call stack's site
     * passes its frees on to its line's (mem_profile.c).  Set before any token
     * points here, never changed after. */
    leak_site *also;
};

#endif
