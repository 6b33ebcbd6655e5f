#include "periodic.h"
#include "../memory/mem_profile.h"
#include "../common/clock.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A writer that takes nothing of a report for this long is stopped (SIGSTOP, a
 * debugger) or hung: the report is abandoned.  A writer that is merely slow (a
 * busy machine, nice 10) still takes some of it every few milliseconds. */
#define PROGRESS_TIMEOUT_MS 2000
/* At the end, the answer to the report in flight is awaited at most this long,
 * or PATIENCE times the slowest answer so far, whichever is longer: the writer
 * renders the whole profile before it answers, and a big one takes its time. */
#define ANSWER_TIMEOUT_NS 2000000000ULL
#define PATIENCE 4

#define WRITER_ENDED "the periodic report writer ended (killed?): periodic reports stopped"

static struct {
    int fd;                 /* this process's end of the socket; -1: off */
    pid_t owner_pid;        /* a forked child never reports */
    uint64_t interval_ns;
    uint64_t due_ns;        /* wall clock (clock.h) of the next report */
    int in_flight;          /* a report was sent and is not answered yet */
    atomic_int sending;     /* a thread sends a report, GIL released */
    int stopping;           /* periodic_stop began: no new report */
    uint64_t sent_ns;       /* when the report in flight was sent */
    uint64_t slowest_ns;    /* the longest a report has waited for its answer */
    long written;           /* reports the writer confirmed */
    PyObject *make_payload;
    char answer[512];       /* the writer's answer, as it arrives */
    size_t answer_len;
    char error[512];        /* first failure; reports stop there */
} P = {.fd = -1};

static void close_in_child(void)
{
    if (P.fd >= 0) {
        close(P.fd); /* the writer must see end of input when the parent closes */
        P.fd = -1;
    }
}

int periodic_socketpair(int fds[2])
{
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

int periodic_start(uint64_t interval_ns, int fd, PyObject *make_payload)
{
    static int atfork_registered;
    if (!atfork_registered) {
        if (pthread_atfork(NULL, NULL, close_in_child) != 0) {
            PyErr_SetString(PyExc_OSError, "cannot register the fork handler");
            return -1;
        }
        atfork_registered = 1;
    }
    Py_XDECREF(P.make_payload);
    Py_INCREF(make_payload);
    P.make_payload = make_payload;
    P.fd = fd;
    P.owner_pid = getpid();
    P.interval_ns = interval_ns;
    P.due_ns = clock_wall_ns() + interval_ns;
    P.in_flight = 0;
    atomic_store(&P.sending, 0);
    P.stopping = 0;
    P.slowest_ns = 0;
    P.written = 0;
    P.answer_len = 0;
    P.error[0] = '\0';
    return 0;
}

static void fail(const char *message)
{
    if (P.error[0] == '\0') {
        snprintf(P.error, sizeof P.error, "%s", message);
    }
}

int periodic_due(uint64_t now)
{
    return P.fd >= 0 && P.error[0] == '\0' && !P.stopping && !atomic_load(&P.sending) &&
           (P.in_flight || now >= P.due_ns);
}

/* One answer line, complete: "ok", or what went wrong. */
static void answered(void)
{
    P.answer[P.answer_len - 1] = '\0';
    if (strcmp(P.answer, "ok") == 0) {
        P.written++;
    } else {
        fail(P.answer);
    }
    uint64_t waited = clock_wall_ns() - P.sent_ns;
    P.slowest_ns = waited > P.slowest_ns ? waited : P.slowest_ns;
    P.in_flight = 0;
    P.answer_len = 0;
}

/* Reads what the writer answered so far; with a deadline (clock_wall_ns), waits
 * for the line until then.  0, or -1 when the deadline passed first. */
static int read_answer(uint64_t deadline_ns)
{
    while (P.in_flight) {
        ssize_t n = recv(P.fd, P.answer + P.answer_len, sizeof P.answer - 1 - P.answer_len, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            uint64_t now = clock_wall_ns();
            if (deadline_ns == 0) {
                return 0;
            }
            if (now >= deadline_ns) {
                return -1;
            }
            struct pollfd p = {P.fd, POLLIN, 0};
            uint64_t left_ms = (deadline_ns - now) / 1000000 + 1;
            (void)poll(&p, 1, left_ms > 1000 ? 1000 : (int)left_ms); /* EINTR: look again */
            continue;
        }
        if (n <= 0) {
            fail(WRITER_ENDED);
            P.in_flight = 0;
            return 0;
        }
        P.answer_len += (size_t)n;
        char *end = memchr(P.answer, '\n', P.answer_len);
        if (end != NULL) {
            P.answer_len = (size_t)(end - P.answer) + 1;
            answered();
        } else if (P.answer_len == sizeof P.answer - 1) {
            P.answer[P.answer_len++] = '\n'; /* an over-long answer: keep its start */
            answered();
        }
    }
    return 0;
}

/* Sends one message (an 8-byte little-endian length, then the bytes), GIL
 * released by the caller.  Non-blocking sends, each wait for room bounded by
 * PROGRESS_TIMEOUT_MS.  MSG_NOSIGNAL: a writer that died is an error here, never
 * a SIGPIPE in the program.  0, or -1 with the reason in why. */
static int send_message(const char *data, uint64_t size, char *why, size_t why_size)
{
    unsigned char header[8];
    for (int i = 0; i < 8; i++) {
        header[i] = (unsigned char)(size >> (8 * i));
    }
    const char *parts[2] = {(const char *)header, data};
    size_t sizes[2] = {sizeof header, (size_t)size};
    for (int k = 0; k < 2; k++) {
        size_t done = 0;
        while (done < sizes[k]) {
            ssize_t n = send(P.fd, parts[k] + done, sizes[k] - done, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n >= 0) {
                done += (size_t)n;
                continue;
            }
            if (errno == EINTR) {
                continue;
            }
            if (errno == EPIPE || errno == ECONNRESET) {
                snprintf(why, why_size, "%s", WRITER_ENDED);
                return -1;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                snprintf(why, why_size, "cannot send the periodic report: %s", strerror(errno));
                return -1;
            }
            struct pollfd p = {P.fd, POLLOUT, 0};
            int ready;
            do {
                ready = poll(&p, 1, PROGRESS_TIMEOUT_MS);
            } while (ready < 0 && errno == EINTR);
            if (ready == 0) {
                snprintf(why, why_size, "the periodic report writer took nothing for %d s (stopped?): "
                         "periodic reports stopped", PROGRESS_TIMEOUT_MS / 1000);
                return -1;
            }
        }
    }
    return 0;
}

/* GIL held; sends with it released (the program's other threads run meanwhile). */
static int send_released(const char *data, uint64_t size)
{
    char why[300];
    int rc;
    atomic_store(&P.sending, 1);
    Py_BEGIN_ALLOW_THREADS
    rc = send_message(data, size, why, sizeof why);
    Py_END_ALLOW_THREADS
    atomic_store(&P.sending, 0);
    if (rc != 0) {
        fail(why);
    }
    return rc;
}

void periodic_tick(uint64_t now)
{
    if (P.fd < 0 || getpid() != P.owner_pid || P.stopping || atomic_load(&P.sending)) {
        return;
    }
    read_answer(0);
    if (P.in_flight || P.error[0] != '\0' || now < P.due_ns) {
        return;
    }
    P.due_ns += P.interval_ns;
    if (P.due_ns < now) {
        P.due_ns = now + P.interval_ns; /* a report took longer than the interval: skip */
    }
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback); /* the program's pending error, if any */
    /* Whatever the payload allocates (and its freeing) is the profiler's.  The
     * pause needs the GIL held throughout (mem_profile.h), so it covers making
     * the payload and dropping it, not the send in between. */
    int64_t paused = mem_profile_pause();
    PyObject *payload = PyObject_CallNoArgs(P.make_payload);
    mem_profile_resume(paused);
    if (payload == NULL && PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
        /* Ctrl-C came while the payload's Python code ran here, in the main
         * thread, and its handler raised inside it: the program's, not a failed
         * report.  Told again, so that the program gets it at its next check (its
         * handler was the default one, or it raised KeyboardInterrupt: running
         * it once more raises it again); this report is skipped. */
        PyErr_Clear();
        PyErr_SetInterrupt();
        PyErr_Restore(type, value, traceback);
        return;
    }
    if (payload == NULL || !PyBytes_Check(payload)) {
        PyObject *why = NULL;
        if (payload == NULL) {
            PyObject *t, *v, *tb;
            PyErr_Fetch(&t, &v, &tb);
            why = v != NULL ? PyObject_Str(v) : NULL;
            Py_XDECREF(t);
            Py_XDECREF(v);
            Py_XDECREF(tb);
            PyErr_Clear();
        }
        const char *text = why != NULL ? PyUnicode_AsUTF8(why) : NULL;
        char message[400];
        snprintf(message, sizeof message, "periodic report not made: %s",
                 text != NULL ? text : "the payload is not bytes");
        PyErr_Clear();
        Py_XDECREF(why);
        fail(message);
    } else {
        /* In flight from before the send: the writer may answer as soon as the
         * last byte is in. */
        P.in_flight = 1;
        P.sent_ns = clock_wall_ns();
        if (send_released(PyBytes_AS_STRING(payload), (uint64_t)PyBytes_GET_SIZE(payload)) != 0) {
            P.in_flight = 0;
        } else {
            P.sent_ns = clock_wall_ns();
        }
    }
    paused = mem_profile_pause();
    Py_XDECREF(payload);
    mem_profile_resume(paused);
    PyErr_Restore(type, value, traceback);
}

periodic_outcome periodic_stop(void)
{
    int quiet = 0; /* the writer was told the run is over, and ends by itself */
    if (P.fd >= 0 && getpid() == P.owner_pid) {
        P.stopping = 1;
        Py_BEGIN_ALLOW_THREADS
        /* A thread of the program may be sending a report (the sampler thread,
         * when the run ends by a signal): its send ends within the progress
         * timeout. */
        while (atomic_load(&P.sending)) {
            struct timespec pause = {0, 1000000};
            nanosleep(&pause, NULL);
        }
        if (P.error[0] == '\0') {
            uint64_t patience = PATIENCE * P.slowest_ns;
            patience = patience > ANSWER_TIMEOUT_NS ? patience : ANSWER_TIMEOUT_NS;
            char why[300];
            if (read_answer(clock_wall_ns() + patience) != 0) {
                snprintf(why, sizeof why,
                         "the periodic report writer did not answer within %.1f s (stopped?): "
                         "its last report was abandoned", (double)patience / 1e9);
                fail(why);
            } else if (P.error[0] == '\0') {
                /* An empty message: the final report is written by the program's
                 * process, and the writer ends quietly.  Without it, the writer
                 * knows that the program ended without its final report. */
                quiet = send_message("", 0, why, sizeof why) == 0;
            }
        }
        close(P.fd);
        Py_END_ALLOW_THREADS
    }
    P.fd = -1;
    Py_CLEAR(P.make_payload);
    /* Not quiet: the writer may be stopped, or may write its report late, over
     * the final one; the caller ends it. */
    return (periodic_outcome){.written = P.written, .error = P.error[0] != '\0' ? P.error : NULL, .quiet = quiet};
}
