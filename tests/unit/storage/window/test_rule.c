/* test_rule.c: the window's eviction rule (by age, then by size) and its passes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "storage/window/rule.h"

static void test_judge_age_then_size(void **state)
{
    (void)state;
    window_pass_t p = {.older_than_ms = 1000, .max_keys = 10, .max_steps = 1};
    /* Older than the bound: by age, whatever the count. */
    assert_int_equal(window_judge(&p, 999, 1), WINDOW_AGE);
    assert_int_equal(window_judge(&p, 999, 100), WINDOW_AGE);
    /* At the bound it stays by age; then the size bound decides, strictly above max_keys. */
    assert_int_equal(window_judge(&p, 1000, 11), WINDOW_SIZE);
    assert_int_equal(window_judge(&p, 1000, 10), WINDOW_KEEP);
    assert_int_equal(window_judge(&p, 5000, 11), WINDOW_SIZE);
    /* No size bound. */
    p.max_keys = 0;
    assert_int_equal(window_judge(&p, 5000, UINT64_MAX), WINDOW_KEEP);
    /* No age bound. */
    p = (window_pass_t){.older_than_ms = INT64_MIN, .max_keys = 2, .max_steps = 1};
    assert_int_equal(window_judge(&p, INT64_MIN, 2), WINDOW_KEEP);
    assert_int_equal(window_judge(&p, INT64_MIN, 3), WINDOW_SIZE);
}

static void test_batch_passes(void **state)
{
    (void)state;
    window_policy_t w = {.window_ms = 60000, .max_keys = 100};
    window_pass_t before = window_before_batch(&w, 1000000, 10);
    assert_int_equal(before.older_than_ms, 1000000 - 60000);
    assert_int_equal(before.max_keys, 0); /* age only before the inserts */
    assert_int_equal(before.max_steps, WINDOW_MIN_STEPS);
    window_pass_t after = window_after_batch(&w, 5000);
    assert_true(after.older_than_ms == INT64_MIN); /* size only after them */
    assert_int_equal(after.max_keys, 100);
    assert_int_equal(after.max_steps, 10000); /* twice the batch past the minimum */
    w.max_keys = 0;
    assert_int_equal(window_after_batch(&w, 5000).max_steps, 0);
}

static void test_replay_pass(void **state)
{
    (void)state;
    window_policy_t w = {.window_ms = 500, .max_keys = 7};
    window_pass_t p = window_replay_record(&w, 2000);
    assert_int_equal(p.older_than_ms, 1500); /* the record's own time */
    assert_int_equal(p.max_keys, 7);
    assert_int_equal(p.max_steps, WINDOW_REPLAY_STEPS);
    assert_true(WINDOW_REPLAY_STEPS > 1); /* more than the one key a record adds */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_judge_age_then_size),
        cmocka_unit_test(test_batch_passes),
        cmocka_unit_test(test_replay_pass),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
