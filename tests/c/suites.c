/* The suites of test_units, the binary for the pure-C pieces, in the order they run. */
#include "unit.h"
#include "common/arena.h"

#include <stddef.h>

extern const unit_test arena_tests[];
extern const unit_test table_tests[];
extern const unit_test filter_tests[];
extern const unit_test clock_tests[];
extern const unit_test pymalloc_map_tests[];
extern const unit_test line_timeline_tests[];
extern const unit_test control_tests[];
extern const unit_test stack_table_tests[];
extern const unit_test wake_tests[];

const unit_test *const unit_suites[] = {arena_tests, table_tests, filter_tests, clock_tests, pymalloc_map_tests,
                                     line_timeline_tests, control_tests, stack_table_tests, wake_tests,
                                     NULL};

/* The tests count live mappings to see leaks: regions given back are unmapped,
 * not kept (test_arena.c's region_kept_for_the_next_map keeps them itself). */
void unit_setup(void)
{
    region_keep(0);
}
