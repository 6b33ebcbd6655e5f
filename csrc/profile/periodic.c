#include "periodic.h"
#include "../memory/mem_profile.h"
#include "../sampler/clock.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static struct {
    int fd;                 /* this process's end of the socket; -1: off */
    pid_t owner_pid;        /* a forked child never reports */
    uint64_t interval_ns;
    uint64_t due_ns;        /* wall clock (clock.h) of the next report */
    int in_flight;          /* a report was sent and is not answered yet */
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
    return P.fd >= 0 && P.error[0] == '\0' && (P.in_flight || now >= P.due_ns);
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
    P.in_flight = 0;
    P.answer_len = 0;
}

/* Reads what the writer answered so far; waits for the line when `wait`. */
static void read_answer(int wait)
{
    while (P.in_flight) {
        ssize_t n = recv(P.fd, P.answer + P.answer_len, sizeof P.answer - 1 - P.answer_len,
                         wait ? 0 : MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        }
        if (n <= 0) {
            fail("the periodic report writer ended");
            P.in_flight = 0;
            return;
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
}

/* The whole buffer, holding the GIL: the writer is idle and reading, so this
 * takes as long as copying it.  MSG_NOSIGNAL: a writer that died is an error
 * here, never a SIGPIPE in the program. */
static int send_all(const char *data, size_t size)
{
    uint64_t length = size;
    unsigned char header[8];
    for (int i = 0; i < 8; i++) {
        header[i] = (unsigned char)(length >> (8 * i));
    }
    const char *parts[2] = {(const char *)header, data};
    size_t sizes[2] = {sizeof header, size};
    for (int k = 0; k < 2; k++) {
        size_t done = 0;
        while (done < sizes[k]) {
            ssize_t n = send(P.fd, parts[k] + done, sizes[k] - done, MSG_NOSIGNAL);
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n < 0) {
                return -1;
            }
            done += (size_t)n;
        }
    }
    return 0;
}

void periodic_tick(uint64_t now)
{
    if (P.fd < 0 || getpid() != P.owner_pid) {
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
    /* Whatever the payload allocates (and its freeing) is the profiler's. */
    int64_t paused = mem_profile_pause();
    PyObject *payload = PyObject_CallNoArgs(P.make_payload);
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
    } else if (send_all(PyBytes_AS_STRING(payload), (size_t)PyBytes_GET_SIZE(payload)) != 0) {
        char message[300];
        snprintf(message, sizeof message, "cannot send the periodic report to its writer: %s",
                 strerror(errno));
        fail(message);
    } else {
        P.in_flight = 1;
    }
    Py_XDECREF(payload);
    mem_profile_resume(paused);
    PyErr_Restore(type, value, traceback);
}

PyObject *periodic_stop(void)
{
    if (P.fd >= 0 && getpid() == P.owner_pid) {
        Py_BEGIN_ALLOW_THREADS
        read_answer(1);
        close(P.fd);
        Py_END_ALLOW_THREADS
    }
    P.fd = -1;
    Py_CLEAR(P.make_payload);
    PyObject *error = P.error[0] != '\0' ? PyUnicode_DecodeUTF8(P.error, (Py_ssize_t)strlen(P.error), "replace")
                                         : Py_NewRef(Py_None);
    return error == NULL ? NULL : Py_BuildValue("(lN)", P.written, error);
}
