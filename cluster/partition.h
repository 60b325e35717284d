/* partition: which raw-topic partition an event goes to (the edge routes, the worker remembers). */
#ifndef INGESTD_CLUSTER_PARTITION_H
#define INGESTD_CLUSTER_PARTITION_H

#include <stddef.h>
#include <stdint.h>

/*
 * Every copy of one event must reach the same partition, so the partition is
 * a pure function of (source, messageId): Kafka's murmur2 (the Java client's
 * default partitioner, librdkafka's "murmur2" partitioner) of the raw-topic
 * key (cluster_key_encode: source NUL messageId), masked positive, modulo
 * the partition count. No secret: each worker partition has its own LMDB
 * with its own secret, and the edges and every other producer must agree.
 *
 * Repartitioning without forgetting: after the raw topic grows from
 * `partitions_before` to `partitions`, an event whose client timestamp is
 * before `repartition_at_ms` is still routed with the old count, so a retry of
 * an old event reaches the worker partition that remembers it
 * (docs/scale-out.md, "Repartitioning").
 */

typedef struct cluster_partitioner cluster_partitioner_t;

typedef struct cluster_partition_config {
    int32_t partitions;        /* current partition count of the raw topic (>= 1) */
    int32_t partitions_before; /* count before the cut-over; 0: no repartition */
    int64_t repartition_at_ms; /* cut-over, ms since the epoch (with partitions_before) */
} cluster_partition_config_t;

/*
 * Validates cfg (partitions >= 1; partitions_before 0, or 1..partitions with a
 * cut-over > 0) and returns a partitioner in *out, freed with
 * cluster_partitioner_free(). CLUSTER_OK, CLUSTER_EINVAL or CLUSTER_NOMEM.
 */
int cluster_partitioner_new(const cluster_partition_config_t *cfg, cluster_partitioner_t **out);
void cluster_partitioner_free(cluster_partitioner_t *p);

/*
 * The partition for (source, message_id) of an event whose client timestamp
 * is `timestamp_ms` (the `timestamp` field as the client sent it, identical
 * on every retry; pass INT64_MAX when the event has none: it is routed with
 * the current count). Pure; thread-safe.
 */
int32_t cluster_partition_for(const cluster_partitioner_t *p, const char *source, size_t source_len,
                              const char *message_id, size_t message_id_len, int64_t timestamp_ms);

/* Kafka's murmur2 (seed 0x9747b28c) of `len` bytes, as the Java client computes it. Pure. */
uint32_t cluster_murmur2(const void *data, size_t len);

/* The partition of a raw-topic key among `count` partitions: (murmur2 & 0x7fffffff) % count. */
int32_t cluster_partition_of_key(const void *key, size_t key_len, int32_t count);

#endif
