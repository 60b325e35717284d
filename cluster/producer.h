/* producer: the edge's idempotent Kafka producer with per-request delivery accounting. */
#ifndef INGESTD_CLUSTER_PRODUCER_H
#define INGESTD_CLUSTER_PRODUCER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/cluster.h"

/*
 * One producer per process (enable.idempotence=true, acks=all: no duplicate
 * and no reordering from the producer's own retries), polled by its own
 * thread. A request collects its messages in a cluster_batch_t and waits
 * until every delivery report is in: only then may the edge answer 200; a
 * failed or late delivery means 503 with Retry-After (the client retries,
 * the worker drops the copies that did arrive).
 */

typedef struct cluster_producer cluster_producer_t;
typedef struct cluster_batch cluster_batch_t;

typedef struct cluster_producer_options {
    const char *brokers;       /* bootstrap.servers, e.g. "k1:9092,k2:9092" */
    const char *topic;         /* the raw topic */
    cluster_kafka_opts_t opts; /* pass-through librdkafka settings ("producer." prefix applies) */
} cluster_producer_options_t;

/*
 * Creates the producer and starts its poll thread. Does not wait for the
 * cluster. *out freed with cluster_producer_free(). CLUSTER_OK, CLUSTER_EINVAL
 * (bad option: reason in err), CLUSTER_KAFKA or CLUSTER_NOMEM.
 */
int cluster_producer_new(const cluster_producer_options_t *o, cluster_producer_t **out, char *err,
                         size_t errlen);

/*
 * The raw topic's partition count from the cluster's metadata, waiting at
 * most timeout_ms. CLUSTER_OK, CLUSTER_TIMEOUT or CLUSTER_KAFKA (no such topic).
 */
int cluster_producer_partitions(cluster_producer_t *p, int timeout_ms, int32_t *count);

/* A new, empty batch (NULL when out of memory); release with cluster_batch_release(). */
cluster_batch_t *cluster_batch_new(void);

/*
 * Gives up the caller's reference. A batch with deliveries still pending
 * lives on until the last report arrives, so a request that timed out can
 * forget it. NULL is a no-op.
 */
void cluster_batch_release(cluster_batch_t *b);

/*
 * Queues one message (copied) to `partition` of the raw topic with CreateTime
 * `timestamp_ms`, counted in `b`. Thread-safe. CLUSTER_OK, or CLUSTER_KAFKA
 * when librdkafka refuses it now (queue full, fatal error: nothing queued;
 * the request fails as a whole).
 */
int cluster_producer_send(cluster_producer_t *p, int32_t partition, const void *key, size_t key_len,
                          const void *value, size_t value_len, int64_t timestamp_ms,
                          cluster_batch_t *b);

/*
 * cluster_producer_send with one header `hname` = hval (hval_len bytes, copied); hname NULL: no
 * header (then it is cluster_producer_send). Same contract otherwise.
 */
int cluster_producer_send_header(cluster_producer_t *p, int32_t partition, const void *key,
                                 size_t key_len, const void *value, size_t value_len,
                                 int64_t timestamp_ms, const char *hname, const void *hval,
                                 size_t hval_len, cluster_batch_t *b);

/*
 * Waits until every message sent in `b` has a delivery report, at most
 * timeout_ms. CLUSTER_OK when all were delivered (acks=all), CLUSTER_DELIVERY
 * when any failed, CLUSTER_TIMEOUT when some are still pending.
 */
int cluster_batch_wait(cluster_batch_t *b, int timeout_ms);

/* Delivered / failed / still pending messages of `b` so far. */
void cluster_batch_counts(cluster_batch_t *b, uint64_t *delivered, uint64_t *failed,
                          uint64_t *pending);

/* Flushes for at most flush_ms, stops the poll thread, destroys. NULL is a no-op. */
void cluster_producer_free(cluster_producer_t *p, int flush_ms);

/*
 * Asynchronous wait (the edge role: no thread blocks per request): fn(b, arg)
 * is called once, when every message sent in `b` has its delivery report:
 * on the producer's poll thread, or at once on the caller's thread when none
 * is pending any more (then returns 1, else 0). Call it after the last
 * cluster_producer_send on `b` and at most once. The callback may call
 * cluster_batch_counts and cluster_batch_release(b); it must not block.
 * cluster_producer_free purges what is still queued: the callbacks of those
 * batches run inside it when librdkafka reports the purge in time, else never.
 */
typedef void (*cluster_batch_done_fn)(cluster_batch_t *b, void *arg);
int cluster_batch_on_complete(cluster_batch_t *b, cluster_batch_done_fn fn, void *arg);

/*
 * Whether librdkafka raised a fatal error (the idempotent producer cannot go
 * on: every later send fails); the reason goes to why when given. Thread-safe.
 */
bool cluster_producer_fatal(cluster_producer_t *p, char *why, size_t whylen);

#endif
