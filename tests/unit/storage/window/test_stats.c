/* test_stats.c: the window's stats rendered for /metrics (one head, a sample per window with
 * its labels) and for /stats (the dedupe object's fields). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "storage/window/stats.h"

static size_t count(const char *text, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void test_prom_one_head_a_sample_per_window(void **state)
{
    (void)state;
    window_stats_t s[2] = {{.window_ms = 60000, .keys = 5, .evicted_age = 1, .seals = 2},
                           {.window_ms = 60000, .keys = 7, .evicted_size = 3, .merges = 4}};
    const char *labels[] = {"partition=\"0\"", "partition=\"1\""};
    prom_t *p = prom_new("ingestd_");
    assert_non_null(p);
    window_stats_prom(p, s, labels, 2, 0);
    char *t = prom_take(p, NULL);
    assert_non_null(t);
    assert_int_equal(count(t, "# TYPE ingestd_dedupe_keys gauge"), 1);
    assert_non_null(strstr(t, "ingestd_dedupe_keys{partition=\"0\"} 5\n"));
    assert_non_null(strstr(t, "ingestd_dedupe_keys{partition=\"1\"} 7\n"));
    assert_non_null(strstr(t, "ingestd_dedupe_window_seconds{partition=\"1\"} 60\n"));
    assert_non_null(strstr(t, "ingestd_dedupe_evicted_total{partition=\"0\",reason=\"age\"} 1\n"));
    assert_non_null(strstr(t, "ingestd_dedupe_evicted_total{partition=\"1\",reason=\"size\"} 3\n"));
    assert_non_null(strstr(t, "ingestd_seals_total{partition=\"0\"} 2\n"));
    assert_non_null(strstr(t, "ingestd_generation_merges_total{partition=\"1\"} 4\n"));
    assert_int_equal(count(t, "# TYPE ingestd_recovery_generation_files_cleaned_total counter"), 1);
    free(t);
}

static void test_prom_without_labels(void **state)
{
    (void)state;
    window_stats_t s = {.keys = 3, .evicted_age = 2, .floor_ms = 5000, .below_floor = true};
    const char *none[] = {""};
    prom_t *p = prom_new("ingestd_");
    window_stats_prom(p, &s, none, 1, 0);
    char *t = prom_take(p, NULL);
    assert_non_null(t);
    assert_non_null(strstr(t, "\ningestd_dedupe_keys 3\n"));
    assert_non_null(strstr(t, "ingestd_dedupe_evicted_total{reason=\"age\"} 2\n"));
    assert_non_null(strstr(t, "ingestd_dedupe_window_floor_seconds 5\n"));
    assert_non_null(strstr(t, "ingestd_dedupe_window_below_floor 1\n"));
    free(t);
}

static void test_json_and_effective_window(void **state)
{
    (void)state;
    window_stats_t s = {.window_ms = 3600000,
                        .max_keys = 10,
                        .keys = 4,
                        .oldest_received_ms = 1000,
                        .generations = 2,
                        .generation_keys = 3,
                        .seals = 2};
    assert_int_equal(window_stats_effective_s(&s, 11000), 10);
    json_t *j = window_stats_json(&s, 11000);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "window_seconds")), 3600);
    assert_int_equal(json_integer_value(json_object_get(j, "effective_window_seconds")), 10);
    assert_int_equal(json_integer_value(json_object_get(j, "keys")), 4);
    assert_int_equal(json_integer_value(json_object_get(j, "max_keys")), 10);
    json_t *g = json_object_get(j, "generations");
    assert_int_equal(json_integer_value(json_object_get(g, "count")), 2);
    assert_int_equal(json_integer_value(json_object_get(g, "keys")), 3);
    assert_int_equal(json_integer_value(json_object_get(g, "seals")), 2);
    assert_true(json_is_false(json_object_get(j, "window_below_floor")));
    json_decref(j);
    s.keys = 0; /* an empty window reaches nowhere */
    assert_int_equal(window_stats_effective_s(&s, 11000), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prom_one_head_a_sample_per_window),
        cmocka_unit_test(test_prom_without_labels),
        cmocka_unit_test(test_json_and_effective_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
