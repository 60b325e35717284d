/* log.c: segmented append-only log with length + CRC framing and torn-tail recovery. */
#include "storage/log/log.h"

#include "common/bytes.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "storage/fsutil.h"

#define SEG_MAGIC   "INGDLOG1"
#define SEG_VERSION 1u
#define SEG_SUFFIX  ".seg"
#define NAME_MAX_   64

struct log {
    char *dir;
    int dirfd;
    int fd; /* active segment */
    log_options_t opts;
    uint64_t seg_base; /* first offset of the active segment */
    uint64_t seg_size; /* bytes written to the active segment */
    uint64_t next_offset;
    /* The durable state, as of the last successful log_sync(). */
    uint64_t synced_base, synced_size, synced_next;
    /* Sparse index of the active segment: entries written, position of the last one. */
    int idx_fd; /* -1: no index for this segment (readers scan instead) */
    uint64_t idx_n, idx_last_pos;
    uint64_t synced_idx_n, synced_idx_last_pos;
    uint64_t first_offset;
    uint64_t closed_bytes; /* bytes of every segment but the active one */
    uint64_t segments;
    uint64_t truncated_bytes;
    int dir_dirty; /* a segment was created since the last directory fsync */
    int failed;
    int err;
    char *buf; /* staging buffer: one write(2) per append */
    size_t cap;
};

struct log_reader {
    char *dir;
    int fd;
    uint64_t seg_base;
    uint64_t pos;  /* byte position of the next record in the segment */
    uint64_t next; /* offset of the next record */
    char *buf;
    size_t cap;
};

/* ---- encoding helpers ---- */

/* CRC over the header after the crc field, then the payload. */
static uint32_t record_crc(const uint8_t *hdr, const char *data, uint32_t len)
{
    uLong crc = crc32(0L, Z_NULL, 0);
    crc = crc32(crc, hdr + 8, LOG_RECORD_HEADER - 8);
    if (len > 0)
        crc = crc32(crc, (const Bytef *)data, len);
    /* zlib's crc32 takes a uInt length; payloads are capped at 16 MiB so this fits. */
    return (uint32_t)crc;
}

static void encode_header(uint8_t *hdr, const log_record_t *r)
{
    bytes_put_le32(hdr, r->len);
    bytes_put_le64(hdr + 8, r->offset);
    bytes_put_le64(hdr + 16, (uint64_t)r->received_ms);
    memcpy(hdr + 24, r->key, 16);
    bytes_put_le32(hdr + 4, record_crc(hdr, r->data, r->len));
}

static void decode_header(const uint8_t *hdr, log_record_t *r, uint32_t *crc)
{
    r->len = bytes_get_le32(hdr);
    *crc = bytes_get_le32(hdr + 4);
    r->offset = bytes_get_le64(hdr + 8);
    r->received_ms = (int64_t)bytes_get_le64(hdr + 16);
    memcpy(r->key, hdr + 24, 16);
}

static void segment_name(char *out, size_t len, uint64_t base)
{
    snprintf(out, len, "%020" PRIu64 SEG_SUFFIX, base);
}

static int parse_segment_name(const char *name, uint64_t *base)
{
    size_t n = strlen(name);
    if (n != 20 + strlen(SEG_SUFFIX) || strcmp(name + 20, SEG_SUFFIX) != 0)
        return -1;
    uint64_t v = 0;
    for (int i = 0; i < 20; i++) {
        if (name[i] < '0' || name[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(name[i] - '0');
    }
    *base = v;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorted segment bases in `dir`. *bases is malloc'ed (caller frees), NULL when none. */
static int list_segments(const char *dir, uint64_t **bases, size_t *n)
{
    DIR *d = opendir(dir);
    uint64_t *v = NULL;
    size_t cnt = 0, cap = 0;
    struct dirent *e;
    *bases = NULL;
    *n = 0;
    if (!d)
        return LOG_EIO;
    while ((e = readdir(d)) != NULL) {
        uint64_t base;
        if (parse_segment_name(e->d_name, &base) != 0)
            continue;
        if (cnt == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            uint64_t *nv = realloc(v, ncap * sizeof(*v));
            if (!nv) {
                free(v);
                closedir(d);
                return LOG_NOMEM;
            }
            v = nv;
            cap = ncap;
        }
        v[cnt++] = base;
    }
    closedir(d);
    if (cnt > 1)
        qsort(v, cnt, sizeof(*v), cmp_u64);
    *bases = v;
    *n = cnt;
    return LOG_OK;
}

static int io_status(int err)
{
    return err == ENOSPC || err == EDQUOT ? LOG_ENOSPC : LOG_EIO;
}

static int grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : 4096;
    while (ncap < need)
        ncap *= 2;
    char *nb = realloc(*buf, ncap);
    if (!nb)
        return -1;
    *buf = nb;
    *cap = ncap;
    return 0;
}

static int open_segment(int dirfd, uint64_t base, int flags)
{
    char name[NAME_MAX_];
    segment_name(name, sizeof(name), base);
    return openat(dirfd, name, flags | O_CLOEXEC, 0644);
}

/* ---- sparse index: DIR/NNN.idx, entries of u64 offset + u64 byte position ---- */

#define IDX_ENTRY 16

static void index_name(char *out, size_t len, uint64_t base)
{
    snprintf(out, len, "%020" PRIu64 ".idx", base);
}

/*
 * (Re)opens the active segment's index, emptied when `fresh`, else cut to
 * `keep` entries. The index is only an optimisation: it is never synced, and
 * any failure just leaves the segment without one (readers then scan).
 */
static void index_open(log_t *log, uint64_t base, bool fresh, uint64_t keep, uint64_t last_pos)
{
    char name[NAME_MAX_];
    if (log->idx_fd >= 0)
        close(log->idx_fd);
    index_name(name, sizeof(name), base);
    log->idx_fd =
        openat(log->dirfd, name, O_RDWR | O_CREAT | O_CLOEXEC | (fresh ? O_TRUNC : 0), 0644);
    log->idx_n = fresh ? 0 : keep;
    log->idx_last_pos = fresh ? LOG_SEGMENT_HEADER : last_pos;
    if (log->idx_fd >= 0 && !fresh && ftruncate(log->idx_fd, (off_t)(keep * IDX_ENTRY)) != 0) {
        close(log->idx_fd);
        log->idx_fd = -1;
    }
}

static void index_drop(log_t *log)
{
    char name[NAME_MAX_];
    if (log->idx_fd >= 0)
        close(log->idx_fd);
    log->idx_fd = -1;
    index_name(name, sizeof(name), log->seg_base);
    unlinkat(log->dirfd, name, 0); /* a stale index must not outlive its failure */
}

/* Notes a record at byte `pos`: an entry once per LOG_INDEX_INTERVAL bytes. */
static void index_note(log_t *log, uint64_t offset, uint64_t pos)
{
    uint8_t e[IDX_ENTRY];
    if (log->idx_fd < 0 || pos < log->idx_last_pos + LOG_INDEX_INTERVAL)
        return;
    bytes_put_le64(e, offset);
    bytes_put_le64(e + 8, pos);
    if (fsutil_pwrite_all(log->idx_fd, e, sizeof(e), log->idx_n * IDX_ENTRY) != 0) {
        index_drop(log);
        return;
    }
    log->idx_n++;
    log->idx_last_pos = pos;
}

/* ---- writer ---- */

/* Creates an empty segment with its header, durable (file and directory entry). */
static int create_segment(log_t *log, uint64_t base)
{
    uint8_t hdr[LOG_SEGMENT_HEADER] = {0};
    int fd = open_segment(log->dirfd, base, O_RDWR | O_CREAT | O_TRUNC);
    if (fd < 0)
        goto fail;
    memcpy(hdr, SEG_MAGIC, 8);
    bytes_put_le32(hdr + 8, SEG_VERSION);
    if (fsutil_pwrite_all(fd, hdr, sizeof(hdr), 0) != 0 || fdatasync(fd) != 0)
        goto fail;
    if (log->fd >= 0)
        close(log->fd);
    log->fd = fd;
    log->seg_base = base;
    log->seg_size = LOG_SEGMENT_HEADER;
    log->segments++;
    log->dir_dirty = 1;
    index_open(log, base, true, 0, 0);
    return LOG_OK;
fail:
    log->err = errno;
    if (fd >= 0) {
        char name[NAME_MAX_];
        close(fd);
        segment_name(name, sizeof(name), base);
        unlinkat(log->dirfd, name, 0);
    }
    return io_status(log->err);
}

/*
 * Scans the active segment from its header, validating every record; cuts a
 * torn or corrupt tail off (only the last segment can have one: a segment is
 * synced before the next one is created).
 */
static int recover_tail(log_t *log)
{
    struct stat st;
    uint8_t hdr[LOG_RECORD_HEADER];
    uint64_t pos = LOG_SEGMENT_HEADER, off = log->seg_base;
    int rc = LOG_OK;

    if (fstat(log->fd, &st) != 0)
        goto io;
    uint64_t size = (uint64_t)st.st_size;
    if (size < LOG_SEGMENT_HEADER) {
        /* Torn at creation: nothing in it was ever acknowledged. */
        uint8_t seg[LOG_SEGMENT_HEADER] = {0};
        memcpy(seg, SEG_MAGIC, 8);
        bytes_put_le32(seg + 8, SEG_VERSION);
        if (fsutil_pwrite_all(log->fd, seg, sizeof(seg), 0) != 0 ||
            ftruncate(log->fd, sizeof(seg)) != 0 || fdatasync(log->fd) != 0)
            goto io;
        log->truncated_bytes += size;
        log->seg_size = LOG_SEGMENT_HEADER;
        log->next_offset = log->seg_base;
        index_open(log, log->seg_base, true, 0, 0);
        return LOG_OK;
    }
    if (fsutil_pread_full(log->fd, hdr, LOG_SEGMENT_HEADER, 0) != LOG_SEGMENT_HEADER)
        goto io;
    if (memcmp(hdr, SEG_MAGIC, 8) != 0 || bytes_get_le32(hdr + 8) != SEG_VERSION)
        return LOG_CORRUPT;

    /* The scan validates every record anyway: rebuild the segment's index as it goes. */
    index_open(log, log->seg_base, true, 0, 0);
    for (;;) {
        log_record_t r;
        uint32_t crc;
        ssize_t n = fsutil_pread_full(log->fd, hdr, sizeof(hdr), pos);
        if (n < 0)
            goto io;
        if ((size_t)n < sizeof(hdr))
            break;
        decode_header(hdr, &r, &crc);
        if (log->opts.discard && off >= log->opts.discard_from)
            break;
        if (r.len > LOG_MAX_PAYLOAD || r.offset != off || pos + sizeof(hdr) + r.len > size)
            break;
        if (grow(&log->buf, &log->cap, r.len + 1) != 0) {
            rc = LOG_NOMEM;
            goto out;
        }
        n = fsutil_pread_full(log->fd, log->buf, r.len, pos + sizeof(hdr));
        if (n < 0)
            goto io;
        if ((size_t)n < r.len || record_crc(hdr, log->buf, r.len) != crc)
            break;
        index_note(log, off, pos);
        pos += sizeof(hdr) + r.len;
        off++;
    }
    if (off < log->opts.durable_offset) {
        /* A bad record the store says was acknowledged: corruption, not a torn tail. Keep it. */
        return LOG_CORRUPT;
    }
    if (pos < size) {
        if (ftruncate(log->fd, (off_t)pos) != 0 || fdatasync(log->fd) != 0)
            goto io;
        log->truncated_bytes += size - pos;
    }
    log->seg_size = pos;
    log->next_offset = off;
out:
    return rc;
io:
    log->err = errno;
    return io_status(errno);
}

int log_open(const char *dir, const log_options_t *opts, log_t **out)
{
    log_t *log = NULL;
    uint64_t *bases = NULL;
    size_t n = 0;
    int rc;

    *out = NULL;
    if (!dir || !opts)
        return LOG_INVALID;
    if (fsutil_mkdir(dir) != 0 && errno != EEXIST) /* durable before a segment is in it */
        return io_status(errno);
    log = calloc(1, sizeof(*log));
    if (!log)
        return LOG_NOMEM;
    log->fd = -1;
    log->idx_fd = -1;
    log->opts = *opts;
    if (log->opts.segment_bytes < 4096)
        log->opts.segment_bytes = 4096;
    log->dir = strdup(dir);
    if (!log->dir) {
        rc = LOG_NOMEM;
        goto out;
    }
    log->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (log->dirfd < 0) {
        rc = io_status(errno);
        goto out;
    }
    rc = list_segments(dir, &bases, &n);
    if (rc != LOG_OK)
        goto out;
    if (n == 0) {
        rc = create_segment(log, 0);
        if (rc != LOG_OK)
            goto out;
        if (fsync(log->dirfd) != 0) {
            rc = io_status(errno);
            goto out;
        }
        log->dir_dirty = 0;
        log->first_offset = 0;
        log->next_offset = 0;
    } else {
        /* Whole segments past the discard point (rotated to after the last good sync) go. */
        while (log->opts.discard && n > 1 && bases[n - 1] > log->opts.discard_from) {
            char name[NAME_MAX_];
            segment_name(name, sizeof(name), bases[n - 1]);
            if (unlinkat(log->dirfd, name, 0) != 0 || fsync(log->dirfd) != 0) {
                rc = io_status(errno);
                goto out;
            }
            n--;
        }
        for (size_t i = 0; i + 1 < n; i++) {
            struct stat st;
            char name[NAME_MAX_];
            segment_name(name, sizeof(name), bases[i]);
            if (fstatat(log->dirfd, name, &st, 0) != 0) {
                rc = io_status(errno);
                goto out;
            }
            log->closed_bytes += (uint64_t)st.st_size;
        }
        log->segments = n;
        log->first_offset = bases[0];
        log->seg_base = bases[n - 1];
        log->fd = open_segment(log->dirfd, log->seg_base, O_RDWR);
        if (log->fd < 0) {
            rc = io_status(errno);
            goto out;
        }
        rc = recover_tail(log);
        if (rc != LOG_OK)
            goto out;
    }
    log->synced_base = log->seg_base;
    log->synced_size = log->seg_size;
    log->synced_next = log->next_offset;
    log->synced_idx_n = log->idx_n;
    log->synced_idx_last_pos = log->idx_last_pos;
    *out = log;
    log = NULL;
out:
    free(bases);
    log_close(log);
    return rc;
}

void log_close(log_t *log)
{
    if (!log)
        return;
    if (log->fd >= 0)
        close(log->fd);
    if (log->idx_fd >= 0)
        close(log->idx_fd);
    if (log->dirfd >= 0)
        close(log->dirfd);
    free(log->dir);
    free(log->buf);
    free(log);
}

static int rotate(log_t *log)
{
    uint64_t old_size = log->seg_size;
    int rc = create_segment(log, log->next_offset);
    if (rc == LOG_OK)
        log->closed_bytes += old_size;
    return rc;
}

int log_append(log_t *log, log_record_t *recs, size_t n)
{
    size_t total = 0;
    int rc;

    if (log->failed)
        return LOG_FAILED;
    if (n == 0)
        return LOG_OK;
    for (size_t i = 0; i < n; i++) {
        if (recs[i].len > LOG_MAX_PAYLOAD)
            return LOG_INVALID;
        total += LOG_RECORD_HEADER + recs[i].len;
    }
    /* Rotate only at a synced boundary, so a rollback never has to undo a rotation of older data.
     */
    if (log->seg_size >= log->opts.segment_bytes && log->seg_size > LOG_SEGMENT_HEADER &&
        log->seg_size == log->synced_size && log->seg_base == log->synced_base) {
        rc = rotate(log);
        if (rc != LOG_OK)
            return rc;
    }
    if (grow(&log->buf, &log->cap, total) != 0)
        return LOG_NOMEM;
    char *p = log->buf;
    for (size_t i = 0; i < n; i++) {
        recs[i].offset = log->next_offset + i;
        encode_header((uint8_t *)p, &recs[i]);
        memcpy(p + LOG_RECORD_HEADER, recs[i].data, recs[i].len);
        p += LOG_RECORD_HEADER + recs[i].len;
    }
    if (fsutil_pwrite_all(log->fd, log->buf, total, log->seg_size) != 0) {
        log->err = errno;
        rc = io_status(errno);
        /* Keep the file as the synced state says; a partial write is cut off. */
        log->seg_size += total; /* may be partially written: rollback truncates all of it */
        log_rollback(log);
        return rc;
    }
    uint64_t pos = log->seg_size;
    for (size_t i = 0; i < n; i++) {
        index_note(log, recs[i].offset, pos);
        pos += LOG_RECORD_HEADER + recs[i].len;
    }
    log->seg_size += total;
    log->next_offset += n;
    return LOG_OK;
}

int log_sync(log_t *log)
{
    if (log->failed)
        return LOG_FAILED;
    if (fdatasync(log->fd) != 0) {
        log->err = errno;
        return io_status(errno);
    }
    if (log->dir_dirty) {
        if (fsync(log->dirfd) != 0) {
            log->err = errno;
            return io_status(errno);
        }
        log->dir_dirty = 0;
    }
    log->synced_base = log->seg_base;
    log->synced_size = log->seg_size;
    log->synced_next = log->next_offset;
    log->synced_idx_n = log->idx_n;
    log->synced_idx_last_pos = log->idx_last_pos;
    return LOG_OK;
}

int log_rollback(log_t *log)
{
    if (log->failed)
        return LOG_FAILED;
    if (log->seg_base != log->synced_base) {
        /* A rotation happened after the last sync: drop the new segment, reopen the synced one. */
        char name[NAME_MAX_];
        segment_name(name, sizeof(name), log->seg_base);
        close(log->fd);
        log->fd = -1;
        index_drop(log);
        if (unlinkat(log->dirfd, name, 0) != 0 && errno != ENOENT)
            goto fail;
        if (fsync(log->dirfd) != 0)
            goto fail;
        log->segments--;
        log->fd = open_segment(log->dirfd, log->synced_base, O_RDWR);
        if (log->fd < 0)
            goto fail;
        log->closed_bytes -= log->synced_size;
        log->seg_base = log->synced_base;
        log->dir_dirty = 0;
    }
    if (ftruncate(log->fd, (off_t)log->synced_size) != 0 || fdatasync(log->fd) != 0)
        goto fail;
    log->seg_size = log->synced_size;
    log->next_offset = log->synced_next;
    index_open(log, log->seg_base, false, log->synced_idx_n, log->synced_idx_last_pos);
    return LOG_OK;
fail:
    log->err = errno;
    log->failed = 1;
    return LOG_FAILED;
}

/*
 * Walks the closed segments oldest first, deciding which ones retention
 * drops, and deletes them when `apply`. Oldest first, one at a time, so a
 * crash in the middle leaves a contiguous log. Once a segment is held by
 * keep_from, every later one is too (its records are later still): those are
 * only counted, so the caller can say how far the log is over its bounds.
 */
static int retain(log_t *log, int64_t now_ms, int64_t max_age_ms, uint64_t max_bytes,
                  uint64_t keep_from, bool apply, log_retain_result_t *out)
{
    uint64_t *bases = NULL;
    size_t n = 0;
    int rc;

    memset(out, 0, sizeof(*out));
    out->first_offset = log->first_offset;
    if (log->failed)
        return LOG_FAILED;
    if (max_age_ms <= 0 && max_bytes == 0)
        return LOG_OK;
    rc = list_segments(log->dir, &bases, &n);
    if (rc != LOG_OK)
        return rc;
    uint64_t total = log->closed_bytes + log->seg_size;
    for (size_t i = 0; i + 1 < n && bases[i] < log->seg_base; i++) {
        char name[NAME_MAX_];
        struct stat st;
        segment_name(name, sizeof(name), bases[i]);
        if (fstatat(log->dirfd, name, &st, 0) != 0) {
            rc = io_status(errno);
            break;
        }
        int64_t mtime_ms = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
        bool old = max_age_ms > 0 && now_ms - mtime_ms > max_age_ms;
        bool big = max_bytes > 0 && total > max_bytes;
        if (!old && !big)
            break;
        total -= (uint64_t)st.st_size;
        if (out->held_segments > 0 || bases[i + 1] > keep_from) {
            out->held_segments++;
            out->held_bytes += (uint64_t)st.st_size;
            continue;
        }
        if (apply) {
            if (unlinkat(log->dirfd, name, 0) != 0) {
                rc = io_status(errno);
                break;
            }
            index_name(name, sizeof(name), bases[i]);
            unlinkat(log->dirfd, name, 0);
        }
        out->segments++;
        out->bytes += (uint64_t)st.st_size;
        out->records += bases[i + 1] - bases[i];
        out->first_offset = bases[i + 1];
    }
    if (apply && out->segments > 0) {
        /* Not synced: segments that come back after a crash are merely deleted again. */
        log->closed_bytes -= out->bytes;
        log->segments -= out->segments;
        log->first_offset = out->first_offset;
    }
    free(bases);
    return rc;
}

int log_retain(log_t *log, int64_t now_ms, int64_t max_age_ms, uint64_t max_bytes,
               uint64_t keep_from, log_retain_result_t *out)
{
    return retain(log, now_ms, max_age_ms, max_bytes, keep_from, true, out);
}

int log_retain_plan(log_t *log, int64_t now_ms, int64_t max_age_ms, uint64_t max_bytes,
                    uint64_t keep_from, log_retain_result_t *out)
{
    return retain(log, now_ms, max_age_ms, max_bytes, keep_from, false, out);
}

void log_get_info(const log_t *log, log_info_t *info)
{
    info->first_offset = log->first_offset;
    info->next_offset = log->next_offset;
    info->bytes = log->closed_bytes + log->seg_size;
    info->segments = log->segments;
    info->truncated_bytes = log->truncated_bytes;
    info->synced_offset = log->synced_next;
    info->active_bytes = log->seg_size;
}

int log_errno(const log_t *log)
{
    return log->err;
}

/* ---- reader ---- */

static int reader_switch(log_reader_t *r, uint64_t base)
{
    char path[4096 + NAME_MAX_];
    char name[NAME_MAX_];
    segment_name(name, sizeof(name), base);
    snprintf(path, sizeof(path), "%s/%s", r->dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? LOG_END : LOG_EIO;
    uint8_t hdr[LOG_SEGMENT_HEADER];
    ssize_t n = fsutil_pread_full(fd, hdr, sizeof(hdr), 0);
    if (n < (ssize_t)sizeof(hdr)) {
        close(fd);
        return n < 0 ? LOG_EIO : LOG_END; /* being created */
    }
    if (memcmp(hdr, SEG_MAGIC, 8) != 0 || bytes_get_le32(hdr + 8) != SEG_VERSION) {
        close(fd);
        return LOG_CORRUPT;
    }
    if (r->fd >= 0)
        close(r->fd);
    r->fd = fd;
    r->seg_base = base;
    r->pos = LOG_SEGMENT_HEADER;
    r->next = base;
    return LOG_OK;
}

/*
 * Moves a reader standing at its segment's first record close to `from`, by
 * the segment's index when it has a usable entry. Every entry is checked
 * against the record header it points at: the index is never synced and may
 * be stale or torn after a crash, so a bad one is simply not used.
 */
static void reader_seek_index(log_reader_t *r, uint64_t from)
{
    char path[4096 + NAME_MAX_], name[NAME_MAX_];
    struct stat st;
    uint8_t *idx = NULL;

    index_name(name, sizeof(name), r->seg_base);
    snprintf(path, sizeof(path), "%s/%s", r->dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    if (fstat(fd, &st) != 0 || st.st_size < IDX_ENTRY || st.st_size > (1 << 26))
        goto out;
    size_t n = (size_t)st.st_size / IDX_ENTRY;
    idx = malloc(n * IDX_ENTRY);
    if (!idx || fsutil_pread_full(fd, idx, n * IDX_ENTRY, 0) != (ssize_t)(n * IDX_ENTRY))
        goto out;
    /* The last entry at or before `from` (entries ascend when the index is sound). */
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (bytes_get_le64(idx + mid * IDX_ENTRY) <= from)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        goto out;
    uint64_t off = bytes_get_le64(idx + (lo - 1) * IDX_ENTRY),
             pos = bytes_get_le64(idx + (lo - 1) * IDX_ENTRY + 8);
    uint8_t hdr[LOG_RECORD_HEADER];
    log_record_t rec;
    uint32_t crc;
    if (off < r->seg_base || pos < LOG_SEGMENT_HEADER ||
        fsutil_pread_full(r->fd, hdr, sizeof(hdr), pos) != (ssize_t)sizeof(hdr))
        goto out;
    decode_header(hdr, &rec, &crc);
    if (rec.offset == off && rec.len <= LOG_MAX_PAYLOAD) {
        r->pos = pos;
        r->next = off;
    }
out:
    free(idx);
    close(fd);
}

/* Reads the header at the reader's position. LOG_END when there is no complete one. */
static int reader_header(log_reader_t *r, uint8_t *hdr, log_record_t *rec, uint32_t *crc)
{
    ssize_t n = fsutil_pread_full(r->fd, hdr, LOG_RECORD_HEADER, r->pos);
    if (n < 0)
        return LOG_EIO;
    if (n < LOG_RECORD_HEADER)
        return LOG_END;
    decode_header(hdr, rec, crc);
    if (rec->len > LOG_MAX_PAYLOAD)
        return LOG_CORRUPT;
    if (rec->offset != r->next)
        return LOG_CORRUPT;
    return LOG_OK;
}

int log_reader_open(const char *dir, uint64_t from, log_reader_t **out)
{
    log_reader_t *r = NULL;
    uint64_t *bases = NULL;
    size_t n = 0;
    int rc;

    *out = NULL;
    rc = list_segments(dir, &bases, &n);
    if (rc != LOG_OK)
        goto out;
    if (n == 0 || from < bases[0]) {
        rc = n == 0 && from == 0 ? LOG_OK : LOG_INVALID;
        if (rc != LOG_OK)
            goto out;
    }
    r = calloc(1, sizeof(*r));
    if (!r || !(r->dir = strdup(dir))) {
        rc = LOG_NOMEM;
        goto out;
    }
    r->fd = -1;
    if (n == 0) {
        /* No segment yet: position at 0 and pick segment 0 up once it exists. */
        r->next = 0;
        r->seg_base = 0;
        *out = r;
        r = NULL;
        goto out;
    }
    size_t i = n - 1;
    while (bases[i] > from)
        i--;
    rc = reader_switch(r, bases[i]);
    if (rc != LOG_OK) {
        rc = rc == LOG_END ? LOG_INVALID : rc;
        goto out;
    }
    if (from > r->next)
        reader_seek_index(r, from);
    /* Skip headers (not payloads) up to `from`. */
    while (r->next < from) {
        uint8_t hdr[LOG_RECORD_HEADER];
        log_record_t rec;
        uint32_t crc;
        rc = reader_header(r, hdr, &rec, &crc);
        if (rc != LOG_OK) {
            rc = rc == LOG_END ? LOG_INVALID : rc;
            goto out;
        }
        r->pos += LOG_RECORD_HEADER + rec.len;
        r->next++;
    }
    rc = LOG_OK;
    *out = r;
    r = NULL;
out:
    free(bases);
    log_reader_close(r);
    return rc;
}

int log_reader_next(log_reader_t *r, uint64_t limit, log_record_t *rec)
{
    uint8_t hdr[LOG_RECORD_HEADER];
    uint32_t crc;
    int rc;

    if (r->next >= limit)
        return LOG_END;
    if (r->fd < 0) {
        rc = reader_switch(r, r->next);
        if (rc != LOG_OK)
            return rc;
    }
    rc = reader_header(r, hdr, rec, &crc);
    if (rc == LOG_END) {
        /* End of this segment: has the writer rotated to one starting here? */
        struct stat st;
        if (fstat(r->fd, &st) != 0)
            return LOG_EIO;
        if ((uint64_t)st.st_size > r->pos)
            return LOG_END; /* a header is being written */
        rc = reader_switch(r, r->next);
        if (rc != LOG_OK)
            return rc;
        rc = reader_header(r, hdr, rec, &crc);
    }
    if (rc != LOG_OK)
        return rc;
    if (grow(&r->buf, &r->cap, (size_t)rec->len + 1) != 0)
        return LOG_NOMEM;
    ssize_t n = fsutil_pread_full(r->fd, r->buf, rec->len, r->pos + LOG_RECORD_HEADER);
    if (n < 0)
        return LOG_EIO;
    /* Past the durable limit a short or bad record is a write in progress; before it, corruption.
     */
    int torn = limit == UINT64_MAX ? LOG_END : LOG_CORRUPT;
    if ((size_t)n < rec->len)
        return torn;
    if (record_crc(hdr, r->buf, rec->len) != crc)
        return torn;
    r->buf[rec->len] = '\0';
    rec->data = r->buf;
    r->pos += LOG_RECORD_HEADER + rec->len;
    r->next++;
    return LOG_OK;
}

void log_reader_tell(const log_reader_t *r, uint64_t *seg_base, uint64_t *byte_pos)
{
    *seg_base = r->seg_base;
    *byte_pos = r->fd >= 0 ? r->pos : LOG_SEGMENT_HEADER;
}

int log_describe(const char *dir, log_info_t *info, uint64_t **bases_out)
{
    uint64_t *bases = NULL;
    size_t n = 0;
    int rc = list_segments(dir, &bases, &n);

    memset(info, 0, sizeof(*info));
    if (bases_out)
        *bases_out = NULL;
    if (rc != LOG_OK)
        return rc;
    for (size_t i = 0; i < n; i++) {
        char path[4096 + NAME_MAX_], name[NAME_MAX_];
        struct stat st;
        segment_name(name, sizeof(name), bases[i]);
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        if (stat(path, &st) != 0) {
            free(bases);
            return LOG_EIO;
        }
        info->bytes += (uint64_t)st.st_size;
    }
    info->segments = n;
    info->first_offset = n > 0 ? bases[0] : 0;
    if (bases_out)
        *bases_out = bases;
    else
        free(bases);
    return LOG_OK;
}

uint64_t log_reader_position(const log_reader_t *r)
{
    return r->next;
}

void log_reader_close(log_reader_t *r)
{
    if (!r)
        return;
    if (r->fd >= 0)
        close(r->fd);
    free(r->dir);
    free(r->buf);
    free(r);
}

const char *log_strerror(int status)
{
    switch (status) {
    case LOG_OK:
        return "ok";
    case LOG_END:
        return "end of log";
    case LOG_EIO:
        return "I/O error";
    case LOG_ENOSPC:
        return "disk full";
    case LOG_CORRUPT:
        return "corrupt log record";
    case LOG_NOMEM:
        return "out of memory";
    case LOG_INVALID:
        return "invalid argument or offset out of range";
    case LOG_FAILED:
        return "log failed: durable state could not be re-established";
    default:
        return "unknown log error";
    }
}
