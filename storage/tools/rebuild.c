/* rebuild.c: `ingestd rebuild`, the young store rebuilt from the retained log and swapped in. */
#include "storage/tools/rebuild.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "storage/commit/commit.h"
#include "storage/fsutil.h"
#include "storage/log/log.h"
#include "storage/secret.h"
#include "storage/tools/internal.h"
#include "storage/window/genset.h"
#include "storage/window/keyhash.h"
#include "storage/window/retag.h"
#include "storage/window/settings.h"
#include "storage/window/store.h"
#include "storage/window/storeswap.h"

/* The data dir's secret: its file, or else the old store's (then written back to the file). */
static int find_secret(const char *data_dir, const char *old_store, uint8_t secret[16],
                       tools_report_fn report, void *arg)
{
    if (secret_read(data_dir, secret) == 1)
        return 0;
    store_t *st = NULL;
    store_options_t so = {.read_only = true, .older_ok = true}; /* the secret of any format */
    if (store_open(old_store, &so, &st) == STORE_OK && store_secret(st, NULL, secret) == STORE_OK) {
        store_close(st);
        tools_say(report, arg, 0, "secret: taken from the old store");
        return 0;
    }
    store_close(st);
    tools_say(report, arg, 1,
              "secret: %s/%s is missing and no readable store holds it: keys of the log could not "
              "be matched by new events; restore the secret file first",
              data_dir, datadir_name(DATADIR_SECRET));
    return -1;
}

/* The caller's progress callback and its argument, for commit_options_t.replay_progress. */
struct replay_progress {
    tools_progress_fn fn;
    void *arg;
};

static void on_replay(void *arg, uint64_t done, uint64_t total)
{
    struct replay_progress *rp = arg;
    rp->fn(rp->arg, "replaying the log", "records", done, total);
}

/*
 * A fresh store in `storedir` that starts at the log's first retained offset `first`, with
 * the old secret, which DIR/secret gets too when it lacks one. 0 or -1 (reported).
 */
static int rebuild_new_store(const char *data_dir, const char *storedir,
                             const uint8_t secret[KEYHASH_SECRET_LEN], uint64_t first,
                             tools_report_fn report, void *arg)
{
    store_options_t so = {0};
    store_t *st = NULL;
    uint8_t got[KEYHASH_SECRET_LEN];

    if (fsutil_mkdir(storedir) != 0) {
        tools_say(report, arg, 1, "creating %s: %s", storedir, strerror(errno));
        return -1;
    }
    if (store_open(storedir, &so, &st) != STORE_OK || store_secret(st, secret, got) != STORE_OK ||
        store_txn_begin(st) != STORE_OK || store_set_applied(st, first) != STORE_OK ||
        store_txn_commit(st) != STORE_OK) {
        tools_say(report, arg, 1, "creating the new store: %s", store_detail(st));
        store_close(st);
        return -1;
    }
    store_close(st);
    if (secret_read(data_dir, got) == 1)
        return 0;
    if (secret_write(data_dir, secret) != 0) {
        tools_say(report, arg, 1, "writing %s/%s: %s", data_dir, datadir_name(DATADIR_SECRET),
                  strerror(errno));
        return -1;
    }
    return 0;
}

/* Replays the retained log from `from` into the new store `side` through commit_open (the lock is
 * held all along: no server may start meanwhile); *keys gets the window's keys after it. 0 or -1
 * (reported). */
static int rebuild_replay(const char *data_dir, const char *side, const winsettings_t *w,
                          uint64_t from, uint64_t *keys, tools_report_fn report,
                          tools_progress_fn progress, void *arg)
{
    commit_t *c = NULL;
    char err[512];
    struct replay_progress rp = {progress, arg};
    commit_options_t co = {.data_dir = data_dir,
                           .store_dir = side,
                           .window_ms = w->window_ms,
                           .max_keys = w->max_keys,
                           .young_keys = w->young_keys,
                           .lock_held = true,
                           .replay_progress = progress ? on_replay : NULL,
                           .replay_progress_arg = &rp};

    tools_say(report, arg, 0, "replaying the log from offset %" PRIu64 " ...", from);
    if (commit_open(&co, &c, err, sizeof(err)) != COMMIT_OK) {
        tools_say(report, arg, 1, "rebuild failed: %s", err);
        return -1;
    }
    commit_stats_t s;
    commit_get_stats(c, &s);
    commit_close(c);
    *keys = s.window.keys;
    tools_say(report, arg, 0,
              "store: rebuilt from %" PRIu64 " log records; %" PRIu64 " keys in the window",
              s.replayed_at_open, s.window.keys);
    return 0;
}

/*
 * What the old store and its generations hold, read before anything moves (docs/window.md,
 * "rebuild"). The generations are kept when every one of them is whole and the old young store
 * can be read: the young store is then rebuilt from the log records after the generations'
 * newest (`from`), plus the keys it carried from before (per-source budgets), each read back
 * from its log record. Otherwise everything is rebuilt from the retained log, as a store of
 * another format is.
 */
/* A key the old young store holds from before the replay's start: carried by a budget. */
struct carried {
    uint64_t offset;
    uint8_t key[KEYHASH_LEN];
};

typedef struct survey {
    uint64_t first;         /* the log's first retained offset */
    bool keep_gens;         /* the generations stay; else the whole log is replayed */
    genset_t *gs;           /* the old generations (read-only), when keep_gens */
    uint64_t end_seq;       /* the kept generations' end (0: none) */
    uint64_t kept_from;     /* and the oldest one's first sequence */
    uint64_t from;          /* where the replay starts */
    uint64_t young, sealed; /* keys before: the old young store's and the generations' */
    uint64_t lost;          /* keys of the old window whose records retention deleted */
    bool unknown;           /* the old window cannot be read whole: what it loses is unknown */
    struct carried *carry;  /* the young store's keys with records in [first, from), in order */
    size_t ncarry, carry_cap;
} survey_t;

static void survey_free(survey_t *sv)
{
    genset_close(sv->gs);
    free(sv->carry);
}

/* Every generation whole (gen_verify): 0 and the newest record's offset, or -1 (reported). */
static int survey_gens(survey_t *sv, const char *gensdir, uint64_t *max_offset,
                       tools_report_fn report, void *arg)
{
    int grc = genset_open_read_only(gensdir, &sv->gs);
    if (grc != GEN_OK) {
        tools_say(report, arg, 0, "generations: cannot open %s (%s): replaying the whole log",
                  gensdir, gen_strerror(grc));
        return -1;
    }
    genset_view_t *v = genset_view(sv->gs);
    int rc = 0;
    for (size_t i = 0; i < genset_view_count(v); i++) {
        gen_info_t info;
        char name[GEN_NAME_MAX];
        gen_get_info(genset_view_gen(v, i), &info);
        gen_file_name(info.id, name, sizeof(name));
        if ((grc = gen_verify(genset_view_gen(v, i))) != GEN_OK) {
            tools_say(report, arg, 0, "generation %s: %s: replaying the whole log", name,
                      gen_strerror(grc));
            rc = -1;
            break;
        }
        sv->sealed += info.keys;
        if (i == 0)
            sv->kept_from = info.id.first;
        sv->end_seq = info.id.end;
        if (info.keys > 0 && info.max_offset > *max_offset)
            *max_offset = info.max_offset;
    }
    genset_view_release(v);
    return rc;
}

static int on_old_seq(void *arg, uint64_t seq, const uint8_t key[KEYHASH_LEN], int64_t received_ms,
                      uint64_t log_offset)
{
    survey_t *sv = arg;
    (void)received_ms;
    if (seq < sv->end_seq)
        return 0; /* a seal cut short: its generation holds the key */
    sv->young++;
    if (log_offset < sv->first) {
        sv->lost++;
        return 0;
    }
    if (log_offset >= sv->from)
        return 0; /* the replay gives it back */
    if (sv->ncarry == sv->carry_cap) {
        size_t cap = sv->carry_cap ? 2 * sv->carry_cap : 1024;
        struct carried *p = realloc(sv->carry, cap * sizeof(*p));
        if (!p)
            return -1;
        sv->carry = p;
        sv->carry_cap = cap;
    }
    sv->carry[sv->ncarry].offset = log_offset;
    memcpy(sv->carry[sv->ncarry++].key, key, KEYHASH_LEN);
    return 0;
}

/* The old young store: its keys, those retention took, those it carried; its info into *si.
 * 0 or -1. */
static int survey_young(survey_t *sv, const char *storedir, store_info_t *si)
{
    store_options_t so = {.read_only = true};
    store_t *st = NULL;
    if (store_open(storedir, &so, &st) != STORE_OK) {
        store_close(st);
        return -1;
    }
    int rc = store_scan(st, si, on_old_seq, NULL, sv);
    store_close(st);
    /* Keys of evictions a checkpoint left half done were counted: they go at the next start. */
    return rc == STORE_OK ? 0 : -1;
}

static int survey(survey_t *sv, const char *storedir, tools_report_fn report, void *arg)
{
    char gensdir[TOOLS_PATH_LEN];
    uint64_t max_offset = 0;
    bool have = false;
    tools_entry(gensdir, storedir, DATADIR_GENS);
    sv->keep_gens = survey_gens(sv, gensdir, &max_offset, report, arg) == 0;
    have = sv->keep_gens && sv->sealed > 0;
    sv->from = have && max_offset + 1 > sv->first ? max_offset + 1 : sv->first;
    store_info_t si = {0};
    if (sv->keep_gens && survey_young(sv, storedir, &si) != 0) {
        tools_say(report, arg, 0, "store: the old store cannot be read: replaying the whole log");
        sv->keep_gens = false;
    }
    gen_id_t missing;
    if (sv->keep_gens) {
        genset_view_t *v = genset_view(sv->gs);
        if (genset_view_missing(v, si.dropped_below, si.sealed_below, &missing)) {
            tools_say(report, arg, 0,
                      "generations: the one holding sequences %" PRIu64 "..%" PRIu64
                      " is missing: replaying the whole log",
                      missing.first, missing.end - 1);
            sv->keep_gens = false;
        }
        genset_view_release(v);
    }
    if (!sv->keep_gens) {
        genset_close(sv->gs);
        sv->gs = NULL;
        sv->end_seq = sv->young = sv->sealed = sv->lost = 0;
        sv->ncarry = 0;
        sv->from = sv->first;
        /* Nothing of the old window can be read whole: only a whole log gives it all back. */
        sv->unknown = sv->first > 0;
    }
    return 0;
}

/* The kept generations of DIR/store/gens, linked into the new store's gens/ (the old store keeps
 * its own links, whole, until the new one replaced it). 0 or -1 (reported). */
static int rebuild_link_gens(const survey_t *sv, const char *storedir, const char *side,
                             tools_report_fn report, void *arg)
{
    char from[TOOLS_PATH_LEN], to[TOOLS_PATH_LEN], odir[TOOLS_PATH_LEN], ndir[TOOLS_PATH_LEN];
    tools_entry(odir, storedir, DATADIR_GENS);
    tools_entry(ndir, side, DATADIR_GENS);
    if (mkdir(ndir, 0755) != 0) {
        tools_say(report, arg, 1, "creating %s: %s", ndir, strerror(errno));
        return -1;
    }
    genset_view_t *v = genset_view(sv->gs);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < genset_view_count(v); i++) {
        gen_info_t info;
        char name[GEN_NAME_MAX];
        gen_get_info(genset_view_gen(v, i), &info);
        gen_file_name(info.id, name, sizeof(name));
        tools_path(from, odir, name);
        tools_path(to, ndir, name);
        if (link(from, to) != 0) {
            tools_say(report, arg, 1, "linking %s to %s: %s", from, to, strerror(errno));
            rc = -1;
        }
    }
    if (rc == 0 && genset_view_count(v) > 0)
        tools_say(report, arg, 0, "generations: %zu files kept, sealed below sequence %" PRIu64,
                  genset_view_count(v), sv->end_seq);
    genset_view_release(v);
    if (rc == 0 && (fsutil_sync_dir(ndir) != 0 || fsutil_sync_dir(side) != 0)) {
        tools_say(report, arg, 1, "syncing %s: %s", ndir, strerror(errno));
        rc = -1;
    }
    return rc;
}

/*
 * The new young store's start: numbered after the kept generations, the keys the old one
 * carried from before `from` put back from their log records (in the old order, so they stay
 * the oldest), and the replay's start. 0 or -1 (reported).
 */
static int rebuild_seed(const survey_t *sv, const char *data_dir, const char *storedir,
                        const uint8_t *secret, tools_report_fn report, void *arg)
{
    char logdir[TOOLS_PATH_LEN];
    store_options_t so = {0};
    store_t *st = NULL;
    log_reader_t *r = NULL;
    uint64_t tagged_from = 0, skipped = 0;
    int rc = -1;
    tools_entry(logdir, data_dir, DATADIR_LOG);
    if (retag_read_from(data_dir, &tagged_from) < 0) {
        tools_say(report, arg, 1, "reading %s/%s: %s", data_dir, datadir_name(DATADIR_TAGGED_FROM),
                  strerror(errno));
        return -1;
    }
    if (store_open(storedir, &so, &st) != STORE_OK || store_txn_begin(st) != STORE_OK)
        goto fail;
    /* The kept generations begin where the new store says drops ended: none of them is lost. */
    if (sv->end_seq > 0 && (store_advance_seq(st, sv->end_seq) != STORE_OK ||
                            store_seal(st, sv->end_seq) != STORE_OK ||
                            store_record_drop(st, sv->kept_from) != STORE_OK))
        goto abort;
    for (size_t i = 0; i < sv->ncarry; i++) {
        log_record_t rec;
        int lrc = tools_read_record(logdir, secret, tagged_from, sv->carry[i].offset, &rec, &r);
        if (lrc != LOG_OK) {
            tools_say(report, arg, 1, "log: offset %" PRIu64 ": %s", sv->carry[i].offset,
                      log_strerror(lrc));
            goto abort;
        }
        /* The old store's entry is taken only where its log record says the same. */
        if (memcmp(rec.key, sv->carry[i].key, KEYHASH_LEN) != 0) {
            skipped++;
            continue;
        }
        if (store_upsert(st, rec.key, rec.received_ms, rec.offset, NULL) != STORE_OK)
            goto abort;
    }
    if (store_set_applied(st, sv->from) != STORE_OK || store_txn_commit(st) != STORE_OK)
        goto fail;
    if (sv->ncarry > 0)
        tools_say(report, arg, 0,
                  "store: %zu keys carried by per-source budgets put back from their log records",
                  sv->ncarry - (size_t)skipped);
    if (skipped > 0)
        tools_say(report, arg, 0,
                  "store: %" PRIu64
                  " keys of the old store disagree with their log records: left out",
                  skipped);
    rc = 0;
    goto out;
abort:
    store_txn_abort(st);
fail:
    tools_say(report, arg, 1, "seeding the new store: %s", store_detail(st));
out:
    log_reader_close(r);
    store_close(st);
    return rc;
}

/* Whether the rebuild may go on: it refuses to shrink the window unless allowed. */
static bool rebuild_allowed(const survey_t *sv, bool allow_shrink, tools_report_fn report,
                            void *arg)
{
    if (sv->keep_gens)
        tools_say(report, arg, 0,
                  "window before: %" PRIu64 " keys (%" PRIu64 " in generations, %" PRIu64
                  " in the young store); %" PRIu64 " of them name records log retention deleted",
                  sv->young + sv->sealed, sv->sealed, sv->young, sv->lost);
    if (sv->lost == 0 && !sv->unknown)
        return true;
    if (allow_shrink) {
        if (sv->unknown)
            tools_say(
                report, arg, 0,
                "--allow-shrink: the window keeps only the keys of the log from offset %" PRIu64,
                sv->first);
        else
            tools_say(report, arg, 0, "--allow-shrink: the window loses %" PRIu64 " keys",
                      sv->lost);
        return true;
    }
    if (sv->unknown)
        tools_say(
            report, arg, 1,
            "the old store or its generations cannot be read whole, and log retention deleted "
            "the records before offset %" PRIu64 ": rebuilding from the log would forget the "
            "keys only those records held, and acknowledged ids would be accepted again. "
            "Restore the store from a backup, or run rebuild with --allow-shrink to accept that",
            sv->first);
    else
        tools_say(
            report, arg, 1,
            "%" PRIu64 " keys of the window name records log retention deleted: a rebuild "
            "cannot give them back, and their ids would be accepted again. Keep the old store "
            "(nothing was changed), or run rebuild with --allow-shrink to accept that",
            sv->lost);
    return false;
}

/* The new store wholly durable before it is swapped in: LMDB flushed (the replay's last commit
 * may have left its meta page unsynced), the names in its directory and gens/ fsynced (its
 * files' data is: LMDB's by the flush, the generation files' by their seal). 0 or -1. */
static int rebuild_durable(const char *side, tools_report_fn report, void *arg)
{
    store_options_t so = {0};
    store_t *st = NULL;
    if (store_open(side, &so, &st) != STORE_OK || store_flush(st) != STORE_OK) {
        tools_say(report, arg, 1, "flushing the new store %s: %s", side, store_detail(st));
        store_close(st);
        return -1;
    }
    store_close(st);
    if (storeswap_sync_sibling(side) != 0) {
        tools_say(report, arg, 1, "syncing %s: %s", side, strerror(errno));
        return -1;
    }
    return 0;
}

/* Swaps the new store `side` with DIR/store (storage/window/storeswap.h). 0; -1 when nothing
 * changed (reported); -2 when the exchange was done but the data dir's fsync failed (reported):
 * both stores must then stay, as a power loss may yet undo the exchange. */
static int rebuild_swap(const char *data_dir, const char *side, tools_report_fn report, void *arg)
{
    int exchanged = 0;
    if (storeswap_exchange(data_dir, side, &exchanged) == 0) {
        tools_say(report, arg, 0, "store: the rebuilt store took the old one's place (%s)",
                  exchanged ? "one atomic exchange" : "there was none");
        return 0;
    }
    int err = errno;
    if (exchanged) {
        tools_say(
            report, arg, 1,
            "%s/%s is the rebuilt store, but syncing %s failed: %s. The old store is kept in "
            "%s: a power loss could still bring it back as the store. Remove it once `ingestd "
            "check` passes after the next start",
            data_dir, datadir_name(DATADIR_STORE), data_dir, strerror(err), side);
        return -2;
    }
    if (err == EINVAL || err == ENOSYS)
        tools_say(
            report, arg, 1,
            "the file system of %s cannot exchange two directories atomically "
            "(renameat2 RENAME_EXCHANGE: %s), which rebuild needs so that a crash never leaves a "
            "partial store; nothing was changed. With the server stopped, copy the data dir to a "
            "local file system that can (ext4, xfs, btrfs, tmpfs), rebuild the copy there and "
            "move it back",
            data_dir, strerror(err));
    else
        tools_say(report, arg, 1, "swapping %s with %s/%s: %s; nothing was changed", side, data_dir,
                  datadir_name(DATADIR_STORE), strerror(err));
    return -1;
}

/*
 * Builds the new store in the sibling `side` (storage/window/storeswap.h), replays into it, makes
 * it durable and swaps it with DIR/store, then removes the old store (by then under `side`). Until
 * the swap DIR/store is the old store, untouched; from it on, the whole new one. 0 or -1
 * (reported).
 */
static int rebuild_store(const survey_t *sv, const char *data_dir, const char *storedir,
                         const char *side, const winsettings_t *w, uint64_t *after,
                         tools_report_fn report, tools_progress_fn progress, void *arg)
{
    uint8_t secret[KEYHASH_SECRET_LEN];
    int64_t left = storeswap_leftovers(data_dir, 1);
    if (left < 0) {
        tools_say(report, arg, 1, "removing a leftover %s/%s* of an earlier rebuild: %s", data_dir,
                  DATADIR_REBUILD_PREFIX, strerror(errno));
        return -1;
    }
    if (left > 0)
        tools_say(report, arg, 0, "removed %lld leftover %s/%s* of an earlier rebuild cut short",
                  (long long)left, data_dir, DATADIR_REBUILD_PREFIX);
    if (find_secret(data_dir, storedir, secret, report, arg) != 0 ||
        rebuild_new_store(data_dir, side, secret, sv->first, report, arg) != 0 ||
        (sv->keep_gens && rebuild_link_gens(sv, storedir, side, report, arg) != 0) ||
        rebuild_seed(sv, data_dir, side, secret, report, arg) != 0 ||
        rebuild_replay(data_dir, side, w, sv->from, after, report, progress, arg) != 0 ||
        rebuild_durable(side, report, arg) != 0) {
        fsutil_rm_tree(side); /* DIR/store is still the old store, untouched */
        return -1;
    }
    int src = rebuild_swap(data_dir, side, report, arg);
    if (src != 0) {
        if (src == -1)
            fsutil_rm_tree(side);
        return -1;
    }
    if (fsutil_rm_tree(side) != 0 || fsutil_sync_dir(data_dir) != 0)
        tools_say(report, arg, 0,
                  "could not remove the old store %s: %s (the next start or rebuild removes it)",
                  side, strerror(errno));
    return 0;
}

int rebuild_run(const rebuild_options_t *o)
{
    const char *data_dir = o->data_dir;
    tools_report_fn report = o->report;
    tools_progress_fn progress = o->progress;
    void *arg = o->arg;
    char lock[TOOLS_PATH_LEN], storedir[TOOLS_PATH_LEN], logdir[TOOLS_PATH_LEN],
        side[TOOLS_PATH_LEN];
    log_info_t li;
    survey_t sv = {0};
    uint64_t after = 0;
    int rc = TOOLS_ERROR, lockfd = -1;

    tools_entry(lock, data_dir, DATADIR_LOCK);
    tools_entry(storedir, data_dir, DATADIR_STORE);
    tools_entry(logdir, data_dir, DATADIR_LOG);
    if (storeswap_sibling(data_dir, side, sizeof(side)) != 0) {
        tools_say(report, arg, 1, "%s: %s", data_dir, strerror(errno));
        goto out;
    }

    lockfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lockfd < 0) {
        tools_say(report, arg, 1, "%s: %s", lock, strerror(errno));
        goto out;
    }
    if (flock(lockfd, LOCK_EX | LOCK_NB) != 0) {
        tools_say(report, arg, 1, "data dir %s is in use by a running server: stop it first",
                  data_dir);
        rc = TOOLS_BUSY;
        goto out;
    }
    if (log_describe(logdir, &li, NULL) != LOG_OK || li.segments == 0) {
        tools_say(report, arg, 1, "log: nothing to rebuild from in %s", logdir);
        goto out;
    }
    sv.first = li.first_offset;
    if (survey(&sv, storedir, report, arg) != 0)
        goto out;
    if (!rebuild_allowed(&sv, o->allow_shrink, report, arg)) {
        rc = TOOLS_SHRINK;
        goto out;
    }
    if (rebuild_store(&sv, data_dir, storedir, side, &o->window, &after, report, progress, arg) !=
        0)
        goto out;
    if (sv.keep_gens)
        tools_say(report, arg, 0,
                  "window after: %" PRIu64 " keys (before: %" PRIu64 "; the window's own rules may "
                  "have aged keys out meanwhile)",
                  after, sv.young + sv.sealed);
    rc = TOOLS_OK;
out:
    survey_free(&sv);
    if (lockfd >= 0)
        close(lockfd);
    return rc;
}

/* ---- backup ---- */
