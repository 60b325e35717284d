/* test_engine.c: one window behind the engine: a batch's keys counted, evictions counted only
 * when the batch commits, a full young store sealed and its keys then found sealed, dropped
 * generations counted as evictions, counts an owner keeps across re-opens, a caller that keeps
 * its own view (the single node's checkpointer), lookups across both parts, the stats, and an
 * open that finds a generation file lost;
 * real LMDB and files in a temporary directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "storage/window/engine.h"
#include "testutil.h"

#define YOUNG 8

typedef struct {
    tu_fixture_t fx;
    merger_t *m;
    window_engine_t *e;
    window_counts_t *counts; /* NULL: the engine's own */
} engine_fx_t;

static void mkkey(uint64_t i, uint8_t key[KEYHASH_LEN])
{
    static const uint8_t secret[KEYHASH_SECRET_LEN] = "engine-test-sec";
    char id[32];
    int n = snprintf(id, sizeof(id), "m-%llu", (unsigned long long)i);
    keyhash(secret, "web", 3, id, (size_t)n, key);
}

static window_engine_options_t options(engine_fx_t *f)
{
    return (window_engine_options_t){.window_ms = 3600000,
                                     .max_keys = 1000,
                                     .young_keys = YOUNG,
                                     .merger = f->m,
                                     .merger_id = 7,
                                     .counts = f->counts};
}

/* Opens f's window; what opening found into *opened. */
static void open_engine_finding(engine_fx_t *f, window_engine_opened_t *opened)
{
    store_options_t so = {0};
    store_t *st = NULL;
    window_engine_options_t o = options(f);
    assert_int_equal(store_open(f->fx.dir, &so, &st), STORE_OK);
    assert_int_equal(window_engine_open(st, f->fx.dir, &o, &f->e, opened), STORE_OK);
}

/* Opens f's window, which finds nothing to repair and nothing missing. */
static void open_engine(engine_fx_t *f)
{
    window_engine_opened_t opened;
    open_engine_finding(f, &opened);
    assert_false(opened.recovery.finished);
    assert_false(opened.gens_missing);
}

static void on_fail(void *arg, int32_t id, int rc, size_t n)
{
    (void)arg, (void)id, (void)rc, (void)n;
}

static int setup(void **state)
{
    if (tu_fixture_setup(state, "engine", NULL) != 0)
        return -1;
    engine_fx_t *f = realloc(*state, sizeof(*f));
    if (f == NULL)
        return -1;
    *state = f;
    f->e = NULL;
    f->counts = NULL;
    genset_policy_t gp = genset_policy_for(3600000, 1000, YOUNG);
    return merger_new(&gp, on_fail, NULL, &f->m) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    engine_fx_t *f = *state;
    window_engine_close(f->e);
    merger_free(f->m);
    return tu_fixture_teardown(state);
}

/* Seals and drops as the worker does (its owner's view and counts kept by the engine). */
static window_maintained_t maintain(engine_fx_t *f, int64_t now, int64_t every_ms)
{
    window_maintain_t m = {.now_ms = now, .every_ms = every_ms};
    window_maintained_t done;
    assert_int_equal(window_engine_maintain(f->e, &m, &done), STORE_OK);
    return done;
}

/* One batch of keys [from, to) received at ts, committed or aborted. */
static void batch(engine_fx_t *f, uint64_t from, uint64_t to, int64_t ts, bool commit)
{
    store_t *st = window_engine_store(f->e);
    uint8_t key[KEYHASH_LEN];
    assert_int_equal(store_txn_begin(st), STORE_OK);
    for (uint64_t i = from; i < to; i++) {
        bool dup = false;
        mkkey(i, key);
        assert_int_equal(store_insert(st, key, ts, i, &dup), STORE_OK);
        assert_false(dup);
        assert_int_equal(window_engine_added(f->e, key), STORE_OK);
    }
    assert_int_equal(store_set_applied(st, to), STORE_OK);
    if (commit)
        assert_int_equal(window_engine_commit(f->e), STORE_OK);
    else
        window_engine_abort(f->e);
}

static void test_batch_seal_and_find(void **state)
{
    engine_fx_t *f = *state;
    int64_t now = tu_now_ms();
    window_stats_t s;
    uint8_t key[KEYHASH_LEN];
    bool found = false;
    uint64_t owner = 1;
    open_engine(f);
    batch(f, 0, 5, now, true);
    window_engine_stats(f->e, false, &s);
    assert_int_equal(s.keys, 5);
    assert_int_equal(s.generations, 0);
    maintain(f, now, 1000);
    window_engine_stats(f->e, false, &s);
    assert_int_equal(s.seals, 0); /* under YOUNG keys: nothing to seal */

    batch(f, 5, 20, now, true);
    assert_int_equal(maintain(f, now, 1000).sealed, 20);
    window_engine_stats(f->e, false, &s);
    assert_int_equal(s.seals, 1);
    assert_int_equal(s.generations, 1);
    assert_int_equal(s.generation_keys, 20);
    assert_int_equal(s.keys, 20);
    assert_true(s.generation_bytes > 0);
    assert_int_equal(window_engine_maintained(f->e), now);

    mkkey(13, key);
    assert_int_equal(window_engine_find_sealed(f->e, key, &found, &owner), STORE_OK);
    assert_true(found);
    assert_int_equal(owner, 13);
    store_entry_t e;
    int64_t oldest = 0;
    assert_int_equal(window_engine_lookup(f->e, key, &found, &e, &oldest), STORE_OK);
    assert_true(found);
    assert_int_equal(e.offset, 13);
    assert_int_equal(oldest, now);
    mkkey(99, key);
    assert_int_equal(window_engine_find_sealed(f->e, key, &found, &owner), STORE_OK);
    assert_false(found);
    assert_int_equal(owner, 0);
}

static void test_evictions_count_when_committed(void **state)
{
    engine_fx_t *f = *state;
    int64_t now = tu_now_ms(), old = now - 7200000; /* past the hour's window */
    window_policy_t wp = {.window_ms = 3600000, .max_keys = 1000};
    window_stats_t s;
    open_engine(f);
    batch(f, 0, 3, old, true);
    const srcmap_t *sm = window_engine_sources(f->e);
    assert_int_equal(srcmap_count(sm), 1);
    assert_int_equal(srcmap_entries(sm)[0].keys, 3);

    /* aborted: its evictions and its key are not counted */
    assert_int_equal(store_txn_begin(window_engine_store(f->e)), STORE_OK);
    assert_int_equal(window_engine_evict(f->e, window_before_batch(&wp, now, 1)), STORE_OK);
    window_engine_abort(f->e);
    window_engine_stats(f->e, false, &s);
    assert_int_equal(s.evicted_age, 0);
    assert_int_equal(s.keys, 3);
    assert_int_equal(srcmap_entries(window_engine_sources(f->e))[0].keys, 3);

    assert_int_equal(store_txn_begin(window_engine_store(f->e)), STORE_OK);
    assert_int_equal(window_engine_evict(f->e, window_before_batch(&wp, now, 1)), STORE_OK);
    assert_int_equal(window_engine_commit(f->e), STORE_OK);
    window_engine_stats(f->e, false, &s);
    assert_int_equal(s.evicted_age, 3);
    assert_int_equal(s.keys, 0);
    assert_int_equal(srcmap_entries(window_engine_sources(f->e))[0].keys, 0);
}

static void test_reopen_keeps_the_window(void **state)
{
    engine_fx_t *f = *state;
    int64_t now = tu_now_ms();
    window_stats_t s;
    open_engine(f);
    batch(f, 0, 12, now, true);
    maintain(f, now, 1000);
    batch(f, 12, 15, now, true);
    window_engine_close(f->e);
    f->e = NULL;
    open_engine(f);
    window_engine_stats(f->e, false, &s);
    assert_int_equal(s.keys, 15);
    assert_int_equal(s.generations, 1);
    assert_int_equal(s.seals, 0); /* counted since this open */
    assert_int_equal(srcmap_entries(window_engine_sources(f->e))[0].keys, 3); /* young part */
}

/*
 * A generation file lost (here the newest of two) leaves a hole below the store's sealed bound:
 * opening says so, with the range, for its owner to log (the worker's partitions, the single
 * node's start). Every other open of these tests asserts it says nothing (open_engine).
 */
static void test_open_finds_lost_generation(void **state)
{
    engine_fx_t *f = *state;
    int64_t now = tu_now_ms();
    open_engine(f);
    batch(f, 0, 12, now, true);
    maintain(f, now, 1000);
    batch(f, 12, 24, now, true);
    maintain(f, now, 1000);
    const genset_view_t *v = window_engine_view(f->e); /* borrowed */
    assert_int_equal(genset_view_count(v), 2);
    gen_info_t newest;
    gen_get_info(genset_view_gen(v, 1), &newest);
    window_engine_close(f->e);
    f->e = NULL;

    char name[GEN_NAME_MAX], path[600];
    gen_file_name(newest.id, name, sizeof(name));
    snprintf(path, sizeof(path), "%s/gens/%s", f->fx.dir, name);
    assert_int_equal(unlink(path), 0);
    window_engine_opened_t opened;
    open_engine_finding(f, &opened);
    assert_true(opened.gens_missing);
    assert_int_equal(opened.missing.first, newest.id.first);
    assert_int_equal(opened.missing.end, newest.id.end);
}

/* A generation past the window is dropped, and its keys count as evictions by age. */
static void test_dropped_generation_counts_as_evicted(void **state)
{
    engine_fx_t *f = *state;
    int64_t now = tu_now_ms(), old = now - 7200000; /* past the hour's window */
    window_stats_t s;
    open_engine(f);
    batch(f, 0, 10, old, true);
    window_maintained_t done = maintain(f, old, 1000); /* sealed while still young */
    assert_int_equal(done.sealed, 10);
    assert_int_equal(done.dropped_age, 0);
    done = maintain(f, now, 1000);
    assert_int_equal(done.sealed, 0);
    assert_int_equal(done.dropped_age, 10);
    window_engine_stats(f->e, false, &s);
    assert_int_equal(s.generations, 0);
    assert_int_equal(s.keys, 0);
    assert_int_equal(s.evicted_age, 10);
    assert_int_equal(s.evicted_size, 0);
    /* not due yet, and nothing sealed: no drop pass at all */
    done = maintain(f, now + 10, 1000);
    assert_int_equal(done.sealed + done.dropped_age + done.dropped_size, 0);
    /* The drop was recorded: re-opened, no generation is taken for lost (open_engine). */
    window_engine_close(f->e);
    f->e = NULL;
    open_engine(f);
}

/* Counts the owner keeps outlive the engine: the single node re-opens its window. */
static void test_kept_counts_outlive_the_engine(void **state)
{
    engine_fx_t *f = *state;
    int64_t now = tu_now_ms();
    window_counts_t counts = {0};
    window_stats_t s;
    f->counts = &counts;
    open_engine(f);
    batch(f, 0, 12, now, true);
    maintain(f, now, 1000);
    window_engine_close(f->e);
    f->e = NULL;
    assert_int_equal(counts.seals, 1);
    open_engine(f);
    window_engine_stats(f->e, false, &s);
    assert_int_equal(s.seals, 1);
    assert_int_equal(s.keys, 12);
    window_engine_close(f->e);
    f->e = NULL;
}

/*
 * The single node's checkpointer: it seals at a threshold of its own and leaves the view and
 * the per-source counts to the caller, whose writer takes them on its thread.
 */
static void test_caller_keeps_view(void **state)
{
    engine_fx_t *f = *state;
    int64_t now = tu_now_ms();
    window_stats_t s;
    window_maintained_t done;
    open_engine(f);
    batch(f, 0, 12, now, true);
    window_maintain_t m = {.now_ms = now, .seal_at = 2 * YOUNG, .caller_keeps_view = true};
    assert_int_equal(window_engine_maintain(f->e, &m, &done), STORE_OK);
    assert_int_equal(done.sealed, 0); /* 12 < 16 */
    batch(f, 12, 16, now, true);
    assert_int_equal(window_engine_maintain(f->e, &m, &done), STORE_OK);
    assert_int_equal(done.sealed, 16);
    window_engine_stats(f->e, true, &s);
    assert_int_equal(s.generations, 0); /* the caller's view is the one before the seal */
    assert_int_equal(s.seals, 1);
    assert_int_equal(srcmap_entries(window_engine_sources(f->e))[0].keys, 16); /* not recounted */
    window_engine_take_view(f->e);
    window_engine_stats(f->e, true, &s);
    assert_int_equal(s.generations, 1);
    assert_int_equal(s.keys, 16); /* the generations only: the young store is skipped */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_batch_seal_and_find, setup, teardown),
        cmocka_unit_test_setup_teardown(test_evictions_count_when_committed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reopen_keeps_the_window, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dropped_generation_counts_as_evicted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kept_counts_outlive_the_engine, setup, teardown),
        cmocka_unit_test_setup_teardown(test_caller_keeps_view, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_finds_lost_generation, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
