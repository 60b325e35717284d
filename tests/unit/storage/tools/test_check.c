/* test_check.c: check_run (`ingestd check`) on data dirs the group commit left half-done. */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <unistd.h>

#include "storage/commit/commit_fixture.h"
#include "storage/tools/check.h"
#include "storage/tools/rebuild.h"
#include "storage/tools/report_lines.h"
#include "storage/window/gen.h"
#include "storage/window/genset.h"
#include "storage/window/store.h"

typedef tu_fixture_t fx_t;

/*
 * A checkpoint's evictions cut short at close (cf_evictions_cut_short): `check` calls that an
 * eviction in progress, not a problem; once the next open has finished it, it says nothing of
 * it and counts exactly max_keys keys.
 */
static void test_check_evictions_in_progress(void **state)
{
    fx_t *fx = *state;
    commit_options_t o;
    check_result_t res;
    lines_t lines = {.len = 0};
    check_options_t co = {.data_dir = fx->dir, .report = collect_line, .arg = &lines};

    cf_evictions_cut_short(fx, &o);
    assert_int_equal(check_run(&co, &res), TOOLS_OK);
    assert_int_equal(res.problems, 0);
    assert_non_null(strstr(lines.text, "evictions still being written"));

    commit_close(cf_open(&o));
    lines_clear(&lines);
    assert_int_equal(check_run(&co, &res), TOOLS_OK);
    assert_null(strstr(lines.text, "evictions still being written"));
    assert_int_equal(res.keys, 5000);
}

/* A log that starts past the store's applied offset (cf_log_gap) is a problem, and says where. */
static void test_check_log_gap(void **state)
{
    fx_t *fx = *state;
    commit_options_t o;
    lines_t lines = {0};
    check_result_t res;
    check_options_t co = {.data_dir = fx->dir, .report = collect_line, .arg = &lines};

    cf_log_gap(fx, &o);
    assert_int_equal(check_run(&co, &res), TOOLS_PROBLEMS);
    assert_true(res.problems > 0);
    assert_non_null(strstr(lines.text, "applied only up to 300"));
}

/*
 * A closed data dir with three sealed generations or more: 300 ids in rounds of 100 (requests of
 * 20), young_keys 64, each round's seal awaited (a checkpoint: up to 3 s each). Their ranges into
 * ids[] (oldest first); returns how many there are.
 */
static size_t sealed_gens(const fx_t *fx, commit_options_t *o, gen_id_t *ids, size_t max)
{
    commit_stats_t s;
    *o = cf_default_opts(fx);
    o->young_keys = 64;
    commit_t *c = cf_open(o);
    for (unsigned round = 0; round < 3; round++) {
        for (unsigned i = 0; i < 100; i += 20)
            cf_submit_range(c, round * 100 + i, 20, tu_now_ms(), COMMIT_ACCEPTED);
        cf_await_stat(c, offsetof(commit_stats_t, window.seals), round + 1, &s);
    }
    commit_close(c);

    char dir[512];
    genset_t *gs = NULL;
    snprintf(dir, sizeof(dir), "%s/store/gens", fx->dir);
    assert_int_equal(genset_open_read_only(dir, &gs), GEN_OK);
    genset_view_t *v = genset_view(gs);
    size_t n = genset_view_count(v);
    for (size_t i = 0; i < n && i < max; i++) {
        gen_info_t info;
        gen_get_info(genset_view_gen(v, i), &info);
        ids[i] = info.id;
    }
    genset_view_release(v);
    genset_close(gs);
    return n;
}

/* Removes generation `id`'s file from the data dir. */
static void remove_gen_file(const fx_t *fx, gen_id_t id)
{
    char name[GEN_NAME_MAX], path[600];
    gen_file_name(id, name, sizeof(name));
    snprintf(path, sizeof(path), "%s/store/gens/%s", fx->dir, name);
    assert_int_equal(unlink(path), 0);
}

/* Removes generation `id`'s file, and checks that `check` says sequences missing.first..end-1
 * are missing. */
static void lose_gen(fx_t *fx, gen_id_t id, gen_id_t missing)
{
    char want[128];
    check_result_t res;
    lines_t lines = {0};
    check_options_t co = {.data_dir = fx->dir, .report = collect_line, .arg = &lines};

    remove_gen_file(fx, id);
    assert_int_equal(check_run(&co, &res), TOOLS_PROBLEMS);
    snprintf(want, sizeof(want), "holding sequences %" PRIu64 "..%" PRIu64 " is missing",
             missing.first, missing.end - 1);
    if (!strstr(lines.text, want))
        fail_msg("no \"%s\" in:\n%s", want, lines.text);
}

/* A commit's error notices (level 0) into a lines_t, read once the commit is closed. */
static void note_error(void *arg, int level, const char *msg)
{
    if (level == 0)
        collect_line(arg, 1, msg);
}

/* A server's open and close of the data dir (options o), its error notices into *errors. */
static void serve_once(commit_options_t o, lines_t *errors)
{
    lines_clear(errors);
    o.notify = note_error;
    o.notify_arg = errors;
    commit_close(cf_open(&o));
}

/* rebuild_run on fx's data dir with o's window, its report into *lines (emptied first). */
static void rebuild_reporting(const fx_t *fx, const commit_options_t *o, bool allow_shrink,
                              lines_t *lines)
{
    rebuild_options_t ro = {.data_dir = fx->dir,
                            .window = {o->window_ms, o->max_keys, o->young_keys},
                            .allow_shrink = allow_shrink,
                            .report = collect_line,
                            .arg = lines};
    lines_clear(lines);
    assert_int_equal(rebuild_run(&ro), TOOLS_OK);
}

/* sealed_gens, three to 16 of them, on which `check` passes. */
static size_t checked_gens(fx_t *fx, commit_options_t *o, gen_id_t ids[16])
{
    check_result_t res;
    check_options_t co = {.data_dir = fx->dir};
    size_t n = sealed_gens(fx, o, ids, 16);
    assert_true(n >= 3 && n <= 16);
    assert_int_equal(check_run(&co, &res), TOOLS_OK);
    return n;
}

/*
 * A lost generation file, one between two others, the newest ones or the oldest, is a problem
 * `check` names with its range: generations are contiguous (a seal starts where the newest ends,
 * merges take neighbours, drops the oldest and are recorded first), so no drop or merge leaves
 * such a hole. `rebuild` then replays the whole log instead of keeping the generations, and the
 * window knows every id again. A server that opens the data dir before says so, as an error.
 */
static void test_check_lost_generations(void **state)
{
    fx_t *fx = *state;
    commit_options_t o;
    gen_id_t ids[16];
    check_result_t res;
    lines_t lines = {0};
    check_options_t co = {.data_dir = fx->dir, .report = collect_line, .arg = &lines};

    size_t n = checked_gens(fx, &o, ids);
    lose_gen(fx, ids[n - 2], ids[n - 2]);                                   /* between two others */
    lose_gen(fx, ids[n - 1], (gen_id_t){ids[n - 2].first, ids[n - 1].end}); /* and the newest */
    assert_int_equal(ids[0].first, 0); /* a new store's first seal; nothing dropped since */
    /* And the oldest, reported first: up to the next one kept, or with none kept, to the end. */
    lose_gen(fx, ids[0], n > 3 ? ids[0] : (gen_id_t){0, ids[n - 1].end});

    serve_once(o, &lines);
    assert_non_null(strstr(lines.text, "is missing (a lost file"));

    rebuild_reporting(fx, &o, false, &lines);
    assert_non_null(strstr(lines.text, "is missing: replaying the whole log"));
    lines_clear(&lines);
    assert_int_equal(check_run(&co, &res), TOOLS_OK);
    assert_int_equal(res.keys, 300);
    commit_t *c = cf_open(&o);
    cf_submit_range(c, 0, 300, tu_now_ms(), COMMIT_DUPLICATE);
    commit_close(c);
}

/* What a drop does to the oldest generation (seal_maintain): recorded in the store, then gone. */
static void drop_oldest(const fx_t *fx, gen_id_t oldest)
{
    char dir[512];
    store_options_t so = {0};
    store_t *st = NULL;
    snprintf(dir, sizeof(dir), "%s/store", fx->dir);
    assert_int_equal(store_open(dir, &so, &st), STORE_OK);
    assert_int_equal(store_txn_begin(st), STORE_OK);
    assert_int_equal(store_record_drop(st, oldest.end), STORE_OK);
    assert_int_equal(store_txn_commit(st), STORE_OK);
    store_close(st);
    remove_gen_file(fx, oldest);
}

/*
 * The oldest generation dropped by the window's rule is no loss: `check` passes, and `rebuild`
 * keeps the other generations (recording where they begin in the new store), after which `check`
 * passes again and a server's start reports nothing missing.
 */
static void test_check_drop_is_no_loss(void **state)
{
    fx_t *fx = *state;
    commit_options_t o;
    gen_id_t ids[16];
    check_result_t res;
    lines_t lines = {0};
    check_options_t co = {.data_dir = fx->dir, .report = collect_line, .arg = &lines};

    checked_gens(fx, &o, ids);
    drop_oldest(fx, ids[0]);
    assert_int_equal(check_run(&co, &res), TOOLS_OK);
    assert_null(strstr(lines.text, "missing"));

    rebuild_reporting(fx, &o, true, &lines); /* shrinks: the dropped keys' records are there */
    assert_non_null(strstr(lines.text, "files kept"));
    lines_clear(&lines);
    assert_int_equal(check_run(&co, &res), TOOLS_OK);
    assert_null(strstr(lines.text, "missing"));

    serve_once(o, &lines);
    assert_null(strstr(lines.text, "missing"));
}

#define T(f) cmocka_unit_test_setup_teardown(f, cf_setup, cf_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_check_evictions_in_progress),
        T(test_check_log_gap),
        T(test_check_lost_generations),
        T(test_check_drop_is_no_loss),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
