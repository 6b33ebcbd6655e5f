/* audit: the program's calls that CPython announces as audit events
 * (PEP 578), seen without replacing anything.
 *
 * os.execv/os.execve raise "os.exec" before the exec, subprocess.Popen raises
 * "subprocess.Popen" from its _execute_child: a hook on those needs no
 * replaced function at all (an earlier version replaced os.execv and
 * Popen._execute_child, and put a finder in sys.meta_path until subprocess
 * was imported).  One C hook is added, once per process (a hook cannot be
 * removed: it does nothing while no watch is set); it compares the event's
 * name with those watched (a few string compares: events are frequent, an
 * "open" for every file) and calls the watcher only for those, in the main
 * interpreter only.  A watcher's exception is reported as unraisable and the
 * program's operation goes on, as without the hook.
 *
 * Callers hold the GIL.
 */
#ifndef PYROMETER_AUDIT_H
#define PYROMETER_AUDIT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* audit_watch(event, watcher): watcher(event, args) on each audit event of
 * that name (eight names at most); audit_watch(event, None) stops. */
extern PyMethodDef audit_methods[];

/* A C function called on each audit event of that name, before the Python
 * watchers, in the main interpreter only (four names at most; the same
 * again is a no-op), for the process's life: it does nothing while what it
 * serves is stopped.  0, or -1 with an exception set. */
int audit_watch_native(const char *event, void (*fn)(void));

#endif
