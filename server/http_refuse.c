/* http_refuse: refusals decided before the body is read (lingering close, see server/internal.h)
 * and the quarantine record of the refusals the transport decides itself. */
#include "server/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

/* `Expect: 100-continue` on HTTP/1.1, as libmicrohttpd decides whether to invite the body. */
static bool expects_continue(const struct req *r)
{
    const char *v = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);

    return v != NULL && strcasecmp(v, "100-continue") == 0 && r->version != NULL &&
           strcmp(r->version, MHD_HTTP_VERSION_1_1) == 0;
}

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
enum MHD_Result http_refuse(struct req *r, api_resp_t *resp)
{
    if (!may_linger(r)) {
        http_refuse_record(r, NULL, 0);
        return http_answer(r, resp);
    }
    return http_refuse_linger(r, resp);
}

/* Keeps resp (taking its body) as the answer to send once the body has been read and dropped. */
enum MHD_Result http_refuse_linger(struct req *r, api_resp_t *resp)
{
    if (r->c == NULL) {
        free(resp->body);
        resp->body = NULL;
        return MHD_NO;
    }
    http_request_drop_body(r);
    r->early = *resp;
    resp->body = NULL;
    r->has_early = true;
    r->phase = PH_DISCARD;
    linger_start(r->h, r);
    return MHD_YES;
}

enum MHD_Result http_refuse_error(struct req *r, int status, const char *msg)
{
    api_resp_t resp;

    memset(&resp, 0, sizeof resp);
    api_error(&resp, status, msg);
    http_answer_headers(r, &resp);
    return http_refuse(r, &resp);
}

/* Marks the request's refusal for the quarantine (http_refuse_record), e.g. the body over the byte
 * cap. */
void http_refuse_mark(struct req *r, const char *reason, const char *error)
{
    r->q_reason = reason;
    r->q_error = error;
}

/* Counts body bytes and, when the refusal is to be recorded, keeps the first ones. */
void http_refuse_keep(struct req *r, const char *data, size_t n)
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
void http_refuse_record(struct req *r, const char *body, size_t len)
{
    api_req_t areq;

    if (r->q_reason == NULL)
        return;
    http_request_fill(r, r->method, &areq);
    if (body == NULL) {
        body = r->q_head;
        len = r->q_len;
    }
    api_refused_request(r->h->api, &areq, r->q_reason, r->q_error, body, len,
                        r->q_seen > r->q_declared ? r->q_seen : r->q_declared);
    r->q_reason = NULL;
}
