/*
 * commit.c: group commit. The writer thread de-duplicates a batch against a
 * read snapshot of LMDB plus the keys accepted since (pending.h), appends it
 * to the log with one fsync, and acknowledges it; the checkpointer thread
 * writes those keys into LMDB every few seconds.
 */
#include "storage/commit_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "storage/filter/filter.h"
#include "storage/fsutil.h"
#include "storage/log.h"
#include "storage/pending.h"
#include "storage/store.h"

int64_t commit_now_ms(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double commit_now_msf(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void commit_errf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    if (!buf || len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

void commit_notify(commit_t *c, int level, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    if (!c->opts.notify)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    c->opts.notify(c->opts.notify_arg, level, msg);
}

void commit_refresh_stats(commit_t *c)
{
    log_info_t li = {0};
    commit_window_t w = {0};
    if (c->log) {
        log_get_info(c->log, &li);
        c->mode->window(c, &li, &w);
    }
    pthread_mutex_lock(&c->mu);
    if (w.have_keys) {
        c->stats.keys = w.keys;
        c->stats.oldest_received_ms = w.oldest_received_ms;
    }
    if (w.have_offsets) {
        c->stats.committed_offset = w.committed_offset;
        c->stats.window_first_offset = w.window_first_offset;
    }
    if (c->log) {
        c->stats.log_first_offset = li.first_offset;
        c->stats.log_next_offset = li.next_offset;
        c->stats.log_bytes = li.bytes;
        c->stats.log_segments = li.segments;
        c->stats.truncated_at_open = li.truncated_bytes;
    }
    c->stats.storage_failed = c->failed;
    pthread_mutex_unlock(&c->mu);
}

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
        double t0 = commit_now_msf();
        lrc = log_sync(c->log);
        bo->fsync_ms = commit_now_msf() - t0;
        bo->synced = true;
    }
    return lrc;
}

/*
 * The size bound evicted keys the age bound would still have kept: the window
 * is shorter than configured. Operators must hear it (at most once a minute),
 * not only see it in /stats.
 */
static void warn_short_window(commit_t *c, uint64_t evicted, int64_t oldest_ms)
{
    int64_t t = commit_now_ms(CLOCK_MONOTONIC);
    if (c->last_short_window_ms != 0 && t - c->last_short_window_ms < SHORT_WINDOW_WARN_MS)
        return;
    c->last_short_window_ms = t;
    int64_t effective = oldest_ms > 0 ? commit_now_ms(CLOCK_REALTIME) - oldest_ms : 0;
    commit_notify(
        c, 1,
        "--max-keys %llu evicted %llu keys younger than --window: the effective window is "
        "%llds, not %llds; raise --max-keys or expect retries older than that to be "
        "accepted again",
        (unsigned long long)c->opts.max_keys, (unsigned long long)evicted,
        (long long)(effective / 1000), (long long)(c->opts.window_ms / 1000));
}

static void process(commit_t *c, commit_req_t *batch, size_t nevents, size_t nreqs)
{
    batch_out_t bo = {0};
    int status = COMMIT_UNAVAILABLE, store_rc = STORE_OK;

    if (c->failed && commit_now_ms(CLOCK_MONOTONIC) - c->last_recover_ms >= RECOVER_EVERY_MS)
        commit_recover(c, false);
    if (!c->failed) {
        int ar = c->mode->apply(c, batch, nevents, &bo, &store_rc);
        if (ar == APPLY_OK) {
            status = COMMIT_OK;
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
    c->stats.batches++;
    if (status != COMMIT_OK)
        c->stats.failures++;
    if (status == COMMIT_OK) {
        c->stats.accepted += bo.accepted;
        c->stats.duplicates += bo.duplicates;
        c->stats.batch_events += nevents;
        c->stats.last_batch_events = nevents;
        c->stats.last_batch_requests = nreqs;
        if (nevents > c->stats.max_batch_events)
            c->stats.max_batch_events = nevents;
        c->stats.evicted_age += bo.evicted_age;
        c->stats.evicted_size += bo.evicted_size;
        if (bo.synced) {
            c->stats.fsyncs++;
            c->stats.fsync_ms_last = bo.fsync_ms;
            c->stats.fsync_ms_total += bo.fsync_ms;
            if (bo.fsync_ms > c->stats.fsync_ms_max)
                c->stats.fsync_ms_max = bo.fsync_ms;
        }
    }
    int64_t oldest_ms = c->stats.oldest_received_ms;
    pthread_mutex_unlock(&c->mu);
    if (status == COMMIT_OK && bo.evicted_size > 0)
        warn_short_window(c, bo.evicted_size, oldest_ms);

    for (commit_req_t *q = batch, *next; q; q = next) {
        next = q->next; /* done() may free q */
        q->next = NULL;
        q->status = status;
        q->done(q, q->arg);
    }
}

/*
 * Calls the watches whose offset the committed offset has passed, or whose
 * deadline is reached (every one when `all`). Called with mu held; releases
 * it around the callbacks.
 */
static void fire_watches(commit_t *c, bool all)
{
    int64_t now = commit_now_ms(CLOCK_MONOTONIC);
    watch_t *fire = NULL, **pp = &c->watches;
    while (*pp) {
        watch_t *w = *pp;
        if (all || c->stats.committed_offset > w->offset || now >= w->deadline_ms) {
            *pp = w->next;
            w->next = fire;
            fire = w;
        } else {
            pp = &w->next;
        }
    }
    if (!fire)
        return;
    pthread_mutex_unlock(&c->mu);
    while (fire) {
        watch_t *next = fire->next;
        fire->fn(fire->arg);
        free(fire);
        fire = next;
    }
    pthread_mutex_lock(&c->mu);
}

/*
 * Retention, at most once a second: deletes closed segments past the age or
 * size bound, and warns when they held records still inside the dedupe
 * window (their keys are still remembered, but `rebuild` could not restore
 * them).
 */
static void maybe_retain(commit_t *c)
{
    log_retain_result_t res;
    if (!c->log || (c->opts.log_retention_ms <= 0 && c->opts.log_max_bytes == 0))
        return;
    int64_t t = commit_now_ms(CLOCK_MONOTONIC);
    if (t - c->last_retain_ms < RETAIN_EVERY_MS)
        return;
    c->last_retain_ms = t;
    int rc = log_retain(c->log, commit_now_ms(CLOCK_REALTIME), c->opts.log_retention_ms,
                        c->opts.log_max_bytes, &res);
    if (rc != LOG_OK)
        commit_notify(c, 1, "log retention: %s (%s)", log_strerror(rc),
                      strerror(log_errno(c->log)));
    if (res.segments == 0)
        return;
    pthread_mutex_lock(&c->mu);
    /* Of the records deleted now, [first_offset - records, first_offset), those at or past
     * the window's oldest key. */
    uint64_t wfirst = c->stats.window_first_offset;
    uint64_t from = res.first_offset - res.records;
    if (wfirst > from)
        from = wfirst;
    uint64_t in_window = res.first_offset > from ? res.first_offset - from : 0;
    c->stats.retention_segments += res.segments;
    c->stats.retention_records += res.records;
    c->stats.retention_window_records += in_window;
    pthread_mutex_unlock(&c->mu);
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

/* What the writer does between batches and while idle. */
static void housekeeping(commit_t *c)
{
    if (c->failed && commit_now_ms(CLOCK_MONOTONIC) - c->last_recover_ms >= RECOVER_EVERY_MS) {
        commit_recover(c, false);
        commit_refresh_stats(c);
    }
    if (c->mode->tick)
        c->mode->tick(c); /* rate-limited inside */
    maybe_retain(c);      /* rate-limited inside */
}

/* Called with mu held; returns with it held when there is work or the writer is closing. */
static void wait_for_work(commit_t *c)
{
    while (!c->head && !c->closing) {
        fire_watches(c, false);
        if (c->head || c->closing)
            break;
        /*
         * Sleep until work, a finished checkpoint, the next watch deadline,
         * (storage failed) the next retry, (keys pending) the next checkpoint,
         * or (a retention bound is set) the next retention pass: age-bound
         * retention must run while no events arrive too.
         */
        int64_t wake = INT64_MAX;
        if (c->failed)
            wake = c->last_recover_ms + RECOVER_EVERY_MS;
        else if (c->opts.log_retention_ms > 0 || c->opts.log_max_bytes > 0)
            wake = c->last_retain_ms + RETAIN_EVERY_MS;
        int64_t due = c->mode->due ? c->mode->due(c) : INT64_MAX;
        if (due < wake)
            wake = due; /* an idle server checkpoints too */
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
            housekeeping(c);
            pthread_mutex_lock(&c->mu);
        }
    }
}

static void *writer(void *arg)
{
    commit_t *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        wait_for_work(c);
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
        process(c, batch, nevents, nreqs);
        /* Only now, with every request of the batch answered (and its memory freed by its
         * submitter), do its bytes stop counting against the bound. */
        atomic_fetch_sub_explicit(&c->queue_bytes, nbytes, memory_order_relaxed);
        housekeeping(c);
        if (c->mode->after_batch)
            c->mode->after_batch(c);
        pthread_mutex_lock(&c->mu);
        fire_watches(c, false);
    }
    fire_watches(c, true); /* closing: every long-poll answers now */
    pthread_mutex_unlock(&c->mu);
    if (c->mode->drain)
        c->mode->drain(c);
    return NULL;
}

int commit_open(const commit_options_t *opts, commit_t **out, char *errbuf, size_t errlen)
{
    commit_t *c = NULL;
    char *path = NULL;
    int rc = COMMIT_OPEN_FAILED;

    *out = NULL;
    if (!opts || !opts->data_dir || opts->window_ms <= 0) {
        commit_errf(errbuf, errlen, "invalid commit options");
        return COMMIT_INVALID;
    }
    c = calloc(1, sizeof(*c));
    if (!c)
        return COMMIT_NOMEM;
    c->mode = &commit_lmdb_mode; /* unless opts->memory_filter, below */
    atomic_init(&c->queue_bytes, 0);
    c->ckpt_chunk = CHUNK_MAX;
    c->lockfd = -1;
    c->acked_fd = -1;
    c->opts = *opts;
    if (c->opts.max_batch_events == 0)
        c->opts.max_batch_events = DEFAULT_MAX_BATCH;
    if (c->opts.segment_bytes == 0)
        c->opts.segment_bytes = 64ull << 20;
    pthread_mutex_init(&c->mu, NULL);
    /* Watch deadlines are monotonic: the condition variable waits on that clock. */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&c->ckpt_cv, NULL);
    c->data_dir = strdup(opts->data_dir);
    c->log_dir = c->data_dir ? fsutil_join(c->data_dir, "log") : NULL;
    if (!c->data_dir || !c->log_dir) {
        rc = COMMIT_NOMEM;
        goto fail;
    }
    c->opts.data_dir = c->data_dir;
    if (opts->memory_filter) {
        if (commit_memory_init(c, opts->memory_filter, errbuf, errlen) != 0) {
            rc = COMMIT_INVALID;
            goto fail;
        }
        c->opts.memory_filter = NULL; /* borrowed; the parsed spec is what counts from here */
    }
    if (fsutil_mkdirs(c->data_dir) != 0) {
        commit_errf(errbuf, errlen, "creating data dir %s: %s", c->data_dir, strerror(errno));
        goto fail;
    }
    path = fsutil_join(c->data_dir, "LOCK");
    if (!path)
        goto fail;
    if (opts->lock_held)
        goto locked;
    c->lockfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (c->lockfd < 0) {
        commit_errf(errbuf, errlen, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (flock(c->lockfd, LOCK_EX | LOCK_NB) != 0) {
        commit_errf(errbuf, errlen, "data dir %s is in use by another ingestd process",
                    c->data_dir);
        goto fail;
    }
locked:
    if (commit_recover_open_storage(c, errbuf, errlen) != 0)
        goto fail;
    commit_refresh_stats(c);
    c->last_reader_check = commit_now_ms(CLOCK_MONOTONIC);
    if (c->mode->start && c->mode->start(c, errbuf, errlen) != 0)
        goto fail;
    if (pthread_create(&c->thread, NULL, writer, c) != 0) {
        commit_errf(errbuf, errlen, "starting the writer thread: %s", strerror(errno));
        goto fail;
    }
    c->thread_started = true;
    free(path);
    *out = c;
    return COMMIT_OK;
fail:
    free(path);
    commit_close(c);
    return rc;
}

const uint8_t *commit_secret(const commit_t *c)
{
    return c->secret;
}

int commit_submit(commit_t *c, commit_req_t *req)
{
    if (!req || !req->done)
        return COMMIT_INVALID;
    req->next = NULL;
    req->bytes = 0;
    for (size_t i = 0; i < req->n; i++)
        req->bytes += req->events[i].len;
    pthread_mutex_lock(&c->mu);
    if (c->closing) {
        pthread_mutex_unlock(&c->mu);
        return COMMIT_CLOSED;
    }
    uint64_t queued = atomic_load_explicit(&c->queue_bytes, memory_order_relaxed);
    uint64_t max = c->opts.queue_max_bytes;
    /* An empty queue takes anything, so a request larger than the bound is not refused forever. */
    if (max > 0 && queued > 0 && (queued >= max || req->bytes > max - queued)) {
        c->busy_requests++;
        c->busy_events += req->n;
        pthread_mutex_unlock(&c->mu);
        return COMMIT_BUSY;
    }
    atomic_fetch_add_explicit(&c->queue_bytes, req->bytes, memory_order_relaxed);
    if (c->tail)
        c->tail->next = req;
    else
        c->head = req;
    c->tail = req;
    c->queue_events += req->n;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return COMMIT_OK;
}

void commit_get_stats(commit_t *c, commit_stats_t *out)
{
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    out->queue_events = c->queue_events;
    out->queue_bytes = atomic_load_explicit(&c->queue_bytes, memory_order_relaxed);
    out->queue_max_bytes = c->opts.queue_max_bytes;
    out->busy_requests = c->busy_requests;
    out->busy_events = c->busy_events;
    pthread_mutex_unlock(&c->mu);
}

bool commit_busy(commit_t *c)
{
    uint64_t max = c->opts.queue_max_bytes;
    return max > 0 && atomic_load_explicit(&c->queue_bytes, memory_order_relaxed) >= max;
}

void commit_close(commit_t *c)
{
    if (!c)
        return;
    if (c->thread_started) {
        pthread_mutex_lock(&c->mu);
        c->closing = true;
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->thread, NULL);
    }
    if (c->mode->stop)
        c->mode->stop(c);
    commit_recover_close_storage(c);
    if (c->lockfd >= 0)
        close(c->lockfd); /* releases the flock */
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    pthread_cond_destroy(&c->ckpt_cv);
    free(c->recs);
    free(c->data_dir);
    free(c->log_dir);
    free(c);
}

const char *commit_log_dir(const commit_t *c)
{
    return c->log_dir;
}

uint64_t commit_committed_offset(commit_t *c)
{
    pthread_mutex_lock(&c->mu);
    uint64_t off = c->stats.committed_offset;
    pthread_mutex_unlock(&c->mu);
    return off;
}

int commit_watch(commit_t *c, uint64_t offset, int64_t deadline_ms, commit_watch_fn fn, void *arg)
{
    pthread_mutex_lock(&c->mu);
    if (c->closing) {
        pthread_mutex_unlock(&c->mu);
        return COMMIT_CLOSED;
    }
    if (c->stats.committed_offset > offset) {
        pthread_mutex_unlock(&c->mu);
        fn(arg);
        return COMMIT_OK;
    }
    watch_t *w = malloc(sizeof(*w));
    if (!w) {
        pthread_mutex_unlock(&c->mu);
        return COMMIT_NOMEM;
    }
    *w = (watch_t){.offset = offset, .deadline_ms = deadline_ms, .fn = fn, .arg = arg};
    w->next = c->watches;
    c->watches = w;
    pthread_cond_signal(&c->cv); /* the writer may need to wake earlier now */
    pthread_mutex_unlock(&c->mu);
    return COMMIT_OK;
}

const char *commit_strerror(int status)
{
    switch (status) {
    case COMMIT_OK:
        return "ok";
    case COMMIT_UNAVAILABLE:
        return "storage unavailable";
    case COMMIT_CLOSED:
        return "shutting down";
    case COMMIT_NOMEM:
        return "out of memory";
    case COMMIT_INVALID:
        return "invalid argument";
    case COMMIT_OPEN_FAILED:
        return "could not open the data dir";
    case COMMIT_BUSY:
        return "too many events waiting to be written";
    default:
        return "unknown commit error";
    }
}
