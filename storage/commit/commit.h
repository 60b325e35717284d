/* commit: group commit; one writer thread turns pending requests into one log append + fsync each,
 * a checkpointer thread puts their keys into LMDB every few seconds (a checkpoint). */
#ifndef INGESTD_COMMIT_H
#define INGESTD_COMMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/window/genset.h"
#include "common/histogram.h"
#include "storage/window/keyhash.h"
#include "storage/window/stats.h"

typedef struct commit commit_t;

enum commit_status {
    COMMIT_OK = 0,
    COMMIT_UNAVAILABLE = -1, /* storage failed (I/O, fsync, LMDB); retry later: nothing was kept */
    COMMIT_CLOSED = -2,      /* shutting down */
    COMMIT_NOMEM = -3,
    COMMIT_INVALID = -4,     /* bad options */
    COMMIT_OPEN_FAILED = -5, /* open: store or log could not be opened or recovered */
    COMMIT_BUSY = -6,        /* submit: the queue holds queue_max_bytes of events already; retry
                                later: nothing was queued */
    COMMIT_UNSUPPORTED = -7, /* lookup: memory mode (a filter) keeps no key's log position */
};

enum commit_result {
    COMMIT_ACCEPTED = 0,  /* appended to the log */
    COMMIT_DUPLICATE = 1, /* key already inside the window: not appended */
};

typedef struct commit_event {
    uint8_t key[KEYHASH_LEN]; /* in: dedupe key */
    int64_t received_ms;      /* in */
    const char *data;         /* in: payload bytes, owned by the submitter */
    uint32_t len;             /* in */
    int result;               /* out: commit_result */
    /* out: COMMIT_ACCEPTED: the log offset it was appended at. COMMIT_DUPLICATE: the log offset
     * of the copy the window holds (the first one accepted inside the window, possibly earlier
     * in the same batch), valid only when first_received_ms is not 0 */
    uint64_t offset;
    /* out: COMMIT_DUPLICATE: that copy's receivedAt (ms since the epoch), wherever the window
     * keeps it (keys acknowledged since the last checkpoint, the young LMDB store, a sealed
     * generation). 0: unknown, with offset: memory-filter mode keeps no positions. Not set for
     * COMMIT_ACCEPTED */
    int64_t first_received_ms;
    /* in, filled by commit_prepare (all zero: not prepared): whether a sealed generation's
     * filter passed the key, and the newest generation's end then */
    bool prepared, maybe_sealed;
    uint64_t probed_end;
} commit_event_t;

typedef struct commit_req commit_req_t;
typedef void (*commit_done_fn)(commit_req_t *req, void *arg);

/*
 * One submitted request. Allocated and owned by the submitter; it must stay
 * valid until `done` is called. The events of one request are committed
 * together: all in one group commit, or all failed.
 */
struct commit_req {
    commit_event_t *events;
    size_t n;
    int status;          /* out: COMMIT_OK, or why every event failed */
    commit_done_fn done; /* called exactly once, from the writer thread */
    void *arg;
    commit_req_t *next; /* private to storage/commit*.c */
    uint64_t bytes;     /* private to storage/commit*.c: the events' data bytes */
};

/* Operator notices from the writer thread (storage never logs itself); `level` 0 error, 1 warning,
 * 2 info. */
typedef void (*commit_notify_fn)(void *arg, int level, const char *msg);

typedef struct commit_options {
    const char *data_dir;      /* holds store/ and log/; created if missing */
    int64_t window_ms;         /* age bound of the window (> 0) */
    uint64_t max_keys;         /* size bound of the window (0: none) */
    uint64_t segment_bytes;    /* log segment rotation size */
    uint64_t map_size;         /* initial LMDB map size (0: default) */
    size_t max_batch_events;   /* cap on events per group commit (0: default 50,000) */
    int store_sync;            /* enum store_sync (storage/window/store.h); 0: STORE_SYNC_META.
                                  STORE_SYNC_NONE is the "lazy" protocol: DIR/store/UNSYNCED
                                  holds the boot id while LMDB has unsynced commits; a start
                                  that finds it from another boot rebuilds the store from the
                                  log; a clean close syncs LMDB and removes it */
    const char *boot_id_path;  /* where the kernel's boot id is read; NULL: the /proc file */
    const char *memory_filter; /* non-NULL: no LMDB; de-duplicate with this bounded-memory filter
                                  (a storage/memfilter/filter.h spec such as "qqhtd:8Mbit"),
                                  rebuilt from the retained log at every open. The window is
                                  then the filter's: it forgets on its own, --window and
                                  max_keys do not apply, and a false positive loses a unique
                                  event. The log stays durable as ever */
    bool lock_held;            /* the caller holds DIR/LOCK already (`ingestd rebuild`) */
    const char *store_dir;     /* the LMDB store and its generations (gens/), a directory of
                                  the data dir; NULL: DIR/store, and the start removes the
                                  DIR/store.rebuild-* a rebuild cut short left (notified).
                                  `ingestd rebuild` replays into such a sibling, which it then
                                  swaps in (storage/window/storeswap.h) */
    uint64_t young_keys;       /* keys the young LMDB store holds before they are sealed into a
                                  generation file (docs/window.md); 0: COMMIT_YOUNG_KEYS. With
                                  max_keys at or under it nothing is ever sealed */
    int64_t log_retention_ms;  /* delete closed log segments older than this (0: keep) */
    uint64_t log_max_bytes;    /* delete the oldest closed segments beyond this size (0: keep) */
    uint64_t queue_max_bytes;  /* bound on event data bytes submitted and not yet answered (queued
                                  or in the group commit under way): past it commit_submit
                                  answers COMMIT_BUSY, so a flood costs no more memory than
                                  this. A request is always taken while nothing is queued, so
                                  one larger than the bound still passes. 0: no bound */
    commit_notify_fn notify;   /* may be NULL; called on the writer thread */
    void *notify_arg;
    /* /metrics histograms, borrowed (must outlive the commit), each may be NULL: the duration
     * of every log fsync in seconds, and the events of every successful group commit */
    histogram_t *fsync_seconds;
    histogram_t *batch_events;
    /* May be NULL, borrowed: for every duplicate whose first copy is known, its receivedAt minus
     * the first copy's, in seconds (how late retries arrive: what --window must cover) */
    histogram_t *duplicate_age_seconds;
    /* The window's floor (0: none). The window is below it while it forgets keys younger than
     * the floor: a key evicted by the size bound (max_keys, or a generation dropped for it) was
     * received less than window_floor_ms ago and the oldest retained key is younger than the
     * floor too. A young or idle server is not below it: nothing it received was forgotten.
     * Each crossing is notified (level 1 when it falls below, 2 when it is back), and
     * commit_stats_t.window_below_floor says which side it is on */
    int64_t window_floor_ms;
    /* May be NULL: called from commit_open while it replays the log into LMDB (`ingestd
     * rebuild`), after each chunk, with the records replayed so far and the total to replay */
    void (*replay_progress)(void *arg, uint64_t done, uint64_t total);
    void *replay_progress_arg;
} commit_options_t;

#define COMMIT_YOUNG_KEYS GENSET_YOUNG_KEYS

typedef struct commit_stats {
    /*
     * The de-duplication window (storage/window/stats.h), as both roles report it: its keys
     * (exact after every batch, LMDB or not yet), evictions, generations, seals and merges,
     * and the repairs made by each open of storage (the start and each re-establishment)
     * after a crash or power loss. Filled by the window engine, with what only the group
     * commit knows: the keys acknowledged since the last checkpoint and their evictions, and
     * whether the size bound reaches below --window-floor.
     */
    window_stats_t window;
    uint64_t accepted, duplicates;  /* events */
    uint64_t batches, batch_events; /* group commits and their events */
    uint64_t last_batch_events, max_batch_events;
    uint64_t last_batch_requests;
    uint64_t failures; /* group commits answered COMMIT_UNAVAILABLE (recovered ones: recoveries) */
    uint64_t fsyncs;
    double fsync_ms_last, fsync_ms_max, fsync_ms_total;
    uint64_t checkpoints; /* checkpoints: the keys acknowledged since the last one into LMDB */
    uint64_t checkpoint_failures; /* failed ones (storage was then re-established from the log) */
    double checkpoint_ms_last, checkpoint_ms_max, checkpoint_ms_total; /* in the background */
    uint64_t map_grows; /* map doublings: ahead of need, or after MDB_MAP_FULL */
    uint64_t carried;   /* keys of a source within its budget moved to the young end while another
                           source was over its own (docs/window.md) */
    uint64_t log_first_offset, log_next_offset, log_bytes, log_segments;
    uint64_t store_map_size, store_used_bytes;
    uint64_t replayed_at_open;    /* log records replayed into LMDB at start */
    uint64_t truncated_at_open;   /* torn tail bytes cut off at start */
    size_t queue_events;          /* waiting for the next group commit */
    uint64_t queue_bytes;         /* event data bytes submitted and not yet answered */
    uint64_t queue_max_bytes;     /* the bound on queue_bytes (0: none) */
    uint64_t busy_requests;       /* submits refused with COMMIT_BUSY */
    uint64_t busy_events;         /* their events */
    bool storage_failed;          /* storage failed and is being re-established: commits answer
                                     COMMIT_UNAVAILABLE meanwhile */
    uint64_t recoveries;          /* times storage was re-established after a failure */
    bool memory_store;            /* de-duplicating with a filter (memory_filter), not LMDB */
    char filter_spec[96];         /* its canonical spec */
    uint64_t filter_bits;         /* its table size */
    double filter_fpr;            /* its asymptotic false positive rate (0..1) */
    bool rebuilt_at_open;         /* lazy mode: the machine restarted with LMDB unsynced, so the
                                     store was rebuilt from the log */
    uint64_t committed_offset;    /* log offset after the last acknowledged record */
    uint64_t window_first_offset; /* log offset of the oldest key in the window (= committed when
                                     the window is empty) */
    uint64_t retention_segments, retention_records; /* deleted by log retention */
    uint64_t retention_window_records; /* of those, records still inside the dedupe window:
                                          `rebuild` can no longer restore their keys */
    uint64_t retention_held_bytes;     /* at the last retention pass: bytes of segments past the
                                          bounds kept because the store had not durably applied
                                          their records yet (0: none) */
    uint64_t retention_waits;          /* retention passes that kept segments so */
    int64_t duplicate_age_max_ms;      /* the oldest first copy a duplicate had (its age) */
} commit_stats_t;

/*
 * Opens DIR/store and DIR/log, recovers (truncates a torn log tail, finishes
 * the evictions of a checkpoint cut short, replays log records past LMDB's
 * applied offset), and starts the writer thread.
 * A group commit is acknowledged once its records are fsynced to the log;
 * de-duplication reads a snapshot of LMDB plus the keys acknowledged since it,
 * which a checkpointer thread writes into LMDB every 3 s (or after 512 Ki
 * keys) and at close, without holding up any batch: a crash loses at
 * most what the log replays at the next start. A failed checkpoint fails no
 * request: storage is re-established as below. /stats is exact after every
 * batch (keys, evictions, the window), whether or not LMDB has caught up.
 * After a failed group commit (I/O error, failed fsync, LMDB error) the
 * writer answers that batch COMMIT_UNAVAILABLE, closes store and log and
 * re-establishes them from disk exactly as at start (never trusting what a
 * failed fsync may have left in the page cache); until that succeeds, every
 * batch fails fast, and re-opening is retried at most once a second.
 * Takes an exclusive lock on DIR/LOCK (a second server on one dir fails) unless opts->lock_held.
 * On failure *errbuf (if not NULL) gets a readable reason.
 */
int commit_open(const commit_options_t *opts, commit_t **out, char *errbuf, size_t errlen);

/*
 * For readers in other processes (`log cat`): the log offset up to which records
 * are acknowledged, from DIR/store/ACKED, which the server rewrites after every
 * group commit (LMDB's applied offset lags by up to a checkpoint). Returns 0 and
 * *offset, or -1 when there is no valid such file (then go by the applied offset).
 * The log may end before it (a restored backup): never read past the log's end.
 */
int commit_read_acked(const char *data_dir, uint64_t *offset);

/* Writes DIR/store/ACKED durably (for `ingestd backup`: the copy's acknowledged end). 0 or -1. */
int commit_write_acked_file(const char *data_dir, uint64_t offset);

/* The data dir's hash secret; valid until commit_close(). */
const uint8_t *commit_secret(const commit_t *c);

/*
 * Queues `req`. Returns COMMIT_OK (done will be called later from the writer
 * thread), or an error (done is NOT called; nothing was queued): COMMIT_BUSY
 * when the event bytes not yet answered plus req's would pass
 * opts.queue_max_bytes, COMMIT_CLOSED when closing. Thread-safe.
 */
int commit_submit(commit_t *c, commit_req_t *req);

/*
 * Optional, on the submitter's thread before commit_submit: asks the sealed
 * generations' filters about every event's key (commit_event_t.prepared and
 * the fields after it). The writer, the one thread every event passes, then
 * asks a generation only for keys a filter did not rule out, and for the
 * rest only the generations sealed since: in a big window the filters' cache
 * misses are most of a new key's cost. Without generations (or in memory
 * mode) it does nothing. Thread-safe; never blocks on I/O.
 */
void commit_prepare(commit_t *c, commit_event_t *events, size_t n);

/*
 * Whether the queue is at its bound now (commit_submit would answer
 * COMMIT_BUSY to any request): a cheap early refusal before a request body is
 * read. Lock-free; thread-safe.
 */
bool commit_busy(commit_t *c);

/* The log directory (DIR/log); valid until commit_close(). */
const char *commit_log_dir(const commit_t *c);

/*
 * Log offset after the last acknowledged record: readers inside the server
 * read records below it only. Thread-safe, cheap.
 */
uint64_t commit_committed_offset(commit_t *c);

typedef void (*commit_watch_fn)(void *arg);

/*
 * Calls fn(arg) once, from the writer thread, as soon as the committed offset
 * is beyond `offset`, or when the monotonic clock (CLOCK_MONOTONIC, ms)
 * reaches deadline_ms, or at commit_close() — whichever comes first; fn
 * re-checks what it needs. May call fn before returning if the offset is
 * already passed. Returns COMMIT_OK, COMMIT_CLOSED or COMMIT_NOMEM (then fn
 * is not called). Thread-safe. For long-polling consumers.
 */
int commit_watch(commit_t *c, uint64_t offset, int64_t deadline_ms, commit_watch_fn fn, void *arg);

/* What commit_lookup (and storage/tools/lookup.h, the same for other processes) says of one key. */
typedef struct commit_lookup {
    bool found;              /* the key is inside the window */
    uint64_t offset;         /* found: the log offset of the record that put it there */
    int64_t received_ms;     /* found: that record's receivedAt */
    int64_t window_start_ms; /* receivedAt of the oldest key in the window; 0 when it is empty */
} commit_lookup_t;

/*
 * Whether `key` is inside the window, answered by the writer thread between
 * two group commits from the very view de-duplication uses, so the answer is
 * exact: found here means a copy submitted now would be a duplicate.
 * Blocks the calling thread until the writer answers (at most one group
 * commit and its fsync). Returns COMMIT_OK with *out filled, COMMIT_CLOSED,
 * COMMIT_UNAVAILABLE (storage is being re-established), COMMIT_UNSUPPORTED
 * (memory mode: a filter cannot say where a key is) or COMMIT_NOMEM.
 * Thread-safe; never call it on the writer thread (a commit_watch callback).
 */
int commit_lookup(commit_t *c, const uint8_t key[KEYHASH_LEN], commit_lookup_t *out);

/* Snapshot of the counters; thread-safe and cheap (no LMDB access). */
void commit_get_stats(commit_t *c, commit_stats_t *out);

/* Copies up to `max` sources (in the order they were first seen) into `out`, as of the last
 * batch; returns how many there are (call again with more room when that is more than max).
 * 0 in memory-filter mode. Thread-safe. */
size_t commit_sources(commit_t *c, window_source_t *out, size_t max);

/*
 * Stops accepting, commits everything already queued, answers every waiting
 * request, stops the writer thread and closes store and log. NULL is a no-op.
 */
void commit_close(commit_t *c);

const char *commit_strerror(int status);

#endif
