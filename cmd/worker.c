/* worker.c: `ingestd worker`: flags, the operator HTTP routes and signals around
 * cluster/worker. */
#include "cmd/cmd.h"

#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api/auth.h"
#include "api/lookup.h"
#include "api/timestamp.h"
#include "cluster/worker.h"
#include "common/errbuf.h"
#include "server/logging.h"
#include "server/ops_http.h"
#include "server/options.h"
#include "storage/window/store.h"

#define MAX_BATCH_MAX  UINT64_C(100000)
#define MAX_KAFKA_OPTS 64
#define LOOKUP_WAIT_MS 5000 /* for the worker thread to take a lookup between two batches */
#define RESUME_PREFIX  "/admin/partitions/"
#define RESUME_SUFFIX  "/resume"

/* Positions in SPECS. */
enum {
    O_BROKERS,
    O_RAW,
    O_OUT,
    O_GROUP,
    O_DATA,
    O_WINDOW,
    O_MAX_KEYS,
    O_YOUNG,
    O_LISTEN,
    O_ADMIN_TOKEN,
    O_KAFKA_OPT,
    O_PREFIX,
    O_BATCH,
    O_MIRROR,
    O_DYNAMIC,
    O_ON_LOST,
    O_LEVEL,
    O_MAX
};

static const opts_spec_t SPECS[] = {
    [O_BROKERS] = {"kafka-brokers", NULL, "INGESTD_KAFKA_BROKERS", NULL, OPTS_STRING, 1,
                   OPTS_PATH_MAX, "LIST", "bootstrap servers, host:port,... (required)"},
    [O_RAW] = {"raw-topic", NULL, "INGESTD_RAW_TOPIC", NULL, OPTS_STRING, 1, 249, "NAME",
               "input topic the edges produce to (required)"},
    [O_OUT] = {"out-topic", NULL, "INGESTD_OUT_TOPIC", NULL, OPTS_STRING, 1, 249, "NAME",
               "output topic, the source of truth (required)"},
    [O_GROUP] = {"group", NULL, "INGESTD_GROUP", NULL, OPTS_STRING, 1, 255, "NAME",
                 "consumer group of the workers (required)"},
    [O_DATA] = OPTS_SPEC_DATA,
    [O_WINDOW] = {"window", NULL, "INGESTD_WINDOW", OPTS_DEFAULT_WINDOW, OPTS_DURATION,
                  OPTS_WINDOW_MIN_MS, OPTS_WINDOW_MAX_MS, "DURATION",
                  "de-duplication window: 90s, 15m, 24h, 28d (1s..365d)"},
    [O_MAX_KEYS] =
        {"max-keys", NULL, "INGESTD_MAX_KEYS", OPTS_DEFAULT_MAX_KEYS, OPTS_COUNT, 0,
         OPTS_MAX_KEYS_MAX, "N",
         "keys kept per source in each partition before its window shortens; 0: no bound"},
    [O_YOUNG] = {"young-keys", NULL, "INGESTD_YOUNG_KEYS", OPTS_DEFAULT_YOUNG_KEYS, OPTS_COUNT, 1,
                 OPTS_YOUNG_KEYS_MAX, "N",
                 "keys a partition's LMDB store holds before they are sealed into a generation "
                 "file, as serve's (1..2^32)"},
    [O_LISTEN] = {"listen", NULL, "INGESTD_LISTEN", "127.0.0.1:8081", OPTS_STRING, 1, 300,
                  "HOST:PORT",
                  "/stats, /metrics, /healthz, /dashboard; port 0 picks one; \"none\": no HTTP"},
    [O_ADMIN_TOKEN] = {"admin-token", NULL, "INGESTD_ADMIN_TOKEN", NULL, OPTS_STRING, 1, 255,
                       "TOKEN",
                       "Bearer token of GET /v1/events/{messageId} and POST "
                       "/admin/partitions/P/resume on --listen (without one they are off)"},
    [O_KAFKA_OPT] = {"kafka-opt", NULL, "INGESTD_KAFKA_OPTS", NULL, OPTS_REPEAT, 0, MAX_KAFKA_OPTS,
                     "NAME=VALUE",
                     "librdkafka setting, e.g. security.protocol=SASL_SSL; \"consumer.NAME\" or "
                     "\"producer.NAME\" for one client only"},
    [O_PREFIX] = {"transactional-id-prefix", NULL, "INGESTD_TRANSACTIONAL_ID_PREFIX", "ingestd",
                  OPTS_STRING, 1, 200, "P",
                  "transactional.id = P-GROUP-WORKERID, WORKERID kept in DIR/worker-id"},
    [O_BATCH] = {"max-batch", NULL, "INGESTD_MAX_BATCH", "1000", OPTS_COUNT, 1, MAX_BATCH_MAX, "N",
                 "raw records per transaction"},
    [O_MIRROR] = {"mirror-offsets", NULL, "INGESTD_MIRROR_OFFSETS", NULL, OPTS_BOOL, 0, 0, "",
                  "after each transaction also commit the same offsets outside it, to group "
                  "GROUP.mirror, and read positions from there. Only for librdkafka's mock "
                  "cluster, which keeps no transactional offsets; never on a real cluster"},
    [O_DYNAMIC] = {"dynamic-membership", NULL, "INGESTD_DYNAMIC_MEMBERSHIP", NULL, OPTS_BOOL, 0, 0,
                   "",
                   "join without group.instance.id: a stopped worker leaves the group at once, "
                   "but every restart rebalances. Default: static membership "
                   "(group.instance.id = the transactional id), a restart within "
                   "session.timeout.ms keeps the partitions; partitions are assigned "
                   "cooperative-sticky"},
    [O_ON_LOST] = {"on-records-lost", NULL, "INGESTD_ON_RECORDS_LOST", "stop", OPTS_STRING, 1, 16,
                   "stop|continue",
                   "when retention deleted raw records before they were processed (a position "
                   "out of range): stop that partition (the others go on; /healthz 503) until "
                   "POST /admin/partitions/P/resume, or continue at the log start; both log an "
                   "error with the range lost and count it"},
    [O_LEVEL] = {"log-level", NULL, "INGESTD_LOG_LEVEL", "info", OPTS_STRING, 1, 16, "LEVEL",
                 "error, warn, info or debug"},
};

static const opts_cmd_t CMD = {
    "worker",
    "Usage: ingestd worker --kafka-brokers LIST --raw-topic NAME --out-topic NAME\n"
    "                      --group NAME [--data DIR] [FLAGS]\n",
    "The Kafka worker role (docs/scale-out.md): a consumer-group member that\n"
    "de-duplicates each assigned raw-topic partition against its own LMDB store\n"
    "(DIR/partitions/RAWTOPIC-P/) and produces every distinct (source, messageId)\n"
    "to the output topic exactly once, in Kafka transactions that also commit the\n"
    "input offsets. Runs in the foreground; SIGTERM/SIGINT stop it cleanly.\n"
    "Every flag has an environment variable; flags win.\n",
    "Exit 0: stopped cleanly; 1: failed; 2: usage.\n",
    SPECS,
    O_MAX,
    false,
};

/* The worker the signal handler stops: a handler gets no argument, hence the one global. */
static cluster_worker_t *volatile running;

static void on_stop(int sig)
{
    (void)sig;
    cluster_worker_t *w = running;
    if (w != NULL)
        cluster_worker_stop(w);
}

/* What the operator HTTP callbacks need (ops_http_handlers_t's ctx). */
struct http_ctx {
    cluster_worker_t *w;
    const char *admin_token; /* NULL: GET /v1/events is off */
    const char *raw, *out;   /* topic names, for the answers' reasons */
};

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
        *status = 200;
        errbuf_printf(reason, sizeof reason,
                      "the worker keeps keys, not events: the event is in the output topic %s, the "
                      "record whose ingestd-input header is %d:%llu",
                      h->out, (int)res->partition, (unsigned long long)res->offset);
        json_object_set_new(j, "offset", json_integer((json_int_t)res->offset));
        json_object_set_new(j, "receivedAt", iso_or_null(res->received_ms));
        json_object_set_new(j, "event", json_null());
        json_object_set_new(j, "reason", json_string(reason));
    } else if (res->status == CLUSTER_LOOKUP_UNSEEN) {
        *status = 404;
        json_object_set_new(j, "window_start", iso_or_null(res->window_start_ms));
    } else {
        *status = 404;
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

/* {"success":false,"error":msg} as malloc'd text, with `status`. */
static unsigned error_body(unsigned status, const char *msg, char **json)
{
    json_t *j = json_pack("{s:b, s:s}", "success", 0, "error", msg);
    *json = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    return status;
}

/* The admin routes' method and token: 0 when both are right, else the error's status. */
static unsigned admin_check(const struct http_ctx *h, const ops_http_req_t *req, const char *method,
                            char **json)
{
    const char *auth = ops_http_authorization(req);
    const char *tok = NULL;
    size_t tlen = 0;
    if (strcmp(ops_http_method(req), method) != 0)
        return error_body(405, "method not allowed", json);
    auth_bearer_token(auth, &tok, &tlen);
    if (!tok || !auth_equal(tok, tlen, h->admin_token, strlen(h->admin_token)))
        return error_body(
            401, auth ? "invalid admin token" : "missing admin token (Authorization: Bearer TOKEN)",
            json);
    return 0;
}

/* POST /admin/partitions/P/resume (docs/scale-out.md, "Records deleted before they were
 * processed"): a stopped partition goes on at the log start. */
static unsigned resume_route(const struct http_ctx *h, const ops_http_req_t *req, const char *p,
                             char **json)
{
    char *end = NULL;
    cluster_resume_t res;
    unsigned status = admin_check(h, req, "POST", json);
    if (status != 0)
        return status;
    long part = strtol(p, &end, 10);
    if (end == p || part < 0 || part > INT32_MAX || strcmp(end, RESUME_SUFFIX) != 0)
        return error_body(404, "not found: POST /admin/partitions/P/resume", json);
    int rc = cluster_worker_resume(h->w, (int32_t)part, LOOKUP_WAIT_MS, &res);
    if (rc != CLUSTER_OK)
        return error_body(503,
                          rc == CLUSTER_TIMEOUT ? "the worker is busy or not running, retry later"
                                                : "the partition could not be moved, retry later",
                          json);
    json_t *j = json_pack("{s:i, s:s}", "partition", (int)part, "status",
                          res.status == CLUSTER_RESUME_RESUMED       ? "resumed"
                          : res.status == CLUSTER_RESUME_NOT_STOPPED ? "not_stopped"
                                                                     : "not_owned");
    if (j != NULL && res.status == CLUSTER_RESUME_RESUMED) {
        json_object_set_new(j, "resumed_at", json_integer(res.resumed_at));
        json_object_set_new(j, "skipped_from", json_integer(res.skipped_from));
        json_object_set_new(j, "offsets_skipped", json_integer(res.resumed_at - res.skipped_from));
    }
    *json = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    return res.status == CLUSTER_RESUME_RESUMED       ? 200
           : res.status == CLUSTER_RESUME_NOT_STOPPED ? 409
                                                      : 404;
}

/* GET /v1/events/{messageId}?source=S on the worker (docs/scale-out.md). */
static unsigned events_route(const struct http_ctx *h, const ops_http_req_t *req, const char *id,
                             char **json)
{
    const char *source = ops_http_query(req, "source");
    cluster_lookup_t res;
    unsigned status = admin_check(h, req, "GET", json);
    if (status != 0)
        return status;
    const char *why = api_lookup_check_id(id, strlen(id));
    if (why)
        return error_body(400, why, json);
    if (source == NULL)
        source = "default";
    if (source[0] == '\0' || strlen(source) > API_LOOKUP_SOURCE_MAX)
        return error_body(400, "source must be 1..256 bytes", json);
    int rc =
        cluster_worker_lookup(h->w, source, strlen(source), id, strlen(id), LOOKUP_WAIT_MS, &res);
    if (rc != CLUSTER_OK)
        return error_body(503,
                          rc == CLUSTER_TIMEOUT ? "the worker is busy or not running, retry later"
                                                : "a partition store failed, retry later",
                          json);
    json_t *j = lookup_json(h, id, source, &res, &status);
    *json = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    return status;
}

/* ops_http's route: the admin token's routes, off without --admin-token. */
static unsigned admin_route(void *ctx, const ops_http_req_t *req, char **json)
{
    const struct http_ctx *h = ctx;
    const char *path = ops_http_path(req);
    if (!h->admin_token)
        return 0;
    if (strncmp(path, API_LOOKUP_PREFIX, strlen(API_LOOKUP_PREFIX)) == 0)
        return events_route(h, req, path + strlen(API_LOOKUP_PREFIX), json);
    if (strncmp(path, RESUME_PREFIX, strlen(RESUME_PREFIX)) == 0)
        return resume_route(h, req, path + strlen(RESUME_PREFIX), json);
    return 0;
}

static char *stats_json(void *ctx)
{
    return cluster_worker_stats_json(((struct http_ctx *)ctx)->w);
}

static char *metrics(void *ctx)
{
    return cluster_worker_metrics(((struct http_ctx *)ctx)->w);
}

static const char *unhealthy(void *ctx)
{
    cluster_worker_t *w = ((struct http_ctx *)ctx)->w;
    if (cluster_worker_ready(w))
        return NULL;
    return cluster_worker_stopped_partitions(w) > 0
               ? "not ready: a partition is stopped, its raw records were deleted before they "
                 "were processed (/stats records_lost; POST /admin/partitions/P/resume)"
               : "not ready: joining the group or waiting for the transaction coordinator";
}

static void on_worker_log(void *arg, int level, const char *msg)
{
    (void)arg;
    switch (level) {
    case 0:
        LOGGING_ERROR("%s", msg);
        break;
    case 1:
        LOGGING_WARN("%s", msg);
        break;
    case 2:
        LOGGING_INFO("%s", msg);
        break;
    default:
        LOGGING_DEBUG("%s", msg);
        break;
    }
}

/* The flags as cluster_worker_new wants them; 0, or 2 after a usage error on stderr. */
static int worker_options(const opts_val_t *v, cluster_worker_options_t *o)
{
    int level = logging_parse_level(v[O_LEVEL].str);
    if (level < 0) {
        fprintf(stderr, "ingestd worker: invalid --log-level \"%s\"\n", v[O_LEVEL].str);
        return 2;
    }
    logging_level = level;
    const char *on_lost = v[O_ON_LOST].str;
    if (strcmp(on_lost, "stop") != 0 && strcmp(on_lost, "continue") != 0) {
        fprintf(stderr, "ingestd worker: --on-records-lost must be stop or continue, not \"%s\"\n",
                on_lost);
        return 2;
    }
    *o = (cluster_worker_options_t){
        .brokers = v[O_BROKERS].str,
        .raw_topic = v[O_RAW].str,
        .out_topic = v[O_OUT].str,
        .group = v[O_GROUP].str,
        .data_dir = v[O_DATA].str,
        .txn_id_prefix = v[O_PREFIX].str,
        .window_ms = v[O_WINDOW].ms,
        .max_keys = v[O_MAX_KEYS].n,
        .young_keys = v[O_YOUNG].n,
        .store_sync = STORE_SYNC_META,
        .max_batch = (uint32_t)v[O_BATCH].n,
        .mirror_offsets = v[O_MIRROR].on,
        .dynamic_membership = v[O_DYNAMIC].on,
        .continue_on_lost = strcmp(on_lost, "continue") == 0,
        .opts = {.kv = v[O_KAFKA_OPT].items, .n = v[O_KAFKA_OPT].nitems},
        .log = on_worker_log,
    };
    return 0;
}

static void log_start(const cluster_worker_options_t *o)
{
    LOGGING_INFO("ingestd %s worker: brokers %s, %s -> %s, group %s, data %s, window %" PRId64
                 "s, max-keys %" PRIu64 ", young-keys %" PRIu64 ", max-batch %" PRIu32
                 ", %s membership, on-records-lost %s, %zu kafka option(s)%s",
                 INGESTD_VERSION, o->brokers, o->raw_topic, o->out_topic, o->group, o->data_dir,
                 o->window_ms / 1000, o->max_keys, o->young_keys, o->max_batch,
                 o->dynamic_membership ? "dynamic" : "static",
                 o->continue_on_lost ? "continue" : "stop", o->opts.n,
                 o->mirror_offsets ? ", mirrored offsets" : "");
}

/* SIGINT/SIGTERM stop `w`; a reader gone away must not kill the worker. */
static void install_signals(cluster_worker_t *w)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    running = w;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* The operator HTTP server on --listen, or none ("none"). Returns 0, or -1 (logged). */
static int start_http(const char *listen, struct http_ctx *hctx, ops_http_t **out)
{
    char err[512];
    const ops_http_handlers_t handlers = {
        .stats_json = stats_json,
        .metrics = metrics,
        .unhealthy = unhealthy,
        .route = admin_route,
        .ctx = hctx,
        .not_found = "not found: the worker serves /stats, /metrics, /healthz and /dashboard",
    };
    *out = NULL;
    if (strcmp(listen, "none") == 0)
        return 0;
    if (ops_http_start(listen, &handlers, out, err, sizeof err) != 0) {
        LOGGING_ERROR("%s", err);
        return -1;
    }
    return 0;
}

int cmd_worker(int argc, char **argv)
{
    opts_val_t v[O_MAX];
    cluster_worker_options_t o;
    cluster_worker_t *w = NULL;
    ops_http_t *http = NULL;
    char err[512] = "";
    int ret = 2;

    int rc = opts_parse(&CMD, argc, argv, v, NULL);
    if (rc != 0) {
        ret = rc == 1 ? 0 : 2;
        goto out;
    }
    if (worker_options(v, &o) != 0)
        goto out;
    cluster_set_log(logging_syslog); /* librdkafka's lines into our log */
    rc = cluster_worker_new(&o, &w, err, sizeof err);
    if (rc == CLUSTER_EINVAL) {
        fprintf(stderr, "ingestd worker: %s\n", err);
        goto out;
    }
    ret = 1;
    if (rc != CLUSTER_OK) {
        LOGGING_ERROR("worker: %s", err[0] ? err : cluster_strerror(rc));
        goto out;
    }
    log_start(&o);
    install_signals(w);
    struct http_ctx hctx = {
        .w = w, .admin_token = v[O_ADMIN_TOKEN].str, .raw = o.raw_topic, .out = o.out_topic};
    if (start_http(v[O_LISTEN].str, &hctx, &http) != 0)
        goto out;
    LOGGING_INFO("ready");
    rc = cluster_worker_run(w, err, sizeof err);
    if (rc != CLUSTER_OK) {
        LOGGING_ERROR("worker stopped: %s", err[0] ? err : cluster_strerror(rc));
        goto out;
    }
    LOGGING_INFO("stopped");
    ret = 0;
out:
    ops_http_stop(http);
    running = NULL;
    cluster_worker_free(w);
    opts_free(&CMD, v);
    return ret;
}
