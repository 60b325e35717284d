/* cli_worker: `ingestd worker`: flags, the operator HTTP endpoints and signals around
 * cluster/worker. */
#include "server/cli_worker.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netdb.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <jansson.h>

#include "api/auth.h"
#include "api/dashboard.h"
#include "api/lookup.h"
#include "api/timestamp.h"
#include "cluster/worker.h"
#include "common/errbuf.h"
#include "server/config.h"
#include "server/logging.h"
#include "storage/store.h"

#define DEFAULT_DATA      "./data"
#define DEFAULT_WINDOW    "24h"
#define DEFAULT_MAX_KEYS  "100000000"
#define DEFAULT_LISTEN    "127.0.0.1:8081"
#define DEFAULT_PREFIX    "ingestd"
#define DEFAULT_MAX_BATCH "1000"
#define DEFAULT_YOUNG     "1048576"
#define YOUNG_KEYS_MAX    (UINT64_C(1) << 32)
#define WINDOW_MIN_MS     INT64_C(1000)
#define WINDOW_MAX_MS     (INT64_C(365) * 86400 * 1000)
#define MAX_KEYS_MAX      UINT64_C(1000000000000)
#define MAX_BATCH_MAX     UINT64_C(100000)
#define MAX_KAFKA_OPTS    64

extern char **environ;

/* The worker the signal handler stops: a handler gets no argument, hence the one global. */
static cluster_worker_t *volatile running;

static void on_stop(int sig)
{
    (void)sig;
    cluster_worker_t *w = running;
    if (w != NULL)
        cluster_worker_stop(w);
}

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: ingestd worker --kafka-brokers LIST --raw-topic NAME --out-topic NAME\n"
            "                      --group NAME [--data DIR] [FLAGS]\n"
            "\n"
            "The Kafka worker role (docs/scale-out.md): a consumer-group member that\n"
            "de-duplicates each assigned raw-topic partition against its own LMDB store\n"
            "(DIR/partitions/RAWTOPIC-P/) and produces every distinct (source, messageId)\n"
            "to the output topic exactly once, in Kafka transactions that also commit the\n"
            "input offsets. Runs in the foreground; SIGTERM/SIGINT stop it cleanly.\n"
            "Every flag has an environment variable; flags win.\n"
            "  --kafka-brokers LIST   bootstrap servers, host:port,... (INGESTD_KAFKA_BROKERS)\n"
            "  --raw-topic NAME       input topic the edges produce to (INGESTD_RAW_TOPIC)\n"
            "  --out-topic NAME       output topic, the source of truth (INGESTD_OUT_TOPIC)\n"
            "  --group NAME           consumer group of the workers (INGESTD_GROUP)\n"
            "  --data DIR             data directory (INGESTD_DATA; default " DEFAULT_DATA ")\n"
            "  --window DURATION      de-duplication window: 90s, 15m, 24h, 28d\n"
            "                         (INGESTD_WINDOW; default " DEFAULT_WINDOW ")\n"
            "  --max-keys N           keys kept per partition before the window shortens\n"
            "                         (INGESTD_MAX_KEYS; default " DEFAULT_MAX_KEYS
            "; 0: no bound)\n"
            "  --young-keys N         keys a partition's LMDB store holds before they are\n"
            "                         sealed into a generation file, as serve's\n"
            "                         (INGESTD_YOUNG_KEYS; default " DEFAULT_YOUNG ")\n"
            "  --listen HOST:PORT     /stats, /metrics, /healthz (INGESTD_LISTEN; default\n"
            "                         " DEFAULT_LISTEN "; port 0 picks one; \"none\": no HTTP)\n"
            "  --admin-token TOKEN    Bearer token of GET /v1/events/{messageId} on --listen\n"
            "                         (INGESTD_ADMIN_TOKEN; without one the route is off)\n"
            "  --kafka-opt NAME=VALUE librdkafka setting, repeatable, e.g.\n"
            "                         security.protocol=SASL_SSL; \"consumer.NAME\" or\n"
            "                         \"producer.NAME\" for one client only (INGESTD_KAFKA_OPTS:\n"
            "                         one NAME=VALUE per line)\n"
            "  --transactional-id-prefix P\n"
            "                         transactional.id = P-GROUP-WORKERID, WORKERID kept in\n"
            "                         DIR/worker-id (INGESTD_TRANSACTIONAL_ID_PREFIX; default\n"
            "                         " DEFAULT_PREFIX ")\n"
            "  --max-batch N          raw records per transaction (INGESTD_MAX_BATCH; default\n"
            "                         " DEFAULT_MAX_BATCH ")\n"
            "  --mirror-offsets       after each transaction also commit the same offsets\n"
            "                         outside it, to group GROUP.mirror, and read positions\n"
            "                         from there (INGESTD_MIRROR_OFFSETS=1). Only for\n"
            "                         librdkafka's mock cluster, which keeps no transactional\n"
            "                         offsets; never on a real cluster\n"
            "  --dynamic-membership   join without group.instance.id\n"
            "                         (INGESTD_DYNAMIC_MEMBERSHIP=1): a stopped worker leaves\n"
            "                         the group at once, but every restart rebalances. Default:\n"
            "                         static membership (group.instance.id = the transactional\n"
            "                         id), a restart within session.timeout.ms keeps the\n"
            "                         partitions; partitions are assigned cooperative-sticky\n"
            "  --log-level LEVEL      error|warn|info|debug (INGESTD_LOG_LEVEL; default info)\n"
            "  --help                 this text\n"
            "Exit 0: stopped cleanly; 1: failed; 2: usage.\n");
}

struct args {
    const char *brokers, *raw, *out, *group, *data, *window, *max_keys, *young, *listen, *prefix,
        *batch, *level, *admin_token;
    bool mirror, dynamic;
    const char *opts[MAX_KAFKA_OPTS];
    size_t nopts;
    char *env_opts; /* a writable copy of INGESTD_KAFKA_OPTS, split in place */
};

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

/* Returns 0, 1 for --help, 2 on a usage error (message printed). */
static int parse(int argc, char **argv, struct args *a)
{
    static const struct {
        const char *flag;
        size_t off;
    } table[] = {
        {"--kafka-brokers", offsetof(struct args, brokers)},
        {"--raw-topic", offsetof(struct args, raw)},
        {"--out-topic", offsetof(struct args, out)},
        {"--group", offsetof(struct args, group)},
        {"--data", offsetof(struct args, data)},
        {"--window", offsetof(struct args, window)},
        {"--max-keys", offsetof(struct args, max_keys)},
        {"--young-keys", offsetof(struct args, young)},
        {"--listen", offsetof(struct args, listen)},
        {"--transactional-id-prefix", offsetof(struct args, prefix)},
        {"--max-batch", offsetof(struct args, batch)},
        {"--log-level", offsetof(struct args, level)},
        {"--admin-token", offsetof(struct args, admin_token)},
    };
    a->brokers = env("INGESTD_KAFKA_BROKERS");
    a->raw = env("INGESTD_RAW_TOPIC");
    a->out = env("INGESTD_OUT_TOPIC");
    a->group = env("INGESTD_GROUP");
    a->data = env("INGESTD_DATA") ? env("INGESTD_DATA") : DEFAULT_DATA;
    a->window = env("INGESTD_WINDOW") ? env("INGESTD_WINDOW") : DEFAULT_WINDOW;
    a->max_keys = env("INGESTD_MAX_KEYS") ? env("INGESTD_MAX_KEYS") : DEFAULT_MAX_KEYS;
    a->young = env("INGESTD_YOUNG_KEYS") ? env("INGESTD_YOUNG_KEYS") : DEFAULT_YOUNG;
    a->listen = env("INGESTD_LISTEN") ? env("INGESTD_LISTEN") : DEFAULT_LISTEN;
    a->prefix = env("INGESTD_TRANSACTIONAL_ID_PREFIX") ? env("INGESTD_TRANSACTIONAL_ID_PREFIX")
                                                       : DEFAULT_PREFIX;
    a->batch = env("INGESTD_MAX_BATCH") ? env("INGESTD_MAX_BATCH") : DEFAULT_MAX_BATCH;
    a->level = env("INGESTD_LOG_LEVEL") ? env("INGESTD_LOG_LEVEL") : "info";
    a->admin_token = env("INGESTD_ADMIN_TOKEN");
    a->mirror = env("INGESTD_MIRROR_OFFSETS") && strcmp(env("INGESTD_MIRROR_OFFSETS"), "0") != 0;
    a->dynamic =
        env("INGESTD_DYNAMIC_MEMBERSHIP") && strcmp(env("INGESTD_DYNAMIC_MEMBERSHIP"), "0") != 0;
    if (env("INGESTD_KAFKA_OPTS")) {
        a->env_opts = strdup(env("INGESTD_KAFKA_OPTS"));
        if (a->env_opts == NULL)
            return 2;
        for (char *save = NULL, *t = strtok_r(a->env_opts, "\n", &save); t != NULL;
             t = strtok_r(NULL, "\n", &save)) {
            if (a->nopts == MAX_KAFKA_OPTS) {
                fprintf(stderr, "ingestd worker: more than %d kafka options\n", MAX_KAFKA_OPTS);
                return 2;
            }
            a->opts[a->nopts++] = t;
        }
    }

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = NULL;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            usage(stdout);
            return 1;
        }
        if (strcmp(arg, "--mirror-offsets") == 0) {
            a->mirror = true;
            continue;
        }
        if (strcmp(arg, "--dynamic-membership") == 0) {
            a->dynamic = true;
            continue;
        }
        const char *eq = strchr(arg, '=');
        size_t nlen = eq && strncmp(arg, "--", 2) == 0 ? (size_t)(eq - arg) : strlen(arg);
        bool known = false;
        if (strncmp(arg, "--kafka-opt", nlen) == 0 && nlen == strlen("--kafka-opt")) {
            val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
            if (val == NULL) {
                fprintf(stderr, "ingestd worker: --kafka-opt needs NAME=VALUE\n");
                return 2;
            }
            if (a->nopts == MAX_KAFKA_OPTS) {
                fprintf(stderr, "ingestd worker: more than %d kafka options\n", MAX_KAFKA_OPTS);
                return 2;
            }
            a->opts[a->nopts++] = val;
            continue;
        }
        for (size_t t = 0; t < sizeof table / sizeof table[0]; t++) {
            if (strlen(table[t].flag) != nlen || strncmp(arg, table[t].flag, nlen) != 0)
                continue;
            val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
            if (val == NULL) {
                fprintf(stderr, "ingestd worker: %s needs a value\n", table[t].flag);
                return 2;
            }
            *(const char **)((char *)a + table[t].off) = val;
            known = true;
            break;
        }
        if (!known) {
            fprintf(stderr, "ingestd worker: unknown argument \"%s\" (see --help)\n", arg);
            return 2;
        }
    }
    return 0;
}

/* ---- operator HTTP ---- */

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *type,
                             char *body, bool must_free)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), body, must_free ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (r == NULL) {
        if (must_free)
            free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    if (status == MHD_HTTP_SERVICE_UNAVAILABLE)
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* What the operator HTTP handler needs (http_start's cls). */
struct http_ctx {
    cluster_worker_t *w;
    const char *admin_token; /* NULL: GET /v1/events is off */
    const char *raw, *out;   /* topic names, for the answers' reasons */
};

#define LOOKUP_WAIT_MS 5000 /* for the worker thread to take a lookup between two batches */

static enum MHD_Result reply_json(struct MHD_Connection *conn, unsigned status, json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    if (s == NULL)
        return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "application/json",
                     (char *)"{\"success\":false,\"error\":\"out of memory\"}", false);
    return reply(conn, status, "application/json", s, true);
}

static enum MHD_Result reply_error(struct MHD_Connection *conn, unsigned status, const char *msg)
{
    return reply_json(conn, status, json_pack("{s:b, s:s}", "success", 0, "error", msg));
}

static json_t *iso_or_null(int64_t ms)
{
    char buf[TIMESTAMP_BUF_LEN];
    return ms > 0 && timestamp_format(ms, buf) == 0 ? json_string(buf) : json_null();
}

/* The answer of one cluster_worker_lookup: the route's body with "partition" (worker.h). */
static json_t *lookup_json(const struct http_ctx *h, const char *id, const char *source,
                           const cluster_lookup_t *res, unsigned *status)
{
    char reason[512];
    json_t *j = json_pack("{s:s, s:s, s:s, s:i}", "messageId", id, "source", source, "status",
                          res->status == CLUSTER_LOOKUP_SEEN     ? "seen"
                          : res->status == CLUSTER_LOOKUP_UNSEEN ? "unseen"
                                                                 : "not_owned",
                          "partition", (int)res->partition);
    if (j == NULL)
        return NULL;
    if (res->status == CLUSTER_LOOKUP_SEEN) {
        *status = MHD_HTTP_OK;
        errbuf_printf(reason, sizeof reason,
                      "the worker keeps keys, not events: the event is in the output topic %s, the "
                      "record whose ingestd-input header is %d:%llu",
                      h->out, (int)res->partition, (unsigned long long)res->offset);
        json_object_set_new(j, "offset", json_integer((json_int_t)res->offset));
        json_object_set_new(j, "receivedAt", iso_or_null(res->received_ms));
        json_object_set_new(j, "event", json_null());
        json_object_set_new(j, "reason", json_string(reason));
    } else if (res->status == CLUSTER_LOOKUP_UNSEEN) {
        *status = MHD_HTTP_NOT_FOUND;
        json_object_set_new(j, "window_start", iso_or_null(res->window_start_ms));
    } else {
        *status = MHD_HTTP_NOT_FOUND;
        if (res->partition >= 0)
            errbuf_printf(
                reason, sizeof reason,
                "partition %d of %s holds this key and is not assigned to this worker: ask "
                "the worker that owns it (its /stats lists its partitions)",
                (int)res->partition, h->raw);
        else
            errbuf_printf(reason, sizeof reason,
                          "not in this worker's partitions, and the partition count of %s is not "
                          "known yet",
                          h->raw);
        json_object_set_new(j, "reason", json_string(reason));
    }
    return j;
}

/* GET /v1/events/{messageId}?source=S on the worker (docs/scale-out.md). */
static enum MHD_Result events_route(const struct http_ctx *h, struct MHD_Connection *conn,
                                    const char *url, const char *method)
{
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    const char *id = url + strlen(API_LOOKUP_PREFIX);
    const char *source = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "source");
    cluster_lookup_t res;
    unsigned status = MHD_HTTP_INTERNAL_SERVER_ERROR;

    if (strcmp(method, "GET") != 0)
        return reply_error(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed");
    size_t tl = strlen(h->admin_token);
    if (auth == NULL || strncmp(auth, "Bearer ", 7) != 0 ||
        !auth_equal(auth + 7, strlen(auth + 7), h->admin_token, tl))
        return reply_error(conn, MHD_HTTP_UNAUTHORIZED,
                           auth ? "invalid admin token"
                                : "missing admin token (Authorization: Bearer TOKEN)");
    const char *why = api_lookup_check_id(id, strlen(id));
    if (why)
        return reply_error(conn, MHD_HTTP_BAD_REQUEST, why);
    if (source == NULL)
        source = "default";
    if (source[0] == '\0' || strlen(source) > API_LOOKUP_SOURCE_MAX)
        return reply_error(conn, MHD_HTTP_BAD_REQUEST, "source must be 1..256 bytes");
    int rc =
        cluster_worker_lookup(h->w, source, strlen(source), id, strlen(id), LOOKUP_WAIT_MS, &res);
    if (rc != CLUSTER_OK)
        return reply_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE,
                           rc == CLUSTER_TIMEOUT ? "the worker is busy or not running, retry later"
                                                 : "a partition store failed, retry later");
    json_t *j = lookup_json(h, id, source, &res, &status);
    return reply_json(conn, status, j);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_len, void **state)
{
    const struct http_ctx *h = cls;
    cluster_worker_t *w = h->w;
    (void)version;
    (void)upload;
    if (*state == NULL) {
        *state = (void *)1; /* headers only so far: answer once the (ignored) body is read */
        return MHD_YES;
    }
    if (*upload_len > 0) {
        *upload_len = 0;
        return MHD_YES;
    }
    static const char json[] = "application/json";
    if (h->admin_token && strncmp(url, API_LOOKUP_PREFIX, strlen(API_LOOKUP_PREFIX)) == 0)
        return events_route(h, conn, url, method);
    bool known = strcmp(url, "/stats") == 0 || strcmp(url, "/metrics") == 0 ||
                 strcmp(url, "/healthz") == 0 || strcmp(url, "/dashboard") == 0;
    if (!known)
        return reply(conn, MHD_HTTP_NOT_FOUND, json,
                     (char *)"{\"success\":false,\"error\":\"not found: the worker serves "
                             "/stats, /metrics, /healthz and /dashboard\"}",
                     false);
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, json,
                     (char *)"{\"success\":false,\"error\":\"method not allowed\"}", false);
    if (strcmp(url, "/dashboard") == 0) /* serve's page; it reads the worker's /stats shape */
        return reply(conn, MHD_HTTP_OK, "text/html; charset=utf-8", (char *)api_dashboard_page,
                     false);
    if (strcmp(url, "/healthz") == 0) {
        if (cluster_worker_ready(w))
            return reply(conn, MHD_HTTP_OK, json, (char *)"{\"status\":\"ok\"}", false);
        return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, json,
                     (char *)"{\"success\":false,\"error\":\"not ready: joining the group or "
                             "waiting for the transaction coordinator\"}",
                     false);
    }
    char *body =
        strcmp(url, "/stats") == 0 ? cluster_worker_stats_json(w) : cluster_worker_metrics(w);
    if (body == NULL)
        return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, json,
                     (char *)"{\"success\":false,\"error\":\"out of memory\"}", false);
    return reply(conn, MHD_HTTP_OK, strcmp(url, "/stats") == 0 ? json : "text/plain; version=0.0.4",
                 body, true);
}

/* Starts the HTTP daemon on "HOST:PORT" / "[V6]:PORT". NULL with a logged reason on failure. */
static struct MHD_Daemon *http_start(const char *listen, const struct http_ctx *h)
{
    char host[256];
    const char *port;
    if (listen[0] == '[') {
        const char *rb = strchr(listen, ']');
        if (rb == NULL || rb[1] != ':' || (size_t)(rb - listen - 1) >= sizeof host)
            goto bad;
        memcpy(host, listen + 1, (size_t)(rb - listen - 1));
        host[rb - listen - 1] = '\0';
        port = rb + 2;
    } else {
        const char *colon = strrchr(listen, ':');
        if (colon == NULL || colon == listen || (size_t)(colon - listen) >= sizeof host)
            goto bad;
        memcpy(host, listen, (size_t)(colon - listen));
        host[colon - listen] = '\0';
        port = colon + 1;
    }
    uint64_t pnum;
    if (config_parse_count(port, &pnum) != 0 || pnum > 65535)
        goto bad;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, port, &hints, &ai) != 0 || ai == NULL) {
        LOG_ERROR("--listen %s: cannot resolve %s", listen, host);
        return NULL;
    }
    /* A thread per connection: a lookup waits for the worker thread without holding up
     * /healthz or /stats. */
    unsigned flags =
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d =
        MHD_start_daemon(flags, 0, NULL, NULL, on_request, (void *)h, MHD_OPTION_SOCK_ADDR,
                         ai->ai_addr, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)64, MHD_OPTION_END);
    bool v6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    if (d == NULL) {
        LOG_ERROR("--listen %s: cannot listen (address in use?)", listen);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    LOG_INFO("listening on http://%s%s%s:%u", v6 ? "[" : "", host, v6 ? "]" : "",
             info ? (unsigned)info->port : (unsigned)pnum);
    return d;
bad:
    LOG_ERROR("invalid --listen \"%s\": expected HOST:PORT, [IPV6]:PORT or none", listen);
    return NULL;
}

static void on_worker_log(void *arg, int level, const char *msg)
{
    (void)arg;
    switch (level) {
    case 0:
        LOG_ERROR("%s", msg);
        break;
    case 1:
        LOG_WARN("%s", msg);
        break;
    case 2:
        LOG_INFO("%s", msg);
        break;
    default:
        LOG_DEBUG("%s", msg);
        break;
    }
}

int cli_worker_main(int argc, char **argv)
{
    struct args a;
    cluster_worker_t *w = NULL;
    struct MHD_Daemon *d = NULL;
    char err[512] = "";
    int ret = 2;

    memset(&a, 0, sizeof a);
    switch (parse(argc, argv, &a)) {
    case 0:
        break;
    case 1:
        ret = 0;
        goto out;
    default:
        goto out;
    }
    int64_t window_ms = 0;
    uint64_t max_keys = 0, young = 0, batch = 0;
    int level = logging_parse_level(a.level);
    if (level < 0) {
        fprintf(stderr, "ingestd worker: invalid --log-level \"%s\"\n", a.level);
        goto out;
    }
    if (config_parse_duration(a.window, &window_ms) != 0 || window_ms < WINDOW_MIN_MS ||
        window_ms > WINDOW_MAX_MS) {
        fprintf(stderr, "ingestd worker: invalid --window \"%s\": expected 1s..365d, e.g. 24h\n",
                a.window);
        goto out;
    }
    if (config_parse_count(a.max_keys, &max_keys) != 0 || max_keys > MAX_KEYS_MAX) {
        fprintf(stderr, "ingestd worker: invalid --max-keys \"%s\"\n", a.max_keys);
        goto out;
    }
    if (config_parse_count(a.young, &young) != 0 || young == 0 || young > YOUNG_KEYS_MAX) {
        fprintf(stderr, "ingestd worker: invalid --young-keys \"%s\": 1..%" PRIu64 "\n", a.young,
                YOUNG_KEYS_MAX);
        goto out;
    }
    if (config_parse_count(a.batch, &batch) != 0 || batch == 0 || batch > MAX_BATCH_MAX) {
        fprintf(stderr, "ingestd worker: invalid --max-batch \"%s\": 1..%" PRIu64 "\n", a.batch,
                MAX_BATCH_MAX);
        goto out;
    }
    logging_level = level;
    cluster_set_log(logging_syslog); /* librdkafka's lines into our log */

    cluster_worker_options_t o = {
        .brokers = a.brokers,
        .raw_topic = a.raw,
        .out_topic = a.out,
        .group = a.group,
        .data_dir = a.data,
        .txn_id_prefix = a.prefix,
        .window_ms = window_ms,
        .max_keys = max_keys,
        .young_keys = young,
        .store_sync = STORE_SYNC_META,
        .max_batch = (uint32_t)batch,
        .mirror_offsets = a.mirror,
        .dynamic_membership = a.dynamic,
        .opts = {.kv = a.opts, .n = a.nopts},
        .log = on_worker_log,
    };
    int rc = cluster_worker_new(&o, &w, err, sizeof err);
    if (rc == CLUSTER_EINVAL) {
        fprintf(stderr, "ingestd worker: %s\n", err);
        goto out;
    }
    ret = 1;
    if (rc != CLUSTER_OK) {
        LOG_ERROR("worker: %s", err[0] ? err : cluster_strerror(rc));
        goto out;
    }
    LOG_INFO("ingestd %s worker: brokers %s, %s -> %s, group %s, data %s, window %" PRId64
             "s, max-keys %" PRIu64 ", young-keys %" PRIu64 ", max-batch %" PRIu64
             ", %s membership, %zu kafka option(s)%s",
             INGESTD_VERSION, a.brokers, a.raw, a.out, a.group, a.data, window_ms / 1000, max_keys,
             young, batch, a.dynamic ? "dynamic" : "static", a.nopts,
             a.mirror ? ", mirrored offsets" : "");

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    running = w;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct http_ctx hctx = {.w = w, .admin_token = a.admin_token, .raw = a.raw, .out = a.out};
    if (strcmp(a.listen, "none") != 0 && (d = http_start(a.listen, &hctx)) == NULL)
        goto out;
    LOG_INFO("ready");
    rc = cluster_worker_run(w, err, sizeof err);
    if (rc != CLUSTER_OK) {
        LOG_ERROR("worker stopped: %s", err[0] ? err : cluster_strerror(rc));
        goto out;
    }
    LOG_INFO("stopped");
    ret = 0;
out:
    if (d != NULL)
        MHD_stop_daemon(d);
    running = NULL;
    cluster_worker_free(w);
    free(a.env_opts);
    return ret;
}
