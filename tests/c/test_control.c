/* control: the pause rule (a count the program moves, a hold from outside), the
 * state file later processes of a run read, and the signal that carries
 * commands: sent with a value it is recorded, sent without one it is ignored,
 * and the process survives both (a real-time signal's default kills). */
#include "unit.h"
#include "common/paused.h"
#include "control/control.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* What the sampler does with a command: takes it, then acts on it. */
static int take_and_apply(void)
{
    control_received received;
    int taken = 0;
    while (control_take(&received)) {
        control_apply(received.command);
        taken++;
    }
    return taken;
}

/* Waits (a little) for a signal sent to this process to be delivered. */
static void let_signals_arrive(void)
{
    for (int i = 0; i < 100 && !control_pending(); i++) {
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
}

static void control_count_decides(void)
{
    REQUIRE(control_begin(0, NULL) == 0);
    CHECK(control_wanted());
    CHECK_EQ(control_count_down(), 0);
    CHECK(!control_wanted());
    CHECK_EQ(control_count_down(), 0); /* never below zero */
    CHECK_EQ(control_count_up(), 1);
    CHECK(control_wanted());
    CHECK_EQ(control_count_up(), 2); /* nested */
    CHECK_EQ(control_count_down(), 1);
    CHECK(control_wanted());
    REQUIRE(control_begin(1, NULL) == 0); /* --off */
    CHECK(!control_wanted());
    CHECK_EQ(control_count_up(), 1);
    CHECK(control_wanted());
}

static void control_hold_wins_until_lifted(void)
{
    REQUIRE(control_begin(0, NULL) == 0);
    control_command_received(CONTROL_OFF);
    CHECK(control_pending());
    CHECK(take_and_apply() == 1);
    CHECK(!control_pending());
    CHECK(!control_wanted());
    CHECK_EQ(control_count_up(), 2); /* the program's own start() does not lift it */
    CHECK(!control_wanted());
    control_command_received(CONTROL_ON);
    CHECK(take_and_apply() == 1);
    CHECK(control_wanted());
    CHECK(take_and_apply() == 0);
    /* --on raises a count of zero to one. */
    REQUIRE(control_begin(1, NULL) == 0);
    control_command_received(CONTROL_ON);
    take_and_apply();
    CHECK(control_wanted());
    /* Anything else is no command. */
    control_command_received(7);
    CHECK(!control_pending());
}

static void control_state_file_reaches_later_processes(void)
{
    char dir[] = "/tmp/pyrometer-control-XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    char path[64];
    snprintf(path, sizeof path, "%s/control", dir);
    REQUIRE(control_begin(0, path) == 0);
    CHECK(control_wanted()); /* no file yet: as the run started */
    control_command_received(CONTROL_OFF);
    take_and_apply();
    /* A process starting later in the run starts held, --off or not... */
    REQUIRE(control_begin(0, path) == 0);
    CHECK(!control_wanted());
    control_command_received(CONTROL_ON);
    take_and_apply();
    /* ...and after --on, profiled, even under --off. */
    REQUIRE(control_begin(1, path) == 0);
    CHECK(control_wanted());
    /* A fork keeps its parent's state and acts on the command it inherited. */
    control_command_received(CONTROL_OFF);
    REQUIRE(control_begin(-1, NULL) == 0);
    CHECK(!control_pending());
    CHECK(!control_wanted());
    unlink(path);
    CHECK(rmdir(dir) == 0); /* no temporary file left behind */
}

static void control_signal_carries_commands(void)
{
    REQUIRE(control_begin(0, NULL) == 0);
    /* Installed: the process catches the signal now. */
    struct sigaction now;
    REQUIRE(sigaction(control_signal_number(), NULL, &now) == 0);
    CHECK((now.sa_flags & SA_SIGINFO) != 0 && now.sa_sigaction != NULL);
    CHECK(control_signal_number() > SIGRTMIN && control_signal_number() < SIGRTMAX);

    REQUIRE(control_send(getpid(), CONTROL_OFF) == 0);
    let_signals_arrive();
    CHECK(take_and_apply() == 1);
    CHECK(!control_wanted());
    REQUIRE(control_send(getpid(), CONTROL_ON) == 0);
    let_signals_arrive();
    CHECK(take_and_apply() == 1);
    CHECK(control_wanted());

    /* A plain kill carries no value: ignored, and the process lives on. */
    REQUIRE(kill(getpid(), control_signal_number()) == 0);
    let_signals_arrive();
    CHECK(!control_pending());
    CHECK(control_wanted());
}

/* Commands are taken in the order they came, each with its time: a pause and a
 * resume sent while nobody could take them (a main thread in one long native
 * call) both take effect, where they were sent. */
static void control_commands_queue_in_order(void)
{
    REQUIRE(control_begin(0, NULL) == 0);
    control_set_main_thread(gettid());
    control_command_received(CONTROL_OFF);
    control_command_received(CONTROL_ON);
    control_received first, second, none;
    REQUIRE(control_take(&first) && control_take(&second));
    CHECK(!control_take(&none));
    CHECK_EQ(first.command, CONTROL_OFF);
    CHECK_EQ(second.command, CONTROL_ON);
    CHECK(first.wall_ns <= second.wall_ns);
    CHECK(first.main_cpu_ns != UINT64_MAX && first.main_cpu_ns <= second.main_cpu_ns);
    /* More than the queue holds: the oldest are lost, the latest kept in order. */
    for (int i = 0; i < 40; i++) {
        control_command_received(i % 2 ? CONTROL_ON : CONTROL_OFF);
    }
    int taken = 0, last = CONTROL_NONE;
    control_received r;
    while (control_take(&r)) {
        taken++;
        last = r.command;
    }
    CHECK(taken > 0 && taken <= 16);
    CHECK_EQ(last, CONTROL_ON);
    control_set_main_thread(0);
}

static void paused_flag(void)
{
    paused_set(1);
    CHECK(paused_now());
    paused_set(0);
    CHECK(!paused_now());
}

const unit_test control_tests[] = {
    UNIT_TEST(control_count_decides),
    UNIT_TEST(control_hold_wins_until_lifted),
    UNIT_TEST(control_state_file_reaches_later_processes),
    UNIT_TEST(control_signal_carries_commands),
    UNIT_TEST(control_commands_queue_in_order),
    UNIT_TEST(paused_flag),
    {NULL, NULL, NULL},
};
