/* internal: helpers shared by the cluster/ modules (includes rdkafka.h; not for other folders). */
#ifndef INGESTD_CLUSTER_INTERNAL_H
#define INGESTD_CLUSTER_INTERNAL_H

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/cluster.h"
#include "cluster/worker.h"
#include "cluster/worker_lost.h"
#include "cluster/worker_sources.h"
#include "common/prom.h"
#include "storage/window/engine.h"
#include "storage/window/genset.h"
#include "storage/window/keyhash.h"
#include "storage/window/merger.h"
#include "storage/window/srcmap.h"
#include "storage/window/stats.h"
#include "storage/window/store.h"

/*
 * Sets `name`=`value` on conf; on failure writes "NAME: reason" to err and
 * returns CLUSTER_EINVAL.
 */
int cluster_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, char *err,
                     size_t errlen);

/*
 * Applies the pass-through options meant for `client` ("consumer" or
 * "producer"): unprefixed ones and those prefixed "CLIENT.". Returns
 * CLUSTER_OK or CLUSTER_EINVAL with the reason in err.
 */
int cluster_conf_apply(rd_kafka_conf_t *conf, const cluster_kafka_opts_t *opts, const char *client,
                       char *err, size_t errlen);

/* One sample per outcome, name{outcome="outcomes[i]"} n[i], for i < count (the head is the
 * caller's): the /metrics counters of the edge and the worker. */
void cluster_prom_outcomes(prom_t *p, const char *name, const char *const *outcomes,
                           const uint64_t *n, size_t count);

/* ---- the Kafka worker (worker*.c), split by section around these shared types ----
 *
 * worker.c            the loop and one batch; cluster_worker_new/run/free
 * worker_kafka.c      the Kafka clients, transactions, and the offsets they carry
 * worker_partitions.c a partition's window opened, kept, closed; stops and moves
 * worker_lookup.c     operator questions answered by the consuming thread
 * worker_views.c      the snapshot, /stats and /metrics
 *
 * Threading: everything here runs on the consuming thread (cluster_worker_run), except
 * what worker_views.c and worker_lookup.c say they do on the operator thread.
 */

#define DEFAULT_MAX_BATCH 1000
#define DEFAULT_BATCH_MS  50
#define DEFAULT_MAP_SIZE  (64ull << 20)
#define MAX_GROW_RETRIES  8
#define KAFKA_TIMEOUT_MS  30000 /* one transactional call (commit, abort, offsets) */
#define COMMITTED_TIMEOUT 10000 /* fetching the group's committed offsets */
#define RETRY_PAUSE_MS    500   /* between attempts while the cluster is unreachable */
#define MAINTAIN_EVERY_MS 1000  /* generations' drops and merges of a partition, at most */

/* One assigned raw partition and its store. */
typedef struct part {
    int32_t id;
    /* its window: the young store, the generations, the merger's handle, the per-source
     * counts and the window's stats (storage/window/engine.h) */
    window_engine_t *win;
    uint8_t secret[KEYHASH_SECRET_LEN];
    int64_t repair_until; /* records below this offset only insert their keys */
    int64_t committed;    /* the group's committed offset as last known; -1 unknown */
    uint64_t applied;     /* the store's committed applied offset */
    bool txn_open;        /* an LMDB write txn of the current batch */
    int64_t batch_last;   /* last offset of the current batch in this partition; -1 none */
    bool needs_kafka;     /* the batch has records past repair_until here */
    uint64_t epoch;       /* which assignment opened it (cluster_worker.epochs) */
    int64_t move_to;      /* where to read on after an out-of-range position (-1: nowhere), done
                             before the next batch (worker_part_move_pending) */
    int64_t move_retry;   /* after a failed move, not again before this (clk_mono_ms) */
} part_t;

/* What /stats shows of one partition (copied under snap_mu). */
typedef struct part_snap {
    int32_t id;
    uint64_t keys, applied; /* keys: the young store's and the generations' */
    uint64_t generations, generation_keys, merges;
    int64_t oldest_ms, committed, high, position;
    window_stats_t win; /* its window, as the single node reports its own */
} part_snap_t;

/* A question for the run() thread, answered between batches: a cluster_worker_lookup, or a
 * cluster_worker_resume when `rout` is set. Lives on the caller's stack. */
typedef struct lookup_q {
    const char *source, *mid;
    size_t source_len, mid_len;
    cluster_lookup_t *out;
    int32_t resume; /* the partition to resume, with rout */
    cluster_resume_t *rout;
    int rc;
    bool taken, answered; /* under lk_mu */
    struct lookup_q *next;
} lookup_q_t;

typedef struct counters {
    uint64_t consumed, produced, duplicates, owners, repaired, malformed, seeded;
    uint64_t txn_committed, txn_aborted, producer_restarts, consumer_restarts, store_errors;
} counters_t;

struct cluster_worker {
    cluster_worker_options_t o;
    char txn_id[256];
    char instance_id[250]; /* group.instance.id: txn_id in the characters Kafka allows */
    rd_kafka_t *consumer, *producer;
    rd_kafka_t *mirror; /* --mirror-offsets: where offsets are mirrored (mirror_new) */
    part_t **parts;     /* indexed by partition id; NULL when not assigned */
    /* merges every partition's generations off the consuming thread */
    merger_t *merger;
    worker_sources_t *sources; /* the windows by source, for /stats and /metrics */
    worker_lost_t *lost;       /* records deleted before they were read: counts and stops */
    int32_t nparts_cap;
    uint64_t epochs; /* assignments so far: each part_open takes the next one */
    atomic_bool stop, ready;
    bool rebalanced;     /* set by the rebalance callback: check what was gathered */
    bool consumer_fatal; /* set by gather: the consumer hit a fatal error, replace it */
    bool producer_ready;
    counters_t c;
    /* crash hook (tests) */
    char crash_point[32];
    long crash_after;
    long crash_seen;
    bool crash_stop; /* ":stop": SIGSTOP (a zombie, resumed by SIGCONT) instead of SIGKILL */
    /* snapshot for the HTTP thread */
    pthread_mutex_t snap_mu;
    part_snap_t *snap;
    size_t nsnap;
    counters_t snap_c;
    /* cluster_worker_lookup's questions, answered by run() between batches */
    pthread_mutex_t lk_mu;
    pthread_cond_t lk_cv;
    lookup_q_t *lookups;
};

/* What to do after a transactional call failed. */
enum txn_verdict { TXN_RETRY, TXN_ABORT, TXN_FATAL };

/* worker.c */
/* One line to the worker's log sink, if any (any thread). */
void worker_log(cluster_worker_t *w, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Test hook (CLUSTER_CRASH_ENV): kills or stops the process at the Nth pass of `point`. */
void worker_crash_hook(cluster_worker_t *w, const char *point);

/* worker_kafka.c */
/* The producer, the consumer and (--mirror-offsets) the mirror client. A cluster status. */
int worker_kafka_clients_new(cluster_worker_t *w, char *err, size_t errlen);
/* init_transactions, retried while the cluster is unreachable. A cluster status. */
int worker_kafka_producer_init(cluster_worker_t *w, char *err, size_t errlen);
/* A new producer after a fatal error, initialised. A cluster status. */
int worker_kafka_producer_restart(cluster_worker_t *w, char *err, size_t errlen);
/* Subscribes the consumer to the raw topic. A cluster status. */
int worker_kafka_subscribe(cluster_worker_t *w, char *err, size_t errlen);
/* A new consumer after a fatal error, subscribed. Between batches. A cluster status. */
int worker_kafka_consumer_restart(cluster_worker_t *w, char *err, size_t errlen);
/* Sets list's offsets to where each partition resumes (committed and applied offsets).
 * CLUSTER_OK, or CLUSTER_TIMEOUT when the committed offsets could not be read. */
int worker_kafka_position(cluster_worker_t *w, rd_kafka_topic_partition_list_t *list);
/* Re-reads the positions of the whole assignment and seeks there (after an abort). */
void worker_kafka_rewind(cluster_worker_t *w);
/* The batch's Kafka transaction: 0 committed, TXN_ABORT (aborted) or TXN_FATAL (the producer
 * is unusable). */
int worker_kafka_txn(cluster_worker_t *w, rd_kafka_message_t **msgs, size_t n, const bool *produce,
                     rd_kafka_topic_partition_list_t *offsets, counters_t *c);
/* The offsets the batch's transaction sends: only partitions that moved past what the group
 * has committed; *any says whether there is one. Commits nothing. The caller destroys the
 * list (rd_kafka_topic_partition_list_destroy). */
rd_kafka_topic_partition_list_t *worker_kafka_txn_offsets(cluster_worker_t *w, bool *any);

/* worker_partitions.c */
/* The partition id assigned to this worker, or NULL. */
part_t *worker_part_get(cluster_worker_t *w, int32_t id);
/* Closes partition id's window (no-op when not assigned). */
void worker_part_close(cluster_worker_t *w, int32_t id);
/* The librdkafka rebalance callback: opens or closes the partitions' windows. */
void worker_part_on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                              rd_kafka_topic_partition_list_t *list, void *opaque);
/* Keys of the young store before it is sealed. */
uint64_t worker_part_young_keys(const cluster_worker_t *w);
/* The merger's failure callback (merger.h; arg is the worker). */
void worker_part_on_merge_fail(void *arg, int32_t partition, int rc, size_t n);
/* Between batches: seals, drops, and asks for merges as the window's rule says. */
void worker_part_maintain(cluster_worker_t *w, part_t *p, int64_t now);
/* worker_part_maintain for every partition due while no batch comes. */
void worker_part_maintain_idle(cluster_worker_t *w);
/* Partition moves out_of_range decided, done before a batch is gathered. */
void worker_part_move_pending(cluster_worker_t *w);
/* The consumer found p's position out of range: report, count, stop or move it. */
void worker_part_out_of_range(cluster_worker_t *w, part_t *p, int64_t pos);
/* cluster_worker_resume on the consuming thread. A cluster status, *out on CLUSTER_OK. */
int worker_part_resume(cluster_worker_t *w, int32_t id, cluster_resume_t *out);

/* worker_lookup.c */
/* Answers every queued question (the consuming thread, between batches). */
void worker_lookup_answer_all(cluster_worker_t *w);

/* worker_views.c */
/* Copies what /stats and /metrics show under snap_mu (the consuming thread). */
void worker_views_snapshot(cluster_worker_t *w);

#endif
