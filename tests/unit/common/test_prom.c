/* common/test_prom.c: the Prometheus text writer (common/prom.c), byte for byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/prom.h"

static void test_histogram_exact_text(void **state)
{
    (void)state;
    static const double bounds[] = {0.0001, 0.5, 1, 2.5};
    static const uint64_t counts[] = {1, 2, 0, 3, 4}; /* per bucket; the last is +Inf */
    prom_t *p = prom_new("ingestd_");
    assert_non_null(p);
    prom_head(p, "fsync_duration_seconds", PROM_HISTOGRAM, "Duration of each fsync of the log.");
    prom_histogram(p, "fsync_duration_seconds", NULL, bounds, counts, 4, 12.25);
    prom_histogram(p, "fsync_duration_seconds", "route=\"/v1/batch\",status=\"2xx\"", bounds,
                   counts, 4, 0.1);
    size_t len = 0;
    char *t = prom_take(p, &len);
    assert_non_null(t);
    assert_string_equal(
        t,
        "# HELP ingestd_fsync_duration_seconds Duration of each fsync of the log.\n"
        "# TYPE ingestd_fsync_duration_seconds histogram\n"
        "ingestd_fsync_duration_seconds_bucket{le=\"0.0001\"} 1\n"
        "ingestd_fsync_duration_seconds_bucket{le=\"0.5\"} 3\n"
        "ingestd_fsync_duration_seconds_bucket{le=\"1\"} 3\n"
        "ingestd_fsync_duration_seconds_bucket{le=\"2.5\"} 6\n"
        "ingestd_fsync_duration_seconds_bucket{le=\"+Inf\"} 10\n"
        "ingestd_fsync_duration_seconds_sum 12.25\n"
        "ingestd_fsync_duration_seconds_count 10\n"
        "ingestd_fsync_duration_seconds_bucket{route=\"/v1/batch\",status=\"2xx\",le=\"0.0001\"} "
        "1\n"
        "ingestd_fsync_duration_seconds_bucket{route=\"/v1/batch\",status=\"2xx\",le=\"0.5\"} 3\n"
        "ingestd_fsync_duration_seconds_bucket{route=\"/v1/batch\",status=\"2xx\",le=\"1\"} 3\n"
        "ingestd_fsync_duration_seconds_bucket{route=\"/v1/batch\",status=\"2xx\",le=\"2.5\"} 6\n"
        "ingestd_fsync_duration_seconds_bucket{route=\"/v1/batch\",status=\"2xx\",le=\"+Inf\"} 10\n"
        "ingestd_fsync_duration_seconds_sum{route=\"/v1/batch\",status=\"2xx\"} 0.1\n"
        "ingestd_fsync_duration_seconds_count{route=\"/v1/batch\",status=\"2xx\"} 10\n");
    assert_int_equal(len, strlen(t));
    free(t);
}

static void test_labelled_counter_exact_text(void **state)
{
    (void)state;
    char lb[64] = "";
    prom_t *p = prom_new("ingestd_");
    assert_non_null(p);
    prom_head(p, "edge_events_total", PROM_COUNTER, "Events of the edge by outcome.");
    assert_int_equal(prom_label(lb, sizeof(lb), "outcome", "delivered"), 0);
    prom_sample_u64(p, "edge_events_total", lb, UINT64_MAX);
    lb[0] = '\0';
    assert_int_equal(prom_label(lb, sizeof(lb), "outcome", "failed"), 0);
    prom_sample_u64(p, "edge_events_total", lb, 0);
    prom_head(p, "worker_partition_lag", PROM_GAUGE, "High watermark minus applied offset.");
    prom_sample_i64(p, "worker_partition_lag", "partition=\"3\"", -1);
    prom_counter(p, "fsyncs_total", "Log fsyncs.", 42);
    prom_gauge(p, "fsync_seconds_max", "Longest fsync.", 0.003);
    char *t = prom_take(p, NULL);
    assert_non_null(t);
    assert_string_equal(t,
                        "# HELP ingestd_edge_events_total Events of the edge by outcome.\n"
                        "# TYPE ingestd_edge_events_total counter\n"
                        "ingestd_edge_events_total{outcome=\"delivered\"} 18446744073709551615\n"
                        "ingestd_edge_events_total{outcome=\"failed\"} 0\n"
                        "# HELP ingestd_worker_partition_lag High watermark minus applied offset.\n"
                        "# TYPE ingestd_worker_partition_lag gauge\n"
                        "ingestd_worker_partition_lag{partition=\"3\"} -1\n"
                        "# HELP ingestd_fsyncs_total Log fsyncs.\n"
                        "# TYPE ingestd_fsyncs_total counter\n"
                        "ingestd_fsyncs_total 42\n"
                        "# HELP ingestd_fsync_seconds_max Longest fsync.\n"
                        "# TYPE ingestd_fsync_seconds_max gauge\n"
                        "ingestd_fsync_seconds_max 0.003\n");
    free(t);
}

/* Doubles read back as the same double, in their shortest form; NaN and infinities by name. */
static void test_values(void **state)
{
    (void)state;
    prom_t *p = prom_new(NULL);
    assert_non_null(p);
    prom_sample(p, "a", NULL, 9007199254740992.0); /* 2^53: still an integer */
    prom_sample(p, "b", NULL, 1700000000.123);
    prom_sample(p, "c", NULL, 0.1 + 0.2); /* needs all 17 digits to read back */
    prom_sample(p, "d", NULL, 0.0 / 0.0);
    prom_sample(p, "e", NULL, -1.0 / 0.0);
    prom_sample(p, "f", NULL, 1e-7);
    char *t = prom_take(p, NULL);
    assert_non_null(t);
    assert_string_equal(t, "a 9007199254740992\n"
                           "b 1700000000.123\n"
                           "c 0.30000000000000004\n"
                           "d NaN\n"
                           "e -Inf\n"
                           "f 1e-07\n");
    free(t);
}

/* Bounds as Prometheus' clients spell le: fewest digits, an exponent past six of them. */
static void test_bounds_as_le(void **state)
{
    (void)state;
    static const double b[] = {0.005, 1, 86400, 2419200, 0.1 + 0.2};
    static const uint64_t c[] = {0, 0, 0, 0, 0, 0};
    prom_t *p = prom_new(NULL);
    prom_histogram(p, "h", NULL, b, c, 5, 0);
    char *t = prom_take(p, NULL);
    assert_non_null(t);
    assert_non_null(strstr(t, "h_bucket{le=\"0.005\"} 0\n"));
    assert_non_null(strstr(t, "h_bucket{le=\"1\"} 0\n"));
    assert_non_null(strstr(t, "h_bucket{le=\"86400\"} 0\n"));
    assert_non_null(strstr(t, "h_bucket{le=\"2.4192e+06\"} 0\n"));
    assert_non_null(strstr(t, "h_bucket{le=\"0.30000000000000004\"} 0\n"));
    free(t);
}

static void test_help_escaped(void **state)
{
    (void)state;
    prom_t *p = prom_new("x_");
    assert_non_null(p);
    prom_head(p, "m", PROM_GAUGE, "a\\b\nc");
    char *t = prom_take(p, NULL);
    assert_string_equal(t, "# HELP x_m a\\\\b\\nc\n# TYPE x_m gauge\n");
    free(t);
}

static void test_label_escape_and_overflow(void **state)
{
    (void)state;
    char lb[32] = "";
    assert_int_equal(prom_label(lb, sizeof(lb), "route", "/a\"b\\c\nd"), 0);
    assert_string_equal(lb, "route=\"/a\\\"b\\\\c\\nd\"");
    /* Does not fit: the list is left as it was. */
    assert_int_equal(prom_label(lb, sizeof(lb), "status", "2xx"), -1);
    assert_string_equal(lb, "route=\"/a\\\"b\\\\c\\nd\"");
    char small[8] = "";
    assert_int_equal(prom_label(small, sizeof(small), "k", "12345"), -1);
    assert_string_equal(small, "");
    assert_int_equal(prom_label(small, sizeof(small), "k", "123"), 0); /* k="123" and NUL: 8 */
    assert_string_equal(small, "k=\"123\"");
}

/* Many lines: the buffer grows, and the length matches the text. */
static void test_grows(void **state)
{
    (void)state;
    prom_t *p = prom_new("ingestd_");
    assert_non_null(p);
    for (int i = 0; i < 5000; i++)
        prom_sample_i64(p, "worker_partition_keys", "partition=\"12345\"", i);
    size_t len = 0;
    char *t = prom_take(p, &len);
    assert_non_null(t);
    assert_int_equal(len, strlen(t));
    assert_non_null(strstr(t, "ingestd_worker_partition_keys{partition=\"12345\"} 4999\n"));
    assert_memory_equal(t, "ingestd_worker_partition_keys{partition=\"12345\"} 0\n", 51);
    free(t);
}

/* Another writer's text goes in as it is, between this writer's own lines. */
static void test_text(void **state)
{
    (void)state;
    prom_t *p = prom_new("x_");
    prom_gauge(p, "a", "A.", 1);
    prom_text(p, "y_b 2\n");
    prom_text(p, NULL);
    prom_sample_u64(p, "c", NULL, 3);
    char *t = prom_take(p, NULL);
    assert_string_equal(t, "# HELP x_a A.\n# TYPE x_a gauge\nx_a 1\ny_b 2\nx_c 3\n");
    free(t);
    prom_text(NULL, "z"); /* no-op */
}

static void test_empty_and_null(void **state)
{
    (void)state;
    size_t len = 99;
    char *t = prom_take(prom_new(NULL), &len);
    assert_non_null(t);
    assert_string_equal(t, "");
    assert_int_equal(len, 0);
    free(t);
    assert_null(prom_take(NULL, NULL));
    prom_free(NULL);
    prom_counter(NULL, "a", "b", 1); /* no-op */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_histogram_exact_text),
        cmocka_unit_test(test_labelled_counter_exact_text),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_bounds_as_le),
        cmocka_unit_test(test_help_escaped),
        cmocka_unit_test(test_label_escape_and_overflow),
        cmocka_unit_test(test_grows),
        cmocka_unit_test(test_text),
        cmocka_unit_test(test_empty_and_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
