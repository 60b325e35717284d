/*
 * commit/writer.c: the writer thread: takes every waiting request off the
 * queue and makes one group commit of them.
 *
 * DESIGN. One thread writes. It takes every request queued (up to
 * opts.max_batch_events events), has the mode (commit_mode_t) de-duplicate
 * the batch and append the accepted events to the log with one fdatasync,
 * and answers every request of the batch: all accepted or duplicates, or all
 * COMMIT_UNAVAILABLE when any step failed. A failure closes storage and
 * re-opens it from disk (commit_recover); until that succeeds every batch
 * fails fast and re-opening is retried at most once a second. Between
 * batches and while idle it does the background work that must not race a
 * batch: the mode's tick (a checkpoint hand-over), log retention,
 * answering lookups (commit_lookup) from its view, and answering long-polls
 * (commit_watch) whose offset was passed or whose deadline came.
 *
 * Functions, in order: commit_writer_reserve / _take / _write_log (staging a
 * batch's log records, for the modes' apply), writer_warn_short_window,
 * writer_count, writer_process (one batch), writer_housekeeping (which also
 * runs log retention, commit/retain.c, and judges the window's floor,
 * commit/reach.c),
 * writer_wait, writer_thread, commit_writer_start.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "storage/commit/internal.h"

#define RECOVER_EVERY_MS     1000
#define SHORT_WINDOW_WARN_MS 60000

int commit_writer_reserve(commit_t *c, size_t n)
{
    if (n <= c->recs_cap)
        return 0;
    size_t cap = c->recs_cap ? c->recs_cap : 1024;
    while (cap < n)
        cap *= 2;
    log_record_t *nr = realloc(c->recs, cap * sizeof(*nr));
    if (!nr)
        return -1;
    c->recs = nr;
    c->recs_cap = cap;
    return 0;
}

/* Marks `ev` accepted at log offset `off` and stages its log record. */
void commit_writer_take(commit_t *c, commit_event_t *ev, uint64_t off, size_t *nrec)
{
    log_record_t *lr = &c->recs[(*nrec)++];
    ev->result = COMMIT_ACCEPTED;
    ev->offset = off;
    lr->received_ms = ev->received_ms;
    memcpy(lr->key, ev->key, KEYHASH_LEN);
    lr->data = ev->data;
    lr->len = ev->len;
}

/* Appends the staged records and fdatasyncs them, timing the sync. Returns a log status. */
int commit_writer_write_log(commit_t *c, size_t nrec, batch_out_t *bo)
{
    int lrc = log_append(c->log, c->recs, nrec);
    if (lrc == LOG_OK) {
        double t0 = clk_mono_msf();
        lrc = log_sync(c->log);
        bo->fsync_ms = clk_mono_msf() - t0;
        bo->synced = true;
    }
    return lrc;
}

/*
 * The size bound evicted keys the age bound would still have kept: the window
 * is shorter than configured. Operators must hear it (at most once a minute),
 * not only see it in /stats.
 */
static void writer_warn_short_window(commit_t *c, uint64_t evicted, int64_t oldest_ms)
{
    int64_t t = clk_mono_ms();
    if (c->last_short_window_ms != 0 && t - c->last_short_window_ms < SHORT_WINDOW_WARN_MS)
        return;
    c->last_short_window_ms = t;
    int64_t effective = oldest_ms > 0 ? clk_wall_ms() - oldest_ms : 0;
    commit_notify(
        c, 1,
        "--max-keys %llu evicted %llu keys younger than --window: the effective window is "
        "%llds, not %llds; raise --max-keys or expect retries older than that to be "
        "accepted again",
        (unsigned long long)c->opts.max_keys, (unsigned long long)evicted,
        (long long)(effective / 1000), (long long)(c->opts.window_ms / 1000));
}

/* Counts one group commit in c->stats; called with mu held. */
static void writer_count(commit_t *c, int status, const batch_out_t *bo, size_t nevents,
                         size_t nreqs)
{
    c->stats.batches++;
    if (status != COMMIT_OK)
        c->stats.failures++;
    if (status == COMMIT_OK) {
        c->stats.accepted += bo->accepted;
        c->stats.duplicates += bo->duplicates;
        c->stats.batch_events += nevents;
        c->stats.last_batch_events = nevents;
        c->stats.last_batch_requests = nreqs;
        if (nevents > c->stats.max_batch_events)
            c->stats.max_batch_events = nevents;
        histogram_observe(c->opts.batch_events, (double)nevents);
        if (bo->synced) {
            c->stats.fsyncs++;
            c->stats.fsync_ms_last = bo->fsync_ms;
            c->stats.fsync_ms_total += bo->fsync_ms;
            if (bo->fsync_ms > c->stats.fsync_ms_max)
                c->stats.fsync_ms_max = bo->fsync_ms;
            histogram_observe(c->opts.fsync_seconds, bo->fsync_ms / 1000.0);
        }
    }
}

static void writer_process(commit_t *c, commit_req_t *batch, size_t nevents, size_t nreqs)
{
    batch_out_t bo = {0};
    int status = COMMIT_UNAVAILABLE, store_rc = STORE_OK;

    if (c->failed && clk_mono_ms() - c->last_recover_ms >= RECOVER_EVERY_MS)
        commit_recover(c, false);
    if (!c->failed) {
        int ar = c->mode->apply(c, batch, nevents, &bo, &store_rc);
        if (ar == APPLY_OK) {
            status = COMMIT_OK;
            c->view_evicted_age += bo.evicted_age; /* in the stats refreshed below */
            c->view_evicted_size += bo.evicted_size;
        } else {
            commit_notify(c, 0, "group commit of %zu events failed: %s; re-establishing storage",
                          nevents,
                          store_rc != STORE_OK ? store_strerror(store_rc)
                                               : strerror(c->log ? log_errno(c->log) : EIO));
            commit_recover(c, false);
        }
    }
    commit_refresh_stats(c);
    if (status == COMMIT_OK && c->mode->acked)
        c->mode->acked(c);
    pthread_mutex_lock(&c->mu);
    writer_count(c, status, &bo, nevents, nreqs);
    int64_t oldest_ms = c->stats.window.oldest_received_ms;
    pthread_mutex_unlock(&c->mu);
    if (status == COMMIT_OK && bo.evicted_size > 0)
        writer_warn_short_window(c, bo.evicted_size, oldest_ms);
    if (status == COMMIT_OK && bo.duplicates > 0)
        commit_reach_count_ages(c, batch);

    for (commit_req_t *q = batch, *next; q; q = next) {
        next = q->next; /* done() may free q */
        q->next = NULL;
        q->status = status;
        q->done(q, q->arg);
    }
}

/* What the writer does between batches and while idle. */
static void writer_housekeeping(commit_t *c)
{
    if (c->failed && clk_mono_ms() - c->last_recover_ms >= RECOVER_EVERY_MS) {
        commit_recover(c, false);
        commit_refresh_stats(c);
    }
    if (c->mode->tick)
        c->mode->tick(c); /* rate-limited inside */
    commit_retain_run(c); /* rate-limited inside */
    commit_reach_judge(c);
}

/* Called with mu held; returns with it held when there is work or the writer is closing. */
static void writer_wait(commit_t *c)
{
    while (!c->head && !c->closing) {
        commit_lookup_answer(c);
        commit_watch_fire(c, false);
        if (c->head || c->closing)
            break;
        /*
         * Sleep until work, a finished checkpoint, the next watch deadline,
         * (storage failed) the next retry, (keys pending) the next checkpoint,
         * or (a retention bound is set) the next retention pass: age-bound
         * retention must run while no events arrive too.
         */
        int64_t wake = c->failed ? c->last_recover_ms + RECOVER_EVERY_MS : commit_retain_due(c);
        int64_t due = c->mode->due ? c->mode->due(c) : INT64_MAX;
        if (due < wake)
            wake = due; /* an idle server checkpoints too */
        int64_t back = commit_reach_wake(c);
        if (back < wake)
            wake = back; /* the window may be back above its floor: say so */
        for (watch_t *w = c->watches; w; w = w->next)
            if (w->deadline_ms < wake)
                wake = w->deadline_ms;
        if (due != INT64_MIN) {
            if (wake == INT64_MAX) {
                pthread_cond_wait(&c->cv, &c->mu);
            } else {
                struct timespec ts = {.tv_sec = wake / 1000, .tv_nsec = (wake % 1000) * 1000000};
                pthread_cond_timedwait(&c->cv, &c->mu, &ts);
            }
        }
        if (!c->head && !c->closing) {
            pthread_mutex_unlock(&c->mu);
            writer_housekeeping(c);
            pthread_mutex_lock(&c->mu);
        }
    }
}

static void *writer_thread(void *arg)
{
    commit_t *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        writer_wait(c);
        if (!c->head)
            break;
        /* Take every waiting request, up to the batch cap (at least one). */
        commit_req_t *batch = c->head, *last = c->head;
        size_t nevents = last->n, nreqs = 1;
        uint64_t nbytes = last->bytes;
        while (last->next && nevents + last->next->n <= c->opts.max_batch_events) {
            last = last->next;
            nevents += last->n;
            nbytes += last->bytes;
            nreqs++;
        }
        c->head = last->next;
        if (!c->head)
            c->tail = NULL;
        last->next = NULL;
        c->queue_events -= nevents;
        pthread_mutex_unlock(&c->mu);

        if (c->mode->before_batch)
            c->mode->before_batch(c);
        writer_process(c, batch, nevents, nreqs);
        /* Only now, with every request of the batch answered (and its memory freed by its
         * submitter), do its bytes stop counting against the bound. */
        atomic_fetch_sub_explicit(&c->queue_bytes, nbytes, memory_order_relaxed);
        writer_housekeeping(c);
        if (c->mode->after_batch)
            c->mode->after_batch(c);
        pthread_mutex_lock(&c->mu);
        commit_lookup_answer(c); /* between two group commits, so ingest waits at most for these */
        commit_watch_fire(c, false);
    }
    /* Those queued before closing: the view is still open. */
    commit_lookup_answer(c);
    commit_watch_fire(c, true); /* closing: every long-poll answers now */
    pthread_mutex_unlock(&c->mu);
    if (c->mode->drain)
        c->mode->drain(c);
    return NULL;
}

int commit_writer_start(commit_t *c, char *errbuf, size_t errlen)
{
    if (pthread_create(&c->thread, NULL, writer_thread, c) != 0) {
        errbuf_printf(errbuf, errlen, "starting the writer thread: %s", strerror(errno));
        return -1;
    }
    c->thread_started = true;
    return 0;
}
