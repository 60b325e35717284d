/* test_filter: the deterministic properties of the bounded-memory duplicate filters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "storage/memfilter/filter.h"
#include "testutil.h"

static const uint8_t secret[FILTER_SECRET_LEN] = {1, 2,  3,  4,  5,  6,  7,  8,
                                                  9, 10, 11, 12, 13, 14, 15, 16};

static const char *const all_specs[] = {
    "nsq:1Mbit",
    "nsq:1Mbit,fp=64",
    "bloom:1Mbit,hashes=3",
    "sbf:1Mbit,cellbits=2,hashes=2,target=0.02",
    "sqf:1Mbit,buckets=1,remainder=2,reduced=1",
    "sqf:1Mbit",
    "qht:1Mbit,buckets=1,fp=3",
    "qht:1Mbit",
    "qqhtd:1Mbit,buckets=4,fp=8",
};
#define NSPECS (sizeof all_specs / sizeof all_specs[0])

/* Distinct keys: a counter, spread by a fixed multiplier so the bytes are not all alike. */
static void key_of(uint64_t i, uint8_t key[FILTER_KEY_LEN])
{
    uint64_t a = i * UINT64_C(0x9e3779b97f4a7c15), b = i ^ UINT64_C(0x5bd1e9955bd1e995);
    memcpy(key, &a, 8);
    memcpy(key + 8, &b, 8);
}

static filter_t *make(const char *text)
{
    filter_spec_t spec;
    char err[200];
    filter_t *f = NULL;
    if (filter_parse_spec(text, &spec, err, sizeof err) != 0)
        fail_msg("spec %s: %s", text, err);
    assert_int_equal(filter_new(&spec, secret, &f), FILTER_OK);
    return f;
}

static void test_nsq_never_false_positive(void **state)
{
    (void)state;
    /* 4 million distinct keys through a small table: every one of them is unseen. */
    const char *specs[] = {"nsq:1Mbit", "nsq:256kbit,fp=64", "nsq:64kbit,fp=32"};
    uint64_t n[] = {4000000, 2000000, 200000};
    for (size_t s = 0; s < 3; s++) {
        filter_t *f = make(specs[s]);
        uint8_t key[FILTER_KEY_LEN];
        uint64_t dup = 0;
        for (uint64_t i = 0; i < n[s]; i++) {
            key_of(i, key);
            dup += filter_insert_if_absent(f, key) == FILTER_DUPLICATE;
        }
        assert_int_equal(dup, 0);
        /* And it does remember: the last key again is a duplicate. */
        assert_int_equal(filter_insert_if_absent(f, key), FILTER_DUPLICATE);
        filter_free(f);
    }
}

static void test_bloom_never_misses(void **state)
{
    (void)state;
    filter_t *f = make("bloom:1Mbit,hashes=4");
    uint8_t key[FILTER_KEY_LEN];
    for (uint64_t i = 0; i < 200000; i++) {
        key_of(i, key);
        filter_insert_if_absent(f, key);
    }
    for (uint64_t i = 0; i < 200000; i++) {
        key_of(i, key);
        assert_int_equal(filter_insert_if_absent(f, key), FILTER_DUPLICATE);
    }
    filter_free(f);
}

static void test_qqhtd_fifo_per_row(void **state)
{
    (void)state;
    /* One row (bits = buckets * fp) of 4 buckets; 32-bit fingerprints do not collide here. */
    filter_t *f = make("qqhtd:bits=128,buckets=4,fp=32");
    uint8_t a[16], b[16], c[16], d[16], e[16];
    key_of(101, a);
    key_of(102, b);
    key_of(103, c);
    key_of(104, d);
    key_of(105, e);
    assert_int_equal(filter_insert_if_absent(f, a), FILTER_UNSEEN); /* a */
    assert_int_equal(filter_insert_if_absent(f, b), FILTER_UNSEEN); /* a b */
    assert_int_equal(filter_insert_if_absent(f, c), FILTER_UNSEEN); /* a b c */
    assert_int_equal(filter_insert_if_absent(f, d), FILTER_UNSEEN); /* a b c d */
    assert_int_equal(filter_insert_if_absent(f, e), FILTER_UNSEEN); /* b c d e: a popped */
    /* A duplicate is appended too: b is found and moves to the back, popping the old b. */
    assert_int_equal(filter_insert_if_absent(f, b), FILTER_DUPLICATE); /* c d e b */
    assert_int_equal(filter_insert_if_absent(f, a), FILTER_UNSEEN);    /* d e b a */
    assert_int_equal(filter_insert_if_absent(f, c), FILTER_UNSEEN);    /* e b a c */
    assert_int_equal(filter_insert_if_absent(f, e), FILTER_DUPLICATE); /* b a c e */
    assert_int_equal(filter_insert_if_absent(f, b), FILTER_DUPLICATE); /* a c e b */
    assert_int_equal(filter_insert_if_absent(f, d), FILTER_UNSEEN);    /* c e b d */
    assert_int_equal(filter_insert_if_absent(f, a), FILTER_UNSEEN);    /* e b d a */
    filter_free(f);
}

static void test_just_inserted_is_duplicate(void **state)
{
    (void)state;
    /* With room (8 Mbit, few keys), a key asked twice in a row is a duplicate, for every kind. */
    const char *specs[] = {"nsq:8Mbit",
                           "bloom:8Mbit",
                           "sbf:8Mbit,cellbits=2,hashes=2,target=0.02",
                           "sbf:8Mbit",
                           "sqf:8Mbit,buckets=1,remainder=2,reduced=1",
                           "sqf:8Mbit",
                           "qht:8Mbit,buckets=1,fp=3",
                           "qht:8Mbit,buckets=8,fp=8",
                           "qqhtd:8Mbit"};
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        filter_t *f = make(specs[s]);
        uint8_t key[FILTER_KEY_LEN];
        for (uint64_t i = 0; i < 20000; i++) {
            key_of(i, key);
            filter_insert_if_absent(f, key);
            if (filter_insert_if_absent(f, key) != FILTER_DUPLICATE)
                fail_msg("%s: key %llu not a duplicate right after its insert", specs[s],
                         (unsigned long long)i);
        }
        filter_free(f);
    }
}

static void test_asymptotic_fpr_measured(void **state)
{
    (void)state;
    /* Small tables saturated by unique keys: the measured FPR is the documented one. */
    const char *specs[] = {"qht:bits=3000,buckets=1,fp=3", "qht:bits=6000,buckets=2,fp=3",
                           "qqhtd:bits=6000,buckets=2,fp=3",
                           "sqf:bits=3000,buckets=1,remainder=2,reduced=1",
                           "sbf:bits=4000,cellbits=2,hashes=2,target=0.25"};
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        filter_t *f = make(specs[s]);
        uint8_t key[FILTER_KEY_LEN];
        uint64_t fp = 0, n = 300000, warm = 20000;
        for (uint64_t i = 0; i < n; i++) {
            key_of(i, key);
            int r = filter_insert_if_absent(f, key);
            if (i >= warm)
                fp += r == FILTER_DUPLICATE;
        }
        double measured = (double)fp / (double)(n - warm);
        double want = filter_asymptotic_fpr(f);
        if (measured < want - 0.015 || measured > want + 0.015)
            fail_msg("%s: measured FPR %.4f, documented %.4f", specs[s], measured, want);
        filter_free(f);
    }
}

static void test_roundtrip_every_filter(void **state)
{
    (void)state;
    for (size_t s = 0; s < NSPECS; s++) {
        filter_t *f = make(all_specs[s]), *g = NULL;
        uint8_t key[FILTER_KEY_LEN];
        for (uint64_t i = 0; i < 30000; i++) {
            key_of(i % 20000, key);
            filter_insert_if_absent(f, key);
        }
        uint8_t *buf = NULL, *buf2 = NULL;
        size_t len = 0, len2 = 0;
        assert_int_equal(filter_serialize(f, &buf, &len), FILTER_OK);
        assert_int_equal(filter_deserialize(buf, len, secret, &g), FILTER_OK);
        assert_int_equal(filter_memory_bits(g), filter_memory_bits(f));
        assert_memory_equal(filter_spec(g), filter_spec(f), sizeof(filter_spec_t));
        assert_int_equal(filter_serialize(g, &buf2, &len2), FILTER_OK);
        assert_int_equal(len2, len);
        assert_memory_equal(buf2, buf, len);
        /* Same state and same random generator: the same answers from here on. */
        for (uint64_t i = 10000; i < 40000; i++) {
            key_of(i, key);
            assert_int_equal(filter_insert_if_absent(g, key), filter_insert_if_absent(f, key));
        }

        /* Any flipped byte is refused, as is a truncated buffer or another secret. */
        size_t spots[] = {0, 5, 6, 9, 20, 44, 60, 70, 76, len / 2, len - 5, len - 1};
        for (size_t i = 0; i < sizeof spots / sizeof spots[0]; i++) {
            filter_t *h = NULL;
            buf[spots[i]] ^= 0x10;
            assert_int_equal(filter_deserialize(buf, len, secret, &h), FILTER_ECORRUPT);
            assert_null(h);
            buf[spots[i]] ^= 0x10;
        }
        filter_t *h = NULL;
        assert_int_equal(filter_deserialize(buf, len - 1, secret, &h), FILTER_ECORRUPT);
        assert_int_equal(filter_deserialize(buf, 10, secret, &h), FILTER_ECORRUPT);
        uint8_t other[FILTER_SECRET_LEN] = {0};
        assert_int_equal(filter_deserialize(buf, len, other, &h), FILTER_ESECRET);
        assert_null(h);
        free(buf);
        free(buf2);
        filter_free(f);
        filter_free(g);
    }
}

static void test_reset_forgets(void **state)
{
    (void)state;
    for (size_t s = 0; s < NSPECS; s++) {
        filter_t *f = make(all_specs[s]);
        uint8_t key[FILTER_KEY_LEN];
        key_of(7, key);
        filter_insert_if_absent(f, key);
        assert_int_equal(filter_insert_if_absent(f, key), FILTER_DUPLICATE);
        filter_reset(f);
        assert_int_equal(filter_insert_if_absent(f, key), FILTER_UNSEEN);
        filter_free(f);
    }
}

static void test_spec_parse_good(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        const char *canonical;
    } cases[] = {
        {"qqhtd:8Mbit", "qqhtd:bits=8000000,buckets=4,fp=16"},
        {"qht:bits=1000000,buckets=1,fp=3", "qht:bits=1000000,buckets=1,fp=3"},
        {"qht:65536,b=2,f=4", "qht:bits=65536,buckets=2,fp=4"},
        {"qht:2^16,buckets=1,fp=2", "qht:bits=65536,buckets=1,fp=2"},
        {"qht:8e6,fp=3,buckets=1", "qht:bits=8000000,buckets=1,fp=3"},
        {"qht:1MiB,buckets=1,fp=8", "qht:bits=8388608,buckets=1,fp=8"},
        {"qht:1Mbit,bits=10kbit", "qht:bits=10000,buckets=4,fp=16"},
        {"nsq:1KiB", "nsq:bits=8192,fp=128"},
        {"nsq:1kB,fp=64", "nsq:bits=8000,fp=64"},
        {"bloom:1.5Mbit,k=7", "bloom:bits=1500000,hashes=7"},
        {"sbf:1Mbit,cellbits=2,hashes=2,target=0.02",
         "sbf:bits=1000000,cellbits=2,hashes=2,target=0.02"},
        {"sbf:1Mbit,d=2,k=2,p=38", "sbf:bits=1000000,cellbits=2,hashes=2,p=38"},
        {"sbf:1Mbit,target=0.123456789", "sbf:bits=1000000,cellbits=3,hashes=4,target=0.123456789"},
        {"sqf:8Mbit,buckets=1,remainder=2,reduced=1",
         "sqf:bits=8000000,buckets=1,remainder=2,reduced=1"},
        {"sqf:1Kibit", "sqf:bits=1024,buckets=4,remainder=12,reduced=8"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        filter_spec_t spec;
        char err[200] = "", canon[200];
        if (filter_parse_spec(cases[i].text, &spec, err, sizeof err) != 0)
            fail_msg("%s: %s", cases[i].text, err);
        filter_spec_format(&spec, canon, sizeof canon);
        assert_string_equal(canon, cases[i].canonical);
        /* The canonical form parses back to the same spec. */
        filter_spec_t again;
        assert_int_equal(filter_parse_spec(canon, &again, NULL, 0), 0);
        assert_memory_equal(&again, &spec, sizeof spec);
    }
}

static void test_spec_parse_bad(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        const char *says; /* a piece of the message */
    } cases[] = {
        {"", "empty"},
        {"cuckoo:1Mbit", "unknown filter"},
        {"qht", "no size"},
        {"qht:", "empty item"},
        {"qht:1Mbit,", "empty item"},
        {"qht:1Mb", "unknown unit"},
        {"qht:abc", "expected a number"},
        {"qht:0", "whole number of bits"},
        {"qht:0.5bit", "whole number of bits"},
        {"qht:2^70", "2^N"},
        {"qht:1Mbit,buckets=0", "buckets=0"},
        {"qht:1Mbit,fp=33", "fp=33"},
        {"qht:1Mbit,fp=x", "whole number"},
        {"qht:1Mbit,hashes=3", "does not take"},
        {"qht:bits=10,buckets=4,fp=16", "one row"},
        {"nsq:1Mbit,fp=16", "32, 64 or 128"},
        {"bloom:1Mbit,buckets=2", "does not take"},
        {"bloom:1Mbit,hashes=0", "hashes=0"},
        {"sbf:1Mbit,target=1.5", "between 0 and 1"},
        {"sbf:1Mbit,cellbits=9", "cellbits=9"},
        {"sbf:4bit,cellbits=2,hashes=2", "more cells than hashes"},
        {"sqf:1Mbit,reduced=13", "reduced=13"},
        {"sqf:1Mbit,remainder=17", "remainder=17"},
        {"qht:100GiB", "whole number of bits"},
        {"qht:1Mbit,=3", "bad item"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        filter_spec_t spec;
        char err[200] = "";
        if (filter_parse_spec(cases[i].text, &spec, err, sizeof err) != FILTER_EINVAL)
            fail_msg("\"%s\" was accepted", cases[i].text);
        if (strstr(err, cases[i].says) == NULL)
            fail_msg("\"%s\": message \"%s\" lacks \"%s\"", cases[i].text, err, cases[i].says);
    }
    filter_spec_t spec;
    filter_spec_default(FILTER_QHT, 0, &spec);
    filter_t *f = NULL;
    assert_int_equal(filter_new(&spec, secret, &f), FILTER_EINVAL);
    assert_null(f);
}

static void test_memory_matches_spec(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        uint64_t bits;
    } cases[] = {
        {"qht:bits=65536,buckets=1,fp=3", 65535},  /* 21845 rows of 3 bits */
        {"qht:bits=65536,buckets=16,fp=6", 65472}, /* 682 rows of 96 bits */
        {"qqhtd:bits=8000000,buckets=1,fp=3", 7999998},
        {"sqf:bits=8000000,buckets=1,remainder=2,reduced=1", 7999998}, /* 3-bit buckets */
        {"sqf:bits=1000,buckets=4,remainder=12,reduced=8", 960},       /* 12-bit buckets */
        {"sbf:bits=1000001,cellbits=2,hashes=2,target=0.02", 1000000},
        {"bloom:bits=12345", 12345},
        {"nsq:bits=1000,fp=128", 896},
        {"nsq:bits=1000,fp=32", 992},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        filter_t *f = make(cases[i].text);
        assert_int_equal(filter_memory_bits(f), cases[i].bits);
        assert_true(filter_memory_bits(f) <= filter_spec(f)->bits);
        filter_free(f);
    }
    /* Documented asymptotic FPRs of the paper's settings. */
    filter_t *f = make("qht:8Mbit,buckets=1,fp=3");
    assert_float_equal(filter_asymptotic_fpr(f), 1.0 / 7, 1e-12);
    filter_free(f);
    f = make("sqf:8Mbit,buckets=1,remainder=2,reduced=1");
    assert_float_equal(filter_asymptotic_fpr(f), 0.25, 1e-12);
    filter_free(f);
    f = make("nsq:8Mbit");
    assert_float_equal(filter_asymptotic_fpr(f), 0.0, 0);
    filter_free(f);
}

static void test_secret_changes_placement(void **state)
{
    (void)state;
    /* Two secrets, same keys: the tables differ (the mix is keyed, not just the key). */
    filter_spec_t spec;
    assert_int_equal(filter_parse_spec("qht:64kbit,buckets=1,fp=8", &spec, NULL, 0), 0);
    uint8_t other[FILTER_SECRET_LEN];
    memcpy(other, secret, sizeof other);
    other[0] ^= 1;
    filter_t *a = NULL, *b = NULL;
    assert_int_equal(filter_new(&spec, secret, &a), 0);
    assert_int_equal(filter_new(&spec, other, &b), 0);
    uint8_t key[FILTER_KEY_LEN];
    for (uint64_t i = 0; i < 1000; i++) {
        key_of(i, key);
        filter_insert_if_absent(a, key);
        filter_insert_if_absent(b, key);
    }
    uint8_t *ba = NULL, *bb = NULL;
    size_t la = 0, lb = 0;
    assert_int_equal(filter_serialize(a, &ba, &la), 0);
    assert_int_equal(filter_serialize(b, &bb, &lb), 0);
    assert_int_equal(la, lb);
    assert_true(memcmp(ba + 80, bb + 80, la - 84) != 0);
    free(ba);
    free(bb);
    filter_free(a);
    filter_free(b);
    filter_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nsq_never_false_positive),
        cmocka_unit_test(test_bloom_never_misses),
        cmocka_unit_test(test_qqhtd_fifo_per_row),
        cmocka_unit_test(test_just_inserted_is_duplicate),
        cmocka_unit_test(test_asymptotic_fpr_measured),
        cmocka_unit_test(test_roundtrip_every_filter),
        cmocka_unit_test(test_reset_forgets),
        cmocka_unit_test(test_spec_parse_good),
        cmocka_unit_test(test_spec_parse_bad),
        cmocka_unit_test(test_memory_matches_spec),
        cmocka_unit_test(test_secret_changes_placement),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
