/* edge: the Kafka edge role: produces each request's valid events to the raw topic. */
#ifndef INGESTD_CLUSTER_EDGE_H
#define INGESTD_CLUSTER_EDGE_H

#include <stddef.h>
#include <stdint.h>

#include "api/api.h"
#include "cluster/cluster.h"

/*
 * `ingestd serve --role edge` (docs/scale-out.md, "Edge role"): the HTTP API
 * is single-node's (api/), but the valid events of a request go to the raw
 * topic through this sink instead of the local group commit. Per event: the
 * partition from cluster/partition.h (murmur2 of source NUL messageId, with
 * the repartition cut-over by the client's timestamp), key
 * cluster_key_encode(source, messageId), value the event as logged, CreateTime
 * receivedAt (cluster/cluster.h). The request is answered once every delivery
 * report is in (acks=all, idempotent producer): 200, or 503 when any delivery
 * failed, did not arrive within the delivery timeout, or librdkafka refused a
 * message at once. No thread waits per request: the producer's poll thread
 * answers (cluster_batch_on_complete), a timer thread answers the late ones.
 * Duplicates are not decided here; the workers drop them downstream.
 *
 * The edge implements api/api.h's sink interface (cluster/ uses that header's
 * types only, never the api library). The raw topic's partition count is read
 * from the cluster's metadata once, in cluster_edge_new: after partitions are
 * added, restart the edges with --partitions-before/--repartition-at.
 */

#define CLUSTER_EDGE_TIMEOUT_MS 10000 /* default delivery timeout per request */

typedef struct cluster_edge cluster_edge_t;

typedef struct cluster_edge_options {
    const char *brokers;       /* bootstrap.servers */
    const char *raw_topic;     /* must exist: its partition count is read at start */
    int32_t partitions_before; /* 0: no repartition; else with repartition_at_ms */
    int64_t repartition_at_ms; /* cut-over, ms since the epoch (client timestamps) */
    int timeout_ms;            /* delivery timeout per request (also librdkafka's
                                  message.timeout.ms unless --kafka-opt sets it); 0: default */
    int metadata_timeout_ms;   /* how long cluster_edge_new waits for the metadata; 0: 10 s */
    cluster_kafka_opts_t opts; /* pass-through librdkafka settings ("producer." prefix applies) */
} cluster_edge_options_t;

/*
 * Creates the producer and reads the raw topic's partition count (waiting at
 * most metadata_timeout_ms). *out freed with cluster_edge_free().
 * CLUSTER_OK, CLUSTER_EINVAL (bad options, partitions_before above the
 * partition count), CLUSTER_KAFKA, CLUSTER_TIMEOUT or CLUSTER_NOMEM; the
 * reason is in err.
 */
int cluster_edge_new(const cluster_edge_options_t *o, cluster_edge_t **out, char *err,
                     size_t errlen);

/* The sink for api_options.sink (role "edge"); valid until cluster_edge_free(). */
void cluster_edge_sink(cluster_edge_t *e, api_sink_t *sink);

/* The raw topic's partition count the edge routes with. */
int32_t cluster_edge_partitions(const cluster_edge_t *e);

/*
 * Shutting down: every request still waiting gets its 503 now (the caller's
 * thread) and later submits are refused. Call after the HTTP drain and
 * before the transport stops. Idempotent.
 */
void cluster_edge_quiesce(cluster_edge_t *e);

/* Quiesces, flushes the producer for at most flush_ms and frees. NULL is a no-op. */
void cluster_edge_free(cluster_edge_t *e, int flush_ms);

/*
 * The /stats section (a JSON object) and the /metrics lines of the edge's
 * counters, rendered from a snapshot. Pure; return malloc'd NUL-terminated
 * strings the caller frees, or NULL when out of memory.
 */
typedef struct cluster_edge_stats {
    const char *raw_topic;
    int32_t partitions, partitions_before;
    int64_t repartition_at_ms;
    int timeout_ms;
    uint64_t events_produced;  /* queued in librdkafka */
    uint64_t events_delivered; /* acknowledged by the cluster (acks=all) */
    uint64_t events_failed;    /* delivery failed (after librdkafka's retries) */
    uint64_t events_refused;   /* of requests librdkafka refused at once */
    uint64_t requests_waiting; /* answered once their delivery reports are in */
    uint64_t requests_delivered, requests_failed, requests_timed_out, requests_refused;
    const char *fatal; /* the producer's fatal error, NULL: none */
} cluster_edge_stats_t;

char *cluster_edge_stats_json(const cluster_edge_stats_t *s);
char *cluster_edge_metrics_text(const cluster_edge_stats_t *s);

#endif
