/*
 * commit/lmdb.c: LMDB mode, the default: the operations (commit_mode_t) that
 * make the group commit de-duplicate against LMDB. They wire together the
 * writer's read view (commit/view.c), its checkpointer thread
 * (commit/checkpoint.c) and the replay from the log (commit/recover.c).
 */
#include "storage/commit/internal.h"

#define READER_CHECK_MS 10000

/* Closes the view and the store (the checkpointer is idle: commit_ckpt_settle). */
static void lmdb_close(commit_t *c)
{
    store_reader_close(c->reader);
    c->reader = NULL;
    c->gview = NULL; /* the engine's */
    commit_view_share_gens(c, false);
    pending_free(c->cur);
    pending_free(c->flight);
    pending_free(c->spare);
    c->cur = c->flight = c->spare = NULL;
    commit_files_close_acked(c);
    pthread_mutex_lock(&c->mu);
    window_engine_t *e = c->engine;
    c->engine = NULL;
    pthread_mutex_unlock(&c->mu);
    if (e)
        window_engine_close(e); /* the store with it; not under mu: it waits for a merge */
    else
        store_close(c->store); /* opened, and the engine not yet */
    c->store = NULL;
    c->gens = NULL;
}

/* The checkpointer (the merger started with the first open, commit/recover.c). */
static int lmdb_start(commit_t *c, char *errbuf, size_t errlen)
{
    return commit_ckpt_start(c, errbuf, errlen);
}

static void lmdb_stop(commit_t *c)
{
    commit_ckpt_stop(c);
    /* Lazy mode: a synced store needs no rebuild, whatever happens to the machine next. */
    if (c->opts.store_sync == STORE_SYNC_NONE && c->store && !c->failed)
        commit_files_clear_unsynced(c, false);
}

/* The writer's view: exact after every batch, LMDB or not yet. */
static void lmdb_window(commit_t *c, const log_info_t *li, commit_window_t *w)
{
    store_entry_t oldest;
    bool have = false;
    if (!c->reader || c->failed)
        return;
    if (commit_view_oldest(c, &oldest, &have) != STORE_OK)
        have = false;
    w->have_keys = w->have_offsets = true;
    w->keys = c->live;
    w->committed_offset = li->synced_offset;
    w->window_first_offset = have ? oldest.offset : li->synced_offset;
    w->oldest_received_ms = have ? oldest.received_ms : 0;
    genset_totals_t t = {0};
    if (c->gview)
        genset_view_totals(c->gview, &t);
    if (t.keys > 0) {
        /* The oldest generation holds the oldest keys: the window starts there. */
        w->keys += t.keys;
        w->window_first_offset = t.oldest_offset;
        w->oldest_received_ms = t.oldest_received_ms;
    }
}

/* Tells readers in other processes how far the log is acknowledged (DIR/store/ACKED). */
static void lmdb_acked(commit_t *c)
{
    pthread_mutex_lock(&c->mu);
    uint64_t acked = c->stats.committed_offset;
    pthread_mutex_unlock(&c->mu);
    commit_files_write_acked(c, acked);
}

static void lmdb_tick(commit_t *c)
{
    commit_ckpt_hand_off(c, false); /* rate-limited inside */
}

/* Readers in processes that died (e.g. a killed `log cat`) would pin old pages. */
static void lmdb_check_readers(commit_t *c)
{
    int64_t t = clk_mono_ms();
    if (c->store && t - c->last_reader_check > READER_CHECK_MS) {
        int cleared;
        store_reader_check(c->store, &cleared);
        c->last_reader_check = t;
    }
}

const commit_mode_t commit_lmdb_mode = {
    .name = "lmdb",
    .open = commit_recover_open_lmdb,
    .close = lmdb_close,
    .start = lmdb_start,
    .stop = lmdb_stop,
    .apply = commit_view_apply,
    .window = lmdb_window,
    .acked = lmdb_acked,
    .tick = lmdb_tick,
    .due = commit_ckpt_due,
    .before_batch = commit_ckpt_throttle,
    .after_batch = lmdb_check_readers,
    .drain = commit_ckpt_drain,
};
