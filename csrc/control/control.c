#include "control.h"
#include "../common/clock.h"
#include "../common/wake.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Programs that use real-time signals take them from the ends of the range:
 * timers and most libraries count up from SIGRTMIN (glibc keeps the two below it
 * for its threads), a few runtimes count down from SIGRTMAX.  One in the middle,
 * fixed relative to SIGRTMAX (which, unlike SIGRTMIN, does not move with the C
 * library's own reservations), is the least likely to be the program's. */
#define CONTROL_SIGNAL_BELOW_MAX 5

/* Commands received and not yet taken.  Filled by the handler (any thread: a slot
 * is claimed with one fetch_add, its command stored last), emptied with the GIL
 * held.  More than this many commands in one stretch without the GIL (a main
 * thread in one long native call) overwrite the oldest: only the latest count. */
#define CONTROL_QUEUE_SLOTS 16

typedef struct {
    atomic_int command; /* 0 while the slot is empty or being written */
    _Atomic uint64_t wall_ns;
    _Atomic uint64_t main_cpu_ns;
} queue_slot;

static struct {
    /* Touched by the signal handler: lock-free atomics only. */
    _Atomic uint64_t head, tail;
    queue_slot slots[CONTROL_QUEUE_SLOTS];
    atomic_int main_tid;
    /* Touched only with the GIL held. */
    int count;               /* the program's own start()/stop() count */
    int held;                /* paused from outside */
    int handler_installed;
    char state_file[PATH_MAX];
} C = {.count = 1};

int control_signal_number(void)
{
    return SIGRTMAX - CONTROL_SIGNAL_BELOW_MAX;
}

/* Signal-safe: clock_gettime, lock-free atomics and sem_post only (clock_wall_ns and
 * clock_thread_cpu_ns are one clock_gettime each). */
void control_command_received(int command)
{
    if (command != CONTROL_OFF && command != CONTROL_ON) {
        return;
    }
    int saved_errno = errno; /* clock_gettime may set it */
    uint64_t wall = clock_wall_ns();
    int tid = atomic_load(&C.main_tid);
    uint64_t cpu = tid > 0 ? clock_thread_cpu_ns((pid_t)tid) : CLOCK_UNAVAILABLE;
    uint64_t at = atomic_fetch_add(&C.head, 1);
    queue_slot *slot = &C.slots[at % CONTROL_QUEUE_SLOTS];
    atomic_store(&slot->wall_ns, wall);
    atomic_store(&slot->main_cpu_ns, cpu);
    atomic_store(&slot->command, command); /* last: the slot is ready */
    errno = saved_errno;
    wake_post(); /* the sampler thread acts on it now, not when its sleep ends */
}

/* Signal-safe: records the command (control_command_received), nothing else.  Only a
 * command sent with sigqueue carries a value; a plain kill of this signal
 * (SI_USER) says nothing and is ignored, so the program never sees it either
 * way. */
static void on_control_signal(int signum, siginfo_t *info, void *context)
{
    (void)signum;
    (void)context;
    if (info != NULL && info->si_code == SI_QUEUE) {
        control_command_received(info->si_value.sival_int);
    }
}

static int install_handler(void)
{
    if (C.handler_installed) {
        return 0;
    }
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_control_signal;
    /* SA_RESTART: the program's system calls carry on where the signal lands. */
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    if (sigaction(control_signal_number(), &action, NULL) != 0) {
        return -1;
    }
    C.handler_installed = 1;
    return 0;
}

/* The state a command from outside left for later processes of the run:
 * CONTROL_NONE when there is none (or it cannot be read). */
static int read_state_file(void)
{
    if (C.state_file[0] == '\0') {
        return CONTROL_NONE;
    }
    int fd = open(C.state_file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return CONTROL_NONE;
    }
    char buf[8] = {0};
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n >= 3 && memcmp(buf, "off", 3) == 0) {
        return CONTROL_OFF;
    }
    if (n >= 2 && memcmp(buf, "on", 2) == 0) {
        return CONTROL_ON;
    }
    return CONTROL_NONE;
}

/* Written whole or not at all (a name of this process's, then a rename), as
 * several processes of the run write it at once. */
static void write_state_file(int command)
{
    if (C.state_file[0] == '\0') {
        return;
    }
    char tmp[PATH_MAX + 32];
    int len = snprintf(tmp, sizeof tmp, "%s.%d.tmp", C.state_file, (int)getpid());
    if (len < 0 || (size_t)len >= sizeof tmp) {
        return;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        return; /* the run directory is gone: the run is ending */
    }
    const char *text = command == CONTROL_OFF ? "off\n" : "on\n";
    ssize_t want = (ssize_t)strlen(text);
    ssize_t n = write(fd, text, (size_t)want);
    close(fd);
    if (n != want || rename(tmp, C.state_file) != 0) {
        unlink(tmp);
    }
}

static void apply(int command)
{
    if (command == CONTROL_OFF) {
        C.held = 1;
    } else if (command == CONTROL_ON) {
        C.held = 0;
        if (C.count == 0) {
            C.count = 1;
        }
    }
}

int control_begin(int start_off, const char *state_file)
{
    C.state_file[0] = '\0';
    if (state_file != NULL) {
        if (strlen(state_file) >= sizeof C.state_file) {
            errno = ENAMETOOLONG;
            return -1;
        }
        strcpy(C.state_file, state_file);
    }
    if (start_off >= 0) {
        C.count = start_off ? 0 : 1;
        C.held = 0;
        apply(read_state_file()); /* a command given to the run before this process started */
    }
    /* Commands received and not yet taken: in a fork, its parent's (the
     * sampler thread is woken to act on them at once), meant for this process too, which did
     * not exist when they were sent; they take effect from the start. */
    control_received received;
    while (control_take(&received)) {
        if (start_off < 0) {
            apply(received.command);
        }
    }
    atomic_store(&C.main_tid, 0); /* the sampler sets it when it starts */
    return install_handler();
}

int control_count_up(void)
{
    if (C.count < INT_MAX) {
        C.count++;
    }
    return C.count;
}

int control_count_down(void)
{
    if (C.count > 0) {
        C.count--;
    }
    return C.count;
}

int control_wanted(void)
{
    return C.count > 0 && !C.held;
}

void control_set_main_thread(pid_t tid)
{
    atomic_store(&C.main_tid, (int)tid);
}

int control_pending(void)
{
    return atomic_load(&C.head) != atomic_load(&C.tail);
}

int control_take(control_received *out)
{
    uint64_t head = atomic_load(&C.head);
    uint64_t tail = atomic_load(&C.tail);
    if (head - tail > CONTROL_QUEUE_SLOTS) {
        tail = head - CONTROL_QUEUE_SLOTS; /* the oldest were overwritten */
    }
    if (tail == head) {
        return 0;
    }
    queue_slot *slot = &C.slots[tail % CONTROL_QUEUE_SLOTS];
    int command = atomic_exchange(&slot->command, CONTROL_NONE);
    if (command == CONTROL_NONE) {
        return 0; /* claimed by a handler that has not finished writing it: taken next time */
    }
    out->command = command;
    out->wall_ns = atomic_load(&slot->wall_ns);
    out->main_cpu_ns = atomic_load(&slot->main_cpu_ns);
    atomic_store(&C.tail, tail + 1);
    return 1;
}

void control_apply(int command)
{
    if (command == CONTROL_OFF || command == CONTROL_ON) {
        apply(command);
        write_state_file(command);
    }
}

int control_send(int pid, int command)
{
    union sigval value;
    value.sival_int = command;
    return sigqueue((pid_t)pid, control_signal_number(), value);
}
