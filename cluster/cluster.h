/* cluster: what the Kafka roles share: status codes, the raw-topic message format, options. */
#ifndef INGESTD_CLUSTER_H
#define INGESTD_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

/*
 * The scale-out roles (docs/scale-out.md) run on librdkafka. Nothing outside
 * cluster/ includes rdkafka.h; storage/ never knows about Kafka.
 */

enum cluster_status {
    CLUSTER_OK = 0,
    CLUSTER_EINVAL = -1,   /* a bad argument or option (see the error buffer) */
    CLUSTER_NOMEM = -2,    /* out of memory */
    CLUSTER_KAFKA = -3,    /* librdkafka refused (configuration, fatal client error) */
    CLUSTER_TIMEOUT = -4,  /* the cluster did not answer in time */
    CLUSTER_DELIVERY = -5, /* at least one message was not delivered */
    CLUSTER_STORE = -6,    /* a partition's LMDB store failed */
    CLUSTER_FORMAT = -7,   /* a raw-topic message that is not in the format below */
};

const char *cluster_strerror(int status);

/*
 * Where librdkafka's own log lines go: `severity` is syslog's (0 emergency .. 7 debug), `fac`
 * "kafka CLIENT/FAC" (librdkafka's client name and facility), `msg` its text. NULL, the default:
 * librdkafka prints them to stderr itself. Set once, before any role creates a client.
 */
typedef void (*cluster_log_fn)(int severity, const char *fac, const char *msg);
void cluster_set_log(cluster_log_fn fn);

/*
 * The raw topic (edge -> worker), one Kafka message per accepted event:
 *   key       : source, one NUL byte, messageId (bytes as logged). A source
 *               never holds a NUL (write keys come from the command line), so
 *               the first NUL splits the two unambiguously.
 *   value     : the event JSON exactly as single-node ingestd logs it
 *               (messageId, receivedAt and source already stamped).
 *   timestamp : CreateTime = the event's receivedAt in ms since the epoch; the
 *               worker ages keys out by it, as single-node does by receivedAt.
 * The output topic carries the same key, value and timestamp, plus the header
 * CLUSTER_HEADER_INPUT = "PARTITION:OFFSET" of the raw record it came from.
 */
#define CLUSTER_KEY_MAX      1024 /* longest key an edge produces (source + messageId + 1) */
#define CLUSTER_HEADER_INPUT "ingestd-input"

/*
 * A seed record (`ingestd seed`, docs/scale-out.md "From one node to a
 * cluster"): one event a single node acknowledged, carried into the raw topic
 * so the workers remember its key. Same key, partition and timestamp
 * (receivedAt) as an edge would give the event, a header CLUSTER_HEADER_SEED
 * (any value; `ingestd seed` writes "1") and a small value that is not the
 * event. A worker inserts its key (owner: the seed record's offset) and never
 * produces it: the single node already delivered the event.
 */
#define CLUSTER_HEADER_SEED "ingestd-seed"

/*
 * Writes the raw-topic key of (source, message_id) into buf (cap bytes).
 * Returns its length, or 0 when it does not fit or source holds a NUL.
 */
size_t cluster_key_encode(const char *source, size_t source_len, const char *message_id,
                          size_t message_id_len, char *buf, size_t cap);

/*
 * Splits a raw-topic key into (source, messageId), pointing into `key` (valid
 * as long as it is). Returns CLUSTER_OK or CLUSTER_FORMAT (no NUL, empty
 * source or empty messageId).
 */
int cluster_key_decode(const void *key, size_t key_len, const char **source, size_t *source_len,
                       const char **message_id, size_t *message_id_len);

/*
 * librdkafka settings passed through from the command line (--kafka-opt
 * NAME=VALUE, e.g. security.protocol=SASL_SSL). A name prefixed "consumer." or
 * "producer." applies to that client only (the prefix is stripped); any other
 * to every client the role creates. Borrowed strings: the caller keeps them
 * alive while the role runs.
 */
typedef struct cluster_kafka_opts {
    const char *const *kv; /* "name=value" strings */
    size_t n;
} cluster_kafka_opts_t;

#endif
