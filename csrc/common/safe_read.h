/* safe_read: copies memory of this process that another thread may change or
 * free meanwhile, without the risk of a fault.
 *
 * The sampler reads where the main thread stands while the main thread runs:
 * its thread state, its innermost frame and the instruction there.  A frame of
 * CPython 3.11+ lives in a chunk of the thread's data stack that is unmapped when
 * the stack shrinks, so a plain load could fault; process_vm_readv on our own pid
 * copies through the kernel, which reports an unmapped address as an error
 * instead.  A copy may still be torn or stale (the other thread keeps running):
 * callers treat what they read as a sample, check what they can, and never
 * follow a pointer they read without copying through here again.
 */
#ifndef PYROMETER_SAFE_READ_H
#define PYROMETER_SAFE_READ_H

#include <stddef.h>

/* 0 and n bytes at address copied into out, or -1 (unmapped, or the system call
 * is refused, e.g. by a seccomp policy). */
int safe_read(const void *address, void *out, size_t n);
/* Whether safe_read works in this process (checked once, on a known address). */
int safe_read_available(void);

#endif
