/* commit_fixture.c: a group commit in a temporary data dir (see commit_fixture.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "commit_fixture.h"
#include "storage/log/log.h"
#include "storage/window/keyhash.h"

typedef tu_fixture_t fx_t;

/* The source cf_req_init's events come from (per-source budgets; cf_setup resets it). */
static const char *req_source = CF_SOURCE;

int cf_setup(void **state)
{
    req_source = CF_SOURCE; /* a failed test may have left another */
    return tu_fixture_setup(state, "commit", "data");
}

int cf_teardown(void **state)
{
    return tu_fixture_teardown(state);
}

/*
 * Fault injection: declared here rather than through lmdb.h, which only store.c includes. The
 * definition below is in the executable (this file is compiled into each test binary that
 * uses it, not archived), so the storage library's calls resolve to it.
 */
typedef struct MDB_txn MDB_txn;
int mdb_txn_commit(MDB_txn *txn);
void mdb_txn_abort(MDB_txn *txn);

static atomic_int inject_commit_failures;
static atomic_int inject_commit_code;
static atomic_int inject_commit_skip;

static int (*real_commit(void))(MDB_txn *)
{
    static int (*fn)(MDB_txn *);
    if (!fn)
        *(void **)&fn = dlsym(RTLD_NEXT, "mdb_txn_commit");
    return fn;
}

int mdb_txn_commit(MDB_txn *txn)
{
    int skip = atomic_load(&inject_commit_skip);
    while (skip > 0 && atomic_load(&inject_commit_failures) > 0) {
        if (atomic_compare_exchange_weak(&inject_commit_skip, &skip, skip - 1))
            return real_commit()(txn);
    }
    int left = atomic_load(&inject_commit_failures);
    while (left > 0) {
        if (atomic_compare_exchange_weak(&inject_commit_failures, &left, left - 1)) {
            mdb_txn_abort(txn);
            return atomic_load(&inject_commit_code);
        }
    }
    return real_commit()(txn);
}

void cf_inject_commit_failures(int code, int skip, int failures)
{
    atomic_store(&inject_commit_code, code);
    atomic_store(&inject_commit_skip, skip);
    atomic_store(&inject_commit_failures, failures); /* last: it arms the other two */
}

int cf_commit_failures_left(void)
{
    return atomic_load(&inject_commit_failures);
}

bool cf_inject_available(void)
{
    return real_commit() != NULL;
}

commit_options_t cf_default_opts(const fx_t *fx)
{
    commit_options_t o = {
        .data_dir = fx->dir,
        .window_ms = 3600 * 1000,
        .max_keys = 0,
        .segment_bytes = 1 << 20,
        .map_size = 0,
        .max_batch_events = 0,
    };
    return o;
}

commit_t *cf_open(const commit_options_t *o)
{
    commit_t *c = NULL;
    char err[512] = "";
    int rc = commit_open(o, &c, err, sizeof(err));
    if (rc != COMMIT_OK)
        print_error("commit_open: %s: %s\n", commit_strerror(rc), err);
    assert_int_equal(rc, COMMIT_OK);
    assert_non_null(c);
    return c;
}

/* Every request's done callback counts down a waiter (testutil.h): no sleeps. */
void cf_on_done(commit_req_t *req, void *arg)
{
    (void)req;
    tu_waiter_done(arg);
}

/* ---- events ---- */

int cf_fmt_payload(char *buf, size_t len, unsigned id)
{
    return snprintf(buf, len, "{\"messageId\":\"m-%u\",\"event\":\"Order Completed\"}", id);
}

void cf_req_init(cf_req_t *r, const uint8_t *secret, const unsigned *ids, size_t n,
                 int64_t received_ms, tu_waiter_t *w)
{
    memset(r, 0, sizeof(*r));
    r->ev = calloc(n ? n : 1, sizeof(*r->ev));
    r->payload = calloc(n ? n : 1, sizeof(*r->payload));
    assert_non_null(r->ev);
    assert_non_null(r->payload);
    for (size_t i = 0; i < n; i++) {
        char mid[32];
        int ml = snprintf(mid, sizeof(mid), "m-%u", ids[i]);
        keyhash(secret, req_source, strlen(req_source), mid, (size_t)ml, r->ev[i].key);
        int pl = cf_fmt_payload(r->payload[i], sizeof(r->payload[i]), ids[i]);
        r->ev[i].data = r->payload[i];
        r->ev[i].len = (uint32_t)pl;
        r->ev[i].received_ms = received_ms;
        r->ev[i].result = -1;
        r->ev[i].offset = UINT64_MAX;
    }
    r->req.events = r->ev;
    r->req.n = n;
    r->req.status = -100;
    r->req.done = cf_on_done;
    r->req.arg = w;
}

void cf_req_free(cf_req_t *r)
{
    free(r->ev);
    free(r->payload);
}

/* Whether cf_submit_status asks the generations on the submitting thread first. */
static bool prepare_submits;

void cf_prepare_submits(bool on)
{
    prepare_submits = on;
}

int cf_submit_status(commit_t *c, cf_req_t *r, const unsigned *ids, size_t n, int64_t received_ms)
{
    tu_waiter_t w;
    tu_waiter_init(&w);
    cf_req_init(r, commit_secret(c), ids, n, received_ms, &w);
    if (prepare_submits)
        commit_prepare(c, r->ev, n);
    tu_waiter_add(&w, 1);
    assert_int_equal(commit_submit(c, &r->req), COMMIT_OK);
    tu_waiter_wait(&w);
    assert_int_equal(w.calls, 1);
    tu_waiter_destroy(&w);
    return r->req.status;
}

void cf_submit_wait(commit_t *c, cf_req_t *r, const unsigned *ids, size_t n, int64_t received_ms)
{
    assert_int_equal(cf_submit_status(c, r, ids, n, received_ms), COMMIT_OK);
}

void cf_submit_expect(commit_t *c, const unsigned *ids, size_t n, int64_t received_ms, int want)
{
    cf_req_t r;
    cf_submit_wait(c, &r, ids, n, received_ms);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(r.ev[i].result, want);
    cf_req_free(&r);
}

void cf_submit_range(commit_t *c, unsigned first, unsigned n, int64_t received_ms, int want)
{
    unsigned *ids = calloc(n ? n : 1, sizeof(*ids));
    assert_non_null(ids);
    for (unsigned i = 0; i < n; i++)
        ids[i] = first + i;
    cf_submit_expect(c, ids, n, received_ms, want);
    free(ids);
}

void cf_submit_from(commit_t *c, const char *source, unsigned first, unsigned n,
                    int64_t received_ms, int want)
{
    req_source = source;
    cf_submit_range(c, first, n, received_ms, want);
    req_source = CF_SOURCE;
}

void cf_submit_one_accepted(commit_t *c, unsigned id, int64_t received_ms, uint64_t offset)
{
    cf_req_t r;
    cf_submit_wait(c, &r, &id, 1, received_ms);
    assert_int_equal(r.ev[0].result, COMMIT_ACCEPTED);
    assert_int_equal(r.ev[0].offset, offset);
    cf_req_free(&r);
}

/* ---- reading back ---- */

window_source_t cf_source_stats(commit_t *c, const char *source)
{
    window_source_t out[8];
    uint32_t tag = keyhash_source_tag(commit_secret(c), source, strlen(source));
    size_t n = commit_sources(c, out, 8);
    for (size_t i = 0; i < n && i < 8; i++)
        if (out[i].tag == tag)
            return out[i];
    fail_msg("no stats for source %s", source);
    return out[0];
}

/* Checkpoints run on the writer's own clock: their counters are polled, not awaited. */
void cf_await_stat(commit_t *c, size_t field, uint64_t want, commit_stats_t *s)
{
    int64_t deadline = tu_monotonic_ms() + 10000;
    for (;;) {
        commit_get_stats(c, s);
        uint64_t v;
        memcpy(&v, (const char *)s + field, sizeof(v));
        if (v >= want)
            return;
        assert_true(tu_monotonic_ms() < deadline);
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL); /* polling a condition, not a stand-in for one */
    }
}

uint64_t cf_read_log(const fx_t *fx, char ***out, uint8_t (**keys)[16])
{
    char dir[512];
    log_reader_t *r = NULL;
    log_record_t rec;
    uint64_t n = 0, cap = 16;
    char **v = calloc(cap, sizeof(*v));
    uint8_t(*k)[16] = calloc(cap, sizeof(*k));
    int rc;
    assert_non_null(v);
    assert_non_null(k);
    snprintf(dir, sizeof(dir), "%s/log", fx->dir);
    assert_int_equal(log_reader_open(dir, 0, &r), LOG_OK);
    while ((rc = log_reader_next(r, UINT64_MAX, &rec)) == LOG_OK) {
        assert_int_equal(rec.offset, n);
        if (n == cap) {
            cap *= 2;
            v = realloc(v, cap * sizeof(*v));
            k = realloc(k, cap * sizeof(*k));
            assert_non_null(v);
            assert_non_null(k);
        }
        v[n] = strndup(rec.data, rec.len);
        assert_non_null(v[n]);
        memcpy(k[n], rec.key, 16);
        n++;
    }
    assert_int_equal(rc, LOG_END);
    log_reader_close(r);
    *out = v;
    if (keys)
        *keys = k;
    else
        free(k);
    return n;
}

void cf_free_log(char **v, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

void cf_expect_log_records(const fx_t *fx, uint64_t n)
{
    char **logv = NULL;
    uint64_t got = cf_read_log(fx, &logv, NULL);
    assert_int_equal(got, n);
    cf_free_log(logv, got);
}

/* ---- what an operator does to a data dir ---- */

void cf_copy_store(const fx_t *fx, bool to_copy)
{
    const char *files[] = {"data.mdb", "lock.mdb"};
    char a[512], b[512], copydir[300];
    snprintf(copydir, sizeof(copydir), "%s/store-copy", fx->base);
    if (to_copy)
        assert_true(mkdir(copydir, 0755) == 0);
    for (size_t i = 0; i < 2; i++) {
        snprintf(a, sizeof(a), "%s/store/%s", fx->dir, files[i]);
        snprintf(b, sizeof(b), "%s/%s", copydir, files[i]);
        assert_int_equal(to_copy ? tu_copy_file(a, b) : tu_copy_file(b, a), 0);
    }
}

void cf_remove_store(const fx_t *fx)
{
    const char *files[] = {"data.mdb", "lock.mdb"};
    char path[512];
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s/store/%s", fx->dir, files[i]);
        assert_int_equal(unlink(path), 0);
    }
}

uint64_t cf_delete_first_segments(const fx_t *fx, size_t n)
{
    char logdir[512], path[600];
    uint64_t *bases = NULL;
    log_info_t li;
    snprintf(logdir, sizeof(logdir), "%s/log", fx->dir);
    assert_int_equal(log_describe(logdir, &li, &bases), LOG_OK);
    assert_true(li.segments > n);
    for (size_t i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/%020llu.seg", logdir, (unsigned long long)bases[i]);
        assert_int_equal(unlink(path), 0);
        snprintf(path, sizeof(path), "%s/%020llu.idx", logdir, (unsigned long long)bases[i]);
        unlink(path);
    }
    uint64_t first = bases[n];
    free(bases);
    return first;
}

/* ---- data dirs in the states the commit tests leave ---- */

/*
 * --max-keys is each source's budget: one source's flood ages out only its own keys, however
 * its keys and another's interleave, while serving and after a restart.
 */
void cf_budget_per_source(const fx_t *fx, commit_options_t *o, int64_t now)
{
    *o = cf_default_opts(fx);
    o->max_keys = 100;
    commit_t *c = cf_open(o);

    cf_submit_from(c, "calm", 0, 5, now, COMMIT_ACCEPTED);
    cf_submit_from(c, "flood", 1000, 60, now, COMMIT_ACCEPTED);
    cf_submit_from(c, "calm", 5, 5, now, COMMIT_ACCEPTED);
    cf_submit_from(c, "flood", 1060, 90, now, COMMIT_ACCEPTED); /* 150: 50 over its budget */
    cf_submit_from(c, "calm", 0, 10, now, COMMIT_DUPLICATE);    /* the retry */
    cf_submit_from(c, "flood", 1100, 50, now, COMMIT_DUPLICATE);
    cf_submit_from(c, "flood", 1000, 10, now, COMMIT_ACCEPTED); /* its own oldest went */
    window_source_t calm = cf_source_stats(c, "calm"), flood = cf_source_stats(c, "flood");
    assert_int_equal(calm.keys, 10);
    assert_int_equal(calm.evicted_size, 0);
    assert_int_equal(calm.forgot_ms, 0);
    assert_int_equal(flood.keys, 100);
    assert_int_equal(flood.evicted_size, 60);
    assert_int_equal(flood.forgot_ms, now);
    commit_stats_t s;
    commit_get_stats(c, &s);
    assert_int_equal(s.window.keys, 110);
    assert_true(s.carried > 0);
    /* Both sources are within budget: the next one in flood's place ages out nothing else. */
    cf_submit_from(c, "calm", 10, 90, now, COMMIT_ACCEPTED);
    assert_int_equal(cf_source_stats(c, "calm").evicted_size, 0);
    commit_close(c);

    c = cf_open(o);
    cf_submit_from(c, "calm", 0, 100, now, COMMIT_DUPLICATE);
    assert_int_equal(cf_source_stats(c, "calm").keys, 100);
    assert_int_equal(cf_source_stats(c, "flood").keys, 100);
    commit_close(c);
}

/*
 * A checkpoint deletes the keys it evicts in its key-range transactions, ahead of their
 * sequence entries. Cut short after the first of them, first while serving (storage is
 * re-established), then at close (the store stays so until the next open).
 */
void cf_evictions_cut_short(const fx_t *fx, commit_options_t *o)
{
    *o = cf_default_opts(fx);
    o->max_keys = 5000;
    commit_t *c = cf_open(o);
    commit_stats_t s;
    int64_t now = tu_now_ms();

    if (!cf_inject_available()) {
        commit_close(c);
        skip();
    }
    for (unsigned i = 0; i < 5; i++)
        cf_submit_range(c, i * 1000, 1000, now, COMMIT_ACCEPTED);
    cf_await_stat(c, offsetof(commit_stats_t, checkpoints), 1, &s);
    /* 5,000 more evict the first 5,000: 10,000 puts and deletions, three key-range
     * transactions; the second fails. */
    for (unsigned i = 5; i < 10; i++)
        cf_submit_range(c, i * 1000, 1000, now, COMMIT_ACCEPTED);
    cf_inject_commit_failures(EIO, 1, 1);
    cf_await_stat(c, offsetof(commit_stats_t, recoveries), 1, &s);
    assert_int_equal(s.checkpoint_failures, 1);
    assert_int_equal(s.window.keys, 5000);
    cf_submit_range(c, 5000, 5000, now, COMMIT_DUPLICATE);
    cf_submit_range(c, 4900, 100, now, COMMIT_ACCEPTED); /* evicted: new again */

    /* Again at close, and the re-establishing fails too: the store stays cut short. */
    uint64_t before = s.checkpoints;
    for (unsigned i = 10; i < 15; i++)
        cf_submit_range(c, i * 1000, 1000, now, COMMIT_ACCEPTED);
    commit_get_stats(c, &s);
    if (s.checkpoints != before) {
        commit_close(c);
        skip(); /* a timed checkpoint came first (a very slow run, e.g. under valgrind) */
    }
    cf_inject_commit_failures(EIO, 1, 2);
    commit_close(c);
    assert_int_equal(cf_commit_failures_left(), 0);
}

/*
 * A log that starts past the store's applied offset. A store the open creates (none was there)
 * starts where the log does; an existing store lacks the keys in between.
 */
void cf_log_gap(const fx_t *fx, commit_options_t *o)
{
    *o = cf_default_opts(fx);
    o->segment_bytes = 4096;
    commit_t *c = cf_open(o);
    commit_stats_t s;
    int64_t now = tu_now_ms();
    for (unsigned i = 0; i < 300; i += 20)
        cf_submit_range(c, i, 20, now, COMMIT_ACCEPTED); /* several segments */
    commit_close(c);

    /* No store: a new one starts at the log's first offset. */
    cf_remove_store(fx);
    uint64_t first = cf_delete_first_segments(fx, 2);
    c = cf_open(o);
    commit_get_stats(c, &s);
    assert_int_equal(s.log_first_offset, first);
    assert_int_equal(s.replayed_at_open, 300 - first);
    cf_submit_range(c, (unsigned)first, 300 - (unsigned)first, now, COMMIT_DUPLICATE);
    commit_close(c);
    cf_copy_store(fx, true); /* applied: 300 */

    /* An existing store whose applied offset the log's start has passed. */
    c = cf_open(o);
    for (unsigned i = 300; i < 600; i += 20)
        cf_submit_range(c, i, 20, now, COMMIT_ACCEPTED);
    commit_close(c);
    cf_copy_store(fx, false);
    char logdir[512];
    log_info_t li;
    snprintf(logdir, sizeof(logdir), "%s/log", fx->dir);
    size_t n = 0;
    uint64_t *bases = NULL;
    assert_int_equal(log_describe(logdir, &li, &bases), LOG_OK);
    while (n < li.segments && bases[n] <= 300)
        n++;
    free(bases);
    first = cf_delete_first_segments(fx, n); /* the first segment left starts past 300 */
    assert_true(first > 300);
}
