/* admin.c: operator tools over a data dir: check, rebuild, backup. */
#include "storage/tools/admin.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/commit/commit.h"
#include "storage/datadir.h"
#include "storage/fsutil.h"
#include "storage/secret.h"
#include "storage/window/genset.h"
#include "storage/window/keyhash.h"
#include "storage/log/log.h"
#include "storage/window/retag.h"
#include "storage/window/store.h"
#include "storage/window/storeswap.h"
#include "storage/window/settings.h"

#define PATH_LEN 4096

static void say(admin_report_fn report, void *arg, int problem, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void say(admin_report_fn report, void *arg, int problem, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    if (!report)
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    report(arg, problem, line);
}

/* dir/name into out (PATH_LEN bytes); an over-long path is cut, and then simply not found. */
#define PROGRESS_EVERY 16384 /* items between progress calls: cheap, yet several a second */

/* Progress every PROGRESS_EVERY items (and at the end), when anyone listens. */
static void step(admin_progress_fn fn, void *arg, const char *what, const char *unit, uint64_t done,
                 uint64_t total)
{
    if (fn && (done % PROGRESS_EVERY == 0 || done == total))
        fn(arg, what, unit, done, total);
}

static void path_of(char *out, const char *dir, const char *name)
{
    if (snprintf(out, PATH_LEN, "%s/%s", dir, name) >= PATH_LEN)
        out[PATH_LEN - 1] = '\0';
}

/* A data-dir entry inside `dir` (storage/datadir.h); too long a path leaves "", which no call
 * finds. */
static void entry_of(char *out, const char *dir, datadir_entry_t e)
{
    (void)datadir_put(out, PATH_LEN, dir, e);
}

/* Reads the record at `offset` (tagged as the replay tags it) into *rec. LOG_OK or an error. */
static int read_record(const char *logdir, const uint8_t *secret, uint64_t tagged_from,
                       uint64_t offset, log_record_t *rec, log_reader_t **r)
{
    /* A short way forward is read through; a longer one, or back, opens the reader there. */
    log_record_t skip;
    while (*r && log_reader_position(*r) < offset && offset - log_reader_position(*r) <= 64 &&
           log_reader_next(*r, offset, &skip) == LOG_OK)
        ;
    if (!*r || log_reader_position(*r) != offset) {
        log_reader_close(*r);
        *r = NULL;
        int lrc = log_reader_open(logdir, offset, r);
        if (lrc != LOG_OK)
            return lrc;
    }
    int lrc = log_reader_next(*r, offset + 1, rec);
    if (lrc == LOG_OK)
        retag_record(secret, tagged_from, rec);
    return lrc;
}

/* ---- check ---- */

typedef struct {
    admin_report_fn report;
    admin_progress_fn progress;
    void *arg;
    admin_check_result_t *res;
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
    admin_check_result_t *res = ck->res;
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
            step(ck->progress, ck->arg, "checking the log", "records", ++res->records, total);
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
                say(ck->report, ck->arg, 0,
                    "log: %" PRIu64 " records past LMDB's applied offset (in flight, or replayed "
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
    int lrc = read_record(ck->logdir, ck->secret, ck->tagged_from, offset, &rec, r);
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
    step(ck->progress, ck->arg, "checking the window", "keys", ck->seq_entries, ck->info->keys);
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
    step(ck->progress, ck->arg, "checking the keys", "keys", ck->key_entries, ck->info->keys);
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
        say(ck->report, ck->arg, 0,
            "generation %s: its sequences end at %" PRIu64 ", past the store's next sequence "
            "%" PRIu64 ": a seal (or a rebuild) whose LMDB commits a power loss undid; the next "
            "start finishes it and replays the log (recovery.seals_rebased)",
            name, info.id.end, si->next_seq);
    check_gen_keys(ck, g, name);
}

/*
 * The sealed generations (docs/window.md) under DIR/store/gens: each file
 * whole, in sequence order, within the store's numbering, its keys matching
 * their log records; a newer one than the store's sealed bound is a seal whose
 * LMDB transaction is still to come (its keys are counted once, in the store).
 * Adds their keys to the result.
 */
static void check_gens(check_t *ck, const char *storedir, const store_info_t *si)
{
    char dir[PATH_LEN];
    genset_t *gs = NULL;
    entry_of(dir, storedir, DATADIR_GENS);
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
    genset_view_release(v);
    genset_close(gs);
    ck->res->keys += keys;
    if (n > 0)
        say(ck->report, ck->arg, 0,
            "generations: %zu files, %" PRIu64 " keys, %" PRIu64 " bytes, sealed below sequence "
            "%" PRIu64,
            n, keys + sealing, bytes, si->sealed_below);
    if (sealing > 0)
        say(ck->report, ck->arg, 0,
            "generations: %" PRIu64 " keys belong to a seal still being written (the store "
            "still holds them; the next start finishes it)",
            sealing);
    if (ck->gens_away > 0)
        say(ck->report, ck->arg, 0,
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
        say(ck->report, ck->arg, 0,
            "window settings (the server's, %s): window %" PRId64 "s, max keys %" PRIu64
            ", young keys %" PRIu64,
            datadir_name(DATADIR_WINDOW), w.window_ms / 1000, w.max_keys, w.young_keys);
    else if (rc < 0)
        problem(ck, "%s/%s: %s", data_dir, datadir_name(DATADIR_WINDOW),
                errno == EINVAL ? "malformed" : strerror(errno));
}

int admin_check(const char *data_dir, admin_report_fn report, admin_progress_fn progress, void *arg,
                admin_check_result_t *out)
{
    char storedir[PATH_LEN], logdir[PATH_LEN];
    admin_check_result_t res = {0};
    check_t ck = {
        .report = report, .progress = progress, .arg = arg, .res = &res, .logdir = logdir};
    store_t *st = NULL;
    store_info_t si = {0};
    log_info_t li;
    uint64_t *bases = NULL;
    uint8_t fsecret[KEYHASH_SECRET_LEN], ssecret[KEYHASH_SECRET_LEN];
    int rc = ADMIN_ERROR;

    entry_of(storedir, data_dir, DATADIR_STORE);
    entry_of(logdir, data_dir, DATADIR_LOG);
    if (log_describe(logdir, &li, &bases) != LOG_OK) {
        say(report, arg, 1, "log: cannot list %s: %s", logdir, strerror(errno));
        goto out;
    }
    res.segments = li.segments;
    res.log_bytes = li.bytes;
    res.first_offset = li.first_offset;
    say(report, arg, 0, "log: %" PRIu64 " segments, %" PRIu64 " bytes, first offset %" PRIu64,
        li.segments, li.bytes, li.first_offset);
    int64_t left = storeswap_leftovers(data_dir, 0);
    if (left > 0) /* never DIR/store: information, not a problem */
        say(report, arg, 0,
            "store: %lld leftover %s/%s* of a rebuild cut short: not the store, ignored; the "
            "next `ingestd serve` or `ingestd rebuild` removes it",
            (long long)left, data_dir, DATADIR_REBUILD_PREFIX);

    store_options_t so = {.read_only = true};
    int src = store_open(storedir, &so, &st);
    if (src == STORE_VERSION) {
        /* Not damage: a data dir of an older release, migrated by the next start. */
        say(report, arg, 0,
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
        say(report, arg, 0,
            "store: the secret is not recorded yet (its commit was lost); the next start records "
            "%s/secret's",
            data_dir);
    else if (!store_has_secret) {
        problem(&ck, "store: cannot read the secret, in the store or in %s/secret", data_dir);
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
    say(report, arg, 0, "log: %" PRIu64 " records, offsets %" PRIu64 "..%" PRIu64, res.records,
        res.first_offset, res.next_offset);
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
        say(report, arg, 0,
            "store: %" PRIu64 " keys were carried by per-source budgets (older log offsets at "
            "the young end)",
            ck.carried);
    if (ck.retained_away > 0)
        say(report, arg, 0,
            "store: %" PRIu64 " keys of the window name records that log retention deleted: "
            "they still deduplicate, but `ingestd rebuild` could not restore them (it refuses "
            "unless --allow-shrink)",
            ck.retained_away);
    if (ck.in_checkpoint > 0)
        say(report, arg, 0,
            "store: %" PRIu64 " keys belong to a checkpoint still being written (their "
            "sequence entries come with its last transaction)",
            ck.in_checkpoint);
    /* A checkpoint deletes evicted keys ahead of their sequence entries (commit/checkpoint.c). */
    uint64_t evicting = ck.seq_below - ck.keys_below;
    if (evicting > 0)
        say(report, arg, 0,
            "store: %" PRIu64 " sequence entries belong to evictions still being written "
            "(their keys are gone already; the next start finishes them)",
            evicting);
    if (ck.seq_entries - evicting != ck.key_entries - ck.in_checkpoint)
        problem(&ck, "store: %" PRIu64 " keys but %" PRIu64 " sequence entries",
                ck.key_entries - ck.in_checkpoint, ck.seq_entries - evicting);
    say(report, arg, 0,
        "store: %" PRIu64 " keys, applied offset %" PRIu64 ", map %" PRIu64 " bytes (%" PRIu64
        " used)",
        si.keys, si.applied, si.map_size, si.used_bytes);
    if (secret_read(data_dir, fsecret) != 1)
        problem(&ck, "secret: %s/secret is missing or not %d bytes", data_dir, KEYHASH_SECRET_LEN);
    else if (store_has_secret && memcmp(fsecret, ssecret, sizeof(fsecret)) != 0)
        problem(&ck,
                "secret: %s/secret differs from the store's: they belong to different data "
                "dirs",
                data_dir);
done:
    rc = res.problems ? ADMIN_PROBLEMS : ADMIN_OK;
out:
    log_reader_close(ck.r);
    log_reader_close(ck.r2);
    store_close(st);
    free(bases);
    if (res.problems > 100)
        say(report, arg, 1, "... %" PRIu64 " problems in all", res.problems);
    if (out)
        *out = res;
    return rc;
}

/* ---- rebuild ---- */

/* The data dir's secret: its file, or else the old store's (then written back to the file). */
static int find_secret(const char *data_dir, const char *old_store, uint8_t secret[16],
                       admin_report_fn report, void *arg)
{
    if (secret_read(data_dir, secret) == 1)
        return 0;
    store_t *st = NULL;
    store_options_t so = {.read_only = true, .older_ok = true}; /* the secret of any format */
    if (store_open(old_store, &so, &st) == STORE_OK && store_secret(st, NULL, secret) == STORE_OK) {
        store_close(st);
        say(report, arg, 0, "secret: taken from the old store");
        return 0;
    }
    store_close(st);
    say(report, arg, 1,
        "secret: %s/secret is missing and no readable store holds it: keys of the log could not "
        "be matched by new events; restore the secret file first",
        data_dir);
    return -1;
}

/* The caller's progress callback and its argument, for commit_options_t.replay_progress. */
struct replay_progress {
    admin_progress_fn fn;
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
                             admin_report_fn report, void *arg)
{
    store_options_t so = {0};
    store_t *st = NULL;
    uint8_t got[KEYHASH_SECRET_LEN];

    if (fsutil_mkdir(storedir) != 0) {
        say(report, arg, 1, "creating %s: %s", storedir, strerror(errno));
        return -1;
    }
    if (store_open(storedir, &so, &st) != STORE_OK || store_secret(st, secret, got) != STORE_OK ||
        store_begin(st) != STORE_OK || store_set_applied(st, first) != STORE_OK ||
        store_commit(st) != STORE_OK) {
        say(report, arg, 1, "creating the new store: %s", store_detail(st));
        store_close(st);
        return -1;
    }
    store_close(st);
    if (secret_read(data_dir, got) == 1)
        return 0;
    if (secret_write(data_dir, secret) != 0) {
        say(report, arg, 1, "writing %s/%s: %s", data_dir, datadir_name(DATADIR_SECRET),
            strerror(errno));
        return -1;
    }
    return 0;
}

/* Replays the retained log from `from` into the new store `side` through commit_open (the lock is
 * held all along: no server may start meanwhile); *keys gets the window's keys after it. 0 or -1
 * (reported). */
static int rebuild_replay(const char *data_dir, const char *side, const winsettings_t *w,
                          uint64_t from, uint64_t *keys, admin_report_fn report,
                          admin_progress_fn progress, void *arg)
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

    say(report, arg, 0, "replaying the log from offset %" PRIu64 " ...", from);
    if (commit_open(&co, &c, err, sizeof(err)) != COMMIT_OK) {
        say(report, arg, 1, "rebuild failed: %s", err);
        return -1;
    }
    commit_stats_t s;
    commit_get_stats(c, &s);
    commit_close(c);
    *keys = s.keys;
    say(report, arg, 0,
        "store: rebuilt from %" PRIu64 " log records; %" PRIu64 " keys in the window",
        s.replayed_at_open, s.keys);
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
                       admin_report_fn report, void *arg)
{
    int grc = genset_open_read_only(gensdir, &sv->gs);
    if (grc != GEN_OK) {
        say(report, arg, 0, "generations: cannot open %s (%s): replaying the whole log", gensdir,
            gen_strerror(grc));
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
            say(report, arg, 0, "generation %s: %s: replaying the whole log", name,
                gen_strerror(grc));
            rc = -1;
            break;
        }
        sv->sealed += info.keys;
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

/* The old young store: its keys, those retention took, those it carried. 0 or -1. */
static int survey_young(survey_t *sv, const char *storedir)
{
    store_options_t so = {.read_only = true};
    store_t *st = NULL;
    store_info_t si;
    if (store_open(storedir, &so, &st) != STORE_OK) {
        store_close(st);
        return -1;
    }
    int rc = store_scan(st, &si, on_old_seq, NULL, sv);
    store_close(st);
    /* Keys of evictions a checkpoint left half done were counted: they go at the next start. */
    return rc == STORE_OK ? 0 : -1;
}

static int survey(survey_t *sv, const char *storedir, admin_report_fn report, void *arg)
{
    char gensdir[PATH_LEN];
    uint64_t max_offset = 0;
    bool have = false;
    entry_of(gensdir, storedir, DATADIR_GENS);
    sv->keep_gens = survey_gens(sv, gensdir, &max_offset, report, arg) == 0;
    have = sv->keep_gens && sv->sealed > 0;
    sv->from = have && max_offset + 1 > sv->first ? max_offset + 1 : sv->first;
    if (sv->keep_gens && survey_young(sv, storedir) != 0) {
        say(report, arg, 0, "store: the old store cannot be read: replaying the whole log");
        sv->keep_gens = false;
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
                             admin_report_fn report, void *arg)
{
    char from[PATH_LEN], to[PATH_LEN], odir[PATH_LEN], ndir[PATH_LEN];
    entry_of(odir, storedir, DATADIR_GENS);
    entry_of(ndir, side, DATADIR_GENS);
    if (mkdir(ndir, 0755) != 0) {
        say(report, arg, 1, "creating %s: %s", ndir, strerror(errno));
        return -1;
    }
    genset_view_t *v = genset_view(sv->gs);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < genset_view_count(v); i++) {
        gen_info_t info;
        char name[GEN_NAME_MAX];
        gen_get_info(genset_view_gen(v, i), &info);
        gen_file_name(info.id, name, sizeof(name));
        path_of(from, odir, name);
        path_of(to, ndir, name);
        if (link(from, to) != 0) {
            say(report, arg, 1, "linking %s to %s: %s", from, to, strerror(errno));
            rc = -1;
        }
    }
    if (rc == 0 && genset_view_count(v) > 0)
        say(report, arg, 0, "generations: %zu files kept, sealed below sequence %" PRIu64,
            genset_view_count(v), sv->end_seq);
    genset_view_release(v);
    if (rc == 0 && (fsutil_sync_dir(ndir) != 0 || fsutil_sync_dir(side) != 0)) {
        say(report, arg, 1, "syncing %s: %s", ndir, strerror(errno));
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
                        const uint8_t *secret, admin_report_fn report, void *arg)
{
    char logdir[PATH_LEN];
    store_options_t so = {0};
    store_t *st = NULL;
    log_reader_t *r = NULL;
    uint64_t tagged_from = 0, skipped = 0;
    int rc = -1;
    entry_of(logdir, data_dir, DATADIR_LOG);
    if (retag_read_from(data_dir, &tagged_from) < 0) {
        say(report, arg, 1, "reading %s/%s: %s", data_dir, datadir_name(DATADIR_TAGGED_FROM),
            strerror(errno));
        return -1;
    }
    if (store_open(storedir, &so, &st) != STORE_OK || store_begin(st) != STORE_OK)
        goto fail;
    if (sv->end_seq > 0 &&
        (store_advance_seq(st, sv->end_seq) != STORE_OK || store_seal(st, sv->end_seq) != STORE_OK))
        goto abort;
    for (size_t i = 0; i < sv->ncarry; i++) {
        log_record_t rec;
        int lrc = read_record(logdir, secret, tagged_from, sv->carry[i].offset, &rec, &r);
        if (lrc != LOG_OK) {
            say(report, arg, 1, "log: offset %" PRIu64 ": %s", sv->carry[i].offset,
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
    if (store_set_applied(st, sv->from) != STORE_OK || store_commit(st) != STORE_OK)
        goto fail;
    if (sv->ncarry > 0)
        say(report, arg, 0,
            "store: %zu keys carried by per-source budgets put back from their log records",
            sv->ncarry - (size_t)skipped);
    if (skipped > 0)
        say(report, arg, 0,
            "store: %" PRIu64 " keys of the old store disagree with their log records: left out",
            skipped);
    rc = 0;
    goto out;
abort:
    store_abort(st);
fail:
    say(report, arg, 1, "seeding the new store: %s", store_detail(st));
out:
    log_reader_close(r);
    store_close(st);
    return rc;
}

/* Whether the rebuild may go on: it refuses to shrink the window unless allowed. */
static bool rebuild_allowed(const survey_t *sv, bool allow_shrink, admin_report_fn report,
                            void *arg)
{
    if (sv->keep_gens)
        say(report, arg, 0,
            "window before: %" PRIu64 " keys (%" PRIu64 " in generations, %" PRIu64
            " in the young store); %" PRIu64 " of them name records log retention deleted",
            sv->young + sv->sealed, sv->sealed, sv->young, sv->lost);
    if (sv->lost == 0 && !sv->unknown)
        return true;
    if (allow_shrink) {
        if (sv->unknown)
            say(report, arg, 0,
                "--allow-shrink: the window keeps only the keys of the log from offset %" PRIu64,
                sv->first);
        else
            say(report, arg, 0, "--allow-shrink: the window loses %" PRIu64 " keys", sv->lost);
        return true;
    }
    if (sv->unknown)
        say(report, arg, 1,
            "the old store or its generations cannot be read whole, and log retention deleted "
            "the records before offset %" PRIu64 ": rebuilding from the log would forget the "
            "keys only those records held, and acknowledged ids would be accepted again. "
            "Restore the store from a backup, or run rebuild with --allow-shrink to accept that",
            sv->first);
    else
        say(report, arg, 1,
            "%" PRIu64 " keys of the window name records log retention deleted: a rebuild "
            "cannot give them back, and their ids would be accepted again. Keep the old store "
            "(nothing was changed), or run rebuild with --allow-shrink to accept that",
            sv->lost);
    return false;
}

/* The new store wholly durable before it is swapped in: LMDB flushed (the replay's last commit
 * may have left its meta page unsynced), the names in its directory and gens/ fsynced (its
 * files' data is: LMDB's by the flush, the generation files' by their seal). 0 or -1. */
static int rebuild_durable(const char *side, admin_report_fn report, void *arg)
{
    store_options_t so = {0};
    store_t *st = NULL;
    if (store_open(side, &so, &st) != STORE_OK || store_flush(st) != STORE_OK) {
        say(report, arg, 1, "flushing the new store %s: %s", side, store_detail(st));
        store_close(st);
        return -1;
    }
    store_close(st);
    if (storeswap_sync_sibling(side) != 0) {
        say(report, arg, 1, "syncing %s: %s", side, strerror(errno));
        return -1;
    }
    return 0;
}

/* Swaps the new store `side` with DIR/store (storage/window/storeswap.h). 0; -1 when nothing
 * changed (reported); -2 when the exchange was done but the data dir's fsync failed (reported):
 * both stores must then stay, as a power loss may yet undo the exchange. */
static int rebuild_swap(const char *data_dir, const char *side, admin_report_fn report, void *arg)
{
    int exchanged = 0;
    if (storeswap_exchange(data_dir, side, &exchanged) == 0) {
        say(report, arg, 0, "store: the rebuilt store took the old one's place (%s)",
            exchanged ? "one atomic exchange" : "there was none");
        return 0;
    }
    int err = errno;
    if (exchanged) {
        say(report, arg, 1,
            "%s/store is the rebuilt store, but syncing %s failed: %s. The old store is kept in "
            "%s: a power loss could still bring it back as the store. Remove it once `ingestd "
            "check` passes after the next start",
            data_dir, data_dir, strerror(err), side);
        return -2;
    }
    if (err == EINVAL || err == ENOSYS)
        say(report, arg, 1,
            "the file system of %s cannot exchange two directories atomically "
            "(renameat2 RENAME_EXCHANGE: %s), which rebuild needs so that a crash never leaves a "
            "partial store; nothing was changed. With the server stopped, copy the data dir to a "
            "local file system that can (ext4, xfs, btrfs, tmpfs), rebuild the copy there and "
            "move it back",
            data_dir, strerror(err));
    else
        say(report, arg, 1, "swapping %s with %s/store: %s; nothing was changed", side, data_dir,
            strerror(err));
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
                         admin_report_fn report, admin_progress_fn progress, void *arg)
{
    uint8_t secret[KEYHASH_SECRET_LEN];
    int64_t left = storeswap_leftovers(data_dir, 1);
    if (left < 0) {
        say(report, arg, 1, "removing a leftover %s/%s* of an earlier rebuild: %s", data_dir,
            DATADIR_REBUILD_PREFIX, strerror(errno));
        return -1;
    }
    if (left > 0)
        say(report, arg, 0, "removed %lld leftover %s/%s* of an earlier rebuild cut short",
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
        say(report, arg, 0,
            "could not remove the old store %s: %s (the next start or rebuild removes it)", side,
            strerror(errno));
    return 0;
}

int admin_rebuild(const char *data_dir, const admin_rebuild_options_t *o, admin_report_fn report,
                  admin_progress_fn progress, void *arg)
{
    char lock[PATH_LEN], storedir[PATH_LEN], logdir[PATH_LEN], side[PATH_LEN];
    log_info_t li;
    survey_t sv = {0};
    uint64_t after = 0;
    int rc = ADMIN_ERROR, lockfd = -1;

    entry_of(lock, data_dir, DATADIR_LOCK);
    entry_of(storedir, data_dir, DATADIR_STORE);
    entry_of(logdir, data_dir, DATADIR_LOG);
    if (storeswap_sibling(data_dir, side, sizeof(side)) != 0) {
        say(report, arg, 1, "%s: %s", data_dir, strerror(errno));
        goto out;
    }

    lockfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lockfd < 0) {
        say(report, arg, 1, "%s: %s", lock, strerror(errno));
        goto out;
    }
    if (flock(lockfd, LOCK_EX | LOCK_NB) != 0) {
        say(report, arg, 1, "data dir %s is in use by a running server: stop it first", data_dir);
        rc = ADMIN_BUSY;
        goto out;
    }
    if (log_describe(logdir, &li, NULL) != LOG_OK || li.segments == 0) {
        say(report, arg, 1, "log: nothing to rebuild from in %s", logdir);
        goto out;
    }
    sv.first = li.first_offset;
    if (survey(&sv, storedir, report, arg) != 0)
        goto out;
    if (!rebuild_allowed(&sv, o->allow_shrink, report, arg)) {
        rc = ADMIN_SHRINK;
        goto out;
    }
    if (rebuild_store(&sv, data_dir, storedir, side, &o->window, &after, report, progress, arg) !=
        0)
        goto out;
    if (sv.keep_gens)
        say(report, arg, 0,
            "window after: %" PRIu64 " keys (before: %" PRIu64 "; the window's own rules may "
            "have aged keys out meanwhile)",
            after, sv.young + sv.sealed);
    rc = ADMIN_OK;
out:
    survey_free(&sv);
    if (lockfd >= 0)
        close(lockfd);
    return rc;
}

/* ---- backup ---- */

/* Bytes copied so far of about `total`, for the progress callback. */
struct copied {
    admin_progress_fn fn;
    void *arg;
    uint64_t done, total;
};

/* Copies the first `len` bytes of src to a new file dst, fsynced. */
static int copy_prefix(const char *src, const char *dst, uint64_t len, struct copied *cp)
{
    char buf[1 << 16];
    int in = open(src, O_RDONLY | O_CLOEXEC), out = -1, rc = -1;
    if (in < 0)
        return -1;
    out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0)
        goto done;
    while (len > 0) {
        size_t want = len < sizeof(buf) ? (size_t)len : sizeof(buf);
        ssize_t n = read(in, buf, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            goto done; /* shorter than expected */
        if (fsutil_write_all(out, buf, (size_t)n) != 0)
            goto done;
        len -= (uint64_t)n;
        cp->done += (uint64_t)n;
        if (cp->fn) /* one call per 64 KiB buffer: the callee throttles */
            cp->fn(cp->arg, "copying the log", "bytes", cp->done, cp->total);
    }
    rc = fsync(out);
done:
    if (out >= 0)
        close(out);
    close(in);
    return rc;
}

static int dir_empty_or_missing(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d)
        return errno == ENOENT ? 1 : 0;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            closedir(d);
            return 0;
        }
    }
    closedir(d);
    return 1;
}

typedef struct {
    const gen_t *g;
    gen_info_t info;
} pick_t;

static int cmp_pick(const void *a, const void *b)
{
    return gen_id_cmp(&((const pick_t *)a)->info.id, &((const pick_t *)b)->info.id);
}

/* Adds to picks[*n] the generations of `v` sealed below `sealed_below`. */
static void pick_from(const genset_view_t *v, uint64_t sealed_below, pick_t *picks, size_t *n)
{
    for (size_t i = 0; i < genset_view_count(v); i++) {
        pick_t p = {.g = genset_view_gen(v, i)};
        gen_get_info(p.g, &p.info);
        if (p.info.id.end <= sealed_below)
            picks[(*n)++] = p;
    }
}

/*
 * Copies the generations that belong with the LMDB copy: those sealed below
 * its bound, from the set as it was before the copy (`before`, held open, so
 * a file merged or dropped since is still readable) and after it (for seals
 * in between). Merges in between can leave one range in both: the wider one
 * is taken. Returns 0, or -1 with a report (a gap: the window changed too
 * much during the copy; run backup again).
 */
static int backup_gens(genset_t *before, const char *src, const char *dst, uint64_t sealed_below,
                       admin_report_fn report, void *arg)
{
    genset_t *after = NULL;
    if (genset_open_read_only(src, &after) != GEN_OK) {
        say(report, arg, 1, "generations: cannot open %s", src);
        return -1;
    }
    genset_view_t *v1 = genset_view(before), *v2 = genset_view(after);
    size_t n = 0, kept = 0;
    pick_t *picks = calloc(genset_view_count(v1) + genset_view_count(v2) + 1, sizeof(*picks));
    int rc = picks && (fsutil_mkdir(dst) == 0 || errno == EEXIST) ? 0 : -1;
    if (rc == 0) {
        pick_from(v1, sealed_below, picks, &n);
        pick_from(v2, sealed_below, picks, &n);
        qsort(picks, n, sizeof(*picks), cmp_pick);
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (kept > 0 && picks[i].info.id.end <= picks[kept - 1].info.id.end)
            continue; /* covered by the one before */
        if (kept > 0 && picks[i].info.id.first != picks[kept - 1].info.id.end)
            rc = -1;
        picks[kept++] = picks[i];
    }
    if (rc == 0 && kept > 0 && picks[kept - 1].info.id.end != sealed_below)
        rc = -1;
    if (rc != 0)
        say(report, arg, 1,
            "generations: the window changed too much during the copy (a gap); "
            "run backup again");
    for (size_t i = 0; rc == 0 && i < kept; i++)
        if (gen_copy(picks[i].g, dst) != GEN_OK) {
            say(report, arg, 1, "generations: copying to %s: %s", dst, strerror(errno));
            rc = -1;
        }
    if (rc == 0 && kept > 0)
        say(report, arg, 0, "generations: %zu files copied, sealed below sequence %" PRIu64, kept,
            sealed_below);
    free(picks);
    genset_view_release(v1);
    genset_view_release(v2);
    genset_close(after);
    return rc;
}

/* Where a backup goes: to_dir empty or new, with store/ and log/ in it. 0 or -1 (reported). */
static int backup_make_dirs(const char *to_dir, const char *dst_store, const char *dst_log,
                            admin_report_fn report, void *arg)
{
    if (!dir_empty_or_missing(to_dir)) {
        say(report, arg, 1, "%s exists and is not empty", to_dir);
        return -1;
    }
    /* Durably, to_dir's name in its parent too: "all fsynced" covers the directories. */
    if ((fsutil_mkdir(to_dir) != 0 && errno != EEXIST) || fsutil_mkdir(dst_store) != 0 ||
        fsutil_mkdir(dst_log) != 0) {
        say(report, arg, 1, "creating %s: %s", to_dir, strerror(errno));
        return -1;
    }
    return 0;
}

/*
 * The store's part: a compacted copy of LMDB (its info into *si), then the generations it
 * sealed, from a view taken before the copy and one after (backup_gens). 0 or -1 (reported).
 */
static int backup_store(const char *src_store, const char *dst_store, store_info_t *si,
                        admin_report_fn report, void *arg)
{
    char src_gens[PATH_LEN], dst_gens[PATH_LEN];
    /* An older format is copied as it is: the start that opens the restored copy migrates it. */
    store_options_t so = {.read_only = true, .older_ok = true};
    store_t *st = NULL;
    genset_t *gens = NULL;
    int rc = -1;

    entry_of(src_gens, src_store, DATADIR_GENS);
    entry_of(dst_gens, dst_store, DATADIR_GENS);
    if (genset_open_read_only(src_gens, &gens) != GEN_OK) {
        say(report, arg, 1, "generations: cannot open %s", src_gens);
        return -1;
    }
    int src_rc = store_open(src_store, &so, &st);
    if (src_rc == STORE_OK)
        src_rc = store_copy(st, dst_store);
    store_close(st);
    st = NULL;
    if (src_rc != STORE_OK) {
        say(report, arg, 1, "copying the LMDB store: %s", store_strerror(src_rc));
        goto out;
    }
    if (store_open(dst_store, &so, &st) != STORE_OK || store_get_info(st, si) != STORE_OK) {
        say(report, arg, 1, "reading the copied store: %s", store_detail(st));
        goto out;
    }
    say(report, arg, 0,
        "store: compacted copy taken at applied offset %" PRIu64 " (%" PRIu64 " keys)", si->applied,
        si->keys);
    rc = backup_gens(gens, src_gens, dst_gens, si->sealed_below, report, arg);
out:
    store_close(st);
    genset_close(gens);
    return rc;
}

/*
 * The log's part: every segment up to the record at `cut`, the last one cut there (closed
 * segments are immutable; the one being written is read only up to the cut). *copied and
 * *segs say how much. 0 or -1 (reported).
 */
static int backup_log(const char *src_log, const char *dst_log, uint64_t cut, uint64_t *copied,
                      uint64_t *segs, admin_report_fn report, admin_progress_fn progress, void *arg)
{
    char src[PATH_LEN], dst[PATH_LEN];
    log_reader_t *r = NULL;
    uint64_t *bases = NULL;
    log_info_t li;
    int rc = -1;

    if (log_describe(src_log, &li, &bases) != LOG_OK || li.segments == 0) {
        say(report, arg, 1, "log: cannot list %s", src_log);
        return -1;
    }
    uint64_t cut_base = 0, cut_pos = 0;
    int lrc = log_reader_open(src_log, cut, &r);
    if (lrc != LOG_OK) {
        say(report, arg, 1, "log: offset %" PRIu64 ": %s", cut, log_strerror(lrc));
        goto out;
    }
    log_reader_tell(r, &cut_base, &cut_pos);
    struct copied cp = {progress, arg, 0, li.bytes}; /* the cut makes the copy a bit shorter */
    for (size_t i = 0; i < li.segments && bases[i] <= cut_base; i++) {
        char name[64];
        struct stat sb;
        snprintf(name, sizeof(name), "%020" PRIu64 ".seg", bases[i]);
        path_of(src, src_log, name);
        path_of(dst, dst_log, name);
        uint64_t len = cut_pos;
        if (bases[i] != cut_base && stat(src, &sb) == 0)
            len = (uint64_t)sb.st_size;
        else if (bases[i] != cut_base)
            goto io;
        if (copy_prefix(src, dst, len, &cp) != 0)
            goto io;
        *copied += len;
        (*segs)++;
    }
    rc = 0;
    goto out;
io:
    say(report, arg, 1, "copying %s: %s", src, strerror(errno));
out:
    log_reader_close(r);
    free(bases);
    return rc;
}

/* The secret, ACKED when the cut passed the copy's applied offset, and the directories synced.
 * 0 or -1 (reported). */
static int backup_finish(const char *to_dir, const char *dst_store, const char *dst_log,
                         const uint8_t secret[KEYHASH_SECRET_LEN], uint64_t cut, uint64_t applied,
                         admin_report_fn report, void *arg)
{
    if (secret_write(to_dir, secret) != 0)
        goto io;
    /* The records past the copy's applied offset were acknowledged: readers of the backup
     * (`log cat`) show them, and a server started on it replays them. */
    if (cut > applied && commit_write_acked_file(to_dir, cut) != 0)
        goto io;
    if (fsutil_sync_dir(dst_log) != 0 || fsutil_sync_dir(dst_store) != 0 ||
        fsutil_sync_dir(to_dir) != 0)
        goto io;
    return 0;
io:
    say(report, arg, 1, "copying to %s: %s", to_dir, strerror(errno));
    return -1;
}

/* DIR/TAGGED_FROM, when there is one: without it the copy's records would all be read as older
 * than tags (correct, as tagging a tagged key changes nothing, but each read then scans them).
 * 0 or -1 (reported). */
static int backup_tagged_from(const char *data_dir, const char *to_dir, admin_report_fn report,
                              void *arg)
{
    uint64_t from;
    int rc = retag_read_from(data_dir, &from);
    if (rc == 0)
        rc = retag_write_from(to_dir, from);
    if (rc < 0)
        say(report, arg, 1, "copying %s/%s: %s", data_dir, datadir_name(DATADIR_TAGGED_FROM),
            strerror(errno));
    return rc < 0 ? -1 : 0;
}

int admin_backup(const char *data_dir, const char *to_dir, admin_report_fn report,
                 admin_progress_fn progress, void *arg)
{
    char src_store[PATH_LEN], src_log[PATH_LEN], dst_store[PATH_LEN], dst_log[PATH_LEN];
    store_info_t si;
    uint8_t secret[KEYHASH_SECRET_LEN];
    uint64_t copied = 0, segs = 0, acked;

    entry_of(src_store, data_dir, DATADIR_STORE);
    entry_of(src_log, data_dir, DATADIR_LOG);
    entry_of(dst_store, to_dir, DATADIR_STORE);
    entry_of(dst_log, to_dir, DATADIR_LOG);
    if (backup_make_dirs(to_dir, dst_store, dst_log, report, arg) != 0)
        return ADMIN_ERROR;
    if (secret_read(data_dir, secret) != 1) {
        say(report, arg, 1, "%s/secret is missing or unreadable", data_dir);
        return ADMIN_ERROR;
    }
    /*
     * LMDB first, then the log, cut at what was acknowledged by then: the copy's applied offset
     * (its last checkpoint) or, further, what the server says it acknowledged since (ACKED,
     * read after the copy). A server started on the backup replays the difference.
     */
    if (backup_store(src_store, dst_store, &si, report, arg) != 0)
        return ADMIN_ERROR;
    uint64_t cut = si.applied;
    if (commit_read_acked(data_dir, &acked) == 0 && acked > cut)
        cut = acked;
    if (backup_log(src_log, dst_log, cut, &copied, &segs, report, progress, arg) != 0 ||
        backup_tagged_from(data_dir, to_dir, report, arg) != 0 ||
        backup_finish(to_dir, dst_store, dst_log, secret, cut, si.applied, report, arg) != 0)
        return ADMIN_ERROR;
    say(report, arg, 0, "log: %" PRIu64 " segments, %" PRIu64 " bytes, up to offset %" PRIu64, segs,
        copied, cut);
    return ADMIN_OK;
}
