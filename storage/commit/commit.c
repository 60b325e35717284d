/*
 * commit.c: group commit, its public API (commit.h): open, submit, stats,
 * watch, close; and the helpers every storage/commit*.c file shares.
 *
 * The group commit is split by concept around one private header,
 * commit/internal.h (struct commit, one section per file):
 *   commit/writer.c     the writer thread: queue, group commit, housekeeping
 *   commit/view.c       the writer's read view of the window (LMDB mode)
 *   commit/checkpoint.c the checkpointer thread, writing the view into LMDB
 *   commit/recover.c    opening from disk at start and after a failure: replay
 *   commit/lmdb.c       LMDB mode: the operations (commit_mode_t) wiring those
 *   commit/memory.c     memory mode: a bounded-memory filter instead of LMDB
 *   commit/files.c      DIR/secret, DIR/store/ACKED, DIR/store/UNSYNCED
 * The eviction rule is window.c's; the store, log and pending keys are
 * store.c, log.c and pending.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "storage/commit/internal.h"
#include "storage/datadir.h"
#include "storage/fsutil.h"

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

/* Room for n sources in src_copy; false when out of memory (it stays as it was). Under mu. */
static bool src_copy_room(commit_t *c, size_t n)
{
    if (n <= c->src_copy_cap)
        return true;
    window_source_t *p = realloc(c->src_copy, n * sizeof(*p));
    if (!p)
        return false;
    c->src_copy = p;
    c->src_copy_cap = n;
    return true;
}

/* Under mu: each source's part of the window (window_engine_tally_sources) into src_copy. */
static void copy_sources(commit_t *c)
{
    if (c->engine && src_copy_room(c, window_engine_sources_room(c->engine)))
        c->src_copy_n = window_engine_tally_sources(c->engine, c->src_copy);
}

void commit_refresh_stats(commit_t *c)
{
    log_info_t li = {0};
    commit_window_t w = {0};
    if (c->log) {
        log_get_info(c->log, &li);
        c->mode->window(c, &li, &w);
    }
    /* The engine's part (its generations, seals, merges, repairs, dropped keys; the young
     * store is the checkpointer's to write meanwhile, so it is skipped), then the writer's:
     * the keys it holds in memory and evicted itself. While storage is re-established (no
     * engine), the window as last seen. Only this thread writes c->stats.window (and
     * commit_reach_judge, on it too), so it reads it without mu. */
    window_stats_t ws = c->stats.window;
    if (c->engine) {
        bool below_floor = ws.below_floor;
        window_engine_stats(c->engine, true, &ws);
        ws.below_floor = below_floor;
        ws.evicted_age += c->view_evicted_age;
        ws.evicted_size += c->view_evicted_size;
    }
    ws.window_ms = c->opts.window_ms;
    ws.max_keys = c->opts.max_keys;
    ws.floor_ms = c->opts.window_floor_ms;
    if (w.have_keys) {
        ws.keys = w.keys;
        ws.oldest_received_ms = w.oldest_received_ms;
    }
    pthread_mutex_lock(&c->mu);
    c->stats.window = ws;
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
    c->stats.carried = c->carried;
    if (c->reader)
        copy_sources(c);
    pthread_mutex_unlock(&c->mu);
}

size_t commit_sources(commit_t *c, window_source_t *out, size_t max)
{
    pthread_mutex_lock(&c->mu);
    size_t n = c->src_copy_n;
    if (out && max > 0 && n > 0)
        memcpy(out, c->src_copy, (n < max ? n : max) * sizeof(*out));
    pthread_mutex_unlock(&c->mu);
    return n;
}

/*
 * Calls the watches whose offset the committed offset has passed, or whose
 * deadline is reached (every one when `all`). Called with mu held; releases
 * it around the callbacks.
 */
void commit_watch_fire(commit_t *c, bool all)
{
    int64_t now = clk_mono_ms();
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

/* A commit_t with its defaults, lock and condition variables; NULL without memory. */
log_options_t commit_log_options(const commit_t *c, uint64_t durable_offset)
{
    return (log_options_t){.segment_bytes = c->opts.segment_bytes,
                           .durable_offset = durable_offset,
                           .discard = c->discard,
                           .discard_from = c->discard_from};
}

static commit_t *open_alloc(const commit_options_t *opts)
{
    commit_t *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->mode = &commit_lmdb_mode; /* unless opts->memory_filter (commit_open) */
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
    pthread_cond_init(&c->probe_cv, NULL);
    pthread_cond_init(&c->lookup_cv, NULL);
    c->data_dir = strdup(opts->data_dir);
    c->log_dir = c->data_dir ? datadir_in(c->data_dir, DATADIR_LOG) : NULL;
    c->store_dir = opts->store_dir ? strdup(opts->store_dir)
                   : c->data_dir   ? datadir_in(c->data_dir, DATADIR_STORE)
                                   : NULL;
    c->opts.data_dir = c->data_dir;
    c->sibling_store = opts->store_dir != NULL;
    c->opts.store_dir = c->store_dir;
    c->sources = srcmap_new(opts->max_keys);
    return c;
}

/* Creates the data dir and takes DIR/LOCK (unless the caller holds it). 0 or -1. */
static int open_lock(commit_t *c, char *errbuf, size_t errlen)
{
    int rc = -1;
    if (fsutil_mkdirs(c->data_dir) != 0) {
        errbuf_printf(errbuf, errlen, "creating data dir %s: %s", c->data_dir, strerror(errno));
        return -1;
    }
    char *path = datadir_in(c->data_dir, DATADIR_LOCK);
    if (!path)
        return -1;
    if (c->opts.lock_held) {
        rc = 0;
        goto out;
    }
    c->lockfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (c->lockfd < 0) {
        errbuf_printf(errbuf, errlen, "%s: %s", path, strerror(errno));
        goto out;
    }
    if (flock(c->lockfd, LOCK_EX | LOCK_NB) != 0) {
        errbuf_printf(errbuf, errlen, "data dir %s is in use by another ingestd process",
                      c->data_dir);
        goto out;
    }
    rc = 0;
out:
    free(path);
    return rc;
}

int commit_open(const commit_options_t *opts, commit_t **out, char *errbuf, size_t errlen)
{
    commit_t *c = NULL;
    int rc = COMMIT_OPEN_FAILED;

    *out = NULL;
    if (!opts || !opts->data_dir || opts->window_ms <= 0 || opts->window_floor_ms < 0) {
        errbuf_printf(errbuf, errlen, "invalid commit options");
        return COMMIT_INVALID;
    }
    if (!(c = open_alloc(opts)))
        return COMMIT_NOMEM;
    if (!c->data_dir || !c->log_dir || !c->store_dir || !c->sources) {
        rc = COMMIT_NOMEM;
        goto fail;
    }
    if (opts->memory_filter) {
        if (commit_memory_init(c, opts->memory_filter, errbuf, errlen) != 0) {
            rc = COMMIT_INVALID;
            goto fail;
        }
        c->opts.memory_filter = NULL; /* borrowed; the parsed spec is what counts from here */
    }
    if (open_lock(c, errbuf, errlen) != 0 || commit_recover_open_storage(c, errbuf, errlen) != 0)
        goto fail;
    commit_refresh_stats(c);
    c->last_reader_check = clk_mono_ms();
    if (c->mode->start && c->mode->start(c, errbuf, errlen) != 0)
        goto fail;
    if (commit_writer_start(c, errbuf, errlen) != 0)
        goto fail;
    *out = c;
    return COMMIT_OK;
fail:
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
    out->window.merges = commit_merge_count(c);
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
    commit_merge_stop(c); /* after the engine, which hands its set back to it */
    if (c->lockfd >= 0)
        close(c->lockfd); /* releases the flock */
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    pthread_cond_destroy(&c->ckpt_cv);
    pthread_cond_destroy(&c->probe_cv);
    pthread_cond_destroy(&c->lookup_cv);
    free(c->recs);
    free(c->look_state);
    free(c->look_keys);
    free(c->look_event);
    free(c->look_found);
    free(c->look_first);
    free(c->look_gen);
    srcmap_free(c->sources);
    free(c->src_copy);
    free(c->data_dir);
    free(c->log_dir);
    free(c->store_dir);
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
    case COMMIT_UNSUPPORTED:
        return "not supported in memory mode";
    default:
        return "unknown commit error";
    }
}
