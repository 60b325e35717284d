/* test_seal.c: sealing the young store into generations, a crash between file and LMDB, and the
 * drops and merges of seal_maintain; real LMDB and real files in a temporary directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "storage/window/seal.h"
#include "testutil.h"

typedef struct {
    tu_fixture_t fx;
    char gens[300];
    store_t *st;
    genset_t *gs;
} seal_fx_t;

static void mkkey(uint64_t i, uint8_t key[KEYHASH_LEN])
{
    static const uint8_t secret[KEYHASH_SECRET_LEN] = "seal-test-secret";
    char id[32];
    int n = snprintf(id, sizeof(id), "m-%llu", (unsigned long long)i);
    keyhash(secret, "default", 7, id, (size_t)n, key);
}

static void open_both(seal_fx_t *f)
{
    store_options_t o = {0};
    assert_int_equal(store_open(f->fx.dir, &o, &f->st), STORE_OK);
    assert_int_equal(genset_open(f->gens, 0, &f->gs), GEN_OK);
}

static void close_both(seal_fx_t *f)
{
    genset_close(f->gs);
    store_close(f->st);
    f->gs = NULL;
    f->st = NULL;
}

static int setup(void **state)
{
    seal_fx_t *f = calloc(1, sizeof(*f));
    if (!f || tu_tempdir(f->fx.base, sizeof(f->fx.base), "seal") != 0)
        return -1;
    snprintf(f->fx.dir, sizeof(f->fx.dir), "%s", f->fx.base);
    snprintf(f->gens, sizeof(f->gens), "%s/gens", f->fx.base);
    open_both(f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    seal_fx_t *f = *state;
    close_both(f);
    int rc = tu_rm_rf(f->fx.base);
    free(f);
    return rc;
}

/* Ids [from, from + n) into the young store, received at rx + id, log offset = id. */
static void insert(store_t *st, uint64_t from, uint64_t n, int64_t rx)
{
    assert_int_equal(store_txn_begin(st), STORE_OK);
    for (uint64_t i = from; i < from + n; i++) {
        uint8_t key[KEYHASH_LEN];
        bool dup = true;
        mkkey(i, key);
        assert_int_equal(store_insert(st, key, rx + (int64_t)i, i, &dup), STORE_OK);
        assert_false(dup);
    }
    assert_int_equal(store_txn_commit(st), STORE_OK);
}

/* Where id is: 1 in the young store, 2 in a generation (then *rx), 0 nowhere. */
static int where(seal_fx_t *f, uint64_t id, int64_t *rx)
{
    uint8_t key[KEYHASH_LEN];
    bool present = false, found = false;
    gen_entry_t e;
    mkkey(id, key);
    assert_int_equal(store_contains(f->st, key, &present), STORE_OK);
    genset_view_t *v = genset_view(f->gs);
    assert_int_equal(genset_view_find(v, key, &found, &e), GEN_OK);
    genset_view_release(v);
    assert_false(present && found); /* never in both once a seal is done */
    if (found && rx)
        *rx = e.received_ms;
    return present ? 1 : found ? 2 : 0;
}

static size_t gen_count(seal_fx_t *f)
{
    genset_view_t *v = genset_view(f->gs);
    size_t n = genset_view_count(v);
    genset_view_release(v);
    return n;
}

/* Two seals: the young store empties each time, the generations cover consecutive ranges. */
static seal_recovery_t rec; /* what the last seal_recover repaired */

static void test_seal_young(void **state)
{
    seal_fx_t *f = *state;
    uint64_t sealed = 99;
    assert_int_equal(seal_young(f->st, f->gs, 0, &sealed), STORE_OK);
    assert_int_equal(sealed, 0); /* empty: nothing to do */
    assert_int_equal(gen_count(f), 0);
    insert(f->st, 0, 3000, 1000);
    assert_int_equal(seal_young(f->st, f->gs, 0, &sealed), STORE_OK);
    assert_int_equal(sealed, 3000);
    insert(f->st, 3000, 500, 1000);
    assert_int_equal(where(f, 3001, NULL), 1);
    assert_int_equal(seal_young(f->st, f->gs, 0, &sealed), STORE_OK);
    assert_int_equal(sealed, 500);
    store_info_t si;
    assert_int_equal(store_get_info(f->st, &si), STORE_OK);
    assert_int_equal(si.keys, 0);
    assert_int_equal(si.sealed_below, 3500);
    genset_view_t *v = genset_view(f->gs);
    assert_int_equal(genset_view_count(v), 2);
    gen_info_t a, b;
    gen_get_info(genset_view_gen(v, 0), &a);
    gen_get_info(genset_view_gen(v, 1), &b);
    genset_view_release(v);
    assert_int_equal(a.id.first, 0);
    assert_int_equal(a.id.end, 3000);
    assert_int_equal(b.id.first, 3000);
    assert_int_equal(b.id.end, 3500);
    for (uint64_t id = 0; id < 3500; id += 13) {
        int64_t rx = 0;
        assert_int_equal(where(f, id, &rx), 2);
        assert_int_equal(rx, 1000 + (int64_t)id);
    }
    /* Reopened: the same, and new keys go on from sequence 3500. */
    close_both(f);
    open_both(f);
    assert_int_equal(seal_recover(f->st, f->gs, &rec), STORE_OK);
    assert_int_equal(where(f, 42, NULL), 2);
    insert(f->st, 9000, 1, 0);
    assert_int_equal(store_get_info(f->st, &si), STORE_OK);
    assert_int_equal(si.next_seq, 3501);
}

/* A crash after the generation file, before store_seal: the next open finishes the seal. */
static void test_recover_half_seal(void **state)
{
    seal_fx_t *f = *state;
    insert(f->st, 0, 1000, 0);
    /* What seal_young does up to its LMDB transaction. */
    store_entry_t *raw = calloc(1000, sizeof(*raw));
    gen_entry_t *e = calloc(1000, sizeof(*e));
    size_t n = 0;
    assert_int_equal(store_read_front(f->st, UINT64_MAX, raw, 1000, &n), STORE_OK);
    assert_int_equal(n, 1000);
    for (size_t i = 0; i < n; i++) {
        memcpy(e[i].key, raw[i].key, KEYHASH_LEN);
        e[i].offset = raw[i].offset;
        e[i].received_ms = raw[i].received_ms;
    }
    for (size_t i = 1; i < n; i++) /* insertion sort: the test's own, not the module's */
        for (size_t j = i; j > 0 && memcmp(e[j - 1].key, e[j].key, KEYHASH_LEN) > 0; j--) {
            gen_entry_t t = e[j];
            e[j] = e[j - 1];
            e[j - 1] = t;
        }
    gen_writer_t *w = NULL;
    assert_int_equal(gen_writer_open(f->gens, (gen_id_t){0, 1000}, n, 0, &w), GEN_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(gen_writer_add(w, &e[i]), GEN_OK);
    assert_int_equal(gen_writer_finish(w, NULL), GEN_OK);
    free(raw);
    free(e);
    close_both(f); /* the "crash" */
    open_both(f);
    assert_int_equal(seal_recover(f->st, f->gs, &rec), STORE_OK);
    store_info_t si;
    assert_int_equal(store_get_info(f->st, &si), STORE_OK);
    assert_int_equal(si.keys, 0);
    assert_int_equal(si.sealed_below, 1000);
    for (uint64_t id = 0; id < 1000; id += 7)
        assert_int_equal(where(f, id, NULL), 2);
    assert_int_equal(seal_recover(f->st, f->gs, &rec), STORE_OK); /* again: nothing to do */
}

/* A checkpoint cut short (keys put, their sequence entries not yet): not sealed, not damaged. */
static void test_no_seal_while_not_whole(void **state)
{
    seal_fx_t *f = *state;
    insert(f->st, 0, 100, 0);
    store_info_t si;
    assert_int_equal(store_get_info(f->st, &si), STORE_OK);
    store_entry_t e[10];
    for (uint64_t i = 0; i < 10; i++) {
        e[i].seq = si.next_seq + i;
        mkkey(1000 + i, e[i].key);
        e[i].received_ms = 5;
        e[i].offset = 1000 + i;
    }
    assert_int_equal(store_txn_begin(f->st), STORE_OK);
    assert_int_equal(store_put_keys(f->st, e, NULL, 10), STORE_OK);
    assert_int_equal(store_txn_commit(f->st), STORE_OK);
    uint64_t sealed = 9;
    assert_int_equal(seal_young(f->st, f->gs, 0, &sealed), STORE_BUSY);
    assert_int_equal(sealed, 0);
    assert_int_equal(gen_count(f), 0);
    assert_int_equal(where(f, 5, NULL), 1);
    /* The replay makes the checkpoint whole; then it seals. */
    assert_int_equal(store_txn_begin(f->st), STORE_OK);
    assert_int_equal(store_append_seq(f->st, e, 10), STORE_OK);
    assert_int_equal(store_txn_commit(f->st), STORE_OK);
    assert_int_equal(seal_young(f->st, f->gs, 0, &sealed), STORE_OK);
    assert_int_equal(sealed, 110);
}

/*
 * A generation past the store's next sequence: the store lost its last commits to a power loss
 * after a seal wrote its file (ingestd before round 3 did not flush the store first). The start
 * must not refuse: the seal is finished past the generation, every key of it stays found.
 */
static void test_recover_after_lost_commits(void **state)
{
    seal_fx_t *f = *state;
    insert(f->st, 0, 100, 0); /* durable: sequences 0..99 */
    gen_writer_t *w = NULL;
    gen_entry_t *e = calloc(150, sizeof(*e));
    for (uint64_t i = 0; i < 150; i++) { /* what the lost commits had: 50 keys more */
        mkkey(i, e[i].key);
        e[i].offset = 1 + i;
        e[i].received_ms = 1000 + (int64_t)i;
    }
    for (size_t i = 1; i < 150; i++)
        for (size_t j = i; j > 0 && memcmp(e[j - 1].key, e[j].key, KEYHASH_LEN) > 0; j--) {
            gen_entry_t t = e[j];
            e[j] = e[j - 1];
            e[j - 1] = t;
        }
    assert_int_equal(gen_writer_open(f->gens, (gen_id_t){0, 150}, 150, 0, &w), GEN_OK);
    for (size_t i = 0; i < 150; i++)
        assert_int_equal(gen_writer_add(w, &e[i]), GEN_OK);
    assert_int_equal(gen_writer_finish(w, NULL), GEN_OK);
    free(e);
    close_both(f);
    open_both(f);
    assert_int_equal(seal_recover(f->st, f->gs, &rec), STORE_OK);
    assert_true(rec.finished);
    assert_true(rec.rebased);
    assert_int_equal(rec.lost_from, 100);
    assert_int_equal(rec.end_seq, 150);
    store_info_t si;
    assert_int_equal(store_get_info(f->st, &si), STORE_OK);
    assert_int_equal(si.keys, 0);
    assert_int_equal(si.sealed_below, 150);
    assert_int_equal(si.next_seq, 150);
    for (uint64_t id = 0; id < 150; id++)
        assert_int_equal(where(f, id, NULL), 2);
    insert(f->st, 9000, 1, 0); /* new keys go on past the generation */
    assert_int_equal(store_get_info(f->st, &si), STORE_OK);
    assert_int_equal(si.next_seq, 151);
    assert_int_equal(seal_recover(f->st, f->gs, &rec), STORE_OK); /* again: nothing to do */
    assert_false(rec.finished);
}

/* seal_maintain drops by age with the keys counted, keeps max_keys, and never rewrites. Each
 * drop is recorded in the store before its files go; when it cannot be, nothing is dropped. */
static void test_maintain(void **state)
{
    seal_fx_t *f = *state;
    uint64_t sealed;
    store_info_t si;
    for (uint64_t g = 0; g < 6; g++) {
        insert(f->st, g * 100, 100, (int64_t)g * 10000);
        assert_int_equal(seal_young(f->st, f->gs, 0, &sealed), STORE_OK);
    }
    assert_int_equal(store_get_info(f->st, &si), STORE_OK);
    assert_int_equal(si.dropped_below, 0); /* a new store: nothing dropped */
    seal_result_t r;
    genset_policy_t p = {.window_ms = 25000, .fanin = 0};
    /* Newest keys: generation g at 10000 g + 100 g + 99. At now 40000 generation 0 (newest key
     * 99) and 1 (10199) are older than the window; 2 (20299) is not. */
    assert_int_equal(store_txn_begin(f->st), STORE_OK); /* the record cannot be made: */
    assert_int_not_equal(seal_maintain(f->st, f->gs, &p, 40000, 0, &r), STORE_OK);
    store_txn_abort(f->st);
    assert_int_equal(gen_count(f), 6); /* nothing dropped */
    assert_int_equal(seal_maintain(f->st, f->gs, &p, 40000, 0, &r), STORE_OK);
    assert_int_equal(r.dropped_age, 200);
    assert_int_equal(r.dropped_size, 0);
    assert_int_equal(gen_count(f), 4);
    assert_int_equal(store_get_info(f->st, &si), STORE_OK);
    assert_int_equal(si.dropped_below, 200); /* generation 1's end */
    assert_int_equal(where(f, 150, NULL), 0);
    assert_int_equal(where(f, 250, NULL), 2);
    p.window_ms = 1000000;
    p.max_keys = 200; /* per source: generations 5 and 4 hold 200 of it, 3 and 2 go */
    assert_int_equal(genset_set_budget(f->gs, 200), GEN_OK);
    assert_int_equal(seal_maintain(f->st, f->gs, &p, 40000, 50, &r), STORE_OK);
    assert_int_equal(r.dropped_size, 200);
    assert_int_equal(gen_count(f), 2);
    assert_int_equal(store_get_info(f->st, &si), STORE_OK);
    assert_int_equal(si.dropped_below, 400);
    /* Rewrites are the merger's alone, whatever the fan-in (genset_test's
     * test_stale_rewrite_keeps_live_file has the merge of one): the small pair stays as it is. */
    p.max_keys = 0;
    p.fanin = 2;
    p.target_count = 1;
    assert_int_equal(genset_set_budget(f->gs, 0), GEN_OK);
    genset_view_t *before = genset_view(f->gs);
    genset_plan_t plan;
    genset_plan(before, &p, 40000, 0, &plan);
    assert_int_equal(plan.merge_n, 2); /* the merger would merge them */
    assert_int_equal(seal_maintain(f->st, f->gs, &p, 40000, 0, &r), STORE_OK);
    assert_int_equal(gen_count(f), 2);
    genset_view_t *after = genset_view(f->gs);
    for (size_t i = 0; i < 2; i++)
        assert_ptr_equal(genset_view_gen(after, i), genset_view_gen(before, i));
    genset_view_release(after);
    genset_view_release(before);
    for (uint64_t id = 400; id < 600; id++)
        assert_int_equal(where(f, id, NULL), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_seal_young, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recover_half_seal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_seal_while_not_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recover_after_lost_commits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_maintain, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
