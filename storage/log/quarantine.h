/* quarantine: a bounded second log of what was refused, appended by its own writer thread. */
#ifndef INGESTD_QUARANTINE_H
#define INGESTD_QUARANTINE_H

#include <stddef.h>
#include <stdint.h>

/*
 * The quarantine keeps what the server refused (events that failed validation, requests refused
 * whole) so an operator can see why an event is missing. It is a log in the format of the event
 * log (storage/log/log.h, docs/log-format.md) in its own directory, e.g. DATA/rejected/, whose
 * payloads are JSON objects (quarantine_add says which fields), read with the log's reader.
 *
 * It must never slow the accept path nor let a client fill the disk or memory: callers only
 * enqueue (quarantine_add copies the record into a bounded in-memory queue, or counts it dropped
 * when the queue is full, and never blocks on I/O); one writer thread appends what is queued,
 * fsyncs once per batch, and deletes the oldest closed segments while the log is larger than
 * max_bytes, each source keeping its share of max_bytes: before a segment goes, its records of
 * sources within their share are appended again (quarantine.c, SHARES). A reader following the
 * log may so read a record twice, at two offsets, byte for byte the same. A record is durable only
 * after that fsync: a crash loses the records still queued or not yet synced (they were never
 * acknowledged to anyone). Nothing here logs: failures are counted in quarantine_stats_t.
 */

typedef struct quarantine quarantine_t;

enum quarantine_status {
    QUARANTINE_OK = 0,
    QUARANTINE_DROPPED = 1,  /* quarantine_add: the queue is full (or closing); counted */
    QUARANTINE_EIO = -1,     /* opening the log failed: a system call (see the log status) */
    QUARANTINE_NOMEM = -2,   /* allocation failed */
    QUARANTINE_INVALID = -3, /* bad argument */
    QUARANTINE_CORRUPT = -4, /* the directory holds a log that cannot be opened */
    QUARANTINE_TIMEOUT = -5, /* quarantine_flush: not everything was written in time */
};

/* Raw bytes kept of one refused event (API_MAX_EVENT_BYTES) and of a request refused whole. */
#define QUARANTINE_EVENT_BYTES   (32 * 1024)
#define QUARANTINE_REQUEST_BYTES (4 * 1024)

typedef struct quarantine_options {
    uint64_t max_bytes;     /* bound of the log's segments (> 0): the oldest closed ones are
                               deleted past it; the log may exceed it by the active segment */
    uint64_t segment_bytes; /* rotate at this size; 0: max_bytes / 8, within 16 KiB..64 MiB */
    uint64_t queue_bytes;   /* record bytes waiting for the writer at most; 0: max_bytes / 4,
                               within 256 KiB..8 MiB */
} quarantine_options_t;

/* One refused thing. Every pointer is borrowed for the call of quarantine_add only. */
typedef struct quarantine_entry {
    const char *reason;     /* a short machine-readable word, e.g. "invalid_json" */
    const char *error;      /* the sentence the client was answered with; NULL: none */
    const char *request_id; /* the request's id (X-Request-Id); NULL: none */
    const char *source;     /* the write key's source; NULL: not known (written as null) */
    int64_t received_ms;    /* when the request arrived, ms since the epoch */
    int64_t index;          /* position of the event in its batch; -1: the whole request */
    const char *raw;        /* the refused bytes as received (any bytes); NULL when raw_len 0 */
    size_t raw_len;
    size_t raw_cap; /* keep at most this many of them (the rest is cut, "truncated":true) */
    uint64_t size;  /* the whole size of what was refused (>= raw_len); 0: raw_len */
} quarantine_entry_t;

typedef struct quarantine_stats {
    uint64_t records;      /* records retained: next_offset - first_offset */
    uint64_t bytes;        /* bytes of its segment files */
    uint64_t segments;     /* segment files */
    uint64_t first_offset; /* offset of the oldest retained record */
    uint64_t next_offset;  /* offset after the last record made durable */
    uint64_t written;      /* records appended and fsynced since open */
    uint64_t dropped;      /* records not kept because the queue was full, since open */
    uint64_t failed;       /* records lost to a failed write or fsync, since open */
    uint64_t deleted;      /* records deleted by the size bound, since open */
    uint64_t carried;      /* records appended again by the bound to keep their source's share
                              (same bytes, new offset), since open */
    uint64_t sources;      /* sources with records retained (0 until the writer counted them) */
    uint64_t queued_bytes; /* bytes waiting for the writer now */
    uint64_t max_bytes;    /* the options in force */
    uint64_t segment_bytes;
    uint64_t queue_bytes;
} quarantine_stats_t;

/*
 * Opens (creating if needed) the quarantine log in `dir` and starts its writer thread. The
 * caller holds the data dir's lock (one writer per directory). A torn tail from a crash is cut
 * off. *out is freed with quarantine_close(). Returns QUARANTINE_OK, or QUARANTINE_INVALID,
 * QUARANTINE_NOMEM, QUARANTINE_EIO or QUARANTINE_CORRUPT (the log's open failed); *log_status
 * (may be NULL) gets the storage/log/log.h status of a failed open.
 */
int quarantine_open(const char *dir, const quarantine_options_t *opts, quarantine_t **out,
                    int *log_status);

/*
 * Writes what is queued, stops the writer thread and frees; NULL is a no-op. Records added
 * during or after the call are dropped. Not concurrently with quarantine_add of the same q.
 */
void quarantine_close(quarantine_t *q);

/*
 * Queues one record: a JSON object {"reason","error","requestId","source","receivedAt",
 * "scope":"event"|"request","index" (events only),"size","truncated", and "raw": the kept bytes
 * as a string when they are UTF-8 (cut at a character boundary), else "rawBase64": them in
 * base64}. Never blocks on I/O. Returns QUARANTINE_OK, QUARANTINE_DROPPED (the queue is full,
 * or out of memory: counted in dropped) or QUARANTINE_INVALID. Thread-safe.
 */
int quarantine_add(quarantine_t *q, const quarantine_entry_t *e);

/*
 * Waits until every record queued before the call is written and fsynced (or lost), up to
 * timeout_ms. Returns QUARANTINE_OK or QUARANTINE_TIMEOUT. Thread-safe; for tests and shutdown.
 */
int quarantine_flush(quarantine_t *q, int timeout_ms);

/* The directory of the log (for readers: storage/log/log.h's log_reader_open); valid until close.
 */
const char *quarantine_dir(const quarantine_t *q);

/* Fills *out. Cheap, thread-safe. */
void quarantine_get_stats(quarantine_t *q, quarantine_stats_t *out);

const char *quarantine_strerror(int status);

#endif
