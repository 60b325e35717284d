/* test_rebuild.c: rebuild_run (`ingestd rebuild`) replaying a log into the window's settings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "storage/commit/commit_fixture.h"
#include "storage/tools/rebuild.h"

typedef tu_fixture_t fx_t;

/*
 * --max-keys per source (cf_budget_per_source): rebuilt from the log, the replay's own eviction
 * carries the other source's keys as serving did, so calm keeps all its keys and flood its
 * newest 100.
 */
static void test_rebuild_budget_per_source(void **state)
{
    fx_t *fx = *state;
    commit_options_t o;
    int64_t now = tu_now_ms();

    cf_budget_per_source(fx, &o, now);
    cf_expect_log_records(fx, 260); /* replayed through a window of 100 keys per source */
    rebuild_options_t ro = {.data_dir = fx->dir, .window = {o.window_ms, o.max_keys, o.young_keys}};
    assert_int_equal(rebuild_run(&ro), TOOLS_OK);
    commit_t *c = cf_open(&o);
    cf_submit_from(c, "calm", 0, 100, now, COMMIT_DUPLICATE);
    cf_submit_from(c, "flood", 1060, 90, now, COMMIT_DUPLICATE); /* its newest 100 */
    cf_submit_from(c, "flood", 1000, 10, now, COMMIT_DUPLICATE);
    assert_int_equal(cf_source_stats(c, "flood").keys, 100);
    commit_close(c);
}

#define T(f) cmocka_unit_test_setup_teardown(f, cf_setup, cf_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_rebuild_budget_per_source),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
