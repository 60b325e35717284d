/*
 * commit/retain.c: log retention, bounded below by what LMDB has durably applied.
 *
 * DESIGN. The log is the source of truth (docs/design.md, invariant 3): a record
 * whose key LMDB has not applied exists nowhere else, so a start after a
 * crash must still find it in the log to replay it. Retention
 * (--log-retention, --log-max-bytes) therefore never deletes a segment
 * holding a record at or past LMDB's *durable* applied offset, `store_durable`
 * (log_retain's keep_from). When that bound is what holds retention back, the
 * log stays over its bounds until the next checkpoint has applied those
 * records (every 3 s, commit/checkpoint.c): the bytes kept so are a gauge in
 * /stats, each pass that waited is counted, and an operator hears it at most
 * once a minute.
 *
 * What is durable depends on --store-sync (store.h), and store_durable is set
 * only once the commit holding `applied` is on disk as far as that mode makes
 * anything durable:
 *   full: every commit syncs its data pages and its meta page: at once.
 *   meta: a commit syncs its data pages but not its meta page, which becomes
 *         durable only with the next commit's sync; a power loss may undo the
 *         last commit, applied offset and all. So the commit that recorded
 *         `applied` is followed by a forced sync (store_flush: its data pages
 *         are on disk already, so that writes the meta page) first.
 *   lazy: nothing is synced before a clean stop; a kill -9 keeps every commit
 *         (the page cache survives), and a crash of the machine rebuilds the
 *         store from the retained log anyway (commit/recover.c), which no
 *         bound can change: the committed offset is the bound.
 * Memory mode applies nothing into a store: its filter learns the retained
 * log again at every open, so nothing holds retention back there
 * (LOG_RETAIN_UNBOUNDED, set by its open).
 *
 * Functions, in order: commit_retain_store_durable, retain_warn_held,
 * retain_count, commit_retain_run, commit_retain_due.
 */
#include <string.h>

#include "storage/commit/internal.h"

#define RETAIN_EVERY_MS    1000
#define HELD_WARN_EVERY_MS 60000

int commit_retain_store_durable(commit_t *c, uint64_t applied)
{
    if (c->opts.store_sync == STORE_SYNC_META) {
        int rc = store_flush(c->store);
        if (rc != STORE_OK)
            return rc;
    }
    pthread_mutex_lock(&c->mu);
    c->store_durable = applied;
    pthread_mutex_unlock(&c->mu);
    return STORE_OK;
}

/* The store lags the log's bounds: say so, at most once a minute (every pass counts it). */
static void retain_warn_held(commit_t *c, const log_retain_result_t *res, uint64_t keep_from)
{
    int64_t t = clk_mono_ms();
    if (c->last_held_warn_ms != 0 && t - c->last_held_warn_ms < HELD_WARN_EVERY_MS)
        return;
    c->last_held_warn_ms = t;
    commit_notify(c, 1,
                  "log retention is waiting for LMDB: %llu segments (%llu bytes) past "
                  "--log-retention / --log-max-bytes hold records from offset %llu on that LMDB "
                  "has not durably applied yet; they are kept (the log is over its bound) until "
                  "a checkpoint has applied them. Retention must not delete what a restart would "
                  "replay; if this lasts, checkpoints are failing or slow (see /stats commit)",
                  (unsigned long long)res->held_segments, (unsigned long long)res->held_bytes,
                  (unsigned long long)keep_from);
}

/*
 * Counts a pass in c->stats; returns, of the records it deleted, how many were still inside the
 * dedupe window (from *from on).
 */
static uint64_t retain_count(commit_t *c, const log_retain_result_t *res, uint64_t *from)
{
    pthread_mutex_lock(&c->mu);
    c->stats.retention_held_bytes = res->held_bytes;
    if (res->held_segments > 0)
        c->stats.retention_waits++;
    /* Of the records deleted now, [first_offset - records, first_offset), those at or past
     * the window's oldest key. */
    uint64_t wfirst = c->stats.window_first_offset;
    *from = res->first_offset - res->records;
    if (wfirst > *from)
        *from = wfirst;
    uint64_t in_window = res->first_offset > *from ? res->first_offset - *from : 0;
    c->stats.retention_segments += res->segments;
    c->stats.retention_records += res->records;
    c->stats.retention_window_records += in_window;
    pthread_mutex_unlock(&c->mu);
    return in_window;
}

void commit_retain_run(commit_t *c)
{
    log_retain_result_t res;
    if (!c->log || (c->opts.log_retention_ms <= 0 && c->opts.log_max_bytes == 0))
        return;
    int64_t t = clk_mono_ms();
    if (t - c->last_retain_ms < RETAIN_EVERY_MS)
        return;
    c->last_retain_ms = t;
    pthread_mutex_lock(&c->mu);
    uint64_t keep_from = c->store_durable;
    pthread_mutex_unlock(&c->mu);
    int rc = log_retain(c->log, clk_wall_ms(), c->opts.log_retention_ms, c->opts.log_max_bytes,
                        keep_from, &res);
    if (rc != LOG_OK)
        commit_notify(c, 1, "log retention: %s (%s)", log_strerror(rc),
                      strerror(log_errno(c->log)));
    uint64_t from;
    uint64_t in_window = retain_count(c, &res, &from);
    if (res.held_segments > 0)
        retain_warn_held(c, &res, keep_from);
    if (res.segments == 0)
        return;
    commit_notify(
        c, 2,
        "log retention deleted %llu segments (%llu records, %llu bytes); the log now starts at "
        "offset %llu",
        (unsigned long long)res.segments, (unsigned long long)res.records,
        (unsigned long long)res.bytes, (unsigned long long)res.first_offset);
    if (in_window > 0)
        commit_notify(
            c, 1,
            "log retention deleted %llu records still inside the dedupe window (offsets %llu.."
            "%llu): their keys are remembered, but `ingestd rebuild` could no longer restore "
            "them; raise --log-retention / --log-max-bytes or shorten --window",
            (unsigned long long)in_window, (unsigned long long)from,
            (unsigned long long)res.first_offset - 1);
    commit_refresh_stats(c);
}

int64_t commit_retain_due(const commit_t *c)
{
    if (c->opts.log_retention_ms > 0 || c->opts.log_max_bytes > 0)
        return c->last_retain_ms + RETAIN_EVERY_MS;
    return INT64_MAX;
}
