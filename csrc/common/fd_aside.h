/* fd_aside: the files the core keeps open for a thread's life (its schedstat,
 * its system-call file) moved out of the program's way.
 *
 * A program may count its descriptors, or expect the next one it opens to be
 * the lowest free (CPython's test_subprocess passes descriptors 3-12 to
 * children and checks which arrive).  A descriptor of ours at 3 or 4 would be
 * one of them.  So each is moved to FD_ASIDE_BASE or above (close-on-exec, as
 * all of ours are), or half the soft limit where that is lower; where even
 * that fails (a limit of a few descriptors) it stays where it was.
 */
#ifndef PYROMETER_FD_ASIDE_H
#define PYROMETER_FD_ASIDE_H

#define FD_ASIDE_BASE 900

/* fd, or the descriptor it was moved to (fd itself closed); -1 stays -1. */
int fd_aside(int fd);

#endif
