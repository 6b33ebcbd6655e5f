/* forks: keeps the profiler's own threads out of the program's forks.
 *
 * A fork with a profiler thread alive is a multi-threaded fork: CPython 3.12+
 * warns about it (it counts the process's threads right after fork()), and a
 * thread that held a lock at the fork leaves it held in the child.  So every
 * profiler thread registers here, and is stopped (joined) before os.fork and
 * started again in the parent once os.fork has returned.  The profile goes on;
 * the time the fork took is the forking line's.  Forks from C that do not go
 * through os.fork are not seen here: the subsystems' pthread_atfork child
 * handlers still reset them in the child.
 *
 * Callers hold the GIL.
 */
#ifndef PYROMETER_FORKS_H
#define PYROMETER_FORKS_H

#include <sys/types.h>

/* stop() is called before a fork with the GIL held (it may release it while it
 * waits for its thread); start() in the parent after the fork.  The first
 * registration installs the hooks.  0, or -1 with an exception set. */
int forks_register(void (*stop)(void), void (*start)(void));
void forks_unregister(void (*stop)(void));

/* Waits (at most 100 ms) until thread tid no longer counts among the process's
 * threads, after pthread_join has returned for it. */
void forks_wait_until_thread_gone(pid_t tid);

#endif
