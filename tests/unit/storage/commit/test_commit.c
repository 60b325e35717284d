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
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "commit_fixture.h"
#include "storage/commit/commit.h"
#include "storage/window/keyhash.h"
#include "storage/log/log.h"
#include "storage/tools/lookup.h"
#include "storage/window/store.h"
#include "testutil.h"

/* The helpers, and the scenarios the tools' tests share, are in commit_fixture.h. */
typedef tu_fixture_t fx_t;

/* ---- tests ---- */

#define NTHREADS   4
#define NREQS      30
#define REQ_EVENTS 17
#define ID_SPACE   300

typedef struct {
    commit_t *c;
    int t;
    cf_req_t reqs[NREQS];
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
    tu_waiter_t w;
    int64_t now = tu_now_ms();
    tu_waiter_init(&w);
    for (int r = 0; r < NREQS; r++) {
        for (int e = 0; e < REQ_EVENTS; e++)
            wk->ids[r][e] = id_of(wk->t, r, e);
        cf_req_init(&wk->reqs[r], commit_secret(wk->c), wk->ids[r], REQ_EVENTS, now, &w);
        tu_waiter_add(&w, 1);
        wk->submit_rc[r] = commit_submit(wk->c, &wk->reqs[r].req);
        if (wk->submit_rc[r] != COMMIT_OK)
            cf_on_done(&wk->reqs[r].req, &w); /* not queued: balance the count */
    }
    tu_waiter_wait(&w);
    tu_waiter_destroy(&w);
    return NULL;
}

static void test_concurrent_exactly_once(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    o.segment_bytes = 4096; /* rolls between batches (how many depends on the batching) */
    commit_t *c = cf_open(&o);
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
    assert_int_equal(s.window.keys, distinct);
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
    assert_int_equal(s.window.evicted_age + s.window.evicted_size, 0);
    commit_close(c);

    /* The log holds exactly the accepted payloads, each at the offset it was given. */
    char **logv = NULL;
    uint8_t(*logk)[16] = NULL;
    uint64_t nlog = cf_read_log(fx, &logv, &logk);
    assert_int_equal(nlog, accepted);
    for (uint64_t off = 0; off < nlog; off++) {
        char want[96], mid[32];
        uint8_t key[16];
        cf_fmt_payload(want, sizeof(want), payload_id_at[off]);
        assert_string_equal(logv[off], want);
        int ml = snprintf(mid, sizeof(mid), "m-%u", payload_id_at[off]);
        keyhash(secret, CF_SOURCE, strlen(CF_SOURCE), mid, (size_t)ml, key);
        assert_memory_equal(logk[off], key, 16);
    }
    cf_free_log(logv, nlog);
    free(logk);

    /* After a restart every id is still a duplicate, and nothing needed replaying. */
    c = cf_open(&o);
    assert_memory_equal(commit_secret(c), secret, sizeof(secret));
    commit_get_stats(c, &s);
    assert_int_equal(s.replayed_at_open, 0);
    assert_int_equal(s.window.keys, distinct);
    assert_int_equal(s.log_next_offset, accepted);
    unsigned ids[ID_SPACE];
    size_t n = 0;
    for (unsigned id = 0; id < ID_SPACE; id++)
        if (seen_per_id[id])
            ids[n++] = id;
    cf_submit_expect(c, ids, n, tu_now_ms(), COMMIT_DUPLICATE);
    commit_get_stats(c, &s);
    assert_int_equal(s.accepted, 0);
    assert_int_equal(s.duplicates, n);
    assert_int_equal(s.log_next_offset, accepted);
    commit_close(c);

    for (int t = 0; t < NTHREADS; t++)
        for (int r = 0; r < NREQS; r++)
            cf_req_free(&wk[t].reqs[r]);
    free(payload_id_at);
    free(offset_used);
}

static void test_duplicate_within_request(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    commit_t *c = cf_open(&o);
    const unsigned ids[] = {1, 2, 1, 3, 2, 1};
    const int want[] = {COMMIT_ACCEPTED, COMMIT_ACCEPTED,  COMMIT_DUPLICATE,
                        COMMIT_ACCEPTED, COMMIT_DUPLICATE, COMMIT_DUPLICATE};
    cf_req_t r;
    commit_stats_t s;

    cf_submit_wait(c, &r, ids, 6, tu_now_ms());
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(r.ev[i].result, want[i]);
    assert_int_equal(r.ev[0].offset, 0);
    assert_int_equal(r.ev[1].offset, 1);
    assert_int_equal(r.ev[3].offset, 2);
    cf_req_free(&r);
    commit_get_stats(c, &s);
    assert_int_equal(s.accepted, 3);
    assert_int_equal(s.duplicates, 3);
    assert_int_equal(s.window.keys, 3);
    assert_int_equal(s.batches, 1);
    assert_int_equal(s.last_batch_events, 6);
    assert_int_equal(s.last_batch_requests, 1);
    assert_int_equal(s.fsyncs, 1);

    /* A request of duplicates only appends nothing (and needs no fsync). */
    cf_submit_expect(c, ids, 2, tu_now_ms(), COMMIT_DUPLICATE);
    commit_get_stats(c, &s);
    assert_int_equal(s.batches, 2);
    assert_int_equal(s.fsyncs, 1);
    assert_int_equal(s.log_next_offset, 3);

    /* An empty request is answered too. */
    cf_submit_expect(c, NULL, 0, tu_now_ms(), COMMIT_ACCEPTED);
    commit_close(c);
}

/*
 * A batch asks the sealed generations all its keys at once, then decides in
 * order: sealed keys are duplicates, a new key taken earlier in the same batch
 * is one too, and keys of the young store and of pending still decide first.
 */
static void test_duplicates_across_generations(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    o.young_keys = 64;
    commit_t *c = cf_open(&o);
    commit_stats_t s;
    int64_t now = tu_now_ms();

    /* 300 keys in ten requests: closing checkpoints them, and they are sealed. */
    for (unsigned k = 0; k < 10; k++)
        cf_submit_range(c, 1 + 30 * k, 30, now, COMMIT_ACCEPTED);
    commit_close(c);
    c = cf_open(&o);
    commit_get_stats(c, &s);
    assert_true(s.window.generations > 0);
    assert_true(s.window.generation_keys > 0);
    assert_int_equal(s.window.keys, 300);
    cf_submit_range(c, 500, 1, now, COMMIT_ACCEPTED); /* pending */

    /* Sealed (1, 2), new (1000, 1001), pending (500). */
    const unsigned ids[] = {1, 1000, 2, 1000, 500, 1, 1001, 1001, 2};
    const int want[] = {COMMIT_DUPLICATE, COMMIT_ACCEPTED,  COMMIT_DUPLICATE,
                        COMMIT_DUPLICATE, COMMIT_DUPLICATE, COMMIT_DUPLICATE,
                        COMMIT_ACCEPTED,  COMMIT_DUPLICATE, COMMIT_DUPLICATE};
    cf_req_t r;
    cf_submit_wait(c, &r, ids, 9, now);
    for (size_t i = 0; i < 9; i++)
        assert_int_equal(r.ev[i].result, want[i]);
    assert_int_equal(r.ev[6].offset, r.ev[1].offset + 1);
    cf_req_free(&r);
    commit_get_stats(c, &s);
    assert_int_equal(s.window.keys, 303);
    assert_int_equal(s.accepted, 3);
    assert_int_equal(s.duplicates, 7);

    /* Now 500 is in the young store (closing checkpoints it; 4 keys do not seal): a batch that
     * asks the young store first and the generations after names each one's own first copy. */
    commit_close(c);
    c = cf_open(&o);
    const unsigned mixed[] = {500, 1, 1000, 2};
    cf_submit_wait(c, &r, mixed, 4, now);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(r.ev[i].result, COMMIT_DUPLICATE);
    assert_int_equal(r.ev[0].offset, 300);
    assert_int_equal(r.ev[1].offset, 0);
    assert_int_equal(r.ev[2].offset, 301);
    assert_int_equal(r.ev[3].offset, 1);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(r.ev[i].first_received_ms, now);
    cf_req_free(&r);
    commit_close(c);
}

/* The same with every request prepared on the submitting thread, as the server does. */
static void test_duplicates_across_generations_prepared(void **state)
{
    cf_prepare_submits(true);
    test_duplicates_across_generations(state);
    cf_prepare_submits(false);
}

/*
 * --max-keys is each source's budget: one source's flood ages out only its own keys, however
 * its keys and another's interleave, while serving and after a restart (the scenario is
 * cf_budget_per_source; test_rebuild.c rebuilds its data dir from the log).
 */
static void test_budget_per_source(void **state)
{
    commit_options_t o;
    cf_budget_per_source(*state, &o, tu_now_ms());
}

/*
 * The same in a window that seals (max_keys above young_keys): the flood's sealed keys are cut
 * for it alone, generation by generation; calm's sealed keys stay, across a restart.
 */
static void test_budget_per_source_sealed(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    o.max_keys = 300;
    o.young_keys = 64;
    int64_t now = tu_now_ms();
    commit_t *c = cf_open(&o);
    commit_stats_t s;

    cf_submit_from(c, "calm", 0, 10, now, COMMIT_ACCEPTED);
    /* 2,000 of the flood, closing between rounds so that each is sealed; the last one sealed
     * while serving. */
    for (unsigned k = 0; k < 9; k++) {
        cf_submit_from(c, "flood", 1000 + 200 * k, 200, now, COMMIT_ACCEPTED);
        commit_close(c);
        c = cf_open(&o);
    }
    commit_get_stats(c, &s);
    cf_submit_from(c, "flood", 2800, 200, now, COMMIT_ACCEPTED);
    cf_await_stat(c, offsetof(commit_stats_t, window.seals), s.window.seals + 1, &s);
    commit_get_stats(c, &s);
    assert_true(s.window.generations > 0);
    cf_submit_from(c, "calm", 0, 10, now, COMMIT_DUPLICATE);
    cf_submit_from(c, "flood", 2700, 300, now, COMMIT_DUPLICATE); /* its newest 300 */
    window_source_t flood = cf_source_stats(c, "flood");
    assert_int_equal(flood.forgot_ms, now); /* the seal cut its older generations */
    cf_submit_from(c, "flood", 1000, 100, now, COMMIT_ACCEPTED); /* its oldest were cut */
    window_source_t calm = cf_source_stats(c, "calm");
    flood = cf_source_stats(c, "flood");
    assert_int_equal(calm.keys, 10);
    assert_int_equal(calm.forgot_ms, 0);
    assert_true(flood.keys >= 300); /* its budget, and at most one generation and the young */
    assert_true(flood.keys <= 300 + 400);
    commit_close(c);
    c = cf_open(&o);
    cf_submit_from(c, "calm", 0, 10, now, COMMIT_DUPLICATE);
    commit_close(c);
}

static void test_close_answers_queued(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    commit_t *c = cf_open(&o);
    enum { NR = 20 };
    cf_req_t reqs[NR];
    tu_waiter_t w;
    int64_t now = tu_now_ms();

    tu_waiter_init(&w);
    for (unsigned i = 0; i < NR; i++) {
        unsigned ids[3] = {i, i + 1000, i};
        cf_req_init(&reqs[i], commit_secret(c), ids, 3, now, &w);
        tu_waiter_add(&w, 1);
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
        cf_req_free(&reqs[i]);
    }
    tu_waiter_destroy(&w);

    cf_expect_log_records(fx, 2 * NR);
}

static void test_lock(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    commit_t *c = cf_open(&o), *c2 = NULL;
    char err[512] = "";

    int rc = commit_open(&o, &c2, err, sizeof(err));
    assert_int_equal(rc, COMMIT_OPEN_FAILED);
    assert_null(c2);
    assert_non_null(strstr(err, "in use"));
    /* The failed open did not disturb the first one. */
    cf_submit_range(c, 0, 3, tu_now_ms(), COMMIT_ACCEPTED);
    commit_close(c);
    /* Released on close. */
    c = cf_open(&o);
    cf_submit_range(c, 0, 3, tu_now_ms(), COMMIT_DUPLICATE);
    commit_close(c);
}

static void test_invalid(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
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

    o = cf_default_opts(fx);
    c = cf_open(&o);
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
    commit_options_t o = cf_default_opts(fx);
    o.window_ms = 1;
    commit_t *c = cf_open(&o);
    const unsigned ids[] = {7, 8};
    cf_req_t r;
    commit_stats_t s;
    const int64_t long_ago = 1000000; /* 1970: far outside any window */

    cf_submit_wait(c, &r, ids, 2, long_ago);
    assert_int_equal(r.ev[0].result, COMMIT_ACCEPTED);
    assert_int_equal(r.ev[1].result, COMMIT_ACCEPTED);
    cf_req_free(&r);
    commit_get_stats(c, &s);
    assert_int_equal(s.window.keys, 2);
    assert_int_equal(s.window.oldest_received_ms, long_ago);

    /* The next commit ages both out first, so the same ids are new again. */
    cf_submit_wait(c, &r, ids, 1, long_ago);
    assert_int_equal(r.ev[0].result, COMMIT_ACCEPTED);
    assert_int_equal(r.ev[0].offset, 2);
    cf_req_free(&r);
    commit_get_stats(c, &s);
    assert_int_equal(s.window.evicted_age, 2);
    assert_int_equal(s.window.evicted_size, 0);
    assert_int_equal(s.accepted, 3);
    assert_int_equal(s.window.keys, 1);
    commit_close(c);

    /* The log holds both acceptances of id 7. */
    char **logv = NULL;
    uint64_t n = cf_read_log(fx, &logv, NULL);
    char want[96];
    cf_fmt_payload(want, sizeof(want), 7);
    assert_int_equal(n, 3);
    assert_string_equal(logv[0], want);
    assert_string_equal(logv[2], want);
    cf_free_log(logv, n);
}

static void test_window_kept(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx); /* one hour */
    commit_t *c = cf_open(&o);
    commit_stats_t s;
    int64_t t = tu_now_ms() - 60 * 1000; /* a minute ago: inside the window */

    cf_submit_range(c, 0, 5, t, COMMIT_ACCEPTED);
    cf_submit_range(c, 0, 5, t, COMMIT_DUPLICATE);
    commit_get_stats(c, &s);
    assert_int_equal(s.window.evicted_age, 0);
    assert_int_equal(s.window.keys, 5);
    assert_int_equal(s.window.oldest_received_ms, t);
    commit_close(c);
}

static void test_window_by_size(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    o.max_keys = 10;
    commit_t *c = cf_open(&o);
    commit_stats_t s;
    int64_t now = tu_now_ms();

    /* 100 distinct keys in ten requests of ten. */
    for (unsigned i = 0; i < 10; i++)
        cf_submit_range(c, i * 10, 10, now, COMMIT_ACCEPTED);
    commit_get_stats(c, &s);
    assert_int_equal(s.accepted, 100);
    assert_true(s.window.keys <= 10);
    assert_int_equal(s.window.keys, 10);
    assert_int_equal(s.window.evicted_size, 90);
    assert_int_equal(s.window.evicted_age, 0);
    /* Oldest first: the newest ten are kept, the first one is new again. */
    cf_submit_range(c, 90, 10, now, COMMIT_DUPLICATE);
    cf_submit_range(c, 0, 1, now, COMMIT_ACCEPTED);
    commit_get_stats(c, &s);
    assert_int_equal(s.window.keys, 10);
    assert_int_equal(s.window.evicted_size, 91);
    /* 90 was the oldest retained key and went for 0. */
    cf_submit_range(c, 91, 9, now, COMMIT_DUPLICATE);
    cf_submit_range(c, 90, 1, now, COMMIT_ACCEPTED);
    commit_close(c);
}

static void test_replay_lagging_store(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    commit_t *c = cf_open(&o);
    commit_stats_t s;
    int64_t now = tu_now_ms();

    cf_submit_range(c, 0, 5, now, COMMIT_ACCEPTED); /* N = 5 */
    commit_close(c);
    cf_copy_store(fx, true);

    c = cf_open(&o);
    cf_submit_range(c, 100, 3, now, COMMIT_ACCEPTED); /* M = 3, offsets 5..7 */
    cf_submit_range(c, 200, 4, now, COMMIT_ACCEPTED); /* and 4 more, offsets 8..11 */
    commit_close(c);

    /* LMDB goes back to before the last 7 events; the log keeps them. */
    cf_copy_store(fx, false);
    c = cf_open(&o);
    commit_get_stats(c, &s);
    assert_int_equal(s.replayed_at_open, 7);
    assert_int_equal(s.window.keys, 12);
    assert_int_equal(s.log_next_offset, 12);
    assert_int_equal(s.truncated_at_open, 0);
    cf_submit_range(c, 100, 3, now, COMMIT_DUPLICATE);
    cf_submit_range(c, 200, 4, now, COMMIT_DUPLICATE);
    cf_submit_range(c, 0, 5, now, COMMIT_DUPLICATE);
    /* New events continue after the replayed ones. */
    cf_submit_one_accepted(c, 300, now, 12);
    commit_close(c);

    /* Replay is done once: the next open has nothing left to apply. */
    c = cf_open(&o);
    commit_get_stats(c, &s);
    assert_int_equal(s.replayed_at_open, 0);
    assert_int_equal(s.window.keys, 13);
    commit_close(c);

    cf_expect_log_records(fx, 13);
}

/* A lost store (e.g. deleted by an operator) is rebuilt from the log with the same secret. */
static void test_rebuild_missing_store(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    commit_t *c = cf_open(&o);
    commit_stats_t s;
    uint8_t secret[KEYHASH_SECRET_LEN];

    memcpy(secret, commit_secret(c), sizeof(secret));
    cf_submit_range(c, 0, 6, tu_now_ms(), COMMIT_ACCEPTED);
    commit_close(c);
    cf_remove_store(fx);
    c = cf_open(&o);
    assert_memory_equal(commit_secret(c), secret, sizeof(secret));
    commit_get_stats(c, &s);
    assert_int_equal(s.replayed_at_open, 6);
    assert_int_equal(s.window.keys, 6);
    cf_submit_range(c, 0, 6, tu_now_ms(), COMMIT_DUPLICATE);
    commit_close(c);
}

/*
 * The replay evicts as serving did (by size here), and the window's totals count what it
 * evicted as the per-source counts do: both come from the window engine, which the replay
 * writes through (they disagreed when the replay wrote the store itself).
 */
static void test_replay_evictions_counted(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    o.max_keys = 5;
    commit_t *c = cf_open(&o);
    commit_stats_t s;

    cf_submit_range(c, 0, 12, tu_now_ms(), COMMIT_ACCEPTED);
    commit_close(c);
    cf_remove_store(fx);
    c = cf_open(&o);
    commit_get_stats(c, &s);
    assert_int_equal(s.replayed_at_open, 12);
    assert_int_equal(s.window.keys, 5);
    window_source_t src = cf_source_stats(c, CF_SOURCE);
    assert_int_equal(src.keys, 5);
    assert_int_equal(src.evicted_size, 7);
    assert_int_equal(s.window.evicted_size, src.evicted_size);
    assert_int_equal(s.window.evicted_age, 0);
    cf_submit_range(c, 7, 5, tu_now_ms(), COMMIT_DUPLICATE);
    commit_close(c);
}

/* The file at path holds exactly the n bytes of want. */
static void expect_file_bytes(const char *path, const void *want, size_t n)
{
    char *got = NULL;
    size_t len = 0;
    assert_int_equal(tu_read_file(path, &got, &len), 0);
    assert_int_equal(len, n);
    assert_memory_equal(got, want, n);
    free(got);
}

static void write_secret(const fx_t *fx, const void *bytes, size_t n)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/secret", fx->dir);
    assert_int_equal(tu_write_file(path, bytes, n), 0);
}

static void test_secret_file(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    commit_t *c = cf_open(&o), *c2 = NULL;
    uint8_t secret[KEYHASH_SECRET_LEN], other[KEYHASH_SECRET_LEN];
    char path[512], err[512] = "";
    struct stat st;

    memcpy(secret, commit_secret(c), sizeof(secret));
    cf_submit_range(c, 0, 2, tu_now_ms(), COMMIT_ACCEPTED);
    commit_close(c);

    /* DIR/secret holds the same 16 bytes, private to the owner. */
    snprintf(path, sizeof(path), "%s/secret", fx->dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, KEYHASH_SECRET_LEN);
    assert_int_equal(st.st_mode & 0777, 0600);
    expect_file_bytes(path, secret, sizeof(secret));

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
    c = cf_open(&o);
    assert_memory_equal(commit_secret(c), secret, sizeof(secret));
    cf_submit_range(c, 0, 2, tu_now_ms(), COMMIT_DUPLICATE);
    commit_close(c);

    /* A deleted secret file is written again from the store's copy. */
    assert_int_equal(unlink(path), 0);
    c = cf_open(&o);
    assert_memory_equal(commit_secret(c), secret, sizeof(secret));
    commit_close(c);
    expect_file_bytes(path, secret, sizeof(secret));
}

/* Path of the newest segment in DIR/log. */
static void last_segment(const fx_t *fx, char *out, size_t len)
{
    char dir[512];
    DIR *d;
    struct dirent *e;
    char best[256] = "";
    snprintf(dir, sizeof(dir), "%s/log", fx->dir);
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
    commit_options_t o = cf_default_opts(fx);
    commit_t *c = cf_open(&o);
    commit_stats_t s;
    char seg[1024];
    char junk[13];

    cf_submit_range(c, 0, 3, tu_now_ms(), COMMIT_ACCEPTED);
    commit_close(c);

    last_segment(fx, seg, sizeof(seg));
    memset(junk, 0x7f, sizeof(junk));
    assert_int_equal(tu_append_file(seg, junk, sizeof(junk)), 0);

    c = cf_open(&o);
    commit_get_stats(c, &s);
    assert_int_equal(s.truncated_at_open, sizeof(junk));
    assert_int_equal(s.log_next_offset, 3);
    assert_int_equal(s.replayed_at_open, 0);
    cf_submit_one_accepted(c, 3, tu_now_ms(), 3);
    commit_close(c);

    cf_expect_log_records(fx, 4);
}

/* A tiny LMDB map must grow at a checkpoint (in the background), not fail the requests. */
static void test_map_grows(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    o.map_size = 256 * 1024;
    commit_t *c = cf_open(&o);
    commit_stats_t s;
    int64_t now = tu_now_ms();

    for (unsigned i = 0; i < 8; i++)
        cf_submit_range(c, i * 2000, 2000, now, COMMIT_ACCEPTED);
    /* The checkpoint fills the map; storage is re-opened with a doubled one. */
    cf_await_stat(c, offsetof(commit_stats_t, recoveries), 1, &s);
    assert_int_equal(s.accepted, 16000);
    assert_int_equal(s.window.keys, 16000);
    assert_int_equal(s.failures, 0);
    assert_true(s.map_grows > 0);
    assert_true(s.store_map_size > o.map_size);
    assert_int_equal(s.log_next_offset, 16000);
    commit_close(c);

    /* Reopening with the small map again: LMDB keeps the grown file. */
    c = cf_open(&o);
    cf_submit_range(c, 15990, 10, now, COMMIT_DUPLICATE);
    commit_close(c);

    cf_expect_log_records(fx, 16000);
}

/*
 * A map that fills up slowly is grown ahead of need, between checkpoints,
 * without failing one: storage is never re-established for it.
 */
static void test_map_grows_ahead(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    o.map_size = 1024 * 1024;
    commit_t *c = cf_open(&o);
    commit_stats_t s;
    int64_t now = tu_now_ms();
    unsigned round = 0;

    do {
        cf_submit_range(c, round * 1000, 1000, now, COMMIT_ACCEPTED);
        round++;
        cf_await_stat(c, offsetof(commit_stats_t, checkpoints), round, &s);
        commit_get_stats(c, &s);
    } while (s.map_grows == 0 && round < 20);
    assert_true(s.map_grows > 0);
    assert_true(s.store_map_size > o.map_size);
    assert_int_equal(s.recoveries, 0);
    assert_int_equal(s.checkpoint_failures, 0);
    assert_int_equal(s.window.keys, round * 1000);
    commit_close(c);
    cf_expect_log_records(fx, round * 1000);
}

/* Counts how often each payload of ids [0, n) occurs in the log. */
static void count_in_log(const fx_t *fx, unsigned *counts, unsigned n, uint64_t *total)
{
    char **logv = NULL;
    uint64_t nlog = cf_read_log(fx, &logv, NULL);
    memset(counts, 0, n * sizeof(*counts));
    for (uint64_t i = 0; i < nlog; i++) {
        unsigned id;
        assert_int_equal(sscanf(logv[i], "{\"messageId\":\"m-%u\"", &id), 1);
        assert_true(id < n);
        counts[id]++;
    }
    cf_free_log(logv, nlog);
    *total = nlog;
}

/*
 * LMDB's checkpoint commit fails (I/O error). Every batch in the transaction was fsynced to
 * the log and acknowledged before: nothing is lost, and no request fails. The writer re-opens
 * storage, replay applies the batches since the last checkpoint, and a client's retry is a
 * duplicate; each event is in the log once.
 */
static void test_checkpoint_fails(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    commit_t *c = cf_open(&o);
    commit_stats_t s;
    unsigned counts[20];
    uint64_t total;
    cf_req_t r;
    const unsigned ids[] = {10, 11, 12};

    if (!cf_inject_available()) {
        commit_close(c);
        skip(); /* LMDB linked statically: no interposition */
    }
    cf_submit_range(c, 0, 3, tu_now_ms(), COMMIT_ACCEPTED);
    cf_inject_commit_failures(EIO, 0, 1);
    assert_int_equal(cf_submit_status(c, &r, ids, 3, tu_now_ms()), COMMIT_OK);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(r.ev[i].result, COMMIT_ACCEPTED);
        assert_int_equal(r.ev[i].offset, 3 + i);
    }
    cf_req_free(&r);

    /* The next checkpoint (within CHECKPOINT_MS) fails and storage is re-established. */
    cf_await_stat(c, offsetof(commit_stats_t, recoveries), 1, &s);
    assert_int_equal(cf_commit_failures_left(), 0);
    assert_int_equal(s.checkpoint_failures, 1);
    assert_int_equal(s.failures, 0); /* no request was answered with a failure */
    assert_false(s.storage_failed);
    assert_int_equal(s.replayed_at_open, 6); /* both batches since the open, by replay */
    assert_int_equal(s.accepted, 6);

    /* The client retries anyway (say its answer was lost): duplicates only. */
    cf_submit_range(c, 10, 3, tu_now_ms(), COMMIT_DUPLICATE);
    cf_submit_range(c, 0, 3, tu_now_ms(), COMMIT_DUPLICATE);
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
 * A checkpoint's evictions cut short while serving and at close (commit_fixture.h): the next
 * open finishes them before replaying, so the window holds exactly max_keys keys again.
 * test_check.c checks what `check` reports of the same data dir.
 */
static void test_checkpoint_evictions_cut_short(void **state)
{
    fx_t *fx = *state;
    commit_options_t o;
    commit_stats_t s;
    int64_t now = tu_now_ms();

    cf_evictions_cut_short(fx, &o);
    commit_t *c = cf_open(&o);
    commit_get_stats(c, &s);
    assert_int_equal(s.window.keys, 5000);
    cf_submit_range(c, 10000, 5000, now, COMMIT_DUPLICATE);
    cf_submit_range(c, 9900, 100, now, COMMIT_ACCEPTED);
    commit_close(c);
    cf_expect_log_records(fx, 15200);
}

/*
 * LMDB reports a full map at a checkpoint: the writer re-opens with a doubled map and replays
 * the batches since the last checkpoint. No batch is appended a second time, and the keys are
 * remembered.
 */
static void test_store_full_at_checkpoint(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    commit_t *c = cf_open(&o);
    commit_stats_t s;
    unsigned counts[20];
    uint64_t total;
    cf_req_t r;
    const unsigned ids[] = {5, 6, 7, 8};

    if (!cf_inject_available()) {
        commit_close(c);
        skip();
    }
    cf_inject_commit_failures(CF_MDB_MAP_FULL, 0, 1);
    cf_submit_wait(c, &r, ids, 4, tu_now_ms());
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(r.ev[i].result, COMMIT_ACCEPTED);
        assert_int_equal(r.ev[i].offset, i);
    }
    cf_req_free(&r);
    cf_await_stat(c, offsetof(commit_stats_t, map_grows), 1, &s);
    assert_int_equal(cf_commit_failures_left(), 0);
    assert_int_equal(s.map_grows, 1);
    assert_int_equal(s.accepted, 4);
    assert_int_equal(s.log_next_offset, 4);
    cf_submit_wait(c, &r, ids, 4, tu_now_ms());
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(r.ev[i].result, COMMIT_DUPLICATE);
    cf_req_free(&r);
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
    commit_options_t o = cf_default_opts(fx);
    commit_t *c = cf_open(&o);
    uint8_t secret[KEYHASH_SECRET_LEN];
    const unsigned n = 12000;
    char dir[512];
    commit_stats_t s;

    memcpy(secret, commit_secret(c), sizeof(secret));
    commit_close(c);

    /* Write the log directly, as if LMDB had lost everything after the secret. */
    log_options_t lo = {.segment_bytes = 1 << 20};
    log_t *log = NULL;
    snprintf(dir, sizeof(dir), "%s/log", fx->dir);
    assert_int_equal(log_open(dir, &lo, &log), LOG_OK);
    log_record_t *recs = calloc(n, sizeof(*recs));
    char(*pl)[96] = calloc(n, sizeof(*pl));
    assert_non_null(recs);
    assert_non_null(pl);
    int64_t now = tu_now_ms();
    for (unsigned i = 0; i < n; i++) {
        char mid[32];
        int ml = snprintf(mid, sizeof(mid), "m-%u", i);
        keyhash(secret, CF_SOURCE, strlen(CF_SOURCE), mid, (size_t)ml, recs[i].key);
        recs[i].len = (uint32_t)cf_fmt_payload(pl[i], sizeof(pl[i]), i);
        recs[i].data = pl[i];
        recs[i].received_ms = now;
    }
    assert_int_equal(log_append(log, recs, n), LOG_OK);
    assert_int_equal(log_sync(log), LOG_OK);
    log_close(log);
    free(recs);
    free(pl);

    o.map_size = 256 * 1024;
    c = cf_open(&o);
    commit_get_stats(c, &s);
    assert_int_equal(s.replayed_at_open, n);
    assert_int_equal(s.window.keys, n);
    assert_true(s.map_grows > 0);
    assert_int_equal(s.log_next_offset, n);
    cf_submit_range(c, 0, 50, tu_now_ms(), COMMIT_DUPLICATE);
    cf_submit_range(c, n - 50, 50, tu_now_ms(), COMMIT_DUPLICATE);
    cf_submit_range(c, n, 1, tu_now_ms(), COMMIT_ACCEPTED);
    commit_close(c);
}

#define T(f) cmocka_unit_test_setup_teardown(f, cf_setup, cf_teardown)

static void watch_done(void *arg)
{
    tu_waiter_done(arg);
}

/* A watch fires once the committed offset passes it; an expired one at its deadline. */
static void test_watch(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    commit_t *c = cf_open(&o);
    tu_waiter_t w;
    tu_waiter_init(&w);

    cf_submit_range(c, 0, 3, tu_now_ms(), COMMIT_ACCEPTED);
    assert_int_equal(commit_committed_offset(c), 3);

    /* Already passed: answered at once. */
    tu_waiter_add(&w, 1);
    assert_int_equal(commit_watch(c, 2, tu_monotonic_ms() + 60000, watch_done, &w), COMMIT_OK);
    tu_waiter_wait(&w);

    /* Waits for the next commit, long before its one-minute deadline. */
    tu_waiter_add(&w, 1);
    int64_t t0 = tu_monotonic_ms();
    assert_int_equal(commit_watch(c, 3, t0 + 60000, watch_done, &w), COMMIT_OK);
    cf_submit_range(c, 3, 1, tu_now_ms(), COMMIT_ACCEPTED);
    tu_waiter_wait(&w);
    assert_true(tu_monotonic_ms() - t0 < 30000);
    assert_int_equal(commit_committed_offset(c), 4);

    /* Nothing comes: the deadline answers. */
    tu_waiter_add(&w, 1);
    t0 = tu_monotonic_ms();
    assert_int_equal(commit_watch(c, 4, t0 + 200, watch_done, &w), COMMIT_OK);
    tu_waiter_wait(&w);
    assert_true(tu_monotonic_ms() - t0 >= 200);

    /* Closing answers every watch still waiting. */
    tu_waiter_add(&w, 1);
    assert_int_equal(commit_watch(c, 100, tu_monotonic_ms() + 600000, watch_done, &w), COMMIT_OK);
    commit_close(c);
    tu_waiter_wait(&w);
    tu_waiter_destroy(&w);
}

typedef struct {
    pthread_mutex_t mu;
    unsigned warnings;
    char last[512];
} notes_t;

static void note(void *arg, int level, const char *msg)
{
    notes_t *n = arg;
    pthread_mutex_lock(&n->mu);
    if (level == 1 && strstr(msg, "inside the dedupe window")) {
        n->warnings++;
        snprintf(n->last, sizeof(n->last), "%s", msg);
    }
    pthread_mutex_unlock(&n->mu);
}

/*
 * Size-bound retention deletes closed segments as the writer goes; deleting records whose
 * keys are still in the window is counted and warned about (rebuild could not restore them),
 * while the keys themselves keep deduplicating.
 */
static void test_retention_inside_window(void **state)
{
    fx_t *fx = *state;
    notes_t n = {.mu = PTHREAD_MUTEX_INITIALIZER};
    commit_options_t o = cf_default_opts(fx);
    o.segment_bytes = 4096;
    o.log_max_bytes = 16384;
    o.notify = note;
    o.notify_arg = &n;
    commit_t *c = cf_open(&o);
    commit_stats_t s;

    /* Retention runs at most once a second: keep writing until it has run. */
    int64_t deadline = tu_monotonic_ms() + 20000;
    unsigned next = 0;
    do {
        cf_submit_range(c, next, 20, tu_now_ms(), COMMIT_ACCEPTED);
        next += 20;
        commit_get_stats(c, &s);
    } while (s.retention_segments == 0 && tu_monotonic_ms() < deadline);
    assert_true(s.retention_segments > 0);
    assert_true(s.retention_records > 0);
    assert_int_equal(s.retention_window_records, s.retention_records); /* all within 1 h */
    assert_true(s.log_first_offset > 0);
    /* Over the bound by the active segment, and by what the store had not applied yet. */
    assert_true(s.log_bytes <= o.log_max_bytes + o.segment_bytes + 4096 + s.retention_held_bytes);
    pthread_mutex_lock(&n.mu);
    assert_true(n.warnings > 0);
    pthread_mutex_unlock(&n.mu);

    /* Keys of deleted records are still remembered. */
    cf_submit_range(c, 0, 5, tu_now_ms(), COMMIT_DUPLICATE);
    commit_close(c);
}

/* Retention passes that acted on a log over its bound: deleted segments, or kept them. */
typedef struct {
    pthread_mutex_t mu;
    unsigned passes;
} retain_notes_t;

static void retain_note(void *arg, int level, const char *msg)
{
    retain_notes_t *n = arg;
    (void)level;
    pthread_mutex_lock(&n->mu);
    if (strstr(msg, "log retention deleted") || strstr(msg, "log retention is waiting"))
        n->passes++;
    pthread_mutex_unlock(&n->mu);
}

static unsigned retain_passes(retain_notes_t *n)
{
    pthread_mutex_lock(&n->mu);
    unsigned v = n->passes;
    pthread_mutex_unlock(&n->mu);
    return v;
}

/* Tight size-bound retention: segments of 4 KiB, the log bound to 16 KiB. */
static commit_options_t tight_retention_opts(const fx_t *fx)
{
    commit_options_t o = cf_default_opts(fx);
    o.segment_bytes = 4096;
    o.log_max_bytes = 16384;
    return o;
}

/*
 * The child's part of test_retention_keeps_unapplied: writes in batches of 20 until a retention
 * pass has acted on the log (over its bound) after `checkpoints` checkpoints, then dies at once
 * as a kill -9 would (no close, no last checkpoint), telling the parent through `fd` how many
 * ids it had acknowledged and how many checkpoints had been written by then.
 */
static void retention_child(const fx_t *fx, uint64_t checkpoints, int fd)
{
    retain_notes_t n = {.mu = PTHREAD_MUTEX_INITIALIZER};
    commit_options_t o = tight_retention_opts(fx);
    o.notify = retain_note;
    o.notify_arg = &n;
    commit_t *c = cf_open(&o);
    commit_stats_t s;
    uint64_t out[2] = {0, 0};
    unsigned seen = 0;
    bool armed = false;
    int64_t deadline = tu_monotonic_ms() + 60000;
    do {
        cf_submit_range(c, (unsigned)out[0], 20, tu_now_ms(), COMMIT_ACCEPTED);
        out[0] += 20;
        commit_get_stats(c, &s);
        if (!armed && s.checkpoints >= checkpoints) {
            armed = true; /* from here on, the next pass counts */
            seen = retain_passes(&n);
        }
    } while (!(armed && retain_passes(&n) > seen && s.log_bytes > 4 * o.log_max_bytes) &&
             tu_monotonic_ms() < deadline);
    out[1] = s.checkpoints;
    if (write(fd, out, sizeof(out)) != (ssize_t)sizeof(out))
        _exit(2);
    _exit(0);
}

/*
 * Retention never deletes what LMDB has not durably applied. A server writing far past
 * --log-max-bytes dies (as by kill -9) once retention has acted: before its first checkpoint
 * (nothing applied: no segment may go) and after one (only below what that applied). The next
 * open must start, and know every acknowledged id as a duplicate.
 */
static void check_retention_keeps_unapplied(const fx_t *fx, uint64_t checkpoints)
{
    int p[2];
    uint64_t got[2] = {0, 0};
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        retention_child(fx, checkpoints, p[1]);
    }
    close(p[1]);
    assert_int_equal(read(p[0], got, sizeof(got)), (ssize_t)sizeof(got));
    close(p[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    commit_options_t o = tight_retention_opts(fx);
    commit_t *c = cf_open(&o);
    commit_stats_t s;
    commit_get_stats(c, &s);
    assert_int_equal(s.log_next_offset, got[0]);
    for (unsigned i = 0; i < got[0]; i += 1000)
        cf_submit_range(c, i, got[0] - i < 1000 ? (unsigned)(got[0] - i) : 1000, tu_now_ms(),
                        COMMIT_DUPLICATE);
    commit_close(c);
    /* And the child died where it was meant to. */
    if (checkpoints == 0)
        assert_int_equal(got[1], 0); /* before its first checkpoint */
    else
        assert_true(got[1] >= checkpoints);
}

/*
 * A log that starts past the store's applied offset (commit_fixture.h): the open refuses and
 * says how to keep the window. test_check.c checks that `ingestd check` reports it.
 */
static void test_log_gap_at_open(void **state)
{
    commit_options_t o;
    commit_t *c = NULL;
    char err[1024] = "";

    cf_log_gap(*state, &o);
    assert_int_not_equal(commit_open(&o, &c, err, sizeof(err)), COMMIT_OK);
    assert_null(c);
    assert_non_null(strstr(err, "records 300.."));
    assert_non_null(strstr(err, "Put those segments back"));
}

static void test_retention_keeps_unapplied(void **state)
{
    check_retention_keeps_unapplied(*state, 0);
}

static void test_retention_keeps_unapplied_after_checkpoint(void **state)
{
    check_retention_keeps_unapplied(*state, 1);
}

/* Age-bound retention also runs while no events arrive: the idle writer wakes for it. */
static void test_retention_while_idle(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    o.segment_bytes = 4096;
    o.log_retention_ms = 1; /* every closed segment is old at once */
    commit_t *c = cf_open(&o);
    commit_stats_t s;
    for (unsigned i = 0; i < 30; i++)
        cf_submit_range(c, i * 10, 10, tu_now_ms(), COMMIT_ACCEPTED);
    /* No more writes from here: only the idle wake-up can delete what is left. */
    int64_t deadline = tu_monotonic_ms() + 15000;
    do {
        usleep(10000); /* polling a condition with a deadline, not standing in for one */
        commit_get_stats(c, &s);
    } while (s.log_segments > 1 && tu_monotonic_ms() < deadline);
    assert_int_equal(s.log_segments, 1);
    assert_true(s.retention_segments > 0);
    assert_int_equal(s.log_first_offset, s.retention_records);
    commit_close(c);
}

/* Lazy mode: a data dir whose boot-id file the test controls. */
static commit_options_t lazy_opts(const fx_t *fx, char *boot, size_t len, const char *id)
{
    commit_options_t o = cf_default_opts(fx);
    snprintf(boot, len, "%s/boot_id", fx->base);
    assert_int_equal(tu_write_file(boot, id, strlen(id)), 0);
    o.store_sync = STORE_SYNC_NONE;
    o.boot_id_path = boot;
    return o;
}

static bool marker_exists(const fx_t *fx)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/store/UNSYNCED", fx->dir);
    return access(path, F_OK) == 0;
}

/* A clean close syncs LMDB and removes the marker: the next start rebuilds nothing. */
static void test_lazy_clean_close(void **state)
{
    fx_t *fx = *state;
    char boot[600];
    commit_options_t o = lazy_opts(fx, boot, sizeof(boot), "boot-1\n");
    commit_t *c = cf_open(&o);
    commit_stats_t s;
    cf_submit_range(c, 0, 50, tu_now_ms(), COMMIT_ACCEPTED);
    assert_true(marker_exists(fx));
    commit_close(c);
    assert_false(marker_exists(fx));

    assert_int_equal(tu_write_file(boot, "boot-2\n", 7), 0); /* even after a reboot */
    c = cf_open(&o);
    commit_get_stats(c, &s);
    assert_false(s.rebuilt_at_open);
    assert_int_equal(s.window.keys, 50);
    cf_submit_range(c, 0, 50, tu_now_ms(), COMMIT_DUPLICATE);
    commit_close(c);
}

/*
 * The marker outlives a crash. Same boot (a process crash): LMDB's writes are in the page
 * cache and it is kept. Another boot (the machine crashed): it is rebuilt from the log, and
 * every logged key is a duplicate again.
 */
static void test_lazy_machine_crash_rebuilds(void **state)
{
    fx_t *fx = *state;
    char boot[600], marker[600];
    commit_options_t o = lazy_opts(fx, boot, sizeof(boot), "boot-1");
    commit_t *c = cf_open(&o);
    commit_stats_t s;
    cf_submit_range(c, 0, 40, tu_now_ms(), COMMIT_ACCEPTED);
    commit_close(c);
    /* Put back the marker a crash would have left (a clean close removed it). */
    snprintf(marker, sizeof(marker), "%s/store/UNSYNCED", fx->dir);
    assert_int_equal(tu_write_file(marker, "boot-1", 6), 0);

    c = cf_open(&o); /* same boot: kept */
    commit_get_stats(c, &s);
    assert_false(s.rebuilt_at_open);
    assert_int_equal(s.replayed_at_open, 0);
    cf_submit_range(c, 40, 10, tu_now_ms(), COMMIT_ACCEPTED);
    commit_close(c);
    assert_int_equal(tu_write_file(marker, "boot-1", 6), 0);

    assert_int_equal(tu_write_file(boot, "boot-2", 6), 0);
    c = cf_open(&o); /* another boot: rebuilt from the log */
    commit_get_stats(c, &s);
    assert_true(s.rebuilt_at_open);
    assert_int_equal(s.replayed_at_open, 50);
    assert_int_equal(s.window.keys, 50);
    assert_true(marker_exists(fx)); /* lazy again from here on */
    cf_submit_range(c, 0, 50, tu_now_ms(), COMMIT_DUPLICATE);
    cf_submit_range(c, 50, 5, tu_now_ms(), COMMIT_ACCEPTED);
    commit_close(c);

    /* The store moved aside for the rebuild is gone once the rebuild worked. */
    DIR *d = opendir(fx->dir);
    struct dirent *e;
    assert_non_null(d);
    while ((e = readdir(d)) != NULL)
        assert_null(strstr(e->d_name, "unsynced"));
    closedir(d);
    cf_expect_log_records(fx, 55);
}

/* Started in the default mode after a lazy run crashed in this boot: sync, drop the marker. */
static void test_lazy_marker_cleared_by_synced_mode(void **state)
{
    fx_t *fx = *state;
    char boot[600], marker[600];
    commit_options_t o = lazy_opts(fx, boot, sizeof(boot), "boot-1");
    commit_t *c = cf_open(&o);
    cf_submit_range(c, 0, 10, tu_now_ms(), COMMIT_ACCEPTED);
    commit_close(c);
    snprintf(marker, sizeof(marker), "%s/store/UNSYNCED", fx->dir);
    assert_int_equal(tu_write_file(marker, "boot-1", 6), 0);

    o.store_sync = STORE_SYNC_META;
    c = cf_open(&o);
    assert_false(marker_exists(fx));
    cf_submit_range(c, 0, 10, tu_now_ms(), COMMIT_DUPLICATE);
    commit_close(c);
}

/*
 * --store memory: a filter instead of LMDB. Duplicates are caught within and across requests,
 * the filter is rebuilt from the log at open (so a restart keeps deduplicating), no LMDB store
 * is made, and the log holds each accepted event once.
 */
static void test_memory_store(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    /* Bloom never forgets, so every re-send must be caught; with 110 keys in 1 Mbit its false
     * positive chance is ~1e-22. (NSQ would forget keys that share a bucket: ~30% here.) */
    o.memory_filter = "bloom:1Mbit";
    commit_t *c = cf_open(&o);
    commit_stats_t s;
    commit_get_stats(c, &s);
    assert_true(s.memory_store);
    assert_non_null(strstr(s.filter_spec, "bloom"));
    assert_true(s.filter_bits > 0);

    cf_submit_range(c, 0, 100, tu_now_ms(), COMMIT_ACCEPTED);
    cf_submit_range(c, 50, 50, tu_now_ms(), COMMIT_DUPLICATE);
    commit_get_stats(c, &s);
    assert_int_equal(s.accepted, 100);
    assert_int_equal(s.duplicates, 50);
    assert_int_equal(s.committed_offset, 100);
    commit_close(c);

    char store[600];
    snprintf(store, sizeof(store), "%s/store", fx->dir);
    assert_int_not_equal(access(store, F_OK), 0);

    c = cf_open(&o);
    commit_get_stats(c, &s);
    assert_int_equal(s.replayed_at_open, 100);
    cf_submit_range(c, 0, 100, tu_now_ms(), COMMIT_DUPLICATE);
    cf_submit_range(c, 100, 10, tu_now_ms(), COMMIT_ACCEPTED);
    commit_close(c);
    cf_expect_log_records(fx, 110);

    /* The same data dir in LMDB mode: a new store is built from the log. */
    o.memory_filter = NULL;
    c = cf_open(&o);
    cf_submit_range(c, 0, 110, tu_now_ms(), COMMIT_DUPLICATE);
    commit_close(c);
}

/* A bad spec is refused at open with a readable reason. */
static void test_memory_store_bad_spec(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    commit_t *c = NULL;
    char err[256] = "";
    o.memory_filter = "qht:bits=zero";
    assert_int_equal(commit_open(&o, &c, err, sizeof(err)), COMMIT_INVALID);
    assert_null(c);
    assert_non_null(strstr(err, "qht"));
}

/* A done callback that holds the writer thread until released: the queue cannot drain. */
typedef struct {
    tu_waiter_t entered; /* the writer is inside the callback */
    tu_waiter_t release; /* the test lets it go */
    tu_waiter_t *done;   /* then counted like any other request */
} gate_t;

static void gate_done(commit_req_t *req, void *arg)
{
    gate_t *g = arg;
    (void)req;
    tu_waiter_done(&g->entered);
    tu_waiter_wait(&g->release);
    tu_waiter_done(g->done);
}

/* --queue-max-bytes: past the bound a submit is refused (COMMIT_BUSY) and nothing is queued. */
static void test_queue_bound(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    tu_waiter_t w;
    gate_t g;
    cf_req_t a, b, c, d, e, big;
    commit_stats_t s;
    int64_t now = tu_now_ms();
    /* Ids of one width give payloads of one length L. */
    unsigned ia[] = {100}, ib[] = {101, 102}, ic[] = {103, 104}, id[] = {105}, ie[] = {106};
    unsigned ibig[] = {110, 111, 112, 113, 114, 115};
    char buf[96];
    uint64_t len = (uint64_t)cf_fmt_payload(buf, sizeof buf, 100);

    o.queue_max_bytes = 4 * len;
    commit_t *c0 = cf_open(&o);
    tu_waiter_init(&w);
    tu_waiter_init(&g.entered);
    tu_waiter_init(&g.release);
    g.done = &w;
    tu_waiter_add(&g.entered, 1);
    tu_waiter_add(&g.release, 1);

    /* a (L) holds the writer in its callback: its bytes still count until it is answered. */
    cf_req_init(&a, commit_secret(c0), ia, 1, now, &w);
    a.req.done = gate_done;
    a.req.arg = &g;
    tu_waiter_add(&w, 1);
    assert_int_equal(commit_submit(c0, &a.req), COMMIT_OK);
    tu_waiter_wait(&g.entered);
    assert_false(commit_busy(c0));

    cf_req_init(&b, commit_secret(c0), ib, 2, now, &w); /* 3L */
    tu_waiter_add(&w, 1);
    assert_int_equal(commit_submit(c0, &b.req), COMMIT_OK);
    cf_req_init(&c, commit_secret(c0), ic, 2, now, &w); /* 5L > 4L: refused */
    assert_int_equal(commit_submit(c0, &c.req), COMMIT_BUSY);
    assert_false(commit_busy(c0));
    cf_req_init(&d, commit_secret(c0), id, 1, now, &w); /* 4L: fits exactly */
    tu_waiter_add(&w, 1);
    assert_int_equal(commit_submit(c0, &d.req), COMMIT_OK);
    assert_true(commit_busy(c0));
    cf_req_init(&e, commit_secret(c0), ie, 1, now, &w);
    assert_int_equal(commit_submit(c0, &e.req), COMMIT_BUSY);
    commit_get_stats(c0, &s);
    assert_int_equal(s.queue_bytes, 4 * len);
    assert_int_equal(s.queue_max_bytes, 4 * len);
    assert_int_equal(s.busy_requests, 2);
    assert_int_equal(s.busy_events, 3);

    tu_waiter_done(&g.release);
    tu_waiter_wait(&w);
    assert_int_equal(a.req.status, COMMIT_OK);
    assert_int_equal(b.req.status, COMMIT_OK);
    assert_int_equal(d.req.status, COMMIT_OK);
    /* The writer releases the bytes just after the callbacks return: poll (bounded) for it. */
    for (int i = 0; i < 5000; i++) {
        commit_get_stats(c0, &s);
        if (s.queue_bytes == 0)
            break;
        usleep(1000);
    }
    assert_int_equal(s.queue_bytes, 0);
    assert_false(commit_busy(c0));

    /* An empty queue takes a request larger than the bound (else it could never pass). */
    cf_submit_wait(c0, &big, ibig, 6, now);
    commit_get_stats(c0, &s);
    assert_int_equal(s.accepted, 4 + 6);

    commit_close(c0);
    /* Refused requests left nothing behind: only a, b, d and big are in the log. */
    cf_expect_log_records(fx, 10);
    cf_req_free(&a);
    cf_req_free(&b);
    cf_req_free(&c);
    cf_req_free(&d);
    cf_req_free(&e);
    cf_req_free(&big);
    tu_waiter_destroy(&w);
    tu_waiter_destroy(&g.entered);
    tu_waiter_destroy(&g.release);
}

/* Submits the single id, which must be a duplicate whose first copy is at `offset`, received at
 * `first_ms` (0: unknown). */
static void submit_one_duplicate(commit_t *c, unsigned id, int64_t received_ms, uint64_t offset,
                                 int64_t first_ms)
{
    cf_req_t r;
    cf_submit_wait(c, &r, &id, 1, received_ms);
    assert_int_equal(r.ev[0].result, COMMIT_DUPLICATE);
    assert_int_equal(r.ev[0].first_received_ms, first_ms);
    if (first_ms != 0)
        assert_int_equal(r.ev[0].offset, offset);
    cf_req_free(&r);
}

/*
 * A duplicate names the copy the window holds, wherever it is held: pending (acknowledged since
 * the last checkpoint, also earlier in the same request), the young LMDB store after a
 * checkpoint, a sealed generation. Each duplicate's age is counted.
 */
static void test_duplicate_first_copy(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    histogram_t *ages = NULL;
    assert_int_equal(histogram_new(HISTOGRAM_AGE_SECONDS, HISTOGRAM_AGE_SECONDS_N, &ages), 0);
    o.duplicate_age_seconds = ages;
    int64_t t0 = tu_now_ms() - 600 * 1000; /* ten minutes ago */
    commit_t *c = cf_open(&o);
    commit_stats_t s;

    /* Pending. Ids 0..9, each received a second after the one before, at offsets 0..9. */
    for (unsigned i = 0; i < 10; i++)
        cf_submit_one_accepted(c, i, t0 + i * 1000, i);
    submit_one_duplicate(c, 3, t0 + 20 * 1000, 3, t0 + 3000);
    /* Within one request: the second copy names the first, accepted just before it. */
    const unsigned twice[] = {42, 42};
    cf_req_t r;
    cf_submit_wait(c, &r, twice, 2, t0 + 30 * 1000);
    assert_int_equal(r.ev[0].result, COMMIT_ACCEPTED);
    assert_int_equal(r.ev[0].offset, 10);
    assert_int_equal(r.ev[1].result, COMMIT_DUPLICATE);
    assert_int_equal(r.ev[1].offset, 10);
    assert_int_equal(r.ev[1].first_received_ms, t0 + 30 * 1000);
    cf_req_free(&r);
    commit_get_stats(c, &s);
    assert_int_equal(s.duplicate_age_max_ms, 17000);
    commit_close(c);

    /* The young store: close checkpoints every key into LMDB; nothing is pending after open. */
    c = cf_open(&o);
    commit_get_stats(c, &s);
    assert_int_equal(s.window.generations, 0);
    assert_int_equal(s.replayed_at_open, 0);
    submit_one_duplicate(c, 7, t0 + 500 * 1000, 7, t0 + 7000);
    submit_one_duplicate(c, 42, t0 + 31 * 1000, 10, t0 + 30 * 1000);
    commit_get_stats(c, &s);
    assert_int_equal(s.duplicate_age_max_ms, 493000);
    commit_close(c);

    /* A sealed generation: a young store of 4 keys is sealed at the next checkpoint. */
    o.young_keys = 4;
    c = cf_open(&o);
    cf_submit_range(c, 100, 1, t0, COMMIT_ACCEPTED); /* a checkpoint is due with something new */
    commit_close(c);
    c = cf_open(&o);
    commit_get_stats(c, &s);
    assert_true(s.window.seals + s.window.generations > 0);
    assert_int_equal(s.window.generation_keys, 12);
    for (unsigned i = 0; i < 10; i++)
        submit_one_duplicate(c, i, t0 + 100 * 1000, i, t0 + i * 1000);
    /* One request mixing them: the generations' answers reach their own events. */
    const unsigned mixed[] = {200, 5, 200, 8};
    cf_submit_wait(c, &r, mixed, 4, t0 + 40 * 1000);
    assert_int_equal(r.ev[0].result, COMMIT_ACCEPTED);
    assert_int_equal(r.ev[0].offset, 12);
    const uint64_t want_off[] = {12, 5, 12, 8};
    const int64_t want_ms[] = {0, t0 + 5000, t0 + 40 * 1000, t0 + 8000};
    for (size_t i = 1; i < 4; i++) {
        assert_int_equal(r.ev[i].result, COMMIT_DUPLICATE);
        assert_int_equal(r.ev[i].offset, want_off[i]);
        assert_int_equal(r.ev[i].first_received_ms, want_ms[i]);
    }
    cf_req_free(&r);
    commit_close(c);

    /* Ages: 17 s (pending), 0 (same request), 493 s and 1 s (young store), then the ten above
     * (100 s down to 91 s), and the mixed request's three. */
    assert_int_equal(histogram_count(ages), 17);
    double q = 0;
    assert_int_equal(histogram_quantile(ages, 1.0, &q), 0);
    assert_true(q > 300 && q <= 900);
    histogram_free(ages);
}

/* Memory-filter mode keeps no positions: a duplicate's first copy is unknown, and no age. */
static void test_memory_store_first_unknown(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    histogram_t *ages = NULL;
    assert_int_equal(histogram_new(HISTOGRAM_AGE_SECONDS, HISTOGRAM_AGE_SECONDS_N, &ages), 0);
    o.duplicate_age_seconds = ages;
    o.memory_filter = "bloom:1Mbit";
    commit_t *c = cf_open(&o);
    cf_submit_one_accepted(c, 1, tu_now_ms(), 0);
    submit_one_duplicate(c, 1, tu_now_ms(), 0, 0);
    commit_close(c);
    assert_int_equal(histogram_count(ages), 0);
    histogram_free(ages);
}

/* The operator notices of a commit, kept for the floor test (notify runs on the writer). */
typedef struct {
    pthread_mutex_t mu;
    int below, back; /* "fell below --window-floor" (level 1), "back above" (level 2) */
} notices_t;

static void on_notice(void *arg, int level, const char *msg)
{
    notices_t *n = arg;
    pthread_mutex_lock(&n->mu);
    if (level == 1 && strstr(msg, "fell below --window-floor"))
        n->below++;
    if (level == 2 && strstr(msg, "back above --window-floor"))
        n->back++;
    pthread_mutex_unlock(&n->mu);
}

static int notices_get(notices_t *n, bool back)
{
    pthread_mutex_lock(&n->mu);
    int v = back ? n->back : n->below;
    pthread_mutex_unlock(&n->mu);
    return v;
}

/*
 * --window-floor: a young server holding only young keys is not below it; evictions by the size
 * bound of keys younger than the floor put it below (one notice however many batches), and an
 * idle server comes back above once the floor's time has passed (one notice).
 */
static void test_window_floor(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    notices_t n = {.below = 0, .back = 0};
    pthread_mutex_init(&n.mu, NULL);
    o.max_keys = 10;
    o.window_floor_ms = 1500;
    o.notify = on_notice;
    o.notify_arg = &n;
    commit_t *c = cf_open(&o);
    commit_stats_t s;

    cf_submit_range(c, 0, 10, tu_now_ms(), COMMIT_ACCEPTED);
    commit_get_stats(c, &s);
    assert_false(s.window.below_floor); /* young, but nothing was forgotten */
    assert_int_equal(s.window.evicted_size, 0);
    for (unsigned i = 1; i < 4; i++)
        cf_submit_range(c, i * 10, 10, tu_now_ms(), COMMIT_ACCEPTED);
    commit_get_stats(c, &s);
    assert_int_equal(s.window.evicted_size, 30);
    assert_true(s.window.below_floor);
    assert_int_equal(notices_get(&n, false), 1);
    assert_int_equal(notices_get(&n, true), 0);

    /* Idle: the writer wakes when the floor's time has passed and says so once. */
    int64_t deadline = tu_monotonic_ms() + 10000;
    do {
        commit_get_stats(c, &s);
        assert_true(tu_monotonic_ms() < deadline);
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL); /* polling a condition, not a stand-in for one */
    } while (s.window.below_floor);
    assert_int_equal(notices_get(&n, true), 1);
    assert_int_equal(notices_get(&n, false), 1);
    commit_close(c);
    pthread_mutex_destroy(&n.mu);
}

/* ---- commit_lookup and storage/tools/lookup.h ---- */

static void key_of(const uint8_t *secret, unsigned id, uint8_t key[KEYHASH_LEN])
{
    char mid[32];
    int ml = snprintf(mid, sizeof(mid), "m-%u", id);
    keyhash(secret, CF_SOURCE, strlen(CF_SOURCE), mid, (size_t)ml, key);
}

/* commit_lookup of id: *res, and COMMIT_OK asserted. */
static void lookup_id(commit_t *c, unsigned id, commit_lookup_t *res)
{
    uint8_t key[KEYHASH_LEN];
    key_of(commit_secret(c), id, key);
    assert_int_equal(commit_lookup(c, key, res), COMMIT_OK);
}

/* The same from another process's view (storage/tools/lookup.h): found, or -1 when not. */
static int64_t offline_offset(const fx_t *fx, unsigned id)
{
    lookup_t *lk = NULL;
    char err[512] = "";
    uint8_t key[KEYHASH_LEN];
    commit_lookup_t res;
    if (lookup_open(fx->dir, &lk, err, sizeof(err)) != 0)
        print_error("lookup_open: %s\n", err);
    assert_non_null(lk);
    key_of(lookup_secret(lk), id, key);
    assert_int_equal(lookup_find(lk, key, &res), 0);
    lookup_close(lk);
    return res.found ? (int64_t)res.offset : -1;
}

static void expect_found(commit_t *c, unsigned id, uint64_t offset, int64_t received_ms)
{
    commit_lookup_t res;
    lookup_id(c, id, &res);
    assert_true(res.found);
    assert_int_equal(res.offset, offset);
    assert_int_equal(res.received_ms, received_ms);
}

/*
 * A key is found where de-duplication would find it: pending (before a checkpoint), in LMDB
 * (after one, and after a restart), and in a sealed generation; an evicted one is not, even
 * while LMDB still holds it. The window start is the oldest key's receivedAt. The offline view
 * agrees with the server's at every step.
 */
static void test_lookup(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    o.young_keys = 100;
    commit_t *c = cf_open(&o);
    commit_lookup_t res;
    commit_stats_t s;
    int64_t t0 = tu_now_ms() - 5000, t1 = t0 + 1000;

    lookup_id(c, 1, &res);
    assert_false(res.found);
    assert_int_equal(res.window_start_ms, 0); /* empty window */
    cf_submit_range(c, 0, 5, t0, COMMIT_ACCEPTED);
    cf_submit_range(c, 5, 5, t1, COMMIT_ACCEPTED);
    expect_found(c, 3, 3, t0);
    expect_found(c, 7, 7, t1);
    lookup_id(c, 99, &res);
    assert_false(res.found);
    assert_int_equal(res.window_start_ms, t0);
    assert_int_equal(offline_offset(fx, 7), 7); /* the log tail, or LMDB after a checkpoint */
    assert_int_equal(offline_offset(fx, 99), -1);

    /* Past young_keys the checkpointer seals: the oldest keys live in a generation file. */
    cf_submit_range(c, 10, 190, t1, COMMIT_ACCEPTED);
    cf_await_stat(c, offsetof(commit_stats_t, window.seals), 1, &s);
    expect_found(c, 0, 0, t0);
    expect_found(c, 150, 150, t1);
    assert_int_equal(offline_offset(fx, 0), 0);
    assert_int_equal(offline_offset(fx, 150), 150);
    commit_close(c);

    c = cf_open(&o);
    expect_found(c, 0, 0, t0);
    expect_found(c, 199, 199, t1);
    assert_int_equal(offline_offset(fx, 199), 199);
    commit_close(c);

    /* The size bound evicts the oldest young keys: unseen at once, as for de-duplication. */
    o.max_keys = 10;
    o.young_keys = 1000;
    c = cf_open(&o);
    cf_submit_range(c, 1000, 10, t1 + 1000, COMMIT_ACCEPTED);
    cf_submit_range(c, 1010, 10, t1 + 2000, COMMIT_ACCEPTED);
    lookup_id(c, 1009, &res);
    assert_false(res.found);
    lookup_id(c, 1010, &res);
    assert_true(res.found);
    /* Sealed generations go whole, later, by the window's rule: they may still start it. */
    assert_true(res.window_start_ms >= t0 && res.window_start_ms <= t1 + 2000);
    commit_close(c);

    /* Memory mode keeps no positions. */
    o = cf_default_opts(fx);
    o.memory_filter = "bloom:1Mbit";
    c = cf_open(&o);
    uint8_t key[KEYHASH_LEN];
    key_of(commit_secret(c), 0, key);
    assert_int_equal(commit_lookup(c, key, &res), COMMIT_UNSUPPORTED);
    commit_close(c);
}

typedef struct {
    commit_t *c;
    atomic_uint accepted; /* ids below it were acknowledged */
    atomic_bool stop;
    unsigned lookups, misses;
} lookup_race_t;

static void *lookup_thread(void *arg)
{
    lookup_race_t *lr = arg;
    while (!atomic_load(&lr->stop)) {
        unsigned n = atomic_load(&lr->accepted);
        if (n == 0)
            continue;
        commit_lookup_t res;
        lookup_id(lr->c, n - 1, &res);
        lr->lookups++;
        if (!res.found || res.offset != n - 1)
            lr->misses++;
    }
    return NULL;
}

/* Lookups from another thread while batches commit: every acknowledged id is found, exactly. */
static void test_lookup_while_writing(void **state)
{
    fx_t *fx = *state;
    commit_options_t o = cf_default_opts(fx);
    lookup_race_t lr = {.c = cf_open(&o)};
    pthread_t th;
    atomic_init(&lr.accepted, 0);
    atomic_init(&lr.stop, false);
    assert_int_equal(pthread_create(&th, NULL, lookup_thread, &lr), 0);
    for (unsigned i = 0; i < 200; i++) {
        cf_submit_range(lr.c, i * 10, 10, tu_now_ms(), COMMIT_ACCEPTED);
        atomic_store(&lr.accepted, (i + 1) * 10);
    }
    atomic_store(&lr.stop, true);
    pthread_join(th, NULL);
    assert_true(lr.lookups > 0);
    assert_int_equal(lr.misses, 0);
    commit_close(lr.c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_concurrent_exactly_once),
        T(test_duplicate_within_request),
        T(test_duplicates_across_generations),
        T(test_duplicates_across_generations_prepared),
        T(test_budget_per_source),
        T(test_budget_per_source_sealed),
        T(test_close_answers_queued),
        T(test_lock),
        T(test_invalid),
        T(test_window_by_age),
        T(test_window_kept),
        T(test_window_by_size),
        T(test_replay_lagging_store),
        T(test_rebuild_missing_store),
        T(test_replay_evictions_counted),
        T(test_secret_file),
        T(test_torn_tail_at_open),
        T(test_map_grows),
        T(test_map_grows_ahead),
        T(test_replay_grows_map),
        T(test_checkpoint_fails),
        T(test_checkpoint_evictions_cut_short),
        T(test_store_full_at_checkpoint),
        T(test_watch),
        T(test_retention_inside_window),
        T(test_retention_while_idle),
        T(test_retention_keeps_unapplied),
        T(test_retention_keeps_unapplied_after_checkpoint),
        T(test_log_gap_at_open),
        T(test_lazy_clean_close),
        T(test_lazy_machine_crash_rebuilds),
        T(test_lazy_marker_cleared_by_synced_mode),
        T(test_memory_store),
        T(test_memory_store_bad_spec),
        T(test_queue_bound),
        T(test_duplicate_first_copy),
        T(test_memory_store_first_unknown),
        T(test_window_floor),
        T(test_lookup),
        T(test_lookup_while_writing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
