/* cluster.c: status strings, the raw-topic key format and librdkafka option pass-through. */
#include "cluster/cluster.h"

#include <stdio.h>
#include <string.h>

#include "cluster/internal.h"
#include "common/errbuf.h"

const char *cluster_strerror(int status)
{
    switch (status) {
    case CLUSTER_OK:
        return "ok";
    case CLUSTER_EINVAL:
        return "invalid argument";
    case CLUSTER_NOMEM:
        return "out of memory";
    case CLUSTER_KAFKA:
        return "kafka client error";
    case CLUSTER_TIMEOUT:
        return "kafka timed out";
    case CLUSTER_DELIVERY:
        return "kafka delivery failed";
    case CLUSTER_STORE:
        return "partition store error";
    case CLUSTER_FORMAT:
        return "malformed raw-topic message";
    default:
        return "unknown cluster status";
    }
}

size_t cluster_key_encode(const char *source, size_t source_len, const char *message_id,
                          size_t message_id_len, char *buf, size_t cap)
{
    if (source_len == 0 || memchr(source, '\0', source_len) != NULL)
        return 0;
    /* Written as two checks so the sum cannot wrap. */
    if (source_len >= cap || message_id_len >= cap - source_len)
        return 0;
    memcpy(buf, source, source_len);
    buf[source_len] = '\0';
    memcpy(buf + source_len + 1, message_id, message_id_len);
    return source_len + 1 + message_id_len;
}

int cluster_key_decode(const void *key, size_t key_len, const char **source, size_t *source_len,
                       const char **message_id, size_t *message_id_len)
{
    const char *k = key;
    const char *nul = key != NULL ? memchr(k, '\0', key_len) : NULL;
    if (nul == NULL || nul == k || (size_t)(nul - k) + 1 >= key_len)
        return CLUSTER_FORMAT;
    *source = k;
    *source_len = (size_t)(nul - k);
    *message_id = nul + 1;
    *message_id_len = key_len - *source_len - 1;
    return CLUSTER_OK;
}

int cluster_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, char *err,
                     size_t errlen)
{
    char why[256];
    if (rd_kafka_conf_set(conf, name, value, why, sizeof why) != RD_KAFKA_CONF_OK) {
        errbuf_printf(err, errlen, "kafka option %s: %s", name, why);
        return CLUSTER_EINVAL;
    }
    return CLUSTER_OK;
}

static cluster_log_fn log_fn; /* set once at start-up, before any client exists */

void cluster_set_log(cluster_log_fn fn)
{
    log_fn = fn;
}

static void on_rdkafka_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    char facility[160];
    snprintf(facility, sizeof facility, "kafka %s/%s", rk ? rd_kafka_name(rk) : "-",
             fac ? fac : "-");
    if (log_fn)
        log_fn(level, facility, buf);
}

int cluster_conf_apply(rd_kafka_conf_t *conf, const cluster_kafka_opts_t *opts, const char *client,
                       char *err, size_t errlen)
{
    if (log_fn)
        rd_kafka_conf_set_log_cb(conf, on_rdkafka_log);
    if (opts == NULL)
        return CLUSTER_OK;
    size_t clen = strlen(client);
    for (size_t i = 0; i < opts->n; i++) {
        const char *kv = opts->kv[i];
        const char *eq = strchr(kv, '=');
        char name[256];
        if (eq == NULL || eq == kv || (size_t)(eq - kv) >= sizeof name) {
            errbuf_printf(err, errlen, "kafka option \"%s\": expected NAME=VALUE", kv);
            return CLUSTER_EINVAL;
        }
        memcpy(name, kv, (size_t)(eq - kv));
        name[eq - kv] = '\0';
        const char *n = name;
        /* "consumer.x" / "producer.x": only for that client. */
        if ((strncmp(n, "consumer.", 9) == 0 || strncmp(n, "producer.", 9) == 0)) {
            if (strncmp(n, client, clen) != 0 || n[clen] != '.')
                continue;
            n += clen + 1;
        }
        int rc = cluster_conf_set(conf, n, eq + 1, err, errlen);
        if (rc != CLUSTER_OK)
            return rc;
    }
    return CLUSTER_OK;
}

void cluster_prom_outcomes(prom_t *p, const char *name, const char *const *outcomes,
                           const uint64_t *n, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        char lb[64] = "";
        prom_label(lb, sizeof(lb), "outcome", outcomes[i]);
        prom_sample_u64(p, name, lb, n[i]);
    }
}
