/* periodic: --profile-interval, driven from the sampler.
 * The measuring core's side (when a report is due, the send, the bounds);
 * src/pyrometer/run/periodic.py makes the payload and runs the writer process.
 *
 * A profile written every N seconds needs the GIL (the aggregates are read into
 * Python data), and a Python thread of its own can wait seconds for it: CPython's
 * GIL hands itself back to a thread that releases and retakes it in a loop (I/O,
 * short C calls) before a waiting thread gets it.  So the thread that already
 * holds the GIL for a CPU sample does the work: the main thread when it answers a
 * sample request, or the sampler thread when it took the GIL itself.
 *
 * Per report: make_payload() (Python, returns bytes: the aggregates, marshalled)
 * runs with the GIL and the memory profile paused; the bytes go to a writer
 * process over a socket with the GIL released (the program's other threads go on
 * meanwhile), and the writer (a separate, niced interpreter) renders the report
 * and replaces the file, then answers one line.  A new report is sent only once
 * the previous one is answered, so reports never pile up and the send never waits
 * for rendering.  The main thread's CPU in all this is taken out of its samples by
 * the sampler (see periodic_tick).
 *
 * Nothing here waits without a bound: a writer that takes no data for 2 s
 * (stopped, hung) or has died ends the reports with a one-line reason, and the
 * final wait for the report in flight is bounded too (periodic_stop).  The
 * protocol: each message is an 8-byte little-endian length and that many bytes;
 * an empty message says the run is over and its final report written by the
 * program's process, so that a writer that meets end of input without one knows
 * the program ended abruptly and says so.
 */
#ifndef PYROMETER_PERIODIC_H
#define PYROMETER_PERIODIC_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* A connected socket pair: fds[0] for this process, fds[1] for the writer's
 * standard input and output.  0, or -1 with an exception set. */
int periodic_socketpair(int fds[2]);
/* GIL held.  Takes fd (this process's end) and a reference to make_payload. */
int periodic_start(uint64_t interval_ns, int fd, PyObject *make_payload);
/* Whether a report is due at `now` (monotonic wall clock, clock.h) and the
 * writer is ready for it; cheap, GIL held. */
int periodic_due(uint64_t now);
/* GIL held (released while the report is sent): reads the writer's answer if
 * there is one, and sends the report if due.  Never raises (a failure stops the
 * reports and is kept for periodic_stop). */
void periodic_tick(uint64_t now);
/* How the reports went, for module.c to hand over. */
typedef struct {
    long written;      /* reports the writer wrote */
    const char *error; /* the first failure (reports stopped there), or NULL */
    int quiet;         /* 0: the writer may still be running a report or be
                        * stopped, and should be ended by the caller, who knows
                        * its pid */
} periodic_outcome;

/* GIL held (released while waiting): waits, bounded, for a report being sent
 * and for the answer to the report in flight, tells the writer the run is over,
 * closes the socket and says how the reports went (error stays valid until the
 * next periodic_start). */
periodic_outcome periodic_stop(void);

#endif
