/* line_timeline: the ring of (time, line) the GPU side reads.  Reads return the
 * entries from a time on, with the one just before, oldest first; a lapped ring
 * gives only whole, unbroken entries; a reader racing the writer never sees a
 * torn entry (each entry here carries its time in its site and line too). */
#include "unit.h"
#include "profile/line_timeline.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

static void test_line_timeline_empty(void)
{
    line_timeline_clear();
    line_timeline_entry e[4];
    CHECK(line_timeline_read(0, e, 4) == 0);
    CHECK(line_timeline_latest(e) == 0);
}

static void test_line_timeline_read_from(void)
{
    line_timeline_clear();
    for (uint64_t t = 100; t <= 1000; t += 100) {
        line_timeline_note(t, (uint32_t)t, (int32_t)(t / 100), (uint32_t)(t / 10));
    }
    line_timeline_entry e[16];
    size_t n = line_timeline_read(350, e, 16);
    REQUIRE(n == 8);
    CHECK(e[0].t_ns == 300); /* the one before: it opens the first interval */
    CHECK(e[1].t_ns == 400 && e[1].site == 400 && e[1].lineno == 4 && e[1].stack == 40);
    CHECK(e[7].t_ns == 1000);
    CHECK(line_timeline_read(350, e, 2) == 2 && e[0].t_ns == 300 && e[1].t_ns == 400);
    CHECK(line_timeline_read(5000, e, 16) == 1 && e[0].t_ns == 1000);
    CHECK(line_timeline_latest(e) == 1 && e[0].t_ns == 1000 && e[0].lineno == 10);
    line_timeline_note(0, 1, 1, 1); /* time 0 is refused (it marks a slot being written) */
    CHECK(line_timeline_latest(e) == 1 && e[0].t_ns == 1000);
}

static void test_line_timeline_lapped(void)
{
    line_timeline_clear();
    uint64_t last = 3 * LINE_TIMELINE_SLOTS + 17;
    for (uint64_t t = 1; t <= last; t++) {
        line_timeline_note(t, (uint32_t)t, 0, 0);
    }
    static line_timeline_entry e[LINE_TIMELINE_SLOTS];
    size_t n = line_timeline_read(1, e, LINE_TIMELINE_SLOTS);
    REQUIRE(n > LINE_TIMELINE_SLOTS / 2 && n < LINE_TIMELINE_SLOTS);
    CHECK(e[n - 1].t_ns == last);
    for (size_t i = 1; i < n; i++) {
        CHECK(e[i].t_ns == e[i - 1].t_ns + 1);
    }
}

static atomic_int writing;
static atomic_ulong reads_done;

/* Writes until the reader has read a while: under valgrind, which runs one
 * thread at a time, a fixed count could all be written before the reader ran. */
static void *writer(void *unused)
{
    (void)unused;
    for (uint64_t t = 1;; t++) {
        line_timeline_note(t, (uint32_t)(t * 2654435761u), (int32_t)(t & 0x7fffffff), (uint32_t)t);
        if (t >= 300000 && atomic_load(&reads_done) >= 100) {
            break;
        }
    }
    atomic_store(&writing, 0);
    return NULL;
}

static void test_line_timeline_concurrent_reader(void)
{
    line_timeline_clear();
    atomic_store(&reads_done, 0);
    atomic_store(&writing, 1);
    pthread_t thread;
    REQUIRE(pthread_create(&thread, NULL, writer, NULL) == 0);
    static line_timeline_entry e[LINE_TIMELINE_SLOTS];
    unsigned long reads = 0, torn = 0, disorder = 0;
    while (atomic_load(&writing)) {
        line_timeline_entry latest;
        if (!line_timeline_latest(&latest)) {
            continue;
        }
        uint64_t from = latest.t_ns > 500 ? latest.t_ns - 500 : 0;
        size_t n = line_timeline_read(from, e, LINE_TIMELINE_SLOTS);
        for (size_t i = 0; i < n; i++) {
            torn += e[i].site != (uint32_t)(e[i].t_ns * 2654435761u) ||
                    e[i].lineno != (int32_t)(e[i].t_ns & 0x7fffffff) || e[i].stack != (uint32_t)e[i].t_ns;
            disorder += i > 0 && e[i].t_ns != e[i - 1].t_ns + 1;
        }
        reads++;
        atomic_store(&reads_done, reads);
    }
    pthread_join(thread, NULL);
    CHECK(reads > 0);
    CHECK(torn == 0);
    CHECK(disorder == 0);
}

const unit_test line_timeline_tests[] = {
    UNIT_TEST(test_line_timeline_empty),
    UNIT_TEST(test_line_timeline_read_from),
    UNIT_TEST(test_line_timeline_lapped),
    UNIT_TEST(test_line_timeline_concurrent_reader),
    {NULL, NULL, NULL},
};
