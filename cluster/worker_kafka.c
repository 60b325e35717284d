/* worker_kafka.c: the Kafka worker's clients, its transactions and the offsets they carry. */
#include "cluster/worker.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/internal.h"
#include "cluster/partition.h"
#include "cluster/worker_lost.h"
#include "cluster/worker_sources.h"
#include "common/clock.h"
#include "common/errbuf.h"
#include "common/prom.h"
#include "storage/fsutil.h"
#include "storage/window/genset.h"
#include "storage/window/keyhash.h"
#include "storage/window/merger.h"
#include "storage/window/seal.h"
#include "storage/window/store.h"

/* ---- librdkafka callbacks ---- */

static void on_kafka_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    cluster_worker_t *w = opaque;
    /* Transport errors are retried by librdkafka itself: worth a warning, not more. */
    worker_log(w, err == RD_KAFKA_RESP_ERR__FATAL ? 0 : 1, "kafka %s: %s: %s", rd_kafka_name(rk),
               rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

/* ---- clients ---- */

static int producer_new(cluster_worker_t *w, char *err, size_t errlen)
{
    char why[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    int rc;
    if (conf == NULL)
        return CLUSTER_NOMEM;
    /* murmur2_random: the output topic is keyed like the raw one, as Java producers would. */
    if ((rc = cluster_conf_set(conf, "bootstrap.servers", w->o.brokers, err, errlen)) ||
        (rc = cluster_conf_set(conf, "transactional.id", w->txn_id, err, errlen)) ||
        (rc = cluster_conf_set(conf, "partitioner", "murmur2_random", err, errlen)) ||
        (rc = cluster_conf_set(conf, "linger.ms", "5", err, errlen)) ||
        (rc = cluster_conf_apply(conf, &w->o.opts, "producer", err, errlen))) {
        rd_kafka_conf_destroy(conf);
        return rc;
    }
    rd_kafka_conf_set_opaque(conf, w);
    rd_kafka_conf_set_error_cb(conf, on_kafka_error);
    w->producer = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof why);
    if (w->producer == NULL) {
        rd_kafka_conf_destroy(conf);
        errbuf_printf(err, errlen, "kafka producer: %s", why);
        return CLUSTER_KAFKA;
    }
    w->producer_ready = false;
    return CLUSTER_OK;
}

/* init_transactions, retried while the cluster is unreachable. Fences our own earlier instance. */
int worker_kafka_producer_init(cluster_worker_t *w, char *err, size_t errlen)
{
    while (!atomic_load(&w->stop)) {
        rd_kafka_error_t *e = rd_kafka_init_transactions(w->producer, KAFKA_TIMEOUT_MS);
        if (e == NULL) {
            w->producer_ready = true;
            return CLUSTER_OK;
        }
        bool fatal = rd_kafka_error_is_fatal(e) && !rd_kafka_error_is_retriable(e);
        errbuf_printf(err, errlen, "init_transactions: %s", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
        if (fatal)
            return CLUSTER_KAFKA;
        worker_log(w, 1, "%s; retrying", err);
        usleep(RETRY_PAUSE_MS * 1000);
    }
    errbuf_printf(err, errlen, "stopped before the producer was ready");
    return CLUSTER_TIMEOUT;
}

/*
 * How the worker joins its group, so that deploys do not stop the pipeline
 * (docs/scale-out.md, "Rebalances"):
 *  - cooperative-sticky (KIP-429): a join or leave moves only the partitions
 *    that must move; every other partition keeps being consumed throughout;
 *  - static membership (KIP-345): group.instance.id is the transactional id
 *    (PREFIX-GROUP-WORKERID, WORKERID kept in DATA/worker-id), so a worker
 *    restarted within session.timeout.ms gets its partitions back without a
 *    rebalance. A static member does not leave the group when it closes;
 *  - heartbeat.interval.ms of 1 s, not librdkafka's 3 s: the members that
 *    did not cause a rebalance learn of each of its rounds at a heartbeat, and
 *    until they do, the round waits and their transactions are refused with
 *    ILLEGAL_GENERATION (KIP-447), so the partitions that stay pause too. On a
 *    real cluster a join took 5-9 s with 3 s and 2-3 s with 1 s; the cost is
 *    one small request a second to the group coordinator. session.timeout.ms
 *    stays at librdkafka's 45 s (longer than a restart: restarts never
 *    rebalance).
 * All can be overridden with --kafka-opt (applied after these).
 */
static int membership_conf(cluster_worker_t *w, rd_kafka_conf_t *conf, char *err, size_t errlen)
{
    int rc =
        cluster_conf_set(conf, "partition.assignment.strategy", "cooperative-sticky", err, errlen);
    if (rc == CLUSTER_OK)
        rc = cluster_conf_set(conf, "heartbeat.interval.ms", "1000", err, errlen);
    if (rc == CLUSTER_OK && !w->o.dynamic_membership)
        rc = cluster_conf_set(conf, "group.instance.id", w->instance_id, err, errlen);
    return rc;
}

static int consumer_new(cluster_worker_t *w, char *err, size_t errlen)
{
    char why[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    int rc;
    if (conf == NULL)
        return CLUSTER_NOMEM;
    /* Offsets only move inside our transactions; read_committed: never act on an aborted write. */
    if ((rc = cluster_conf_set(conf, "bootstrap.servers", w->o.brokers, err, errlen)) ||
        (rc = cluster_conf_set(conf, "group.id", w->o.group, err, errlen)) ||
        (rc = cluster_conf_set(conf, "enable.auto.commit", "false", err, errlen)) ||
        (rc = cluster_conf_set(conf, "enable.auto.offset.store", "false", err, errlen)) ||
        (rc = cluster_conf_set(conf, "isolation.level", "read_committed", err, errlen)) ||
        /* Never skip silently: an out-of-range position is reported to us
           (worker_part_out_of_range). */
        (rc = cluster_conf_set(conf, "auto.offset.reset", "error", err, errlen)) ||
        (rc = cluster_conf_set(conf, "enable.partition.eof", "false", err, errlen)) ||
        (rc = membership_conf(w, conf, err, errlen)) ||
        (rc = cluster_conf_apply(conf, &w->o.opts, "consumer", err, errlen))) {
        rd_kafka_conf_destroy(conf);
        return rc;
    }
    rd_kafka_conf_set_opaque(conf, w);
    rd_kafka_conf_set_error_cb(conf, on_kafka_error);
    rd_kafka_conf_set_rebalance_cb(conf, worker_part_on_rebalance);
    w->consumer = rd_kafka_new(RD_KAFKA_CONSUMER, conf, why, sizeof why);
    if (w->consumer == NULL) {
        rd_kafka_conf_destroy(conf);
        errbuf_printf(err, errlen, "kafka consumer: %s", why);
        return CLUSTER_KAFKA;
    }
    rd_kafka_poll_set_consumer(w->consumer);
    return CLUSTER_OK;
}

/*
 * --mirror-offsets (the mock cluster keeps no transactional offsets): a
 * client that is no group member commits each transaction's offsets to group
 * GROUP.mirror, and positions are read from there. Not through the member
 * itself: a plain OffsetCommit that races a generation bump during a
 * cooperative rebalance gets ILLEGAL_GENERATION, and librdkafka (before
 * 2.10.0, #4908) then drops the whole assignment as lost, which would add a
 * rebalance round that a real cluster, taking the offsets inside the
 * transaction, never has.
 */
static int mirror_new(cluster_worker_t *w, char *err, size_t errlen)
{
    char why[512], group[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    int rc;
    if (conf == NULL)
        return CLUSTER_NOMEM;
    snprintf(group, sizeof group, "%s.mirror", w->o.group);
    if ((rc = cluster_conf_set(conf, "bootstrap.servers", w->o.brokers, err, errlen)) ||
        (rc = cluster_conf_set(conf, "group.id", group, err, errlen)) ||
        (rc = cluster_conf_set(conf, "enable.auto.commit", "false", err, errlen)) ||
        (rc = cluster_conf_apply(conf, &w->o.opts, "consumer", err, errlen))) {
        rd_kafka_conf_destroy(conf);
        return rc;
    }
    w->mirror = rd_kafka_new(RD_KAFKA_CONSUMER, conf, why, sizeof why);
    if (w->mirror == NULL) {
        rd_kafka_conf_destroy(conf);
        errbuf_printf(err, errlen, "kafka mirror client: %s", why);
        return CLUSTER_KAFKA;
    }
    return CLUSTER_OK;
}

int worker_kafka_subscribe(cluster_worker_t *w, char *err, size_t errlen)
{
    rd_kafka_topic_partition_list_t *sub = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(sub, w->o.raw_topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t se = rd_kafka_subscribe(w->consumer, sub);
    rd_kafka_topic_partition_list_destroy(sub);
    if (se) {
        errbuf_printf(err, errlen, "subscribe to %s: %s", w->o.raw_topic, rd_kafka_err2str(se));
        return CLUSTER_KAFKA;
    }
    return CLUSTER_OK;
}

/*
 * Replaces a consumer that hit a fatal error. librdkafka makes FENCED_INSTANCE_ID fatal, and a
 * real cluster answers it without any other instance: when the group coordinator's broker dies,
 * the session times out, and the rejoin races the new coordinator (seen on Kafka 4.4 with
 * librdkafka 2.0.2, tests/kafka/test_real_failover.py). The dead consumer never consumes again,
 * so without this the worker would sit idle for good. The new one rejoins with the same
 * group.instance.id; its partitions come back through on_assign and the usual positions.
 * Called between batches (no transaction open). CLUSTER_OK, or the new consumer's error.
 */
int worker_kafka_consumer_restart(cluster_worker_t *w, char *err, size_t errlen)
{
    char why[512] = "";
    rd_kafka_resp_err_t fe = rd_kafka_fatal_error(w->consumer, why, sizeof why);
    worker_log(w, 0, "consumer: fatal error %s (%s); replacing the consumer", rd_kafka_err2name(fe),
               why);
    w->c.consumer_restarts++;
    atomic_store(&w->ready, false);
    rd_kafka_consumer_close(w->consumer); /* revokes what is left: closes those stores */
    rd_kafka_destroy(w->consumer);
    w->consumer = NULL;
    w->rebalanced = false;
    int rc = consumer_new(w, err, errlen);
    if (rc == CLUSTER_OK)
        rc = worker_kafka_subscribe(w, err, errlen);
    return rc;
}

/*
 * Sets where each partition of `list` (the raw topic) resumes, from the
 * group's committed offsets and the stores' applied offsets (worker.h), in
 * the list's offsets. CLUSTER_OK, or CLUSTER_TIMEOUT when the committed
 * offsets could not be read.
 */
int worker_kafka_position(cluster_worker_t *w, rd_kafka_topic_partition_list_t *list)
{
    for (int i = 0; i < list->cnt; i++)
        list->elems[i].offset = RD_KAFKA_OFFSET_INVALID;
    rd_kafka_resp_err_t err =
        rd_kafka_committed(w->mirror ? w->mirror : w->consumer, list, COMMITTED_TIMEOUT);
    if (err) {
        worker_log(w, 1, "cannot read the group's committed offsets: %s", rd_kafka_err2str(err));
        return CLUSTER_TIMEOUT;
    }
    for (int i = 0; i < list->cnt; i++) {
        rd_kafka_topic_partition_t *tp = &list->elems[i];
        part_t *p = worker_part_get(w, tp->partition);
        if (p == NULL)
            continue;
        int64_t a = (int64_t)p->applied, c = tp->err || tp->offset < 0 ? -1 : tp->offset;
        p->committed = c >= 0 ? c : -1;
        p->repair_until = -1;
        if (c >= 0 && a < c) {
            p->repair_until = c;
            tp->offset = a;
            worker_log(w, 2,
                       "partition %" PRId32 ": store applied %" PRId64 " behind committed %" PRId64
                       ": repairing (keys only)",
                       p->id, a, c);
        } else if (c >= 0) {
            tp->offset = c;
        } else {
            tp->offset = a > 0 ? a : RD_KAFKA_OFFSET_BEGINNING;
        }
        worker_log(w, 2,
                   "partition %" PRId32 ": applied %" PRId64 ", committed %" PRId64
                   ", resume at %s%" PRId64,
                   p->id, a, c, tp->offset == RD_KAFKA_OFFSET_BEGINNING ? "beginning " : "",
                   tp->offset == RD_KAFKA_OFFSET_BEGINNING ? (int64_t)0 : tp->offset);
    }
    return CLUSTER_OK;
}

/* Re-reads positions for the whole assignment and seeks there (after an aborted transaction). */
void worker_kafka_rewind(cluster_worker_t *w)
{
    rd_kafka_topic_partition_list_t *list = NULL;
    if (rd_kafka_assignment(w->consumer, &list) != 0 || list == NULL)
        return;
    /* A stopped partition stays where it stopped until the operator resumes it. */
    for (int32_t i = 0; i < w->nparts_cap; i++)
        if (w->parts[i] != NULL && worker_lost_stopped(w->lost, i, NULL))
            rd_kafka_topic_partition_list_del(list, w->o.raw_topic, i);
    while (list->cnt > 0 && worker_kafka_position(w, list) != CLUSTER_OK && !atomic_load(&w->stop))
        usleep(RETRY_PAUSE_MS * 1000);
    if (list->cnt > 0) {
        rd_kafka_error_t *e = rd_kafka_seek_partitions(w->consumer, list, KAFKA_TIMEOUT_MS);
        if (e != NULL) {
            worker_log(w, 0, "seek after abort: %s", rd_kafka_error_string(e));
            rd_kafka_error_destroy(e);
        }
    }
    rd_kafka_topic_partition_list_destroy(list);
}

/* Replaces a producer that hit a fatal error (fenced, or the coordinator lost its state). */
int worker_kafka_producer_restart(cluster_worker_t *w, char *err, size_t errlen)
{
    rd_kafka_destroy(w->producer);
    w->producer = NULL;
    w->c.producer_restarts++;
    int rc = producer_new(w, err, errlen);
    if (rc == CLUSTER_OK)
        rc = worker_kafka_producer_init(w, err, errlen);
    return rc;
}

/* Produces one output record; waits for queue space rather than failing the transaction. */
static rd_kafka_resp_err_t produce_one(cluster_worker_t *w, const rd_kafka_message_t *m)
{
    char hdr[48];
    int hlen = snprintf(hdr, sizeof hdr, "%" PRId32 ":%" PRId64, m->partition, m->offset);
    rd_kafka_timestamp_type_t tst;
    int64_t ts = rd_kafka_message_timestamp(m, &tst);
    for (;;) {
        rd_kafka_resp_err_t err = rd_kafka_producev(
            w->producer, RD_KAFKA_V_TOPIC(w->o.out_topic), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_KEY(m->key, m->key_len), RD_KAFKA_V_VALUE(m->payload, m->len),
            RD_KAFKA_V_TIMESTAMP(ts > 0 ? ts : 0),
            RD_KAFKA_V_HEADER(CLUSTER_HEADER_INPUT, hdr, (ssize_t)hlen), RD_KAFKA_V_END);
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
            return err;
        rd_kafka_poll(w->producer, 50);
    }
}

static enum txn_verdict verdict(cluster_worker_t *w, const char *what, rd_kafka_error_t *e)
{
    enum txn_verdict v = rd_kafka_error_is_fatal(e)             ? TXN_FATAL
                         : rd_kafka_error_txn_requires_abort(e) ? TXN_ABORT
                         : rd_kafka_error_is_retriable(e)       ? TXN_RETRY
                                                                : TXN_ABORT;
    worker_log(w, v == TXN_RETRY ? 1 : 0, "%s: %s (%s)", what, rd_kafka_error_string(e),
               v == TXN_FATAL   ? "fatal: new producer"
               : v == TXN_ABORT ? "aborting"
                                : "retrying");
    rd_kafka_error_destroy(e);
    return v;
}

/*
 * Stage 2: the Kafka transaction. Returns TXN_RETRY-free outcomes: 0 committed,
 * TXN_ABORT (aborted: rewind), TXN_FATAL (producer unusable: restart, rewind).
 */
int worker_kafka_txn(cluster_worker_t *w, rd_kafka_message_t **msgs, size_t n, const bool *produce,
                     rd_kafka_topic_partition_list_t *offsets, counters_t *c)
{
    rd_kafka_error_t *e = rd_kafka_begin_transaction(w->producer);
    int v;
    if (e != NULL)
        return verdict(w, "begin_transaction", e) == TXN_FATAL ? TXN_FATAL : TXN_ABORT;
    for (size_t i = 0; i < n; i++) {
        if (!produce[i])
            continue;
        rd_kafka_resp_err_t err = produce_one(w, msgs[i]);
        if (err) {
            worker_log(w, 0, "produce to %s: %s", w->o.out_topic, rd_kafka_err2str(err));
            v = rd_kafka_fatal_error(w->producer, NULL, 0) ? TXN_FATAL : TXN_ABORT;
            goto abort;
        }
        c->produced++;
    }
    if (w->crash_point[0] != '\0' && strcmp(w->crash_point, "produced") == 0)
        rd_kafka_flush(w->producer, 10000); /* test hook: the open txn's records on the brokers */
    worker_crash_hook(w, "produced");
    rd_kafka_consumer_group_metadata_t *cgmd = rd_kafka_consumer_group_metadata(w->consumer);
    for (;;) {
        e = rd_kafka_send_offsets_to_transaction(w->producer, offsets, cgmd, KAFKA_TIMEOUT_MS);
        if (e == NULL)
            break;
        v = verdict(w, "send_offsets_to_transaction", e);
        if (v != TXN_RETRY || atomic_load(&w->stop)) {
            rd_kafka_consumer_group_metadata_destroy(cgmd);
            v = v == TXN_RETRY ? TXN_ABORT : v;
            goto abort;
        }
    }
    rd_kafka_consumer_group_metadata_destroy(cgmd);
    for (;;) {
        e = rd_kafka_commit_transaction(w->producer, KAFKA_TIMEOUT_MS);
        if (e == NULL)
            return 0;
        v = verdict(w, "commit_transaction", e);
        if (v != TXN_RETRY)
            goto abort;
        /* A retriable commit may have gone through: retrying tells, unless we are stopping (then
         * the abort below, or the next instance with our transactional.id, settles it). */
        if (atomic_load(&w->stop)) {
            v = TXN_ABORT;
            goto abort;
        }
    }
abort:
    if (v == TXN_ABORT) {
        e = rd_kafka_abort_transaction(w->producer, KAFKA_TIMEOUT_MS);
        if (e != NULL) {
            /* Could not abort in time: the producer is in doubt; a new one fences it. */
            worker_log(w, 0, "abort_transaction: %s", rd_kafka_error_string(e));
            rd_kafka_error_destroy(e);
            v = TXN_FATAL;
        }
    }
    return v;
}

/* Offsets to commit: only partitions that moved past what the group has committed. *any says
 * whether there is one (then the batch needs a Kafka transaction). */
rd_kafka_topic_partition_list_t *worker_kafka_txn_offsets(cluster_worker_t *w, bool *any)
{
    rd_kafka_topic_partition_list_t *offsets = rd_kafka_topic_partition_list_new(8);
    *any = false;
    for (int32_t i = 0; i < w->nparts_cap; i++) {
        part_t *p = w->parts[i];
        if (p == NULL || !p->txn_open || !p->needs_kafka)
            continue;
        rd_kafka_topic_partition_list_add(offsets, w->o.raw_topic, p->id)->offset =
            p->batch_last + 1;
        *any = true;
    }
    return offsets;
}

int worker_kafka_clients_new(cluster_worker_t *w, char *err, size_t errlen)
{
    int rc;
    if ((rc = producer_new(w, err, errlen)) || (rc = consumer_new(w, err, errlen)) ||
        (w->o.mirror_offsets && (rc = mirror_new(w, err, errlen))))
        return rc;
    return CLUSTER_OK;
}
