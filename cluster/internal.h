/* internal: helpers shared by the cluster/ modules (includes rdkafka.h; not for other folders). */
#ifndef INGESTD_CLUSTER_INTERNAL_H
#define INGESTD_CLUSTER_INTERNAL_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/cluster.h"
#include "common/prom.h"

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

#endif
