#include "safe_read.h"

#include <stdint.h>
#include <sys/uio.h>
#include <unistd.h>

int safe_read(const void *address, void *out, size_t n)
{
    struct iovec local = {out, n};
    struct iovec remote = {(void *)(uintptr_t)address, n};
    ssize_t got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    return got == (ssize_t)n ? 0 : -1;
}

int safe_read_available(void)
{
    static const unsigned long known = 0x5AFEC0DEUL;
    unsigned long copy = 0;
    return safe_read(&known, &copy, sizeof copy) == 0 && copy == known;
}
