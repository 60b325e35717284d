/* check.c: `ingestd check`, a data dir verified against itself, also while a server runs. */
#include "storage/tools/check.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdarg.h>

#include "storage/log/log.h"
#include "storage/secret.h"
#include "storage/tools/internal.h"
#include "storage/window/genset.h"
#include "storage/window/keyhash.h"
#include "storage/window/retag.h"
#include "storage/window/settings.h"
#include "storage/window/store.h"
#include "storage/window/storeswap.h"

typedef struct {
    tools_report_fn report;
    tools_progress_fn progress;
    void *arg;
    check_result_t *res;
    const char *logdir;
    log_reader_t *r;     /* walks the log in step with the sequence index */
    log_reader_t *r2;    /* reads the records of carried keys and of the generations' keys */
    uint64_t run_start;  /* the young store's run of log offsets: its first, */
    uint64_t expect_off; /* and the offset the next entry of the run must name */
    bool started;
    bool carries;           /* per-source budgets may carry keys (max_keys > 0 or not known) */
    uint64_t carried;       /* young store keys the budgets carried (offsets before the run) */
    uint64_t retained_away; /* young store keys whose records retention deleted */
    uint64_t gens_away;     /* generations' keys whose records retention deleted */
    uint64_t seq_entries, key_entries, bad_keys;
    const store_info_t *info;       /* the snapshot's, filled before the callbacks run */
    const uint8_t *secret;          /* the store's, to tag keys of records before tagged_from */
    uint64_t tagged_from;           /* DIR/TAGGED_FROM (storage/window/retag.h) */
    uint64_t in_checkpoint;         /* keys put by a checkpoint whose last transaction is to come */
    uint64_t seq_below, keys_below; /* sequence entries, and keys naming them, below the
                                       store's eviction mark (store_mark_evicting) */
} check_t;

static void problem(check_t *ck, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void problem(check_t *ck, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    ck->res->problems++;
    if (ck->report && ck->res->problems <= 100)
        ck->report(ck->arg, 1, line);
}

/*
 * Pass over the log, segment by segment, so one bad record does not hide the
 * segments after it: records below LMDB's applied offset (and every record of
 * a closed segment) must be intact; past it, a torn record is a write in
 * flight or a tail the next start truncates.
 */
static void check_log(check_t *ck, const uint64_t *bases, uint64_t nseg, uint64_t applied)
{
    check_result_t *res = ck->res;
    log_record_t rec;
    uint64_t total = nseg > 0 && applied > bases[0] ? applied - bases[0] : 0;

    for (uint64_t i = 0; i < nseg; i++) {
        bool last = i + 1 == nseg;
        uint64_t end = last ? applied : bases[i + 1];
        log_reader_t *r = NULL;
        int lrc = log_reader_open(ck->logdir, bases[i], &r);
        if (lrc != LOG_OK) {
            problem(ck, "log: segment %020" PRIu64 ".seg unreadable: %s", bases[i],
                    log_strerror(lrc));
            continue;
        }
        while (log_reader_position(r) < end && (lrc = log_reader_next(r, end, &rec)) == LOG_OK)
            tools_step(ck->progress, ck->arg, "checking the log", "records", ++res->records, total);
        if (log_reader_position(r) < end) {
            uint64_t seg, pos;
            log_reader_tell(r, &seg, &pos);
            if (lrc == LOG_END)
                problem(ck,
                        "log: segment %020" PRIu64 ".seg ends at offset %" PRIu64 " but %s %" PRIu64
                        ": acknowledged records are missing",
                        bases[i], log_reader_position(r),
                        last ? "LMDB has applied up to" : "the next segment starts at", end);
            else
                problem(ck,
                        "log: record at offset %" PRIu64 " (segment %020" PRIu64
                        ".seg, byte %" PRIu64 ") is bad: %s",
                        log_reader_position(r), seg, pos, log_strerror(lrc));
        } else if (last) {
            uint64_t extra = 0;
            while (log_reader_next(r, UINT64_MAX, &rec) == LOG_OK)
                extra++;
            res->records += extra;
            if (extra > 0)
                tools_say(ck->report, ck->arg, 0,
                          "log: %" PRIu64
                          " records past LMDB's applied offset (in flight, or replayed "
                          "into LMDB at the next start)",
                          extra);
        }
        if (last)
            res->next_offset = log_reader_position(r);
        log_reader_close(r);
    }
}

/*
 * Whether the log record at `offset` holds `key` and `received_ms`, when retention kept it
 * (else counted in *away): `what` names the entry in a problem. Reads through *r.
 */
static void compare_record(check_t *ck, log_reader_t **r, const char *what, uint64_t offset,
                           const uint8_t key[KEYHASH_LEN], int64_t received_ms, uint64_t *away)
{
    log_record_t rec;
    if (offset < ck->res->first_offset) {
        (*away)++; /* in the window, its record deleted by retention: no problem */
        return;
    }
    /* The limit makes a short or bad record an error rather than "the end, for now". */
    int lrc = tools_read_record(ck->logdir, ck->secret, ck->tagged_from, offset, &rec, r);
    if (lrc != LOG_OK)
        problem(ck, "%s names log offset %" PRIu64 ", which cannot be read (%s)", what, offset,
                lrc == LOG_END ? "beyond the log" : log_strerror(lrc));
    else if (memcmp(rec.key, key, KEYHASH_LEN) != 0 || rec.received_ms != received_ms)
        problem(ck, "%s disagrees with log offset %" PRIu64 " (key or receivedAt differ)", what,
                offset);
}

/*
 * Per sequence entry in order. The young store's keys name one run of log offsets, each
 * record after the one before, up to the applied offset; what per-source budgets carried
 * (docs/window.md) was put again at the young end with its old offset, below the run. Such a
 * carry can also leave the run starting after a gap (the flood's keys in between left), so
 * with budgets a gap starts the run anew and what came before counts as carried. Every
 * entry's key and receivedAt must be its log record's.
 */
static int on_seq(void *arg, uint64_t seq, const uint8_t key[KEYHASH_LEN], int64_t received_ms,
                  uint64_t log_offset)
{
    check_t *ck = arg;
    char what[64];

    ck->seq_entries++;
    tools_step(ck->progress, ck->arg, "checking the window", "keys", ck->seq_entries,
               ck->info->keys);
    if (seq < ck->info->evicting_below)
        ck->seq_below++;
    snprintf(what, sizeof(what), "store: sequence %" PRIu64, seq);
    if (ck->started && log_offset < ck->run_start) {
        ck->carried++;
        compare_record(ck, &ck->r2, what, log_offset, key, received_ms, &ck->retained_away);
        return 0;
    }
    if (ck->started && log_offset < ck->expect_off) {
        problem(ck,
                "store: sequence %" PRIu64 " names log offset %" PRIu64 ", which an earlier "
                "entry of the window's run already named",
                seq, log_offset);
        compare_record(ck, &ck->r2, what, log_offset, key, received_ms, &ck->retained_away);
        return 0;
    }
    if (!ck->started) {
        ck->started = true;
        ck->run_start = log_offset;
    } else if (log_offset > ck->expect_off && ck->carries) {
        ck->carried += ck->expect_off - ck->run_start; /* the run so far was carried keys */
        ck->run_start = log_offset;
    } else if (log_offset > ck->expect_off) {
        problem(ck,
                "store: sequence %" PRIu64 " names log offset %" PRIu64 ", expected %" PRIu64
                " (the window must cover a contiguous range of the log)",
                seq, log_offset, ck->expect_off);
    }
    ck->expect_off = log_offset + 1;
    compare_record(ck, &ck->r, what, log_offset, key, received_ms, &ck->retained_away);
    return 0;
}

static int on_key(void *arg, const uint8_t key[KEYHASH_LEN], uint64_t seq, bool seq_ok)
{
    check_t *ck = arg;
    (void)key;
    ck->key_entries++;
    tools_step(ck->progress, ck->arg, "checking the keys", "keys", ck->key_entries, ck->info->keys);
    if (!seq_ok && seq >= ck->info->next_seq) {
        /* store_put_keys: the checkpoint's sequence entries come with its last transaction. */
        ck->in_checkpoint++;
        return 0;
    }
    if (seq_ok && seq < ck->info->evicting_below)
        ck->keys_below++;
    if (!seq_ok) {
        ck->bad_keys++;
        problem(ck, "store: a key names sequence %" PRIu64 ", which does not name it back", seq);
    }
    return 0;
}

/* A generation's key whose record retention kept, for comparing in log order. */
typedef struct {
    uint64_t offset;
    int64_t received_ms;
    uint8_t key[KEYHASH_LEN];
} gen_key_t;

static int cmp_gen_key(const void *a, const void *b)
{
    uint64_t x = ((const gen_key_t *)a)->offset, y = ((const gen_key_t *)b)->offset;
    return x < y ? -1 : x > y;
}

/*
 * Every key of generation `g` against the log, as the young store's: the record at its offset
 * (read in offset order) holds its key and receivedAt; a key whose record retention deleted
 * counts as in the window, its record deleted. Keys are not in log order: a carried key keeps
 * its old offset in a newer generation (docs/window.md).
 */
static void check_gen_keys(check_t *ck, const gen_t *g, const char *name)
{
    gen_iter_t *it = NULL;
    gen_entry_t e;
    gen_info_t info;
    gen_key_t *keys = NULL;
    size_t n = 0;
    char what[GEN_NAME_MAX + 32];
    int grc;

    gen_get_info(g, &info);
    keys = calloc(info.keys ? info.keys : 1, sizeof(*keys));
    if (!keys || gen_iter_open(g, &it) != GEN_OK) {
        problem(ck, "generation %s: cannot read its keys", name);
        goto out;
    }
    while ((grc = gen_iter_next(it, &e)) == GEN_OK && n < info.keys) {
        if (e.offset < ck->res->first_offset) {
            ck->gens_away++;
            continue;
        }
        keys[n] = (gen_key_t){.offset = e.offset, .received_ms = e.received_ms};
        memcpy(keys[n++].key, e.key, KEYHASH_LEN);
    }
    if (grc < 0)
        problem(ck, "generation %s: reading its keys: %s", name, gen_strerror(grc));
    qsort(keys, n, sizeof(*keys), cmp_gen_key);
    snprintf(what, sizeof(what), "generation %s: a key", name);
    for (size_t i = 0; i < n; i++)
        compare_record(ck, &ck->r2, what, keys[i].offset, keys[i].key, keys[i].received_ms,
                       &ck->gens_away);
out:
    gen_iter_close(it);
    free(keys);
}

/*
 * One generation file: whole (gen_verify), its sequence range after the one before it, and
 * its keys against the log (a range past the store's next sequence is a seal a power loss cut
 * short, which recovery finishes: seal_recover). Its log offsets need not follow the one before it:
 * a carried key keeps its old offset.
 */
static void check_gen(check_t *ck, const gen_t *g, const gen_info_t *prev, const store_info_t *si)
{
    gen_info_t info;
    char name[GEN_NAME_MAX];
    gen_get_info(g, &info);
    gen_file_name(info.id, name, sizeof(name));
    int grc = gen_verify(g);
    if (grc != GEN_OK) {
        problem(ck, "generation %s: %s (run `ingestd rebuild`)", name, gen_strerror(grc));
        return;
    }
    if (prev && info.id.first < prev->id.end)
        problem(ck,
                "generation %s: its sequences begin at %" PRIu64 ", inside the generation "
                "before it (which ends at %" PRIu64 ")",
                name, info.id.first, prev->id.end);
    if (info.id.end > si->next_seq) /* its keys are checked against the log all the same */
        tools_say(ck->report, ck->arg, 0,
                  "generation %s: its sequences end at %" PRIu64 ", past the store's next sequence "
                  "%" PRIu64
                  ": a seal (or a rebuild) whose LMDB commits a power loss undid; the next "
                  "start finishes it and replays the log (recovery.seals_rebased)",
                  name, info.id.end, si->next_seq);
    check_gen_keys(ck, g, name);
}

/*
 * The sealed generations (docs/window.md) under DIR/store/gens: each file
 * whole, in sequence order with none missing from the store's drop bound to its
 * sealed bound (genset_view_missing), within the store's numbering, its keys matching
 * their log records; a newer one than the store's sealed bound is a seal whose
 * LMDB transaction is still to come (its keys are counted once, in the store).
 * Adds their keys to the result.
 */
static void check_gens(check_t *ck, const char *storedir, const store_info_t *si)
{
    char dir[TOOLS_PATH_LEN];
    genset_t *gs = NULL;
    tools_entry(dir, storedir, DATADIR_GENS);
    int grc = genset_open_read_only(dir, &gs);
    if (grc != GEN_OK) {
        problem(ck, "generations: cannot open %s: %s (run `ingestd rebuild`)", dir,
                gen_strerror(grc));
        return;
    }
    genset_view_t *v = genset_view(gs);
    gen_info_t prev = {0}, info;
    uint64_t keys = 0, bytes = 0, sealing = 0;
    size_t n = genset_view_count(v);
    for (size_t i = 0; i < n; i++) {
        check_gen(ck, genset_view_gen(v, i), i > 0 ? &prev : NULL, si);
        gen_get_info(genset_view_gen(v, i), &info);
        if (info.id.end > si->sealed_below)
            sealing += info.keys;
        else
            keys += info.keys;
        bytes += info.file_bytes;
        prev = info;
    }
    gen_id_t missing;
    if (genset_view_missing(v, si->dropped_below, si->sealed_below, &missing))
        problem(ck,
                "generations: the one holding sequences %" PRIu64 "..%" PRIu64
                " is missing (a lost file: its keys are forgotten, and retries of their events "
                "would be accepted again); `ingestd rebuild` makes the window again from the "
                "retained log",
                missing.first, missing.end - 1);
    genset_view_release(v);
    genset_close(gs);
    ck->res->keys += keys;
    if (n > 0)
        tools_say(ck->report, ck->arg, 0,
                  "generations: %zu files, %" PRIu64 " keys, %" PRIu64
                  " bytes, sealed below sequence "
                  "%" PRIu64,
                  n, keys + sealing, bytes, si->sealed_below);
    if (sealing > 0)
        tools_say(ck->report, ck->arg, 0,
                  "generations: %" PRIu64 " keys belong to a seal still being written (the store "
                  "still holds them; the next start finishes it)",
                  sealing);
    if (ck->gens_away > 0)
        tools_say(ck->report, ck->arg, 0,
                  "generations: %" PRIu64 " keys are in the window, their records deleted by log "
                  "retention (`ingestd rebuild` keeps them with the generations)",
                  ck->gens_away);
}

/* The window's settings the server recorded (DIR/WINDOW): whether budgets may carry keys. */
static void check_settings(check_t *ck, const char *data_dir)
{
    winsettings_t w;
    int rc = winsettings_read(data_dir, &w);
    ck->carries = rc != 0 || w.max_keys > 0;
    if (rc == 0)
        tools_say(ck->report, ck->arg, 0,
                  "window settings (the server's, %s): window %" PRId64 "s, max keys %" PRIu64
                  ", young keys %" PRIu64,
                  datadir_name(DATADIR_WINDOW), w.window_ms / 1000, w.max_keys, w.young_keys);
    else if (rc < 0)
        problem(ck, "%s/%s: %s", data_dir, datadir_name(DATADIR_WINDOW),
                errno == EINVAL ? "malformed" : strerror(errno));
}

int check_run(const check_options_t *o, check_result_t *out)
{
    const char *data_dir = o->data_dir;
    tools_report_fn report = o->report;
    tools_progress_fn progress = o->progress;
    void *arg = o->arg;
    char storedir[TOOLS_PATH_LEN], logdir[TOOLS_PATH_LEN];
    check_result_t res = {0};
    check_t ck = {
        .report = report, .progress = progress, .arg = arg, .res = &res, .logdir = logdir};
    store_t *st = NULL;
    store_info_t si = {0};
    log_info_t li;
    uint64_t *bases = NULL;
    uint8_t fsecret[KEYHASH_SECRET_LEN], ssecret[KEYHASH_SECRET_LEN];
    int rc = TOOLS_ERROR;

    tools_entry(storedir, data_dir, DATADIR_STORE);
    tools_entry(logdir, data_dir, DATADIR_LOG);
    if (log_describe(logdir, &li, &bases) != LOG_OK) {
        tools_say(report, arg, 1, "log: cannot list %s: %s", logdir, strerror(errno));
        goto out;
    }
    res.segments = li.segments;
    res.log_bytes = li.bytes;
    res.first_offset = li.first_offset;
    tools_say(report, arg, 0, "log: %" PRIu64 " segments, %" PRIu64 " bytes, first offset %" PRIu64,
              li.segments, li.bytes, li.first_offset);
    int64_t left = storeswap_leftovers(data_dir, 0);
    if (left > 0) /* never DIR/store: information, not a problem */
        tools_say(report, arg, 0,
                  "store: %lld leftover %s/%s* of a rebuild cut short: not the store, ignored; the "
                  "next `ingestd serve` or `ingestd rebuild` removes it",
                  (long long)left, data_dir, DATADIR_REBUILD_PREFIX);

    store_options_t so = {.read_only = true};
    int src = store_open(storedir, &so, &st);
    if (src == STORE_VERSION) {
        /* Not damage: a data dir of an older release, migrated by the next start. */
        tools_say(
            report, arg, 0,
            "store: %s was written by an older release (keys without source tags): the next "
            "`ingestd serve` (or `ingestd rebuild`) rebuilds it from the log; checking the log "
            "alone",
            storedir);
        check_log(&ck, bases, li.segments, 0);
        goto done;
    }
    if (src != STORE_OK) {
        problem(&ck, "store: cannot open %s: %s (run `ingestd rebuild`)", storedir,
                store_strerror(src));
        check_log(&ck, bases, li.segments, 0);
        goto done;
    }
    /* One LMDB snapshot for everything; the log is checked up to its applied offset. A store
     * without the secret (a power loss undid the commit that recorded it) takes the file's, as
     * the next start does. */
    bool store_has_secret = store_secret(st, NULL, ssecret) == STORE_OK;
    if (!store_has_secret && secret_read(data_dir, ssecret) == 1)
        tools_say(
            report, arg, 0,
            "store: the secret is not recorded yet (its commit was lost); the next start records "
            "%s/%s's",
            data_dir, datadir_name(DATADIR_SECRET));
    else if (!store_has_secret) {
        problem(&ck, "store: cannot read the secret, in the store or in %s/%s", data_dir,
                datadir_name(DATADIR_SECRET));
        goto done;
    }
    if (retag_read_from(data_dir, &ck.tagged_from) < 0) {
        problem(&ck, "store: cannot read %s/%s", data_dir, datadir_name(DATADIR_TAGGED_FROM));
        goto done;
    }
    ck.secret = ssecret;
    ck.info = &si;
    check_settings(&ck, data_dir);
    src = store_scan(st, &si, on_seq, on_key, &ck);
    if (src != STORE_OK) {
        problem(&ck, "store: unreadable: %s (%s)", store_strerror(src), store_detail(st));
        check_log(&ck, bases, li.segments, 0);
        goto done;
    }
    res.applied = si.applied;
    res.keys = si.keys;
    check_gens(&ck, storedir, &si);
    check_log(&ck, bases, li.segments, si.applied);
    tools_say(report, arg, 0, "log: %" PRIu64 " records, offsets %" PRIu64 "..%" PRIu64,
              res.records, res.first_offset, res.next_offset);
    /* Retention never deletes what LMDB has not applied (commit/retain.c): the start refuses. */
    if (li.segments > 0 && si.applied < li.first_offset)
        problem(&ck,
                "log: it starts at offset %" PRIu64 " but LMDB has applied only up to %" PRIu64
                ": records deleted before LMDB applied them, their keys are in no store (put "
                "those segments back; `ingestd rebuild --allow-shrink` forgets them)",
                li.first_offset, si.applied);
    /* Budgets may have evicted the newest of a flood while keeping a carried key after it. */
    if (ck.started && (ck.expect_off > si.applied || (ck.expect_off < si.applied && !ck.carries)))
        problem(&ck,
                "store: the window ends at log offset %" PRIu64
                " but the applied offset is %" PRIu64,
                ck.expect_off, si.applied);
    if (ck.carried > 0)
        tools_say(report, arg, 0,
                  "store: %" PRIu64
                  " keys were carried by per-source budgets (older log offsets at "
                  "the young end)",
                  ck.carried);
    if (ck.retained_away > 0)
        tools_say(
            report, arg, 0,
            "store: %" PRIu64 " keys of the window name records that log retention deleted: "
            "they still deduplicate, but `ingestd rebuild` could not restore them (it refuses "
            "unless --allow-shrink)",
            ck.retained_away);
    if (ck.in_checkpoint > 0)
        tools_say(report, arg, 0,
                  "store: %" PRIu64 " keys belong to a checkpoint still being written (their "
                  "sequence entries come with its last transaction)",
                  ck.in_checkpoint);
    /* A checkpoint deletes evicted keys ahead of their sequence entries (commit/checkpoint.c). */
    uint64_t evicting = ck.seq_below - ck.keys_below;
    if (evicting > 0)
        tools_say(report, arg, 0,
                  "store: %" PRIu64 " sequence entries belong to evictions still being written "
                  "(their keys are gone already; the next start finishes them)",
                  evicting);
    if (ck.seq_entries - evicting != ck.key_entries - ck.in_checkpoint)
        problem(&ck, "store: %" PRIu64 " keys but %" PRIu64 " sequence entries",
                ck.key_entries - ck.in_checkpoint, ck.seq_entries - evicting);
    tools_say(report, arg, 0,
              "store: %" PRIu64 " keys, applied offset %" PRIu64 ", map %" PRIu64 " bytes (%" PRIu64
              " used)",
              si.keys, si.applied, si.map_size, si.used_bytes);
    if (secret_read(data_dir, fsecret) != 1)
        problem(&ck, "secret: %s/%s is missing or not %d bytes", data_dir,
                datadir_name(DATADIR_SECRET), KEYHASH_SECRET_LEN);
    else if (store_has_secret && memcmp(fsecret, ssecret, sizeof(fsecret)) != 0)
        problem(&ck,
                "secret: %s/%s differs from the store's: they belong to different data "
                "dirs",
                data_dir, datadir_name(DATADIR_SECRET));
done:
    rc = res.problems ? TOOLS_PROBLEMS : TOOLS_OK;
out:
    log_reader_close(ck.r);
    log_reader_close(ck.r2);
    store_close(st);
    free(bases);
    if (res.problems > 100)
        tools_say(report, arg, 1, "... %" PRIu64 " problems in all", res.problems);
    if (out)
        *out = res;
    return rc;
}
