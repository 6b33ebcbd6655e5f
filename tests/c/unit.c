/* The test runner: every suite, in order, with a line per test and a summary.
 *
 *   test_units                  every ordinary test
 *   test_units -k SUBSTRING     the ordinary tests whose name contains SUBSTRING
 *   test_units --known-bug NAME one known-bug test (exit 1 while the bug is there)
 *   test_units --list-known-bugs
 */
#include "unit.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Each test binary lists its suites (suites.c for the core pieces, the memhooks
 * test for the preloaded library, which needs a process of its own). */
extern const unit_test *const unit_suites[];
/* Run once before the tests, where the binary defines it (suites.c). */
extern void unit_setup(void) __attribute__((weak));

/* A check inside a loop can fail thousands of times; the first few say enough. */
#define MESSAGES_PER_TEST 10

static const char *current_test;
static long failures_in_test;

void unit_fail(const char *file, int line, const char *fmt, ...)
{
    if (failures_in_test++ >= MESSAGES_PER_TEST) {
        return;
    }
    printf("  %s:%d: %s: check failed: ", file, line, current_test);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
}

static int run_one(const unit_test *t)
{
    current_test = t->name;
    failures_in_test = 0;
    t->run();
    if (failures_in_test > MESSAGES_PER_TEST) {
        printf("  %s: ... %ld failed checks in all\n", t->name, failures_in_test);
    }
    printf("%s %s\n", failures_in_test ? "FAIL" : "ok  ", t->name);
    return failures_in_test == 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: test_units [-k SUBSTRING | --known-bug NAME | --list-known-bugs]\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *substring = NULL, *known_bug = NULL;
    int list_known_bugs = 0;
    if (argc == 3 && strcmp(argv[1], "-k") == 0) {
        substring = argv[2];
    } else if (argc == 3 && strcmp(argv[1], "--known-bug") == 0) {
        known_bug = argv[2];
    } else if (argc == 2 && strcmp(argv[1], "--list-known-bugs") == 0) {
        list_known_bugs = 1;
    } else if (argc != 1) {
        return usage();
    }
    /* Line-buffered so that a sanitizer report (stderr) lands after the test that caused it. */
    setvbuf(stdout, NULL, _IOLBF, 0);

    if (unit_setup != NULL) {
        unit_setup();
    }
    int passed = 0, failed = 0, skipped = 0;
    for (const unit_test *const *suite = unit_suites; *suite != NULL; suite++) {
        for (const unit_test *t = *suite; t->name != NULL; t++) {
            if (list_known_bugs) {
                if (t->known_bug != NULL) {
                    printf("%s\n", t->name);
                }
                continue;
            }
            if (known_bug != NULL) {
                if (t->known_bug == NULL || strcmp(t->name, known_bug) != 0) {
                    continue;
                }
                printf("known bug: %s\n", t->known_bug);
            } else if (t->known_bug != NULL) {
                printf("skip %s (known bug: %s)\n", t->name, t->known_bug);
                skipped++;
                continue;
            } else if (substring != NULL && strstr(t->name, substring) == NULL) {
                continue;
            }
            if (run_one(t)) {
                passed++;
            } else {
                failed++;
            }
        }
    }
    if (list_known_bugs) {
        return 0;
    }
    printf("%d passed, %d failed, %d known bugs skipped\n", passed, failed, skipped);
    if (passed + failed == 0) {
        fprintf(stderr, "test_units: no test matched\n");
        return 2;
    }
    return failed ? 1 : 0;
}
