/*
 * commit/recover.c: recovery, at start and after a failure: store and log are
 * opened from what is on disk and LMDB catches up by replaying the log.
 *
 * DESIGN. The log is the source of truth (docs/design.md, invariant 3), so one
 * path serves the first open and every re-open after a failed batch or
 * checkpoint: never trust what a failed fsync may have left in the page
 * cache (the log is re-opened cutting off everything past its last good
 * sync), finish a checkpoint's evictions cut short by a crash, replay every
 * record past LMDB's applied offset, fsync the log once to prove the disk
 * takes writes, and only then open the writer's view. Lazy mode's machine
 * crash and a store of another format version both start from a fresh store
 * that the replay fills (with its sealed generations, DIR/store/gens: a
 * format 3 store's keys lack the source tag, and the replay gives records
 * from before DIR/TAGGED_FROM theirs, storage/window/retag.h).
 *
 * Functions, in order: the replay (recover_replay_chunk,
 * recover_finish_evictions, recover_gap, recover_replay); the open, in its steps
 * (recover_reset_store, recover_open_store, recover_rebuild_leftovers,
 * recover_report_gens, recover_open_engine, recover_open_log, recover_catch_up,
 * then commit_recover_open_lmdb, LMDB mode's open);
 * commit_recover_open_storage / _close_storage for either mode;
 * commit_recover_probe_write; commit_recover (re-establish after a failure).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "storage/commit/internal.h"
#include "storage/datadir.h"
#include "storage/fsutil.h"
#include "storage/window/seal.h"
#include "storage/window/storeswap.h"

#define REPLAY_CHUNK 10000

/*
 * Replays records into LMDB up to `end`, REPLAY_CHUNK per transaction, from
 * where `r` stands, through the window engine (its young store, its
 * per-source counts and its eviction counts, as a worker's batch). Eviction
 * runs as the records go by, on their own receivedAt, so a key that aged out
 * and was accepted again is remembered from its latest record (store_upsert),
 * as it was while serving.
 */
static int recover_replay_chunk(commit_t *c, log_reader_t *r, uint64_t end, uint64_t *pos, int *lrc)
{
    window_policy_t wp = {.window_ms = c->opts.window_ms, .max_keys = c->opts.max_keys};
    int rc = store_txn_begin(c->store);
    *lrc = LOG_OK;
    if (rc != STORE_OK)
        return rc;
    for (uint64_t n = 0; rc == STORE_OK && n < REPLAY_CHUNK && *pos < end; n++) {
        log_record_t rec;
        *lrc = log_reader_next(r, end, &rec);
        if (*lrc != LOG_OK) {
            window_engine_abort(c->engine);
            return STORE_ERROR;
        }
        commit_files_retag(c, &rec); /* a key from before tags: as a new event's would be */
        bool replaced = false;       /* the key's older entry made way: the source's count stays */
        rc = store_upsert(c->store, rec.key, rec.received_ms, rec.offset, &replaced);
        if (rc == STORE_OK && !replaced)
            rc = window_engine_added(c->engine, rec.key);
        if (rc == STORE_OK)
            rc = window_engine_evict(c->engine, window_replay_record(&wp, rec.received_ms));
        (*pos)++;
    }
    if (rc == STORE_OK)
        rc = store_set_applied(c->store, *pos);
    if (rc == STORE_OK)
        return window_engine_commit(c->engine);
    window_engine_abort(c->engine);
    return rc;
}

/*
 * During a long replay (`ingestd rebuild`, or a start after a long run
 * without checkpoints), seals the young store whenever it holds twice its
 * share, so it never grows with the window; then the window's rule.
 */
static int recover_seal(commit_t *c)
{
    uint64_t young = c->opts.young_keys ? c->opts.young_keys : COMMIT_YOUNG_KEYS;
    /* Drops only after a seal: the replay is not the time to keep the rule otherwise. The
     * writer has no view yet, so the engine recounts the sources and takes its view itself. */
    window_maintain_t m = {.now_ms = clk_wall_ms(), .every_ms = INT64_MAX, .seal_at = 2 * young};
    return c->engine ? window_engine_maintain(c->engine, &m, NULL) : STORE_OK;
}

/*
 * A checkpoint cut short may have deleted keys below its eviction mark ahead
 * of their sequence entries, and not carried the within-budget ones yet
 * (commit/checkpoint.c: ckpt_run). Settles every entry below the mark before
 * the replay (store_settle_evictions): an eviction that landed is finished, a
 * key whose eviction or carry did not land stays, at the young end. So every
 * sequence entry names its key again, the replay's size bound counts keys that
 * exist, and no key a landed transaction kept is lost (a blind eviction below
 * the mark lost the carried keys of a within-budget source).
 */
static int recover_finish_evictions(commit_t *c, uint64_t below, uint64_t *grows)
{
    size_t done = CHUNK_BIG_WINDOW;
    uint64_t kept = 0;
    int rc = STORE_OK, tries = 0;
    while (rc == STORE_OK && done == CHUNK_BIG_WINDOW) {
        uint64_t k = 0;
        if ((rc = store_txn_begin(c->store)) != STORE_OK)
            break;
        rc = store_settle_evictions(c->store, below, CHUNK_BIG_WINDOW, &done, &k);
        if (rc == STORE_OK)
            rc = store_txn_commit(c->store);
        else
            store_txn_abort(c->store);
        kept += rc == STORE_OK ? k : 0;
        if (rc == STORE_FULL && tries++ < MAX_GROW_RETRIES && store_grow(c->store) == STORE_OK) {
            (*grows)++;
            rc = STORE_OK;
            done = CHUNK_BIG_WINDOW; /* again */
        }
    }
    if (rc == STORE_OK && kept > 0)
        commit_notify(c, 2,
                      "a checkpoint cut short had not evicted or carried %llu key(s) yet: they "
                      "stay in the window, at its young end",
                      (unsigned long long)kept);
    return rc;
}

/*
 * The log starts past LMDB's applied offset. A store this open created (none was there: a start
 * after an operator removed it) starts where the log does, as `ingestd rebuild` would: that is
 * recorded first, so a crash before its first checkpoint finds it again. Any other store lacks the
 * keys of the records in between, which retention never deletes (commit/retain.c): someone else
 * did, and only putting them back keeps the window whole, so the start refuses and says so.
 */
static int recover_gap(commit_t *c, store_info_t *si, const log_info_t *li, char *errbuf,
                       size_t errlen)
{
    if (!store_created(c->store)) {
        errbuf_printf(
            errbuf, errlen,
            "LMDB has applied the log up to offset %llu but the log starts at %llu: records "
            "%llu..%llu were deleted before LMDB applied them (by the log retention of an older "
            "release, or by hand), and their keys are in no store. Put those segments back into "
            "the log directory (from a copy or `ingestd backup`) and start again; `ingestd "
            "rebuild --allow-shrink` keeps the sealed generations but forgets the young "
            "store's keys of those records",
            (unsigned long long)si->applied, (unsigned long long)li->first_offset,
            (unsigned long long)si->applied, (unsigned long long)li->first_offset - 1);
        return -1;
    }
    int rc = store_txn_begin(c->store);
    if (rc == STORE_OK)
        rc = store_set_applied(c->store, li->first_offset);
    if (rc == STORE_OK)
        rc = store_txn_commit(c->store);
    else
        store_txn_abort(c->store);
    if (rc != STORE_OK) {
        errbuf_printf(errbuf, errlen, "starting a new store at log offset %llu: %s (%s)",
                      (unsigned long long)li->first_offset, store_strerror(rc),
                      store_detail(c->store));
        return -1;
    }
    si->applied = li->first_offset;
    return 0;
}

/* Applies log records past LMDB's applied offset: the log is the source of truth. */
static int recover_replay(commit_t *c, const char *logdir, uint64_t *replayed, uint64_t *grows,
                          char *errbuf, size_t errlen)
{
    store_info_t si;
    log_info_t li;
    log_reader_t *r = NULL;
    int rc = store_get_info(c->store, &si), lrc = LOG_OK;
    if (rc != STORE_OK) {
        errbuf_printf(errbuf, errlen, "reading the store: %s (%s)", store_strerror(rc),
                      store_detail(c->store));
        return -1;
    }
    log_get_info(c->log, &li);
    if (si.applied > li.next_offset) {
        errbuf_printf(
            errbuf, errlen,
            "the LMDB store has applied log offset %llu but the log ends at %llu: the log "
            "lost acknowledged records; restore the log from a backup, or run `ingestd "
            "rebuild` to accept the loss",
            (unsigned long long)si.applied, (unsigned long long)li.next_offset);
        return -1;
    }
    if (si.applied < li.first_offset && recover_gap(c, &si, &li, errbuf, errlen) != 0)
        return -1;
    if (si.evicting_below > 0 && (rc = recover_finish_evictions(c, si.evicting_below, grows))) {
        errbuf_printf(errbuf, errlen, "finishing a checkpoint's evictions: %s (%s)",
                      store_strerror(rc), store_detail(c->store));
        return -1;
    }
    uint64_t pos = si.applied;
    int tries = 0;
    bool recount = true; /* the per-source counts the replay's size bound keeps */
    while (pos < li.next_offset) {
        uint64_t start = pos;
        if (!r && (lrc = log_reader_open(logdir, pos, &r)) != LOG_OK)
            break;
        if (recount && (rc = store_count_sources(c->store, c->sources)) != STORE_OK)
            break;
        recount = false;
        rc = recover_replay_chunk(c, r, li.next_offset, &pos, &lrc);
        recount = rc != STORE_OK; /* an aborted chunk counted keys it did not keep */
        if (rc == STORE_FULL && tries++ < MAX_GROW_RETRIES && store_grow(c->store) == STORE_OK) {
            (*grows)++;
            log_reader_close(r); /* redo the chunk from its start */
            r = NULL;
            pos = start;
            continue;
        }
        if (rc == STORE_OK)
            rc = recover_seal(c);
        if (rc != STORE_OK)
            break;
        *replayed += pos - start;
        if (c->opts.replay_progress)
            c->opts.replay_progress(c->opts.replay_progress_arg, pos - si.applied,
                                    li.next_offset - si.applied);
    }
    log_reader_close(r);
    if (lrc != LOG_OK) {
        errbuf_printf(errbuf, errlen, "replaying the log at offset %llu: %s",
                      (unsigned long long)pos, log_strerror(lrc == LOG_END ? LOG_CORRUPT : lrc));
        return -1;
    }
    if (rc != STORE_OK) {
        errbuf_printf(errbuf, errlen, "replaying the log into LMDB: %s (%s)", store_strerror(rc),
                      store_detail(c->store));
        return -1;
    }
    return 0;
}

/*
 * Lazy mode: DIR/store/UNSYNCED names this boot before LMDB's first unsynced
 * write. store_open itself writes (a new store's databases), so this comes
 * before it, not just before the replay. Other modes: nothing to do.
 */
static int recover_mark_if_lazy(commit_t *c, const char *marker, char *errbuf, size_t errlen)
{
    if (c->opts.store_sync != STORE_SYNC_NONE)
        return 0;
    return commit_files_mark_unsynced(c, marker, errbuf, errlen);
}

/*
 * Moves the store aside (to *aside, malloc'ed) and opens a fresh one that
 * starts at the log's first retained offset; the replay then fills it.
 *
 * The order is what makes a power loss at any step harmless. The rename and
 * the new directory are made durable together (one fsync of the data dir);
 * lost, the old store and its marker from another boot are still there, and
 * the next start resets again. Then, in lazy mode, the marker naming this
 * boot goes into the new directory, durably, before LMDB writes a byte there:
 * a machine crash from then on leaves a marker from another boot, and the
 * next start resets the fresh store too. Between the two the new directory is
 * empty: the next start creates a store there and replays the whole log into
 * it (a new store over a shortened log starts at its first offset), which is
 * the same rebuild. Writing the marker after the fresh store's first commit,
 * as before, left a window where an unsynced, possibly torn store had no
 * marker and was trusted (or refused) at the next start.
 */
static int recover_reset_store(commit_t *c, const char *path, const char *logdir,
                               const char *marker, char **aside, char *errbuf, size_t errlen)
{
    log_info_t li;
    store_options_t so = {.map_size = c->opts.map_size, .sync = c->opts.store_sync};
    if (log_describe(logdir, &li, NULL) != LOG_OK)
        li.first_offset = 0; /* no log yet */
    size_t n = strlen(path) + 40;
    *aside = malloc(n);
    if (!*aside)
        return -1;
    snprintf(*aside, n, "%s.unsynced-%lld", path, (long long)time(NULL));
    if (rename(path, *aside) != 0 || mkdir(path, 0755) != 0 || fsutil_sync_dir(c->data_dir) != 0) {
        errbuf_printf(errbuf, errlen, "moving the unsynced store aside: %s", strerror(errno));
        return -1;
    }
    if (recover_mark_if_lazy(c, marker, errbuf, errlen) != 0)
        return -1;
    int src = store_open(path, &so, &c->store);
    if (src == STORE_OK)
        src = store_txn_begin(c->store);
    if (src == STORE_OK)
        src = store_set_applied(c->store, li.first_offset);
    if (src == STORE_OK)
        src = store_txn_commit(c->store);
    if (src != STORE_OK) {
        errbuf_printf(errbuf, errlen, "creating a fresh store: %s", store_strerror(src));
        return -1;
    }
    return 0;
}

/*
 * Opens DIR/store: as it is, or, when the machine restarted with it unsynced
 * (lazy mode) or it has another format version, a fresh one with the old
 * one moved aside to *aside (the replay then fills it from the log). In lazy
 * mode the marker is written before LMDB's first write either way.
 * *crashed: the first case.
 */
static int recover_open_store(commit_t *c, const char *path, const char *logdir, const char *marker,
                              int *crashed, char **aside, char *errbuf, size_t errlen)
{
    if (fsutil_mkdir(path) != 0 && errno != EEXIST) {
        errbuf_printf(errbuf, errlen, "creating %s: %s", path, strerror(errno));
        return -1;
    }
    *crashed = commit_files_unsynced_crash(c, marker, errbuf, errlen);
    if (*crashed < 0)
        return -1;
    bool reset = *crashed;
    if (*crashed) {
        commit_notify(c, 1,
                      "the machine restarted while LMDB had unsynced commits (--store-sync lazy): "
                      "rebuilding the store from the log");
    } else {
        store_options_t so = {.map_size = c->opts.map_size, .sync = c->opts.store_sync};
        if (recover_mark_if_lazy(c, marker, errbuf, errlen) != 0)
            return -1;
        int src = store_open(path, &so, &c->store);
        if (src == STORE_VERSION) {
            /* Written by another format version: the log is the truth, rebuild from it. */
            commit_notify(c, 1,
                          "the LMDB store has another format version: rebuilding it from the log");
            reset = c->older_store = true;
        } else if (src != STORE_OK) {
            errbuf_printf(errbuf, errlen, "opening LMDB store %s: %s", path, store_strerror(src));
            return -1;
        }
    }
    if (reset) {
        if (recover_reset_store(c, path, logdir, marker, aside, errbuf, errlen) != 0)
            return -1;
        pthread_mutex_lock(&c->mu);
        c->stats.rebuilt_at_open = true;
        pthread_mutex_unlock(&c->mu);
    }
    /* LMDB never syncs its directory: make the names of its files durable once. */
    if (fsutil_sync_dir(path) != 0) {
        errbuf_printf(errbuf, errlen, "syncing %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/*
 * Removes the DIR/store.rebuild-* an `ingestd rebuild` cut short by a crash left (its new store,
 * or the old one after the swap): never DIR/store, so nothing of the window goes with them, and
 * a failure to remove one does not stop the start (the next rebuild removes it too).
 */
static void recover_rebuild_leftovers(commit_t *c)
{
    if (c->sibling_store)
        return; /* the rebuild's own replay: its store is such a sibling */
    int64_t n = storeswap_leftovers(c->data_dir, 1);
    if (n < 0)
        commit_notify(c, 1, "could not remove a leftover %s/%s* of a rebuild: %s", c->data_dir,
                      DATADIR_REBUILD_PREFIX, strerror(errno));
    else if (n > 0)
        commit_notify(c, 1,
                      "removed %lld leftover %s/%s* director%s of an `ingestd rebuild` cut short "
                      "(the store it was building, or the old one it replaced)",
                      (long long)n, c->data_dir, DATADIR_REBUILD_PREFIX, n == 1 ? "y" : "ies");
}

/* Says what opening the generations repaired (the engine counts it: window_counts_t). */
static void recover_report_gens(commit_t *c, const window_engine_opened_t *o)
{
    const seal_recovery_t *sr = &o->recovery;
    uint64_t cleaned = o->files_cleaned;
    if (cleaned > 0)
        commit_notify(c, 1,
                      "removed %llu generation file(s) a crash left unfinished or covered by a "
                      "finished merge",
                      (unsigned long long)cleaned);
    if (sr->finished && sr->rebased)
        commit_notify(c, 1,
                      "finished a seal a power loss cut short: the store's last commits were lost "
                      "(next sequence %llu, generations end at %llu); moved it on and replaying "
                      "the log: no key of the window is lost",
                      (unsigned long long)sr->lost_from, (unsigned long long)sr->end_seq);
    else if (sr->finished)
        commit_notify(c, 2, "finished a seal a crash cut short (generations end at %llu)",
                      (unsigned long long)sr->end_seq);
    if (o->gens_missing)
        commit_notify(c, 0,
                      "generations: the one holding sequences %llu..%llu is missing (a lost file: "
                      "its keys are forgotten, and retries of their events would be accepted "
                      "again); stop the server and run `ingestd rebuild`, which makes the window "
                      "again from the retained log",
                      (unsigned long long)o->missing.first, (unsigned long long)o->missing.end - 1);
}

/*
 * Opens the window on the young store (storage/window/engine.h, which takes c->store): the
 * sealed generations (DIR/store/gens), cleaned up after a crash mid-merge, a seal cut short
 * between its file and its LMDB transaction finished (before the replay, so the young store
 * it fills holds no key a generation has), the set handed to the merger (started here, the
 * first time) and the store's keys counted into c->sources.
 */
static int recover_open_engine(commit_t *c, const char *storedir, char *errbuf, size_t errlen)
{
    window_engine_options_t wo = {
        .window_ms = c->opts.window_ms,
        .max_keys = c->opts.max_keys, /* --max-keys is per source */
        .young_keys = c->opts.young_keys ? c->opts.young_keys : COMMIT_YOUNG_KEYS,
        .sources = c->sources,
        .counts = &c->window_counts, /* outlive this engine */
    };
    window_engine_opened_t opened;
    window_engine_t *e = NULL;
    if (commit_merge_start(c, errbuf, errlen) != 0)
        return -1;
    wo.merger = c->merger;
    int rc = window_engine_open(c->store, storedir, &wo, &e, &opened);
    if (rc != STORE_OK) {
        c->store = NULL; /* the engine closed it */
        if (opened.gen_rc != GEN_OK)
            errbuf_printf(errbuf, errlen,
                          "opening the sealed generations in %s/%s: %s (run `ingestd "
                          "rebuild`)",
                          storedir, datadir_name(DATADIR_GENS), gen_strerror(opened.gen_rc));
        else
            errbuf_printf(errbuf, errlen,
                          "finishing a seal: %s; the store and its generations are kept as "
                          "they are: free the cause and start again (`ingestd check` says more)",
                          store_strerror(rc));
        return -1;
    }
    pthread_mutex_lock(&c->mu);
    c->engine = e;
    pthread_mutex_unlock(&c->mu);
    c->gens = window_engine_gens(e);
    recover_report_gens(c, &opened);
    return 0;
}

/* Opens the log, never cutting its tail below LMDB's applied offset. */
static int recover_open_log(commit_t *c, const char *logdir, char *errbuf, size_t errlen)
{
    store_info_t si;
    int src = store_get_info(c->store, &si);
    if (src != STORE_OK) {
        errbuf_printf(errbuf, errlen, "reading LMDB store: %s (%s)", store_strerror(src),
                      store_detail(c->store));
        return -1;
    }
    log_options_t lo = commit_log_options(c, si.applied);
    int lrc = log_open(logdir, &lo, &c->log);
    if (lrc != LOG_OK) {
        errbuf_printf(errbuf, errlen, "opening log %s: %s%s", logdir, log_strerror(lrc),
                      lrc == LOG_CORRUPT ? " (run `ingestd check` for details)" : "");
        return -1;
    }
    return 0;
}

/* LMDB catches up from the log, then one fdatasync proves the log can be made durable. */
static int recover_catch_up(commit_t *c, const char *logdir, char *errbuf, size_t errlen)
{
    uint64_t replayed = 0, grows = 0;
    int rc = recover_replay(c, logdir, &replayed, &grows, errbuf, errlen);
    pthread_mutex_lock(&c->mu);
    c->stats.replayed_at_open += replayed;
    c->stats.map_grows += grows;
    pthread_mutex_unlock(&c->mu);
    if (rc != 0)
        return -1;
    int lrc = log_sync(c->log);
    if (lrc != LOG_OK) {
        errbuf_printf(errbuf, errlen, "syncing log %s: %s (%s)", logdir, log_strerror(lrc),
                      strerror(log_errno(c->log)));
        return -1;
    }
    /* What the store has applied now (the whole log), once durable, retention may delete. */
    store_info_t si;
    if ((rc = store_get_info(c->store, &si)) != STORE_OK ||
        (rc = commit_retain_store_durable(c, si.applied)) != STORE_OK) {
        errbuf_printf(errbuf, errlen, "syncing the LMDB store: %s (%s)", store_strerror(rc),
                      store_detail(c->store));
        return -1;
    }
    /* The names of store/ and log/ themselves live in the data dir. */
    if (fsutil_sync_dir(c->data_dir) != 0 || commit_recover_probe_write(logdir) != 0) {
        errbuf_printf(errbuf, errlen, "writing to %s: %s", c->data_dir, strerror(errno));
        return -1;
    }
    return 0;
}

/*
 * Opens store and log from what is on disk, exactly as at start: the log's
 * tail is recovered (never below LMDB's applied offset), then LMDB catches
 * up from the log, then one fdatasync proves the log can be made durable.
 * Used at start and to re-establish the durable state after a failure.
 */
int commit_recover_open_lmdb(commit_t *c, char *errbuf, size_t errlen)
{
    char *path = strdup(c->store_dir);
    char *logdir = datadir_in(c->data_dir, DATADIR_LOG);
    char *marker = commit_files_unsynced_path(c);
    char *aside = NULL;
    int rc = -1, crashed = 0;

    if (!path || !logdir || !marker)
        goto out;
    recover_rebuild_leftovers(c);
    if (recover_open_store(c, path, logdir, marker, &crashed, &aside, errbuf, errlen) != 0 ||
        recover_open_engine(c, path, errbuf, errlen) != 0 ||
        recover_open_log(c, logdir, errbuf, errlen) != 0 ||
        commit_files_load_secret(c, c->store, errbuf, errlen) != 0)
        goto out;
    log_info_t li;
    log_get_info(c->log, &li);
    if (commit_files_open_tagged(c, li.next_offset, errbuf, errlen) != 0 ||
        recover_catch_up(c, logdir, errbuf, errlen) != 0)
        goto out;
    commit_files_report_retag(c);
    log_get_info(c->log, &li);
    commit_files_open_acked(c, path, li.next_offset); /* the replay applied all of it */
    /* A marker left by a lazy run in this boot: once LMDB is synced, it is no longer needed. */
    if (c->opts.store_sync != STORE_SYNC_NONE && !crashed)
        commit_files_clear_unsynced(c, true);
    if (aside && fsutil_rm_tree(aside) != 0)
        commit_notify(c, 1, "could not remove %s: %s", aside, strerror(errno));
    if (commit_view_open(c, errbuf, errlen) != 0)
        goto out;
    c->discard = false;
    rc = 0;
out:
    if (rc != 0)
        commit_recover_close_storage(c);
    free(aside);
    free(marker);
    free(path);
    free(logdir);
    return rc;
}

int commit_recover_open_storage(commit_t *c, char *errbuf, size_t errlen)
{
    return c->mode->open(c, errbuf, errlen);
}

/* The checkpointer must be idle (commit_ckpt_settle): the view goes with the store. */
void commit_recover_close_storage(commit_t *c)
{
    c->mode->close(c);
    log_close(c->log);
    c->log = NULL;
}

/*
 * Proves the log's file system takes a write and its fsync (an ENOSPC or EIO
 * that only a write shows would otherwise pass a re-open that writes nothing).
 */
int commit_recover_probe_write(const char *logdir)
{
    char *path = datadir_in(logdir, DATADIR_LOG_PROBE);
    char buf[4096];
    int rc = -1;
    if (!path)
        return -1;
    memset(buf, 0, sizeof(buf));
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        rc = fsutil_write_all(fd, buf, sizeof(buf)) == 0 && fdatasync(fd) == 0 ? 0 : -1;
        close(fd);
        unlink(path);
    }
    free(path);
    return rc;
}

/*
 * Closes and re-opens store and log from disk (after a failure, a failed
 * fsync above all: what the page cache holds then cannot be trusted). The
 * replay puts every batch acknowledged since the last checkpoint into LMDB,
 * so the pending keys are dropped with the old view.
 * `grow_map`: the failure was a full map, open with twice the size.
 * Returns true when storage is usable again.
 */
bool commit_recover(commit_t *c, bool grow_map)
{
    char err[512];
    bool was_failed = c->failed;

    commit_ckpt_settle(c); /* the view goes with the store (nothing to do without a checkpointer) */
    c->last_recover_ms = clk_mono_ms();
    pthread_mutex_lock(&c->mu);
    uint64_t map = c->stats.store_map_size;
    pthread_mutex_unlock(&c->mu);
    if (map > c->opts.map_size)
        c->opts.map_size = map; /* keep the growth already done */
    if (grow_map)
        c->opts.map_size = (c->opts.map_size ? c->opts.map_size : 1ull << 30) * 2;
    if (c->log) {
        /* Trust nothing past the last successful sync, whatever the page cache shows. */
        log_info_t li;
        log_get_info(c->log, &li);
        c->discard = true;
        c->discard_from = li.synced_offset;
    }
    commit_recover_close_storage(c);
    if (commit_recover_open_storage(c, err, sizeof(err)) != 0) {
        if (!was_failed)
            commit_notify(c, 0, "storage unavailable, answering 503 and retrying every second: %s",
                          err);
        c->failed = true;
        return false;
    }
    c->failed = false;
    pthread_mutex_lock(&c->mu);
    c->stats.recoveries++;
    if (grow_map)
        c->stats.map_grows++;
    pthread_mutex_unlock(&c->mu);
    log_info_t li;
    log_get_info(c->log, &li);
    commit_notify(c, 2, "storage re-established from disk (log next offset %llu)",
                  (unsigned long long)li.next_offset);
    return true;
}
