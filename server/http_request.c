/* http_request: libmicrohttpd's access handler; reads bodies, calls api/, parks connections until
 * the commit answers. Connections themselves (deadlines, shedding) are http_conn.c's. */
#include "server/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/gzip.h"
#include "server/logging.h"

/*
 * DESIGN. One request goes through libmicrohttpd's access handler several times: the first call
 * has the headers (first_call: framing and header checks, the client address, api_check_headers,
 * early refusals), then one call per piece of body (body_chunk: buffered within
 * --max-body-memory, or dropped), then the final call (final_call: gzip, api_handle, and an
 * answer now or once the group commit calls on_done, the connection suspended meanwhile).
 * Refusals decided on the first call wait for the body (lingering close, http_refuse.c);
 * answers are queued by http_answer.c. The connection around it (deadlines, shedding,
 * per-address counts) is http_conn.c's, the watchdog that expires overdue requests
 * http_watchdog.c's, the TLS set-up http_tls.c's, the reading of a request head's framing
 * headers http_headers.c's and http_rawhead.c's, and the daemon http.c's (server/internal.h).
 *
 * Functions, in order:
 *   ids             safe_request_id
 *   body budget     budget_take, budget_give, http_request_drop_body
 *   storage's call  on_done
 *   the api request parse_encoding, get_param, http_request_fill, start_request_id
 *   header checks   resolve_client, check_target, check_framing, count_client
 *   the calls       origin_path, new_req, first_call, grow_body, over_budget, body_chunk,
 *                   call_api, retry_api, settle, final_call, dispatch, http_request_handler,
 *                   http_request_completed
 */

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

void http_request_drop_body(struct req *r)
{
    free(r->body);
    r->body = NULL;
    budget_give(r->h, r);
    r->len = r->cap = 0;
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
        http_counter_add(h, &h->suspended, -1);
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

void http_request_fill(const struct req *r, const char *method, api_req_t *areq)
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
        return http_refuse_error(r, 400, "more than one Host header");
    if (hosts == 0 && !http10)
        return http_refuse_error(r, 400, "no Host header (HTTP/1.1 requires one)");
    if (r->c != NULL && r->c->nul_in_path)
        return http_refuse_error(r, 400, "NUL byte (%00) in the path");
    if (r->c != NULL && r->c->bad_escape_in_path)
        return http_refuse_error(r, 400,
                                 "bad percent-encoding in the path ('%' without two hex digits)");
    if (r->c != NULL && r->c->too_many_params) {
        char msg[96];
        snprintf(msg, sizeof msg, "too many query parameters (max %d)", HTTP_MAX_QUERY_PARAMS);
        return http_refuse_error(r, 414, msg);
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
        return http_answer_error(r, 400,
                                 "malformed header line (blank before the colon, or folded)");
    }
    if (r->c != NULL && r->c->ctl_in_target) {
        r->must_close = true;
        return http_answer_error(r, 400, "blank or control byte in the request target");
    }
    if (http_head_hides_bytes(conn, r->method, r->version, r->c)) {
        r->must_close = true;
        return http_answer_error(r, 400, "NUL byte in the request line or a header line");
    }
    if ((ctl = http_header_ctl(conn)) != NULL) {
        r->must_close = true;
        snprintf(msg, sizeof msg, "control byte in the value of header %.64s", ctl);
        return http_answer_error(r, 400, msg);
    }
    if (http_content_lengths_disagree(conn))
        return http_answer_error(r, 400, "conflicting Content-Length headers");
    enum http_te te = http_transfer_encoding(conn);
    if (te == HTTP_TE_OTHER) {
        /* libmicrohttpd reads only chunked; any other coding it would wait on forever. */
        r->must_close = true;
        return http_answer_error(r, 501, "unsupported Transfer-Encoding (only chunked is, once)");
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
 * that can wait for the body do (http_refuse()). */
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
    http_counter_add(h, &h->inflight, +1);
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
        http_counter_add(h, &h->inflight, -1);
        return http_answer_error(r, 503, "server is shutting down, retry later");
    }
    ret = check_framing(r, &done);
    if (done)
        return ret;
    if (!count_client(h, r))
        return http_refuse_error(r, 429,
                                 "too many requests at once from this address, retry later");

    /* MHD's memory pool only stops headers far past the limit (with its own HTML 431); this
     * is the clear answer for everything between. */
    size_t hb = http_header_bytes(conn, method, url);
    if (hb > h->max_header_bytes) {
        char msg[128];
        snprintf(msg, sizeof msg, "request headers too large (%zu bytes; max %zu)", hb,
                 h->max_header_bytes);
        return http_refuse_error(r, 431, msg);
    }

    http_request_fill(r, method, &areq);
    memset(&resp, 0, sizeof resp);
    if (api_check_headers(h->api, &areq, &resp) == API_DONE)
        return resp.status >= 400 ? http_refuse(r, &resp) : http_answer(r, &resp);

    const char *cl =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl != NULL) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(cl, &end, 10);
        /* MHD has already rejected a malformed Content-Length; be strict anyway. */
        if (errno != 0 || end == cl || n > API_MAX_REQUEST_BYTES) {
            r->q_declared = errno == 0 ? n : 0;
            http_refuse_mark(r, API_REASON_REQUEST_TOO_LARGE, TOO_LARGE_MSG);
            return http_refuse_error(r, 400, TOO_LARGE_MSG);
        }
        r->cap = (size_t)n; /* a hint for the first allocation */
    }

    r->enc = parse_encoding(
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_ENCODING),
        &enc_ok);
    if (!enc_ok) {
        http_refuse_mark(r, API_REASON_BAD_ENCODING,
                         "unsupported Content-Encoding (use gzip or none)");
        return http_refuse_error(r, 400, "unsupported Content-Encoding (use gzip or none)");
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
        LOGGING_WARN("http: request bodies buffered reach --max-body-memory (%" PRIu64
                     " bytes); answering 503 (logged at most once a second)",
                     r->h->body_budget);
    memset(&resp, 0, sizeof resp);
    api_error(&resp, 503, "server busy (request body memory exhausted), retry later");
    http_answer_headers(r, &resp);
    return http_refuse_linger(r, &resp); /* the body is coming already, invited or not */
}

/* A piece of the body: buffer it, or drop it once past the cap or refused. */
static enum MHD_Result body_chunk(struct req *r, const char *data, size_t *size)
{
    size_t n = *size;

    *size = 0; /* always consumed: MHD would otherwise call again with the same bytes */
    if (r->phase == PH_BODY && n > API_MAX_REQUEST_BYTES - r->len) {
        http_refuse_mark(r, API_REASON_REQUEST_TOO_LARGE, TOO_LARGE_MSG);
        http_refuse_keep(r, r->body, r->len);
        http_request_drop_body(r);
        r->phase = PH_DISCARD;
    }
    if (r->phase == PH_DISCARD) {
        http_refuse_keep(r, data, n);
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
    http_request_fill(r, method, areq);
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
            return http_answer(r, resp);
        }
        pthread_mutex_lock(&r->mu);
        if (!r->done) {
            /* Suspend under r->mu so on_done either sees `parked` and resumes after
             * this, or ran before and we answer below: never a resume before a suspend. */
            http_counter_add(h, &h->suspended, +1);
            MHD_suspend_connection(r->conn);
            r->parked = true;
            pthread_mutex_unlock(&r->mu);
            return MHD_YES;
        }
        pthread_mutex_unlock(&r->mu);
        if (r->resp.status != API_RETRY_STATUS)
            return http_answer(r, &r->resp);
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
        http_refuse_record(r, NULL, 0);
        if (r->has_early) {
            r->has_early = false;
            return http_answer(r, &r->early);
        }
        return http_answer_too_large(r);
    }

    http_request_fill(r, method, &areq);
    areq.body = r->body;
    areq.body_len = r->len;
    if (r->enc == ENC_GZIP) {
        int grc = gzip_inflate(r->body, r->len, API_MAX_REQUEST_BYTES, &inflated, &ilen);
        r->q_seen = r->len;
        switch (grc) {
        case GZIP_OK:
            break;
        case GZIP_TOO_LARGE:
            http_refuse_mark(r, API_REASON_REQUEST_TOO_LARGE, TOO_LARGE_MSG);
            http_refuse_record(r, r->body, r->len);
            return http_answer_too_large(r);
        case GZIP_RATIO: {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "request body too large: gzip expands more than %d to 1 (a decompression "
                     "bomb; max %d bytes after decompression)",
                     GZIP_MAX_RATIO, API_MAX_REQUEST_BYTES);
            http_refuse_mark(r, API_REASON_REQUEST_TOO_LARGE,
                             msg); /* recorded at once: msg lives */
            http_refuse_record(r, r->body, r->len);
            return http_answer_error(r, 400, msg);
        }
        case GZIP_NOMEM:
            return http_answer_error(r, 503, "server out of memory, retry later");
        default:
            http_refuse_mark(r, API_REASON_BAD_ENCODING, "invalid gzip body");
            http_refuse_record(r, r->body, r->len);
            return http_answer_error(r, 400, "invalid gzip body");
        }
        areq.body = inflated;
        areq.body_len = ilen;
    }

    memset(&resp, 0, sizeof resp);
    r->phase = PH_PENDING; /* before the call: on_done may run before api_handle returns */
    outcome = call_api(h, r, &areq, &resp);

    /* The api copied what it needs; the bodies were only borrowed for the call. */
    free(inflated);
    http_request_drop_body(r);

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
            return http_answer(r, &r->resp);
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

enum MHD_Result http_request_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                     const char *method, const char *version,
                                     const char *upload_data, size_t *upload_data_size,
                                     void **con_cls)
{
    enum MHD_Result ret;

    ret = dispatch(cls, conn, url, method, version, upload_data, upload_data_size, con_cls);
    /* This thread serves other connections next; their lines must not carry this id. */
    logging_set_request_id(NULL);
    return ret;
}

void http_request_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                            enum MHD_RequestTerminationCode toe)
{
    http_t *h = cls;
    struct req *r = *con_cls;

    (void)conn;
    if (r == NULL)
        return;
    logging_set_request_id(r->rid);
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        LOGGING_DEBUG("http: %.200s request ended early (code %d)", r->path, (int)toe);
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
        http_counter_add(h, &h->inflight, -1);
}
