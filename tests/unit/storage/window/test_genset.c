/* test_genset.c: the set of sealed generations: lookups newest first, views across changes, merges,
 * clean-up after a crash, and the drop/merge rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "storage/window/genset.h"
#include "storage/window/keyhash.h"
#include "testutil.h"

static const uint8_t SECRET[KEYHASH_SECRET_LEN] = "genset-secret-16";

static void mkkey(uint64_t i, uint8_t key[KEYHASH_LEN])
{
    char id[32];
    int n = snprintf(id, sizeof(id), "m-%llu", (unsigned long long)i);
    keyhash(SECRET, "default", 7, id, (size_t)n, key);
}

static int cmp_entry(const void *a, const void *b)
{
    return memcmp(((const gen_entry_t *)a)->key, ((const gen_entry_t *)b)->key, KEYHASH_LEN);
}

/*
 * Writes the generation of ids [from, from + n) covering sequences [first, end) into the set's
 * directory, with receivedAt rx + id, offset = id. Returns it open (not yet added).
 */
static gen_t *make(genset_t *gs, uint64_t first, uint64_t end, uint64_t from, size_t n, int64_t rx)
{
    gen_entry_t *e = calloc(n ? n : 1, sizeof(*e));
    assert_non_null(e);
    for (size_t i = 0; i < n; i++) {
        mkkey(from + i, e[i].key);
        e[i].offset = from + i;
        e[i].received_ms = rx + (int64_t)(from + i);
    }
    qsort(e, n, sizeof(*e), cmp_entry);
    gen_writer_t *w = NULL;
    assert_int_equal(gen_writer_open(genset_dir(gs), (gen_id_t){first, end}, n, 0, &w), GEN_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(gen_writer_add(w, &e[i]), GEN_OK);
    gen_t *g = NULL;
    assert_int_equal(gen_writer_finish(w, &g), GEN_OK);
    free(e);
    return g;
}

static void add(genset_t *gs, uint64_t first, uint64_t end, uint64_t from, size_t n, int64_t rx)
{
    assert_int_equal(genset_add(gs, make(gs, first, end, from, n, rx)), GEN_OK);
}

/* Looks id up in v: whether found, and the entry's receivedAt in *rx. */
static bool has(const genset_view_t *v, uint64_t id, int64_t *rx)
{
    uint8_t key[KEYHASH_LEN];
    bool found = false;
    gen_entry_t e;
    mkkey(id, key);
    assert_int_equal(genset_view_find(v, key, &found, &e), GEN_OK);
    if (found && rx)
        *rx = e.received_ms;
    return found;
}

static size_t files_in(const char *dir)
{
    size_t n = 0;
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "ls -A '%s' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    assert_int_equal(fscanf(p, "%zu", &n), 1);
    pclose(p);
    return n;
}

static int setup(void **state)
{
    return tu_fixture_setup(state, "genset", "gens");
}

static int teardown(void **state)
{
    return tu_fixture_teardown(state);
}

/* Lookups go newest first; an added generation must not overlap the newest. */
static void test_add_find(void **state)
{
    tu_fixture_t *fx = *state;
    genset_t *gs = NULL;
    assert_int_equal(genset_open(fx->dir, 0, &gs), GEN_OK); /* creates the directory */
    genset_view_t *v = genset_view(gs);
    assert_int_equal(genset_view_count(v), 0);
    assert_false(has(v, 1, NULL));
    genset_view_release(v);
    add(gs, 0, 100, 0, 100, 1000);
    add(gs, 100, 200, 100, 100, 1000);
    add(gs, 200, 300, 50, 100, 5000); /* ids 50..149 again, newer */
    gen_t *overlap = make(gs, 250, 400, 1000, 10, 0);
    assert_int_equal(genset_add(gs, overlap), GEN_INVALID);
    gen_close(overlap); /* still the caller's, file and all */
    assert_int_equal(gen_remove(fx->dir, (gen_id_t){250, 400}), GEN_OK);
    v = genset_view(gs);
    assert_int_equal(genset_view_count(v), 3);
    int64_t rx = 0;
    assert_true(has(v, 10, &rx));
    assert_int_equal(rx, 1010);
    assert_true(has(v, 60, &rx));
    assert_int_equal(rx, 5060); /* the newest generation's copy */
    assert_true(has(v, 199, &rx));
    assert_false(has(v, 300, NULL));
    genset_totals_t t;
    genset_view_totals(v, &t);
    assert_int_equal(t.keys, 300);
    assert_int_equal(t.oldest_received_ms, 1000);
    assert_int_equal(t.end_seq, 300);
    /* find_many answers as find does. */
    uint8_t keys[400][KEYHASH_LEN];
    bool found[400];
    gen_entry_t e[400];
    for (uint64_t i = 0; i < 400; i++)
        mkkey(i, keys[i]);
    assert_int_equal(genset_view_find_many(v, (const uint8_t(*)[KEYHASH_LEN])keys, 400, found, e),
                     GEN_OK);
    for (uint64_t i = 0; i < 400; i++) {
        assert_int_equal(found[i], i < 200);
        if (found[i])
            assert_int_equal(e[i].received_ms, (i >= 50 && i < 150 ? 5000 : 1000) + (int64_t)i);
    }
    genset_view_release(v);
    genset_close(gs);
    /* Reopened: the same set. */
    assert_int_equal(genset_open(fx->dir, 0, &gs), GEN_OK);
    v = genset_view(gs);
    assert_int_equal(genset_view_count(v), 3);
    assert_true(has(v, 60, &rx));
    assert_int_equal(rx, 5060);
    genset_view_release(v);
    genset_close(gs);
}

/* genset_drop_oldest / genset_merge on the current view, as one thread alone would. */
static int drop_now(genset_t *gs, size_t n)
{
    genset_view_t *v = genset_view(gs);
    int rc = genset_drop_oldest(gs, v, n);
    genset_view_release(v);
    return rc;
}

static int merge_now(genset_t *gs, size_t first, size_t n)
{
    genset_view_t *v = genset_view(gs);
    int rc = genset_merge(gs, v, first, n, NULL);
    genset_view_release(v);
    return rc;
}

/* A view taken before a drop still reads the dropped generation; the file is gone at once. */
static void test_view_outlives_drop(void **state)
{
    tu_fixture_t *fx = *state;
    genset_t *gs = NULL;
    assert_int_equal(genset_open(fx->dir, 0, &gs), GEN_OK);
    add(gs, 0, 10, 0, 10, 0);
    add(gs, 10, 20, 10, 10, 0);
    genset_view_t *old = genset_view(gs);
    assert_int_equal(drop_now(gs, 1), GEN_OK);
    assert_int_equal(files_in(fx->dir), 1);
    genset_view_t *v = genset_view(gs);
    assert_int_equal(genset_view_count(v), 1);
    assert_false(has(v, 5, NULL));
    assert_true(has(old, 5, NULL));
    assert_true(has(old, 15, NULL));
    genset_view_release(old);
    genset_view_release(v);
    assert_int_equal(drop_now(gs, 2), GEN_INVALID);
    genset_close(gs);
}

/*
 * Changes planned on a view while others change the set (the merger beside
 * the checkpointer): a merge whose input was dropped meanwhile changes
 * nothing and leaves no file; a drop planned before a merge leaves the
 * merged generation whole; a generation added during a merge stays.
 */
static void test_changes_from_two_views(void **state)
{
    tu_fixture_t *fx = *state;
    genset_t *gs = NULL;
    assert_int_equal(genset_open(fx->dir, 0, &gs), GEN_OK);
    for (uint64_t i = 0; i < 4; i++)
        add(gs, i * 100, i * 100 + 100, i * 100, 100, 0);
    genset_view_t *planned = genset_view(gs);
    assert_int_equal(drop_now(gs, 1), GEN_OK);
    assert_int_equal(genset_merge(gs, planned, 0, 2, NULL), GEN_CHANGED);
    assert_int_equal(files_in(fx->dir), 3);
    genset_view_release(planned);

    planned = genset_view(gs); /* [100,200) [200,300) [300,400) */
    add(gs, 400, 500, 400, 100, 0);
    assert_int_equal(genset_merge(gs, planned, 0, 2, NULL), GEN_OK);
    assert_int_equal(genset_drop_oldest(gs, planned, 1), GEN_OK); /* [100,300) stays whole */
    genset_view_release(planned);
    genset_view_t *v = genset_view(gs);
    assert_int_equal(genset_view_count(v), 3);
    gen_info_t info;
    gen_get_info(genset_view_gen(v, 0), &info);
    assert_int_equal(info.id.first, 100);
    assert_int_equal(info.id.end, 300);
    gen_get_info(genset_view_gen(v, 2), &info);
    assert_int_equal(info.id.first, 400);
    assert_true(has(v, 150, NULL));
    assert_true(has(v, 450, NULL));
    genset_view_release(v);
    assert_int_equal(files_in(fx->dir), 3);

    /* A cancelled merge changes nothing and leaves nothing. */
    atomic_bool cancel = true;
    planned = genset_view(gs);
    for (uint64_t i = 0; i < 2; i++)
        add(gs, 500 + i * 70000, 70500 + i * 70000, 500 + i * 70000, 70000, 0);
    genset_view_release(planned);
    planned = genset_view(gs);
    assert_int_equal(genset_merge(gs, planned, 3, 2, &cancel), GEN_CANCELLED);
    genset_view_release(planned);
    assert_int_equal(files_in(fx->dir), 5);
    genset_close(gs);
}

/*
 * A submitter's probe (filters only) and the writer's lookup later: a key no
 * generation of the probed view has is found by asking only those that end
 * past the probe's end, even once a later seal was merged with older ones.
 */
static void test_probe_then_find_after(void **state)
{
    tu_fixture_t *fx = *state;
    genset_t *gs = NULL;
    assert_int_equal(genset_open(fx->dir, 0, &gs), GEN_OK);
    add(gs, 0, 100, 0, 100, 0);
    add(gs, 100, 200, 100, 100, 0);
    uint8_t keys[2][KEYHASH_LEN];
    bool maybe[2];
    mkkey(50, keys[0]);  /* in the window */
    mkkey(250, keys[1]); /* not yet */
    genset_view_t *v = genset_view(gs);
    uint64_t end = genset_view_probe_many(v, (const uint8_t(*)[KEYHASH_LEN])keys, 2, maybe);
    genset_view_release(v);
    assert_int_equal(end, 200);
    assert_true(maybe[0]);
    assert_false(maybe[1]);         /* 14 bits a key: this key is not a false positive */
    add(gs, 200, 300, 200, 100, 0); /* sealed after the probe */
    assert_int_equal(merge_now(gs, 1, 2), GEN_OK);
    v = genset_view(gs);
    bool found = false;
    gen_entry_t e;
    assert_int_equal(genset_view_find_after(v, keys[1], end, &found, &e), GEN_OK);
    assert_true(found);
    assert_int_equal(e.offset, 250);
    assert_int_equal(genset_view_find_after(v, keys[0], 300, &found, &e), GEN_OK);
    assert_false(found); /* nothing ends past 300: nothing was asked */
    genset_view_release(v);
    genset_close(gs);
}

/* Merging adjacent generations: one file covering their ranges, every key still found. */
static void test_merge(void **state)
{
    tu_fixture_t *fx = *state;
    genset_t *gs = NULL;
    assert_int_equal(genset_open(fx->dir, 0, &gs), GEN_OK);
    for (uint64_t i = 0; i < 5; i++)
        add(gs, i * 1000, i * 1000 + 1000, i * 1000, 1000, 0);
    genset_view_t *before = genset_view(gs);
    assert_int_equal(merge_now(gs, 1, 3), GEN_OK);
    assert_int_equal(merge_now(gs, 0, 1), GEN_INVALID);
    assert_int_equal(merge_now(gs, 2, 2), GEN_INVALID); /* past the end */
    genset_view_t *v = genset_view(gs);
    assert_int_equal(genset_view_count(v), 3);
    gen_info_t info;
    gen_get_info(genset_view_gen(v, 1), &info);
    assert_int_equal(info.id.first, 1000);
    assert_int_equal(info.id.end, 4000);
    assert_int_equal(info.keys, 3000);
    for (uint64_t id = 0; id < 5000; id += 7) {
        assert_true(has(v, id, NULL));
        assert_true(has(before, id, NULL)); /* the old view reads the removed inputs */
    }
    assert_int_equal(files_in(fx->dir), 3);
    genset_view_release(before);
    genset_view_release(v);
    genset_close(gs);
}

/* A crash mid-merge leaves inputs beside the merged file, and a ".tmp"; open cleans up. */
static void test_open_after_crash(void **state)
{
    tu_fixture_t *fx = *state;
    genset_t *gs = NULL;
    assert_int_equal(genset_open(fx->dir, 0, &gs), GEN_OK);
    add(gs, 0, 100, 0, 100, 0);
    add(gs, 100, 200, 100, 100, 0);
    add(gs, 200, 300, 200, 100, 0);
    genset_view_t *v = genset_view(gs);
    gen_t *ins[2] = {(gen_t *)genset_view_gen(v, 0), (gen_t *)genset_view_gen(v, 1)};
    gen_t *merged = NULL;
    assert_int_equal(gen_merge(fx->dir, (gen_id_t){0, 200}, ins, 2, 0, NULL, NULL, &merged),
                     GEN_OK);
    assert_int_equal(gen_publish(merged), GEN_OK); /* then the crash, before the inputs go */
    gen_close(merged);
    genset_view_release(v);
    genset_close(gs);
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s/.00000000000000000300-00000000000000000400.gen.tmp", fx->dir);
    assert_int_equal(tu_write_file(tmp, "x", 1), 0);
    assert_int_equal(files_in(fx->dir), 5);
    /* Read-only (a tool beside the server): the same set, and nothing removed. */
    assert_int_equal(genset_open_read_only(fx->dir, &gs), GEN_OK);
    v = genset_view(gs);
    assert_int_equal(genset_view_count(v), 2);
    genset_view_release(v);
    genset_close(gs);
    assert_int_equal(files_in(fx->dir), 5);
    assert_int_equal(genset_open(fx->dir, 0, &gs), GEN_OK);
    assert_int_equal(files_in(fx->dir), 2);
    v = genset_view(gs);
    assert_int_equal(genset_view_count(v), 2);
    for (uint64_t id = 0; id < 300; id++)
        assert_true(has(v, id, NULL));
    genset_view_release(v);
    genset_close(gs);
}

/* A missing directory: read-only it is an empty set and stays missing; read-write it is made. */
static void test_open_missing(void **state)
{
    tu_fixture_t *fx = *state;
    genset_t *gs = NULL;
    assert_int_equal(genset_open_read_only(fx->dir, &gs), GEN_OK);
    genset_view_t *v = genset_view(gs);
    assert_int_equal(genset_view_count(v), 0);
    genset_view_release(v);
    genset_close(gs);
    assert_int_equal(access(fx->dir, F_OK), -1);
    assert_int_equal(genset_open(fx->dir, 0, &gs), GEN_OK);
    assert_int_equal(access(fx->dir, F_OK), 0);
    genset_close(gs);
}

/* Ranges that overlap without one covering the other cannot come from a merge: corruption. */
static void test_open_refuses_overlap(void **state)
{
    tu_fixture_t *fx = *state;
    genset_t *gs = NULL;
    assert_int_equal(genset_open(fx->dir, 0, &gs), GEN_OK);
    gen_close(make(gs, 0, 150, 0, 10, 0));
    gen_close(make(gs, 100, 200, 10, 10, 0));
    genset_close(gs);
    assert_int_equal(genset_open(fx->dir, 0, &gs), GEN_CORRUPT);
    assert_null(gs);
}

/* Sets the set's budget and takes a view under it in place of *v. */
static void budget(genset_t *gs, genset_view_t **v, uint64_t keys)
{
    genset_view_release(*v);
    assert_int_equal(genset_set_budget(gs, keys), GEN_OK);
    *v = genset_view(gs);
}

/* The rule: age first, then size keeping at least max_keys, then merges of small neighbours. */
static void test_plan(void **state)
{
    tu_fixture_t *fx = *state;
    genset_t *gs = NULL;
    assert_int_equal(genset_open(fx->dir, 0, &gs), GEN_OK);
    /* Six generations of 100 keys, ids 100 i .. 100 i + 99, received at 1000 i + id. */
    for (uint64_t i = 0; i < 6; i++)
        add(gs, i * 100, i * 100 + 100, i * 100, 100, (int64_t)(i * 1000));
    genset_view_t *v = genset_view(gs);
    genset_plan_t plan;
    genset_policy_t p = {.window_ms = 100000, .max_keys = 0, .fanin = 0};
    genset_plan(v, &p, 5000, 0, &plan);
    assert_int_equal(plan.drop_age + plan.drop_size + plan.merge_n, 0);
    /* Generation 0's newest key came at 99, generation 1's at 1199: with a window of 1000 ms a
     * generation goes only once its newest key is older than that (a key is kept at least the
     * window). */
    p.window_ms = 1000;
    genset_plan(v, &p, 1099, 0, &plan);
    assert_int_equal(plan.drop_age, 0);
    genset_plan(v, &p, 1100, 0, &plan);
    assert_int_equal(plan.drop_age, 1);
    genset_plan(v, &p, 2199, 0, &plan);
    assert_int_equal(plan.drop_age, 1);
    genset_plan(v, &p, 2200, 0, &plan);
    assert_int_equal(plan.drop_age, 2);
    /* By size, per source (every key here is one source's): the newest generations up to the
     * one that reaches the budget stay, the older ones are cut and go; young keys do not
     * count. Budget 400: generations 5..2 hold it, 1 and 0 go; 401: generation 1 reaches it. */
    p.window_ms = 1000000;
    p.max_keys = 400;
    budget(gs, &v, 400);
    genset_plan(v, &p, 0, 50, &plan);
    assert_int_equal(plan.drop_age, 0);
    assert_int_equal(plan.drop_size, 2);
    budget(gs, &v, 401);
    genset_plan(v, &p, 0, 50, &plan);
    assert_int_equal(plan.drop_size, 1);
    /* Merges: target 600/2 = 300 keys; three at a time, from the oldest after the drops. */
    budget(gs, &v, 0);
    p.max_keys = 0;
    p.target_count = 2;
    p.fanin = 3;
    genset_plan(v, &p, 0, 0, &plan);
    assert_int_equal(plan.merge_first, 0);
    assert_int_equal(plan.merge_n, 3);
    p.max_keys = 500; /* drops one first: indices count from after the drop */
    budget(gs, &v, 500);
    genset_plan(v, &p, 0, 0, &plan);
    assert_int_equal(plan.drop_size, 1);
    assert_int_equal(plan.merge_first, 0);
    assert_int_equal(plan.merge_n, 3);
    budget(gs, &v, 0);
    genset_view_release(v);
    /* Once merged, the big one is at the target and the rest too few to merge. */
    assert_int_equal(merge_now(gs, 0, 3), GEN_OK);
    v = genset_view(gs);
    p.max_keys = 0;
    genset_plan(v, &p, 0, 0, &plan);
    assert_int_equal(plan.merge_n, 3); /* 100, 100, 100 after the 300 one */
    assert_int_equal(plan.merge_first, 1);
    p.merge_min_keys = 50; /* the target stays 300: no change */
    genset_plan(v, &p, 0, 0, &plan);
    assert_int_equal(plan.merge_first, 1);
    p.target_count = 6; /* target 100: nothing is smaller */
    genset_plan(v, &p, 0, 0, &plan);
    assert_int_equal(plan.merge_n, 0);
    /* A window a little past it (target 108 with 48 young keys): 100 is not small yet, since
     * merging every generation the window has at each such step would cost it whole. */
    genset_plan(v, &p, 0, 48, &plan);
    assert_int_equal(plan.merge_n, 0);
    p.target_count = 4; /* target 162: under 3/4 of it, 100 is small */
    genset_plan(v, &p, 0, 48, &plan);
    assert_int_equal(plan.merge_n, 3);
    genset_view_release(v);
    genset_close(gs);
}

/* Generation [first, end) of n keys of `source` (ids from..from+n-1, received rx) plus m of
 * "calm" (ids 10000..), added to the set. */
static void add_mixed(genset_t *gs, uint64_t first, uint64_t end, const char *source, uint64_t from,
                      size_t n, size_t m, int64_t rx)
{
    gen_entry_t *e = calloc(n + m, sizeof(*e));
    assert_non_null(e);
    for (size_t i = 0; i < n + m; i++) {
        char id[32];
        uint64_t k = i < n ? from + i : 10000 + i - n;
        int len = snprintf(id, sizeof(id), "m-%llu", (unsigned long long)k);
        const char *src = i < n ? source : "calm";
        keyhash(SECRET, src, strlen(src), id, (size_t)len, e[i].key);
        e[i].offset = k;
        e[i].received_ms = rx;
    }
    qsort(e, n + m, sizeof(*e), cmp_entry);
    gen_writer_t *w = NULL;
    assert_int_equal(gen_writer_open(genset_dir(gs), (gen_id_t){first, end}, n + m, 0, &w), GEN_OK);
    for (size_t i = 0; i < n + m; i++)
        assert_int_equal(gen_writer_add(w, &e[i]), GEN_OK);
    gen_t *g = NULL;
    assert_int_equal(gen_writer_finish(w, &g), GEN_OK);
    assert_int_equal(genset_add(gs, g), GEN_OK);
    free(e);
}

static bool has_from(const genset_view_t *v, const char *source, uint64_t id)
{
    uint8_t key[KEYHASH_LEN];
    char mid[32];
    bool found = false, maybe = false;
    int n = snprintf(mid, sizeof(mid), "m-%llu", (unsigned long long)id);
    keyhash(SECRET, source, strlen(source), mid, (size_t)n, key);
    assert_int_equal(genset_view_find(v, key, &found, NULL), GEN_OK);
    genset_view_probe_many(v, (const uint8_t(*)[KEYHASH_LEN])key, 1, &maybe);
    assert_true(maybe || !found); /* the probe passes over what the lookup does */
    return found;
}

/*
 * Per-source budgets over shared generations: one source's flood cuts only its own older
 * keys; a generation mostly cut is rewritten without them, and one cut for every source in it
 * goes.
 */
static void test_budget_per_source(void **state)
{
    tu_fixture_t *fx = *state;
    genset_t *gs = NULL;
    assert_int_equal(genset_open(fx->dir, 0, &gs), GEN_OK);
    assert_int_equal(genset_set_budget(gs, 100), GEN_OK);
    add_mixed(gs, 0, 100, "flood", 0, 50, 5, 1000); /* calm's five keys, and the flood's */
    for (uint64_t i = 1; i < 4; i++)
        add_mixed(gs, i * 100, i * 100 + 100, "flood", i * 50, 50, 0, 1000 + (int64_t)i);
    genset_view_t *v = genset_view(gs);
    /* The flood's newest 100 (generations 3, 2) stay; 1 and 0 are cut for it, not for calm. */
    assert_true(has_from(v, "calm", 10000));
    assert_true(has_from(v, "calm", 10004));
    assert_false(has_from(v, "flood", 0));
    assert_false(has_from(v, "flood", 99));
    assert_true(has_from(v, "flood", 100));
    assert_true(has_from(v, "flood", 199));
    genset_totals_t t;
    genset_view_totals(v, &t);
    assert_int_equal(t.keys, 105);
    assert_int_equal(t.cut_keys, 100);
    const genset_source_t *src;
    size_t n = genset_view_sources(v, &src);
    assert_int_equal(n, 2);
    for (size_t i = 0; i < n; i++) {
        bool flood = src[i].tag == keyhash_source_tag(SECRET, "flood", 5);
        assert_int_equal(src[i].keys, flood ? 100 : 5);
        assert_int_equal(src[i].cut_keys, flood ? 100 : 0);
        assert_int_equal(src[i].forgot_ms, flood ? 1001 : 0);
    }
    /* Generation 0 is mostly cut (50 of 55): the merger (a fan-in) rewrites it with calm's five
     * alone; a sealing thread's plan (fan-in 0) never rewrites. */
    genset_policy_t p = {.window_ms = 1000000, .max_keys = 100};
    genset_plan_t plan;
    genset_plan(v, &p, 2000, 0, &plan);
    assert_int_equal(plan.merge_n, 0);
    p.fanin = 4;
    genset_plan(v, &p, 2000, 0, &plan);
    assert_int_equal(plan.drop_age + plan.drop_size, 0);
    assert_int_equal(plan.merge_first, 0);
    assert_int_equal(plan.merge_n, 1);
    assert_int_equal(genset_merge(gs, v, 0, 1, NULL), GEN_OK);
    genset_view_release(v);
    v = genset_view(gs);
    assert_int_equal(genset_view_count(v), 4);
    gen_info_t gi;
    gen_get_info(genset_view_gen(v, 0), &gi);
    assert_int_equal(gi.keys, 5);
    assert_true(has_from(v, "calm", 10003));
    genset_view_release(v);
    /* A newer flood cuts generation 2 too; calm stays put in generation 0. */
    add_mixed(gs, 400, 500, "flood", 200, 100, 0, 1004);
    v = genset_view(gs);
    assert_false(has_from(v, "flood", 100));
    assert_true(has_from(v, "flood", 250));
    assert_true(has_from(v, "calm", 10000));
    genset_view_release(v);
    genset_close(gs);
}

/*
 * Two rewrites of the same generation planned on one view (what the checkpointer and the merger
 * each did before rewrites had one owner, and what a stale plan still does): the first
 * publishes; the loser must publish nothing and remove nothing. Before, the loser renamed its
 * output over the live name and then, finding its input gone, unlinked that name: the
 * generation, and calm's keys in it, were gone at the next open. Then the other interleaving:
 * a drop between a rewrite's plan and its publish.
 */
static void test_stale_rewrite_keeps_live_file(void **state)
{
    tu_fixture_t *fx = *state;
    genset_t *gs = NULL;
    assert_int_equal(genset_open(fx->dir, 0, &gs), GEN_OK);
    assert_int_equal(genset_set_budget(gs, 100), GEN_OK);
    add_mixed(gs, 0, 100, "flood", 0, 50, 5, 1000);
    for (uint64_t i = 1; i < 4; i++)
        add_mixed(gs, i * 100, i * 100 + 100, "flood", i * 50, 50, 0, 1000 + (int64_t)i);
    genset_view_t *stale = genset_view(gs);
    assert_int_equal(genset_merge(gs, stale, 0, 1, NULL), GEN_OK);      /* the winner */
    assert_int_equal(genset_merge(gs, stale, 0, 1, NULL), GEN_CHANGED); /* the loser */
    assert_int_equal(files_in(fx->dir), 4); /* no staged file left, the live one still there */
    genset_view_release(stale);
    genset_close(gs);
    assert_int_equal(genset_open(fx->dir, 0, &gs), GEN_OK);
    assert_int_equal(genset_set_budget(gs, 100), GEN_OK);
    genset_view_t *v = genset_view(gs);
    assert_int_equal(genset_view_count(v), 4);
    for (uint64_t k = 10000; k < 10005; k++)
        assert_true(has_from(v, "calm", k));
    genset_view_release(v);
    /* A drop lands between the plan and the publish: the rewrite publishes nothing. */
    add_mixed(gs, 400, 500, "flood", 200, 50, 0, 1004); /* generation 1 is now cut too */
    add_mixed(gs, 500, 600, "flood", 250, 50, 0, 1005);
    stale = genset_view(gs);
    assert_int_equal(genset_drop_oldest(gs, stale, 2), GEN_OK);
    assert_int_equal(genset_merge(gs, stale, 1, 1, NULL), GEN_CHANGED);
    genset_view_release(stale);
    assert_int_equal(files_in(fx->dir), 4);
    genset_close(gs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_add_find, setup, teardown),
        cmocka_unit_test_setup_teardown(test_view_outlives_drop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_changes_from_two_views, setup, teardown),
        cmocka_unit_test_setup_teardown(test_probe_then_find_after, setup, teardown),
        cmocka_unit_test_setup_teardown(test_merge, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_after_crash, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_missing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_refuses_overlap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_budget_per_source, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_rewrite_keeps_live_file, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
