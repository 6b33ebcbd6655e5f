#include "ending.h"
#include "../common/wake.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The handlers read and write these atomics: lock-free ones are async-signal-safe. */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "signal handlers need lock-free atomic ints");

typedef struct {
    int signum;
    const char *name;
    int installed;               /* ours was installed over previous */
    struct sigaction previous;
} handled_signal;

enum { N_TERMINATION = 6, N_CRASH = 5 };

static struct {
    handled_signal termination[N_TERMINATION];
    handled_signal crash[N_CRASH];
    atomic_int owner_pid;  /* the profiled process; a forked child is not profiled */
    atomic_int received;   /* the termination signal, 0: none yet */
    atomic_int claimed;    /* a thread writes the profile */
    atomic_int crashed;    /* the crash line was written */
    atomic_int asked;      /* the sampler thread made its request (ending_asked) */
    atomic_int main_tid;   /* the thread that installed the handlers */
    int child;             /* a child of the program's: no line (its stderr is the program's), no crash handler */
    PyObject *write_profile;
    int atfork_registered;
} E = {
    .termination = {{.signum = SIGTERM, .name = "SIGTERM"}, {.signum = SIGHUP, .name = "SIGHUP"}, {.signum = SIGQUIT, .name = "SIGQUIT"},
                    {.signum = SIGUSR1, .name = "SIGUSR1"}, {.signum = SIGUSR2, .name = "SIGUSR2"}, {.signum = SIGALRM, .name = "SIGALRM"}},
    .crash = {{.signum = SIGSEGV, .name = "SIGSEGV"}, {.signum = SIGBUS, .name = "SIGBUS"}, {.signum = SIGFPE, .name = "SIGFPE"},
              {.signum = SIGILL, .name = "SIGILL"}, {.signum = SIGABRT, .name = "SIGABRT"}},
};

/* Signal-safe: write() only; a short write or EINTR is retried, a failure ends it. */
static void say(const char *const parts[])
{
    for (int i = 0; parts[i] != NULL; i++) {
        size_t left = strlen(parts[i]); /* strlen is async-signal-safe since POSIX.1-2008 TC2 */
        const char *p = parts[i];
        while (left > 0) {
            ssize_t n = write(STDERR_FILENO, p, left);
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n <= 0) {
                return;
            }
            p += n;
            left -= (size_t)n;
        }
    }
}

static handled_signal *find(handled_signal *set, int count, int signum)
{
    for (int i = 0; i < count; i++) {
        if (set[i].signum == signum) {
            return &set[i];
        }
    }
    return NULL;
}

/* Signal-safe (sigaction, pthread_sigmask, raise).  The default disposition,
 * the signal unblocked in this thread, and the signal to this thread: delivered
 * before raise returns, it ends the process as it would have without us. */
static void die_of(int signum)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(signum, &dfl, NULL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, signum);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    raise(signum);
}

/* Signal-safe (syscall, nanosleep): on the main thread, until the sampler
 * thread has asked for the profile (ending_asked), at most ENDING_ASK_WAIT_NS.
 * Bounded, so that nothing waits on a sampler that is not running, or one
 * held up by a lock the interrupted code holds. */
static void wait_until_asked(void)
{
    if ((int)syscall(SYS_gettid) != atomic_load(&E.main_tid)) {
        return;
    }
    const long step_ns = 20000;
    for (long waited = 0; waited < ENDING_ASK_WAIT_NS && !atomic_load(&E.asked); waited += step_ns) {
        struct timespec step = {0, step_ns};
        nanosleep(&step, NULL);
    }
}

/* Signal handler for termination signals.  Signal-safe: atomics, getpid, write,
 * sigaction, pthread_sigmask, raise, sem_post, syscall and nanosleep only;
 * errno is saved.  It records the
 * signal and returns (SA_RESTART: the program's system calls go on); the sampler
 * thread acts on it. */
static void on_termination(int signum)
{
    int saved_errno = errno;
    int expected = 0;
    if (getpid() != atomic_load(&E.owner_pid)) {
        die_of(signum); /* a child forked without the atfork handlers: not profiled */
    } else if (!atomic_compare_exchange_strong(&E.received, &expected, signum)) {
        handled_signal *h = find(E.termination, N_TERMINATION, signum);
        const char *parts[] = {"pyrometer: the program: ", h != NULL ? h->name : "a second signal",
                               " before the profile was written: ending without it\n", NULL};
        if (!E.child) {
            say(parts);
        }
        die_of(signum);
    } else {
        wake_post(); /* the sampler thread writes the profile now (sem_post is signal-safe) */
        wait_until_asked();
    }
    errno = saved_errno;
}

/* Signal handler for crash signals.  Signal-safe: atomics, getpid, write,
 * sigaction and raise only; errno is saved.  The previous disposition comes
 * back, and the signal, raised again while it is blocked here, reaches it as
 * soon as this returns; a fault from an instruction would also just recur. */
static void on_crash(int signum)
{
    int saved_errno = errno;
    handled_signal *h = find(E.crash, N_CRASH, signum);
    if (getpid() == atomic_load(&E.owner_pid) && !atomic_exchange(&E.crashed, 1)) {
        const char *parts[] = {"pyrometer: the program crashed (", h != NULL ? h->name : "a fatal signal",
                               "): the profile is lost, a crashed process cannot write it\n", NULL};
        say(parts);
    }
    if (h != NULL && h->installed) {
        sigaction(signum, &h->previous, NULL);
    } else {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(signum, &dfl, NULL);
    }
    errno = saved_errno;
    raise(signum);
}

static int is_ours(int signum, void (*handler)(int))
{
    struct sigaction now;
    return sigaction(signum, NULL, &now) == 0 && !(now.sa_flags & SA_SIGINFO) && now.sa_handler == handler;
}

static int install(handled_signal *h, void (*handler)(int), int flags)
{
    struct sigaction ours;
    memset(&ours, 0, sizeof ours);
    ours.sa_handler = handler;
    sigemptyset(&ours.sa_mask);
    ours.sa_flags = flags;
    if (sigaction(h->signum, &ours, &h->previous) != 0) {
        return -1;
    }
    h->installed = 1;
    return 0;
}

static void restore(handled_signal *set, int count, void (*handler)(int))
{
    for (int i = 0; i < count; i++) {
        if (set[i].installed && is_ours(set[i].signum, handler)) {
            sigaction(set[i].signum, &set[i].previous, NULL);
        }
        set[i].installed = 0;
    }
}

/* A forked child runs unprofiled: what it would have without us. */
static void restore_in_child(void)
{
    restore(E.termination, N_TERMINATION, on_termination);
    restore(E.crash, N_CRASH, on_crash);
    atomic_store(&E.received, 0);
    atomic_store(&E.claimed, 0);
    atomic_store(&E.asked, 0);
    atomic_store(&E.main_tid, 0);
}

int ending_install(PyObject *write_profile, int child)
{
    if (!E.atfork_registered) {
        if (pthread_atfork(NULL, NULL, restore_in_child) != 0) {
            PyErr_SetString(PyExc_OSError, "cannot register the fork handler");
            return -1;
        }
        E.atfork_registered = 1;
    }
    ending_uninstall();
    E.child = child; /* a child's end is the top's to tell, in the process table (children.py) */
    atomic_store(&E.owner_pid, (int)getpid());
    atomic_store(&E.received, 0);
    atomic_store(&E.claimed, 0);
    atomic_store(&E.crashed, 0);
    atomic_store(&E.asked, 0);
    atomic_store(&E.main_tid, (int)syscall(SYS_gettid));
    for (int i = 0; i < N_TERMINATION; i++) {
        handled_signal *h = &E.termination[i];
        struct sigaction now;
        /* Only a default disposition: an ignored SIGHUP (nohup) stays ignored,
         * and a handler the program's environment installed stays. */
        if (sigaction(h->signum, NULL, &now) == 0 && !(now.sa_flags & SA_SIGINFO) && now.sa_handler == SIG_DFL &&
            install(h, on_termination, SA_RESTART) != 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            ending_uninstall();
            return -1;
        }
    }
    /* A child gets no crash handler: its line is the top's to say, and a
     * handler of ours chained to one the program has since turned off (a
     * forked worker inherits faulthandler's, and faulthandler.disable() puts
     * back what it found) would hand the crash to that disabled handler, which
     * returns: CPython 3.10's test_concurrent_futures saw its worker's SIGSEGV
     * lost and no BrokenProcessPool. */
    for (int i = 0; i < N_CRASH && !child; i++) {
        handled_signal *h = &E.crash[i];
        struct sigaction now;
        /* Chained to any handler that was there (faulthandler); an ignored one
         * stays ignored.  SA_ONSTACK: an alternate stack, where the program or
         * faulthandler set one, lets the line be written after a stack overflow. */
        if (sigaction(h->signum, NULL, &now) == 0 && ((now.sa_flags & SA_SIGINFO) || now.sa_handler != SIG_IGN) &&
            install(h, on_crash, SA_ONSTACK) != 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            ending_uninstall();
            return -1;
        }
    }
    Py_INCREF(write_profile);
    E.write_profile = write_profile;
    return 0;
}

void ending_uninstall(void)
{
    atomic_store(&E.owner_pid, 0); /* a handler still chained behind another says nothing */
    restore(E.termination, N_TERMINATION, on_termination);
    restore(E.crash, N_CRASH, on_crash);
    Py_CLEAR(E.write_profile);
}

void ending_reinstall(int signum)
{
    handled_signal *h = find(E.termination, N_TERMINATION, signum);
    if (h == NULL || E.write_profile == NULL || getpid() != atomic_load(&E.owner_pid) ||
        is_ours(signum, on_termination)) {
        return;
    }
    struct sigaction previous = h->previous;
    int was_installed = h->installed;
    if (install(h, on_termination, SA_RESTART) == 0 && was_installed) {
        h->previous = previous; /* what to put back at the end stays what was there first */
    }
}

void ending_asked(void)
{
    atomic_store(&E.asked, 1);
}

int ending_signal(void)
{
    return atomic_load(&E.received);
}

int ending_pending(void)
{
    return atomic_load(&E.received) != 0 && atomic_load(&E.claimed) == 0;
}

int ending_claim(void)
{
    return atomic_load(&E.received) != 0 && atomic_exchange(&E.claimed, 1) == 0;
}

void ending_run(void)
{
    int signum = atomic_load(&E.received);
    if (E.write_profile != NULL) {
        PyObject *result = PyObject_CallFunction(E.write_profile, "i", signum);
        if (result == NULL) {
            /* write_profile reports its own failures; this is one that escaped it. */
            PyObject *type, *value, *traceback;
            PyErr_Fetch(&type, &value, &traceback);
            PyObject *text = value != NULL ? PyObject_Str(value) : NULL;
            const char *why = text != NULL ? PyUnicode_AsUTF8(text) : NULL;
            fprintf(stderr, "pyrometer: the profile could not be written: %s\n", why != NULL ? why : "?");
            PyErr_Clear();
            Py_XDECREF(text);
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(traceback);
        }
        if (result == Py_False) {
            /* This thread is already writing the profile (exec, os._exit) and
             * answered the request from inside that write: the write goes on, and
             * ends the process of this signal when done (endings.py). */
            Py_DECREF(result);
            atomic_store(&E.claimed, 0);
            return;
        }
        Py_XDECREF(result);
    }
    ending_die(signum);
}

void ending_die(int signum)
{
    fflush(stderr);
    die_of(signum);
    /* Not reached: the default disposition of every signal here ends the process. */
    _exit(128 + signum);
}
