/* kcat_lite: the tests' Kafka client: produce raw events as an edge would, dump a topic as NDJSON.
 */
#include <ctype.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster/cluster.h"
#include "cluster/partition.h"
#include "cluster/producer.h"
#include "common/clock.h"

/*
 * kcat_lite produce --brokers B --topic T [--partitions-before N --repartition-at MS]
 *   Reads lines "SOURCE<TAB>MESSAGEID<TAB>TIMESTAMP_MS<TAB>RECEIVED_MS<TAB>JSON" on stdin
 *   and produces each as an edge does (cluster/producer.h, cluster/partition.h: the
 *   raw-topic key, the partition of (source, messageId) at the client timestamp,
 *   CreateTime = receivedAt). Waits for every delivery report; prints
 *   "produced N" and exits 0, or 1 when any failed.
 * kcat_lite consume --brokers B --topic T [--max-ms MS]
 *   Reads every partition from the beginning with isolation.level=read_committed
 *   until each has reached its end, printing one JSON object per record:
 *   {"partition":P,"offset":O,"timestamp":T,"source":S,"messageId":M,"input":"P:O"|null,
 *    "value":V}   (T: the record's timestamp in ms, -1 when it has none)
 *   (V is the record's value, itself JSON). Exit 0, or 1 when MS passed first.
 * kcat_lite delete-records --brokers B --topic T --partition P --before OFFSET
 *   Deletes the records of partition P below OFFSET with the Admin API's DeleteRecords (what
 *   retention does to old segments, at once and to the offset); prints "low N", the
 *   partition's new log start, and exits 0, or 1 on an error.
 * kcat_lite copy --brokers B --topic RAW --to OUT --count N [--max-batch 1000] [--max-ms MS]
 *   The worker's data path without de-duplication and without transactions, the yardstick
 *   of load/kafka-bench: assigned every partition of RAW from the beginning (read_committed,
 *   group "kcat-lite-copy-OUT" for the offsets), it gathers batches as the worker does (up to
 *   max-batch records or 50 ms), produces each record (key, value, timestamp and an
 *   ingestd-input header, as the worker does) to OUT with the worker's producer settings
 *   (murmur2_random on the key, linger.ms=5, idempotent, acks=all), waits for the batch's
 *   deliveries (where the worker commits its transaction) and commits the batch's offsets
 *   asynchronously. Stops once N records are delivered and prints
 *   "copied N in S s (first record to last delivery)"; exit 1 when MS (default 600000)
 *   passed first or a delivery failed.
 */

static void json_str(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static int produce(const char *brokers, const char *topic, int32_t before, int64_t at_ms)
{
    char err[512];
    cluster_producer_t *p = NULL;
    cluster_partitioner_t *part = NULL;
    cluster_batch_t *b = NULL;
    int32_t count = 0;
    int rc = 1;
    uint64_t n = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;

    cluster_producer_options_t o = {.brokers = brokers, .topic = topic};
    if (cluster_producer_new(&o, &p, err, sizeof err) != CLUSTER_OK) {
        fprintf(stderr, "kcat_lite: %s\n", err);
        return 1;
    }
    if (cluster_producer_partitions(p, 10000, &count) != CLUSTER_OK) {
        fprintf(stderr, "kcat_lite: no partition count for %s\n", topic);
        goto out;
    }
    cluster_partition_config_t pc = {
        .partitions = count, .partitions_before = before, .repartition_at_ms = at_ms};
    if (cluster_partitioner_new(&pc, &part) != CLUSTER_OK || (b = cluster_batch_new()) == NULL) {
        fprintf(stderr, "kcat_lite: bad partitioner settings\n");
        goto out;
    }
    while ((len = getline(&line, &cap, stdin)) > 0) {
        if (line[len - 1] == '\n')
            line[--len] = '\0';
        char *f[5];
        char *s = line;
        int nf = 0;
        for (; nf < 4; nf++) {
            char *tab = strchr(s, '\t');
            if (tab == NULL)
                break;
            *tab = '\0';
            f[nf] = s;
            s = tab + 1;
        }
        f[nf++] = s;
        if (nf != 5) {
            fprintf(stderr, "kcat_lite: bad input line (want 5 tab-separated fields)\n");
            goto out;
        }
        char key[CLUSTER_KEY_MAX];
        size_t klen = cluster_key_encode(f[0], strlen(f[0]), f[1], strlen(f[1]), key, sizeof key);
        if (klen == 0) {
            fprintf(stderr, "kcat_lite: bad source/messageId\n");
            goto out;
        }
        int64_t ts = strtoll(f[2], NULL, 10), received = strtoll(f[3], NULL, 10);
        int32_t pn = cluster_partition_for(part, f[0], strlen(f[0]), f[1], strlen(f[1]), ts);
        if (cluster_producer_send(p, pn, key, klen, f[4], strlen(f[4]), received, b) !=
            CLUSTER_OK) {
            fprintf(stderr, "kcat_lite: produce refused\n");
            goto out;
        }
        n++;
    }
    int wrc = cluster_batch_wait(b, 30000);
    if (wrc != CLUSTER_OK) {
        fprintf(stderr, "kcat_lite: %s\n", cluster_strerror(wrc));
        goto out;
    }
    printf("produced %" PRIu64 "\n", n);
    rc = 0;
out:
    free(line);
    cluster_batch_release(b);
    cluster_partitioner_free(part);
    cluster_producer_free(p, 5000);
    return rc;
}

/* Assigns every partition of `topic` to consumer rk from its beginning, retrying the metadata
 * until `end` (clk_mono_ms). Returns the partition count, or -1 (said on stderr). */
static int assign_from_start(rd_kafka_t *rk, const char *topic, int64_t end)
{
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    while (rd_kafka_metadata(rk, 0, rkt, &md, 5000) != 0 || md->topic_cnt != 1 ||
           md->topics[0].partition_cnt == 0) {
        if (md != NULL)
            rd_kafka_metadata_destroy(md);
        md = NULL;
        if (clk_mono_ms() > end) {
            fprintf(stderr, "kcat_lite: no metadata for %s\n", topic);
            rd_kafka_topic_destroy(rkt);
            return -1;
        }
    }
    int nparts = md->topics[0].partition_cnt;
    rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(nparts);
    for (int i = 0; i < nparts; i++)
        rd_kafka_topic_partition_list_add(list, topic, i)->offset = RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_assign(rk, list);
    rd_kafka_topic_partition_list_destroy(list);
    return nparts;
}

static int consume(const char *brokers, const char *topic, int max_ms)
{
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, errstr, sizeof errstr) ||
        rd_kafka_conf_set(conf, "group.id", "kcat-lite", errstr, sizeof errstr) ||
        rd_kafka_conf_set(conf, "isolation.level", "read_committed", errstr, sizeof errstr) ||
        rd_kafka_conf_set(conf, "enable.partition.eof", "true", errstr, sizeof errstr) ||
        rd_kafka_conf_set(conf, "enable.auto.commit", "false", errstr, sizeof errstr)) {
        fprintf(stderr, "kcat_lite: %s\n", errstr);
        return 1;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    if (rk == NULL) {
        fprintf(stderr, "kcat_lite: %s\n", errstr);
        return 1;
    }
    rd_kafka_poll_set_consumer(rk);
    int rc = 1;
    int64_t end = clk_mono_ms() + max_ms;
    int nparts = assign_from_start(rk, topic, end);
    if (nparts < 0) {
        rd_kafka_destroy(rk);
        return 1;
    }
    bool *eof = calloc((size_t)nparts, sizeof *eof);
    int neof = 0;
    while (neof < nparts) {
        if (clk_mono_ms() > end) {
            fprintf(stderr, "kcat_lite: timed out with %d of %d partitions at their end\n", neof,
                    nparts);
            goto out;
        }
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
        if (m == NULL)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            if (m->partition >= 0 && m->partition < nparts && !eof[m->partition]) {
                eof[m->partition] = true;
                neof++;
            }
        } else if (m->err) {
            fprintf(stderr, "kcat_lite: %s\n", rd_kafka_message_errstr(m));
        } else {
            const char *src = "", *mid = "";
            size_t sl = 0, ml = 0;
            cluster_key_decode(m->key, m->key_len, &src, &sl, &mid, &ml);
            rd_kafka_timestamp_type_t tstype;
            int64_t ts = rd_kafka_message_timestamp(m, &tstype);
            printf("{\"partition\":%" PRId32 ",\"offset\":%" PRId64 ",\"timestamp\":%" PRId64
                   ",\"source\":",
                   m->partition, m->offset, ts);
            json_str(stdout, src, sl);
            fputs(",\"messageId\":", stdout);
            json_str(stdout, mid, ml);
            rd_kafka_headers_t *hdrs = NULL;
            const void *hv = NULL;
            size_t hl = 0;
            fputs(",\"input\":", stdout);
            if (rd_kafka_message_headers(m, &hdrs) == 0 &&
                rd_kafka_header_get_last(hdrs, CLUSTER_HEADER_INPUT, &hv, &hl) == 0)
                json_str(stdout, hv, hl);
            else
                fputs("null", stdout);
            fputs(",\"value\":", stdout);
            if (m->len > 0)
                fwrite(m->payload, 1, m->len, stdout);
            else
                fputs("null", stdout);
            fputs("}\n", stdout);
        }
        rd_kafka_message_destroy(m);
    }
    rc = 0;
out:
    free(eof);
    fflush(stdout);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return rc;
}

static int delete_records(const char *brokers, const char *topic, int32_t partition, int64_t before)
{
    char errstr[512];
    int rc = 1;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, errstr, sizeof errstr)) {
        fprintf(stderr, "kcat_lite: %s\n", errstr);
        rd_kafka_conf_destroy(conf);
        return 1;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (rk == NULL) {
        fprintf(stderr, "kcat_lite: %s\n", errstr);
        return 1;
    }
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, topic, partition)->offset = before;
    rd_kafka_DeleteRecords_t *del = rd_kafka_DeleteRecords_new(list);
    rd_kafka_DeleteRecords(rk, &del, 1, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 60000);
    const rd_kafka_DeleteRecords_result_t *res =
        ev ? rd_kafka_event_DeleteRecords_result(ev) : NULL;
    if (res == NULL || rd_kafka_event_error(ev)) {
        fprintf(stderr, "kcat_lite: DeleteRecords: %s\n",
                ev ? rd_kafka_event_error_string(ev) : "no answer in 60 s");
        goto out;
    }
    const rd_kafka_topic_partition_list_t *offs = rd_kafka_DeleteRecords_result_offsets(res);
    if (offs == NULL || offs->cnt != 1 || offs->elems[0].err) {
        fprintf(stderr, "kcat_lite: DeleteRecords: %s\n",
                offs && offs->cnt == 1 ? rd_kafka_err2str(offs->elems[0].err) : "no result");
        goto out;
    }
    printf("low %" PRId64 "\n", offs->elems[0].offset);
    rc = 0;
out:
    if (ev != NULL)
        rd_kafka_event_destroy(ev);
    rd_kafka_DeleteRecords_destroy(del);
    rd_kafka_topic_partition_list_destroy(list);
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
    return rc;
}

/* Delivery reports of the copy: how many failed (the copy stops at the first). */
static void on_copy_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    if (m->err)
        (*(uint64_t *)opaque)++;
}

static rd_kafka_t *copy_client(rd_kafka_type_t type, rd_kafka_conf_t *conf, const char *brokers,
                               const char *const *kv, size_t nkv)
{
    char errstr[512];
    if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, errstr, sizeof errstr))
        goto fail;
    for (size_t i = 0; i + 1 < nkv; i += 2)
        if (rd_kafka_conf_set(conf, kv[i], kv[i + 1], errstr, sizeof errstr))
            goto fail;
    rd_kafka_t *rk = rd_kafka_new(type, conf, errstr, sizeof errstr);
    if (rk != NULL)
        return rk;
    fprintf(stderr, "kcat_lite: %s\n", errstr);
    return NULL;
fail:
    fprintf(stderr, "kcat_lite: %s\n", errstr);
    rd_kafka_conf_destroy(conf);
    return NULL;
}

static int copy(const char *brokers, const char *topic, const char *to, uint64_t count,
                int max_batch, int max_ms)
{
    char group[300];
    uint64_t failed = 0, copied = 0;
    int rc = 1;
    rd_kafka_t *c = NULL, *p = NULL;
    rd_kafka_message_t **msgs = calloc((size_t)max_batch, sizeof *msgs);
    snprintf(group, sizeof group, "kcat-lite-copy-%s", to);
    const char *ckv[] = {"group.id",           group,   "isolation.level",   "read_committed",
                         "enable.auto.commit", "false", "auto.offset.reset", "earliest"};
    const char *pkv[] = {"partitioner",        "murmur2_random", "linger.ms", "5",
                         "enable.idempotence", "true",           "acks",      "all"};
    rd_kafka_conf_t *pconf = rd_kafka_conf_new();
    rd_kafka_conf_set_opaque(pconf, &failed);
    rd_kafka_conf_set_dr_msg_cb(pconf, on_copy_delivery);
    if (msgs == NULL ||
        (c = copy_client(RD_KAFKA_CONSUMER, rd_kafka_conf_new(), brokers, ckv, 8)) == NULL ||
        (p = copy_client(RD_KAFKA_PRODUCER, pconf, brokers, pkv, 8)) == NULL)
        goto out;
    rd_kafka_poll_set_consumer(c);
    int64_t end = clk_mono_ms() + max_ms, first = 0;
    if (assign_from_start(c, topic, clk_mono_ms() + 10000) < 0)
        goto out;
    while (copied < count && failed == 0) {
        if (clk_mono_ms() > end) {
            fprintf(stderr, "kcat_lite: copied %" PRIu64 " of %" PRIu64 " in %d ms\n", copied,
                    count, max_ms);
            goto out;
        }
        /* One batch, gathered as the worker gathers it. */
        int n = 0;
        int64_t deadline = clk_mono_ms() + 50;
        while (n < max_batch) {
            int64_t left = deadline - clk_mono_ms();
            if (n > 0 && left <= 0)
                break;
            rd_kafka_message_t *m = rd_kafka_consumer_poll(c, n == 0 ? 100 : (int)left);
            if (m == NULL) {
                if (n == 0 && clk_mono_ms() > end)
                    break;
                continue;
            }
            if (m->err) {
                if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                    fprintf(stderr, "kcat_lite: %s\n", rd_kafka_message_errstr(m));
                rd_kafka_message_destroy(m);
                continue;
            }
            if (first == 0)
                first = clk_mono_ms();
            msgs[n++] = m;
        }
        for (int i = 0; i < n; i++) {
            rd_kafka_message_t *m = msgs[i];
            char input[48];
            snprintf(input, sizeof input, "%" PRId32 ":%" PRId64, m->partition, m->offset);
            rd_kafka_timestamp_type_t tstype;
            int64_t ts = rd_kafka_message_timestamp(m, &tstype);
            rd_kafka_resp_err_t perr;
            while ((perr = rd_kafka_producev(
                        p, RD_KAFKA_V_TOPIC(to), RD_KAFKA_V_KEY(m->key, m->key_len),
                        RD_KAFKA_V_VALUE(m->payload, m->len),
                        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_TIMESTAMP(ts),
                        RD_KAFKA_V_HEADER(CLUSTER_HEADER_INPUT, input, (ssize_t)strlen(input)),
                        RD_KAFKA_V_END)) == RD_KAFKA_RESP_ERR__QUEUE_FULL)
                rd_kafka_poll(p, 10);
            if (perr) {
                fprintf(stderr, "kcat_lite: produce: %s\n", rd_kafka_err2str(perr));
                goto out;
            }
        }
        /* Where the worker commits its transaction: every record of the batch delivered. */
        if (n > 0 && rd_kafka_flush(p, 60000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
            fprintf(stderr, "kcat_lite: deliveries still pending after 60 s\n");
            goto out;
        }
        if (n > 0) {
            rd_kafka_topic_partition_list_t *offs = rd_kafka_topic_partition_list_new(n);
            for (int i = 0; i < n; i++)
                rd_kafka_topic_partition_list_add(offs, topic, msgs[i]->partition)->offset =
                    msgs[i]->offset + 1;
            rd_kafka_commit(c, offs, 1);
            rd_kafka_topic_partition_list_destroy(offs);
        }
        for (int i = 0; i < n; i++)
            rd_kafka_message_destroy(msgs[i]);
        copied += (uint64_t)n;
    }
    if (failed) {
        fprintf(stderr, "kcat_lite: %" PRIu64 " deliveries failed\n", failed);
        goto out;
    }
    printf("copied %" PRIu64 " in %.3f s (first record to last delivery)\n", copied,
           (double)(clk_mono_ms() - first) / 1000.0);
    rc = 0;
out:
    fflush(stdout);
    free(msgs);
    if (c != NULL) {
        rd_kafka_consumer_close(c);
        rd_kafka_destroy(c);
    }
    if (p != NULL) {
        rd_kafka_flush(p, 10000);
        rd_kafka_destroy(p);
    }
    return rc;
}

int main(int argc, char **argv)
{
    const char *brokers = NULL, *topic = NULL, *to = NULL;
    uint64_t count = 0;
    int max_batch = 1000, max_ms_set = 0;
    int32_t before = 0;
    int64_t at_ms = 0;
    int max_ms = 30000;
    int32_t partition = -1;
    int64_t before_offset = -1;
    if (argc < 2) {
        fprintf(stderr, "usage: kcat_lite produce|consume|copy|delete-records --brokers B "
                        "--topic T ...\n");
        return 2;
    }
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--brokers") == 0)
            brokers = argv[i + 1];
        else if (strcmp(argv[i], "--topic") == 0)
            topic = argv[i + 1];
        else if (strcmp(argv[i], "--partitions-before") == 0)
            before = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--repartition-at") == 0)
            at_ms = strtoll(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--max-ms") == 0)
            max_ms = atoi(argv[i + 1]), max_ms_set = 1;
        else if (strcmp(argv[i], "--partition") == 0)
            partition = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--before") == 0)
            before_offset = strtoll(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--to") == 0)
            to = argv[i + 1];
        else if (strcmp(argv[i], "--count") == 0)
            count = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--max-batch") == 0)
            max_batch = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "kcat_lite: unknown flag %s\n", argv[i]);
            return 2;
        }
    }
    if (brokers == NULL || topic == NULL) {
        fprintf(stderr, "kcat_lite: --brokers and --topic are required\n");
        return 2;
    }
    if (strcmp(argv[1], "produce") == 0)
        return produce(brokers, topic, before, at_ms);
    if (strcmp(argv[1], "consume") == 0)
        return consume(brokers, topic, max_ms);
    if (strcmp(argv[1], "delete-records") == 0 && partition >= 0 && before_offset >= 0)
        return delete_records(brokers, topic, partition, before_offset);
    if (strcmp(argv[1], "copy") == 0) {
        if (to == NULL || count == 0 || max_batch < 1) {
            fprintf(stderr, "kcat_lite: copy needs --to, --count N > 0 and --max-batch > 0\n");
            return 2;
        }
        return copy(brokers, topic, to, count, max_batch, max_ms_set ? max_ms : 600000);
    }
    fprintf(stderr, "kcat_lite: unknown mode %s\n", argv[1]);
    return 2;
}
