/* test_commit.c: group commit: exactly-once acceptance, recovery at open, window, lock, secret. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "storage/commit.h"
#include "storage/keyhash.h"
#include "storage/log.h"

#define SOURCE "test-src"

typedef struct {
    char base[64];  /* mkdtemp dir, removed in teardown */
    char data[128]; /* base/data: the data dir (commit_open creates it) */
} fx_t;

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int setup(void **state)
{
    fx_t *fx = calloc(1, sizeof(*fx));
    if (!fx)
        return -1;
    snprintf(fx->base, sizeof(fx->base), "/tmp/ingestd-test-commit-XXXXXX");
    if (!mkdtemp(fx->base)) {
        free(fx);
        return -1;
    }
    snprintf(fx->data, sizeof(fx->data), "%s/data", fx->base);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fx_t *fx = *state;
    int rc = nftw(fx->base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(fx);
    return rc;
}

/*
 * Fault injection: this binary's mdb_txn_commit() takes the place of LMDB's (store.c is linked
 * statically, liblmdb dynamically) and fails the next `inject_commit_failures` commits with
 * `inject_commit_code`, freeing the transaction as LMDB does on a failed commit. Declared here
 * rather than through lmdb.h, which only store.c includes.
 */
typedef struct MDB_txn MDB_txn;
int mdb_txn_commit(MDB_txn *txn);
void mdb_txn_abort(MDB_txn *txn);
#define INJECT_MDB_MAP_FULL (-30792) /* lmdb.h's MDB_MAP_FULL */

static atomic_int inject_commit_failures;
static atomic_int inject_commit_code;

static int (*real_commit(void))(MDB_txn *)
{
    static int (*fn)(MDB_txn *);
    if (!fn)
        *(void **)&fn = dlsym(RTLD_NEXT, "mdb_txn_commit");
    return fn;
}

int mdb_txn_commit(MDB_txn *txn)
{
    int left = atomic_load(&inject_commit_failures);
    while (left > 0) {
        if (atomic_compare_exchange_weak(&inject_commit_failures, &left, left - 1)) {
            mdb_txn_abort(txn);
            return atomic_load(&inject_commit_code);
        }
    }
    return real_commit()(txn);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static commit_options_t default_opts(const fx_t *fx)
{
    commit_options_t o = {
        .data_dir = fx->data,
        .window_ms = 3600 * 1000,
        .max_keys = 0,
        .segment_bytes = 1 << 20,
        .map_size = 0,
        .max_batch_events = 0,
    };
    return o;
}

static commit_t *open_commit(const commit_options_t *o)
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

/* ---- awaiting done callbacks: a counter under a mutex, no sleeps ---- */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t pending;
    size_t calls;
} waiter_t;

static void waiter_init(waiter_t *w)
{
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->pending = 0;
    w->calls = 0;
}

static void waiter_destroy(waiter_t *w)
{
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

static void on_done(commit_req_t *req, void *arg)
{
    waiter_t *w = arg;
    (void)req;
    pthread_mutex_lock(&w->mu);
    w->pending--;
    w->calls++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void waiter_add(waiter_t *w, size_t n)
{
    pthread_mutex_lock(&w->mu);
    w->pending += n;
    pthread_mutex_unlock(&w->mu);
}

static void waiter_wait(waiter_t *w)
{
    pthread_mutex_lock(&w->mu);
    while (w->pending > 0)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

/* ---- events ---- */

/* The payload of message id `id`; the log must hold exactly these bytes. */
static int fmt_payload(char *buf, size_t len, unsigned id)
{
    return snprintf(buf, len, "{\"messageId\":\"m-%u\",\"event\":\"Order Completed\"}", id);
}

typedef struct {
    commit_req_t req;
    commit_event_t *ev;
    char (*payload)[96];
} req_t;

static void req_init(req_t *r, const uint8_t *secret, const unsigned *ids, size_t n,
                     int64_t received_ms, waiter_t *w)
{
    memset(r, 0, sizeof(*r));
    r->ev = calloc(n ? n : 1, sizeof(*r->ev));
    r->payload = calloc(n ? n : 1, sizeof(*r->payload));
    assert_non_null(r->ev);
    assert_non_null(r->payload);
    for (size_t i = 0; i < n; i++) {
        char mid[32];
        int ml = snprintf(mid, sizeof(mid), "m-%u", ids[i]);
        keyhash(secret, SOURCE, strlen(SOURCE), mid, (size_t)ml, r->ev[i].key);
        int pl = fmt_payload(r->payload[i], sizeof(r->payload[i]), ids[i]);
        r->ev[i].data = r->payload[i];
        r->ev[i].len = (uint32_t)pl;
        r->ev[i].received_ms = received_ms;
        r->ev[i].result = -1;
        r->ev[i].offset = UINT64_MAX;
    }
    r->req.events = r->ev;
    r->req.n = n;
    r->req.status = -100;
    r->req.done = on_done;
    r->req.arg = w;
}

static void req_free(req_t *r)
{
    free(r->ev);
    free(r->payload);
}

/* Submits one request of the given ids and waits for its done callback. */
static void submit_wait(commit_t *c, req_t *r, const unsigned *ids, size_t n, int64_t received_ms)
{
    waiter_t w;
    waiter_init(&w);
    req_init(r, commit_secret(c), ids, n, received_ms, &w);
    waiter_add(&w, 1);
    assert_int_equal(commit_submit(c, &r->req), COMMIT_OK);
    waiter_wait(&w);
    assert_int_equal(w.calls, 1);
    assert_int_equal(r->req.status, COMMIT_OK);
    waiter_destroy(&w);
}

/* Submits ids, expects every event to get `want` (COMMIT_ACCEPTED / COMMIT_DUPLICATE). */
static void submit_expect(commit_t *c, const unsigned *ids, size_t n, int64_t received_ms, int want)
{
    req_t r;
    submit_wait(c, &r, ids, n, received_ms);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(r.ev[i].result, want);
    req_free(&r);
}

static void submit_range(commit_t *c, unsigned first, unsigned n, int64_t received_ms, int want)
{
    unsigned *ids = calloc(n ? n : 1, sizeof(*ids));
    assert_non_null(ids);
    for (unsigned i = 0; i < n; i++)
        ids[i] = first + i;
    submit_expect(c, ids, n, received_ms, want);
    free(ids);
}

/* Reads the whole log: payload of each offset into out[offset] (malloc'ed strings). */
static uint64_t read_log(const fx_t *fx, char ***out, uint8_t (**keys)[16])
{
    char dir[256];
    log_reader_t *r = NULL;
    log_record_t rec;
    uint64_t n = 0, cap = 16;
    char **v = calloc(cap, sizeof(*v));
    uint8_t(*k)[16] = calloc(cap, sizeof(*k));
    int rc;
    assert_non_null(v);
    assert_non_null(k);
    snprintf(dir, sizeof(dir), "%s/log", fx->data);
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

static void free_log(char **v, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* ---- tests ---- */

#define NTHREADS   4
#define NREQS      30
#define REQ_EVENTS 17
#define ID_SPACE   300

typedef struct {
    commit_t *c;
    int t;
    req_t reqs[NREQS];
    unsigned ids[NREQS][REQ_EVENTS];
    int submit_rc[NREQS];
} worker_t;

/* Overlapping ids across threads and requests, and within a request sometimes. */
static unsigned id_of(int t, int r, int e)
{
    return (unsigned)(t * 37 + r * 11 + e * 7 + (e == 5 ? 0 : e * e)) % ID_SPACE;
}

static void *worker(void *arg)
{
    worker_t *wk = arg;
    waiter_t w;
    int64_t now = now_ms();
    waiter_init(&w);
    for (int r = 0; r < NREQS; r++) {
        for (int e = 0; e < REQ_EVENTS; e++)
            wk->ids[r][e] = id_of(wk->t, r, e);
        req_init(&wk->reqs[r], commit_secret(wk->c), wk->ids[r], REQ_EVENTS, now, &w);
        waiter_add(&w, 1);
        wk->submit_rc[r] = commit_submit(wk->c, &wk->reqs[r].req);
        if (wk->submit_rc[r] != COMMIT_OK)
            on_done(&wk->reqs[r].req, &w); /* not queued: balance the count */
    }
    waiter_wait(&w);
    waiter_destroy(&w);
    return NULL;
}

static void test_concurrent_exactly_once(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = default_opts(fx);
    o.segment_bytes = 4096; /* rolls between batches (how many depends on the batching) */
    commit_t *c = open_commit(&o);
    static worker_t wk[NTHREADS];
    pthread_t th[NTHREADS];
    unsigned accepted_per_id[ID_SPACE] = {0}, seen_per_id[ID_SPACE] = {0};
    uint64_t accepted = 0, dups = 0, total = 0, distinct = 0;
    uint8_t secret[KEYHASH_SECRET_LEN];

    memcpy(secret, commit_secret(c), sizeof(secret));
    for (int t = 0; t < NTHREADS; t++) {
        memset(&wk[t], 0, sizeof(wk[t]));
        wk[t].c = c;
        wk[t].t = t;
        assert_int_equal(pthread_create(&th[t], NULL, worker, &wk[t]), 0);
    }
    for (int t = 0; t < NTHREADS; t++)
        assert_int_equal(pthread_join(th[t], NULL), 0);

    uint64_t noff = (uint64_t)NTHREADS * NREQS * REQ_EVENTS;
    unsigned *payload_id_at = calloc(noff, sizeof(*payload_id_at));
    bool *offset_used = calloc(noff, sizeof(*offset_used));
    assert_non_null(payload_id_at);
    assert_non_null(offset_used);
    for (int t = 0; t < NTHREADS; t++) {
        for (int r = 0; r < NREQS; r++) {
            assert_int_equal(wk[t].submit_rc[r], COMMIT_OK);
            assert_int_equal(wk[t].reqs[r].req.status, COMMIT_OK);
            for (int e = 0; e < REQ_EVENTS; e++) {
                commit_event_t *ev = &wk[t].reqs[r].ev[e];
                unsigned id = wk[t].ids[r][e];
                total++;
                seen_per_id[id]++;
                if (ev->result == COMMIT_ACCEPTED) {
                    accepted++;
                    accepted_per_id[id]++;
                    assert_true(ev->offset < noff);
                    assert_false(offset_used[ev->offset]);
                    offset_used[ev->offset] = true;
                    payload_id_at[ev->offset] = id;
                } else {
                    assert_int_equal(ev->result, COMMIT_DUPLICATE);
                    dups++;
                }
            }
        }
    }
    for (unsigned id = 0; id < ID_SPACE; id++) {
        if (seen_per_id[id] > 0)
            distinct++;
        assert_int_equal(accepted_per_id[id], seen_per_id[id] > 0 ? 1 : 0);
    }
    /* The id pattern must actually produce duplicates, or this test proves little. */
    assert_true(dups > total / 4);
    assert_int_equal(accepted, distinct);
    assert_int_equal(accepted + dups, total);
    /* Offsets are dense: 0 .. accepted-1, each once. */
    for (uint64_t off = 0; off < noff; off++)
        assert_int_equal(offset_used[off], off < accepted);

    commit_stats_t s;
    commit_get_stats(c, &s);
    assert_int_equal(s.accepted, accepted);
    assert_int_equal(s.duplicates, dups);
    assert_int_equal(s.keys, distinct);
    assert_int_equal(s.batch_events, total);
    assert_true(s.batches >= 1);
    assert_true(s.batches <= (uint64_t)NTHREADS * NREQS);
    assert_true(s.max_batch_events >= REQ_EVENTS);
    assert_true(s.fsyncs >= 1 && s.fsyncs <= s.batches);
    assert_int_equal(s.failures, 0);
    assert_int_equal(s.queue_events, 0);
    assert_int_equal(s.log_next_offset, accepted);
    assert_true(s.log_segments >= 1);
    assert_int_equal(s.replayed_at_open, 0);
    assert_int_equal(s.truncated_at_open, 0);
    assert_int_equal(s.evicted_age + s.evicted_size, 0);
    commit_close(c);

    /* The log holds exactly the accepted payloads, each at the offset it was given. */
    char **logv = NULL;
    uint8_t(*logk)[16] = NULL;
    uint64_t nlog = read_log(fx, &logv, &logk);
    assert_int_equal(nlog, accepted);
    for (uint64_t off = 0; off < nlog; off++) {
        char want[96], mid[32];
        uint8_t key[16];
        fmt_payload(want, sizeof(want), payload_id_at[off]);
        assert_string_equal(logv[off], want);
        int ml = snprintf(mid, sizeof(mid), "m-%u", payload_id_at[off]);
        keyhash(secret, SOURCE, strlen(SOURCE), mid, (size_t)ml, key);
        assert_memory_equal(logk[off], key, 16);
    }
    free_log(logv, nlog);
    free(logk);

    /* After a restart every id is still a duplicate, and nothing needed replaying. */
    c = open_commit(&o);
    assert_memory_equal(commit_secret(c), secret, sizeof(secret));
    commit_get_stats(c, &s);
    assert_int_equal(s.replayed_at_open, 0);
    assert_int_equal(s.keys, distinct);
    assert_int_equal(s.log_next_offset, accepted);
    unsigned ids[ID_SPACE];
    size_t n = 0;
    for (unsigned id = 0; id < ID_SPACE; id++)
        if (seen_per_id[id])
            ids[n++] = id;
    submit_expect(c, ids, n, now_ms(), COMMIT_DUPLICATE);
    commit_get_stats(c, &s);
    assert_int_equal(s.accepted, 0);
    assert_int_equal(s.duplicates, n);
    assert_int_equal(s.log_next_offset, accepted);
    commit_close(c);

    for (int t = 0; t < NTHREADS; t++)
        for (int r = 0; r < NREQS; r++)
            req_free(&wk[t].reqs[r]);
    free(payload_id_at);
    free(offset_used);
}

static void test_duplicate_within_request(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = default_opts(fx);
    commit_t *c = open_commit(&o);
    const unsigned ids[] = {1, 2, 1, 3, 2, 1};
    const int want[] = {COMMIT_ACCEPTED, COMMIT_ACCEPTED,  COMMIT_DUPLICATE,
                        COMMIT_ACCEPTED, COMMIT_DUPLICATE, COMMIT_DUPLICATE};
    req_t r;
    commit_stats_t s;

    submit_wait(c, &r, ids, 6, now_ms());
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(r.ev[i].result, want[i]);
    assert_int_equal(r.ev[0].offset, 0);
    assert_int_equal(r.ev[1].offset, 1);
    assert_int_equal(r.ev[3].offset, 2);
    req_free(&r);
    commit_get_stats(c, &s);
    assert_int_equal(s.accepted, 3);
    assert_int_equal(s.duplicates, 3);
    assert_int_equal(s.keys, 3);
    assert_int_equal(s.batches, 1);
    assert_int_equal(s.last_batch_events, 6);
    assert_int_equal(s.last_batch_requests, 1);
    assert_int_equal(s.fsyncs, 1);

    /* A request of duplicates only appends nothing (and needs no fsync). */
    submit_expect(c, ids, 2, now_ms(), COMMIT_DUPLICATE);
    commit_get_stats(c, &s);
    assert_int_equal(s.batches, 2);
    assert_int_equal(s.fsyncs, 1);
    assert_int_equal(s.log_next_offset, 3);

    /* An empty request is answered too. */
    submit_expect(c, NULL, 0, now_ms(), COMMIT_ACCEPTED);
    commit_close(c);
}

static void test_close_answers_queued(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = default_opts(fx);
    commit_t *c = open_commit(&o);
    enum { NR = 20 };
    req_t reqs[NR];
    waiter_t w;
    int64_t now = now_ms();

    waiter_init(&w);
    for (unsigned i = 0; i < NR; i++) {
        unsigned ids[3] = {i, i + 1000, i};
        req_init(&reqs[i], commit_secret(c), ids, 3, now, &w);
        waiter_add(&w, 1);
        assert_int_equal(commit_submit(c, &reqs[i].req), COMMIT_OK);
    }
    /* No waiting: close itself must finish everything queued. */
    commit_close(c);
    assert_int_equal(w.calls, NR);
    assert_int_equal(w.pending, 0);
    for (unsigned i = 0; i < NR; i++) {
        assert_int_equal(reqs[i].req.status, COMMIT_OK);
        assert_int_equal(reqs[i].ev[0].result, COMMIT_ACCEPTED);
        assert_int_equal(reqs[i].ev[1].result, COMMIT_ACCEPTED);
        assert_int_equal(reqs[i].ev[2].result, COMMIT_DUPLICATE);
        req_free(&reqs[i]);
    }
    waiter_destroy(&w);

    char **logv = NULL;
    uint64_t n = read_log(fx, &logv, NULL);
    assert_int_equal(n, 2 * NR);
    free_log(logv, n);
}

static void test_lock(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = default_opts(fx);
    commit_t *c = open_commit(&o), *c2 = NULL;
    char err[512] = "";

    int rc = commit_open(&o, &c2, err, sizeof(err));
    assert_int_equal(rc, COMMIT_OPEN_FAILED);
    assert_null(c2);
    assert_non_null(strstr(err, "in use"));
    /* The failed open did not disturb the first one. */
    submit_range(c, 0, 3, now_ms(), COMMIT_ACCEPTED);
    commit_close(c);
    /* Released on close. */
    c = open_commit(&o);
    submit_range(c, 0, 3, now_ms(), COMMIT_DUPLICATE);
    commit_close(c);
}

static void test_invalid(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = default_opts(fx);
    commit_t *c = NULL;
    char err[256] = "";
    commit_req_t req;

    o.window_ms = 0;
    assert_int_equal(commit_open(&o, &c, err, sizeof(err)), COMMIT_INVALID);
    assert_null(c);
    assert_true(strlen(err) > 0);
    o.window_ms = 1000;
    o.data_dir = NULL;
    assert_int_equal(commit_open(&o, &c, NULL, 0), COMMIT_INVALID);
    assert_int_equal(commit_open(NULL, &c, NULL, 0), COMMIT_INVALID);

    o = default_opts(fx);
    c = open_commit(&o);
    memset(&req, 0, sizeof(req));
    req.done = NULL;
    assert_int_equal(commit_submit(c, &req), COMMIT_INVALID);
    assert_int_equal(commit_submit(c, NULL), COMMIT_INVALID);
    commit_stats_t s;
    commit_get_stats(c, &s);
    assert_int_equal(s.queue_events, 0);
    assert_int_equal(s.batches, 0);
    commit_close(c);
    commit_close(NULL);
    assert_non_null(commit_strerror(COMMIT_UNAVAILABLE));
    assert_string_not_equal(commit_strerror(COMMIT_UNAVAILABLE), commit_strerror(COMMIT_CLOSED));
}

static void test_window_by_age(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = default_opts(fx);
    o.window_ms = 1;
    commit_t *c = open_commit(&o);
    const unsigned ids[] = {7, 8};
    req_t r;
    commit_stats_t s;
    const int64_t long_ago = 1000000; /* 1970: far outside any window */

    submit_wait(c, &r, ids, 2, long_ago);
    assert_int_equal(r.ev[0].result, COMMIT_ACCEPTED);
    assert_int_equal(r.ev[1].result, COMMIT_ACCEPTED);
    req_free(&r);
    commit_get_stats(c, &s);
    assert_int_equal(s.keys, 2);
    assert_int_equal(s.oldest_received_ms, long_ago);

    /* The next commit ages both out first, so the same ids are new again. */
    submit_wait(c, &r, ids, 1, long_ago);
    assert_int_equal(r.ev[0].result, COMMIT_ACCEPTED);
    assert_int_equal(r.ev[0].offset, 2);
    req_free(&r);
    commit_get_stats(c, &s);
    assert_int_equal(s.evicted_age, 2);
    assert_int_equal(s.evicted_size, 0);
    assert_int_equal(s.accepted, 3);
    assert_int_equal(s.keys, 1);
    commit_close(c);

    /* The log holds both acceptances of id 7. */
    char **logv = NULL;
    uint64_t n = read_log(fx, &logv, NULL);
    char want[96];
    fmt_payload(want, sizeof(want), 7);
    assert_int_equal(n, 3);
    assert_string_equal(logv[0], want);
    assert_string_equal(logv[2], want);
    free_log(logv, n);
}

static void test_window_kept(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = default_opts(fx); /* one hour */
    commit_t *c = open_commit(&o);
    commit_stats_t s;
    int64_t t = now_ms() - 60 * 1000; /* a minute ago: inside the window */

    submit_range(c, 0, 5, t, COMMIT_ACCEPTED);
    submit_range(c, 0, 5, t, COMMIT_DUPLICATE);
    commit_get_stats(c, &s);
    assert_int_equal(s.evicted_age, 0);
    assert_int_equal(s.keys, 5);
    assert_int_equal(s.oldest_received_ms, t);
    commit_close(c);
}

static void test_window_by_size(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = default_opts(fx);
    o.max_keys = 10;
    commit_t *c = open_commit(&o);
    commit_stats_t s;
    int64_t now = now_ms();

    /* 100 distinct keys in ten requests of ten. */
    for (unsigned i = 0; i < 10; i++)
        submit_range(c, i * 10, 10, now, COMMIT_ACCEPTED);
    commit_get_stats(c, &s);
    assert_int_equal(s.accepted, 100);
    assert_true(s.keys <= 10);
    assert_int_equal(s.keys, 10);
    assert_int_equal(s.evicted_size, 90);
    assert_int_equal(s.evicted_age, 0);
    /* Oldest first: the newest ten are kept, the first one is new again. */
    submit_range(c, 90, 10, now, COMMIT_DUPLICATE);
    submit_range(c, 0, 1, now, COMMIT_ACCEPTED);
    commit_get_stats(c, &s);
    assert_int_equal(s.keys, 10);
    assert_int_equal(s.evicted_size, 91);
    /* 90 was the oldest retained key and went for 0. */
    submit_range(c, 91, 9, now, COMMIT_DUPLICATE);
    submit_range(c, 90, 1, now, COMMIT_ACCEPTED);
    commit_close(c);
}

static void copy_file(const char *from, const char *to)
{
    char buf[65536];
    int in = open(from, O_RDONLY), out;
    ssize_t n;
    assert_true(in >= 0);
    out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(out >= 0);
    while ((n = read(in, buf, sizeof(buf))) > 0)
        assert_int_equal(write(out, buf, (size_t)n), n);
    assert_int_equal(n, 0);
    close(in);
    close(out);
}

/* Copies the LMDB files of DIR/store to/from DIR/../store-copy. */
static void copy_store(const fx_t *fx, bool to_copy)
{
    const char *files[] = {"data.mdb", "lock.mdb"};
    char a[512], b[512], copydir[256];
    snprintf(copydir, sizeof(copydir), "%s/store-copy", fx->base);
    if (to_copy)
        assert_true(mkdir(copydir, 0755) == 0);
    for (size_t i = 0; i < 2; i++) {
        snprintf(a, sizeof(a), "%s/store/%s", fx->data, files[i]);
        snprintf(b, sizeof(b), "%s/%s", copydir, files[i]);
        if (to_copy)
            copy_file(a, b);
        else
            copy_file(b, a);
    }
}

static void test_replay_lagging_store(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = default_opts(fx);
    commit_t *c = open_commit(&o);
    commit_stats_t s;
    int64_t now = now_ms();

    submit_range(c, 0, 5, now, COMMIT_ACCEPTED); /* N = 5 */
    commit_close(c);
    copy_store(fx, true);

    c = open_commit(&o);
    submit_range(c, 100, 3, now, COMMIT_ACCEPTED); /* M = 3, offsets 5..7 */
    submit_range(c, 200, 4, now, COMMIT_ACCEPTED); /* and 4 more, offsets 8..11 */
    commit_close(c);

    /* LMDB goes back to before the last 7 events; the log keeps them. */
    copy_store(fx, false);
    c = open_commit(&o);
    commit_get_stats(c, &s);
    assert_int_equal(s.replayed_at_open, 7);
    assert_int_equal(s.keys, 12);
    assert_int_equal(s.log_next_offset, 12);
    assert_int_equal(s.truncated_at_open, 0);
    submit_range(c, 100, 3, now, COMMIT_DUPLICATE);
    submit_range(c, 200, 4, now, COMMIT_DUPLICATE);
    submit_range(c, 0, 5, now, COMMIT_DUPLICATE);
    /* New events continue after the replayed ones. */
    req_t r;
    const unsigned id = 300;
    submit_wait(c, &r, &id, 1, now);
    assert_int_equal(r.ev[0].result, COMMIT_ACCEPTED);
    assert_int_equal(r.ev[0].offset, 12);
    req_free(&r);
    commit_close(c);

    /* Replay is done once: the next open has nothing left to apply. */
    c = open_commit(&o);
    commit_get_stats(c, &s);
    assert_int_equal(s.replayed_at_open, 0);
    assert_int_equal(s.keys, 13);
    commit_close(c);

    char **logv = NULL;
    uint64_t n = read_log(fx, &logv, NULL);
    assert_int_equal(n, 13);
    free_log(logv, n);
}

/* A lost store (e.g. deleted by an operator) is rebuilt from the log with the same secret. */
static void test_rebuild_missing_store(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = default_opts(fx);
    commit_t *c = open_commit(&o);
    commit_stats_t s;
    uint8_t secret[KEYHASH_SECRET_LEN];
    char path[256];

    memcpy(secret, commit_secret(c), sizeof(secret));
    submit_range(c, 0, 6, now_ms(), COMMIT_ACCEPTED);
    commit_close(c);
    const char *files[] = {"data.mdb", "lock.mdb"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s/store/%s", fx->data, files[i]);
        assert_int_equal(unlink(path), 0);
    }
    c = open_commit(&o);
    assert_memory_equal(commit_secret(c), secret, sizeof(secret));
    commit_get_stats(c, &s);
    assert_int_equal(s.replayed_at_open, 6);
    assert_int_equal(s.keys, 6);
    submit_range(c, 0, 6, now_ms(), COMMIT_DUPLICATE);
    commit_close(c);
}

static void write_secret(const fx_t *fx, const void *bytes, size_t n)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/secret", fx->data);
    int fd = open(path, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, bytes, n), (ssize_t)n);
    close(fd);
}

static void test_secret_file(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = default_opts(fx);
    commit_t *c = open_commit(&o), *c2 = NULL;
    uint8_t secret[KEYHASH_SECRET_LEN], other[KEYHASH_SECRET_LEN];
    char path[256], err[512] = "";
    struct stat st;

    memcpy(secret, commit_secret(c), sizeof(secret));
    submit_range(c, 0, 2, now_ms(), COMMIT_ACCEPTED);
    commit_close(c);

    /* DIR/secret holds the same 16 bytes, private to the owner. */
    snprintf(path, sizeof(path), "%s/secret", fx->data);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, KEYHASH_SECRET_LEN);
    assert_int_equal(st.st_mode & 0777, 0600);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(read(fd, other, sizeof(other)), (ssize_t)sizeof(other));
    close(fd);
    assert_memory_equal(other, secret, sizeof(secret));

    /* Another data dir's secret: refused with a reason. */
    memcpy(other, secret, sizeof(other));
    other[0] ^= 0xff;
    write_secret(fx, other, sizeof(other));
    assert_int_equal(commit_open(&o, &c2, err, sizeof(err)), COMMIT_OPEN_FAILED);
    assert_null(c2);
    assert_non_null(strstr(err, "secret"));

    /* A truncated secret file too. */
    err[0] = '\0';
    write_secret(fx, secret, 5);
    assert_int_equal(commit_open(&o, &c2, err, sizeof(err)), COMMIT_OPEN_FAILED);
    assert_null(c2);
    assert_true(strlen(err) > 0);

    /* The right secret back: opens (the failed opens released the lock) and keys still match. */
    write_secret(fx, secret, sizeof(secret));
    c = open_commit(&o);
    assert_memory_equal(commit_secret(c), secret, sizeof(secret));
    submit_range(c, 0, 2, now_ms(), COMMIT_DUPLICATE);
    commit_close(c);

    /* A deleted secret file is written again from the store's copy. */
    assert_int_equal(unlink(path), 0);
    c = open_commit(&o);
    assert_memory_equal(commit_secret(c), secret, sizeof(secret));
    commit_close(c);
    fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    memset(other, 0, sizeof(other));
    assert_int_equal(read(fd, other, sizeof(other)), (ssize_t)sizeof(other));
    close(fd);
    assert_memory_equal(other, secret, sizeof(secret));
}

/* Path of the newest segment in DIR/log. */
static void last_segment(const fx_t *fx, char *out, size_t len)
{
    char dir[256];
    DIR *d;
    struct dirent *e;
    char best[256] = "";
    snprintf(dir, sizeof(dir), "%s/log", fx->data);
    d = opendir(dir);
    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l > 4 && strcmp(e->d_name + l - 4, ".seg") == 0 && strcmp(e->d_name, best) > 0)
            snprintf(best, sizeof(best), "%s", e->d_name);
    }
    closedir(d);
    assert_true(best[0] != '\0');
    snprintf(out, len, "%s/%s", dir, best);
}

static void test_torn_tail_at_open(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = default_opts(fx);
    commit_t *c = open_commit(&o);
    commit_stats_t s;
    char seg[1024];
    char junk[13];

    submit_range(c, 0, 3, now_ms(), COMMIT_ACCEPTED);
    commit_close(c);

    last_segment(fx, seg, sizeof(seg));
    memset(junk, 0x7f, sizeof(junk));
    int fd = open(seg, O_WRONLY | O_APPEND);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
    close(fd);

    c = open_commit(&o);
    commit_get_stats(c, &s);
    assert_int_equal(s.truncated_at_open, sizeof(junk));
    assert_int_equal(s.log_next_offset, 3);
    assert_int_equal(s.replayed_at_open, 0);
    req_t r;
    const unsigned id = 3;
    submit_wait(c, &r, &id, 1, now_ms());
    assert_int_equal(r.ev[0].result, COMMIT_ACCEPTED);
    assert_int_equal(r.ev[0].offset, 3);
    req_free(&r);
    commit_close(c);

    char **logv = NULL;
    uint64_t n = read_log(fx, &logv, NULL);
    assert_int_equal(n, 4);
    free_log(logv, n);
}

/* A tiny LMDB map must grow inside the commit, not fail the requests. */
static void test_map_grows(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = default_opts(fx);
    o.map_size = 256 * 1024;
    commit_t *c = open_commit(&o);
    commit_stats_t s;
    int64_t now = now_ms();

    for (unsigned i = 0; i < 8; i++)
        submit_range(c, i * 2000, 2000, now, COMMIT_ACCEPTED);
    commit_get_stats(c, &s);
    assert_int_equal(s.accepted, 16000);
    assert_int_equal(s.keys, 16000);
    assert_int_equal(s.failures, 0);
    assert_true(s.map_grows > 0);
    assert_true(s.store_map_size > o.map_size);
    assert_int_equal(s.log_next_offset, 16000);
    commit_close(c);

    /* Reopening with the small map again: LMDB keeps the grown file. */
    c = open_commit(&o);
    submit_range(c, 15990, 10, now, COMMIT_DUPLICATE);
    commit_close(c);

    char **logv = NULL;
    uint64_t n = read_log(fx, &logv, NULL);
    assert_int_equal(n, 16000);
    free_log(logv, n);
}

/* Counts how often each payload of ids [0, n) occurs in the log. */
static void count_in_log(const fx_t *fx, unsigned *counts, unsigned n, uint64_t *total)
{
    char **logv = NULL;
    uint64_t nlog = read_log(fx, &logv, NULL);
    memset(counts, 0, n * sizeof(*counts));
    for (uint64_t i = 0; i < nlog; i++) {
        unsigned id;
        assert_int_equal(sscanf(logv[i], "{\"messageId\":\"m-%u\"", &id), 1);
        assert_true(id < n);
        counts[id]++;
    }
    free_log(logv, nlog);
    *total = nlog;
}

/*
 * LMDB's commit fails (I/O error) after the log append + fsync of the batch: the requests get
 * COMMIT_UNAVAILABLE, so "nothing was kept" must hold for the log too, and the client's retry
 * must leave each event in the log once (invariants 1 and 2).
 */
static void test_store_commit_fails_after_log_sync(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = default_opts(fx);
    commit_t *c = open_commit(&o);
    commit_stats_t s;
    unsigned counts[20];
    uint64_t total;
    req_t r;
    const unsigned ids[] = {10, 11, 12};

    if (!real_commit()) {
        commit_close(c);
        skip(); /* LMDB linked statically: no interposition */
    }
    submit_range(c, 0, 3, now_ms(), COMMIT_ACCEPTED);

    atomic_store(&inject_commit_code, EIO);
    atomic_store(&inject_commit_failures, 1);
    waiter_t w;
    waiter_init(&w);
    req_init(&r, commit_secret(c), ids, 3, now_ms(), &w);
    waiter_add(&w, 1);
    assert_int_equal(commit_submit(c, &r.req), COMMIT_OK);
    waiter_wait(&w);
    waiter_destroy(&w);
    assert_int_equal(atomic_load(&inject_commit_failures), 0);
    assert_int_equal(r.req.status, COMMIT_UNAVAILABLE);
    req_free(&r);
    commit_get_stats(c, &s);
    assert_int_equal(s.failures, 1);
    assert_int_equal(s.accepted, 3);

    /* The client retries: accepted now, and in the log exactly once. */
    submit_range(c, 10, 3, now_ms(), COMMIT_ACCEPTED);
    commit_get_stats(c, &s);
    assert_int_equal(s.accepted, 6);
    uint64_t next = s.log_next_offset;
    commit_close(c);

    count_in_log(fx, counts, 20, &total);
    for (unsigned id = 10; id < 13; id++)
        assert_int_equal(counts[id], 1);
    assert_int_equal(total, 6);
    assert_int_equal(next, 6);
}

/*
 * LMDB's commit reports a full map after the log append + fsync: the writer grows the map and
 * redoes the batch. The redo must not append the batch a second time.
 */
static void test_store_full_at_commit_redo(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = default_opts(fx);
    commit_t *c = open_commit(&o);
    commit_stats_t s;
    unsigned counts[20];
    uint64_t total;
    req_t r;
    const unsigned ids[] = {5, 6, 7, 8};

    if (!real_commit()) {
        commit_close(c);
        skip();
    }
    atomic_store(&inject_commit_code, INJECT_MDB_MAP_FULL);
    atomic_store(&inject_commit_failures, 1);
    submit_wait(c, &r, ids, 4, now_ms());
    assert_int_equal(atomic_load(&inject_commit_failures), 0);
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(r.ev[i].result, COMMIT_ACCEPTED);
        assert_int_equal(r.ev[i].offset, i);
    }
    req_free(&r);
    commit_get_stats(c, &s);
    assert_int_equal(s.map_grows, 1);
    assert_int_equal(s.accepted, 4);
    assert_int_equal(s.log_next_offset, 4);
    commit_close(c);

    count_in_log(fx, counts, 20, &total);
    for (unsigned id = 5; id < 9; id++)
        assert_int_equal(counts[id], 1);
    assert_int_equal(total, 4);
}

/* A store rebuilt from a long log on a tiny map grows during the replay at open. */
static void test_replay_grows_map(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = default_opts(fx);
    commit_t *c = open_commit(&o);
    uint8_t secret[KEYHASH_SECRET_LEN];
    const unsigned n = 12000;
    char dir[256];
    commit_stats_t s;

    memcpy(secret, commit_secret(c), sizeof(secret));
    commit_close(c);

    /* Write the log directly, as if LMDB had lost everything after the secret. */
    log_options_t lo = {.segment_bytes = 1 << 20};
    log_t *log = NULL;
    snprintf(dir, sizeof(dir), "%s/log", fx->data);
    assert_int_equal(log_open(dir, &lo, &log), LOG_OK);
    log_record_t *recs = calloc(n, sizeof(*recs));
    char(*pl)[96] = calloc(n, sizeof(*pl));
    assert_non_null(recs);
    assert_non_null(pl);
    int64_t now = now_ms();
    for (unsigned i = 0; i < n; i++) {
        char mid[32];
        int ml = snprintf(mid, sizeof(mid), "m-%u", i);
        keyhash(secret, SOURCE, strlen(SOURCE), mid, (size_t)ml, recs[i].key);
        recs[i].len = (uint32_t)fmt_payload(pl[i], sizeof(pl[i]), i);
        recs[i].data = pl[i];
        recs[i].received_ms = now;
    }
    assert_int_equal(log_append(log, recs, n), LOG_OK);
    assert_int_equal(log_sync(log), LOG_OK);
    log_close(log);
    free(recs);
    free(pl);

    o.map_size = 256 * 1024;
    c = open_commit(&o);
    commit_get_stats(c, &s);
    assert_int_equal(s.replayed_at_open, n);
    assert_int_equal(s.keys, n);
    assert_true(s.map_grows > 0);
    assert_int_equal(s.log_next_offset, n);
    submit_range(c, 0, 50, now_ms(), COMMIT_DUPLICATE);
    submit_range(c, n - 50, 50, now_ms(), COMMIT_DUPLICATE);
    submit_range(c, n, 1, now_ms(), COMMIT_ACCEPTED);
    commit_close(c);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_concurrent_exactly_once),
        T(test_duplicate_within_request),
        T(test_close_answers_queued),
        T(test_lock),
        T(test_invalid),
        T(test_window_by_age),
        T(test_window_kept),
        T(test_window_by_size),
        T(test_replay_lagging_store),
        T(test_rebuild_missing_store),
        T(test_secret_file),
        T(test_torn_tail_at_open),
        T(test_map_grows),
        T(test_replay_grows_map),
        T(test_store_commit_fails_after_log_sync),
        T(test_store_full_at_commit_redo),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
