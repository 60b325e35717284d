/* cluster/test_worker_lost.c: what an out-of-range position loses, and the counts and stops. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cluster/worker_lost.h"

/* Each case: position, repair_until, lo, hi -> the keys and records ranges, where reading goes
 * on, whether the log is shorter than the position, and whether the partition stops. */
static void test_classify(void **state)
{
    (void)state;
    static const struct {
        const char *what;
        int64_t position, repair_until, lo, hi;
        int64_t keys_from, keys_to, records_from, records_to, resume_at;
        bool past_end, stops;
    } cases[] = {
        {"below the log start, no repair: records", 100, -1, 150, 400, 0, 0, 100, 150, 150, false,
         true},
        {"repair up to C = 120, log from 80: keys only", 0, 120, 80, 400, 0, 80, 80, 80, 80, false,
         false},
        {"repair up to C = 120, log from 150: keys and records", 0, 120, 150, 400, 0, 120, 120, 150,
         150, false, true},
        {"past the end (cut log, topic made again)", 500, -1, 0, 40, 0, 0, 0, 0, 40, true, true},
        {"in range after all (a stale answer)", 200, -1, 150, 400, 0, 0, 0, 0, 200, false, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lost_range_t r;
        worker_lost_classify(cases[i].position, cases[i].repair_until, cases[i].lo, cases[i].hi,
                             &r);
        printf("%s\n", cases[i].what);
        assert_int_equal(r.keys_to - r.keys_from, cases[i].keys_to - cases[i].keys_from);
        if (cases[i].keys_to > cases[i].keys_from)
            assert_int_equal(r.keys_from, cases[i].keys_from);
        assert_int_equal(r.records_to - r.records_from,
                         cases[i].records_to - cases[i].records_from);
        if (cases[i].records_to > cases[i].records_from)
            assert_int_equal(r.records_from, cases[i].records_from);
        assert_int_equal(r.resume_at, cases[i].resume_at);
        assert_int_equal(r.past_end, cases[i].past_end);
        assert_int_equal(worker_lost_stops(&r), cases[i].stops);
    }
}

static char *json_of(worker_lost_t *l, int32_t partition)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    if (partition >= 0)
        worker_lost_json_partition(l, partition, f);
    else
        worker_lost_json(l, f);
    assert_int_equal(fclose(f), 0);
    return buf;
}

/* A stop shows in /stats and /metrics until resumed; the counts stay after a revoke. */
static void test_stop_resume_counts(void **state)
{
    (void)state;
    lost_range_t r, got;
    worker_lost_t *l = worker_lost_new(true);
    assert_non_null(l);
    worker_lost_classify(0, 120, 150, 400, &r);
    assert_int_equal(worker_lost_found(l, 3, &r, true, 1000), 0);
    assert_true(worker_lost_stopped(l, 3, &got));
    assert_int_equal(got.records_from, 120);
    assert_false(worker_lost_stopped(l, 2, NULL));
    assert_int_equal(worker_lost_stopped_count(l), 1);

    char *j = json_of(l, 3);
    assert_string_equal(j, "\"stopped\":{\"reason\":\"records deleted\",\"from\":120,\"to\":150,"
                           "\"log_start\":150,\"log_end\":400,\"since_ms\":1000}");
    free(j);
    j = json_of(l, 2);
    assert_string_equal(j, "\"stopped\":null");
    free(j);

    /* Revoked while stopped: no longer stopped here; found again by the next holder. */
    worker_lost_unassigned(l, 3);
    assert_int_equal(worker_lost_stopped_count(l), 0);
    assert_int_equal(worker_lost_found(l, 3, &r, true, 2000), 0);
    assert_int_equal(worker_lost_stopped_count(l), 1);

    /* The operator's resume at a log start that moved on: [120, 170) skipped. */
    worker_lost_skipped(l, 3, 120, 170);
    assert_int_equal(worker_lost_stopped_count(l), 0);
    j = json_of(l, -1);
    assert_string_equal(j, "\"records_lost\":{\"on_records_lost\":\"stop\",\"stopped\":[],"
                           "\"out_of_range\":2,\"offsets_records\":50,\"offsets_keys\":240}");
    free(j);

    prom_t *p = prom_new("ingestd_");
    worker_lost_prom(l, p);
    char *text = prom_take(p, NULL);
    assert_non_null(text);
    assert_non_null(strstr(text, "ingestd_worker_out_of_range_total{partition=\"3\"} 2\n"));
    assert_non_null(
        strstr(text, "ingestd_worker_offsets_lost_total{partition=\"3\",kind=\"records\"} 50\n"));
    assert_non_null(
        strstr(text, "ingestd_worker_offsets_lost_total{partition=\"3\",kind=\"keys\"} 240\n"));
    assert_non_null(strstr(text, "ingestd_worker_partitions_stopped 0\n"));
    free(text);
    worker_lost_free(l);
    worker_lost_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classify),
        cmocka_unit_test(test_stop_resume_counts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
