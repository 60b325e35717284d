/* log: the segmented, append-only event log; the source of truth. */
#ifndef INGESTD_LOG_H
#define INGESTD_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * On disk (docs/log-format.md): DIR/NNNNNNNNNNNNNNNNNNNN.seg, named by the
 * offset of its first record, with a sparse index DIR/NNNNNNNNNNNNNNNNNNNN.idx
 * beside it (offset -> byte position, one entry per LOG_INDEX_INTERVAL bytes;
 * not synced, validated on use, rebuilt at open) so readers seek without
 * scanning. Segment files are named by the
 * offset of the segment's first record (20 decimal digits). Each segment
 * starts with a 16-byte header (magic "INGDLOG1", version, reserved); then
 * records, each a 40-byte little-endian header followed by the payload:
 *   u32 payload length | u32 CRC-32 (zlib) of every record byte after this field
 *   u64 offset | i64 receivedAt (ms since epoch) | 16-byte dedupe key | payload
 * Offsets are record numbers: 0, 1, 2, ... across all segments.
 */

typedef struct log log_t;
typedef struct log_reader log_reader_t;

enum log_status {
    LOG_OK = 0,
    LOG_END = 1,      /* reader: no further complete record (yet) */
    LOG_EIO = -1,     /* a system call failed (errno kept in log_errno()) */
    LOG_ENOSPC = -2,  /* disk full */
    LOG_CORRUPT = -3, /* a bad record before the tail (not a torn tail) */
    LOG_NOMEM = -4,   /* allocation failed */
    LOG_INVALID = -5, /* bad argument, e.g. an offset beyond the log */
    LOG_FAILED = -6,  /* writer is in a failed state after an unrecoverable error */
};

#define LOG_RECORD_HEADER  40
#define LOG_SEGMENT_HEADER 16
#define LOG_MAX_PAYLOAD    (16u * 1024 * 1024)
#define LOG_INDEX_INTERVAL (64u * 1024) /* bytes of log between two index entries */

typedef struct log_record {
    uint64_t offset;     /* set by log_append / the reader */
    int64_t received_ms; /* milliseconds since the epoch */
    uint8_t key[16];     /* dedupe key */
    const char *data;    /* payload (one JSON event); reader: valid until the next call */
    uint32_t len;
} log_record_t;

typedef struct log_options {
    uint64_t segment_bytes;  /* rotate to a new segment once the active one reaches this */
    uint64_t durable_offset; /* records below this offset are known to be acknowledged: a bad
                                one is corruption (LOG_CORRUPT, nothing truncated), never a
                                torn tail; 0 when unknown */
    bool discard;            /* true: records at or past discard_from are cut off at open even
                                when valid: after a failed fsync the page cache may hold
                                records that never reached the disk */
    uint64_t discard_from;
} log_options_t;

typedef struct log_info {
    uint64_t first_offset;    /* offset of the oldest retained record */
    uint64_t next_offset;     /* offset the next appended record gets */
    uint64_t bytes;           /* bytes of all segments */
    uint64_t segments;        /* number of segment files */
    uint64_t truncated_bytes; /* torn tail bytes cut off at open */
    uint64_t synced_offset;   /* offset after the last record made durable by log_sync */
    uint64_t active_bytes;    /* bytes of the active (last) segment; log_describe: 0 */
} log_info_t;

/*
 * Opens (creating if needed) the log in `dir` for appending. Recovers the
 * tail: a torn or corrupt record of the last segment at or past
 * opts->durable_offset is truncated away with everything after it, and the
 * truncation made durable; one below it is LOG_CORRUPT. One writer per directory (the caller
 * holds the data dir lock). *out is freed with log_close().
 * Returns LOG_OK, or LOG_INVALID (bad options), LOG_EIO / LOG_ENOSPC (errno in
 * errno), LOG_NOMEM, LOG_CORRUPT (a bad record below durable_offset); *out is
 * then NULL.
 */
int log_open(const char *dir, const log_options_t *opts, log_t **out);

/* Closes the writer; NULL is a no-op. Does not sync: call log_sync first. */
void log_close(log_t *log);

/*
 * Appends n records after the last one, without syncing. Assigns
 * recs[i].offset. May rotate to a new segment first. On failure, the log is
 * rolled back to its last synced end (see log_rollback). Returns LOG_OK, or
 * LOG_INVALID (a record over LOG_MAX_PAYLOAD; nothing appended), LOG_EIO /
 * LOG_ENOSPC (log_errno()), LOG_NOMEM, LOG_FAILED (the writer is failed).
 */
int log_append(log_t *log, log_record_t *recs, size_t n);

/*
 * fdatasync's the active segment (and, after a rotation, the directory). LOG_OK,
 * or LOG_EIO / LOG_ENOSPC (log_errno()), LOG_FAILED (the writer is failed).
 */
int log_sync(log_t *log);

/*
 * Discards everything appended since the last successful log_sync: truncates
 * back to the synced end and syncs that. Returns LOG_OK, or LOG_FAILED when
 * the durable state cannot be re-established (the writer refuses further
 * appends until reopened).
 */
int log_rollback(log_t *log);

/* What log_retain() did. */
typedef struct log_retain_result {
    uint64_t segments;      /* segments deleted */
    uint64_t records;       /* records in them */
    uint64_t bytes;         /* their bytes */
    uint64_t first_offset;  /* the oldest retained offset afterwards */
    uint64_t held_segments; /* segments past the age or size bound kept because of keep_from */
    uint64_t held_bytes;    /* their bytes */
} log_retain_result_t;

#define LOG_RETAIN_UNBOUNDED UINT64_MAX /* log_retain's keep_from when nothing holds it back */

/*
 * Retention: deletes whole closed segments, oldest first, while the oldest
 * closed segment was last written more than max_age_ms before now_ms (its
 * file's mtime; 0: no age bound) or the log holds more than max_bytes (0: no
 * size bound). The active segment is never deleted, nor is any segment with
 * a record at or past `keep_from` (LOG_RETAIN_UNBOUNDED: none): a segment goes
 * only when all its records are below it. The segments the bounds would
 * delete but keep_from keeps are counted in out->held_*. Readers that
 * already opened a deleted segment read on; new readers before the new first
 * offset get LOG_INVALID. Writer thread only. Returns LOG_OK, or LOG_EIO
 * (a stat or unlink failed; the segments deleted before it stay deleted and
 * are counted), LOG_NOMEM.
 */
int log_retain(log_t *log, int64_t now_ms, int64_t max_age_ms, uint64_t max_bytes,
               uint64_t keep_from, log_retain_result_t *out);

/*
 * What log_retain() with the same arguments would delete, without deleting:
 * out->first_offset is where the log would then start. Errors as log_retain.
 */
int log_retain_plan(log_t *log, int64_t now_ms, int64_t max_age_ms, uint64_t max_bytes,
                    uint64_t keep_from, log_retain_result_t *out);

/* Current extent of the log; cheap. Writer thread only. */
void log_get_info(const log_t *log, log_info_t *info);

/* errno of the last failed system call of this writer. */
int log_errno(const log_t *log);

/*
 * Reader: works on a directory also while a writer appends to it (from the
 * same or another process). Starts at `from` (must be >= the first retained
 * offset and <= the end; LOG_INVALID otherwise). *out is freed with
 * log_reader_close(). Returns LOG_OK, or LOG_INVALID (`from` outside the
 * log, or not at a record's start), LOG_EIO, LOG_NOMEM, LOG_CORRUPT (a
 * segment with a bad header); *out is then NULL.
 */
int log_reader_open(const char *dir, uint64_t from, log_reader_t **out);

/*
 * Reads the next record with offset < `limit` (UINT64_MAX: no limit). Returns
 * LOG_OK with *rec filled (rec->data valid until the next call or close),
 * LOG_END when there is none (yet: call again later to follow), or an error.
 * A record that is incomplete or fails its checksum is treated as the end:
 * it may be in the middle of being written; with a `limit` (the caller knows
 * the records below it are complete) it is LOG_CORRUPT instead. Errors:
 * LOG_EIO, LOG_NOMEM, LOG_CORRUPT (a segment with a bad header).
 */
int log_reader_next(log_reader_t *r, uint64_t limit, log_record_t *rec);

/*
 * Where the next record would be read: its segment's base offset and byte
 * position in that segment (LOG_SEGMENT_HEADER for the first record).
 */
void log_reader_tell(const log_reader_t *r, uint64_t *seg_base, uint64_t *byte_pos);

/*
 * Describes a log directory without opening it for writing or recovering it:
 * segment count and bytes, first offset; next_offset is left 0 (count records
 * with a reader). *bases (malloc'ed, caller frees; may be NULL) gets the
 * sorted segment base offsets. Returns LOG_OK, or LOG_EIO (errno set),
 * LOG_NOMEM.
 */
int log_describe(const char *dir, log_info_t *info, uint64_t **bases);

/* Offset of the record the next log_reader_next would return. */
uint64_t log_reader_position(const log_reader_t *r);

void log_reader_close(log_reader_t *r);

const char *log_strerror(int status);

#endif
