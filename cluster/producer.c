/* producer.c: idempotent producer, poll thread, delivery reports counted per batch. */
#include "cluster/producer.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster/internal.h"
#include "common/errbuf.h"

struct cluster_batch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t pending, delivered, failed;
    int refs; /* the caller's reference + one per pending message */
    /* cluster_batch_on_complete: called once when pending reaches 0 (poll thread). */
    cluster_batch_done_fn on_done;
    void *on_done_arg;
};

struct cluster_producer {
    rd_kafka_t *rk;
    rd_kafka_topic_t *rkt;
    pthread_t poller;
    bool poller_started;
    atomic_bool stop;
};

cluster_batch_t *cluster_batch_new(void)
{
    cluster_batch_t *b = calloc(1, sizeof *b);
    if (b == NULL)
        return NULL;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->refs = 1;
    return b;
}

static void batch_unref(cluster_batch_t *b)
{
    pthread_mutex_lock(&b->mu);
    bool last = --b->refs == 0;
    pthread_mutex_unlock(&b->mu);
    if (!last)
        return;
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

void cluster_batch_release(cluster_batch_t *b)
{
    if (b != NULL)
        batch_unref(b);
}

void cluster_batch_counts(cluster_batch_t *b, uint64_t *delivered, uint64_t *failed,
                          uint64_t *pending)
{
    pthread_mutex_lock(&b->mu);
    *delivered = b->delivered;
    *failed = b->failed;
    *pending = b->pending;
    pthread_mutex_unlock(&b->mu);
}

int cluster_batch_wait(cluster_batch_t *b, int timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    int rc = CLUSTER_OK;
    pthread_mutex_lock(&b->mu);
    while (b->pending > 0) {
        if (pthread_cond_timedwait(&b->cv, &b->mu, &until) == ETIMEDOUT && b->pending > 0) {
            rc = CLUSTER_TIMEOUT;
            break;
        }
    }
    if (rc == CLUSTER_OK && b->failed > 0)
        rc = CLUSTER_DELIVERY;
    pthread_mutex_unlock(&b->mu);
    return rc;
}

/* librdkafka's delivery report (poll thread): one per message, success or final failure. */
static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    (void)opaque;
    cluster_batch_t *b = m->_private;
    if (b == NULL)
        return;
    pthread_mutex_lock(&b->mu);
    if (m->err)
        b->failed++;
    else
        b->delivered++;
    b->pending--;
    cluster_batch_done_fn fn = b->pending == 0 ? b->on_done : NULL;
    if (fn != NULL)
        b->on_done = NULL;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    if (fn != NULL) /* before the unref: b stays valid during the call */
        fn(b, b->on_done_arg);
    batch_unref(b);
}

static void *poll_main(void *arg)
{
    cluster_producer_t *p = arg;
    while (!atomic_load(&p->stop))
        rd_kafka_poll(p->rk, 100);
    return NULL;
}

int cluster_producer_new(const cluster_producer_options_t *o, cluster_producer_t **out, char *err,
                         size_t errlen)
{
    cluster_producer_t *p = NULL;
    rd_kafka_conf_t *conf = NULL;
    char why[512];
    int rc;

    *out = NULL;
    if (o == NULL || o->brokers == NULL || o->topic == NULL || o->topic[0] == '\0') {
        errbuf_printf(err, errlen, "brokers and topic are required");
        return CLUSTER_EINVAL;
    }
    p = calloc(1, sizeof *p);
    conf = rd_kafka_conf_new();
    if (p == NULL || conf == NULL) {
        rc = CLUSTER_NOMEM;
        goto fail;
    }
    /* Idempotence implies acks=all and in-order retries without duplicates. */
    if ((rc = cluster_conf_set(conf, "bootstrap.servers", o->brokers, err, errlen)) ||
        (rc = cluster_conf_set(conf, "enable.idempotence", "true", err, errlen)) ||
        (rc = cluster_conf_set(conf, "acks", "all", err, errlen)) ||
        (rc = cluster_conf_set(conf, "linger.ms", "2", err, errlen)) ||
        (rc = cluster_conf_apply(conf, &o->opts, "producer", err, errlen)))
        goto fail;
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof why);
    if (p->rk == NULL) {
        errbuf_printf(err, errlen, "kafka producer: %s", why);
        rc = CLUSTER_KAFKA;
        goto fail;
    }
    conf = NULL; /* owned by rk now */
    p->rkt = rd_kafka_topic_new(p->rk, o->topic, NULL);
    if (p->rkt == NULL) {
        errbuf_printf(err, errlen, "kafka topic %s: %s", o->topic,
                      rd_kafka_err2str(rd_kafka_last_error()));
        rc = CLUSTER_KAFKA;
        goto fail;
    }
    atomic_init(&p->stop, false);
    if (pthread_create(&p->poller, NULL, poll_main, p) != 0) {
        errbuf_printf(err, errlen, "cannot start the producer's poll thread");
        rc = CLUSTER_NOMEM;
        goto fail;
    }
    p->poller_started = true;
    *out = p;
    return CLUSTER_OK;
fail:
    if (conf != NULL)
        rd_kafka_conf_destroy(conf);
    cluster_producer_free(p, 0);
    return rc;
}

int cluster_producer_partitions(cluster_producer_t *p, int timeout_ms, int32_t *count)
{
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t err = rd_kafka_metadata(p->rk, 0, p->rkt, &md, timeout_ms);
    *count = 0;
    if (err == RD_KAFKA_RESP_ERR__TIMED_OUT)
        return CLUSTER_TIMEOUT;
    if (err)
        return CLUSTER_KAFKA;
    int rc = CLUSTER_KAFKA;
    if (md->topic_cnt == 1 && md->topics[0].err == 0 && md->topics[0].partition_cnt > 0) {
        *count = md->topics[0].partition_cnt;
        rc = CLUSTER_OK;
    }
    rd_kafka_metadata_destroy(md);
    return rc;
}

int cluster_producer_send(cluster_producer_t *p, int32_t partition, const void *key, size_t key_len,
                          const void *value, size_t value_len, int64_t timestamp_ms,
                          cluster_batch_t *b)
{
    return cluster_producer_send_header(p, partition, key, key_len, value, value_len, timestamp_ms,
                                        NULL, NULL, 0, b);
}

int cluster_producer_send_header(cluster_producer_t *p, int32_t partition, const void *key,
                                 size_t key_len, const void *value, size_t value_len,
                                 int64_t timestamp_ms, const char *hname, const void *hval,
                                 size_t hval_len, cluster_batch_t *b)
{
    /* produceva: the header is one more element, present or not, with one call either way. */
    rd_kafka_vu_t vu[8] = {
        {.vtype = RD_KAFKA_VTYPE_RKT, .u.rkt = p->rkt},
        {.vtype = RD_KAFKA_VTYPE_PARTITION, .u.i32 = partition},
        {.vtype = RD_KAFKA_VTYPE_MSGFLAGS, .u.i = RD_KAFKA_MSG_F_COPY},
        {.vtype = RD_KAFKA_VTYPE_KEY, .u.mem = {(void *)key, key_len}},
        {.vtype = RD_KAFKA_VTYPE_VALUE, .u.mem = {(void *)value, value_len}},
        {.vtype = RD_KAFKA_VTYPE_TIMESTAMP, .u.i64 = timestamp_ms},
        {.vtype = RD_KAFKA_VTYPE_OPAQUE, .u.ptr = b},
    };
    size_t n = 7;
    if (hname != NULL)
        vu[n++] = (rd_kafka_vu_t){.vtype = RD_KAFKA_VTYPE_HEADER,
                                  .u.header = {hname, hval, (ssize_t)hval_len}};
    pthread_mutex_lock(&b->mu);
    b->pending++;
    b->refs++;
    pthread_mutex_unlock(&b->mu);
    rd_kafka_error_t *e = rd_kafka_produceva(p->rk, vu, n);
    if (e == NULL)
        return CLUSTER_OK;
    rd_kafka_error_destroy(e);
    /* Not queued: no delivery report will come for it. */
    pthread_mutex_lock(&b->mu);
    b->pending--;
    b->failed++;
    b->refs--;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return CLUSTER_KAFKA;
}

void cluster_producer_free(cluster_producer_t *p, int flush_ms)
{
    if (p == NULL)
        return;
    if (p->rk != NULL && flush_ms > 0)
        rd_kafka_flush(p->rk, flush_ms);
    if (p->poller_started) {
        atomic_store(&p->stop, true);
        pthread_join(p->poller, NULL);
    }
    if (p->rkt != NULL)
        rd_kafka_topic_destroy(p->rkt);
    /* rd_kafka_destroy purges what is left; their reports fail the batches (freeing them). */
    if (p->rk != NULL) {
        rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_poll(p->rk, 0);
        rd_kafka_destroy(p->rk);
    }
    free(p);
}

int cluster_batch_on_complete(cluster_batch_t *b, cluster_batch_done_fn fn, void *arg)
{
    pthread_mutex_lock(&b->mu);
    bool now = b->pending == 0;
    if (!now) {
        b->on_done = fn;
        b->on_done_arg = arg;
    }
    pthread_mutex_unlock(&b->mu);
    if (now)
        fn(b, arg);
    return now ? 1 : 0;
}

bool cluster_producer_fatal(cluster_producer_t *p, char *why, size_t whylen)
{
    char buf[256];
    if (rd_kafka_fatal_error(p->rk, buf, sizeof buf) == RD_KAFKA_RESP_ERR_NO_ERROR)
        return false;
    if (why != NULL && whylen > 0)
        snprintf(why, whylen, "%s", buf);
    return true;
}
