/*
 * commit_fixture.h: a group commit in a temporary data dir, for the tests of storage/commit and of
 * the tools that read the data dir it leaves (tests/unit/storage/tools/).
 */
#ifndef INGESTD_COMMIT_FIXTURE_H
#define INGESTD_COMMIT_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/commit/commit.h"
#include "testutil.h"

/*
 * Unlike testutil.h, these helpers assert (cmocka): they are for test bodies only. Every
 * function taking a tu_fixture_t works in fx->dir = fx->base/data, the data dir (commit_open
 * creates it), and fx->base/store-copy.
 */

/* The source of the events cf_req_init() makes, unless cf_submit_from() names another. */
#define CF_SOURCE "test-src"

/* For cmocka: tu_fixture_setup() with sub "data", and the source back to CF_SOURCE. */
int cf_setup(void **state);
int cf_teardown(void **state);

/* ---- injected LMDB commit failures ---- */

/*
 * This fixture defines mdb_txn_commit() in the test binary, in place of LMDB's (the storage
 * library is linked statically, liblmdb dynamically): it lets the next `skip` commits through,
 * then fails the next `failures` ones with `code` (an LMDB code such as CF_MDB_MAP_FULL, or an
 * errno), freeing the transaction as LMDB does on a failed commit. Thread-safe.
 */
#define CF_MDB_MAP_FULL (-30792) /* lmdb.h's MDB_MAP_FULL; only store.c includes lmdb.h */
void cf_inject_commit_failures(int code, int skip, int failures);
/* How many of the injected failures have not happened yet. */
int cf_commit_failures_left(void);
/* Whether injection works: false when LMDB was linked statically (the test then skips). */
bool cf_inject_available(void);

/* ---- opening ---- */

/* A one-hour window, no key bound, 1 MiB segments, the default map: the tests' baseline. */
commit_options_t cf_default_opts(const tu_fixture_t *fx);

/* commit_open() that must succeed (prints its reason otherwise); commit_close() it. */
commit_t *cf_open(const commit_options_t *o);

/* ---- submitting ---- */

/* One request of events "m-<id>" from the current source, with its payloads. */
typedef struct {
    commit_req_t req;
    commit_event_t *ev;
    char (*payload)[96];
} cf_req_t;

/* The payload of message id `id` (snprintf's result); the log must hold exactly these bytes. */
int cf_fmt_payload(char *buf, size_t len, unsigned id);

/* The done callback cf_req_init() sets: tu_waiter_done(arg). */
void cf_on_done(commit_req_t *req, void *arg);

/*
 * Fills r with the n events of ids, keyed with secret, received at received_ms, whose done
 * callback counts down w. r's arrays are malloc'ed: free them with cf_req_free().
 */
void cf_req_init(cf_req_t *r, const uint8_t *secret, const unsigned *ids, size_t n,
                 int64_t received_ms, tu_waiter_t *w);
void cf_req_free(cf_req_t *r);

/* Whether the submit helpers call commit_prepare() first, as the server does (default false). */
void cf_prepare_submits(bool on);

/*
 * Submits one request of the given ids into r, waits for its done callback, returns its status.
 * The caller reads r's results and frees it with cf_req_free().
 */
int cf_submit_status(commit_t *c, cf_req_t *r, const unsigned *ids, size_t n, int64_t received_ms);
/* cf_submit_status() for a request that must succeed. */
void cf_submit_wait(commit_t *c, cf_req_t *r, const unsigned *ids, size_t n, int64_t received_ms);
/* Submits ids, expects every event to get `want` (COMMIT_ACCEPTED / COMMIT_DUPLICATE). */
void cf_submit_expect(commit_t *c, const unsigned *ids, size_t n, int64_t received_ms, int want);
/* Submits ids first..first+n-1, each expected to get `want`. */
void cf_submit_range(commit_t *c, unsigned first, unsigned n, int64_t received_ms, int want);
/* cf_submit_range() from `source` (per-source budgets). */
void cf_submit_from(commit_t *c, const char *source, unsigned first, unsigned n,
                    int64_t received_ms, int want);
/* Submits the single id, which must be accepted at log offset `offset`. */
void cf_submit_one_accepted(commit_t *c, unsigned id, int64_t received_ms, uint64_t offset);

/* ---- reading back ---- */

/* The entry of `source` in commit_sources (it must be there). */
window_source_t cf_source_stats(commit_t *c, const char *source);

/*
 * Polls the writer's counters until `field` (an offsetof into commit_stats_t of a uint64_t)
 * reaches `want`, for at most 10 s; *s is the last reading.
 */
void cf_await_stat(commit_t *c, size_t field, uint64_t want, commit_stats_t *s);

/*
 * Reads the whole log: the payload of each offset into (*out)[offset] and, when keys is not
 * NULL, its key into (*keys)[offset]. Returns the record count; free *out with cf_free_log()
 * and *keys with free().
 */
uint64_t cf_read_log(const tu_fixture_t *fx, char ***out, uint8_t (**keys)[16]);
void cf_free_log(char **v, uint64_t n);
/* The log holds exactly n records. */
void cf_expect_log_records(const tu_fixture_t *fx, uint64_t n);

/* ---- what an operator does to a data dir ---- */

/* Copies the LMDB files of DIR/store to (a fresh) or back from DIR/../store-copy. */
void cf_copy_store(const tu_fixture_t *fx, bool to_copy);
/* Removes the LMDB files of DIR/store, as an operator who lost them would find it. */
void cf_remove_store(const tu_fixture_t *fx);
/* Deletes the log's first n segment files (and their indexes); returns the first offset left. */
uint64_t cf_delete_first_segments(const tu_fixture_t *fx, size_t n);

/*
 * ---- data dirs in the states the commit tests leave, for the tools' tests ----
 * Each runs its scenario, asserting along the way what the commit test asserts, and leaves the
 * data dir closed. *o is the options used, for the next open.
 */

/*
 * --max-keys 100 per source: "calm" 100 keys and "flood" 100 (its oldest 60 aged out, then
 * 1000..1009 again), interleaved in the log, served and then restarted once. `now` is every
 * event's receivedAt.
 */
void cf_budget_per_source(const tu_fixture_t *fx, commit_options_t *o, int64_t now);

/*
 * --max-keys 5000 and 15,000 events: a checkpoint's key-range transactions are cut short
 * (injected failures) while serving and again at close, so the store is left with evictions
 * in progress; the next open finishes them. Skips the test when injection is unavailable or a
 * timed checkpoint came first.
 */
void cf_evictions_cut_short(const tu_fixture_t *fx, commit_options_t *o);

/*
 * 600 records in 4 KiB segments; the store applied up to 300, and the log's first segments
 * deleted so that it starts past 300: a gap the next open refuses.
 */
void cf_log_gap(const tu_fixture_t *fx, commit_options_t *o);

#endif
