/* http: libmicrohttpd glue; reads bodies, calls api/, parks connections until the commit answers.
 * Connections themselves (deadlines, the watchdog, shedding) are http_conn.c's. */
#include "server/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/errbuf.h"
#include "server/gzip.h"
#include "server/logging.h"

/*
 * DESIGN. One request goes through libmicrohttpd's access handler several times: the first call
 * has the headers (first_call: framing and header checks, the client address, api_check_headers,
 * early refusals), then one call per piece of body (body_chunk: buffered within
 * --max-body-memory, or dropped), then the final call (final_call: gzip, api_handle, and an
 * answer now or once the group commit calls on_done, the connection suspended meanwhile).
 * Refusals decided on the first call wait for the body (lingering close, below). The connection
 * around it (deadlines, shedding, per-address counts) is http_conn.c's, the watchdog that expires
 * overdue requests http_watchdog.c's, the TLS set-up http_tls.c's, and the reading of a request
 * head's framing headers http_headers.c's (server/internal.h).
 *
 * Functions, in order:
 *   counters        counter_add, counter_wait_zero
 *   ids             safe_request_id
 *   body budget     budget_take, budget_give
 *   answers         too_large, answer, transport_headers, answer_transport, answer_error,
 *                   answer_too_large
 *   lingering       expects_continue, may_linger, linger_start, refuse, linger, refuse_error
 *   storage's call  on_done
 *   the api request parse_encoding, get_param, fill_req, start_request_id
 *   header checks   resolve_client, check_target, check_framing, count_client (what the head
 *                   says is read by http_headers.c and http_rawhead.c)
 *   the calls       origin_path, new_req, first_call, grow_body, over_budget, body_chunk,
 *                   call_api, retry_api, settle, final_call, dispatch, on_request, on_completed
 *   start and stop  on_mhd_log, resolve, set_limits, init_sync, destroy, start_daemon,
 *                   listen_error, http_start, http_quiesce, http_drain, http_stop
 */

/*
 * Lingering close. A refusal decided before the body is read (too large by Content-Length,
 * unknown key, ...) is not sent at once: libmicrohttpd 0.9.75 would send it and close with the
 * body still arriving, and the kernel answers those bytes with a reset that destroys the answer
 * in the client's buffers before a client that writes first and reads after can read it (most
 * SDKs' HTTP stacks). So the body is read and dropped and the refusal sent after it, as nginx's
 * lingering close does; MHD only lets a response be queued on the first call (before the body)
 * or the final one (after it), never in between. These bound what one refused request may cost:
 * a body announced larger than LINGER_MAX_BYTES is refused at once, a chunked one is cut there,
 * and the rest of the body must arrive within LINGER_MAX_MS (past it the watchdog answers). With
 * `Expect: 100-continue` the client waits to be invited, so it is refused at once, unread.
 */
#define LINGER_MAX_BYTES ((size_t)8 * API_MAX_REQUEST_BYTES)

/* How long http_stop waits for parked requests to be answered before giving up. */
#define STOP_WAIT_MS 5000

enum encoding { ENC_IDENTITY, ENC_GZIP };

enum phase {
    PH_BODY,     /* reading the body */
    PH_DISCARD,  /* body over the cap, or refused early: reading and dropping the rest */
    PH_PENDING,  /* api_handle returned API_PENDING; waiting for on_done */
    PH_ANSWERED, /* a response is queued */
};

/* Per-request state: allocated on the first handler call, freed in on_completed. */
struct req {
    http_t *h;
    struct MHD_Connection *conn;
    struct conn *c; /* the connection's state; NULL if it could not be allocated */
    const char *method;
    const char *version;     /* "HTTP/1.1", ... (MHD's, valid while the request lives) */
    char rid[REQID_MAX + 1]; /* X-Request-Id */
    enum phase phase;
    enum encoding enc;
    int64_t now_ms;
    int64_t mono_ms;  /* arrival on CLOCK_MONOTONIC: a long-poll's deadline counts from it */
    int64_t start_ns; /* arrival, clk_mono_ns(): for ingestd_request_duration_seconds */
    const char *path; /* MHD's url: the path, unescaped, without the query */
    char *body;       /* raw (maybe compressed) body, NUL-terminated */
    size_t len, cap;
    size_t reserved; /* bytes of h->body_budget this request holds (its buffer) */
    size_t discarded;
    bool has_early;   /* `early` is the answer once the body is read (lingering close) */
    api_resp_t early; /* owns its body */
    bool must_close;  /* answer with Connection: close (Content-Length with chunked) */
    char client_ip[PROXY_ADDR_LEN]; /* "" when unknown */
    bool client_counted;            /* counts in http.per_ip under client_key */
    uint8_t client_key[16];

    pthread_mutex_t mu; /* orders on_done (writer thread) against suspending */
    bool done;          /* on_done has run; resp holds the answer */
    bool parked;        /* MHD_suspend_connection was called */
    bool counted;       /* in h->inflight (a request refused while shutting down is not) */
    api_resp_t resp;
    /* Quarantine: a body refused whole here is recorded once, with its first bytes (q_keep). */
    const char *q_reason, *q_error; /* set: this refusal is recorded (static strings) */
    char *q_head;                   /* the first QUARANTINE_REQUEST_BYTES of the body */
    size_t q_len;
    uint64_t q_seen, q_declared; /* body bytes that came; its Content-Length (0: none) */
};

static void counter_add(http_t *h, unsigned *c, int delta)
{
    pthread_mutex_lock(&h->mu);
    *c = (unsigned)((int)*c + delta);
    if (delta < 0)
        pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* Waits until *c is zero or timeout_ms passes; returns the final value. Holds no lock on return. */
static unsigned counter_wait_zero(http_t *h, unsigned *c, int timeout_ms)
{
    struct timespec deadline;
    unsigned left;

    deadline = clk_mono_after(timeout_ms);
    pthread_mutex_lock(&h->mu);
    while (*c > 0) {
        if (pthread_cond_timedwait(&h->cv, &h->mu, &deadline) == ETIMEDOUT)
            break;
    }
    left = *c;
    pthread_mutex_unlock(&h->mu);
    return left;
}

/* A client's id is used as is when it cannot break a header, a JSON string or a log line. */
static bool safe_request_id(const char *v)
{
    size_t n = 0;

    if (v == NULL)
        return false;
    for (; v[n] != '\0'; n++) {
        char ch = v[n];
        if (n >= REQID_MAX)
            return false;
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              strchr("-_.:/+=", ch) != NULL))
            return false;
    }
    return n > 0;
}

/* Bodies held in memory come out of one budget (--max-body-memory). False: it is spent. */
static bool budget_take(http_t *h, size_t n)
{
    uint64_t before = atomic_fetch_add(&h->body_used, n);
    if (before + n <= h->body_budget)
        return true;
    atomic_fetch_sub(&h->body_used, n);
    return false;
}

static void budget_give(http_t *h, struct req *r)
{
    atomic_fetch_sub(&h->body_used, r->reserved);
    r->reserved = 0;
}

#define TOO_LARGE_MSG "request body too large (max 512000 bytes)" /* API_MAX_REQUEST_BYTES */

static void too_large(api_resp_t *resp)
{
    char msg[96];

    memset(resp, 0, sizeof *resp);
    snprintf(msg, sizeof msg, "request body too large (max %d bytes)", API_MAX_REQUEST_BYTES);
    api_error(resp, 400, msg);
}

/*
 * Queues `resp` (taking its body) on r's connection and counts it. Must run
 * in the access handler. Returns what the handler should return.
 */
static enum MHD_Result answer(struct req *r, api_resp_t *resp)
{
    http_t *h = r->h;
    struct MHD_Response *mr;
    enum MHD_Result ret;
    char retry[16];

    if (!http_conn_disarm(r->c)) {
        /* The watchdog answered 408 and closed the connection already. */
        free(resp->body);
        resp->body = NULL;
        return MHD_NO;
    }
    /* Out of memory here leaves the error without its requestId; the header still has it. */
    (void)api_resp_add_request_id(resp, r->rid);
    if (resp->body != NULL) {
        /* MUST_FREE: MHD free()s the body once sent, which is how api_resp_t says it was made. */
        mr = MHD_create_response_from_buffer(resp->body_len, resp->body, MHD_RESPMEM_MUST_FREE);
        if (mr == NULL) {
            free(resp->body);
            resp->body = NULL;
            return MHD_NO;
        }
        resp->body = NULL;
    } else {
        mr = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (mr == NULL)
            return MHD_NO;
    }
    MHD_add_response_header(mr, MHD_HTTP_HEADER_CONTENT_TYPE,
                            resp->content_type != NULL ? resp->content_type : "application/json");
    if (resp->retry_after > 0) {
        snprintf(retry, sizeof retry, "%d", resp->retry_after);
        MHD_add_response_header(mr, MHD_HTTP_HEADER_RETRY_AFTER, retry);
    }
    if (resp->allow != NULL)
        MHD_add_response_header(mr, MHD_HTTP_HEADER_ALLOW, resp->allow);
    MHD_add_response_header(mr, "X-Request-Id", r->rid);
    if (r->must_close) {
        /* RFC 9112 6.1: whatever followed a request framed two ways is not read as another. */
        MHD_add_response_header(mr, MHD_HTTP_HEADER_CONNECTION, "close");
    }
    for (size_t i = 0; i < resp->nheaders && i < API_MAX_HEADERS; i++)
        MHD_add_response_header(mr, resp->headers[i].name, resp->headers[i].value);
    if (atomic_load(&h->quiesced) && !r->must_close) {
        /* Shutting down: tell keep-alive clients to take their next request elsewhere. */
        MHD_add_response_header(mr, MHD_HTTP_HEADER_CONNECTION, "close");
    }
    ret = MHD_queue_response(r->conn, (unsigned)resp->status, mr);
    MHD_destroy_response(mr);
    if (ret == MHD_YES) {
        api_count_response(h->api, resp->status);
        api_count_duration(h->api, r->path, resp->status, clk_mono_ns() - r->start_ns);
        r->phase = PH_ANSWERED;
        /* The path, never the body: event data stays out of the logs. */
        LOG_DEBUG("http: %s %.200s -> %d (from %s)", r->method, r->path, resp->status,
                  r->client_ip[0] ? r->client_ip : "?");
    }
    return ret;
}

/* An answer the transport made itself: the api adds its per-route headers (CORS on the ingest
 * routes, so a page's script can read why it was refused), then it is queued. */
static void transport_headers(struct req *r, api_resp_t *resp)
{
    api_req_t areq;

    memset(&areq, 0, sizeof areq);
    areq.path = r->path;
    areq.origin = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");
    api_transport_headers(r->h->api, &areq, resp);
}

static enum MHD_Result answer_transport(struct req *r, api_resp_t *resp)
{
    transport_headers(r, resp);
    return answer(r, resp);
}

static enum MHD_Result answer_error(struct req *r, int status, const char *msg)
{
    api_resp_t resp;

    memset(&resp, 0, sizeof resp);
    api_error(&resp, status, msg);
    return answer_transport(r, &resp);
}

static enum MHD_Result answer_too_large(struct req *r)
{
    api_resp_t resp;

    too_large(&resp);
    return answer_transport(r, &resp);
}

/* `Expect: 100-continue` on HTTP/1.1, as libmicrohttpd decides whether to invite the body. */
static bool expects_continue(const struct req *r)
{
    const char *v = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);

    return v != NULL && strcasecmp(v, "100-continue") == 0 && r->version != NULL &&
           strcmp(r->version, MHD_HTTP_VERSION_1_1) == 0;
}

static enum MHD_Result linger(struct req *r, api_resp_t *resp);
static void q_record(struct req *r, const char *body, size_t len);

/* Whether a refusal may wait for the body (see LINGER_MAX_BYTES): one comes, within the bound,
 * and the client does not wait for an invitation. */
static bool may_linger(struct req *r)
{
    struct MHD_Connection *conn = r->conn;
    const char *cl =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *te =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);

    if (r->c == NULL || expects_continue(r))
        return false;
    if (te != NULL)
        return true; /* chunked (others got 501): cut at LINGER_MAX_BYTES in body_chunk */
    if (cl == NULL)
        return false;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(cl, &end, 10);
    return errno == 0 && end != cl && n > 0 && n <= LINGER_MAX_BYTES;
}

/* The watchdog answers a lingering refusal itself when the rest of the body is too slow. */
static void linger_start(http_t *h, struct req *r)
{
    struct conn *c = r->c;

    pthread_mutex_lock(&h->wd_mu);
    c->early_status = 0;
    if (r->early.body != NULL && r->early.body_len < sizeof c->early_body) {
        memcpy(c->early_body, r->early.body, r->early.body_len);
        c->early_body[r->early.body_len] = '\0';
        c->early_status = r->early.status;
    }
    pthread_mutex_unlock(&h->wd_mu);
    http_conn_move(c, clk_mono_ms() + LINGER_MAX_MS, true);
}

/*
 * A refusal decided on the first call (headers only): answered after the body is read and
 * dropped when that is possible (lingering close, see LINGER_MAX_BYTES), else at once. Takes
 * resp's body either way.
 */
static enum MHD_Result refuse(struct req *r, api_resp_t *resp)
{
    if (!may_linger(r)) {
        q_record(r, NULL, 0);
        return answer(r, resp);
    }
    return linger(r, resp);
}

/* Keeps resp (taking its body) as the answer to send once the body has been read and dropped. */
static enum MHD_Result linger(struct req *r, api_resp_t *resp)
{
    if (r->c == NULL) {
        free(resp->body);
        resp->body = NULL;
        return MHD_NO;
    }
    free(r->body);
    r->body = NULL;
    budget_give(r->h, r);
    r->len = r->cap = 0;
    r->early = *resp;
    resp->body = NULL;
    r->has_early = true;
    r->phase = PH_DISCARD;
    linger_start(r->h, r);
    return MHD_YES;
}

static enum MHD_Result refuse_error(struct req *r, int status, const char *msg)
{
    api_resp_t resp;

    memset(&resp, 0, sizeof resp);
    api_error(&resp, status, msg);
    transport_headers(r, &resp);
    return refuse(r, &resp);
}

/* Runs once per pending request, on the commit writer thread. */
static void on_done(api_resp_t *resp, void *arg)
{
    struct req *r = arg;
    http_t *h = r->h;
    struct MHD_Connection *conn = r->conn;
    bool resume;

    pthread_mutex_lock(&r->mu);
    r->resp = *resp;
    resp->body = NULL; /* ours now */
    r->done = true;
    resume = r->parked;
    pthread_mutex_unlock(&r->mu);

    /*
     * When the handler has not parked the connection yet, it will see `done`
     * under the lock and answer at once. Otherwise the connection is suspended,
     * so MHD cannot free it (or r) before this resume; MHD_resume_connection
     * takes the daemon's lock and wakes the worker through its ITC, which is
     * what makes it safe from a foreign thread, thread pool or not.
     */
    if (resume) {
        MHD_resume_connection(conn);
        counter_add(h, &h->suspended, -1);
    }
}

static enum encoding parse_encoding(const char *v, bool *ok)
{
    *ok = true;
    if (v == NULL)
        return ENC_IDENTITY;
    while (*v == ' ' || *v == '\t')
        v++;
    size_t n = strlen(v);
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    if (n == 0 || (n == 8 && strncasecmp(v, "identity", 8) == 0))
        return ENC_IDENTITY;
    if ((n == 4 && strncasecmp(v, "gzip", 4) == 0) ||
        (n == 6 && strncasecmp(v, "x-gzip", 6) == 0) ||
        (n == 7 && strncasecmp(v, "deflate", 7) == 0))
        return ENC_GZIP; /* zlib's header auto-detection covers gzip and zlib ("deflate") */
    *ok = false;
    return ENC_IDENTITY;
}

/* api_req_t's query parameter getter; MHD keeps the decoded arguments for the connection. */
static const char *get_param(void *transport, const char *name)
{
    return MHD_lookup_connection_value(transport, MHD_GET_ARGUMENT_KIND, name);
}

static void fill_req(const struct req *r, const char *method, api_req_t *areq)
{
    memset(areq, 0, sizeof *areq);
    areq->method = method;
    areq->path = r->path;
    areq->authorization =
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    areq->content_type =
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    areq->origin = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");
    areq->acr_method =
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Access-Control-Request-Method");
    areq->acr_headers =
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    areq->sent_at = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "SentAt");
    areq->host = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    areq->now_ms = r->now_ms;
    areq->arrived_mono_ms = r->mono_ms;
    areq->param = get_param;
    areq->transport = r->conn;
    areq->client_ip = r->h->context_ip && r->client_ip[0] != '\0' ? r->client_ip : NULL;
    areq->request_id = r->rid;
}

/* Marks the request's refusal for the quarantine (q_record), e.g. the body over the byte cap. */
static void q_mark(struct req *r, const char *reason, const char *error)
{
    r->q_reason = reason;
    r->q_error = error;
}

/* Counts body bytes and, when the refusal is to be recorded, keeps the first ones. */
static void q_keep(struct req *r, const char *data, size_t n)
{
    r->q_seen += n;
    if (n == 0 || r->q_reason == NULL || r->q_len >= QUARANTINE_REQUEST_BYTES)
        return;
    if (r->q_head == NULL && (r->q_head = malloc(QUARANTINE_REQUEST_BYTES)) == NULL)
        return;
    size_t take = n < QUARANTINE_REQUEST_BYTES - r->q_len ? n : QUARANTINE_REQUEST_BYTES - r->q_len;
    memcpy(r->q_head + r->q_len, data, take);
    r->q_len += take;
}

/* Records a marked refusal once (api_refused_request: counted by reason, quarantined). */
static void q_record(struct req *r, const char *body, size_t len)
{
    api_req_t areq;

    if (r->q_reason == NULL)
        return;
    fill_req(r, r->method, &areq);
    if (body == NULL) {
        body = r->q_head;
        len = r->q_len;
    }
    api_refused_request(r->h->api, &areq, r->q_reason, r->q_error, body, len,
                        r->q_seen > r->q_declared ? r->q_seen : r->q_declared);
    r->q_reason = NULL;
}

/* Gives r its request id (the client's, if safe, else a new one) and stamps it on log lines. */
static void start_request_id(http_t *h, struct req *r)
{
    const char *theirs = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Request-Id");

    if (safe_request_id(theirs))
        snprintf(r->rid, sizeof r->rid, "%s", theirs);
    else
        http_new_request_id(h, r->rid);
    logging_set_request_id(r->rid);
    if (r->c != NULL) {
        /* So the watchdog's 408 and log line name the same request. */
        pthread_mutex_lock(&h->wd_mu);
        memcpy(r->c->rid, r->rid, sizeof r->rid);
        pthread_mutex_unlock(&h->wd_mu);
    }
}

/* The socket peer's address or, behind a trusted proxy, the client's it forwarded; log lines of
 * the connection name both then. */
static void resolve_client(http_t *h, struct req *r)
{
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ai != NULL ? ai->client_addr : NULL;
    char client[PROXY_ADDR_LEN];

    r->client_ip[0] = '\0';
    if (sa == NULL)
        return;
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, r->client_ip,
                  sizeof r->client_ip);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, r->client_ip,
                  sizeof r->client_ip);
    if (h->proxies.n == 0 || !proxy_trusted_sa(&h->proxies, sa))
        return;
    bool found = http_forwarded_client(&h->proxies, r->conn, client);
    if (r->c != NULL) {
        /* A proxy's kept-alive connection carries many clients: this request's, or its own. */
        pthread_mutex_lock(&h->wd_mu);
        if (found)
            snprintf(r->c->peer, sizeof r->c->peer, "%s (via %s)", client, r->client_ip);
        else
            memcpy(r->c->peer, r->c->sock_peer, sizeof r->c->sock_peer);
        pthread_mutex_unlock(&h->wd_mu);
    }
    if (found)
        memcpy(r->client_ip, client, sizeof client);
}

/*
 * The target and Host (RFC 9112 3.2): HTTP/1.1 names its host once, exactly; HTTP/1.0 predates
 * Host and is served without one (as nginx and Apache do). Part of check_framing.
 */
static enum MHD_Result check_target(struct req *r, bool *done)
{
    unsigned hosts = http_header_lines(r->conn, MHD_HTTP_HEADER_HOST);
    bool http10 = r->version != NULL && strcmp(r->version, MHD_HTTP_VERSION_1_0) == 0;

    *done = true;
    if (hosts > 1)
        return refuse_error(r, 400, "more than one Host header");
    if (hosts == 0 && !http10)
        return refuse_error(r, 400, "no Host header (HTTP/1.1 requires one)");
    if (r->c != NULL && r->c->nul_in_path)
        return refuse_error(r, 400, "NUL byte (%00) in the path");
    if (r->c != NULL && r->c->bad_escape_in_path)
        return refuse_error(r, 400,
                            "bad percent-encoding in the path ('%' without two hex digits)");
    if (r->c != NULL && r->c->too_many_params) {
        char msg[96];
        snprintf(msg, sizeof msg, "too many query parameters (max %d)", HTTP_MAX_QUERY_PARAMS);
        return refuse_error(r, 414, msg);
    }
    *done = false;
    return MHD_YES;
}

/*
 * Framing and syntax a proxy in front might read differently from us (request smuggling):
 * refused, or for Content-Length beside chunked, answered and then closed (RFC 9112 6.1). What
 * cannot be read the way a proxy reads it (a cut value, a control byte, codings) is answered at
 * once and the connection closed: the body's framing is not to be trusted either. Returns MHD_YES
 * to go on with *done false, or what the handler returns with *done true.
 */
static enum MHD_Result check_framing(struct req *r, bool *done)
{
    struct MHD_Connection *conn = r->conn;
    const char *ctl;
    char msg[128];

    *done = true;
    if (http_headers_malformed(conn)) {
        r->must_close = true;
        return answer_error(r, 400, "malformed header line (blank before the colon, or folded)");
    }
    if (r->c != NULL && r->c->ctl_in_target) {
        r->must_close = true;
        return answer_error(r, 400, "blank or control byte in the request target");
    }
    if (http_head_hides_bytes(conn, r->method, r->version, r->c)) {
        r->must_close = true;
        return answer_error(r, 400, "NUL byte in the request line or a header line");
    }
    if ((ctl = http_header_ctl(conn)) != NULL) {
        r->must_close = true;
        snprintf(msg, sizeof msg, "control byte in the value of header %.64s", ctl);
        return answer_error(r, 400, msg);
    }
    if (http_content_lengths_disagree(conn))
        return answer_error(r, 400, "conflicting Content-Length headers");
    enum http_te te = http_transfer_encoding(conn);
    if (te == HTTP_TE_OTHER) {
        /* libmicrohttpd reads only chunked; any other coding it would wait on forever. */
        r->must_close = true;
        return answer_error(r, 501, "unsupported Transfer-Encoding (only chunked is, once)");
    }
    if (te == HTTP_TE_CHUNKED &&
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH))
        r->must_close = true;
    return check_target(r, done);
}

/* Behind a trusted proxy, --max-connections-per-ip counts the requests in flight of each
 * forwarded client (its connections are the proxy's). False: this one is one too many. */
static bool count_client(http_t *h, struct req *r)
{
    if (h->per_ip == NULL || r->c == NULL || !r->c->via_proxy ||
        proxy_key_text(r->client_ip, r->client_key) != 0)
        return true;
    pthread_mutex_lock(&h->wd_mu);
    r->client_counted = addrcount_take(h->per_ip, r->client_key, h->per_ip_cap);
    pthread_mutex_unlock(&h->wd_mu);
    return r->client_counted;
}

/*
 * RFC 9112 3.2.2: a server accepts the absolute form (`POST http://host/v1/track`, as a client
 * speaking to a proxy sends it) and routes its path as the origin form's ("/" when it has none).
 * The authority is not compared with Host: no route depends on the host.
 */
static const char *origin_path(const char *url)
{
    size_t scheme = strncasecmp(url, "http://", 7) == 0    ? 7
                    : strncasecmp(url, "https://", 8) == 0 ? 8
                                                           : 0;
    if (scheme == 0 || url[scheme] == '\0' || url[scheme] == '/')
        return url; /* not absolute, or no authority: routed (404) as it is */
    const char *slash = strchr(url + scheme, '/');
    return slash != NULL ? slash : "/";
}

/* Allocates a request's state on the first call; NULL when out of memory. */
static struct req *new_req(http_t *h, struct MHD_Connection *conn, const char *url,
                           const char *method)
{
    struct req *r = calloc(1, sizeof *r);

    if (r == NULL)
        return NULL;
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r);
        return NULL;
    }
    r->h = h;
    r->conn = conn;
    r->method = method;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    r->c = ci != NULL ? ci->socket_context : NULL;
    r->now_ms = clk_wall_ms();
    r->mono_ms = clk_mono_ms();
    r->start_ns = clk_mono_ns();
    /* MHD splits the query off before it unescapes the path, so a '?' left here is a %3F of
     * the path itself (a messageId holding one, GET /v1/events/{id}): kept. */
    r->path = origin_path(url);
    return r;
}

/* First call: headers only. Early answers here make MHD skip the body and close, so refusals
 * that can wait for the body do (refuse()). */
static enum MHD_Result first_call(http_t *h, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, void **con_cls)
{
    struct req *r;
    api_req_t areq;
    api_resp_t resp;
    bool enc_ok, done;
    enum MHD_Result ret;

    r = new_req(h, conn, url, method);
    if (r == NULL)
        return MHD_NO;
    r->version = version;
    *con_cls = r;
    counter_add(h, &h->inflight, +1);
    r->counted = true;
    start_request_id(h, r);
    if (r->c != NULL && atomic_load(&r->c->deadline_ms) == DEADLINE_EXPIRED)
        return MHD_NO; /* the watchdog answered (or shed it) while MHD was still parsing */
    http_conn_head(h, r->c);
    resolve_client(h, r);

    if (atomic_load(&h->quiesced)) {
        /*
         * Counted before the check, so http_drain either saw this request or it sees the flag
         * here; uncounted again, so the stream of new arrivals answered 503 while stopping
         * does not hold the drain open (the listening socket stays open until http_stop).
         */
        r->counted = false;
        counter_add(h, &h->inflight, -1);
        return answer_error(r, 503, "server is shutting down, retry later");
    }
    ret = check_framing(r, &done);
    if (done)
        return ret;
    if (!count_client(h, r))
        return refuse_error(r, 429, "too many requests at once from this address, retry later");

    /* MHD's memory pool only stops headers far past the limit (with its own HTML 431); this
     * is the clear answer for everything between. */
    size_t hb = http_header_bytes(conn, method, url);
    if (hb > h->max_header_bytes) {
        char msg[128];
        snprintf(msg, sizeof msg, "request headers too large (%zu bytes; max %zu)", hb,
                 h->max_header_bytes);
        return refuse_error(r, 431, msg);
    }

    fill_req(r, method, &areq);
    memset(&resp, 0, sizeof resp);
    if (api_check_headers(h->api, &areq, &resp) == API_DONE)
        return resp.status >= 400 ? refuse(r, &resp) : answer(r, &resp);

    const char *cl =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl != NULL) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(cl, &end, 10);
        /* MHD has already rejected a malformed Content-Length; be strict anyway. */
        if (errno != 0 || end == cl || n > API_MAX_REQUEST_BYTES) {
            r->q_declared = errno == 0 ? n : 0;
            q_mark(r, API_REASON_REQUEST_TOO_LARGE, TOO_LARGE_MSG);
            too_large(&resp);
            transport_headers(r, &resp);
            return refuse(r, &resp);
        }
        r->cap = (size_t)n; /* a hint for the first allocation */
    }

    r->enc = parse_encoding(
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_ENCODING),
        &enc_ok);
    if (!enc_ok) {
        q_mark(r, API_REASON_BAD_ENCODING, "unsupported Content-Encoding (use gzip or none)");
        return refuse_error(r, 400, "unsupported Content-Encoding (use gzip or none)");
    }
    return MHD_YES;
}

/* Grows r's buffer to hold `need` bytes, within --max-body-memory. Returns 0, 1 when the budget
 * is spent (the request is then refused with 503 after its body), or -1 out of memory. */
static int grow_body(struct req *r, size_t need)
{
    size_t ncap = r->body == NULL && r->cap >= need ? r->cap : 16 * 1024;

    while (ncap < need)
        ncap *= 2;
    if (ncap > API_MAX_REQUEST_BYTES)
        ncap = API_MAX_REQUEST_BYTES;
    if (ncap + 1 > r->reserved && !budget_take(r->h, ncap + 1 - r->reserved))
        return 1;
    if (ncap + 1 > r->reserved)
        r->reserved = ncap + 1;
    char *nb = realloc(r->body, ncap + 1);
    if (nb == NULL)
        return -1;
    r->body = nb;
    r->cap = ncap;
    return 0;
}

/* Bodies over --max-body-memory: what a server that has to buffer bodies before it can check
 * their key answers to a flood of them, instead of growing until the OOM killer comes. */
static enum MHD_Result over_budget(struct req *r)
{
    api_resp_t resp;

    /* At most one line a second: a flood would otherwise write one per request. */
    int64_t now = clk_mono_ms();
    int64_t last = atomic_load(&r->h->budget_warned_ms);
    if (now - last >= 1000 && atomic_compare_exchange_strong(&r->h->budget_warned_ms, &last, now))
        LOG_WARN("http: request bodies buffered reach --max-body-memory (%" PRIu64
                 " bytes); answering 503 (logged at most once a second)",
                 r->h->body_budget);
    memset(&resp, 0, sizeof resp);
    api_error(&resp, 503, "server busy (request body memory exhausted), retry later");
    transport_headers(r, &resp);
    return linger(r, &resp); /* the body is coming already, invited or not */
}

/* A piece of the body: buffer it, or drop it once past the cap or refused. */
static enum MHD_Result body_chunk(struct req *r, const char *data, size_t *size)
{
    size_t n = *size;

    *size = 0; /* always consumed: MHD would otherwise call again with the same bytes */
    if (r->phase == PH_BODY && n > API_MAX_REQUEST_BYTES - r->len) {
        q_mark(r, API_REASON_REQUEST_TOO_LARGE, TOO_LARGE_MSG);
        q_keep(r, r->body, r->len);
        free(r->body);
        r->body = NULL;
        budget_give(r->h, r);
        r->len = r->cap = 0;
        r->phase = PH_DISCARD;
    }
    if (r->phase == PH_DISCARD) {
        q_keep(r, data, n);
        r->discarded += n;
        return r->discarded > LINGER_MAX_BYTES ? MHD_NO : MHD_YES;
    }
    if (r->body == NULL || r->len + n > r->cap) {
        int rc = grow_body(r, r->len + n);
        if (rc < 0)
            return MHD_NO;
        if (rc > 0) {
            r->discarded = n;
            return over_budget(r);
        }
    }
    memcpy(r->body + r->len, data, n);
    r->len += n;
    r->body[r->len] = '\0';
    return MHD_YES;
}

/* api_handle behind the gate: after http_drain no call reaches a closing store. */
static int call_api(http_t *h, struct req *r, const api_req_t *areq, api_resp_t *resp)
{
    int outcome;

    pthread_rwlock_rdlock(&h->gate);
    if (h->gate_closed) {
        api_error(resp, 503, "server is shutting down, retry later");
        outcome = API_DONE;
    } else {
        outcome = api_handle(h->api, areq, resp, on_done, r);
    }
    pthread_rwlock_unlock(&h->gate);
    return outcome;
}

/* Resets r's pending state and calls api_handle again for a retry outcome. */
static int retry_api(http_t *h, struct req *r, const char *method, api_req_t *areq,
                     api_resp_t *resp)
{
    pthread_mutex_lock(&r->mu);
    free(r->resp.body);
    memset(&r->resp, 0, sizeof r->resp);
    r->done = false;
    r->parked = false;
    pthread_mutex_unlock(&r->mu);
    fill_req(r, method, areq);
    memset(resp, 0, sizeof *resp);
    r->phase = PH_PENDING;
    return call_api(h, r, areq, resp);
}

/*
 * After api_handle: answers, or parks the connection until on_done. A retry
 * outcome (API_RETRY_STATUS, from a long-poll) runs api_handle again here, on
 * this HTTP thread, with the same request: the api decides afresh whether
 * records are there, the deadline passed, or it must wait once more. The body
 * of such a request is gone by then, which is fine: only GET routes long-poll.
 */
static enum MHD_Result settle(http_t *h, struct req *r, const char *method, int outcome,
                              api_resp_t *resp)
{
    api_req_t areq;

    for (;;) {
        if (outcome != API_PENDING) {
            r->phase = PH_BODY;
            return answer(r, resp);
        }
        pthread_mutex_lock(&r->mu);
        if (!r->done) {
            /* Suspend under r->mu so on_done either sees `parked` and resumes after
             * this, or ran before and we answer below: never a resume before a suspend. */
            counter_add(h, &h->suspended, +1);
            MHD_suspend_connection(r->conn);
            r->parked = true;
            pthread_mutex_unlock(&r->mu);
            return MHD_YES;
        }
        pthread_mutex_unlock(&r->mu);
        if (r->resp.status != API_RETRY_STATUS)
            return answer(r, &r->resp);
        /* The wait is over already (on_done ran before we could park): handle it again. */
        outcome = retry_api(h, r, method, &areq, resp);
    }
}

/* Final call: the whole body is here. */
static enum MHD_Result final_call(http_t *h, struct req *r, const char *method)
{
    api_req_t areq;
    api_resp_t resp;
    char *inflated = NULL;
    size_t ilen = 0;
    int outcome;

    /* The whole request is here: from now on only the idle timeout applies. */
    if (!http_conn_disarm(r->c))
        return MHD_NO;
    if (r->phase == PH_DISCARD) {
        q_record(r, NULL, 0);
        if (r->has_early) {
            r->has_early = false;
            return answer(r, &r->early);
        }
        return answer_too_large(r);
    }

    fill_req(r, method, &areq);
    areq.body = r->body;
    areq.body_len = r->len;
    if (r->enc == ENC_GZIP) {
        int grc = gzip_inflate(r->body, r->len, API_MAX_REQUEST_BYTES, &inflated, &ilen);
        r->q_seen = r->len;
        switch (grc) {
        case GZIP_OK:
            break;
        case GZIP_TOO_LARGE:
            q_mark(r, API_REASON_REQUEST_TOO_LARGE, TOO_LARGE_MSG);
            q_record(r, r->body, r->len);
            return answer_too_large(r);
        case GZIP_RATIO: {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "request body too large: gzip expands more than %d to 1 (a decompression "
                     "bomb; max %d bytes after decompression)",
                     GZIP_MAX_RATIO, API_MAX_REQUEST_BYTES);
            q_mark(r, API_REASON_REQUEST_TOO_LARGE, msg); /* recorded at once: msg lives */
            q_record(r, r->body, r->len);
            return answer_error(r, 400, msg);
        }
        case GZIP_NOMEM:
            return answer_error(r, 503, "server out of memory, retry later");
        default:
            q_mark(r, API_REASON_BAD_ENCODING, "invalid gzip body");
            q_record(r, r->body, r->len);
            return answer_error(r, 400, "invalid gzip body");
        }
        areq.body = inflated;
        areq.body_len = ilen;
    }

    memset(&resp, 0, sizeof resp);
    r->phase = PH_PENDING; /* before the call: on_done may run before api_handle returns */
    outcome = call_api(h, r, &areq, &resp);

    /* The api copied what it needs; the bodies were only borrowed for the call. */
    free(inflated);
    free(r->body);
    r->body = NULL;
    budget_give(h, r);
    r->len = r->cap = 0;

    return settle(h, r, method, outcome, &resp);
}

static enum MHD_Result dispatch(http_t *h, struct MHD_Connection *conn, const char *url,
                                const char *method, const char *version, const char *upload_data,
                                size_t *upload_data_size, void **con_cls)
{
    struct req *r = *con_cls;

    if (r == NULL)
        return first_call(h, conn, url, method, version, con_cls);
    logging_set_request_id(r->rid);

    if (r->phase == PH_PENDING) {
        /* Called again after MHD_resume_connection: on_done has filled r->resp. */
        pthread_mutex_lock(&r->mu);
        bool done = r->done;
        pthread_mutex_unlock(&r->mu);
        if (!done)
            return MHD_YES; /* spurious; stay pending */
        if (r->resp.status != API_RETRY_STATUS)
            return answer(r, &r->resp);
        api_req_t areq;
        api_resp_t resp;
        int outcome = retry_api(h, r, method, &areq, &resp);
        return settle(h, r, method, outcome, &resp);
    }
    if (r->phase == PH_ANSWERED)
        return MHD_YES;
    if (r->c != NULL && atomic_load(&r->c->deadline_ms) == DEADLINE_EXPIRED)
        return MHD_NO; /* too slow: the watchdog answered 408 */
    if (*upload_data_size > 0) {
        if (r->c != NULL)
            atomic_fetch_add(&r->c->body_bytes, *upload_data_size);
        return body_chunk(r, upload_data, upload_data_size);
    }
    return final_call(h, r, method);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    enum MHD_Result ret;

    ret = dispatch(cls, conn, url, method, version, upload_data, upload_data_size, con_cls);
    /* This thread serves other connections next; their lines must not carry this id. */
    logging_set_request_id(NULL);
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    http_t *h = cls;
    struct req *r = *con_cls;

    (void)conn;
    if (r == NULL)
        return;
    logging_set_request_id(r->rid);
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        LOG_DEBUG("http: %.200s request ended early (code %d)", r->path, (int)toe);
    logging_set_request_id(NULL);
    /* The next request on this keep-alive connection gets the whole timeout again. */
    if (r->c != NULL) {
        pthread_mutex_lock(&h->wd_mu);
        r->c->rid[0] = '\0';
        r->c->reused = true;
        r->c->early_status = 0;
        memcpy(r->c->peer, r->c->sock_peer, sizeof r->c->sock_peer);
        pthread_mutex_unlock(&h->wd_mu);
        http_conn_arm(h, r->c);
    }
    if (r->client_counted) {
        pthread_mutex_lock(&h->wd_mu);
        addrcount_give(h->per_ip, r->client_key);
        pthread_mutex_unlock(&h->wd_mu);
    }
    *con_cls = NULL;
    free(r->resp.body);
    free(r->early.body);
    free(r->body);
    free(r->q_head);
    budget_give(h, r);
    pthread_mutex_destroy(&r->mu);
    bool counted = r->counted;
    free(r);
    if (counted)
        counter_add(h, &h->inflight, -1);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[1024];

    (void)cls;
    vsnprintf(msg, sizeof msg, fmt, ap);
    /*
     * What one client did to its own connection (hung up mid-request, was cut by the request
     * timeout or a cap) is no operator's business: a slowloris flood would otherwise write a
     * warning per connection; so would a scan of TLS versions and suites the server refuses
     * (libmicrohttpd says "handshake" for each). Everything else libmicrohttpd reports stays a
     * warning.
     */
    static const char *const client_side[] = {"closed when reading request",
                                              "closed by remote",
                                              "Connection reset",
                                              "connection limit",
                                              "Server reached connection limit",
                                              "too many connections",
                                              "timed out",
                                              "handshake"};
    for (size_t i = 0; i < sizeof client_side / sizeof client_side[0]; i++) {
        if (strcasestr(msg, client_side[i]) != NULL) {
            LOG_DEBUG("http: %s", msg);
            return;
        }
    }
    LOG_WARN("http: %s", msg);
}

/* Fills `ss` for cfg's host and port; sets *v6. Returns 0 or -1. */
static int resolve(const config_t *cfg, struct sockaddr_storage *ss, bool *v6, char *errbuf,
                   size_t errlen)
{
    memset(ss, 0, sizeof *ss);
    *v6 = false;
    if (strchr(cfg->listen_host, ':') != NULL) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
        if (inet_pton(AF_INET6, cfg->listen_host, &s6->sin6_addr) != 1)
            goto bad;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(cfg->listen_port);
        *v6 = true;
        return 0;
    }
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    if (inet_pton(AF_INET, cfg->listen_host, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons(cfg->listen_port);
        return 0;
    }
    /* A name such as "localhost": take its first address. */
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(cfg->listen_host, NULL, &hints, &ai) != 0 || ai == NULL)
        goto bad;
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    if (ai->ai_family == AF_INET6) {
        ((struct sockaddr_in6 *)ss)->sin6_port = htons(cfg->listen_port);
        *v6 = true;
    } else {
        ((struct sockaddr_in *)ss)->sin_port = htons(cfg->listen_port);
    }
    freeaddrinfo(ai);
    return 0;
bad:
    errbuf_printf(errbuf, errlen, "cannot resolve listen host \"%s\"", cfg->listen_host);
    return -1;
}

/* The transport's limits from the configuration (README "Limits"). Returns 0 or -1 (no
 * memory). */
static int set_limits(http_t *h, const config_t *cfg)
{
    h->request_timeout_ms = (int64_t)cfg->request_timeout_s * 1000;
    /* The head's deadline is part of the request's, never past it. */
    h->header_timeout_ms =
        (int64_t)(cfg->header_timeout_s < cfg->request_timeout_s ? cfg->header_timeout_s
                                                                 : cfg->request_timeout_s) *
        1000;
    h->min_body_rate = cfg->min_body_rate;
    h->max_header_bytes = (size_t)cfg->max_header_bytes;
    h->proxies = cfg->proxies;
    h->context_ip = !cfg->no_context_ip;
    h->body_budget = cfg->max_body_memory;
    atomic_init(&h->body_used, 0);
    atomic_init(&h->budget_warned_ms, INT64_MIN / 2);
    unsigned reserve = cfg->max_connections / SHED_RESERVE_DIV;
    h->shed_at = cfg->max_connections - (reserve > 0 ? reserve : 1);
    if (h->shed_at < 2)
        h->shed_at = 0; /* a handful of connections: nothing to shed for */
    /* Counted here, not by libmicrohttpd's own cap, so that connections from trusted proxies
     * are not counted as one client: their requests count under the client they forward. One
     * entry per connection at most. */
    h->per_ip_cap = cfg->max_connections_per_ip;
    if (h->per_ip_cap > 0 && addrcount_new(cfg->max_connections, &h->per_ip) != 0)
        return -1;
    return 0;
}

/* The locks, condition variables and request-id counter of a new http_t. */
static void init_sync(http_t *h)
{
    pthread_condattr_t ca;
    uint64_t seed;

    atomic_init(&h->quiesced, false);
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed)
        seed = (uint64_t)clk_wall_ms() ^ ((uint64_t)getpid() << 32);
    atomic_init(&h->rid_next, seed);
    pthread_mutex_init(&h->mu, NULL);
    pthread_mutex_init(&h->wd_mu, NULL);
    pthread_rwlock_init(&h->gate, NULL);
    /* Monotonic, so a clock step during shutdown cannot stretch the drain. */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    pthread_cond_init(&h->wd_cv, &ca);
    pthread_condattr_destroy(&ca);
}

/* Frees an http_t whose daemon is stopped or was never started (init_sync has run). */
static void destroy(http_t *h)
{
    http_tls_free(h);
    addrcount_free(h->per_ip);
    pthread_rwlock_destroy(&h->gate);
    pthread_cond_destroy(&h->cv);
    pthread_cond_destroy(&h->wd_cv);
    pthread_mutex_destroy(&h->mu);
    pthread_mutex_destroy(&h->wd_mu);
    free(h);
}

/* MHD_start_daemon with the transport's callbacks and limits; NULL (errno set or 0) if it fails. */
static struct MHD_Daemon *start_daemon(http_t *h, const config_t *cfg,
                                       const struct sockaddr_storage *ss, bool v6,
                                       struct MHD_OptionItem *tls_opts)
{
    /*
     * poll(), not epoll: libmicrohttpd 0.9.75's MHD_quiesce_daemon races each epoll worker
     * of a thread pool, which drops the listening socket from its own epoll set once it sees
     * the quiesced flag, and aborts the process ("Failed to remove listen FD from epoll set")
     * when the worker was first. With poll() there is no set to race on; each worker polls
     * its share of --max-connections, which costs nothing measurable at these counts.
     */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG;
    if (v6)
        flags |= MHD_USE_IPv6;
    if (h->tls)
        flags |= MHD_USE_TLS;

    /*
     * MHD keeps a connection's request line and headers in a per-connection memory pool and
     * answers 431 itself (HTML) when they do not fit. Room for twice --max-header-bytes plus
     * I/O buffers means everything up to well past the limit reaches first_call, which answers a
     * JSON 431; only far larger headers get MHD's own answer.
     */
    size_t pool_bytes = 2 * h->max_header_bytes + 16 * 1024;
    /* And room for HTTP_MAX_QUERY_PARAMS records of the query's parameters (56 bytes each on
     * 0.9.75, 64 here for alignment) beside a read buffer that takes half of what is free. */
    pool_bytes += 2 * HTTP_MAX_QUERY_PARAMS * 64;

    /* MHD treats a pool of one as an error-prone special case; one thread is just no pool. */
    unsigned pool = cfg->threads > 1 ? cfg->threads : 0;
    errno = 0;
    return MHD_start_daemon(
        flags, cfg->listen_port, NULL, NULL, on_request, h,
        /* The logger goes first, or MHD prints what it logs before it to stderr itself. */
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h, MHD_OPTION_THREAD_POOL_SIZE, pool,
        MHD_OPTION_CONNECTION_LIMIT, cfg->max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
        cfg->timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, pool_bytes, MHD_OPTION_SOCK_ADDR,
        (const struct sockaddr *)ss, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
        MHD_OPTION_NOTIFY_CONNECTION, http_conn_notify, h, MHD_OPTION_URI_LOG_CALLBACK,
        http_conn_uri, h, MHD_OPTION_ARRAY, tls_opts, MHD_OPTION_END);
}

/* Why MHD_start_daemon failed, into errbuf. */
static void listen_error(const http_t *h, const config_t *cfg, bool v6, int e, char *errbuf,
                         size_t errlen)
{
    errbuf_printf(errbuf, errlen, "cannot listen on %s%s%s:%u%s%s%s", v6 ? "[" : "",
                  cfg->listen_host, v6 ? "]" : "", (unsigned)cfg->listen_port, e != 0 ? ": " : "",
                  e != 0 ? strerror(e) : "",
                  h->tls ? " (or TLS setup failed: see the line above)" : "");
}

int http_start(const config_t *cfg, api_t *api, http_t **out, char *errbuf, size_t errlen)
{
    http_t *h = NULL;
    struct sockaddr_storage ss;
    struct MHD_OptionItem tls_opts[3];
    const union MHD_DaemonInfo *info;
    bool v6;

    *out = NULL;
    if (resolve(cfg, &ss, &v6, errbuf, errlen) != 0)
        return -1;
    h = calloc(1, sizeof *h);
    if (h == NULL) {
        errbuf_printf(errbuf, errlen, "out of memory");
        return -1;
    }
    h->api = api;
    h->listen_fd = MHD_INVALID_SOCKET;
    init_sync(h);
    if (set_limits(h, cfg) != 0) {
        errbuf_printf(errbuf, errlen, "out of memory");
        goto fail;
    }
    if (http_tls_load(h, cfg, tls_opts, errbuf, errlen) != 0)
        goto fail;
    h->daemon = start_daemon(h, cfg, &ss, v6, tls_opts);
    if (h->daemon == NULL) {
        listen_error(h, cfg, v6, errno, errbuf, errlen);
        goto fail;
    }
    if (http_watchdog_start(h) != 0) {
        errbuf_printf(errbuf, errlen, "cannot start the request-timeout watchdog thread");
        MHD_stop_daemon(h->daemon);
        goto fail;
    }
    info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    LOG_INFO("listening on %s://%s%s%s:%u", h->tls ? "https" : "http", v6 ? "[" : "",
             cfg->listen_host, v6 ? "]" : "",
             info != NULL ? (unsigned)info->port : (unsigned)cfg->listen_port);
    *out = h;
    return 0;

fail:
    destroy(h);
    return -1;
}

void http_quiesce(http_t *h)
{
    if (h == NULL || atomic_exchange(&h->quiesced, true))
        return;
    /* Long-polls would otherwise hold the drain for up to their whole wait. */
    api_quiesce(h->api);
    /*
     * Stop accepting: a connection the daemon took in after this point could be cut by
     * MHD_stop_daemon mid-request (libmicrohttpd may have sent its 100 Continue already).
     * Needs MHD_USE_ITC, which MHD_ALLOW_SUSPEND_RESUME includes. Safe because the daemon
     * polls with poll(), not epoll (see http_start).
     */
    h->listen_fd = MHD_quiesce_daemon(h->daemon);
    if (h->listen_fd == MHD_INVALID_SOCKET)
        LOG_WARN("http: could not stop accepting connections (quiesce failed)");
}

unsigned http_drain(http_t *h, int timeout_ms)
{
    unsigned left;

    if (h == NULL)
        return 0;
    left = counter_wait_zero(h, &h->inflight, timeout_ms < 0 ? 0 : timeout_ms);
    /* Requests still uploading get a 503 instead of reaching a closing store.
     * Taking the write lock also waits out any api_handle() in progress. */
    pthread_rwlock_wrlock(&h->gate);
    h->gate_closed = true;
    pthread_rwlock_unlock(&h->gate);
    return left;
}

void http_stop(http_t *h)
{
    if (h == NULL)
        return;
    /*
     * MHD_stop_daemon aborts the process if a connection is still suspended.
     * Every parked request is resumed by its done callback, which commit_close
     * guarantees; wait for the stragglers rather than race them.
     */
    unsigned parked = counter_wait_zero(h, &h->suspended, STOP_WAIT_MS);
    if (parked == 0) {
        /* Resumed is not answered: a worker thread still has to send each response (the
         * edge's 503s after its drain, say). Until their completion callbacks have run,
         * MHD_stop_daemon would close those connections with nothing sent. */
        unsigned unsent = counter_wait_zero(h, &h->inflight, STOP_WAIT_MS);
        if (unsent > 0)
            LOG_WARN("http: %u answers not sent after %d ms; closing their connections", unsent,
                     STOP_WAIT_MS);
    }
    http_watchdog_stop(h);
    if (parked > 0) {
        LOG_ERROR("http: %u requests still wait for storage; leaving the daemon running", parked);
        return; /* leaked on purpose: the process is about to exit */
    }
    /* Closes every connection; each one's state goes in its close notification. */
    MHD_stop_daemon(h->daemon);
    if (h->listen_fd != MHD_INVALID_SOCKET)
        close(h->listen_fd);
    destroy(h);
}
