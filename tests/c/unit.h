/* unit: the smallest test harness that does the job.
 *
 * No dependencies, so the tests build wherever gcc does and run unchanged under
 * AddressSanitizer, UndefinedBehaviorSanitizer and valgrind.  A CHECK records a
 * failure and lets the test go on (one run shows every broken expectation); a
 * REQUIRE returns from the test, for when going on would only crash.
 *
 * Each test file defines one suite: a table of unit_test ending with {NULL}.
 * A test that shows a bug nobody has fixed yet is listed with UNIT_KNOWN_BUG:
 * the normal run skips it, `--known-bug NAME` runs it (and fails until the fix).
 */
#ifndef PYROMETER_UNIT_H
#define PYROMETER_UNIT_H

#include <stdint.h>

typedef struct {
    const char *name;
    void (*run)(void);
    const char *known_bug; /* what is wrong, or NULL for an ordinary test */
} unit_test;

#define UNIT_TEST(fn) {#fn, fn, NULL}
#define UNIT_KNOWN_BUG(fn, why) {#fn, fn, why}

void unit_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            unit_fail(__FILE__, __LINE__, "%s", #cond);                                 \
        }                                                                               \
    } while (0)

#define REQUIRE(cond)                                                                   \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            unit_fail(__FILE__, __LINE__, "%s (required; test stops)", #cond);          \
            return;                                                                     \
        }                                                                               \
    } while (0)

#define CHECK_EQ(a, b)                                                                  \
    do {                                                                                \
        uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                                \
        if (a_ != b_) {                                                                 \
            unit_fail(__FILE__, __LINE__, "%s == %s (%llu != %llu)", #a, #b,            \
                      (unsigned long long)a_, (unsigned long long)b_);                  \
        }                                                                               \
    } while (0)

#endif
