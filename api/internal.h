/*
 * internal: the api_t struct and the functions the api/ files share; not for use outside api/.
 *
 * One section per file, in the order they depend on each other: the router (router.c) calls the
 * handlers (ingest.c, logread.c, lookup.c, stats.c, dashboard.c), the handlers call the helpers
 * (keys.c, error.c, reject.c, reqhist.c), and nothing points back up. api.c sets up api_t.
 */
#ifndef INGESTD_API_INTERNAL_H
#define INGESTD_API_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>

#include "api/api.h"
#include "common/prom.h"

#define API_STATUS_SLOTS 600 /* counters for statuses 0..599 */
#define API_REASONS      11  /* ingestd_events_rejected_total{reason} (reject.c's table) */

struct api_poll; /* a parked long-poll (logread.c) */
struct cors;     /* --cors-origin (cors.h) */

struct auth_keyset; /* write keys + their rate-limit buckets (auth.h) */

struct api {
    /* The write keys, replaced as a whole by api_set_keys (SIGHUP): a request takes a reference
     * (api_keys_get, keys.c) under the read lock, which guards only the pointer, and uses the set
     * without any lock after that. */
    pthread_rwlock_t keys_mu;
    bool keys_mu_ok; /* keys_mu was initialised (api_free after a failed api_new) */
    struct auth_keyset *keys;
    uint64_t rate_limit; /* events/s per write key; 0: off */
    /* Refusals by the limits, for /stats and /metrics (events: those counted before refusal). */
    atomic_uint_fast64_t rate_limited_requests, rate_limited_events;
    atomic_uint_fast64_t queue_full_requests, queue_full_events;
    commit_t *commit;
    int64_t started_ms; /* CLOCK_MONOTONIC at api_new, for uptime */
    atomic_uint_fast64_t rejected;
    atomic_uint_fast64_t by_status[API_STATUS_SLOTS];
    char *admin_token; /* NULL: GET /v1/log is off */
    char *data_dir;    /* NULL: no groups in /stats */
    atomic_bool quiescing;
    pthread_mutex_t polls_mu; /* guards polls */
    struct api_poll *polls;   /* parked long-polls, until their watch fires */
    struct cors *cors;        /* browser origins allowed on the ingest routes */
    /* api_options.sink (the edge role) when has_sink; `commit` may then be NULL. */
    bool has_sink;
    api_sink_t sink;
    atomic_uint_fast64_t sink_accepted;              /* events of requests the sink answered 200 */
    struct reqhist *reqhist;                         /* request durations by route (reqhist.h) */
    const histogram_t *fsync_seconds, *batch_events; /* api_options_t's, may be NULL */
    quarantine_t *quarantine;                        /* api_options_t's, may be NULL */
    atomic_uint_fast64_t by_reason[API_REASONS];     /* rejections by reason (reject.c) */
    atomic_uint_fast64_t unattributed; /* refusals not quarantined: no known key (reject.c) */
    const histogram_t *duplicate_ages; /* api_options_t's, may be NULL */
    const char *tls_min_version;       /* api_options_t's; NULL: no TLS */
    atomic_uint_fast64_t tls_handshakes[API_TLS_VERSIONS]; /* by enum api_tls_version */
    struct adminhost *admin_hosts; /* who may read the operator routes without a token */
};

/* ---- error.c: answers ---- */

/* Fills *resp with `json` (compact) and `status`. Steals the reference. Returns 0 or -1 (then *resp
 * holds a 500 when possible). */
int api_resp_json(api_resp_t *resp, int status, json_t *json);

/* The one mapping of a commit status (COMMIT_UNAVAILABLE, COMMIT_CLOSED, ...) to an HTTP error:
 * returns the status (503, or 500) with *error its sentence (static). */
int api_commit_http(int commit_status, const char **error);

/* api_commit_http's error as the answer in *resp. */
void api_error_commit(api_resp_t *resp, int commit_status);

/* Adds a header (value printf-formatted, truncated to fit) to *resp; ignored when full. */
void api_resp_header(api_resp_t *resp, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- keys.c: the write keys and the admin token ---- */

/* Sets up the write keys of opts (keys_mu, the first key set). Returns 0 or -1. */
int api_keys_init(api_t *api, const api_options_t *opts);

/* Frees the key set and keys_mu (what api_keys_init set up, also partly). */
void api_keys_destroy(api_t *api);

/* A reference to the current key set; give it back with auth_keyset_release(). */
struct auth_keyset *api_keys_get(api_t *api);

/*
 * Checks `Authorization: Bearer <admin token>` in constant time. Returns 0, or
 * -1 with a 401 (WWW-Authenticate: Bearer) in *resp.
 */
int api_admin_auth(const api_t *api, const char *authorization, api_resp_t *resp);

/* Whether `authorization` is `Bearer <admin token>` (constant time; false without a token). */
bool api_admin_ok(const api_t *api, const char *authorization);

/* ---- reject.c: refusals by reason and the quarantine ---- */

/* Sets up api's part from opts. */
void api_reject_init(api_t *api, const api_options_t *opts);

/* The reason word (ingestd_events_rejected_total{reason}) of a rejection sentence of batch.c or
 * ingest.c; "other" for a sentence it does not know. */
const char *api_reject_reason(const char *error);

/* One event of a batch rejected with `error`: counted by reason and recorded (the event
 * re-serialised compactly, cut at QUARANTINE_EVENT_BYTES). `source` is the write key's. */
void api_reject_event(api_t *api, const api_req_t *req, const char *source, const json_t *ev,
                      size_t index, const char *error);

/* The request refused whole with `error` (400): counted and recorded with the first
 * QUARANTINE_REQUEST_BYTES of req->body. source NULL: the Authorization header's, if any. */
void api_reject_request(api_t *api, const api_req_t *req, const char *source, const char *error);

/* ingestd_events_rejected_total{reason} and the quarantine's gauges for /metrics. */
void api_reject_metrics(api_t *api, prom_t *p);

/* /stats: adds events.rejected_by_reason and "quarantine" to the /stats object j. */
void api_reject_stats(api_t *api, json_t *j);

/* ---- tlscount.c: TLS handshakes by version ---- */

/* /stats: adds "tls" (min_version, handshakes by version) to j when the transport serves TLS. */
void api_tls_stats(const api_t *api, json_t *j);

/* /metrics: ingestd_tls_handshakes_total{version} when the transport serves TLS. */
void api_tls_metrics(api_t *api, prom_t *p);

/* ---- reqhist.c: the /metrics histograms ---- */

/* Request durations, fsync durations, group commit sizes, duplicate ages. */
void api_metrics_histograms(const api_t *api, prom_t *p);

/* ---- ingest.c: the ingest routes ---- */

/* Auth, parse, validate, submit. `single_type` NULL for batch/import. */
int api_ingest(api_t *api, const api_req_t *req, const char *single_type, api_resp_t *resp,
               api_done_fn done, void *arg);

/* Whether a Content-Type (NULL allowed) is one the ingest routes read as JSON. */
int api_content_type_ok(const char *content_type);

/*
 * Early check of a key given in the Authorization header, before the body is
 * read. Returns 0 (a known key with room in its rate limit, or no key in the
 * header: the body's writeKey decides), or -1 with a 401 (malformed header,
 * unknown key), 429 (the key's rate limit has no room for one event) or 503
 * (no memory) in *resp.
 */
int api_header_auth(api_t *api, const char *authorization, api_resp_t *resp);

/* ---- logread.c: GET /v1/log, the consumers' read API ---- */

int api_log_read(api_t *api, const api_req_t *req, api_resp_t *resp, api_done_fn done, void *arg);

/* ---- lookup.c: GET /v1/events/{messageId} ---- */

/* One messageId's verdict. Answers at once (API_DONE). */
int api_lookup_route(api_t *api, const api_req_t *req, api_resp_t *resp);

/* ---- stats.c: GET /stats, GET /metrics, GET /healthz ---- */

/* `now_ms` is wall-clock time for the effective window. */
void api_stats(api_t *api, int64_t now_ms, api_resp_t *resp);
void api_metrics(api_t *api, int64_t now_ms, api_resp_t *resp);

/* With a sink (the edge role): no storage sections. */
void api_stats_sink(api_t *api, api_resp_t *resp);
void api_metrics_sink(api_t *api, api_resp_t *resp);

/* 200 {"status":"ok"}, or 503 while storage (or the edge's sink) has failed. */
void api_healthz(api_t *api, api_resp_t *resp);

/* ---- dashboard.c: GET /dashboard, the operator's page embedded at build time ---- */

void api_dashboard(api_resp_t *resp);

/* ---- router.c: the route table ---- */

/* What a route is answered by (router.c's dispatch). */
enum api_route_kind {
    API_ROUTE_INGEST,
    API_ROUTE_STATS,
    API_ROUTE_METRICS,
    API_ROUTE_HEALTHZ,
    API_ROUTE_LOG,
    API_ROUTE_DASHBOARD,
    API_ROUTE_EVENTS,
};

/* One entry of a route table. */
typedef struct api_route {
    const char *path;
    enum api_route_kind kind;
    const char *type; /* event type for single-event routes, NULL for batch/import */
    bool prefix;      /* path is a prefix: the rest of the request path is the route's argument
                       * (GET /v1/events/{messageId}) */
} api_route_t;

/*
 * The entry of routes[0..n) that `path` asks for, or NULL. An exact route matches the path
 * without its query string and one trailing slash; a prefix route matches any path that starts
 * with it, only when no exact route does. The table's order does not matter. Returns a pointer
 * into routes.
 */
const api_route_t *api_route_find(const api_route_t *routes, size_t n, const char *path);

/* Puts the path of each route into paths[0..cap) and returns how many routes there are (cap 0
 * and paths NULL to ask). The strings are static. */
size_t api_route_paths(const char **paths, size_t cap);

#endif
