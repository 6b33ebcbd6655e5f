/* wake: the sampler thread's sleep.  A wait ends at its deadline when nothing
 * posts, and at once when a signal handler posts (a command from outside, a
 * termination signal), posted before the wait or during it; posts that pile up
 * end one wait, not every later one. */
#include "unit.h"
#include "common/wake.h"
#include "control/control.h"
#include "common/clock.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MS 1000000ULL

static void wake_wait_lasts_until_its_deadline(void)
{
    REQUIRE(wake_prepare() == 0);
    uint64_t start = clock_wall_ns();
    CHECK_EQ(wake_wait_until(start + 30 * MS), 0);
    uint64_t took = clock_wall_ns() - start;
    CHECK(took >= 30 * MS);
    CHECK_EQ(wake_wait_until(start), 0); /* a deadline passed: at once */
}

static void wake_posts_pile_into_one(void)
{
    REQUIRE(wake_prepare() == 0);
    for (int i = 0; i < 5; i++) {
        wake_post();
    }
    uint64_t start = clock_wall_ns();
    CHECK_EQ(wake_wait_until(start + 10 * 1000 * MS), 1);
    CHECK(clock_wall_ns() - start < 1000 * MS);
    CHECK_EQ(wake_wait_until(clock_wall_ns() + 20 * MS), 0); /* the others went with the first */
    wake_post();
    REQUIRE(wake_prepare() == 0); /* a new sampler starts without posts from before */
    CHECK_EQ(wake_wait_until(clock_wall_ns() + 20 * MS), 0);
}

/* A thread that sends this process a command, as `pyrometer --on --pid` does,
 * while the main thread sleeps: the control signal's handler posts. */
static void *send_later(void *unused)
{
    (void)unused;
    struct timespec pause = {0, 50 * (long)MS};
    nanosleep(&pause, NULL);
    control_send((int)getpid(), CONTROL_ON);
    return NULL;
}

static void wake_a_command_ends_the_sleep(void)
{
    REQUIRE(control_begin(0, NULL) == 0); /* installs the handler */
    REQUIRE(wake_prepare() == 0);
    /* The signal must reach a thread that can take it: this one waits, the
     * sender blocks it. */
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, control_signal_number());
    pthread_t sender;
    pthread_sigmask(SIG_BLOCK, &set, &old);
    REQUIRE(pthread_create(&sender, NULL, send_later, NULL) == 0);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    uint64_t start = clock_wall_ns();
    int woken = 0;
    /* The handler interrupts the wait (EINTR, waited again) and posts. */
    while (!woken && clock_wall_ns() - start < 10 * 1000 * MS) {
        woken = wake_wait_until(start + 10 * 1000 * MS);
    }
    uint64_t took = clock_wall_ns() - start;
    pthread_join(sender, NULL);
    CHECK(woken);
    CHECK(took >= 40 * MS && took < 5000 * MS);
    CHECK(control_pending());
    control_received r;
    while (control_take(&r)) {
        control_apply(r.command);
    }
}

const unit_test wake_tests[] = {
    UNIT_TEST(wake_wait_lasts_until_its_deadline),
    UNIT_TEST(wake_posts_pile_into_one),
    UNIT_TEST(wake_a_command_ends_the_sleep),
    {NULL, NULL, NULL},
};
