/*
 * commit/memory.c: memory mode (--store memory:SPEC): the group commit
 * de-duplicates with a bounded-memory filter (storage/memfilter/) instead of
 * LMDB, behind the same operations as LMDB mode (commit_mode_t).
 *
 * DESIGN. The log stays the source of truth and stays durable as ever; the
 * filter is only ever rebuilt from it: at every open, start or recovery, a
 * fresh filter learns every retained record's key again. That is also what
 * makes a failed batch's keys, recorded in the filter as the batch was
 * built, forgotten. No checkpointer, no ACKED file: what the log holds
 * durably is what was acknowledged.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "storage/commit/internal.h"
#include "storage/datadir.h"
#include "storage/fsutil.h"

/*
 * Parses opts->memory_filter and chooses memory mode. Called once, by
 * commit_open, before anything is opened.
 */
int commit_memory_init(commit_t *c, const char *spec, char *errbuf, size_t errlen)
{
    char ferr[256];
    if (filter_parse_spec(spec, &c->fspec, ferr, sizeof(ferr)) != FILTER_OK) {
        errbuf_printf(errbuf, errlen, "--store memory:%s: %s", spec, ferr);
        return -1;
    }
    c->mode = &commit_memory_mode;
    c->stats.memory_store = true;
    filter_spec_format(&c->fspec, c->stats.filter_spec, sizeof(c->stats.filter_spec));
    return 0;
}

/*
 * Memory mode: the log, and a fresh filter that learns every retained
 * record's key again. Rebuilding at every open (start and recovery) is what
 * makes a failed batch's keys, recorded as the batch was built, forgotten.
 */
static int memory_open(commit_t *c, char *errbuf, size_t errlen)
{
    char *logdir = datadir_in(c->data_dir, DATADIR_LOG);
    log_reader_t *r = NULL;
    uint8_t fsecret[16];
    log_info_t li;
    int rc = -1, lrc;

    if (!logdir)
        goto out;
    log_options_t lo = commit_log_options(c, 0);
    if ((lrc = log_open(logdir, &lo, &c->log)) != LOG_OK) {
        errbuf_printf(errbuf, errlen, "opening log %s: %s", logdir, log_strerror(lrc));
        goto out;
    }
    if (commit_files_load_secret(c, NULL, errbuf, errlen) != 0)
        goto out;
    /* The filter's own secret, derived: the data dir's secret itself never leaves keyhash. */
    keyhash_siphash128(c->secret, "ingestd filter", 14, fsecret);
    if ((lrc = filter_new(&c->fspec, fsecret, &c->filter)) != FILTER_OK) {
        errbuf_printf(errbuf, errlen, "creating the filter: %s", filter_strerror(lrc));
        goto out;
    }
    pthread_mutex_lock(&c->mu);
    c->stats.filter_bits = filter_memory_bits(c->filter);
    c->stats.filter_fpr = filter_asymptotic_fpr(c->filter);
    pthread_mutex_unlock(&c->mu);
    log_get_info(c->log, &li);
    if (commit_files_open_tagged(c, li.next_offset, errbuf, errlen) != 0)
        goto out;
    if ((lrc = log_reader_open(logdir, li.first_offset, &r)) != LOG_OK) {
        errbuf_printf(errbuf, errlen, "reading the log: %s", log_strerror(lrc));
        goto out;
    }
    log_record_t rec;
    uint64_t n = 0;
    while ((lrc = log_reader_next(r, li.next_offset, &rec)) == LOG_OK) {
        commit_files_retag(c, &rec);
        filter_insert_if_absent(c->filter, rec.key);
        n++;
    }
    if (lrc != LOG_END) {
        errbuf_printf(errbuf, errlen, "reading the log at offset %llu: %s",
                      (unsigned long long)log_reader_position(r), log_strerror(lrc));
        goto out;
    }
    commit_files_report_retag(c);
    pthread_mutex_lock(&c->mu);
    c->stats.replayed_at_open += n;
    pthread_mutex_unlock(&c->mu);
    if ((lrc = log_sync(c->log)) != LOG_OK || fsutil_sync_dir(c->data_dir) != 0 ||
        commit_recover_probe_write(logdir) != 0) {
        errbuf_printf(errbuf, errlen, "writing to %s: %s", c->data_dir, strerror(errno));
        goto out;
    }
    pthread_mutex_lock(&c->mu);
    c->store_durable = LOG_RETAIN_UNBOUNDED; /* nothing to apply: the filter relearns the log */
    pthread_mutex_unlock(&c->mu);
    c->discard = false;
    rc = 0;
out:
    log_reader_close(r);
    if (rc != 0)
        commit_recover_close_storage(c);
    free(logdir);
    return rc;
}

static void memory_close(commit_t *c)
{
    filter_free(c->filter);
    c->filter = NULL;
}

/*
 * Memory mode's batch: the filter answers each key (and records it), the
 * accepted events go to the log in one append and one fsync. On failure the
 * log is rolled back and recovery rebuilds the filter from the log.
 */
static int memory_apply(commit_t *c, commit_req_t *batch, size_t nevents, batch_out_t *bo,
                        int *store_rc)
{
    log_info_t li;
    size_t nrec = 0;

    (void)store_rc; /* no store */
    memset(bo, 0, sizeof(*bo));
    if (commit_writer_reserve(c, nevents) != 0)
        return APPLY_FAILED;
    log_get_info(c->log, &li);
    for (commit_req_t *q = batch; q; q = q->next) {
        for (size_t i = 0; i < q->n; i++) {
            commit_event_t *ev = &q->events[i];
            if (filter_insert_if_absent(c->filter, ev->key) == FILTER_DUPLICATE) {
                ev->result = COMMIT_DUPLICATE;
                ev->offset = 0;
                ev->first_received_ms = 0; /* a filter keeps no positions: unknown */
                bo->duplicates++;
                continue;
            }
            commit_writer_take(c, ev, li.next_offset + nrec, &nrec);
        }
    }
    if (nrec > 0 && commit_writer_write_log(c, nrec, bo) != LOG_OK) {
        log_rollback(c->log);
        return APPLY_FAILED;
    }
    bo->accepted = nrec;
    return APPLY_OK;
}

/* No LMDB: what the log holds durably is what was acknowledged. */
static void memory_window(commit_t *c, const log_info_t *li, commit_window_t *w)
{
    if (!c->filter)
        return;
    w->have_offsets = true;
    w->committed_offset = li->synced_offset;
    w->window_first_offset = li->first_offset;
}

const commit_mode_t commit_memory_mode = {
    .name = "memory",
    .open = memory_open,
    .close = memory_close,
    .apply = memory_apply,
    .window = memory_window,
};
