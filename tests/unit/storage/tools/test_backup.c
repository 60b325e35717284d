/* test_backup.c: backup_run (`ingestd backup`) on data dirs the group commit wrote, closed and
 * open. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/commit/commit_fixture.h"
#include "storage/log/log.h"
#include "storage/secret.h"
#include "storage/tools/backup.h"
#include "storage/tools/check.h"
#include "storage/tools/report_lines.h"
#include "storage/window/genset.h"
#include "storage/window/retag.h"
#include "storage/window/seal.h"

typedef tu_fixture_t fx_t;

/* The backup's target fx->base/`name`, as a fixture of its own (cf_read_log). */
static fx_t target_named(const fx_t *fx, const char *name)
{
    fx_t t = *fx;
    snprintf(t.dir, sizeof(t.dir), "%s/%s", fx->base, name);
    return t;
}

/* The backup's target in the fixture's base dir. */
static fx_t target_of(const fx_t *fx)
{
    return target_named(fx, "backup");
}

/* backup_run from fx->dir to `to`, its report into *lines; `hook` (may be NULL) runs between
 * the two looks at the generations, with hook_arg. */
static int run_backup_hooked(const fx_t *fx, const char *to, lines_t *lines, void (*hook)(void *),
                             void *hook_arg)
{
    backup_options_t bo = {.data_dir = fx->dir,
                           .to_dir = to,
                           .report = collect_line,
                           .arg = lines,
                           .between_views = hook,
                           .hook_arg = hook_arg};
    lines_clear(lines);
    return backup_run(&bo);
}

static int run_backup(const fx_t *fx, const char *to, lines_t *lines)
{
    return run_backup_hooked(fx, to, lines, NULL, NULL);
}

/* The report has a line with `what` in it, and marks that line a problem. */
static void expect_problem(const lines_t *l, const char *what)
{
    const char *at = strstr(l->text, what), *line = at;
    assert_non_null(at);
    while (line > l->text && line[-1] != '\n')
        line--;
    assert_int_equal(strncmp(line, "PROBLEM ", 8), 0);
}

/* check_run on dir must find no problem; its result into *res. */
static void expect_check_passes(const char *dir, check_result_t *res)
{
    lines_t lines = {.len = 0};
    check_options_t co = {.data_dir = dir, .report = collect_line, .arg = &lines};
    int rc = check_run(&co, res);
    if (rc != TOOLS_OK)
        print_error("check %s:\n%s", dir, lines.text);
    assert_int_equal(rc, TOOLS_OK);
    assert_int_equal(res->problems, 0);
}

/* The first `n` records of b's log are a's first n, payload and key; a holds at least n. */
static void expect_log_prefix(const fx_t *a, const fx_t *b, uint64_t n)
{
    char **va = NULL, **vb = NULL;
    uint8_t(*ka)[16] = NULL, (*kb)[16] = NULL;
    uint64_t na = cf_read_log(a, &va, &ka), nb = cf_read_log(b, &vb, &kb);
    assert_int_equal(nb, n);
    assert_true(na >= n);
    for (uint64_t i = 0; i < n; i++) {
        assert_string_equal(va[i], vb[i]);
        assert_memory_equal(ka[i], kb[i], 16);
    }
    cf_free_log(va, na);
    cf_free_log(vb, nb);
    free(ka);
    free(kb);
}

static void expect_same_secret(const char *a, const char *b)
{
    uint8_t sa[KEYHASH_SECRET_LEN], sb[KEYHASH_SECRET_LEN];
    assert_int_equal(secret_read(a, sa), 1);
    assert_int_equal(secret_read(b, sb), 1);
    assert_memory_equal(sa, sb, KEYHASH_SECRET_LEN);
}

/* The segments of DIR/log whose base is at most `offset` (all of them: UINT64_MAX). */
static uint64_t count_segments(const char *dir, uint64_t offset)
{
    char path[512];
    log_info_t li;
    uint64_t *bases = NULL, n = 0;
    snprintf(path, sizeof(path), "%s/log", dir);
    assert_int_equal(log_describe(path, &li, &bases), LOG_OK);
    while (n < li.segments && bases[n] <= offset)
        n++;
    free(bases);
    return n;
}

/* The sealed generation files in DIR/store/gens. */
static size_t count_gens(const char *dir)
{
    char path[512];
    genset_t *gs = NULL;
    snprintf(path, sizeof(path), "%s/store/gens", dir);
    assert_int_equal(genset_open_read_only(path, &gs), GEN_OK);
    genset_view_t *v = genset_view(gs);
    size_t n = genset_view_count(v);
    genset_view_release(v);
    genset_close(gs);
    return n;
}

/* The entries of dir but . and ..; -1 when it cannot be opened (errno set). */
static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

/* Submits ids first..first+n-1 in requests of `batch` (each a group commit of its own at most),
 * each id expected to get `want`. */
static void submit_batches(commit_t *c, unsigned first, unsigned n, unsigned batch, int64_t now,
                           int want)
{
    for (unsigned i = 0; i < n; i += batch)
        cf_submit_range(c, first + i, n - i < batch ? n - i : batch, now, want);
}

/* A closed data dir holding ids 0..n-1 (one request). */
static void small_data_dir(const fx_t *fx, unsigned n)
{
    commit_options_t o = cf_default_opts(fx);
    commit_t *c = cf_open(&o);
    if (n > 0)
        cf_submit_range(c, 0, n, tu_now_ms(), COMMIT_ACCEPTED);
    commit_close(c);
}

/*
 * A server on the backup `dir` (options o but the data dir) whose log holds ids 0..n-1 at their
 * own offsets: it knows each of them (duplicates) and none of n..upto-1 (at least n, accepted,
 * the first at offset n).
 */
static void expect_serves(commit_options_t o, const char *dir, unsigned n, unsigned upto,
                          int64_t now)
{
    o.data_dir = dir;
    commit_t *c = cf_open(&o);
    submit_batches(c, 0, n, 100, now, COMMIT_DUPLICATE);
    cf_submit_one_accepted(c, n, now, n);
    if (upto > n + 1)
        cf_submit_range(c, n + 1, upto - n - 1, now, COMMIT_ACCEPTED);
    commit_close(c);
}

/* A closed data dir whose window sealed: 300 events in requests of 20, young_keys 64. */
static commit_options_t sealed_data_dir(const fx_t *fx, int64_t now)
{
    commit_options_t o = cf_default_opts(fx);
    o.young_keys = 64;
    commit_t *c = cf_open(&o);
    commit_stats_t s;
    submit_batches(c, 0, 300, 20, now, COMMIT_ACCEPTED);
    cf_await_stat(c, offsetof(commit_stats_t, window.seals), 1, &s);
    commit_close(c);
    return o;
}

/*
 * A backup of a data dir with sealed generations is a data dir `check` passes, with the same
 * log records, secret and keys; a server on it knows every id the source knew (duplicates) and
 * takes new ones at the log's end.
 */
static void test_backup_sealed(void **state)
{
    fx_t *fx = *state, to = target_of(fx);
    lines_t lines = {.len = 0};
    check_result_t src, dst;
    int64_t now = tu_now_ms();
    commit_options_t o = sealed_data_dir(fx, now);

    assert_true(count_gens(fx->dir) > 0);
    expect_check_passes(fx->dir, &src);
    assert_int_equal(run_backup(fx, to.dir, &lines), TOOLS_OK);
    assert_null(strstr(lines.text, "PROBLEM"));
    assert_non_null(strstr(lines.text, "generations: "));

    expect_check_passes(to.dir, &dst);
    assert_int_equal(dst.records, 300);
    assert_int_equal(dst.next_offset, src.next_offset);
    assert_int_equal(dst.applied, src.applied);
    assert_int_equal(dst.keys, src.keys);
    assert_int_equal(count_gens(to.dir), count_gens(fx->dir));
    expect_log_prefix(fx, &to, 300);
    expect_same_secret(fx->dir, to.dir);

    expect_serves(o, to.dir, 300, 301, now);
}

/*
 * The log is cut at what was acknowledged: a store applied up to 100 (a checkpoint behind), an
 * ACKED of 140 and 200 records in 4 KiB segments of 50 records (the last 60 written after that
 * ACKED, as a server's next batches would be), so that the cut falls inside a segment. The
 * backup holds exactly the first 140, and an ACKED of 140 for its readers; a server on it
 * replays 100..139 (duplicates) and takes 140 at offset 140.
 */
static void test_backup_cuts_at_acked(void **state)
{
    fx_t *fx = *state, to = target_of(fx);
    lines_t lines = {.len = 0};
    check_result_t res;
    uint64_t acked = 0;
    int64_t now = tu_now_ms();
    commit_options_t o = cf_default_opts(fx);
    o.segment_bytes = 4096;
    commit_t *c = cf_open(&o);
    submit_batches(c, 0, 100, 10, now, COMMIT_ACCEPTED); /* a batch goes whole into a segment */
    commit_close(c);
    cf_copy_store(fx, true); /* applied: 100 */
    c = cf_open(&o);
    submit_batches(c, 100, 100, 10, now, COMMIT_ACCEPTED);
    commit_close(c);
    cf_copy_store(fx, false);
    assert_int_equal(commit_write_acked_file(fx->dir, 140), 0);

    assert_int_equal(run_backup(fx, to.dir, &lines), TOOLS_OK);
    expect_check_passes(to.dir, &res);
    assert_int_equal(res.applied, 100);
    assert_int_equal(res.next_offset, 140);
    /* Several segments, the cut inside one that is not the last: none past it is copied. */
    assert_true(count_segments(to.dir, UINT64_MAX) > 1);
    assert_true(count_segments(fx->dir, UINT64_MAX) > count_segments(fx->dir, 140));
    assert_int_equal(count_segments(to.dir, UINT64_MAX), count_segments(fx->dir, 140));
    expect_log_prefix(fx, &to, 140);
    assert_int_equal(commit_read_acked(to.dir, &acked), 0);
    assert_int_equal(acked, 140);

    expect_serves(o, to.dir, 140, 200, now);
}

/* An existing empty directory is a target too (backup.h: "must not exist or be empty"). */
static void test_backup_into_empty_dir(void **state)
{
    fx_t *fx = *state, to = target_of(fx);
    lines_t lines = {.len = 0};
    check_result_t res;
    small_data_dir(fx, 10);

    assert_int_equal(mkdir(to.dir, 0755), 0);
    assert_int_equal(run_backup(fx, to.dir, &lines), TOOLS_OK);
    expect_check_passes(to.dir, &res);
    expect_log_prefix(fx, &to, 10);
}

/* A target that exists and is not empty is refused before anything is written to it. */
static void test_backup_refuses_non_empty_target(void **state)
{
    fx_t *fx = *state, to = target_of(fx);
    lines_t lines = {.len = 0};
    char path[512], *text = NULL;
    small_data_dir(fx, 0);

    assert_int_equal(mkdir(to.dir, 0755), 0);
    snprintf(path, sizeof(path), "%s/precious", to.dir);
    assert_int_equal(tu_write_file(path, "keep", 4), 0);
    assert_int_equal(run_backup(fx, to.dir, &lines), TOOLS_ERROR);
    expect_problem(&lines, "exists and is not empty");
    assert_int_equal(count_entries(to.dir), 1);
    assert_int_equal(tu_read_file(path, &text, NULL), 0);
    assert_string_equal(text, "keep");
    free(text);
}

/*
 * A source without a secret, and a source that does not exist, are refused with the reason
 * reported. No secret is written to the target (a target holding one would look like a data
 * dir); what else was written stays (backup.h).
 */
static void test_backup_refuses_source_without_secret(void **state)
{
    fx_t *fx = *state, to = target_of(fx);
    lines_t lines = {.len = 0};
    char path[512];
    small_data_dir(fx, 10);

    uint8_t secret[KEYHASH_SECRET_LEN];
    assert_int_equal(secret_read(fx->dir, secret), 1);
    snprintf(path, sizeof(path), "%s/secret", fx->dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(run_backup(fx, to.dir, &lines), TOOLS_ERROR);
    expect_problem(&lines, "secret is missing or unreadable");
    /* Refused before anything is written, so the same command works once the cause is gone. */
    assert_int_equal(access(to.dir, F_OK), -1);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(secret_write(fx->dir, secret), 0);
    assert_int_equal(run_backup(fx, to.dir, &lines), TOOLS_OK);
    expect_same_secret(fx->dir, to.dir);
}

static void test_backup_refuses_missing_source(void **state)
{
    fx_t *fx = *state, to = target_of(fx);
    lines_t lines = {.len = 0};

    assert_int_equal(access(fx->dir, F_OK), -1); /* commit_open never ran: no data dir */
    assert_int_equal(run_backup(fx, to.dir, &lines), TOOLS_ERROR);
    expect_problem(&lines, "secret is missing or unreadable");
    assert_int_equal(access(fx->dir, F_OK), -1); /* a backup creates nothing in its source */
    assert_int_equal(access(to.dir, F_OK), -1);  /* nor its target, when it refuses */
}

/* A target whose parent does not exist cannot be created: refused, the reason reported. */
static void test_backup_refuses_target_without_parent(void **state)
{
    fx_t *fx = *state;
    lines_t lines = {.len = 0};
    char to[512];
    small_data_dir(fx, 0);

    snprintf(to, sizeof(to), "%s/no/such/parent", fx->base);
    assert_int_equal(run_backup(fx, to, &lines), TOOLS_ERROR);
    expect_problem(&lines, "creating ");
    assert_int_equal(access(to, F_OK), -1);
}

/*
 * DIR/TAGGED_FROM as an upgrade from store format 3 leaves it (the offset of the first record
 * written by a binary that tags) is in the backup with the same value: without it a start on
 * the backup would write the log's end there, and every reader would take the records below
 * for untagged ones and scan them (backup.c). 4 is neither what a new data dir gets (0) nor the
 * log's end (10), so only a copy of the file gives it.
 */
static void test_backup_copies_tagged_from(void **state)
{
    fx_t *fx = *state, to = target_of(fx);
    lines_t lines = {.len = 0};
    check_result_t res;
    uint64_t from = 0;
    small_data_dir(fx, 10);

    assert_int_equal(retag_write_from(fx->dir, 4), 0);
    assert_int_equal(run_backup(fx, to.dir, &lines), TOOLS_OK);
    assert_int_equal(retag_read_from(to.dir, &from), 0);
    assert_int_equal(from, 4);
    expect_check_passes(to.dir, &res);
    expect_serves(cf_default_opts(fx), to.dir, 10, 11, tu_now_ms());
}

/* A source without DIR/TAGGED_FROM (no binary that tags has opened it) gives a backup without
 * one: the start on the backup decides, as it would have on the source. */
static void test_backup_without_tagged_from(void **state)
{
    fx_t *fx = *state, to = target_of(fx);
    lines_t lines = {.len = 0};
    check_result_t res;
    char path[512];
    uint64_t from = 0;
    small_data_dir(fx, 10);

    snprintf(path, sizeof(path), "%s/TAGGED_FROM", fx->dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(run_backup(fx, to.dir, &lines), TOOLS_OK);
    assert_int_equal(retag_read_from(to.dir, &from), 1);
    assert_int_equal(retag_read_from(fx->dir, &from), 1); /* nor is one written to the source */
    expect_check_passes(to.dir, &res);
}

/* ---- the window changing between the two looks at the generations ---- */

/*
 * backup_gens takes the generations sealed below the LMDB copy's bound from the set before the
 * copy and the set after it. The between_views hook changes the (closed) source there, with the
 * operations a server's checkpointer and merger use, so each interleaving is reached without a
 * race: a seal there is in the copy's bound (seal_young commits it before the copy is taken).
 */
enum change {
    CHANGE_SEAL,       /* seal the young store: a generation only the second look has */
    CHANGE_MERGE,      /* merge the two oldest: the second look has a wider range */
    CHANGE_DROP,       /* drop the oldest: only the first look has it */
    CHANGE_GAP_END,    /* seal, then drop everything: neither look reaches the bound */
    CHANGE_GAP_MIDDLE, /* seal, 20 events, seal, then drop all but the newest: a hole */
};

typedef struct {
    const fx_t *fx;
    commit_options_t o; /* the source's, for CHANGE_GAP_MIDDLE's events */
    enum change what;
    int64_t now;
    int ran;
} change_t;

/* Seals the young store of the closed source into a generation, as the checkpointer does;
 * returns the keys sealed. */
static uint64_t seal_source(const fx_t *fx)
{
    char store[512], gens[512];
    store_options_t so = {0};
    store_t *st = NULL;
    genset_t *gs = NULL;
    uint64_t sealed = 0;
    snprintf(store, sizeof(store), "%s/store", fx->dir);
    snprintf(gens, sizeof(gens), "%s/store/gens", fx->dir);
    assert_int_equal(store_open(store, &so, &st), STORE_OK);
    assert_int_equal(genset_open(gens, 0, &gs), GEN_OK);
    assert_int_equal(seal_young(st, gs, genset_bits_per_key(gs), &sealed), STORE_OK);
    genset_close(gs);
    store_close(st);
    return sealed;
}

/* Records in the closed source's store that generations below `dropped_below` are dropped, as
 * seal_maintain does before their files go. */
static void record_drop(const fx_t *fx, uint64_t dropped_below)
{
    char store[512];
    store_options_t so = {0};
    store_t *st = NULL;
    snprintf(store, sizeof(store), "%s/store", fx->dir);
    assert_int_equal(store_open(store, &so, &st), STORE_OK);
    assert_int_equal(store_txn_begin(st), STORE_OK);
    assert_int_equal(store_record_drop(st, dropped_below), STORE_OK);
    assert_int_equal(store_txn_commit(st), STORE_OK);
    store_close(st);
}

/* Merges the `n` oldest generations of the closed source (n > 0) or drops its `-n` oldest
 * (n < 0; all but the newest: n == 0), the drop recorded first as the window does. */
static void merge_or_drop(const fx_t *fx, long n)
{
    char gens[512];
    genset_t *gs = NULL;
    snprintf(gens, sizeof(gens), "%s/store/gens", fx->dir);
    assert_int_equal(genset_open(gens, 0, &gs), GEN_OK);
    genset_view_t *v = genset_view(gs);
    size_t count = genset_view_count(v);
    if (n > 0) {
        assert_true(count >= (size_t)n);
        assert_int_equal(genset_merge(gs, v, 0, (size_t)n, NULL), GEN_OK);
    } else {
        size_t drop = n < 0 ? (size_t)-n : count - 1;
        assert_true(count >= drop && drop > 0);
        gen_info_t newest_dropped;
        gen_get_info(genset_view_gen(v, drop - 1), &newest_dropped);
        record_drop(fx, newest_dropped.id.end);
        assert_int_equal(genset_drop_oldest(gs, v, drop), GEN_OK);
    }
    genset_view_release(v);
    genset_close(gs);
}

/*
 * A closed data dir with ids 0..299: five generations of 50 keys, each sealed by seal_source
 * after a commit took them, and 50 keys in the young store. young_keys 64: the commit seals
 * none itself (it seals at 64), and its merger merges none (it merges generations under 3/4 of
 * 64 keys), so the set is exactly these five.
 */
static commit_options_t gens_data_dir(const fx_t *fx, int64_t now)
{
    commit_options_t o = cf_default_opts(fx);
    o.young_keys = 64;
    for (unsigned first = 0; first < 300; first += 50) {
        commit_t *c = cf_open(&o);
        cf_submit_range(c, first, 50, now, COMMIT_ACCEPTED);
        commit_close(c);
        if (first < 250)
            assert_int_equal(seal_source(fx), 50);
    }
    assert_int_equal(count_gens(fx->dir), 5);
    return o;
}

static void change_between_views(void *arg)
{
    change_t *ch = arg;
    const fx_t *fx = ch->fx;
    ch->ran++;
    switch (ch->what) {
    case CHANGE_SEAL:
        assert_int_equal(seal_source(fx), 50);
        break;
    case CHANGE_MERGE:
        merge_or_drop(fx, 2);
        break;
    case CHANGE_DROP:
        merge_or_drop(fx, -1);
        break;
    case CHANGE_GAP_END:
        assert_int_equal(seal_source(fx), 50);
        merge_or_drop(fx, -(long)count_gens(fx->dir));
        break;
    case CHANGE_GAP_MIDDLE: {
        assert_int_equal(seal_source(fx), 50);
        commit_t *c = cf_open(&ch->o);
        cf_submit_range(c, 300, 20, ch->now, COMMIT_ACCEPTED);
        commit_close(c);
        assert_int_equal(seal_source(fx), 20);
        merge_or_drop(fx, 0); /* the newest starts past where the first look ends */
        break;
    }
    }
}

/*
 * A backup with `what` done between the two looks is complete: `check` passes, it holds the
 * 300 records, and a server on it knows every one of them (all acknowledged before the backup
 * began). Returns the source's generations before the change.
 */
static size_t expect_complete_despite(const fx_t *fx, const fx_t *to, enum change what)
{
    lines_t lines = {.len = 0};
    check_result_t res;
    int64_t now = tu_now_ms();
    change_t ch = {.fx = fx, .what = what, .now = now};
    ch.o = gens_data_dir(fx, now);
    size_t before = count_gens(fx->dir);

    int rc = run_backup_hooked(fx, to->dir, &lines, change_between_views, &ch);
    if (rc != TOOLS_OK)
        print_error("backup:\n%s", lines.text);
    assert_int_equal(rc, TOOLS_OK);
    assert_int_equal(ch.ran, 1);
    assert_null(strstr(lines.text, "PROBLEM"));
    expect_check_passes(to->dir, &res);
    assert_int_equal(res.records, 300);
    expect_log_prefix(fx, to, 300);
    expect_serves(ch.o, to->dir, 300, 301, now);
    return before;
}

/* A seal between the looks: its generation, in the copy's bound, comes from the second look. */
static void test_backup_seal_between_views(void **state)
{
    fx_t *fx = *state, to = target_of(fx);
    size_t before = expect_complete_despite(fx, &to, CHANGE_SEAL);
    assert_int_equal(count_gens(fx->dir), before + 1);
    assert_int_equal(count_gens(to.dir), before + 1);
}

/* A merge between the looks: both have the range, the wider one (the merge's) is copied. */
static void test_backup_merge_between_views(void **state)
{
    fx_t *fx = *state, to = target_of(fx);
    size_t before = expect_complete_despite(fx, &to, CHANGE_MERGE);
    assert_int_equal(count_gens(fx->dir), before - 1);
    assert_int_equal(count_gens(to.dir), before - 1);
}

/* A drop between the looks: the first look held the file open, the copy has it. */
static void test_backup_drop_between_views(void **state)
{
    fx_t *fx = *state, to = target_of(fx);
    size_t before = expect_complete_despite(fx, &to, CHANGE_DROP);
    assert_int_equal(count_gens(fx->dir), before - 1);
    assert_int_equal(count_gens(to.dir), before);
}

/*
 * When the looks leave a range below the copy's bound in neither, the backup is refused, as a
 * problem, and what it wrote stays for the operator (backup.h): the LMDB copy, but no secret,
 * so it is no data dir. The source changed no further: the next backup passes.
 */
static void expect_gap_refused(const fx_t *fx, enum change what)
{
    fx_t to = target_of(fx), again = target_named(fx, "again");
    lines_t lines = {.len = 0};
    check_result_t res;
    char path[512];
    uint8_t secret[KEYHASH_SECRET_LEN];
    int64_t now = tu_now_ms();
    change_t ch = {.fx = fx, .what = what, .now = now};
    ch.o = gens_data_dir(fx, now);

    assert_int_equal(run_backup_hooked(fx, to.dir, &lines, change_between_views, &ch), TOOLS_ERROR);
    assert_int_equal(ch.ran, 1);
    expect_problem(&lines, "generations: the window changed too much during the copy (a gap); "
                           "run backup again");
    snprintf(path, sizeof(path), "%s/store/data.mdb", to.dir);
    assert_int_equal(access(path, F_OK), 0);
    assert_int_equal(secret_read(to.dir, secret), 0);

    assert_int_equal(run_backup(fx, again.dir, &lines), TOOLS_OK);
    expect_check_passes(again.dir, &res);
}

/* Sealed and then dropped, all of it: the first look ends below the copy's bound. */
static void test_backup_refuses_gap_at_end(void **state)
{
    expect_gap_refused(*state, CHANGE_GAP_END);
}

/* Two seals, the first dropped: the second look starts past where the first ends. */
static void test_backup_refuses_gap_in_middle(void **state)
{
    expect_gap_refused(*state, CHANGE_GAP_MIDDLE);
}

/* ---- while a commit is open ---- */

/* A writer on another thread, as the server's connections: requests of BATCH ids from `next`. */
#define BATCH      25
#define WRITER_MAX 6000 /* ids; bounds the writer if the backup is quick */

typedef struct {
    commit_t *c;
    atomic_uint next; /* ids below it were acknowledged */
    atomic_bool stop;
    atomic_int failed; /* a request or an event not accepted */
} writer_t;

static void *writer_thread(void *arg)
{
    writer_t *w = arg;
    unsigned ids[BATCH];
    int64_t now = tu_now_ms();
    while (!atomic_load(&w->stop) && atomic_load(&w->next) < WRITER_MAX) {
        unsigned first = atomic_load(&w->next);
        tu_waiter_t wt;
        cf_req_t r;
        for (unsigned i = 0; i < BATCH; i++)
            ids[i] = first + i;
        tu_waiter_init(&wt);
        cf_req_init(&r, commit_secret(w->c), ids, BATCH, now, &wt);
        tu_waiter_add(&wt, 1);
        if (commit_submit(w->c, &r.req) != COMMIT_OK) {
            atomic_store(&w->failed, 1);
            tu_waiter_done(&wt);
        }
        tu_waiter_wait(&wt);
        tu_waiter_destroy(&wt);
        for (unsigned i = 0; i < BATCH; i++)
            if (r.req.status != COMMIT_OK || r.ev[i].result != COMMIT_ACCEPTED)
                atomic_store(&w->failed, 1);
        cf_req_free(&r);
        if (atomic_load(&w->failed))
            break;
        atomic_store(&w->next, first + BATCH);
    }
    return NULL;
}

/*
 * A backup taken while the source's commit is open and a writer submits (the server's case)
 * is consistent: `check` passes on it; its log is a prefix of the source's that holds at least
 * every record acknowledged before the backup began (backup.c cuts at what was acknowledged
 * by then); a server on it knows every id of its log and none past it (those are new, at its
 * log's end). The source goes on serving and closes as usual.
 */
static void test_backup_while_open(void **state)
{
    fx_t *fx = *state, to = target_of(fx);
    lines_t lines = {.len = 0};
    check_result_t res;
    commit_stats_t s;
    int64_t now = tu_now_ms();
    commit_options_t o = cf_default_opts(fx);
    o.young_keys = 64;
    commit_t *c = cf_open(&o);

    /* Sealed generations and a checkpoint behind, acknowledged records past it. */
    submit_batches(c, 0, 300, BATCH, now, COMMIT_ACCEPTED);
    cf_await_stat(c, offsetof(commit_stats_t, window.seals), 1, &s);
    writer_t w = {.c = c};
    atomic_init(&w.next, 300);
    atomic_init(&w.stop, false);
    atomic_init(&w.failed, 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, writer_thread, &w), 0);
    while (atomic_load(&w.next) < 400 && !atomic_load(&w.failed)) /* the writer is under way */
        sched_yield();
    unsigned acked_before = atomic_load(&w.next);

    int rc = run_backup(fx, to.dir, &lines);
    atomic_store(&w.stop, true);
    assert_int_equal(pthread_join(th, NULL), 0);
    if (rc != TOOLS_OK)
        print_error("backup:\n%s", lines.text);
    assert_int_equal(rc, TOOLS_OK);
    assert_int_equal(atomic_load(&w.failed), 0);
    unsigned acked_source = atomic_load(&w.next);
    cf_submit_range(c, acked_source, 10, now, COMMIT_ACCEPTED); /* the source serves on */
    commit_close(c);

    expect_check_passes(to.dir, &res);
    uint64_t n = res.next_offset;
    assert_int_equal(res.first_offset, 0);
    assert_true(n >= acked_before);
    assert_true(n <= acked_source);
    expect_log_prefix(fx, &to, n);
    expect_same_secret(fx->dir, to.dir);

    /* Every id was logged at its own offset: the backup's log holds ids 0..n-1. */
    expect_serves(o, to.dir, (unsigned)n, acked_source, now);
    expect_check_passes(fx->dir, &res);
}

#define T(f) cmocka_unit_test_setup_teardown(f, cf_setup, cf_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_backup_sealed),
        T(test_backup_cuts_at_acked),
        T(test_backup_into_empty_dir),
        T(test_backup_refuses_non_empty_target),
        T(test_backup_refuses_source_without_secret),
        T(test_backup_refuses_missing_source),
        T(test_backup_refuses_target_without_parent),
        T(test_backup_copies_tagged_from),
        T(test_backup_without_tagged_from),
        T(test_backup_seal_between_views),
        T(test_backup_merge_between_views),
        T(test_backup_drop_between_views),
        T(test_backup_refuses_gap_at_end),
        T(test_backup_refuses_gap_in_middle),
        T(test_backup_while_open),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
