/* api: HTTP-free request handling: routing, auth, validation, normalisation, responses. */
#ifndef INGESTD_API_H
#define INGESTD_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/commit/commit.h"
#include "storage/log/quarantine.h"

/* Limits of the contract (README "Limits", openapi.yaml). */
#define API_MAX_EVENT_BYTES   (32 * 1024)  /* one event, as serialised JSON */
#define API_MAX_REQUEST_BYTES (500 * 1024) /* one request body, after decompression */
#define API_MAX_BATCH_EVENTS  2500
#define API_MAX_MESSAGE_ID    256 /* bytes of a client messageId */
#define API_RETRY_AFTER_S     1   /* Retry-After on 503 */

/* GET /v1/log (the consumers' read API): bounds of its query parameters and of one answer. */
#define API_LOG_MAX_DEFAULT 1000  /* records per answer when `max` is absent */
#define API_LOG_MAX_LIMIT   10000 /* largest `max` accepted */
#define API_LOG_WAIT_MAX_MS 60000 /* largest `wait` accepted (ms) */
#define API_LOG_BODY_CAP                                                                           \
    (4u * 1024 * 1024) /* an answer stops before passing this many bytes                           \
                           (but always holds at least one record) */

typedef struct api api_t;

typedef struct api_write_key {
    const char *key;    /* the write key, as the SDK sends it */
    const char *source; /* source name stamped on its events ("default" if none given) */
} api_write_key_t;

/*
 * Where accepted events go instead of the local group commit: the Kafka edge role
 * (cluster/edge.h, docs/scale-out.md) implements it. Auth, validation, messageId assignment,
 * CORS and limits stay the api's; only the place the valid events of a request go changes.
 */
typedef struct api_sink_event {
    const char *data; /* the event exactly as single-node would log it (compact JSON) */
    size_t len;
    const char *message_id; /* its messageId as logged (the string's bytes) */
    size_t message_id_len;
    int64_t timestamp_ms; /* the client's `timestamp` as sent, ms since the epoch; INT64_MAX:
                           * the event has none */
} api_sink_event_t;

/* A submitted request's outcome: error NULL when every event is stored, else a static sentence
 * for the 503 (the client retries the whole request). Called exactly once per accepted submit. */
typedef void (*api_sink_done_fn)(const char *error, void *arg);

typedef struct api_sink {
    /*
     * Takes the valid events of one request (all with `source`, receivedAt `received_ms`).
     * `events` and their bytes are borrowed for the call only. Returns 0: done(error, arg)
     * will be called once, on any thread, possibly before submit returns; or -1: refused now
     * (done is never called), the request gets 503 with Retry-After. Thread-safe.
     */
    int (*submit)(void *ctx, const char *source, int64_t received_ms,
                  const api_sink_event_t *events, size_t n, api_sink_done_fn done, void *arg);
    /* /stats: a malloc'd JSON object (the caller frees), NULL when out of memory. */
    char *(*stats_json)(void *ctx);
    /* /metrics: malloc'd Prometheus text lines (the caller frees), NULL when out of memory. */
    char *(*metrics)(void *ctx);
    /* /healthz: NULL while healthy, else a static sentence why not (answered 503). */
    const char *(*unhealthy)(void *ctx);
    const char *role; /* static string reported in /stats, e.g. "edge" */
    void *ctx;
} api_sink_t;

typedef struct api_options {
    const api_write_key_t *keys; /* copied by api_new */
    size_t nkeys;
    /* borrowed; must outlive the api. NULL only with a sink: the api then never touches storage
     * (no dedupe, no GET /v1/log, which answers 404) */
    commit_t *commit;
    /* NULL: events go to the local group commit (single-node). Else copied by api_new; its ctx
     * must outlive the api. */
    const api_sink_t *sink;
    /* Bearer token for GET /v1/log, copied by api_new; NULL or "": the route is off (404). */
    const char *admin_token;
    /* Data directory, for the consumer groups in /stats and /metrics (storage/log/groups.h); copied
     * by api_new; NULL: no groups reported. */
    const char *data_dir;
    /* Browser origins allowed by CORS on the ingest routes: "*" (any, never with credentials) or
     * a comma-separated list such as "https://a.example, http://localhost:3000" (api/cors.h says
     * what an entry may be). Copied by api_new; NULL or "": "*". A bad list fails api_new. */
    const char *cors_origin;
    /* Events per second per write key (token bucket with one second of burst; api/ratelimit.h);
     * past it ingest requests get 429 with Retry-After. 0: no limit. */
    uint64_t rate_limit;
    /* /metrics histograms the group commit fills (commit_options_t), borrowed, each may be NULL
     * (not reported): ingestd_fsync_duration_seconds and ingestd_commit_batch_events. */
    const histogram_t *fsync_seconds;
    const histogram_t *batch_events;
    /* Where refused input is kept (storage/log/quarantine.h; GET /v1/log?log=rejected), borrowed,
     * must outlive the api; NULL: nothing is kept (the rejections are still counted). */
    quarantine_t *quarantine;
    /* The same for ingestd_duplicate_age_seconds, also read for /stats dedupe.duplicate_age_seconds
     * (commit_options_t.duplicate_age_seconds); may be NULL. */
    const histogram_t *duplicate_age_seconds;
    /* The oldest TLS version the transport serves ("1.2", "1.3"; static string), reported with
     * the handshakes in /stats `tls` and /metrics ingestd_tls_handshakes_total; NULL: plain
     * HTTP (neither is reported). */
    const char *tls_min_version;
    /* Without admin_token, which Host may read /stats, /metrics and /dashboard (DNS rebinding,
     * api/adminhost.h): localhost, IP addresses, listen_host and the comma-separated names of
     * admin_hosts ("*": any Host). Both copied by api_new; NULL or "": none. */
    const char *listen_host;
    const char *admin_hosts;
} api_options_t;

/*
 * A query parameter of the request: its decoded value, or NULL when absent. The returned
 * string is borrowed from the transport and valid during the api call. Must be thread-safe
 * for distinct requests.
 */
typedef const char *(*api_param_fn)(void *transport, const char *name);

/* A request, transport-free. All pointers borrowed for the duration of api_handle(). */
typedef struct api_req {
    const char *method;        /* "GET", "POST", ... */
    const char *path;          /* without query string */
    const char *authorization; /* Authorization header or NULL */
    const char *content_type;  /* Content-Type header or NULL */
    /* CORS (api/cors.h): the Origin header and, on a preflight, the Access-Control-Request-Method
     * and Access-Control-Request-Headers headers; each NULL when absent. */
    const char *origin;
    const char *acr_method;
    const char *acr_headers;
    /* The SentAt header (RudderStack's JS SDK: the client's clock when it sent the request), the
     * sentAt of events whose body has none; NULL when absent. */
    const char *sent_at;
    const char *body; /* decompressed body (may be NULL when body_len is 0) */
    size_t body_len;
    int64_t now_ms; /* receivedAt: when the request arrived (ms since epoch) */
    /* CLOCK_MONOTONIC ms when the request arrived (clk_mono_ms() of common/clock.h); keep it the
     * same when a request is handled again after a retry outcome, so its long-poll deadline stays
     * put. 0: "now". */
    int64_t arrived_mono_ms;
    /* The client's address as text ("192.0.2.7", "2001:db8::1"): the socket's peer or, behind a
     * trusted proxy, the address it forwarded. Ingested events without a context.ip get it, as
     * Segment's API does. NULL: leave context.ip alone (--no-context-ip). */
    const char *client_ip;
    api_param_fn param; /* query parameters; NULL: the request has none */
    void *transport;    /* passed to param */
    /* The request's id (X-Request-Id), kept with what the quarantine records of it; NULL: none. */
    const char *request_id;
    /* The Host header (the operator routes' DNS-rebinding check); NULL when absent. */
    const char *host;
} api_req_t;

#define API_MAX_HEADERS 8 /* a CORS preflight answer takes 5 */

/* An extra response header. */
typedef struct api_header {
    const char *name; /* static string */
    char value[256];  /* long enough for a configured CORS origin (CORS_ORIGIN_MAX) */
} api_header_t;

/* A response. `body` is malloc'ed and owned by whoever holds the struct (free()). */
typedef struct api_resp {
    int status;               /* HTTP status */
    const char *content_type; /* static string */
    char *body;
    size_t body_len;
    int retry_after;                       /* seconds for a Retry-After header; 0: none */
    const char *allow;                     /* static string for an Allow header (405); NULL: none */
    api_header_t headers[API_MAX_HEADERS]; /* further headers the transport adds, in order */
    size_t nheaders;
} api_resp_t;

enum api_outcome {
    API_DONE = 0,     /* *resp is filled now */
    API_PENDING = 1,  /* done(resp, arg) will be called once (see api_handle) */
    API_CONTINUE = 2, /* api_check_headers: go on and read the body */
};

/*
 * Called once when a pending request is answered. `resp` is valid only
 * during the call; take its body (set resp->body = NULL) to keep it.
 *
 * resp->status 0 is the retry outcome (API_RETRY_STATUS), used by long-polls
 * (GET /v1/log?wait=MS): what the request waited for may have happened (new
 * records were committed, its deadline passed, or the api is quiescing).
 * There is no body. The transport then calls api_handle() again with the same
 * request (same arrived_mono_ms and parameters) on one of its own threads, and
 * answers or parks according to that call. The callback itself runs on the
 * storage writer thread (or in api_quiesce()'s caller; with a sink, on the
 * sink's threads) and must not do I/O.
 */
typedef void (*api_done_fn)(api_resp_t *resp, void *arg);

#define API_RETRY_STATUS 0

/* *out is freed with api_free(). Returns 0 or -1 (allocation failed / bad options). */
int api_new(const api_options_t *opts, api_t **out);

/*
 * Frees; NULL is a no-op. No request may be pending any more: a long-poll
 * holds a commit_watch() that refers to the api until it fires, so call this
 * after commit_close() (which fires every watch), or once every done callback ran.
 */
void api_free(api_t *api);

/*
 * Shutting down: every parked long-poll gets its retry outcome now, and from
 * now on GET /v1/log answers at once instead of waiting. Calls done callbacks
 * on the calling thread. Thread-safe; idempotent.
 */
void api_quiesce(api_t *api);

/*
 * Early checks on method, path and Basic auth before any body is read, so
 * 404/405/401 cost nothing. Returns API_DONE with *resp filled, or
 * API_CONTINUE. Thread-safe.
 */
int api_check_headers(api_t *api, const api_req_t *req, api_resp_t *resp);

/*
 * Handles a complete request. Returns API_DONE (*resp filled) or API_PENDING
 * (events went to the group commit, or a long-poll waits for records; `done`
 * answers later, possibly before api_handle returns and on the calling thread
 * when the wait is over at once). Thread-safe.
 */
int api_handle(api_t *api, const api_req_t *req, api_resp_t *resp, api_done_fn done, void *arg);

/*
 * Replaces the write keys (SIGHUP reload) with deep copies of keys[0..n) (validated as by
 * api_new). Requests that already looked a key up finish with the old set; later ones see
 * only the new one, never a mix. A key that stays keeps its rate-limit level. Returns 0, or
 * -1 (bad key, out of memory) with the old keys still in force. Thread-safe.
 */
int api_set_keys(api_t *api, const api_write_key_t *keys, size_t n);

/* Fills *resp with `{"success":false,"error":msg}` and `status` (503/429 get Retry-After). */
void api_error(api_resp_t *resp, int status, const char *msg);

/*
 * For an answer the transport builds itself (body too large, bad Content-Encoding or gzip,
 * shutting down, header or time limits): adds what the api adds to its own answers on that
 * route, i.e. the CORS headers of an ingest route for req->origin. Only req->path and
 * req->origin are read. Thread-safe.
 */
void api_transport_headers(api_t *api, const api_req_t *req, api_resp_t *resp);

/* Counts a response by status for /stats and /metrics; the transport calls it once per response. */
void api_count_response(api_t *api, int status);

/*
 * Counts a response's duration (`ns` from the request's arrival to its answer, by clk_mono_ns()
 * of common/clock.h) in ingestd_request_duration_seconds, by the route of `path` and the status
 * class. The transport calls it beside api_count_response. Lock-free, thread-safe.
 */
void api_count_duration(api_t *api, const char *path, int status, int64_t ns);

/*
 * Adds "requestId":id to an error body (status >= 400 whose body is a JSON object), so a client can
 * quote it and an operator find the request's log lines. Other responses are left alone. Returns 0,
 * or -1 when out of memory (the body is then unchanged). The transport calls it for every answer.
 */
int api_resp_add_request_id(api_resp_t *resp, const char *id);

/* TLS versions a transport negotiates (ingestd_tls_handshakes_total{version}). */
enum api_tls_version {
    API_TLS_1_0,
    API_TLS_1_1,
    API_TLS_1_2,
    API_TLS_1_3,
    API_TLS_OTHER,
};
#define API_TLS_VERSIONS 5

/* Counts one finished TLS handshake by its version; the transport calls it once per TLS
 * connection. Lock-free, thread-safe. */
void api_count_tls_handshake(api_t *api, enum api_tls_version v);

/* Reasons of refusals the transport decides itself (ingestd_events_rejected_total{reason}). */
#define API_REASON_REQUEST_TOO_LARGE "request_too_large"
#define API_REASON_BAD_ENCODING      "bad_encoding"

/*
 * A request the transport refused whole with a 400 (body over the byte cap, bad gzip, an
 * unsupported Content-Encoding): counted under `reason` (an API_REASON_*) and recorded once in
 * the quarantine with `error` (the answer's sentence) and body[0..len), the first bytes received
 * (raw, maybe compressed; QUARANTINE_REQUEST_BYTES of them are kept), `total` the body's whole
 * size when known (else 0). Only req->authorization (the source, when it names a known key),
 * req->request_id and req->now_ms are read. Never blocks; thread-safe.
 */
void api_refused_request(api_t *api, const api_req_t *req, const char *reason, const char *error,
                         const char *body, size_t len, uint64_t total);

#endif
