/* sample_distance: the bytes to the next allocation sample, exponential with a
 * given mean (a Poisson process over the bytes allocated), from a caller's own
 * xorshift64 state.  Header-only and without libm: the preloaded library calls
 * it from inside malloc, where a lazily bound libm symbol would be resolved by
 * the dynamic linker (which may allocate), and it must not depend on libm at
 * all.  Used by the library (native bytes) and the extension (Python's). */
#ifndef PYROMETER_SAMPLE_DISTANCE_H
#define PYROMETER_SAMPLE_DISTANCE_H

#include <stdint.h>
#include <string.h>

/* ln(x) for x in (0, 1]: x = m * 2^e with m in [1, 2), ln(m) = 2 atanh(z) with
 * z = (m - 1) / (m + 1) in [0, 1/3), summed to z^11 (absolute error under
 * 1e-7, measured against libm's log: a distance off by a ten-millionth of a
 * window). */
static inline double sample_distance_ln(double x)
{
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    int e = (int)((bits >> 52) & 0x7FF) - 1023;
    bits = (bits & 0x000FFFFFFFFFFFFFULL) | 0x3FF0000000000000ULL;
    double m;
    memcpy(&m, &bits, sizeof m);
    double z = (m - 1.0) / (m + 1.0), z2 = z * z;
    double series = z * (1.0 + z2 * (1.0 / 3 + z2 * (1.0 / 5 + z2 * (1.0 / 7 + z2 * (1.0 / 9 + z2 / 11)))));
    return 2.0 * series + (double)e * 0.69314718055994530942;
}

/* Advances *rng (never 0) and returns a distance of mean `mean`, at least 1.
 * Memoryless, so that no pattern in a program's allocations lines up with the
 * samples and each site's volume is unbiased.  (Distances jittered uniformly
 * between half and one and a half means, tried first for their smaller spread,
 * lock onto a program's period: a loop keeping 200 KB and dropping 500 KB each
 * round had its kept line over-sampled by 5-17% in every run.) */
static inline int64_t sample_distance(uint64_t *rng, int64_t mean)
{
    uint64_t x = *rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *rng = x;
    double u = (double)((x >> 11) + 1) / 9007199254740992.0; /* (0, 1]: no 2^-53 below */
    int64_t d = (int64_t)(-sample_distance_ln(u) * (double)mean);
    return d < 1 ? 1 : d;
}

#endif
