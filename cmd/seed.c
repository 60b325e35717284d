/* seed.c: `ingestd seed`: a single node's acknowledged events into the raw topic as seed
 * records, so the workers that take over keep the node's window (docs/scale-out.md). */
#include "cmd/cmd.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "cluster/cluster.h"
#include "cluster/partition.h"
#include "cluster/producer.h"
#include "common/clock.h"
#include "cmd/internal.h"
#include "server/logging.h"
#include "server/options.h"
#include "server/progress.h"
#include "storage/datadir.h"
#include "storage/log/log.h"

#define MAX_KAFKA_OPTS  64
#define CHUNK           10000 /* records sent before waiting for their deliveries */
#define METADATA_MS     10000 /* the raw topic's partition count */
#define FLUSH_MS        5000  /* what is still queued when giving up */
#define TIMEOUT_MAX_MS  UINT64_C(3600000)
#define SEED_VALUE_MAX  96
#define LOGGED_EVERY_MS 10000 /* a progress line in the log (the terminal's line is not logged) */

enum { O_DATA, O_BROKERS, O_RAW, O_FROM, O_KAFKA_OPT, O_TIMEOUT, O_LEVEL, O_MAX };

static const opts_spec_t SPECS[] = {
    [O_DATA] = OPTS_SPEC_DATA,
    [O_BROKERS] = {"kafka-brokers", NULL, "INGESTD_KAFKA_BROKERS", NULL, OPTS_STRING, 1,
                   OPTS_PATH_MAX, "LIST", "bootstrap servers, host:port,... (required)"},
    [O_RAW] = {"raw-topic", NULL, "INGESTD_RAW_TOPIC", NULL, OPTS_STRING, 1, 249, "NAME",
               "the raw topic the edges will produce to; it must exist (required)"},
    [O_FROM] = {"from-offset", NULL, NULL, NULL, OPTS_COUNT, 0, UINT64_MAX, "N",
                "first log offset to seed: the next_offset an earlier pass printed (default: "
                "the oldest retained record)"},
    [O_KAFKA_OPT] = {"kafka-opt", NULL, "INGESTD_KAFKA_OPTS", NULL, OPTS_REPEAT, 0, MAX_KAFKA_OPTS,
                     "NAME=VALUE",
                     "librdkafka setting of the producer, e.g. security.protocol=SASL_SSL"},
    [O_TIMEOUT] = {"delivery-timeout", NULL, NULL, "60s", OPTS_DURATION, 1000, TIMEOUT_MAX_MS,
                   "DURATION",
                   "how long the deliveries of one chunk of 10,000 records may take before the "
                   "pass fails (it can be run again from the offset it names)"},
    [O_LEVEL] = {"log-level", NULL, "INGESTD_LOG_LEVEL", "info", OPTS_STRING, 1, 16, "LEVEL",
                 "error, warn, info or debug"},
};

static const opts_cmd_t CMD = {
    "seed",
    "Usage: ingestd seed --data DIR --kafka-brokers LIST --raw-topic NAME\n"
    "                    [--from-offset N] [--kafka-opt NAME=VALUE ...]\n",
    "Carries a single node's window into a Kafka cluster (docs/scale-out.md, \"From\n"
    "one node to a cluster\"): every event of DIR's retained log, up to what the\n"
    "node acknowledged, becomes one seed record in the raw topic (key source NUL\n"
    "messageId, the partition an edge would choose, timestamp receivedAt, header\n"
    "ingestd-seed, no payload). The workers insert its key without producing it,\n"
    "so a later copy of the event is a duplicate. Reads the log like `log cat`:\n"
    "works while `serve` runs. Prints progress on a terminal and, at the end, one\n"
    "JSON line {\"seeded\",\"skipped\",\"from_offset\",\"next_offset\"}: pass next_offset\n"
    "as --from-offset to seed the tail once the node has stopped. Seeding an event\n"
    "twice is harmless.\n",
    "Exit 0: seeded; 1: failed (the offset to resume from on stderr); 2: usage.\n",
    SPECS,
    O_MAX,
    false,
};

/* One pass over the log. */
typedef struct seed {
    const char *data, *topic;
    char logdir[4200];
    uint64_t from, limit; /* [from, limit): what this pass seeds */
    uint64_t chunk_from;  /* first offset of the chunk whose deliveries are pending */
    uint64_t seeded, skipped;
    int64_t logged_at; /* clk_mono_ms of the last progress line in the log */
    int64_t timeout_ms;
    cluster_producer_t *producer;
    cluster_partitioner_t *part;
    cluster_batch_t *batch;
    progress_t *progress;
} seed_t;

/* (source, messageId) of a logged event, borrowed from *root (freed by the caller). -1 when
 * the record is not an event with both (never written by serve; skipped with a warning). */
static int event_ids(const log_record_t *rec, json_t **root, const char **src, size_t *src_len,
                     const char **mid, size_t *mid_len)
{
    json_error_t jerr;
    *root = json_loadb(rec->data, rec->len, 0, &jerr);
    json_t *s = json_object_get(*root, "source"), *m = json_object_get(*root, "messageId");
    if (!json_is_string(s) || !json_is_string(m) || json_string_length(s) == 0 ||
        json_string_length(m) == 0)
        return -1;
    *src = json_string_value(s);
    *src_len = json_string_length(s);
    *mid = json_string_value(m);
    *mid_len = json_string_length(m);
    return 0;
}

/* Queues the seed record of one logged event. 0, or -1 (logged). */
static int seed_one(seed_t *s, const log_record_t *rec)
{
    char key[CLUSTER_KEY_MAX], value[SEED_VALUE_MAX];
    const char *src = NULL, *mid = NULL;
    size_t src_len = 0, mid_len = 0, klen = 0;
    json_t *root = NULL;
    int rc = 0;

    if (event_ids(rec, &root, &src, &src_len, &mid, &mid_len) == 0)
        klen = cluster_key_encode(src, src_len, mid, mid_len, key, sizeof key);
    if (klen == 0) {
        LOGGING_WARN("log offset %" PRIu64 ": not an event with a source and a messageId; skipped",
                     rec->offset);
        s->skipped++;
        goto out;
    }
    /* Routed as an edge routes an event without a client timestamp: by the current count (a
     * cluster that grows from one node has not been repartitioned yet). */
    int32_t p = cluster_partition_for(s->part, src, src_len, mid, mid_len, INT64_MAX);
    int vlen = snprintf(value, sizeof value, "{\"seed\":\"ingestd\",\"logOffset\":%" PRIu64 "}",
                        rec->offset);
    if (cluster_producer_send_header(s->producer, p, key, klen, value, (size_t)vlen,
                                     rec->received_ms, CLUSTER_HEADER_SEED, "1", 1,
                                     s->batch) != CLUSTER_OK) {
        LOGGING_ERROR("log offset %" PRIu64 ": the producer refused the seed record", rec->offset);
        rc = -1;
        goto out;
    }
    s->seeded++;
out:
    json_decref(root);
    return rc;
}

/* Waits for the pending chunk's deliveries; the next chunk starts at `next`. 0 or -1 (logged). */
static int chunk_done(seed_t *s, uint64_t next)
{
    if (s->batch == NULL)
        return 0; /* the last chunk ended exactly at the limit */
    int rc = cluster_batch_wait(s->batch, (int)s->timeout_ms);
    if (rc != CLUSTER_OK) {
        LOGGING_ERROR("seed records of log offsets %" PRIu64 "..%" PRIu64 " not delivered: %s",
                      s->chunk_from, next, cluster_strerror(rc));
        return -1;
    }
    cluster_batch_release(s->batch);
    s->batch = NULL;
    s->chunk_from = next;
    /* A pass over a long log run by a script shows no terminal line: say how far it got. */
    if (next < s->limit && clk_mono_ms() - s->logged_at >= LOGGED_EVERY_MS) {
        s->logged_at = clk_mono_ms();
        progress_clear(s->progress);
        LOGGING_INFO("seeded up to log offset %" PRIu64 " of %" PRIu64 " (%" PRIu64 " event(s))",
                     next, s->limit, s->seeded);
    }
    if (next < s->limit && (s->batch = cluster_batch_new()) == NULL) {
        LOGGING_ERROR("out of memory");
        return -1;
    }
    return 0;
}

/* Reads [from, limit) and seeds it, chunk by chunk. 0, or -1 (logged). */
static int seed_log(seed_t *s)
{
    log_reader_t *r = NULL;
    log_record_t rec;
    int rc = log_reader_open(s->logdir, s->from, &r);

    s->chunk_from = s->from;
    s->logged_at = clk_mono_ms();
    if (rc == LOG_OK && (s->batch = cluster_batch_new()) == NULL)
        rc = LOG_NOMEM;
    while (rc == LOG_OK && (rc = log_reader_next(r, s->limit, &rec)) == LOG_OK) {
        if (seed_one(s, &rec) != 0)
            goto fail;
        uint64_t next = rec.offset + 1;
        progress_update(s->progress, "seeding", next - s->from, s->limit - s->from, "events", NULL);
        if (next - s->chunk_from >= CHUNK && chunk_done(s, next) != 0)
            goto fail;
    }
    if (rc != LOG_END) {
        LOGGING_ERROR("reading %s at offset %" PRIu64 ": %s", s->logdir,
                      r ? log_reader_position(r) : s->from, log_strerror(rc));
        goto fail;
    }
    /* The reader stops short of the acknowledged end when retention deleted the segment it was
     * about to read: those events were never seeded, and saying so is all that is left. */
    log_info_t li;
    uint64_t at = log_reader_position(r);
    if (at < s->limit && log_describe(s->logdir, &li, NULL) == LOG_OK && at < li.first_offset) {
        LOGGING_ERROR("log offsets %" PRIu64 "..%" PRIu64 " were deleted by retention before they "
                      "were seeded",
                      at, li.first_offset - 1);
        goto fail;
    }
    s->limit = at; /* a log restored from a backup may end before its ACKED */
    if (chunk_done(s, at) != 0)
        goto fail;
    log_reader_close(r);
    return 0;
fail:
    log_reader_close(r);
    return -1;
}

/* Where this pass starts and ends: --from-offset (or the oldest retained) .. the acknowledged
 * end. 0, 1 (nothing to do, not an error) or -1 / 2 (reported: failure / usage). */
static int seed_range(seed_t *s, bool have_from, uint64_t from)
{
    log_info_t li;
    struct stat sb;

    if (stat(s->data, &sb) != 0) {
        fprintf(stderr, "ingestd seed: no data directory %s\n", s->data);
        return -1;
    }
    (void)datadir_put(s->logdir, sizeof s->logdir, s->data, DATADIR_LOG);
    if (stat(s->logdir, &sb) != 0) {
        s->from = s->limit = have_from ? from : 0;
        return 1; /* a node that never logged an event has no window to carry */
    }
    if (acked_end(s->data, "ingestd seed", &s->limit) != 0)
        return -1;
    int rc = log_describe(s->logdir, &li, NULL);
    if (rc != LOG_OK) {
        fprintf(stderr, "ingestd seed: cannot read %s: %s\n", s->logdir, log_strerror(rc));
        return -1;
    }
    s->from = have_from ? from : li.first_offset;
    if (s->from < li.first_offset) {
        fprintf(stderr,
                "ingestd seed: log offsets %" PRIu64 "..%" PRIu64
                " were deleted by retention; the oldest retained is %" PRIu64 "\n",
                s->from, li.first_offset - 1, li.first_offset);
        return -1;
    }
    if (s->from > s->limit) {
        fprintf(stderr,
                "ingestd seed: --from-offset %" PRIu64
                " is past the acknowledged end of the log (%" PRIu64 ")\n",
                s->from, s->limit);
        return 2;
    }
    return s->from == s->limit ? 1 : 0;
}

/* The producer and the partitioner on the raw topic's partition count. 0 or -1 (logged). */
static int seed_connect(seed_t *s, const char *brokers, const cluster_kafka_opts_t *kopts)
{
    char err[512] = "";
    cluster_producer_options_t po = {.brokers = brokers, .topic = s->topic, .opts = *kopts};
    int32_t count = 0;
    int rc = cluster_producer_new(&po, &s->producer, err, sizeof err);
    if (rc != CLUSTER_OK) {
        LOGGING_ERROR("producer: %s", err[0] ? err : cluster_strerror(rc));
        return -1;
    }
    rc = cluster_producer_partitions(s->producer, METADATA_MS, &count);
    if (rc != CLUSTER_OK) {
        LOGGING_ERROR("raw topic %s: %s (it must exist before seeding)", s->topic,
                      rc == CLUSTER_TIMEOUT ? "no metadata from the cluster" : "no such topic");
        return -1;
    }
    cluster_partition_config_t pc = {.partitions = count};
    if (cluster_partitioner_new(&pc, &s->part) != CLUSTER_OK) {
        LOGGING_ERROR("out of memory");
        return -1;
    }
    LOGGING_INFO("seeding log offsets %" PRIu64 "..%" PRIu64 " of %s into %s (%" PRId32
                 " partitions)",
                 s->from, s->limit, s->data, s->topic, count);
    return 0;
}

int cmd_seed(int argc, char **argv)
{
    opts_val_t v[O_MAX];
    seed_t s = {0};
    int ret = 2;

    int rc = opts_parse(&CMD, argc, argv, v, NULL);
    if (rc != 0) {
        ret = rc == 1 ? 0 : 2;
        goto out;
    }
    if (!v[O_BROKERS].set || !v[O_RAW].set) {
        fprintf(stderr, "ingestd seed: --kafka-brokers and --raw-topic are required\n");
        goto out;
    }
    int level = logging_parse_level(v[O_LEVEL].str);
    if (level < 0) {
        fprintf(stderr, "ingestd seed: invalid --log-level \"%s\"\n", v[O_LEVEL].str);
        goto out;
    }
    logging_level = level;
    s.data = v[O_DATA].str;
    s.topic = v[O_RAW].str;
    s.timeout_ms = v[O_TIMEOUT].ms;
    rc = seed_range(&s, v[O_FROM].set, v[O_FROM].n);
    ret = rc < 0 ? 1 : 2;
    if (rc < 0 || rc == 2)
        goto out;
    ret = 1;
    cluster_set_log(logging_syslog); /* librdkafka's lines into our log */
    cluster_kafka_opts_t kopts = {.kv = v[O_KAFKA_OPT].items, .n = v[O_KAFKA_OPT].nitems};
    s.chunk_from = s.from;
    /* Also with nothing to seed: a wrong broker list or topic shows at the first pass, not at
     * the tail pass, when the node is already down. */
    if (seed_connect(&s, v[O_BROKERS].str, &kopts) != 0)
        goto out;
    if (rc == 0) {
        s.progress = progress_new(stderr);
        int failed = seed_log(&s);
        progress_clear(s.progress);
        if (failed != 0) {
            LOGGING_ERROR("seeding stopped; every event before log offset %" PRIu64
                          " is seeded: run again with --from-offset %" PRIu64,
                          s.chunk_from, s.chunk_from);
            goto out;
        }
    }
    LOGGING_INFO("seeded %" PRIu64 " event(s) of log offsets %" PRIu64 "..%" PRIu64 " (%" PRIu64
                 " skipped); the next pass starts with --from-offset %" PRIu64,
                 s.seeded, s.from, s.limit, s.skipped, s.limit);
    printf("{\"seeded\":%" PRIu64 ",\"skipped\":%" PRIu64 ",\"from_offset\":%" PRIu64
           ",\"next_offset\":%" PRIu64 "}\n",
           s.seeded, s.skipped, s.from, s.limit);
    ret = fflush(stdout) == 0 ? 0 : 1;
out:
    cluster_batch_release(s.batch);
    cluster_producer_free(s.producer, FLUSH_MS);
    cluster_partitioner_free(s.part);
    progress_free(s.progress);
    opts_free(&CMD, v);
    return ret;
}
