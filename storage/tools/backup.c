/* backup.c: `ingestd backup`, a consistent copy of a data dir, also while a server runs. */
#include "storage/tools/backup.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/stat.h>

#include "storage/commit/commit.h"
#include "storage/fsutil.h"
#include "storage/log/log.h"
#include "storage/secret.h"
#include "storage/tools/internal.h"
#include "storage/window/genset.h"
#include "storage/window/keyhash.h"
#include "storage/window/retag.h"
#include "storage/window/store.h"

/* Bytes copied so far of about `total`, for the progress callback. */
struct copied {
    tools_progress_fn fn;
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
                       tools_report_fn report, void *arg)
{
    genset_t *after = NULL;
    if (genset_open_read_only(src, &after) != GEN_OK) {
        tools_say(report, arg, 1, "generations: cannot open %s", src);
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
        tools_say(report, arg, 1,
                  "generations: the window changed too much during the copy (a gap); "
                  "run backup again");
    for (size_t i = 0; rc == 0 && i < kept; i++)
        if (gen_copy(picks[i].g, dst) != GEN_OK) {
            tools_say(report, arg, 1, "generations: copying to %s: %s", dst, strerror(errno));
            rc = -1;
        }
    if (rc == 0 && kept > 0)
        tools_say(report, arg, 0, "generations: %zu files copied, sealed below sequence %" PRIu64,
                  kept, sealed_below);
    free(picks);
    genset_view_release(v1);
    genset_view_release(v2);
    genset_close(after);
    return rc;
}

/* Where a backup goes: to_dir empty or new, with store/ and log/ in it. 0 or -1 (reported). */
static int backup_make_dirs(const char *to_dir, const char *dst_store, const char *dst_log,
                            tools_report_fn report, void *arg)
{
    if (!dir_empty_or_missing(to_dir)) {
        tools_say(report, arg, 1, "%s exists and is not empty", to_dir);
        return -1;
    }
    /* Durably, to_dir's name in its parent too: "all fsynced" covers the directories. */
    if ((fsutil_mkdir(to_dir) != 0 && errno != EEXIST) || fsutil_mkdir(dst_store) != 0 ||
        fsutil_mkdir(dst_log) != 0) {
        tools_say(report, arg, 1, "creating %s: %s", to_dir, strerror(errno));
        return -1;
    }
    return 0;
}

/*
 * The store's part: a compacted copy of LMDB (its info into *si), then the generations it
 * sealed, from a view taken before the copy and one after (backup_gens). 0 or -1 (reported).
 */
static int backup_store(const backup_options_t *o, const char *src_store, const char *dst_store,
                        store_info_t *si)
{
    tools_report_fn report = o->report;
    void *arg = o->arg;
    char src_gens[TOOLS_PATH_LEN], dst_gens[TOOLS_PATH_LEN];
    /* An older format is copied as it is: the start that opens the restored copy migrates it. */
    store_options_t so = {.read_only = true, .older_ok = true};
    store_t *st = NULL;
    genset_t *gens = NULL;
    int rc = -1;

    tools_entry(src_gens, src_store, DATADIR_GENS);
    tools_entry(dst_gens, dst_store, DATADIR_GENS);
    if (genset_open_read_only(src_gens, &gens) != GEN_OK) {
        tools_say(report, arg, 1, "generations: cannot open %s", src_gens);
        return -1;
    }
    /* Before the copy (not after it): a seal the hook makes is then in the copy's bound, and
     * only the second look at the generations has its file, the case that look is for. */
    if (o->between_views)
        o->between_views(o->hook_arg);
    int src_rc = store_open(src_store, &so, &st);
    if (src_rc == STORE_OK)
        src_rc = store_copy(st, dst_store);
    store_close(st);
    st = NULL;
    if (src_rc != STORE_OK) {
        tools_say(report, arg, 1, "copying the LMDB store: %s", store_strerror(src_rc));
        goto out;
    }
    if (store_open(dst_store, &so, &st) != STORE_OK || store_get_info(st, si) != STORE_OK) {
        tools_say(report, arg, 1, "reading the copied store: %s", store_detail(st));
        goto out;
    }
    tools_say(report, arg, 0,
              "store: compacted copy taken at applied offset %" PRIu64 " (%" PRIu64 " keys)",
              si->applied, si->keys);
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
                      uint64_t *segs, tools_report_fn report, tools_progress_fn progress, void *arg)
{
    char src[TOOLS_PATH_LEN], dst[TOOLS_PATH_LEN];
    log_reader_t *r = NULL;
    uint64_t *bases = NULL;
    log_info_t li;
    int rc = -1;

    if (log_describe(src_log, &li, &bases) != LOG_OK || li.segments == 0) {
        tools_say(report, arg, 1, "log: cannot list %s", src_log);
        return -1;
    }
    uint64_t cut_base = 0, cut_pos = 0;
    int lrc = log_reader_open(src_log, cut, &r);
    if (lrc != LOG_OK) {
        tools_say(report, arg, 1, "log: offset %" PRIu64 ": %s", cut, log_strerror(lrc));
        goto out;
    }
    log_reader_tell(r, &cut_base, &cut_pos);
    struct copied cp = {progress, arg, 0, li.bytes}; /* the cut makes the copy a bit shorter */
    for (size_t i = 0; i < li.segments && bases[i] <= cut_base; i++) {
        char name[64];
        struct stat sb;
        snprintf(name, sizeof(name), "%020" PRIu64 ".seg", bases[i]);
        tools_path(src, src_log, name);
        tools_path(dst, dst_log, name);
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
    tools_say(report, arg, 1, "copying %s: %s", src, strerror(errno));
out:
    log_reader_close(r);
    free(bases);
    return rc;
}

/* The secret, ACKED when the cut passed the copy's applied offset, and the directories synced.
 * 0 or -1 (reported). */
static int backup_finish(const char *to_dir, const char *dst_store, const char *dst_log,
                         const uint8_t secret[KEYHASH_SECRET_LEN], uint64_t cut, uint64_t applied,
                         tools_report_fn report, void *arg)
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
    tools_say(report, arg, 1, "copying to %s: %s", to_dir, strerror(errno));
    return -1;
}

/* DIR/TAGGED_FROM, when there is one: without it the copy's records would all be read as older
 * than tags (correct, as tagging a tagged key changes nothing, but each read then scans them).
 * 0 or -1 (reported). */
static int backup_tagged_from(const char *data_dir, const char *to_dir, tools_report_fn report,
                              void *arg)
{
    uint64_t from;
    int rc = retag_read_from(data_dir, &from);
    if (rc == 0)
        rc = retag_write_from(to_dir, from);
    if (rc < 0)
        tools_say(report, arg, 1, "copying %s/%s: %s", data_dir, datadir_name(DATADIR_TAGGED_FROM),
                  strerror(errno));
    return rc < 0 ? -1 : 0;
}

int backup_run(const backup_options_t *o)
{
    const char *data_dir = o->data_dir, *to_dir = o->to_dir;
    tools_report_fn report = o->report;
    tools_progress_fn progress = o->progress;
    void *arg = o->arg;
    char src_store[TOOLS_PATH_LEN], src_log[TOOLS_PATH_LEN], dst_store[TOOLS_PATH_LEN],
        dst_log[TOOLS_PATH_LEN];
    store_info_t si;
    uint8_t secret[KEYHASH_SECRET_LEN];
    uint64_t copied = 0, segs = 0, acked;

    tools_entry(src_store, data_dir, DATADIR_STORE);
    tools_entry(src_log, data_dir, DATADIR_LOG);
    tools_entry(dst_store, to_dir, DATADIR_STORE);
    tools_entry(dst_log, to_dir, DATADIR_LOG);
    /* What can be refused is refused before the target is made: a retry must find it free. */
    if (secret_read(data_dir, secret) != 1) {
        tools_say(report, arg, 1, "%s/%s is missing or unreadable", data_dir,
                  datadir_name(DATADIR_SECRET));
        return TOOLS_ERROR;
    }
    if (backup_make_dirs(to_dir, dst_store, dst_log, report, arg) != 0)
        return TOOLS_ERROR;
    /*
     * LMDB first, then the log, cut at what was acknowledged by then: the copy's applied offset
     * (its last checkpoint) or, further, what the server says it acknowledged since (ACKED,
     * read after the copy). A server started on the backup replays the difference.
     */
    if (backup_store(o, src_store, dst_store, &si) != 0)
        return TOOLS_ERROR;
    uint64_t cut = si.applied;
    if (commit_read_acked(data_dir, &acked) == 0 && acked > cut)
        cut = acked;
    if (backup_log(src_log, dst_log, cut, &copied, &segs, report, progress, arg) != 0 ||
        backup_tagged_from(data_dir, to_dir, report, arg) != 0 ||
        backup_finish(to_dir, dst_store, dst_log, secret, cut, si.applied, report, arg) != 0)
        return TOOLS_ERROR;
    tools_say(report, arg, 0, "log: %" PRIu64 " segments, %" PRIu64 " bytes, up to offset %" PRIu64,
              segs, copied, cut);
    return TOOLS_OK;
}
