/* cluster/test_partition.c: raw-topic routing (murmur2, repartition cut-over) and the key format.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <librdkafka/rdkafka.h>

#include "cluster/cluster.h"
#include "cluster/partition.h"

/* Kafka's own test vectors for Utils.murmur2 (Java ints, here as their unsigned bits). */
static void test_murmur2_vectors(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int32_t want;
    } cases[] = {
        {"21", -973932308},
        {"foobar", -790332482},
        {"a-little-bit-long-string", -985981536},
        {"a-little-bit-longer-string", -1486304829},
        {"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
        {"abc", 479470107},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(cluster_murmur2(cases[i].in, strlen(cases[i].in)),
                         (uint32_t)cases[i].want);
}

/* The same partition as librdkafka's murmur2 partitioner (so Java-style producers agree). */
static void test_matches_librdkafka(void **state)
{
    (void)state;
    char key[CLUSTER_KEY_MAX];
    for (int i = 0; i < 2000; i++) {
        char mid[64];
        snprintf(mid, sizeof mid, "msg-%d-%x", i, i * 2654435761u);
        size_t klen = cluster_key_encode("mobile", 6, mid, strlen(mid), key, sizeof key);
        assert_true(klen > 0);
        for (int32_t n = 1; n <= 40; n += 3) {
            int32_t want = rd_kafka_msg_partitioner_murmur2(NULL, key, klen, n, NULL, NULL);
            assert_int_equal(cluster_partition_of_key(key, klen, n), want);
        }
    }
}

static cluster_partitioner_t *mk(int32_t parts, int32_t before, int64_t at)
{
    cluster_partition_config_t c = {
        .partitions = parts, .partitions_before = before, .repartition_at_ms = at};
    cluster_partitioner_t *p = NULL;
    assert_int_equal(cluster_partitioner_new(&c, &p), CLUSTER_OK);
    assert_non_null(p);
    return p;
}

/* A pure function of (source, messageId): the timestamp only matters around a cut-over. */
static void test_stable(void **state)
{
    (void)state;
    cluster_partitioner_t *p = mk(12, 0, 0);
    char key[CLUSTER_KEY_MAX];
    for (int i = 0; i < 500; i++) {
        char mid[40];
        snprintf(mid, sizeof mid, "%08x-0000-4000-8000-%012d", i * 7919u, i);
        int32_t a = cluster_partition_for(p, "web", 3, mid, strlen(mid), 0);
        int32_t b = cluster_partition_for(p, "web", 3, mid, strlen(mid), INT64_MAX);
        int32_t c = cluster_partition_for(p, "web", 3, mid, strlen(mid), 1700000000000);
        assert_int_equal(a, b);
        assert_int_equal(a, c);
        assert_in_range(a, 0, 11);
        size_t klen = cluster_key_encode("web", 3, mid, strlen(mid), key, sizeof key);
        assert_int_equal(a, cluster_partition_of_key(key, klen, 12));
    }
    /* The source is part of the key: one messageId of two sources may land apart. */
    int differ = 0;
    for (int i = 0; i < 200; i++) {
        char mid[16];
        snprintf(mid, sizeof mid, "id%d", i);
        differ += cluster_partition_for(p, "a", 1, mid, strlen(mid), 0) !=
                  cluster_partition_for(p, "b", 1, mid, strlen(mid), 0);
    }
    assert_true(differ > 100);
    cluster_partitioner_free(p);
}

static void test_repartition_cutover(void **state)
{
    (void)state;
    const int64_t at = 1767225600000; /* 2026-01-01T00:00:00Z */
    cluster_partitioner_t *old = mk(8, 0, 0), *cur = mk(24, 0, 0), *p = mk(24, 8, at);
    int moved = 0;
    for (int i = 0; i < 1000; i++) {
        char mid[24];
        snprintf(mid, sizeof mid, "evt-%d", i);
        size_t ml = strlen(mid);
        int32_t o = cluster_partition_for(old, "s", 1, mid, ml, 0);
        int32_t c = cluster_partition_for(cur, "s", 1, mid, ml, 0);
        /* Before the cut-over: the old layout, to the millisecond. */
        assert_int_equal(cluster_partition_for(p, "s", 1, mid, ml, at - 1), o);
        assert_int_equal(cluster_partition_for(p, "s", 1, mid, ml, 0), o);
        assert_int_equal(cluster_partition_for(p, "s", 1, mid, ml, INT64_MIN), o);
        /* At and after it, and without a timestamp: the current one. */
        assert_int_equal(cluster_partition_for(p, "s", 1, mid, ml, at), c);
        assert_int_equal(cluster_partition_for(p, "s", 1, mid, ml, at + 86400000), c);
        assert_int_equal(cluster_partition_for(p, "s", 1, mid, ml, INT64_MAX), c);
        moved += o != c;
    }
    assert_true(moved > 500); /* the cut-over matters: most keys move */
    cluster_partitioner_free(old);
    cluster_partitioner_free(cur);
    cluster_partitioner_free(p);
}

/* UUID-like messageIds spread evenly: every partition within 5% of the mean. */
static void test_distribution(void **state)
{
    (void)state;
    enum { N = 120000, P = 12 };
    cluster_partitioner_t *p = mk(P, 0, 0);
    unsigned counts[P] = {0};
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < N; i++) {
        char mid[40];
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        snprintf(mid, sizeof mid, "%016llx-%08x", (unsigned long long)x, (unsigned)i);
        counts[cluster_partition_for(p, "default", 7, mid, strlen(mid), 0)]++;
    }
    for (int i = 0; i < P; i++) {
        assert_in_range(counts[i], N / P * 95 / 100, N / P * 105 / 100);
    }
    cluster_partitioner_free(p);
}

static void test_config_validation(void **state)
{
    (void)state;
    cluster_partitioner_t *p = (cluster_partitioner_t *)1;
    cluster_partition_config_t bad[] = {
        {.partitions = 0},
        {.partitions = -3},
        {.partitions = 4, .partitions_before = 5, .repartition_at_ms = 1}, /* topics only grow */
        {.partitions = 4, .partitions_before = 2, .repartition_at_ms = 0}, /* no cut-over */
        {.partitions = 4, .partitions_before = -1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(cluster_partitioner_new(&bad[i], &p), CLUSTER_EINVAL);
        assert_null(p);
        p = (cluster_partitioner_t *)1;
    }
    assert_int_equal(cluster_partitioner_new(NULL, &p), CLUSTER_EINVAL);
    cluster_partitioner_free(NULL);
}

static void test_key_format(void **state)
{
    (void)state;
    char buf[64];
    const char *s, *m;
    size_t sl, ml;
    size_t n = cluster_key_encode("mobile", 6, "abc", 3, buf, sizeof buf);
    assert_int_equal(n, 10);
    assert_memory_equal(buf, "mobile\0abc", 10);
    assert_int_equal(cluster_key_decode(buf, n, &s, &sl, &m, &ml), CLUSTER_OK);
    assert_int_equal(sl, 6);
    assert_memory_equal(s, "mobile", 6);
    assert_int_equal(ml, 3);
    assert_memory_equal(m, "abc", 3);

    /* A messageId may hold a NUL (JSON "\u0000"): the first NUL still splits. */
    n = cluster_key_encode("w", 1, "a\0b", 3, buf, sizeof buf);
    assert_int_equal(cluster_key_decode(buf, n, &s, &sl, &m, &ml), CLUSTER_OK);
    assert_int_equal(sl, 1);
    assert_int_equal(ml, 3);
    assert_memory_equal(m, "a\0b", 3);

    /* Refused: NUL in the source, empty source, no room. */
    assert_int_equal(cluster_key_encode("a\0b", 3, "x", 1, buf, sizeof buf), 0);
    assert_int_equal(cluster_key_encode("", 0, "x", 1, buf, sizeof buf), 0);
    assert_int_equal(cluster_key_encode("source", 6, "0123456789", 10, buf, 16), 0);
    assert_int_equal(cluster_key_encode("source", 6, "0123456789", 10, buf, 17), 17);

    /* Malformed keys. */
    assert_int_equal(cluster_key_decode("nonul", 5, &s, &sl, &m, &ml), CLUSTER_FORMAT);
    assert_int_equal(cluster_key_decode("\0abc", 4, &s, &sl, &m, &ml), CLUSTER_FORMAT);
    assert_int_equal(cluster_key_decode("abc\0", 4, &s, &sl, &m, &ml), CLUSTER_FORMAT);
    assert_int_equal(cluster_key_decode(NULL, 0, &s, &sl, &m, &ml), CLUSTER_FORMAT);
    assert_string_not_equal(cluster_strerror(CLUSTER_FORMAT), cluster_strerror(CLUSTER_OK));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_murmur2_vectors), cmocka_unit_test(test_matches_librdkafka),
        cmocka_unit_test(test_stable),          cmocka_unit_test(test_repartition_cutover),
        cmocka_unit_test(test_distribution),    cmocka_unit_test(test_config_validation),
        cmocka_unit_test(test_key_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
