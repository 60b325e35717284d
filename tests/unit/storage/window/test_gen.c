/* test_gen.c: sealed generation files: write, open, find, filter, verify, merge, damage. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "storage/window/gen.h"
#include "storage/window/keyhash.h"
#include "testutil.h"

static const uint8_t SECRET[KEYHASH_SECRET_LEN] = "gen-test-secret";

/* Key i as the server makes them: a keyed hash, so uniform like real keys. */
static void mkkey(uint64_t i, uint8_t key[KEYHASH_LEN])
{
    char id[32];
    int n = snprintf(id, sizeof(id), "m-%llu", (unsigned long long)i);
    keyhash(SECRET, "default", 7, id, (size_t)n, key);
}

/* Generation i covers sequences [100 i, 100 i + 100). */
static gen_id_t gid(uint64_t i)
{
    return (gen_id_t){i * 100, i * 100 + 100};
}

static int cmp_entry(const void *a, const void *b)
{
    return memcmp(((const gen_entry_t *)a)->key, ((const gen_entry_t *)b)->key, KEYHASH_LEN);
}

/* Entries for ids [from, from + n), sorted by key; offset = id, receivedAt = 1000 + id. */
static gen_entry_t *entries(uint64_t from, size_t n)
{
    gen_entry_t *e = calloc(n ? n : 1, sizeof(*e));
    assert_non_null(e);
    for (size_t i = 0; i < n; i++) {
        mkkey(from + i, e[i].key);
        e[i].offset = from + i;
        e[i].received_ms = 1000 + (int64_t)(from + i);
    }
    qsort(e, n, sizeof(*e), cmp_entry);
    return e;
}

static gen_t *write_bits(const char *dir, gen_id_t id, const gen_entry_t *e, size_t n,
                         unsigned bits)
{
    gen_writer_t *w = NULL;
    assert_int_equal(gen_writer_open(dir, id, n, bits, &w), GEN_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(gen_writer_add(w, &e[i]), GEN_OK);
    gen_t *g = NULL;
    assert_int_equal(gen_writer_finish(w, &g), GEN_OK);
    assert_non_null(g);
    return g;
}

static gen_t *write_gen(const char *dir, gen_id_t id, const gen_entry_t *e, size_t n)
{
    return write_bits(dir, id, e, n, 0);
}

static int setup(void **state)
{
    return tu_fixture_setup(state, "gen", NULL);
}

static int teardown(void **state)
{
    return tu_fixture_teardown(state);
}

/* Every key written is found with its values, across many pages and a partial last one. */
static void test_write_find(void **state)
{
    tu_fixture_t *fx = *state;
    size_t n = 20000; /* 137 pages, the last one partial */
    gen_entry_t *e = entries(0, n);
    gen_t *g = write_gen(fx->dir, gid(7), e, n);
    gen_info_t info;
    gen_get_info(g, &info);
    assert_int_equal(info.id.first, 700);
    assert_int_equal(info.id.end, 800);
    assert_int_equal(info.keys, n);
    assert_int_equal(info.min_offset, 0);
    assert_int_equal(info.max_offset, n - 1);
    assert_int_equal(info.min_received_ms, 1000);
    assert_int_equal(info.max_received_ms, 1000 + (int64_t)n - 1);
    for (size_t i = 0; i < n; i++) {
        bool found = false;
        gen_entry_t got;
        assert_int_equal(gen_find(g, e[i].key, &found, &got), GEN_OK);
        assert_true(found);
        assert_memory_equal(got.key, e[i].key, KEYHASH_LEN);
        assert_int_equal(got.offset, e[i].offset);
        assert_int_equal(got.received_ms, e[i].received_ms);
    }
    assert_int_equal(gen_verify(g), GEN_OK);
    gen_close(g);
    /* Reopened from disk: the same answers. */
    assert_int_equal(gen_open(fx->dir, gid(7), &g), GEN_OK);
    bool found = false;
    assert_int_equal(gen_find(g, e[n / 2].key, &found, NULL), GEN_OK);
    assert_true(found);
    gen_close(g);
    free(e);
}

/* The share of `probes` keys never written that the filter lets through; none is found. */
static double filter_rate(const gen_t *g, size_t probes)
{
    size_t passed = 0;
    for (uint64_t i = 0; i < probes; i++) {
        uint8_t key[KEYHASH_LEN];
        bool found = true;
        mkkey(1000000 + i, key);
        passed += gen_may_contain(g, key);
        assert_int_equal(gen_find(g, key, &found, NULL), GEN_OK);
        assert_false(found);
    }
    return (double)passed / (double)probes;
}

/* Keys never written are not found, and the filter turns away nearly all of them: about 1% pass
 * at 10 bits per key, about 0.4% at the default 14 (1.1% and 0.36% measured here). */
static void test_absent_and_filter_rate(void **state)
{
    tu_fixture_t *fx = *state;
    size_t n = 50000;
    gen_entry_t *e = entries(0, n);
    gen_t *g10 = write_bits(fx->dir, gid(1), e, n, 10), *g14 = write_gen(fx->dir, gid(2), e, n);
    double r10 = filter_rate(g10, 200000), r14 = filter_rate(g14, 200000);
    assert_true(r10 < 0.02);
    assert_true(r10 > 0.002); /* a filter that passes nothing is broken too */
    assert_true(r14 < 0.005);
    assert_true(r14 < r10);
    gen_info_t info;
    gen_get_info(g14, &info);
    assert_true((double)info.memory_bytes / (double)n < 2.0);
    assert_true((double)info.file_bytes / (double)n < 30.5);
    gen_close(g10);
    gen_close(g14);
    gen_writer_t *w = NULL;
    assert_int_equal(gen_writer_open(fx->dir, gid(3), n, GEN_BLOOM_MAX_BITS + 1, &w), GEN_INVALID);
    assert_int_equal(gen_writer_open(fx->dir, (gen_id_t){5, 5}, n, 0, &w), GEN_INVALID);
    free(e);
}

/* The writer refuses keys out of order, one key too many and values it cannot hold. */
static void test_writer_refuses(void **state)
{
    tu_fixture_t *fx = *state;
    gen_entry_t *e = entries(0, 3);
    gen_writer_t *w = NULL;
    assert_int_equal(gen_writer_open(fx->dir, gid(2), 3, 0, &w), GEN_OK);
    assert_int_equal(gen_writer_add(w, &e[1]), GEN_OK);
    assert_int_equal(gen_writer_add(w, &e[0]), GEN_INVALID);
    assert_int_equal(gen_writer_finish(w, NULL), GEN_INVALID);
    gen_t *g = NULL;
    assert_int_equal(gen_open(fx->dir, gid(2), &g), GEN_NOTFOUND); /* nothing left behind */

    assert_int_equal(gen_writer_open(fx->dir, gid(3), 2, 0, &w), GEN_OK);
    assert_int_equal(gen_writer_add(w, &e[0]), GEN_OK);
    assert_int_equal(gen_writer_add(w, &e[1]), GEN_OK);
    assert_int_equal(gen_writer_add(w, &e[2]), GEN_INVALID); /* past max_keys */
    gen_writer_abort(w);

    assert_int_equal(gen_writer_open(fx->dir, gid(4), 3, 0, &w), GEN_OK);
    gen_entry_t big = e[0];
    big.offset = GEN_MAX_VALUE + 1;
    assert_int_equal(gen_writer_add(w, &big), GEN_INVALID);
    gen_writer_abort(w);
    gen_entry_t past = e[0];
    past.received_ms = -1;
    assert_int_equal(gen_writer_open(fx->dir, gid(4), 3, 0, &w), GEN_OK);
    assert_int_equal(gen_writer_add(w, &past), GEN_INVALID);
    gen_writer_abort(w);
    free(e);
}

/* An empty generation is a valid file that finds nothing. */
static void test_empty(void **state)
{
    tu_fixture_t *fx = *state;
    gen_t *g = write_gen(fx->dir, gid(9), NULL, 0);
    uint8_t key[KEYHASH_LEN];
    bool found = true;
    mkkey(1, key);
    assert_int_equal(gen_find(g, key, &found, NULL), GEN_OK);
    assert_false(found);
    assert_int_equal(gen_verify(g), GEN_OK);
    gen_close(g);
}

/* Flips one byte at `at` (from the end when negative) of generation `id`'s file. */
static void flip(const char *dir, gen_id_t id, long at)
{
    char name[GEN_NAME_MAX], path[512];
    gen_file_name(id, name, sizeof(name));
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, at, at < 0 ? SEEK_END : SEEK_SET), 0);
    int c = fgetc(f);
    assert_int_equal(fseek(f, -1, SEEK_CUR), 0);
    fputc(c ^ 0x40, f);
    assert_int_equal(fclose(f), 0);
}

/* Damage anywhere is found: the footer, filter and fences at open, the records by verify. */
static void test_damage(void **state)
{
    tu_fixture_t *fx = *state;
    size_t n = 1000;
    gen_entry_t *e = entries(0, n);
    gen_close(write_gen(fx->dir, gid(5), e, n));
    gen_t *g = NULL;
    flip(fx->dir, gid(5), -10); /* footer */
    assert_int_equal(gen_open(fx->dir, gid(5), &g), GEN_CORRUPT);
    flip(fx->dir, gid(5), -10);
    flip(fx->dir, gid(5), -(GEN_FOOTER_BYTES + 3)); /* fences */
    assert_int_equal(gen_open(fx->dir, gid(5), &g), GEN_CORRUPT);
    flip(fx->dir, gid(5), -(GEN_FOOTER_BYTES + 3));
    flip(fx->dir, gid(5), 100); /* a record */
    assert_int_equal(gen_open(fx->dir, gid(5), &g), GEN_OK);
    assert_int_equal(gen_verify(g), GEN_CORRUPT);
    gen_close(g);
    /* A file cut short. */
    char name[GEN_NAME_MAX], path[512];
    gen_file_name(gid(5), name, sizeof(name));
    snprintf(path, sizeof(path), "%s/%s", fx->dir, name);
    assert_int_equal(truncate(path, 4096), 0);
    assert_int_equal(gen_open(fx->dir, gid(5), &g), GEN_CORRUPT);
    free(e);
}

/* A merge keeps every key once, the newest entry of a key in several inputs, in key order. */
static void test_merge(void **state)
{
    tu_fixture_t *fx = *state;
    gen_entry_t *a = entries(0, 3000), *b = entries(2000, 3000), *c = entries(10000, 10);
    /* b's copies of ids 2000..2999 are newer than a's. */
    for (size_t i = 0; i < 3000; i++)
        b[i].received_ms += 100000;
    gen_t *ins[3] = {write_gen(fx->dir, gid(1), a, 3000), write_gen(fx->dir, gid(2), b, 3000),
                     write_gen(fx->dir, gid(3), c, 10)};
    gen_t *m = NULL;
    assert_int_equal(gen_merge(fx->dir, (gen_id_t){100, 400}, ins, 3, 0, NULL, NULL, &m), GEN_OK);
    gen_info_t info;
    gen_get_info(m, &info);
    assert_int_equal(info.keys, 5010);
    assert_int_equal(gen_verify(m), GEN_OK);
    for (uint64_t id = 0; id < 5000; id++) {
        uint8_t key[KEYHASH_LEN];
        bool found = false;
        gen_entry_t got;
        mkkey(id, key);
        assert_int_equal(gen_find(m, key, &found, &got), GEN_OK);
        assert_true(found);
        assert_int_equal(got.offset, id);
        assert_int_equal(got.received_ms, 1000 + (int64_t)id + (id >= 2000 ? 100000 : 0));
    }
    for (int i = 0; i < 3; i++)
        gen_close(ins[i]);
    assert_int_equal(info.id.first, 100);
    assert_int_equal(info.id.end, 400);
    for (uint64_t id = 1; id <= 3; id++)
        assert_int_equal(gen_remove(fx->dir, gid(id)), GEN_OK);
    /* A copy read from the open generation after its file is gone: the same generation. */
    char copies[600];
    snprintf(copies, sizeof(copies), "%s/copies", fx->dir);
    assert_int_equal(mkdir(copies, 0700), 0);
    assert_int_equal(gen_remove(fx->dir, (gen_id_t){100, 400}), GEN_OK);
    assert_int_equal(gen_copy(m, copies), GEN_OK);
    gen_t *c2 = NULL;
    assert_int_equal(gen_open(copies, (gen_id_t){100, 400}, &c2), GEN_OK);
    assert_int_equal(gen_verify(c2), GEN_OK);
    gen_info_t ci;
    gen_get_info(c2, &ci);
    assert_int_equal(ci.keys, 5010);
    gen_close(c2);
    gen_close(m);
    assert_int_equal(gen_open(fx->dir, gid(1), &m), GEN_NOTFOUND);
    assert_int_equal(gen_remove(fx->dir, gid(1)), GEN_OK); /* already gone */
    free(a);
    free(b);
    free(c);
}

static void test_names(void **state)
{
    (void)state;
    char name[GEN_NAME_MAX];
    gen_id_t id = {0, 0};
    gen_file_name((gen_id_t){42, 1042}, name, sizeof(name));
    assert_string_equal(name, "00000000000000000042-00000000000000001042.gen");
    assert_int_equal(gen_parse_name(name, &id), 0);
    assert_int_equal(id.first, 42);
    assert_int_equal(id.end, 1042);
    assert_int_equal(gen_parse_name("00000000000000000042-00000000000000001042.gen.tmp", &id), -1);
    assert_int_equal(gen_parse_name(".00000000000000000042-00000000000000001042.gen.tmp", &id), -1);
    assert_int_equal(gen_parse_name("0000000000000000004x-00000000000000001042.gen", &id), -1);
    /* An empty or reversed range is no generation; nor are 20 digits past UINT64_MAX. */
    assert_int_equal(gen_parse_name("00000000000000000042-00000000000000000042.gen", &id), -1);
    assert_int_equal(gen_parse_name("00000000000000000043-00000000000000000042.gen", &id), -1);
    assert_int_equal(gen_parse_name("00000000000000000001-99999999999999999999.gen", &id), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_write_find, setup, teardown),
        cmocka_unit_test_setup_teardown(test_absent_and_filter_rate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_refuses, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_merge, setup, teardown),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
