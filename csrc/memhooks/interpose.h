/* What every function the preloaded library interposes is marked with: the
 * exported symbol (the library is built with hidden visibility), and EARLY.
 * Shared by hooks.c (the allocator and copy functions) and pymalloc_arenas.c
 * (the address-space limits). */
#ifndef PYROMETER_MEMHOOKS_INTERPOSE_H
#define PYROMETER_MEMHOOKS_INTERPOSE_H

#define EXPORT __attribute__((visibility("default")))
/* Built with AddressSanitizer (the sanitizer job, tests/sanitized.py), the
 * library is preloaded ahead of ASan's runtime, so that the program's malloc
 * reaches these hooks and theirs (dlsym(RTLD_NEXT)) reaches ASan's.  ASan's
 * start-up calls dlsym before it has mapped its shadow memory, and dlsym may
 * call malloc (and it sets a limit on core files through setrlimit): whatever
 * runs then (the interposed entry points, up to the point where they see
 * counting is off, and the resolution of the real functions) must not be
 * instrumented, or its first shadow check faults.  Everything past that point
 * (counting, samples, watches) is instrumented, and the blocks themselves are
 * checked by ASan's own allocator and interceptors.  Empty in every other
 * build. */
#if defined(__SANITIZE_ADDRESS__)
#define EARLY __attribute__((no_sanitize_address))
#else
#define EARLY
#endif

#endif
