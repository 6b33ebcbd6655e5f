/* control: whether the program is profiled right now (pause and resume).
 * The measuring core's side; src/pyrometer/core/control.py is the program's
 * (pyrometer.start()/stop()), which calls in here.
 *
 * Two things decide it, both changed only with the GIL held:
 *  - the program's own count (pyrometer.start() adds one, pyrometer.stop() takes
 *    one, never below zero): a run starts with 1, or 0 with --off;
 *  - a hold from outside (`pyrometer --off --pid N`), which keeps the program
 *    paused whatever its count says until `pyrometer --on --pid N`, which lifts
 *    the hold and raises a count of zero to one.
 * The program is profiled while its count is above zero and no hold is on.
 *
 * Commands from outside arrive as CONTROL_SIGNAL sent with sigqueue, whose value
 * says which (CONTROL_OFF, CONTROL_ON).  The handler only records the command
 * and when it came (the wall clock and the main thread's CPU clock), in a small
 * queue; the sampler makes them take effect (sampler.c) at those times, once
 * the GIL can be had, so that the handler stays async-signal-safe and the
 * accounting happens where the GIL is held.  The times matter: a main thread in
 * a long native call that holds the GIL gives it up only when the call returns,
 * and a pause and resume sent meanwhile still land where they were sent.
 *
 * The sampler owns the transitions (what is charged up to a pause, where the
 * windows restart after it) and publishes the outcome in the floor
 * (common/paused.h), where the collectors read it.
 */
#ifndef PYROMETER_CONTROL_H
#define PYROMETER_CONTROL_H

#include <stdint.h>
#include <sys/types.h>

enum control_command { CONTROL_NONE = 0, CONTROL_OFF = 1, CONTROL_ON = 2 };

/* The real-time signal that carries commands (see control.c for the choice). */
int control_signal_number(void);

/* GIL held, at the start of profiling in this process.  start_off: 1 to start
 * with a count of 0 (--off), 0 for a count of 1, -1 to keep the state this
 * process has (a forked child keeps its parent's).  state_file: where a command
 * from outside is recorded for processes that start later in the same run (they
 * pass the same path and start in the state it holds), or NULL.  Installs the
 * signal handler once per process; it is never removed (a command arriving
 * after the run must not kill the process, which a real-time signal's default
 * would).  0, or -1 with errno set. */
int control_begin(int start_off, const char *state_file);

/* GIL held: the program's own calls.  Return the new count. */
int control_count_up(void);
int control_count_down(void);
/* GIL held: whether the program is to be profiled now (count > 0, no hold). */
int control_wanted(void);

/* A command as received: which, and when. */
typedef struct {
    int command;
    uint64_t wall_ns;     /* monotonic clock (clock.h) */
    uint64_t main_cpu_ns; /* the main thread's CPU clock then; CLOCK_UNAVAILABLE: unknown */
} control_received;

/* The main thread's kernel id, whose CPU clock the handler reads (0: none). */
void control_set_main_thread(pid_t tid);
/* Any thread: a command from outside was received and not yet taken. */
int control_pending(void);
/* GIL held (one taker at a time): the oldest command not yet taken, in order of
 * arrival; 0 when there is none. */
int control_take(control_received *out);
/* GIL held: acts on a command (holds, or lifts the hold) and records it in the
 * state file. */
void control_apply(int command);

/* Signal-safe: records a command as the handler does (for tests and the API's
 * own use). */
void control_command_received(int command);
/* Sends a command to pid with sigqueue; 0, or -1 with errno set. */
int control_send(int pid, int command);

#endif
