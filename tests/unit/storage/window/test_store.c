/* test_store.c: the LMDB dedupe store: insert/duplicate, abort, eviction, info, secret, map growth.
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
#include <sys/wait.h>
#include <unistd.h>

#include "storage/window/store.h"
#include "testutil.h"

/* fx->base (= fx->dir): the mkdtemp dir holding the LMDB environment; removed in teardown. */
typedef tu_fixture_t fx_t;

static int setup(void **state)
{
    return tu_fixture_setup(state, "store", NULL);
}

static int teardown(void **state)
{
    return tu_fixture_teardown(state);
}

/* A distinct 16-byte key per integer. */
static void mkkey(uint64_t i, uint8_t key[KEYHASH_LEN])
{
    for (int b = 0; b < 8; b++)
        key[b] = (uint8_t)(i >> (8 * b));
    for (int b = 8; b < KEYHASH_LEN; b++)
        key[b] = (uint8_t)(0xa5 ^ b ^ (i * 7));
}

static store_t *open_store(const fx_t *fx, uint64_t map_size)
{
    store_options_t o = {.map_size = map_size};
    store_t *st = NULL;
    assert_int_equal(store_open(fx->dir, &o, &st), STORE_OK);
    assert_non_null(st);
    return st;
}

static void insert(store_t *st, uint64_t i, int64_t received_ms, bool want_dup)
{
    uint8_t key[KEYHASH_LEN];
    bool dup = !want_dup;
    mkkey(i, key);
    assert_int_equal(store_insert(st, key, received_ms, i, &dup), STORE_OK);
    assert_int_equal(dup, want_dup);
}

static bool contains(store_t *st, uint64_t i)
{
    uint8_t key[KEYHASH_LEN];
    bool present = false;
    mkkey(i, key);
    assert_int_equal(store_contains(st, key, &present), STORE_OK);
    return present;
}

/* Commits keys first..first+n-1 with receivedAt base + 100 * i, in one transaction. */
static void insert_committed(store_t *st, uint64_t first, uint64_t n, int64_t base)
{
    assert_int_equal(store_txn_begin(st), STORE_OK);
    for (uint64_t i = first; i < first + n; i++)
        insert(st, i, base + 100 * (int64_t)i, false);
    assert_int_equal(store_txn_commit(st), STORE_OK);
}

static void test_insert_and_duplicate(void **state)
{
    fx_t *fx = *state;
    store_t *st = open_store(fx, 0);
    store_info_t si;

    assert_int_equal(store_txn_begin(st), STORE_OK);
    insert(st, 1, 1000, false);
    /* The same key again inside the same transaction. */
    insert(st, 1, 1001, true);
    insert(st, 2, 1002, false);
    assert_true(contains(st, 1));
    assert_true(contains(st, 2));
    assert_false(contains(st, 3));
    assert_int_equal(store_txn_commit(st), STORE_OK);

    assert_true(contains(st, 1));
    assert_true(contains(st, 2));
    assert_int_equal(store_txn_begin(st), STORE_OK);
    insert(st, 1, 2000, true);
    insert(st, 2, 2000, true);
    insert(st, 3, 2000, false);
    assert_int_equal(store_txn_commit(st), STORE_OK);

    assert_int_equal(store_get_info(st, &si), STORE_OK);
    assert_int_equal(si.keys, 3);
    /* Duplicates take no sequence number. */
    assert_int_equal(si.next_seq, 3);
    assert_int_equal(si.oldest_received_ms, 1000);
    store_close(st);

    /* Durable across reopen. */
    st = open_store(fx, 0);
    assert_true(contains(st, 1));
    assert_true(contains(st, 3));
    assert_int_equal(store_txn_begin(st), STORE_OK);
    insert(st, 3, 3000, true);
    store_txn_abort(st);
    assert_int_equal(store_get_info(st, &si), STORE_OK);
    assert_int_equal(si.next_seq, 3);
    store_close(st);
}

static void test_abort_discards(void **state)
{
    fx_t *fx = *state;
    store_t *st = open_store(fx, 0);
    store_info_t si;

    insert_committed(st, 0, 2, 0);
    assert_int_equal(store_txn_begin(st), STORE_OK);
    assert_int_equal(store_set_applied(st, 2), STORE_OK);
    assert_int_equal(store_txn_commit(st), STORE_OK);

    assert_int_equal(store_txn_begin(st), STORE_OK);
    insert(st, 10, 5000, false);
    insert(st, 11, 5000, false);
    assert_int_equal(store_set_applied(st, 99), STORE_OK);
    /* Inside the transaction, info shows its pending sequence. */
    assert_int_equal(store_get_info(st, &si), STORE_OK);
    assert_int_equal(si.next_seq, 4);
    assert_int_equal(si.keys, 4);
    store_txn_abort(st);

    assert_false(contains(st, 10));
    assert_false(contains(st, 11));
    assert_int_equal(store_get_info(st, &si), STORE_OK);
    assert_int_equal(si.keys, 2);
    assert_int_equal(si.applied, 2);
    assert_int_equal(si.next_seq, 2);

    /* The aborted keys are new again and the sequence continues from the committed one. */
    assert_int_equal(store_txn_begin(st), STORE_OK);
    insert(st, 10, 6000, false);
    assert_int_equal(store_txn_commit(st), STORE_OK);
    assert_int_equal(store_get_info(st, &si), STORE_OK);
    assert_int_equal(si.next_seq, 3);
    assert_int_equal(si.keys, 3);
    /* abort without a transaction is harmless. */
    store_txn_abort(st);
    store_close(st);
}

static void test_info(void **state)
{
    fx_t *fx = *state;
    store_t *st = open_store(fx, 0);
    store_info_t si;

    assert_int_equal(store_get_info(st, &si), STORE_OK);
    assert_int_equal(si.keys, 0);
    assert_int_equal(si.next_seq, 0);
    assert_int_equal(si.applied, 0);
    assert_int_equal(si.oldest_received_ms, 0);
    assert_int_equal(si.map_size, 1ull << 30); /* the documented default */
    assert_true(si.used_bytes > 0);
    assert_true(si.used_bytes <= si.map_size);

    assert_int_equal(store_txn_begin(st), STORE_OK);
    insert(st, 7, 3000, false);
    insert(st, 8, 1000, false); /* later sequence, older receivedAt */
    insert(st, 9, 2000, false);
    assert_int_equal(store_set_applied(st, 42), STORE_OK);
    assert_int_equal(store_txn_commit(st), STORE_OK);

    assert_int_equal(store_get_info(st, &si), STORE_OK);
    assert_int_equal(si.keys, 3);
    assert_int_equal(si.next_seq, 3);
    assert_int_equal(si.applied, 42);
    /* "Oldest" is the first in sequence (insertion) order. */
    assert_int_equal(si.oldest_received_ms, 3000);
    store_close(st);

    st = open_store(fx, 0);
    assert_int_equal(store_get_info(st, &si), STORE_OK);
    assert_int_equal(si.keys, 3);
    assert_int_equal(si.next_seq, 3);
    assert_int_equal(si.applied, 42);
    store_close(st);
}

/* Evicts in its own transaction and checks how many keys went for age and for size. */
static void evict(store_t *st, int64_t older_than, uint64_t max_keys, size_t steps,
                  uint64_t want_age, uint64_t want_size)
{
    uint64_t age = 0, size = 0;
    assert_int_equal(store_txn_begin(st), STORE_OK);
    assert_int_equal(store_evict(st, older_than, max_keys, steps, &age, &size), STORE_OK);
    assert_int_equal(store_txn_commit(st), STORE_OK);
    assert_int_equal(age, want_age);
    assert_int_equal(size, want_size);
}

/* The store holds `keys` keys, the oldest received at oldest_ms (0 when empty). */
static void expect_keys(store_t *st, uint64_t keys, int64_t oldest_ms)
{
    store_info_t si;
    assert_int_equal(store_get_info(st, &si), STORE_OK);
    assert_int_equal(si.keys, keys);
    assert_int_equal(si.oldest_received_ms, oldest_ms);
}

static void test_evict_by_age(void **state)
{
    fx_t *fx = *state;
    store_t *st = open_store(fx, 0);
    store_info_t si;

    insert_committed(st, 1, 10, 0); /* receivedAt 100 .. 1000 */
    evict(st, 550, 0, 100, 5, 0);
    for (uint64_t i = 1; i <= 10; i++)
        assert_int_equal(contains(st, i), i > 5);
    assert_int_equal(store_get_info(st, &si), STORE_OK);
    assert_int_equal(si.keys, 5);
    assert_int_equal(si.oldest_received_ms, 600);
    /* Eviction takes no sequence numbers. */
    assert_int_equal(si.next_seq, 10);

    /* Nothing older than the bound: no-op. */
    evict(st, 600, 0, 100, 0, 0);

    /* An evicted key is new again and becomes the youngest. */
    assert_int_equal(store_txn_begin(st), STORE_OK);
    insert(st, 1, 5000, false);
    assert_int_equal(store_txn_commit(st), STORE_OK);
    evict(st, 1001, 0, 100, 5, 0);
    assert_true(contains(st, 1));
    expect_keys(st, 1, 5000);

    /* Everything old: the store empties and reports no oldest key. */
    evict(st, INT64_MAX, 0, 100, 1, 0);
    expect_keys(st, 0, 0);
    evict(st, INT64_MAX, 0, 100, 0, 0);
    store_close(st);
}

static void test_evict_bounded_steps(void **state)
{
    fx_t *fx = *state;
    store_t *st = open_store(fx, 0);
    store_info_t si;

    insert_committed(st, 1, 10, 0);
    evict(st, INT64_MAX, 0, 3, 3, 0);
    expect_keys(st, 7, 400);
    assert_false(contains(st, 3));
    assert_true(contains(st, 4));

    evict(st, INT64_MAX, 0, 0, 0, 0);
    assert_int_equal(store_get_info(st, &si), STORE_OK);
    assert_int_equal(si.keys, 7);

    evict(st, INT64_MIN, 2, 4, 0, 4);
    assert_int_equal(store_get_info(st, &si), STORE_OK);
    assert_int_equal(si.keys, 3);

    /* Counters accumulate into the caller's totals. */
    uint64_t age = 10, size = 20;
    assert_int_equal(store_txn_begin(st), STORE_OK);
    assert_int_equal(store_evict(st, INT64_MIN, 2, 100, &age, &size), STORE_OK);
    assert_int_equal(store_txn_commit(st), STORE_OK);
    assert_int_equal(age, 10);
    assert_int_equal(size, 21);
    store_close(st);
}

static void test_evict_by_size(void **state)
{
    fx_t *fx = *state;
    store_t *st = open_store(fx, 0);

    insert_committed(st, 1, 10, 0);
    evict(st, INT64_MIN, 4, 100, 0, 6);
    for (uint64_t i = 1; i <= 10; i++)
        assert_int_equal(contains(st, i), i > 6); /* the four newest stay */
    expect_keys(st, 4, 700);

    /* At the bound: nothing to do. */
    evict(st, INT64_MIN, 4, 100, 0, 0);
    store_close(st);
}

static void test_evict_both_reasons(void **state)
{
    fx_t *fx = *state;
    store_t *st = open_store(fx, 0);

    insert_committed(st, 1, 10, 0);
    /* 100 and 200 are too old; then 8 keys remain for a bound of 5. */
    evict(st, 250, 5, 100, 2, 3);
    expect_keys(st, 5, 600);
    store_close(st);
}

/* Eviction inside the same transaction as inserts (how the commit writer uses it). */
static void test_evict_in_insert_txn(void **state)
{
    fx_t *fx = *state;
    store_t *st = open_store(fx, 0);
    store_info_t si;
    uint64_t age = 0, size = 0;

    insert_committed(st, 1, 3, 0);
    assert_int_equal(store_txn_begin(st), STORE_OK);
    insert(st, 4, 400, false);
    insert(st, 5, 500, false);
    assert_int_equal(store_evict(st, INT64_MIN, 2, 100, &age, &size), STORE_OK);
    assert_int_equal(size, 3);
    /* A key evicted in this transaction is new again. */
    insert(st, 1, 600, false);
    assert_int_equal(store_txn_commit(st), STORE_OK);
    assert_int_equal(store_get_info(st, &si), STORE_OK);
    assert_int_equal(si.keys, 3);
    assert_int_equal(si.next_seq, 6);
    assert_int_equal(si.oldest_received_ms, 400);
    assert_true(contains(st, 1));
    assert_false(contains(st, 2));
    store_close(st);
}

/* Reopened, the store still holds the secret `want`. */
static void expect_secret_after_reopen(const fx_t *fx, const uint8_t want[KEYHASH_SECRET_LEN])
{
    uint8_t got[KEYHASH_SECRET_LEN] = {0};
    store_t *st = open_store(fx, 0);
    assert_int_equal(store_secret(st, NULL, got), STORE_OK);
    assert_memory_equal(want, got, sizeof(got));
    store_close(st);
}

static void test_secret(void **state)
{
    fx_t *fx = *state;
    uint8_t s1[KEYHASH_SECRET_LEN], s2[KEYHASH_SECRET_LEN], other[KEYHASH_SECRET_LEN];
    store_t *st = open_store(fx, 0);

    memset(other, 0x42, sizeof(other));
    assert_int_equal(store_secret(st, NULL, s1), STORE_OK);
    assert_int_equal(store_secret(st, NULL, s2), STORE_OK);
    assert_memory_equal(s1, s2, sizeof(s1));
    /* Once stored, a supplied secret does not replace it. */
    assert_int_equal(store_secret(st, other, s2), STORE_OK);
    assert_memory_equal(s1, s2, sizeof(s1));
    store_close(st);

    expect_secret_after_reopen(fx, s1);
}

static void test_secret_in(void **state)
{
    fx_t *fx = *state;
    uint8_t in[KEYHASH_SECRET_LEN], out[KEYHASH_SECRET_LEN];
    store_t *st = open_store(fx, 0);

    for (int i = 0; i < KEYHASH_SECRET_LEN; i++)
        in[i] = (uint8_t)(0xf0 + i);
    assert_int_equal(store_secret(st, in, out), STORE_OK);
    assert_memory_equal(in, out, sizeof(in));
    store_close(st);

    expect_secret_after_reopen(fx, in);
}

static void test_map_growth(void **state)
{
    fx_t *fx = *state;
    const uint64_t map = 256 * 1024;
    const uint64_t total = 20000;
    store_t *st = open_store(fx, map);
    store_info_t si;
    uint64_t committed = 0;
    int grows = 0, fulls = 0;

    assert_int_equal(store_get_info(st, &si), STORE_OK);
    assert_int_equal(si.map_size, map);
    /* Batches of 2,000: the first few fit, then the map fills and has to grow. */
    while (committed < total) {
        uint64_t n = 2000;
        int rc = store_txn_begin(st);
        assert_int_equal(rc, STORE_OK);
        for (uint64_t i = committed; i < committed + n && rc == STORE_OK; i++) {
            uint8_t key[KEYHASH_LEN];
            bool dup = true;
            mkkey(i, key);
            rc = store_insert(st, key, (int64_t)i, i, &dup);
            if (rc == STORE_OK)
                assert_false(dup);
        }
        if (rc == STORE_OK)
            rc = store_set_applied(st, committed + n);
        if (rc == STORE_OK)
            rc = store_txn_commit(st);
        else
            store_txn_abort(st);
        if (rc == STORE_FULL) {
            fulls++;
            /* Nothing of the failed transaction is visible. */
            assert_int_equal(store_get_info(st, &si), STORE_OK);
            assert_int_equal(si.keys, committed);
            assert_int_equal(si.next_seq, committed);
            assert_false(contains(st, committed));
            uint64_t before = si.map_size;
            assert_int_equal(store_grow(st), STORE_OK);
            grows++;
            assert_true(grows < 16);
            assert_int_equal(store_get_info(st, &si), STORE_OK);
            assert_int_equal(si.map_size, 2 * before);
            continue; /* redo the same batch */
        }
        assert_int_equal(rc, STORE_OK);
        committed += n;
    }
    assert_true(fulls > 0);
    assert_int_equal(store_get_info(st, &si), STORE_OK);
    assert_int_equal(si.keys, total);
    assert_int_equal(si.next_seq, total);
    assert_int_equal(si.applied, total);
    assert_true(si.map_size >= 2 * map);
    assert_true(si.used_bytes <= si.map_size);
    for (uint64_t i = 0; i < total; i++)
        assert_true(contains(st, i));
    store_close(st);

    /* Reopening with the small size again still holds everything (LMDB adopts the file size). */
    st = open_store(fx, map);
    assert_int_equal(store_get_info(st, &si), STORE_OK);
    assert_int_equal(si.keys, total);
    assert_true(contains(st, total - 1));
    store_close(st);
}

static void test_read_only_missing_dir(void **state)
{
    fx_t *fx = *state;
    store_options_t ro = {.read_only = true};
    store_t *st = NULL;
    char path[320];

    snprintf(path, sizeof(path), "%s/missing", fx->dir);
    int rc = store_open(path, &ro, &st);
    assert_int_equal(rc, STORE_NOTFOUND);
    assert_null(st);
    assert_string_equal(store_strerror(rc), "not found");

    /* An existing directory without an environment: nothing to read either. */
    rc = store_open(fx->dir, &ro, &st);
    assert_int_equal(rc, STORE_NOTFOUND);
    assert_null(st);
}

static void test_read_only_sees_committed(void **state)
{
    fx_t *fx = *state;
    store_options_t ro = {.read_only = true};
    store_t *st = open_store(fx, 0), *rst = NULL;
    store_info_t si;
    uint8_t secret[KEYHASH_SECRET_LEN], rsecret[KEYHASH_SECRET_LEN];

    assert_int_equal(store_secret(st, NULL, secret), STORE_OK);
    insert_committed(st, 1, 5, 0);
    assert_int_equal(store_txn_begin(st), STORE_OK);
    assert_int_equal(store_set_applied(st, 5), STORE_OK);
    insert(st, 6, 600, false); /* never committed */
    store_txn_abort(st);
    store_close(st);

    assert_int_equal(store_open(fx->dir, &ro, &rst), STORE_OK);
    for (uint64_t i = 1; i <= 5; i++)
        assert_true(contains(rst, i));
    assert_false(contains(rst, 6));
    assert_int_equal(store_get_info(rst, &si), STORE_OK);
    assert_int_equal(si.keys, 5);
    assert_int_equal(si.next_seq, 5);
    assert_int_equal(si.applied, 0);
    assert_int_equal(si.oldest_received_ms, 100);
    assert_int_equal(store_secret(rst, NULL, rsecret), STORE_OK);
    assert_memory_equal(secret, rsecret, sizeof(secret));
    /* No writes through a read-only handle. */
    assert_int_not_equal(store_txn_begin(rst), STORE_OK);
    store_close(rst);
}

static void test_read_only_without_secret(void **state)
{
    fx_t *fx = *state;
    store_options_t ro = {.read_only = true};
    store_t *st = open_store(fx, 0);
    uint8_t s[KEYHASH_SECRET_LEN];
    store_close(st);
    assert_int_equal(store_open(fx->dir, &ro, &st), STORE_OK);
    assert_int_equal(store_secret(st, NULL, s), STORE_NOTFOUND);
    store_close(st);
}

/* `log cat` reads while the server writes: a reader in another process sees every commit. */
static void test_read_only_other_process(void **state)
{
    fx_t *fx = *state;
    store_t *st = open_store(fx, 0);
    insert_committed(st, 1, 3, 0);

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        store_options_t ro = {.read_only = true};
        store_t *rst = NULL;
        store_info_t si;
        uint8_t key[KEYHASH_LEN];
        bool present = false;
        int ok = store_open(fx->dir, &ro, &rst) == STORE_OK;
        mkkey(3, key);
        ok = ok && store_contains(rst, key, &present) == STORE_OK && present;
        ok = ok && store_get_info(rst, &si) == STORE_OK && si.keys == 3;
        store_close(rst);
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    store_close(st);
}

static void test_misuse(void **state)
{
    fx_t *fx = *state;
    store_t *st = open_store(fx, 0);
    int cleared = -1;

    assert_int_equal(store_txn_begin(st), STORE_OK);
    /* One transaction at a time; no growing under a transaction. */
    assert_int_not_equal(store_txn_begin(st), STORE_OK);
    assert_int_not_equal(store_grow(st), STORE_OK);
    store_txn_abort(st);
    assert_int_equal(store_reader_check(st, &cleared), STORE_OK);
    assert_int_equal(cleared, 0);
    assert_non_null(store_detail(st));
    store_close(st);
    store_close(NULL);

    const int codes[] = {STORE_OK,      STORE_FULL, STORE_EIO,   STORE_CORRUPT, STORE_NOMEM,
                         STORE_VERSION, STORE_BUSY, STORE_ERROR, STORE_NOTFOUND};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        assert_non_null(store_strerror(codes[i]));
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(store_strerror(codes[i]), store_strerror(codes[j]));
    }
}

/* store_lookup: the offset stored with a key (the Kafka worker's owner), in and out of a txn. */
static void test_lookup_owner(void **state)
{
    fx_t *fx = *state;
    store_t *st = open_store(fx, 0);
    uint8_t key[KEYHASH_LEN];
    uint64_t off = 1;
    bool present = true;

    assert_int_equal(store_txn_begin(st), STORE_OK);
    for (uint64_t i = 0; i < 300; i++) /* more than one `seq` bucket */
        insert(st, i, 1000 + (int64_t)i, false);
    mkkey(7, key);
    assert_int_equal(store_lookup(st, key, &present, &off), STORE_OK);
    assert_true(present);
    assert_int_equal(off, 7);
    assert_int_equal(store_txn_commit(st), STORE_OK);

    mkkey(299, key);
    assert_int_equal(store_lookup(st, key, &present, &off), STORE_OK);
    assert_true(present);
    assert_int_equal(off, 299);
    mkkey(300, key);
    assert_int_equal(store_lookup(st, key, &present, &off), STORE_OK);
    assert_false(present);
    assert_int_equal(off, 0);

    /* An aged-out key has no owner any more. */
    uint64_t ea = 0, es = 0;
    assert_int_equal(store_txn_begin(st), STORE_OK);
    assert_int_equal(store_evict(st, 1010, 0, 100, &ea, &es), STORE_OK);
    assert_int_equal(store_txn_commit(st), STORE_OK);
    mkkey(3, key);
    assert_int_equal(store_lookup(st, key, &present, &off), STORE_OK);
    assert_false(present);
    mkkey(10, key);
    assert_int_equal(store_lookup(st, key, &present, &off), STORE_OK);
    assert_true(present);
    assert_int_equal(off, 10);
    store_close(st);
}

/*
 * A reader keeps its snapshot while another thread's commits go on, and sees
 * them once refreshed: the commit writer's view of LMDB under checkpoints.
 */
typedef struct {
    store_t *st;
    uint64_t first, n;
} writer_arg_t;

static void *commit_in_thread(void *arg)
{
    writer_arg_t *w = arg;
    insert_committed(w->st, w->first, w->n, 0);
    return NULL;
}

static void test_reader_snapshot(void **state)
{
    fx_t *fx = *state;
    store_t *st = open_store(fx, 0);
    store_reader_t *r = NULL;
    store_info_t si;
    uint8_t key[KEYHASH_LEN];
    bool present;
    uint64_t seq = 0;

    insert_committed(st, 0, 300, 0); /* three `seq` buckets */
    assert_int_equal(store_reader_open(st, &r), STORE_OK);
    writer_arg_t w = {.st = st, .first = 300, .n = 100};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, commit_in_thread, &w), 0);
    assert_int_equal(pthread_join(t, NULL), 0);

    mkkey(299, key);
    assert_int_equal(store_reader_find(r, key, &present, &seq), STORE_OK);
    assert_true(present);
    assert_int_equal(seq, 299);
    mkkey(350, key);
    assert_int_equal(store_reader_find(r, key, &present, &seq), STORE_OK);
    assert_false(present); /* committed after the snapshot */
    assert_int_equal(store_reader_info(r, &si), STORE_OK);
    assert_int_equal(si.keys, 300);
    assert_int_equal(si.next_seq, 300);

    assert_int_equal(store_reader_refresh(r), STORE_OK);
    assert_int_equal(store_reader_find(r, key, &present, &seq), STORE_OK);
    assert_true(present);
    assert_int_equal(seq, 350);
    assert_int_equal(store_reader_info(r, &si), STORE_OK);
    assert_int_equal(si.keys, 400);
    store_reader_close(r);
    store_close(st);
}

/* store_reader_first_from: the entry at or after a sequence, across buckets and gaps. */
static void test_reader_first_from(void **state)
{
    fx_t *fx = *state;
    store_t *st = open_store(fx, 0);
    store_reader_t *r = NULL;
    store_entry_t e;
    bool found = true;
    uint64_t evicted = 0;

    assert_int_equal(store_reader_open(st, &r), STORE_OK);
    assert_int_equal(store_reader_first_from(r, 0, &found, &e), STORE_OK);
    assert_false(found); /* empty */
    store_reader_close(r);

    insert_committed(st, 0, 400, 5000);
    assert_int_equal(store_txn_begin(st), STORE_OK);
    assert_int_equal(store_evict_below(st, 130, 1000, &evicted), STORE_OK);
    assert_int_equal(store_txn_commit(st), STORE_OK);
    assert_int_equal(evicted, 130);

    assert_int_equal(store_reader_open(st, &r), STORE_OK);
    const uint64_t from[] = {0, 129, 130, 131, 245, 246, 247, 399};
    const uint64_t want[] = {130, 130, 130, 131, 245, 246, 247, 399};
    for (size_t i = 0; i < sizeof(from) / sizeof(from[0]); i++) {
        assert_int_equal(store_reader_first_from(r, from[i], &found, &e), STORE_OK);
        assert_true(found);
        assert_int_equal(e.seq, want[i]);
        assert_int_equal(e.offset, want[i]); /* insert() stores offset i */
        assert_int_equal(e.received_ms, 5000 + 100 * (int64_t)want[i]);
        uint8_t key[KEYHASH_LEN];
        mkkey(want[i], key);
        assert_memory_equal(e.key, key, KEYHASH_LEN);
    }
    assert_int_equal(store_reader_first_from(r, 400, &found, &e), STORE_OK);
    assert_false(found);
    store_reader_close(r);
    store_close(st);
}

/*
 * store_put_seq: the sequence must be the store's next one; a key already
 * present is replaced (its old entry retired), as a key accepted again after
 * it left the window. store_evict_below deletes only below the floor, and
 * never a key's newer entry.
 */
static void test_put_seq_and_evict_below(void **state)
{
    fx_t *fx = *state;
    store_t *st = open_store(fx, 0);
    store_info_t si;
    uint8_t key[KEYHASH_LEN];
    uint64_t evicted = 0;

    insert_committed(st, 0, 10, 0); /* sequences 0..9 */
    assert_int_equal(store_txn_begin(st), STORE_OK);
    mkkey(100, key);
    assert_int_equal(store_put_seq(st, key, 11, 1, 1), STORE_ERROR); /* skips 10 */
    store_txn_abort(st);

    assert_int_equal(store_txn_begin(st), STORE_OK);
    assert_int_equal(store_put_seq(st, key, 10, 1, 100), STORE_OK);
    mkkey(3, key); /* present at sequence 3: replaced by sequence 11 */
    assert_int_equal(store_put_seq(st, key, 11, 2, 103), STORE_OK);
    assert_int_equal(store_evict_below(st, 5, 1000, &evicted), STORE_OK);
    assert_int_equal(evicted, 4); /* 0, 1, 2, 4: sequence 3 is gone already */
    assert_int_equal(store_set_applied(st, 104), STORE_OK);
    assert_int_equal(store_txn_commit(st), STORE_OK);

    assert_true(contains(st, 3));
    assert_false(contains(st, 2));
    assert_false(contains(st, 4));
    assert_true(contains(st, 5));
    assert_true(contains(st, 100));
    uint64_t off = 0;
    bool present = false;
    assert_int_equal(store_lookup(st, key, &present, &off), STORE_OK);
    assert_true(present);
    assert_int_equal(off, 103);
    assert_int_equal(store_get_info(st, &si), STORE_OK);
    assert_int_equal(si.keys, 7); /* 3, 5..9, 100 */
    assert_int_equal(si.next_seq, 12);
    assert_int_equal(si.applied, 104);
    assert_int_equal(si.oldest_offset, 5);

    /* Bounded steps, then the rest. */
    assert_int_equal(store_txn_begin(st), STORE_OK);
    evicted = 0;
    assert_int_equal(store_evict_below(st, 12, 2, &evicted), STORE_OK);
    assert_int_equal(evicted, 2);
    assert_int_equal(store_evict_below(st, 12, 100, &evicted), STORE_OK);
    assert_int_equal(evicted, 7);
    assert_int_equal(store_txn_commit(st), STORE_OK);
    assert_int_equal(store_get_info(st, &si), STORE_OK);
    assert_int_equal(si.keys, 0);
    store_close(st);
}

/* What store_scan saw: entries, keys, keys not named back (and of them those past next_seq). */
typedef struct {
    uint64_t seqs, keys, not_named_back, past_next;
    bool seen_retired;        /* sequence 3 or 610 (test_put_entries_in_key_order retires both) */
    const store_info_t *info; /* the scan's, for next_seq */
} scan_tally_t;

static int tally_seq(void *arg, uint64_t seq, const uint8_t key[KEYHASH_LEN], int64_t received_ms,
                     uint64_t log_offset)
{
    scan_tally_t *n = arg;
    (void)key, (void)received_ms, (void)log_offset;
    n->seqs++;
    if (seq == 3 || seq == 610)
        n->seen_retired = true;
    return 0;
}

static int tally_key(void *arg, const uint8_t key[KEYHASH_LEN], uint64_t seq, bool seq_ok)
{
    scan_tally_t *n = arg;
    (void)key;
    n->keys++;
    n->not_named_back += !seq_ok;
    n->past_next += !seq_ok && seq >= n->info->next_seq;
    return 0;
}

/*
 * store_put_entries (the checkpointer's batch, put in key order) ends as one
 * store_put_seq per entry in sequence order would: a key already present is
 * replaced, a key twice in the batch keeps its newer entry, and a batch
 * numbered from another state of the store is refused before any write.
 */
static void test_put_entries_in_key_order(void **state)
{
    fx_t *fx = *state;
    store_t *st = open_store(fx, 0);
    enum { N = 2000 };
    store_entry_t *e = calloc(N, sizeof(*e));
    store_info_t si;
    assert_non_null(e);

    insert_committed(st, 0, 10, 0); /* sequences 0..9 */
    for (uint64_t j = 0; j < N; j++) {
        /* Distinct keys in no particular order (2003 is prime), but three. */
        uint64_t k = j == 500 ? 3 : j == 600 || j == 1500 ? 50000 : 100 + (j * 7919) % 2003;
        e[j].seq = 10 + j;
        mkkey(k, e[j].key);
        e[j].received_ms = 1000 + (int64_t)j;
        e[j].offset = 1000 + j;
    }

    assert_int_equal(store_txn_begin(st), STORE_OK);
    assert_int_equal(store_put_entries(st, e + 1, N - 1), STORE_ERROR); /* starts at 11 */
    assert_int_equal(store_get_info(st, &si), STORE_OK);
    assert_int_equal(si.next_seq, 10); /* nothing written */
    assert_int_equal(store_put_entries(st, e, N), STORE_OK);
    assert_int_equal(store_txn_commit(st), STORE_OK);

    assert_int_equal(store_get_info(st, &si), STORE_OK);
    assert_int_equal(si.next_seq, 10 + N);
    assert_int_equal(si.keys, 10 + N - 2); /* key 3 replaced, key 50000 put twice */
    for (uint64_t j = 0; j < N; j++) {
        bool present = false;
        uint64_t off = 0;
        assert_int_equal(store_lookup(st, e[j].key, &present, &off), STORE_OK);
        assert_true(present);
        assert_int_equal(off, j == 600 ? 1000 + 1500 : 1000 + j); /* the newer entry wins */
    }
    assert_true(contains(st, 4));

    scan_tally_t n = {.info = &si};
    assert_int_equal(store_scan(st, &si, tally_seq, tally_key, &n), STORE_OK);
    assert_int_equal(n.seqs, 10 + N - 2);
    assert_int_equal(n.keys, 10 + N - 2);
    assert_int_equal(n.not_named_back, 0);
    assert_false(n.seen_retired);
    free(e);
    store_close(st);
}

/*
 * Eviction reads the oldest entries in rounds (65,536 at a time) and deletes
 * their keys in key order: bounds and counts stay exact across rounds, by
 * sequence and by size.
 */
static void test_evict_in_rounds(void **state)
{
    fx_t *fx = *state;
    store_t *st = open_store(fx, 64ull << 20);
    store_info_t si;
    uint64_t evicted = 0, by_age = 0, by_size = 0;

    insert_committed(st, 0, 150000, 0);
    assert_int_equal(store_txn_begin(st), STORE_OK);
    assert_int_equal(store_evict_below(st, 70000, 66000, &evicted), STORE_OK);
    assert_int_equal(evicted, 66000);
    assert_int_equal(store_evict_below(st, 70000, 1000000, &evicted), STORE_OK);
    assert_int_equal(evicted, 70000);
    assert_int_equal(store_txn_commit(st), STORE_OK);
    assert_false(contains(st, 0));
    assert_false(contains(st, 65536));
    assert_false(contains(st, 69999));
    assert_true(contains(st, 70000));
    assert_int_equal(store_get_info(st, &si), STORE_OK);
    assert_int_equal(si.keys, 80000);
    assert_int_equal(si.oldest_offset, 70000);

    /* By size: nothing is old enough, 1,000 keys may stay. */
    assert_int_equal(store_txn_begin(st), STORE_OK);
    assert_int_equal(store_evict(st, 0, 1000, 1000000, &by_age, &by_size), STORE_OK);
    assert_int_equal(store_txn_commit(st), STORE_OK);
    assert_int_equal(by_age, 0);
    assert_int_equal(by_size, 79000);
    assert_int_equal(store_get_info(st, &si), STORE_OK);
    assert_int_equal(si.keys, 1000);
    assert_int_equal(si.oldest_offset, 149000);
    assert_true(contains(st, 149000));
    assert_false(contains(st, 148999));
    store_close(st);
}

/*
 * A checkpoint in parts (store_key_order, store_put_keys in slices, then
 * store_append_seq) that is cut short after its key transactions: the keys
 * put so far name sequences past next_seq, and a replay of the same records
 * from the applied offset (store_upsert, numbering them the same way) makes
 * the store whole again. A key re-accepted in the checkpoint retires its old
 * entry in the key transaction itself.
 */
static void test_checkpoint_in_parts_cut_short(void **state)
{
    fx_t *fx = *state;
    store_t *st = open_store(fx, 0);
    enum { N = 3000, SLICE = 1000 };
    store_entry_t *e = calloc(N, sizeof(*e));
    uint32_t *order = calloc(N, sizeof(*order));
    store_info_t si;
    assert_non_null(e);
    assert_non_null(order);

    insert_committed(st, 0, 10, 0); /* sequences 0..9, log offsets 0..9 */
    for (uint64_t j = 0; j < N; j++) {
        e[j].seq = 10 + j;
        mkkey(j == 7 ? 2 : 1000 + (j * 7919) % 3001, e[j].key); /* key 2 again, at seq 17 */
        e[j].received_ms = 5000 + (int64_t)j;
        e[j].offset = 10 + j;
    }
    assert_int_equal(store_key_order(e, N, order), STORE_OK);
    for (size_t i = 1; i < N; i++) /* key order: the first 32 bits never go down */
        assert_true(memcmp(e[order[i - 1]].key, e[order[i]].key, 4) <= 0);
    for (size_t i = 0; i < N; i += SLICE) {
        assert_int_equal(store_txn_begin(st), STORE_OK);
        assert_int_equal(store_put_keys(st, e, order + i, SLICE), STORE_OK);
        assert_int_equal(store_txn_commit(st), STORE_OK);
    }
    /* Cut short: the last transaction (sequence entries, applied offset) never ran. */
    store_close(st);
    st = open_store(fx, 0);
    scan_tally_t n = {.info = &si};
    assert_int_equal(store_scan(st, &si, tally_seq, tally_key, &n), STORE_OK);
    assert_int_equal(si.next_seq, 10);
    assert_int_equal(si.applied, 0); /* insert_committed sets none: the log replays from 0 */
    assert_int_equal(n.seqs, 9);     /* key 2's old entry retired with it */
    assert_int_equal(n.keys, 9 + N);
    assert_int_equal(n.not_named_back, N);
    assert_int_equal(n.past_next, N);

    /* The replay: the same records, in log order, numbered from next_seq. */
    assert_int_equal(store_txn_begin(st), STORE_OK);
    for (uint64_t j = 0; j < N; j++)
        assert_int_equal(store_upsert(st, e[j].key, e[j].received_ms, e[j].offset, NULL), STORE_OK);
    assert_int_equal(store_txn_commit(st), STORE_OK);
    n = (scan_tally_t){.info = &si};
    assert_int_equal(store_scan(st, &si, tally_seq, tally_key, &n), STORE_OK);
    assert_int_equal(si.next_seq, 10 + N);
    assert_int_equal(n.seqs, 9 + N);
    assert_int_equal(n.keys, 9 + N);
    assert_int_equal(n.not_named_back, 0);
    uint64_t off = 0;
    bool present = false;
    uint8_t key[KEYHASH_LEN];
    mkkey(2, key);
    assert_int_equal(store_lookup(st, key, &present, &off), STORE_OK);
    assert_true(present);
    assert_int_equal(off, 17);
    free(order);
    free(e);
    store_close(st);
}

/*
 * A checkpoint's evictions in parts (store_read_front, store_delete_keys,
 * store_cut_front): the keys go first, slice by slice, their sequence entries
 * last, whole buckets at once where they can. A key of the front put again
 * meanwhile (its old entry retired by store_put_keys) leaves a gap the cut
 * passes over, and an entry at the bound stays.
 */
static void test_evictions_in_parts(void **state)
{
    fx_t *fx = *state;
    store_t *st = open_store(fx, 0);
    enum { N = 1000, BELOW = 300, HALF = 150 };
    store_entry_t *gone = calloc(N, sizeof(*gone));
    uint32_t *order = calloc(N, sizeof(*order));
    store_info_t si;
    size_t ng = 0;
    uint64_t deleted = 0, cut = 0;
    assert_non_null(gone);
    assert_non_null(order);

    insert_committed(st, 0, N, 0); /* sequences 0..999: buckets of 123 */
    assert_int_equal(store_read_front(st, BELOW, gone, 10, &ng), STORE_OK);
    assert_int_equal(ng, 10); /* at most max */
    assert_int_equal(store_read_front(st, BELOW, gone, N, &ng), STORE_OK);
    assert_int_equal(ng, BELOW);
    for (size_t i = 0; i < ng; i++)
        assert_int_equal(gone[i].seq, i);
    assert_int_equal(store_key_order(gone, ng, order), STORE_OK);

    /* The first slice, with the mark; then a "crash". */
    assert_int_equal(store_txn_begin(st), STORE_OK);
    assert_int_equal(store_mark_evicting(st, BELOW), STORE_OK);
    assert_int_equal(store_delete_keys(st, gone, order, HALF, &deleted), STORE_OK);
    assert_int_equal(store_txn_commit(st), STORE_OK);
    assert_int_equal(deleted, HALF);
    store_close(st);
    st = open_store(fx, 0);
    scan_tally_t n = {.info = &si};
    assert_int_equal(store_scan(st, &si, tally_seq, tally_key, &n), STORE_OK);
    assert_int_equal(si.evicting_below, BELOW);
    assert_int_equal(n.seqs, N);
    assert_int_equal(n.keys, N - HALF);
    assert_int_equal(n.not_named_back, 0);

    /* The rest: a front key put again (retiring its entry), the other deletions, the cut. */
    store_entry_t again = gone[order[HALF]];
    again.seq = N;
    again.received_ms = 999999;
    assert_int_equal(store_txn_begin(st), STORE_OK);
    assert_int_equal(store_put_keys(st, &again, NULL, 1), STORE_OK);
    deleted = 0;
    assert_int_equal(store_delete_keys(st, gone, order + HALF, BELOW - HALF, &deleted), STORE_OK);
    assert_int_equal(deleted, BELOW - HALF - 1); /* the retired one was gone already */
    assert_int_equal(store_append_seq(st, &again, 1), STORE_OK);
    assert_int_equal(store_cut_front(st, BELOW, &cut), STORE_OK);
    assert_int_equal(cut, BELOW - 1);
    assert_int_equal(store_txn_commit(st), STORE_OK);
    n = (scan_tally_t){.info = &si};
    assert_int_equal(store_scan(st, &si, tally_seq, tally_key, &n), STORE_OK);
    assert_int_equal(n.seqs, N - BELOW + 1);
    assert_int_equal(n.keys, N - BELOW + 1);
    assert_int_equal(n.not_named_back, 0);
    store_entry_t first;
    assert_int_equal(store_read_front(st, UINT64_MAX, &first, 1, &ng), STORE_OK);
    assert_int_equal(ng, 1);
    assert_int_equal(first.seq, BELOW); /* the entry at the bound stays */
    bool present = true;
    assert_int_equal(store_contains(st, gone[0].key, &present), STORE_OK);
    assert_false(present);
    assert_int_equal(store_contains(st, again.key, &present), STORE_OK);
    assert_true(present);
    free(order);
    free(gone);
    store_close(st);
}

/* store_seal empties keys and seq in its transaction and records the sealed bound; sequences go
 * on from where they were. */
static void test_seal(void **state)
{
    fx_t *fx = *state;
    store_t *st = open_store(fx, 0);
    assert_int_equal(store_txn_begin(st), STORE_OK);
    for (uint64_t i = 0; i < 10; i++)
        insert(st, i, 1000, false);
    assert_int_equal(store_txn_commit(st), STORE_OK);
    assert_int_equal(store_txn_begin(st), STORE_OK);
    assert_int_equal(store_seal(st, 11), STORE_ERROR); /* past the next sequence */
    assert_int_equal(store_seal(st, 10), STORE_OK);
    assert_int_equal(store_txn_commit(st), STORE_OK);
    store_close(st);
    st = open_store(fx, 0);
    store_info_t info;
    assert_int_equal(store_get_info(st, &info), STORE_OK);
    assert_int_equal(info.keys, 0);
    assert_int_equal(info.sealed_below, 10);
    assert_int_equal(info.next_seq, 10);
    assert_false(contains(st, 3)); /* the generation files answer for it now */
    assert_int_equal(store_txn_begin(st), STORE_OK);
    insert(st, 3, 2000, false);
    assert_int_equal(store_txn_commit(st), STORE_OK);
    assert_int_equal(store_get_info(st, &info), STORE_OK);
    assert_int_equal(info.keys, 1);
    assert_int_equal(info.next_seq, 11);
    assert_int_equal(info.oldest_received_ms, 2000);
    assert_int_equal(store_seal(st, 11), STORE_ERROR); /* no transaction open */
    store_close(st);
}

/*
 * A checkpoint cut short: the slice that evicted keys 0..2 landed, the one that would have
 * evicted (or carried) 3..5 did not, and the eviction mark stands at 6. Settling finishes the
 * landed evictions and keeps 3..5, at the young end; a blind eviction below the mark (before
 * round 3) lost them, carried keys of a within-budget source among them.
 */
static void test_settle_evictions_keeps_unlanded(void **state)
{
    fx_t *fx = *state;
    store_t *st = open_store(fx, 0);
    insert_committed(st, 0, 10, 1000);
    store_entry_t front[16];
    size_t n = 0;
    assert_int_equal(store_read_front(st, 3, front, 16, &n), STORE_OK);
    assert_int_equal(n, 3);
    uint64_t deleted = 0;
    assert_int_equal(store_txn_begin(st), STORE_OK);
    assert_int_equal(store_mark_evicting(st, 6), STORE_OK);
    assert_int_equal(store_delete_keys(st, front, NULL, n, &deleted), STORE_OK);
    assert_int_equal(deleted, 3);
    assert_int_equal(store_txn_commit(st), STORE_OK);

    size_t done = 0;
    uint64_t kept = 0;
    assert_int_equal(store_txn_begin(st), STORE_OK);
    assert_int_equal(store_settle_evictions(st, 6, 100, &done, &kept), STORE_OK);
    assert_int_equal(store_txn_commit(st), STORE_OK);
    assert_int_equal(done, 6);
    assert_int_equal(kept, 3);
    for (uint64_t i = 0; i < 10; i++)
        assert_int_equal(contains(st, i), i >= 3);
    store_info_t info;
    assert_int_equal(store_get_info(st, &info), STORE_OK);
    assert_int_equal(info.keys, 7);
    assert_int_equal(info.evicting_below, 0);
    /* Every sequence entry names a key that names it back: 6..9, then 3..5 moved on. */
    assert_int_equal(store_read_front(st, UINT64_MAX, front, 16, &n), STORE_OK);
    assert_int_equal(n, 7);
    for (size_t i = 0; i < n; i++) {
        uint8_t key[KEYHASH_LEN];
        mkkey(i < 4 ? 6 + i : i - 1, key);
        assert_memory_equal(front[i].key, key, KEYHASH_LEN);
        assert_int_equal(front[i].seq, 6 + i);                    /* 6..9, then 10..12 */
        assert_int_equal(front[i].offset, i < 4 ? 6 + i : i - 1); /* offsets kept */
    }
    store_close(st);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_insert_and_duplicate),
        T(test_abort_discards),
        T(test_info),
        T(test_evict_by_age),
        T(test_evict_bounded_steps),
        T(test_evict_by_size),
        T(test_evict_both_reasons),
        T(test_evict_in_insert_txn),
        T(test_secret),
        T(test_secret_in),
        T(test_map_growth),
        T(test_read_only_missing_dir),
        T(test_read_only_sees_committed),
        T(test_read_only_without_secret),
        T(test_read_only_other_process),
        T(test_misuse),
        T(test_lookup_owner),
        T(test_reader_snapshot),
        T(test_reader_first_from),
        T(test_put_seq_and_evict_below),
        T(test_put_entries_in_key_order),
        T(test_evict_in_rounds),
        T(test_checkpoint_in_parts_cut_short),
        T(test_evictions_in_parts),
        T(test_seal),
        T(test_settle_evictions_keeps_unlanded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
