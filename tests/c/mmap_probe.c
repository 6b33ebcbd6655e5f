#include "mmap_probe.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/types.h>

void *__real_mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset);
int __real_munmap(void *addr, size_t length);
void *__wrap_mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset);
int __wrap_munmap(void *addr, size_t length);

/* Single-threaded use only: the tests that start threads map nothing through here. */
static mmap_usage usage;
static long allowed = -1;

void *__wrap_mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset)
{
    if (allowed == 0) {
        errno = ENOMEM;
        return MAP_FAILED;
    }
    if (allowed > 0) {
        allowed--;
    }
    void *p = __real_mmap(addr, length, prot, flags, fd, offset);
    if (p != MAP_FAILED) {
        usage.mappings++;
        usage.bytes += length;
    }
    return p;
}

int __wrap_munmap(void *addr, size_t length)
{
    int rc = __real_munmap(addr, length);
    if (rc == 0) {
        usage.mappings--;
        usage.bytes -= length;
    }
    return rc;
}

mmap_usage mmap_probe_usage(void)
{
    return usage;
}

void mmap_probe_refuse_after(long successes)
{
    allowed = successes < 0 ? -1 : successes;
}
