/*
 * commit/internal.h: the private header of the group commit (storage/commit*.c):
 * struct commit, and one section of prototypes per file. Nothing outside
 * every file of storage/commit/ includes it; commit.h is the contract.
 */
#ifndef INGESTD_COMMIT_INTERNAL_H
#define INGESTD_COMMIT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "common/clock.h"
#include "common/errbuf.h"
#include "storage/commit/commit.h"
#include "storage/memfilter/filter.h"
#include "storage/window/engine.h"
#include "storage/window/genset.h"
#include "storage/window/merger.h"
#include "storage/log/log.h"
#include "storage/window/pending.h"
#include "storage/window/srcmap.h"
#include "storage/window/store.h"

#define DEFAULT_MAX_BATCH 50000
#define MAX_GROW_RETRIES  16
/* The checkpointer's (commit/checkpoint.c has the design). */
#define CHUNK_MAX        262144
#define CHUNK_BIG_WINDOW 131072

/* What the checkpointer is doing; under mu. */
enum job_state {
    JOB_IDLE,    /* nothing handed over */
    JOB_QUEUED,  /* handed over, not yet started */
    JOB_RUNNING, /* being written */
    JOB_DONE,    /* written (or failed, or cancelled): the writer has not yet taken the result */
};

/* One checkpoint: a frozen generation and the window floor, into LMDB. */
typedef struct {
    enum job_state state;
    uint64_t commits;     /* LMDB transactions committed by checkpoints so far */
    bool cancel;          /* stop before the next transaction (storage is being re-opened) */
    bool quit;            /* the checkpointer thread ends */
    int status;           /* STORE_OK or why it failed */
    const pending_t *gen; /* the keys, in sequence order */
    uint64_t sealed;      /* out: keys the job sealed into a generation after its checkpoint */
    uint64_t floor;       /* evict every sequence below it */
    uint64_t applied;     /* the log offset after the last record acknowledged when handed over */
} ckpt_job_t;

/* A commit_lookup waiting for the writer's answer; lives on the caller's stack. */
typedef struct lookup_req {
    const uint8_t *key;
    commit_lookup_t *out;
    int status;    /* set by the writer */
    bool answered; /* under mu: the caller may return (and the struct go) */
    struct lookup_req *next;
} lookup_req_t;

/* A long-polling reader waiting for the committed offset to pass `offset`. */
typedef struct watch {
    uint64_t offset;
    int64_t deadline_ms; /* CLOCK_MONOTONIC */
    commit_watch_fn fn;
    void *arg;
    struct watch *next;
} watch_t;

struct commit {
    commit_options_t opts;
    char *data_dir;
    char *log_dir;
    char *store_dir;    /* opts.store_dir, or DIR/store */
    bool sibling_store; /* opts.store_dir was given: a rebuild's, no leftovers to remove */
    int lockfd;
    const struct commit_mode *mode; /* LMDB or memory, chosen once at open */
    /* LMDB mode: the window (storage/window/engine.h: the young store, its generations and
     * their merger hand-off), set under mu, NULL while closed; `store` and `gens` are its
     * young store and set (borrowed, as long as it is open). `store` is open a little longer
     * on its own: from its open until the engine takes it (commit/recover.c). */
    window_engine_t *engine;
    store_t *store;   /* LMDB, or NULL in memory mode */
    filter_t *filter; /* memory mode: the bounded-memory filter, while open */
    filter_spec_t fspec;
    log_t *log;
    uint8_t secret[KEYHASH_SECRET_LEN];
    /* DIR/TAGGED_FROM (storage/window/retag.h): records below it get their source's tag when read;
     * how many did at the last open, and how many had no source to take it from. */
    uint64_t tagged_from, retagged, retag_nosource;
    bool older_store; /* the store being opened was of an older format: rewrite TAGGED_FROM */

    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    commit_req_t *head, *tail; /* queue, under mu */
    size_t queue_events;
    /* Event bytes submitted and not yet answered (opts.queue_max_bytes bounds it): added under mu
     * (so check and add are one step), subtracted by the writer, read lock-free by commit_busy. */
    _Atomic uint64_t queue_bytes;
    uint64_t busy_requests, busy_events; /* under mu */
    bool closing;
    commit_stats_t stats;      /* under mu */
    window_source_t *src_copy; /* under mu: c->sources as of the last commit_refresh_stats */
    size_t src_copy_n, src_copy_cap;
    watch_t *watches; /* under mu */

    /* Under mu: log retention never deletes a record at or past it: the log offset below which
     * the store has durably applied every record (commit/retain.c says what is durable in each
     * --store-sync mode); LOG_RETAIN_UNBOUNDED in memory mode. Set by whoever writes the store
     * (its open, the checkpointer). */
    uint64_t store_durable;

    /* Under mu: commit_lookup's questions, answered between batches; lookup_cv: answered. */
    lookup_req_t *lookups;
    pthread_cond_t lookup_cv;

    /* Writer-thread only (and commit_open/commit_close before/after it runs). */
    log_record_t *recs;
    size_t recs_cap;
    int64_t last_reader_check;
    bool failed;                  /* store/log are closed or unusable: being re-established */
    bool discard;                 /* re-open the log cutting off everything from discard_from: */
    uint64_t discard_from;        /* the end of its last successful sync */
    int64_t last_recover_ms;      /* monotonic time of the last re-establishing attempt */
    int64_t last_retain_ms;       /* monotonic time retention last ran */
    int64_t last_held_warn_ms;    /* monotonic time of the last "retention is waiting" warning */
    int acked_fd;                 /* DIR/store/ACKED, or -1 */
    int64_t last_short_window_ms; /* monotonic time of the last "window shortened" warning */
    /* The window's floor (commit/reach.c): evicted_size when last judged, the receivedAt mark of
     * the newest forgetting (0: none yet), and whether to take the mark once more. */
    uint64_t reach_seen_evicted;
    int64_t reach_forgot_ms;
    bool reach_recheck;

    /*
     * The writer's view of the window (LMDB mode, writer-thread only): a read
     * snapshot (sequences below snap_end), the generation handed to the
     * checkpointer (`flight`, until its commit is in the snapshot) and the
     * one being filled (`cur`). Sequences below `floor` are evicted, whether
     * or not LMDB has deleted them yet; every sequence in [floor, next_seq)
     * that exists names a key in the window, `live` of them.
     */
    store_reader_t *reader;
    genset_t *gens; /* the sealed generations (the engine's) */
    /* writer-only: the engine's view, taken after every move of `reader`, never before */
    const genset_view_t *gview;
    pending_t *cur, *flight, *spare;
    int64_t cur_since_ms; /* monotonic time of the last hand-over (or open) */
    uint64_t snap_end, next_seq, floor, live;
    uint64_t handed_floor; /* the floor the last hand-over carried */
    /* [floor, next_seq)'s keys by source (per-source budgets, window_judge_source), and what
     * left by source. Writer-only; the replay keeps it too, while the writer is not running.
     * Lives as long as c, so its eviction counts outlast a re-establishing of storage. */
    srcmap_t *sources;
    uint64_t carried;      /* keys carried to the young end (WINDOW_CARRY) */
    uint64_t seen_commits; /* job.commits when the snapshot last moved on */
    /* Writer-only scratch of one batch's lookups (commit/view.c), grown as needed: per event,
     * what the snapshot and the generations say (and of a key in the window, its copy); the
     * keys asked of the generations together, which event each is, and their answers. */
    size_t look_cap;
    uint8_t *look_state;
    uint8_t (*look_keys)[KEYHASH_LEN];
    size_t *look_event;
    bool *look_found;
    gen_entry_t *look_first; /* per event: the copy in the window (offset, receivedAt) */
    gen_entry_t *look_gen;   /* per question: the generations' answer */

    /* The checkpointer thread (LMDB mode). */
    pthread_t ckpt_thread;
    bool ckpt_started;
    pthread_cond_t ckpt_cv; /* wakes the checkpointer; the writer waits on cv */
    ckpt_job_t job;         /* under mu */
    size_t ckpt_chunk;      /* checkpointer-only: deletions per LMDB transaction (CHUNK_MAX) */
    /* commit_prepare's access to the generations, from submitter threads: the set while it is
     * open (under mu), how many threads probe it now, and the writer's wait for them to end
     * before it closes the set. */
    genset_t *probe_gens;
    unsigned probing;
    pthread_cond_t probe_cv;
    /* The merger (LMDB mode, commit/merge.c): its thread, which the engine gives its set to
     * while open. */
    merger_t *merger;
    /* What the window did since the start, kept across the engines of each re-establishing of
     * storage (the engine updates it; read through window_engine_stats). */
    window_counts_t window_counts;
    /* Writer-only: keys the writer's view evicted (it judges keys not yet in LMDB, which the
     * engine never sees), by reason; added to the engine's counts in the stats. */
    uint64_t view_evicted_age, view_evicted_size;
    uint64_t ckpt_store_bytes; /* checkpointer-only: LMDB's size after its last job */
};

/* Result of applying one batch. */
typedef struct {
    uint64_t accepted, duplicates, evicted_age, evicted_size;
    double fsync_ms;
    bool synced;
} batch_out_t;

enum apply_result {
    APPLY_OK,
    APPLY_FAILED, /* nothing of the batch is durable */
};

/* The mode's part of /stats (commit_refresh_stats), computed off the lock. */
typedef struct commit_window {
    bool have_keys; /* keys and oldest_received_ms are known */
    uint64_t keys;
    int64_t oldest_received_ms;
    bool have_offsets; /* committed_offset and window_first_offset are known */
    uint64_t committed_offset, window_first_offset;
} commit_window_t;

/*
 * How a commit de-duplicates: against LMDB (commit_lmdb_mode, commit/lmdb.c)
 * or with a bounded-memory filter (commit_memory_mode, commit/memory.c).
 * Chosen once in commit_open; the writer calls through it and never asks
 * which. Every member is called on the writer thread unless it says
 * otherwise. A NULL member: the mode has nothing to do there.
 */
typedef struct commit_mode {
    const char *name;
    /* Opens store (or filter) and log from disk, as at start; on failure closes all again. */
    int (*open)(commit_t *c, char *errbuf, size_t errlen);
    /* Closes what open opened, the log aside (commit_recover_close_storage closes that). */
    void (*close)(commit_t *c);
    /* Background threads: after the first open (commit_open's thread); at close, after the
     * writer thread ended (commit_close's thread). */
    int (*start)(commit_t *c, char *errbuf, size_t errlen);
    void (*stop)(commit_t *c);
    /* One group commit: APPLY_OK, or APPLY_FAILED (*store_rc: why, when the store failed). */
    int (*apply)(commit_t *c, commit_req_t *batch, size_t nevents, batch_out_t *bo, int *store_rc);
    /* Fills *w from the open state (nothing when not open); c->log is open. */
    void (*window)(commit_t *c, const log_info_t *li, commit_window_t *w);
    /* A batch was applied and is durable: before its requests are answered. */
    void (*acked)(commit_t *c);
    /* Background work due between batches and while idle (rate-limited by the mode). */
    void (*tick)(commit_t *c);
    /* Under mu: the monotonic time tick is next due; INT64_MAX none, INT64_MIN now. */
    int64_t (*due)(commit_t *c);
    /* Before a batch is applied, and after it was answered. */
    void (*before_batch)(commit_t *c);
    void (*after_batch)(commit_t *c);
    /* The writer's last act before it ends: leave nothing to redo at the next open. */
    void (*drain)(commit_t *c);
} commit_mode_t;

extern const commit_mode_t commit_lmdb_mode;
extern const commit_mode_t commit_memory_mode;

/* ---- commit.c: the public API, and the helpers every file uses ---- */

/* An operator notice through opts.notify (storage never logs itself); level as commit_notify_fn. */
void commit_notify(commit_t *c, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Brings c->stats up to date with the writer's view and the log (writer thread). */
void commit_refresh_stats(commit_t *c);

/* Calls the watches whose offset the committed offset passed, or whose deadline came (every
 * one when `all`). Called with mu held; releases it around the callbacks. */
void commit_watch_fire(commit_t *c, bool all);

/* ---- commit/lookup.c: commit_lookup, answered on the writer thread ---- */

/* Answers every queued lookup (writer thread, mu held; released while answering). Returns with
 * mu held and no lookup queued. */
void commit_lookup_answer(commit_t *c);

/* ---- commit/writer.c: the writer thread (queue and group commit) ---- */

int commit_writer_start(commit_t *c, char *errbuf, size_t errlen);
/* Writer helpers for a mode's batch: room for n log records, stage one accepted event as the
 * next record (at log offset off), append and fdatasync the staged ones (a log status). */
int commit_writer_reserve(commit_t *c, size_t n);
void commit_writer_take(commit_t *c, commit_event_t *ev, uint64_t off, size_t *nrec);
int commit_writer_write_log(commit_t *c, size_t nrec, batch_out_t *bo);

/* ---- commit/retain.c: log retention, never past what the store has durably applied ---- */

/*
 * The store's last commit records `applied` as its applied offset: makes that commit durable as
 * far as --store-sync needs it to be (meta: a forced sync, for its meta page) and then lets
 * retention delete the records below `applied`. Called by the thread that writes the store (its
 * open, the checkpointer), never while a write transaction is open. A store status (a failed
 * sync: the bound stays where it was).
 */
int commit_retain_store_durable(commit_t *c, uint64_t applied);
/* Retention, at most once a second (writer thread): deletes closed segments past the age or size
 * bound but never at or past store_durable; counts, and warns about, what it had to keep. */
void commit_retain_run(commit_t *c);
/* Under mu: the monotonic time commit_retain_run is next due; INT64_MAX with no bound set. */
int64_t commit_retain_due(const commit_t *c);

/* ---- commit/reach.c: duplicate ages and the window's floor ---- */

/* Counts the ages of a durable batch's duplicates (opts.duplicate_age_seconds, the max). */
void commit_reach_count_ages(commit_t *c, const commit_req_t *batch);
/* Judges the window against opts.window_floor_ms from c->stats, notifying each crossing. */
void commit_reach_judge(commit_t *c);
/* Under mu: the monotonic time the window is next due back above the floor; INT64_MAX none. */
int64_t commit_reach_wake(const commit_t *c);

/* ---- commit/recover.c: opening from disk, at start and after a failure ---- */

/* Opens store (or filter) and log as at start; on failure all is closed again, errbuf says why. */
int commit_recover_open_storage(commit_t *c, char *errbuf, size_t errlen);
/* LMDB mode's open: store, log, replay, view. */
int commit_recover_open_lmdb(commit_t *c, char *errbuf, size_t errlen);
/* Closes what open_storage opened. The checkpointer must be idle (commit_ckpt_settle). */
void commit_recover_close_storage(commit_t *c);
/*
 * Closes and re-opens store and log from disk after a failure (grow_map: the
 * failure was a full map; open with twice the size). True when usable again.
 */
bool commit_recover(commit_t *c, bool grow_map);
/* Proves the log's file system takes a write and its fsync. 0 or -1. */
int commit_recover_probe_write(const char *logdir);

/* ---- commit/lmdb.c: LMDB mode (commit_lmdb_mode, above) ---- */

/* ---- commit/memory.c: memory mode (a filter instead of LMDB) ---- */

/* Parses the filter spec and chooses memory mode (commit_open, before anything is open). */
int commit_memory_init(commit_t *c, const char *spec, char *errbuf, size_t errlen);

/* ---- commit/view.c: the writer's read view of the window (LMDB mode) ---- */

/* The view of a freshly opened (and replayed) store: its snapshot, nothing pending. */
int commit_view_open(commit_t *c, char *errbuf, size_t errlen);
/* Counts [floor, next_seq)'s keys by source into c->sources again (after a seal emptied the
 * young store). A store status. */
int commit_view_count_sources(commit_t *c);
/* Lets commit_prepare probe the open set (after open), or stops it and waits for the probes
 * under way (before the set closes). */
void commit_view_share_gens(commit_t *c, bool share);
/* The oldest key in the window (the entry at or after the floor): *found, and *e. */
int commit_view_oldest(commit_t *c, store_entry_t *e, bool *found);
/*
 * Moves the writer's snapshot on (store_reader_refresh) and then takes the
 * generations' current view: a seal publishes its generation before it
 * empties the young store, so a snapshot that lacks a sealed key always
 * comes with a view that has it. A store status.
 */
int commit_view_refresh(commit_t *c);
/* The same after the reader moved by other means (store_reader_grow). */
void commit_view_take_gens(commit_t *c);
/* The window's rule for whole generations, from the options (genset_plan's policy). */
genset_policy_t commit_view_gen_policy(const commit_t *c);
/* Whether keys are ever sealed: without a size bound, or with one above the young store's. */
bool commit_view_seals(const commit_t *c);
/*
 * LMDB mode's batch: each key looked up in the view and, when new, added to
 * the pending generation; the new records appended to the log with one fsync.
 * APPLY_OK, or APPLY_FAILED with *store_rc when the view failed.
 */
int commit_view_apply(commit_t *c, commit_req_t *batch, size_t nevents, batch_out_t *bo,
                      int *store_rc);

/* ---- commit/merge.c: the merger (LMDB mode), which rewrites generations ---- */

/* Starts the merger thread, once, before the first engine is opened (which gives it its set). */
int commit_merge_start(commit_t *c, char *errbuf, size_t errlen);
/* Ends the merger, after the last engine closed. Safe when never started. */
void commit_merge_stop(commit_t *c);
/* Under mu: the set changed (a seal, a drop); the merger plans again. */
void commit_merge_kick(commit_t *c);
/* Under mu: rewrites published since the start. */
/* Rewrites the merger made of this window since the start; under mu. */
uint64_t commit_merge_count(const commit_t *c);

/* ---- commit/commit.c ---- */

/* The options of the event log as this commit opens it (both modes, open and re-open): the
 * segment size, the discard point of a failed sync, and LMDB's applied offset (`durable_offset`,
 * 0 in memory mode), below which retention never deletes. The one place they are built. */
log_options_t commit_log_options(const commit_t *c, uint64_t durable_offset);

/* ---- commit/files.c: DIR/secret, DIR/store/ACKED, DIR/store/UNSYNCED ---- */

/* Loads (or creates) the hash secret into c->secret, checked against `store`'s (NULL: none). */
int commit_files_load_secret(commit_t *c, store_t *store, char *errbuf, size_t errlen);
/* ACKED, open while the store is (c->acked_fd): rewritten after every acknowledged batch. */
void commit_files_open_acked(commit_t *c, const char *storedir, uint64_t offset);
void commit_files_write_acked(commit_t *c, uint64_t offset);
void commit_files_close_acked(commit_t *c);
/* DIR/store/UNSYNCED, malloc'ed (NULL: no memory). */
char *commit_files_unsynced_path(const commit_t *c);
/* 1: the machine restarted while LMDB had unsynced commits (rebuild it), 0: not, -1: error. */
int commit_files_unsynced_crash(const commit_t *c, const char *marker, char *errbuf, size_t errlen);
/* Writes this boot's id into the marker before LMDB's first unsynced commit. 0 or -1. */
int commit_files_mark_unsynced(const commit_t *c, const char *marker, char *errbuf, size_t errlen);
/* Syncs c->store and removes the marker (only_if_present: not even the sync without one). */
void commit_files_clear_unsynced(commit_t *c, bool only_if_present);
/*
 * DIR/TAGGED_FROM into c->tagged_from; when there is none, or the store was of
 * an older format (c->older_store: an older release may have appended since),
 * writes it durably holding `next_offset` (the log's end: nothing is appended
 * before this returns). Resets the retag counters. 0, or -1 with errbuf.
 */
int commit_files_open_tagged(commit_t *c, uint64_t next_offset, char *errbuf, size_t errlen);
/* Gives a record read from the log its source's tag when it is older than tagging (counted). */
void commit_files_retag(commit_t *c, log_record_t *rec);
/* Tells the operator what the last open retagged, if anything. */
void commit_files_report_retag(commit_t *c);

/* ---- commit/checkpoint.c: the checkpointer thread (LMDB mode) ---- */

int commit_ckpt_start(commit_t *c, char *errbuf, size_t errlen);
/* Ends the thread (after the writer has): cancels a job under way. Safe when never started. */
void commit_ckpt_stop(commit_t *c);
/* Waits for the job under way to end, cancelling what is left of it, and drops it. */
void commit_ckpt_settle(commit_t *c);
/* Hands the pending keys over when a checkpoint is due (or `force`), taking the last result. */
void commit_ckpt_hand_off(commit_t *c, bool force);
/* Waits until the checkpointer is idle or done, and takes its result. */
void commit_ckpt_wait(commit_t *c);
/* LMDB mode's before_batch, drain and due (commit_mode_t). */
void commit_ckpt_throttle(commit_t *c);
void commit_ckpt_drain(commit_t *c);
int64_t commit_ckpt_due(commit_t *c);

#endif
