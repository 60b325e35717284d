/* mockcluster: runs librdkafka's mock Kafka cluster for the tests, driven over stdin. */
#include <ctype.h>
#include <errno.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Usage: mockcluster [--brokers N] --topic NAME:PARTITIONS ...
 *
 * Starts rd_kafka_mock_cluster_new() with N brokers (default 3; real wire
 * protocol on loopback), creates the topics, prints "BOOTSTRAP host:port,..."
 * on stdout and then answers one line per command read from stdin, "ok" or
 * "error: ...", until stdin closes (or SIGTERM). Commands:
 *   errors API COUNT ERR...  the next COUNT requests of API (name or number,
 *                            e.g. Produce, EndTxn, 26) fail with ERR... in turn
 *                            (names as rd_kafka_err2name, e.g. NOT_COORDINATOR,
 *                            or numbers); COUNT is the number of ERRs given
 *   clear API                drop the errors still queued for API
 *   down BROKER / up BROKER  take a broker (1..N) off / back on the network
 *   rtt BROKER MS            delay every response of a broker
 *   coordinator txn|group KEY BROKER
 *                            move a transaction or group coordinator
 *   leader TOPIC PARTITION BROKER
 *                            move a partition's leader
 * KAFKA_MOCK_DEBUG=mock (librdkafka's `debug` setting) logs the mock's own
 * decisions, e.g. its consumer group states, on stderr.
 * librdkafka's mock keeps no transactional offsets (TxnOffsetCommit is
 * acknowledged, not stored) and shows aborted records to read_committed
 * consumers: see docs/scale-out.md, "Testing on the mock cluster".
 */

static const struct {
    const char *name;
    int16_t key;
} apis[] = {
    {"Produce", 0},          {"Fetch", 1},
    {"ListOffsets", 2},      {"Metadata", 3},
    {"OffsetCommit", 8},     {"OffsetFetch", 9},
    {"FindCoordinator", 10}, {"JoinGroup", 11},
    {"Heartbeat", 12},       {"LeaveGroup", 13},
    {"SyncGroup", 14},       {"ApiVersion", 18},
    {"InitProducerId", 22},  {"AddPartitionsToTxn", 24},
    {"AddOffsetsToTxn", 25}, {"EndTxn", 26},
    {"TxnOffsetCommit", 28},
};

static int api_key(const char *s)
{
    for (size_t i = 0; i < sizeof apis / sizeof apis[0]; i++)
        if (strcmp(apis[i].name, s) == 0)
            return apis[i].key;
    char *end;
    long v = strtol(s, &end, 10);
    return *s != '\0' && *end == '\0' && v >= 0 && v < 100 ? (int)v : -1;
}

static int err_code(const char *s, rd_kafka_resp_err_t *out)
{
    const struct rd_kafka_err_desc *descs;
    size_t n;
    char *end;
    long v = strtol(s, &end, 10);
    if (*s != '\0' && *end == '\0') {
        *out = (rd_kafka_resp_err_t)v;
        return 0;
    }
    rd_kafka_get_err_descs(&descs, &n);
    for (size_t i = 0; i < n; i++) {
        if (descs[i].name != NULL && strcmp(descs[i].name, s) == 0) {
            *out = descs[i].code;
            return 0;
        }
    }
    return -1;
}

static int command(rd_kafka_mock_cluster_t *mc, char *line, char *why, size_t whylen)
{
    char *argv[40];
    int argc = 0;
    for (char *save = NULL, *t = strtok_r(line, " \t\r\n", &save); t && argc < 40;
         t = strtok_r(NULL, " \t\r\n", &save))
        argv[argc++] = t;
    if (argc == 0) {
        snprintf(why, whylen, "empty command");
        return -1;
    }
    if (strcmp(argv[0], "errors") == 0 && argc >= 4) {
        int api = api_key(argv[1]);
        int cnt = atoi(argv[2]);
        rd_kafka_resp_err_t errs[36];
        if (api < 0 || cnt != argc - 3 || cnt > 36) {
            snprintf(why, whylen, "usage: errors API COUNT ERR... (COUNT errors)");
            return -1;
        }
        for (int i = 0; i < cnt; i++) {
            if (err_code(argv[3 + i], &errs[i]) != 0) {
                snprintf(why, whylen, "unknown error %s", argv[3 + i]);
                return -1;
            }
        }
        rd_kafka_mock_push_request_errors_array(mc, (int16_t)api, (size_t)cnt, errs);
        return 0;
    }
    if (strcmp(argv[0], "clear") == 0 && argc == 2 && api_key(argv[1]) >= 0) {
        rd_kafka_mock_clear_request_errors(mc, (int16_t)api_key(argv[1]));
        return 0;
    }
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    if (strcmp(argv[0], "down") == 0 && argc == 2)
        err = rd_kafka_mock_broker_set_down(mc, atoi(argv[1]));
    else if (strcmp(argv[0], "up") == 0 && argc == 2)
        err = rd_kafka_mock_broker_set_up(mc, atoi(argv[1]));
    else if (strcmp(argv[0], "rtt") == 0 && argc == 3)
        err = rd_kafka_mock_broker_set_rtt(mc, atoi(argv[1]), atoi(argv[2]));
    else if (strcmp(argv[0], "coordinator") == 0 && argc == 4)
        err = rd_kafka_mock_coordinator_set(mc, argv[1], argv[2], atoi(argv[3]));
    else if (strcmp(argv[0], "leader") == 0 && argc == 4)
        err = rd_kafka_mock_partition_set_leader(mc, argv[1], atoi(argv[2]), atoi(argv[3]));
    else {
        snprintf(why, whylen, "unknown command %s", argv[0]);
        return -1;
    }
    if (err) {
        snprintf(why, whylen, "%s", rd_kafka_err2str(err));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int brokers = 3;
    char errstr[512];
    const char *topics[32];
    int ntopics = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--brokers") == 0 && i + 1 < argc)
            brokers = atoi(argv[++i]);
        else if (strcmp(argv[i], "--topic") == 0 && i + 1 < argc && ntopics < 32)
            topics[ntopics++] = argv[++i];
        else {
            fprintf(stderr, "usage: mockcluster [--brokers N] --topic NAME:PARTITIONS ...\n");
            return 2;
        }
    }
    if (brokers < 1) {
        fprintf(stderr, "mockcluster: --brokers must be >= 1\n");
        return 2;
    }
    /* The mock cluster lives inside a client instance; this one is never used otherwise. */
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (getenv("KAFKA_MOCK_DEBUG") != NULL)
        rd_kafka_conf_set(conf, "debug", getenv("KAFKA_MOCK_DEBUG"), errstr, sizeof errstr);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (rk == NULL) {
        fprintf(stderr, "mockcluster: %s\n", errstr);
        return 1;
    }
    rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(rk, brokers);
    if (mc == NULL) {
        fprintf(stderr, "mockcluster: cannot create the mock cluster\n");
        rd_kafka_destroy(rk);
        return 1;
    }
    for (int i = 0; i < ntopics; i++) {
        char name[256];
        const char *colon = strrchr(topics[i], ':');
        int parts = colon ? atoi(colon + 1) : 0;
        size_t n = colon ? (size_t)(colon - topics[i]) : 0;
        if (parts < 1 || n == 0 || n >= sizeof name) {
            fprintf(stderr, "mockcluster: --topic %s: expected NAME:PARTITIONS\n", topics[i]);
            return 2;
        }
        memcpy(name, topics[i], n);
        name[n] = '\0';
        rd_kafka_resp_err_t err =
            rd_kafka_mock_topic_create(mc, name, parts, brokers < 3 ? brokers : 3);
        if (err) {
            fprintf(stderr, "mockcluster: topic %s: %s\n", name, rd_kafka_err2str(err));
            return 1;
        }
    }
    printf("BOOTSTRAP %s\n", rd_kafka_mock_cluster_bootstraps(mc));
    fflush(stdout);

    char line[1024], why[256];
    while (fgets(line, sizeof line, stdin) != NULL) {
        if (command(mc, line, why, sizeof why) == 0)
            printf("ok\n");
        else
            printf("error: %s\n", why);
        fflush(stdout);
    }
    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(rk);
    return 0;
}
