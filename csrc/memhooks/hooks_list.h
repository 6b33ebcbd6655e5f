/* The functions the library interposes, with their real counterparts resolved by
 * dlsym(RTLD_NEXT).  One list generates the declarations and the resolution. */
HOOKED(malloc, void *, (size_t))
HOOKED(calloc, void *, (size_t, size_t))
HOOKED(realloc, void *, (void *, size_t))
HOOKED(reallocarray, void *, (void *, size_t, size_t))
HOOKED(free, void, (void *))
HOOKED(posix_memalign, int, (void **, size_t, size_t))
HOOKED(aligned_alloc, void *, (size_t, size_t))
HOOKED(memalign, void *, (size_t, size_t))
HOOKED(valloc, void *, (size_t))
HOOKED(pvalloc, void *, (size_t))
HOOKED(malloc_usable_size, size_t, (void *))
HOOKED(memcpy, void *, (void *, const void *, size_t))
HOOKED(memmove, void *, (void *, const void *, size_t))
/* What fortified builds (-D_FORTIFY_SOURCE, e.g. Debian's python3) call instead. */
HOOKED(__memcpy_chk, void *, (void *, const void *, size_t, size_t))
HOOKED(__memmove_chk, void *, (void *, const void *, size_t, size_t))
