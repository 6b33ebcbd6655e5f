/* ending: a run that does not end by returning still ends with its profile, or
 * with a line that says why there is none.  Signals, here; the ends Python
 * sees (exec, os._exit, a termination signal's default put back), in
 * src/pyrometer/run/endings.py.
 *
 * Termination signals (SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM) that
 * have their default disposition when profiling starts get a handler that only
 * records the signal and wakes the sampler thread (wake.h), which has
 * the profile written (sampler.c: by the main thread at its next bytecode
 * boundary, or by the sampler thread itself when the main thread is away), by
 * calling the host's write_profile(signum); then the process dies of the same
 * signal (ending_die), with the status and core-dump behaviour it would have had.
 * A second termination signal before that ends the process at once, with a line
 * on stderr.
 *
 * Crash signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT): a crashed process can
 * run no Python and may have a broken heap, so nothing is written; the handler
 * writes one line on stderr and hands the signal on to whatever handled it before
 * (the default: the same death, core dump included; faulthandler: its traceback).
 *
 * The program's own handlers (signal.signal) replace these, as they would replace
 * the default, and signal.getsignal() still answers SIG_DFL: CPython reads the
 * dispositions once, at start-up.  A forked child, which runs unprofiled, gets the
 * previous dispositions back; exec resets caught signals to the default.
 *
 * Not caught: SIGKILL and SIGSTOP (no handler can be installed), termination
 * signals the program ignores or handles, others whose default ends the process
 * (SIGPIPE and SIGXFSZ, which CPython ignores; SIGXCPU, SIGVTALRM, SIGPROF,
 * real-time signals).  See docs/how-it-works.md.
 */
#ifndef PYROMETER_ENDING_H
#define PYROMETER_ENDING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* How often the sampler thread looks again while the profile is being written
 * after a termination signal (ENDING_TAKEOVER_NS in sampler.c is twice it). */
#define ENDING_POLL_NS 20000000ULL

/* GIL held.  Installs the handlers and keeps a reference to write_profile, a
 * callable taking the signal number; child: this process is one of the
 * program's children, which writes no line on stderr (its stderr is the
 * program's; the top says what became of it, run/children.py).  0, or -1
 * with an exception set. */
int ending_install(PyObject *write_profile, int child);
/* GIL held.  Puts back the dispositions that ours replaced, where ours are still
 * installed, and drops write_profile. */
void ending_uninstall(void);
/* GIL held.  The program set signum to SIG_DFL (signal.signal): a termination
 * signal gets our handler again.  Other signals are left alone. */
void ending_reinstall(int signum);

/* The sampler thread, once a termination signal is recorded: a request waits
 * for the main thread's next bytecode boundary (sampler.c, answer_request).
 * The handler, run on the thread that installed it (the main thread), waits
 * for this before it returns, up to ENDING_ASK_WAIT_NS: the program's next
 * lines do not run.  Without it, signal.raise_signal(SIGTERM) returned and
 * the line after it printed before the request was made (bare, the process
 * dies inside the call). */
void ending_asked(void);
#define ENDING_ASK_WAIT_NS 5000000L

/* Any thread, signal-safe: the termination signal received, or 0. */
int ending_signal(void);
/* Any thread: a termination signal was received and no thread writes its profile yet. */
int ending_pending(void);
/* Any thread: 1 for the one thread that is to write the profile, 0 for the others. */
int ending_claim(void);
/* GIL held, after ending_claim() returned 1: calls write_profile(signum), then
 * ending_die(signum).  Returns only when write_profile returned False: this
 * thread is already writing the profile (the request was answered inside that
 * write), and the write under way ends the process of the signal when done. */
void ending_run(void);
/* Dies of signum with its default disposition (from any thread, including one
 * that blocks every signal).  Does not return. */
void ending_die(int signum);

#endif
