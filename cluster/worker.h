/* worker: consumes the raw topic, de-duplicates per partition in LMDB, produces exactly once. */
#ifndef INGESTD_CLUSTER_WORKER_H
#define INGESTD_CLUSTER_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/cluster.h"

/*
 * One consumer-group member (read_committed, no auto commit) plus one
 * transactional producer. Each assigned raw partition P has its own window
 * under DATA/partitions/RAWTOPIC-P/, the same store as single-node: a young
 * LMDB environment (storage/window/store.h) sealed into generation files in gens/
 * (storage/window/genset.h, seal.h) once it holds young_keys, dropped whole by the
 * same rule (genset_plan). The `offset` a key keeps is the raw-topic offset
 * of the record that inserted it: its owner. A key in a generation is in the
 * window, and is asked before the young store takes a key. Per polled batch:
 *   1. one LMDB write txn per partition: insert the keys (a key already held
 *      by another offset is a duplicate; held by this very offset, the record
 *      is its owner being re-processed, and is produced again; a seed record,
 *      header CLUSTER_HEADER_SEED, inserts its key and is never produced),
 *      evict by age and size, record the applied input offset;
 *   2. one Kafka transaction: produce the non-duplicates to the output topic,
 *      send_offsets_to_transaction with the group metadata, commit;
 *   3. commit the LMDB txns; then seal a young store that is full, and drop
 *      generations as the rule says (also while idle); merges run on the
 *      worker's merger thread (cluster/worker_merge.h), not between batches.
 * Any failure in 2 aborts the LMDB txns as well (an aborted transaction never
 * leaves keys behind) and rewinds the consumer to its positions below; a
 * fatal producer error (fencing) re-creates the producer first.
 *
 * Positions on assignment (and after a rewind), per partition, with A the
 * store's applied offset and C the group's committed offset:
 *   C known, A < C : repair: re-read [A, C) inserting keys without producing
 *                    (the crash fell between the Kafka and the LMDB commit, or
 *                    the partition comes from another worker), then go on at C;
 *   C known, A >= C: go on at C (records in [C, A) find themselves as owners);
 *   C unknown      : go on at A (a new group, or one whose offsets expired).
 * A position out of range (auto.offset.reset=error: retention deleted records
 * not yet read) is never skipped silently (cluster/worker_lost.h): logged as
 * an error with the range lost, counted, and the partition is stopped (paused,
 * the others go on) until cluster_worker_resume(), or with continue_on_lost
 * read on from the log start. A repair that cannot re-read keys below the
 * log start goes on from there, and says whether the window lost keys.
 *
 * Threading: cluster_worker_run() runs on the caller's thread;
 * cluster_worker_stats_json/metrics and cluster_worker_stop may be called
 * from any thread while it runs.
 */

typedef struct cluster_worker cluster_worker_t;

typedef struct cluster_worker_options {
    const char *brokers;       /* bootstrap.servers */
    const char *raw_topic;     /* input */
    const char *out_topic;     /* output */
    const char *group;         /* consumer group id */
    const char *data_dir;      /* DATA (created if missing); partitions/ goes under it */
    const char *txn_id_prefix; /* transactional.id = PREFIX-GROUP-WORKERID; NULL: "ingestd" */
    int64_t window_ms;         /* dedupe window (> 0) */
    uint64_t max_keys;         /* per partition; 0: no size bound */
    uint64_t young_keys;       /* keys a partition's LMDB store holds before they are sealed
                                  into a generation file (docs/window.md), as single-node;
                                  0: GENSET_YOUNG_KEYS */
    uint64_t map_size;         /* initial LMDB map size per partition; 0: 64 MiB */
    int store_sync;            /* enum store_sync */
    uint32_t max_batch;        /* records per transaction; 0: 1000 */
    int batch_ms;              /* how long a batch collects records; 0: 50 */
    bool mirror_offsets;       /* also commit offsets outside the txn (see cmd/worker.c) */
    /* Join without group.instance.id: a stopped worker leaves the group at once, but every
     * restart rebalances. Default (false): static membership, group.instance.id = the
     * transactional id. */
    bool dynamic_membership;
    /* Records deleted before they were processed (--on-records-lost): false (stop, the
     * default): the partition stops until cluster_worker_resume; true: logged, counted, and
     * read on from the log start. */
    bool continue_on_lost;
    cluster_kafka_opts_t opts; /* pass-through librdkafka settings */
    /* Optional log sink (the worker thread or librdkafka's threads): level 0 error .. 3 debug. */
    void (*log)(void *arg, int level, const char *msg);
    void *log_arg;
} cluster_worker_options_t;

/*
 * Validates the options, creates DATA and the worker id (DATA/worker-id: a
 * random id kept across restarts, so a restarted worker fences its own
 * unfinished transaction at once), and the Kafka clients (no network wait).
 * *out freed with cluster_worker_free(). CLUSTER_OK, CLUSTER_EINVAL (reason
 * in err), CLUSTER_KAFKA, CLUSTER_STORE or CLUSTER_NOMEM.
 */
int cluster_worker_new(const cluster_worker_options_t *o, cluster_worker_t **out, char *err,
                       size_t errlen);

/*
 * Runs until cluster_worker_stop(): then finishes (or aborts) the open
 * transaction, commits, leaves the group and closes the stores. Returns
 * CLUSTER_OK after a clean stop, or an error that made it give up (reason in
 * err).
 */
int cluster_worker_run(cluster_worker_t *w, char *err, size_t errlen);

/* Asks run() to stop; async-signal-safe (one atomic store). */
void cluster_worker_stop(cluster_worker_t *w);

/*
 * The operator views, from the snapshot taken after the last batch: JSON for
 * /stats, Prometheus text for /metrics. Return a malloc'd NUL-terminated
 * string the caller frees, or NULL when out of memory.
 */
char *cluster_worker_stats_json(cluster_worker_t *w);
char *cluster_worker_metrics(cluster_worker_t *w);

/* What cluster_worker_lookup says of one (source, messageId). */
enum cluster_lookup_status {
    CLUSTER_LOOKUP_SEEN = 0,      /* in the window of `partition`, owned by input `offset` */
    CLUSTER_LOOKUP_UNSEEN = 1,    /* `partition` is owned here and its window lacks the key */
    CLUSTER_LOOKUP_NOT_OWNED = 2, /* `partition` (-1: the count is unknown) is not owned here */
};

typedef struct cluster_lookup {
    int status;              /* enum cluster_lookup_status */
    int32_t partition;       /* of the raw topic */
    uint64_t offset;         /* SEEN: the raw-topic offset of the record that owns the key */
    int64_t received_ms;     /* SEEN: that record's Kafka timestamp */
    int64_t window_start_ms; /* UNSEEN: the partition's oldest key (0: its window is empty) */
} cluster_lookup_t;

/*
 * GET /v1/events/{messageId} on the worker: looks the key up in every
 * partition store assigned here (a repartitioned topic may hold the event
 * under its old count), answered by the run() thread between two batches,
 * so it never races a batch's LMDB transaction. Not found anywhere, the
 * partition the current partition count gives names the owner (one metadata
 * request). Blocks up to timeout_ms for the run() thread to take the
 * question (longer only while it answers). CLUSTER_OK with *out filled,
 * CLUSTER_TIMEOUT (run() is busy or not running), CLUSTER_STORE or
 * CLUSTER_EINVAL (empty source). Thread-safe.
 */
int cluster_worker_lookup(cluster_worker_t *w, const char *source, size_t source_len,
                          const char *message_id, size_t message_id_len, int timeout_ms,
                          cluster_lookup_t *out);

/* True once the worker has joined the group and its producer is ready, and while none of its
 * partitions is stopped (for /healthz). Thread-safe. */
bool cluster_worker_ready(cluster_worker_t *w);

/* How many partitions are stopped because records were deleted before they were processed.
 * Thread-safe. */
size_t cluster_worker_stopped_partitions(cluster_worker_t *w);

/* What cluster_worker_resume did. */
enum cluster_resume_status {
    CLUSTER_RESUME_RESUMED = 0,     /* reading again at `resumed_at` */
    CLUSTER_RESUME_NOT_STOPPED = 1, /* the partition is assigned here and not stopped */
    CLUSTER_RESUME_NOT_OWNED = 2,   /* the partition is not assigned to this worker */
};

typedef struct cluster_resume {
    int status; /* enum cluster_resume_status */
    int32_t partition;
    int64_t skipped_from, resumed_at; /* RESUMED: offsets [skipped_from, resumed_at) skipped */
} cluster_resume_t;

/*
 * The operator's resume of a stopped partition (POST /admin/partitions/P/resume): moves it to
 * the log start as it is now (the log end when its position was past the end), counts the
 * offsets skipped as lost records, and reads on. Answered by the run() thread between two
 * batches; blocks up to timeout_ms for it to take the request. CLUSTER_OK with *out filled,
 * CLUSTER_TIMEOUT (run() busy or not running, or the watermarks could not be read),
 * CLUSTER_KAFKA (the seek failed; still stopped) or CLUSTER_EINVAL (partition < 0).
 * Thread-safe.
 */
int cluster_worker_resume(cluster_worker_t *w, int32_t partition, int timeout_ms,
                          cluster_resume_t *out);

void cluster_worker_free(cluster_worker_t *w);

/*
 * Test hook: when the environment variable INGESTD_WORKER_CRASH_AT is
 * "POINT:N", the worker kills itself with SIGKILL the Nth time it reaches
 * POINT: "produced" (records produced, transaction open), "kafka-committed"
 * (transaction committed, LMDB not yet), "stored" (both committed).
 * "POINT:N:stop" raises SIGSTOP instead, once: the process freezes there (a
 * zombie whose session times out) and goes on where it was when sent SIGCONT.
 * Used by tests/kafka to crash at exact places; unset in production.
 */
#define CLUSTER_CRASH_ENV "INGESTD_WORKER_CRASH_AT"

#endif
