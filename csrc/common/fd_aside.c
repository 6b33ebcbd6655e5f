/* fd_aside: see fd_aside.h. */
#include "fd_aside.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

int fd_aside(int fd)
{
    if (fd < 0 || fd >= FD_ASIDE_BASE) {
        return fd;
    }
    struct rlimit limit;
    long base = FD_ASIDE_BASE;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
        (rlim_t)base >= limit.rlim_cur / 2) {
        base = (long)(limit.rlim_cur / 2);
    }
    if (base <= fd) {
        return fd;
    }
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, (int)base);
    if (moved < 0) {
        return fd;
    }
    close(fd);
    return moved;
}
