/* test_check.c: check_run (`ingestd check`) on data dirs the group commit left half-done. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "storage/commit/commit_fixture.h"
#include "storage/tools/check.h"
#include "storage/tools/report_lines.h"

typedef tu_fixture_t fx_t;

/*
 * A checkpoint's evictions cut short at close (cf_evictions_cut_short): `check` calls that an
 * eviction in progress, not a problem; once the next open has finished it, it says nothing of
 * it and counts exactly max_keys keys.
 */
static void test_check_evictions_in_progress(void **state)
{
    fx_t *fx = *state;
    commit_options_t o;
    check_result_t res;
    lines_t lines = {.len = 0};
    check_options_t co = {.data_dir = fx->dir, .report = collect_line, .arg = &lines};

    cf_evictions_cut_short(fx, &o);
    assert_int_equal(check_run(&co, &res), TOOLS_OK);
    assert_int_equal(res.problems, 0);
    assert_non_null(strstr(lines.text, "evictions still being written"));

    commit_close(cf_open(&o));
    lines_clear(&lines);
    assert_int_equal(check_run(&co, &res), TOOLS_OK);
    assert_null(strstr(lines.text, "evictions still being written"));
    assert_int_equal(res.keys, 5000);
}

/* A log that starts past the store's applied offset (cf_log_gap) is a problem, and says where. */
static void test_check_log_gap(void **state)
{
    fx_t *fx = *state;
    commit_options_t o;
    lines_t lines = {0};
    check_result_t res;
    check_options_t co = {.data_dir = fx->dir, .report = collect_line, .arg = &lines};

    cf_log_gap(fx, &o);
    assert_int_equal(check_run(&co, &res), TOOLS_PROBLEMS);
    assert_true(res.problems > 0);
    assert_non_null(strstr(lines.text, "applied only up to 300"));
}

#define T(f) cmocka_unit_test_setup_teardown(f, cf_setup, cf_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_check_evictions_in_progress),
        T(test_check_log_gap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
