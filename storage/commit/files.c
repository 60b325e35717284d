/*
 * commit/files.c: the group commit's small files in the data dir: the hash
 * secret (DIR/secret), the acknowledged end for readers (DIR/store/ACKED),
 * lazy mode's marker (DIR/store/UNSYNCED) and where keys began carrying
 * their source's tag (DIR/TAGGED_FROM, storage/window/retag.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "storage/commit/internal.h"
#include "storage/datadir.h"
#include "storage/fsutil.h"
#include "storage/window/retag.h"
#include "storage/secret.h"

#define BOOT_ID_PROC "/proc/sys/kernel/random/boot_id"

/*
 * The secret lives in DIR/secret as well as in LMDB, so a store rebuilt from
 * the log hashes new events the way the old one did. Without a store (memory
 * mode) the file is its only home.
 */
int commit_files_load_secret(commit_t *c, store_t *store, char *errbuf, size_t errlen)
{
    uint8_t file_secret[KEYHASH_SECRET_LEN];
    int have = secret_read(c->data_dir, file_secret);
    if (have < 0) {
        errbuf_printf(errbuf, errlen, "%s/%s: %s", c->data_dir, datadir_name(DATADIR_SECRET),
                      errno == EINVAL ? "not a 16-byte secret" : strerror(errno));
        return -1;
    }
    if (!store) {
        if (have)
            memcpy(c->secret, file_secret, sizeof(file_secret));
        else if (keyhash_random(c->secret, sizeof(c->secret)) != 0) {
            errbuf_printf(errbuf, errlen, "generating the hash secret: %s", strerror(errno));
            return -1;
        }
    }
    int src = store ? store_secret(store, have ? file_secret : NULL, c->secret) : STORE_OK;
    if (src != STORE_OK) {
        errbuf_printf(errbuf, errlen, "reading the hash secret: %s", store_strerror(src));
        return -1;
    }
    if (have && memcmp(file_secret, c->secret, sizeof(file_secret)) != 0) {
        errbuf_printf(errbuf, errlen,
                      "%s/%s differs from the secret in the LMDB store: the store belongs to "
                      "another data dir",
                      c->data_dir, datadir_name(DATADIR_SECRET));
        return -1;
    }
    /* Durable before any key is hashed with it (secret_write: tmp, fsync, rename, dir fsync). */
    if (!have && secret_write(c->data_dir, c->secret) != 0) {
        errbuf_printf(errbuf, errlen, "writing %s/%s: %s", c->data_dir,
                      datadir_name(DATADIR_SECRET), strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- DIR/store/ACKED ---- */

/*
 * Tells readers outside the process (`log cat`, `log groups`) how far the log
 * is acknowledged: LMDB's applied offset lags by up to a checkpoint. Fixed
 * width, rewritten in place, never fsynced: it is only ever written after the
 * log sync it reports, so whatever version of it survives a crash is at or
 * below the durable end of the log, and a start rewrites it.
 */
static int format_acked(char buf[32], uint64_t offset)
{
    return snprintf(buf, 32, "%020llu\n", (unsigned long long)offset);
}

void commit_files_write_acked(commit_t *c, uint64_t offset)
{
    char buf[32];
    if (c->acked_fd < 0)
        return;
    int n = format_acked(buf, offset);
    if (fsutil_pwrite_all(c->acked_fd, buf, (size_t)n, 0) != 0) {
        close(c->acked_fd); /* readers fall back to LMDB's applied offset */
        c->acked_fd = -1;
    }
}

void commit_files_open_acked(commit_t *c, const char *storedir, uint64_t offset)
{
    char *path = datadir_in(storedir, DATADIR_ACKED);
    c->acked_fd = path ? open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644) : -1;
    if (c->acked_fd < 0)
        commit_notify(c, 1, "cannot write %s (%s): `log cat` will see records up to a second late",
                      path ? path : datadir_name(DATADIR_ACKED), strerror(errno));
    free(path);
    commit_files_write_acked(c, offset);
}

void commit_files_close_acked(commit_t *c)
{
    if (c->acked_fd >= 0)
        close(c->acked_fd);
    c->acked_fd = -1;
}

int commit_write_acked_file(const char *data_dir, uint64_t offset)
{
    char *path = datadir_path(data_dir, DATADIR_ACKED);
    char buf[32];
    int n = format_acked(buf, offset), rc = -1;
    if (path && fsutil_write_atomic(path, buf, (size_t)n, 0644) == 0)
        rc = 0;
    free(path);
    return rc;
}

int commit_read_acked(const char *data_dir, uint64_t *offset)
{
    char *path = datadir_path(data_dir, DATADIR_ACKED);
    char buf[32];
    int rc = -1;
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd >= 0) {
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        /* Exactly what commit_files_write_acked writes: 20 digits and a newline. */
        if (n == 21 && buf[20] == '\n') {
            uint64_t v = 0;
            int i = 0;
            for (; i < 20 && buf[i] >= '0' && buf[i] <= '9'; i++)
                v = v * 10 + (uint64_t)(buf[i] - '0');
            if (i == 20) {
                *offset = v;
                rc = 0;
            }
        }
        close(fd);
    }
    free(path);
    return rc;
}

/* ---- DIR/store/UNSYNCED: lazy mode's marker ---- */

/* Reads a small text file without its trailing newline into out. 0, or -1 with errno. */
static int read_line(const char *path, char *out, size_t cap)
{
    size_t n = 0;
    if (fsutil_read_small(path, out, cap - 1, &n) != 0)
        return -1;
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' '))
        n--;
    out[n] = '\0';
    return 0;
}

static int boot_id(const commit_t *c, char *out, size_t cap)
{
    const char *path = c->opts.boot_id_path ? c->opts.boot_id_path : BOOT_ID_PROC;
    return read_line(path, out, cap) == 0 && out[0] ? 0 : -1;
}

char *commit_files_unsynced_path(const commit_t *c)
{
    return datadir_in(c->store_dir, DATADIR_UNSYNCED);
}

/*
 * Lazy mode (STORE_SYNC_NONE) keeps DIR/store/UNSYNCED holding the boot id
 * while LMDB may have commits that never reached the disk. After a process
 * crash in the same boot those commits are in the page cache and LMDB is
 * intact. After a crash of the machine (another boot id) LMDB may be corrupt
 * with no way to tell, so it is rebuilt from the log.
 */
int commit_files_unsynced_crash(const commit_t *c, const char *marker, char *errbuf, size_t errlen)
{
    char had[64], now[64];
    if (read_line(marker, had, sizeof(had)) != 0) {
        if (errno == ENOENT)
            return 0;
        errbuf_printf(errbuf, errlen, "reading %s: %s", marker, strerror(errno));
        return -1;
    }
    if (boot_id(c, now, sizeof(now)) != 0) {
        errbuf_printf(errbuf, errlen, "reading the kernel's boot id: %s", strerror(errno));
        return -1;
    }
    return strcmp(had, now) != 0;
}

int commit_files_mark_unsynced(const commit_t *c, const char *marker, char *errbuf, size_t errlen)
{
    char id[64];
    if (boot_id(c, id, sizeof(id)) != 0 || fsutil_write_atomic(marker, id, strlen(id), 0644) != 0) {
        errbuf_printf(errbuf, errlen, "writing %s: %s", marker, strerror(errno));
        return -1;
    }
    return 0;
}

/*
 * Syncs LMDB and then removes the marker: a synced store needs no rebuild,
 * whatever happens to the machine next. `only_if_present`: do nothing (no
 * sync either) when there is no marker.
 */
void commit_files_clear_unsynced(commit_t *c, bool only_if_present)
{
    char *marker = datadir_in(c->store_dir, DATADIR_UNSYNCED);
    if (marker && (!only_if_present || access(marker, F_OK) == 0) &&
        store_flush(c->store) == STORE_OK && unlink(marker) == 0)
        fsutil_sync_dir(c->store_dir);
    free(marker);
}

/* ---- DIR/TAGGED_FROM: where keys began carrying their source's tag ---- */

int commit_files_open_tagged(commit_t *c, uint64_t next_offset, char *errbuf, size_t errlen)
{
    uint64_t from;
    int rc = retag_read_from(c->data_dir, &from);
    c->retagged = c->retag_nosource = 0;
    if (rc < 0) {
        errbuf_printf(errbuf, errlen, "reading %s/%s: %s", c->data_dir,
                      datadir_name(DATADIR_TAGGED_FROM),
                      errno == EINVAL ? "malformed" : strerror(errno));
        return -1;
    }
    /* None yet: the first open by a binary that tags. Every record so far is untagged, and the
     * file must be durable before the first tagged one is appended. After an older release ran
     * here (a rollback), so are the records it appended: tagging a tagged key changes nothing. */
    if ((rc == 1 || c->older_store) && retag_write_from(c->data_dir, from = next_offset) != 0) {
        errbuf_printf(errbuf, errlen, "writing %s/%s: %s", c->data_dir,
                      datadir_name(DATADIR_TAGGED_FROM), strerror(errno));
        return -1;
    }
    c->tagged_from = from;
    c->older_store = false;
    return 0;
}

void commit_files_retag(commit_t *c, log_record_t *rec)
{
    enum retag_result r = retag_record(c->secret, c->tagged_from, rec);
    c->retagged += r == RETAG_RETAGGED;
    c->retag_nosource += r == RETAG_NOSOURCE;
}

void commit_files_report_retag(commit_t *c)
{
    if (c->retagged > 0)
        commit_notify(c, 2,
                      "gave %llu log records from before keys carried source tags (below offset "
                      "%llu) the tag of their source",
                      (unsigned long long)c->retagged, (unsigned long long)c->tagged_from);
    if (c->retag_nosource > 0)
        commit_notify(c, 1,
                      "%llu log records from before keys carried source tags have no \"source\" "
                      "string: their keys were kept untagged (retries of them are not recognised)",
                      (unsigned long long)c->retag_nosource);
    c->retagged = c->retag_nosource = 0;
}
