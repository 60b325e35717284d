/* test_histogram.c: bucket placement, Prometheus text, bad bounds, and observers on many threads.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/reqhist.h"
#include "common/histogram.h"

/* The Prometheus text of h as one malloc'd string. */
static char *text(const histogram_t *h, const char *labels)
{
    prom_t *p = prom_new(NULL);
    assert_non_null(p);
    histogram_write(h, p, "x", labels);
    char *buf = prom_take(p, NULL);
    assert_non_null(buf);
    return buf;
}

static void test_buckets_are_cumulative_and_inclusive(void **state)
{
    (void)state;
    static const double b[] = {1, 2, 5};
    histogram_t *h = NULL;
    assert_int_equal(histogram_new(b, 3, &h), 0);
    /* A sample equal to a bound is in that bucket (Prometheus' le: less than or equal). */
    double vs[] = {0.5, 1, 1.5, 2, 4, 7, 100};
    for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); i++)
        histogram_observe(h, vs[i]);
    histogram_observe(h, 0.0 / 0.0); /* NaN: ignored */
    assert_int_equal(histogram_count(h), 7);
    char *t = text(h, NULL);
    assert_string_equal(t, "x_bucket{le=\"1\"} 2\n"
                           "x_bucket{le=\"2\"} 4\n"
                           "x_bucket{le=\"5\"} 5\n"
                           "x_bucket{le=\"+Inf\"} 7\n"
                           "x_sum 116\n"
                           "x_count 7\n");
    free(t);
    histogram_free(h);
}

static void test_labels(void **state)
{
    (void)state;
    static const double b[] = {0.5};
    histogram_t *h = NULL;
    assert_int_equal(histogram_new(b, 1, &h), 0);
    histogram_observe(h, 0.25);
    char *t = text(h, "route=\"/a\"");
    assert_string_equal(t, "x_bucket{route=\"/a\",le=\"0.5\"} 1\n"
                           "x_bucket{route=\"/a\",le=\"+Inf\"} 1\n"
                           "x_sum{route=\"/a\"} 0.25\n"
                           "x_count{route=\"/a\"} 1\n");
    free(t);
    histogram_free(h);
}

static void test_bad_bounds(void **state)
{
    (void)state;
    static const double down[] = {2, 1}, same[] = {1, 1}, inf[] = {1, 1.0 / 0.0};
    double many[HISTOGRAM_MAX_BOUNDS + 1];
    histogram_t *h = (histogram_t *)1;
    for (size_t i = 0; i < sizeof(many) / sizeof(many[0]); i++)
        many[i] = (double)i;
    assert_int_equal(histogram_new(down, 2, &h), -1);
    assert_null(h);
    assert_int_equal(histogram_new(same, 2, &h), -1);
    assert_int_equal(histogram_new(inf, 2, &h), -1);
    assert_int_equal(histogram_new(many, HISTOGRAM_MAX_BOUNDS + 1, &h), -1);
    assert_int_equal(histogram_new(HISTOGRAM_SECONDS, HISTOGRAM_SECONDS_N, &h), 0);
    histogram_free(h);
    assert_int_equal(histogram_new(HISTOGRAM_EVENTS, HISTOGRAM_EVENTS_N, &h), 0);
    histogram_free(h);
    histogram_observe(NULL, 1); /* no-ops */
    histogram_free(NULL);
}

#define THREADS 4
#define PER     100000

static void *observer(void *arg)
{
    for (int i = 0; i < PER; i++)
        histogram_observe(arg, (i % 4) * 0.5); /* 0, 0.5, 1, 1.5: sums exactly in binary */
    return NULL;
}

/* No sample lost, and the sum's compare-and-swap loses no addition, under contention. */
static void test_threads(void **state)
{
    (void)state;
    static const double b[] = {0.5, 1};
    histogram_t *h = NULL;
    pthread_t th[THREADS];
    assert_int_equal(histogram_new(b, 2, &h), 0);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, observer, h), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    char *t = text(h, NULL);
    assert_string_equal(t, "x_bucket{le=\"0.5\"} 200000\n"
                           "x_bucket{le=\"1\"} 300000\n"
                           "x_bucket{le=\"+Inf\"} 400000\n"
                           "x_sum 300000\n"
                           "x_count 400000\n");
    free(t);
    histogram_free(h);
}

/* reqhist: rows by route id ("other" for -1 or out of range), columns by status class. */
static void test_reqhist(void **state)
{
    (void)state;
    const char *paths[] = {"/a", "/b"};
    reqhist_t *rh = NULL;
    assert_int_equal(reqhist_new(paths, 2, &rh), 0);
    reqhist_observe(rh, 1, 200, 0.002);
    reqhist_observe(rh, 1, 503, 0.002);
    reqhist_observe(rh, -1, 404, 0.001);
    reqhist_observe(rh, 7, 404, 0.001);
    reqhist_observe(rh, 0, 0, 0.001);   /* no status class: not counted */
    reqhist_observe(rh, 0, 600, 0.001); /* likewise */
    prom_t *p = prom_new("ingestd_");
    reqhist_write(rh, p);
    char *buf = prom_take(p, NULL);
    assert_non_null(buf);
    assert_non_null(strstr(buf, "# TYPE ingestd_request_duration_seconds histogram\n"));
    assert_non_null(
        strstr(buf, "ingestd_request_duration_seconds_count{route=\"/b\",status=\"2xx\"} 1\n"));
    assert_non_null(
        strstr(buf, "ingestd_request_duration_seconds_count{route=\"/b\",status=\"5xx\"} 1\n"));
    assert_non_null(
        strstr(buf, "ingestd_request_duration_seconds_count{route=\"other\",status=\"4xx\"} 2\n"));
    assert_null(strstr(buf, "route=\"/a\"")); /* nothing seen there: no series */
    free(buf);
    reqhist_free(rh);
    reqhist_free(NULL);
}

/* Quantiles estimated from the buckets, as Prometheus' histogram_quantile() does. */
static void test_quantile(void **state)
{
    (void)state;
    const double bounds[] = {1, 5, 15};
    histogram_t *h = NULL;
    double q = -1;
    assert_int_equal(histogram_new(bounds, 3, &h), 0);
    assert_int_equal(histogram_quantile(h, 0.5, &q), -1); /* no samples */
    for (int i = 0; i < 8; i++)
        histogram_observe(h, 0.5); /* (0, 1] */
    histogram_observe(h, 3);       /* (1, 5] */
    histogram_observe(h, 10);      /* (5, 15] */
    assert_int_equal(histogram_quantile(h, 0.5, &q), 0);
    assert_true(q > 0.62 && q < 0.63); /* rank 5 of the 8 in (0, 1]: 5/8 */
    assert_int_equal(histogram_quantile(h, 0.9, &q), 0);
    assert_true(q > 4.99 && q < 5.01); /* rank 9: the end of (1, 5] */
    assert_int_equal(histogram_quantile(h, 0.95, &q), 0);
    assert_true(q > 9.99 && q < 10.01); /* half way through (5, 15] */
    histogram_observe(h, 1000);         /* +Inf: the largest finite bound */
    assert_int_equal(histogram_quantile(h, 1.0, &q), 0);
    assert_true(q == 15);
    assert_int_equal(histogram_quantile(h, 1.5, &q), -1);
    histogram_free(h);
    /* The duplicate-age ladder is a valid one, 1 s to 28 d. */
    assert_int_equal(histogram_new(HISTOGRAM_AGE_SECONDS, HISTOGRAM_AGE_SECONDS_N, &h), 0);
    assert_true(HISTOGRAM_AGE_SECONDS[0] == 1);
    assert_true(HISTOGRAM_AGE_SECONDS[HISTOGRAM_AGE_SECONDS_N - 1] == 28 * 86400);
    histogram_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buckets_are_cumulative_and_inclusive),
        cmocka_unit_test(test_labels),
        cmocka_unit_test(test_bad_bounds),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_reqhist),
        cmocka_unit_test(test_quantile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
