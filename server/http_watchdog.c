/* http_watchdog: the thread that answers or closes connections past their deadline. */
#include "server/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "server/logging.h"

/*
 * DESIGN. libmicrohttpd's own timeout counts idle time only, so a client that trickles a byte a
 * second could hold a connection for ever. Each connection therefore carries a deadline (struct
 * conn, armed and moved by http_conn.c); this thread wakes every WATCHDOG_TICK_MS, walks
 * http.conns under wd_mu and expires those past it, or whose body is slower than
 * --min-body-rate. One compare-and-swap on the deadline (to DEADLINE_EXPIRED) decides whether
 * the watchdog or the request handler answers, never both. Over plain HTTP the watchdog writes
 * the 408 to the socket itself (send_raw: MHD cannot queue a response mid-request), then shuts
 * the connection down and leaves the rest to MHD.
 *
 * Functions: send_raw, expire, too_slow, watchdog_main, http_watchdog_start, http_watchdog_stop.
 */

/* Writes resp to c's socket behind libmicrohttpd's back (see expire). Best effort, never
 * blocking: a client that does not read gets the close alone. */
static void send_raw(http_t *h, struct conn *c, api_resp_t *resp, const char *rid)
{
    char head[320];

    (void)api_resp_add_request_id(resp, rid);
    if (resp->body == NULL)
        return;
    const char *reason = MHD_get_reason_phrase_for((unsigned)resp->status);
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nX-Request-Id: %s\r\n%s"
                     "Content-Length: %zu\r\n\r\n",
                     resp->status, reason != NULL && reason[0] ? reason : "Error", rid,
                     resp->status == 503 ? "Retry-After: 1\r\n" : "", resp->body_len);
    struct iovec iov[2] = {{head, (size_t)n}, {resp->body, resp->body_len}};
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = iov;
    mh.msg_iovlen = 2;
    (void)sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    api_count_response(h->api, resp->status);
}

/*
 * Answers an overdue request and ends its connection; runs on the watchdog with wd_mu held.
 * MHD 0.9.75 cannot queue a response while headers or a body are still arriving, so over plain
 * HTTP the 408 is written to the socket here: nothing else writes to it at this point (the
 * handler lost the compare-and-swap, and MHD sends nothing before the request is complete).
 * Over TLS the bytes would have to go through the TLS session MHD owns: the connection is only
 * closed; so is an idle kept-alive one (see `answer`). shutdown() (not close) leaves the fd to MHD,
 * which sees the end and cleans up.
 */
static void expire(http_t *h, struct conn *c, bool slow_body)
{
    char rid[REQID_MAX + 1];
    char msg[128];
    api_resp_t resp;
    bool answer = !h->tls;
    int64_t head_ms = atomic_load(&c->head_ms);

    if (c->reused && c->rid[0] == '\0') {
        /* Usually just an idle keep-alive connection: not worth an INFO line each. And no 408:
         * unasked, it could be read as the answer to a request the client sends right now. */
        LOGGING_DEBUG("http: kept-alive connection from %s has no complete next request within "
                      "%" PRId64 "s (--request-timeout); closing",
                      c->peer, h->request_timeout_ms / 1000);
        shutdown(c->fd, SHUT_RDWR);
        return;
    }
    if (c->rid[0] != '\0')
        memcpy(rid, c->rid, sizeof rid);
    else
        http_new_request_id(h, rid); /* its headers never completed: a request all the same */
    memset(&resp, 0, sizeof resp);
    const char *flag = "--request-timeout";
    if (c->early_status != 0) {
        flag = "lingering close";
        /* A refusal waiting for the rest of its body (lingering close): it goes now. */
        snprintf(msg, sizeof msg, "the rest of a refused request's body took longer than %ds",
                 LINGER_MAX_MS / 1000);
        resp.status = c->early_status;
        resp.content_type = "application/json";
        resp.body = strdup(c->early_body);
        resp.body_len = resp.body != NULL ? strlen(resp.body) : 0;
    } else {
        if (slow_body)
            flag = "--min-body-rate";
        else if (head_ms == 0 && h->header_timeout_ms < h->request_timeout_ms)
            flag = "--header-timeout";
        if (slow_body)
            snprintf(msg, sizeof msg,
                     "request body slower than %" PRIu64 " bytes/s (minimum "
                     "body rate)",
                     h->min_body_rate);
        else if (head_ms == 0 && h->header_timeout_ms < h->request_timeout_ms)
            snprintf(msg, sizeof msg,
                     "request head not complete within %" PRId64 "s (header "
                     "timeout)",
                     h->header_timeout_ms / 1000);
        else
            snprintf(msg, sizeof msg, "request not complete within %" PRId64 "s (request timeout)",
                     h->request_timeout_ms / 1000);
        api_error(&resp, 408, msg);
    }
    logging_set_request_id(rid);
    LOGGING_INFO("http: %s from %s (%s); %s", msg, c->peer, flag, answer ? "answering" : "closing");
    logging_set_request_id(NULL);
    if (answer)
        send_raw(h, c, &resp, rid);
    free(resp.body);
    shutdown(c->fd, SHUT_RDWR);
}

/*
 * --min-body-rate: once the head is in, the body may take --header-timeout plus one second per
 * min-body-rate bytes received (Apache's mod_reqtimeout MinRate), so a body that trickles a byte
 * at a time cannot hold a connection for the whole --request-timeout.
 */
static bool too_slow(const http_t *h, struct conn *c, int64_t now)
{
    int64_t head = atomic_load(&c->head_ms);

    if (h->min_body_rate == 0 || head == 0)
        return false;
    uint64_t got = atomic_load(&c->body_bytes);
    return now > head + h->header_timeout_ms + (int64_t)(got * 1000 / h->min_body_rate);
}

/* The request-timeout watchdog: a few wake-ups a second, a walk over the open connections. */
static void *watchdog_main(void *arg)
{
    http_t *h = arg;
    struct timespec next;

    pthread_mutex_lock(&h->wd_mu);
    while (!h->wd_stop) {
        int64_t now = clk_mono_ms();
        for (struct conn *c = h->conns; c != NULL; c = c->next) {
            int64_t d = atomic_load(&c->deadline_ms);
            bool slow = d > 0 && now < d && too_slow(h, c, now);
            if (d > 0 && (now >= d || slow) &&
                atomic_compare_exchange_strong(&c->deadline_ms, &d, DEADLINE_EXPIRED))
                expire(h, c, slow);
        }
        next = clk_mono_after(WATCHDOG_TICK_MS);
        while (!h->wd_stop && pthread_cond_timedwait(&h->wd_cv, &h->wd_mu, &next) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&h->wd_mu);
    return NULL;
}

int http_watchdog_start(http_t *h)
{
    if (pthread_create(&h->wd_thread, NULL, watchdog_main, h) != 0)
        return -1;
    h->wd_running = true;
    return 0;
}

void http_watchdog_stop(http_t *h)
{
    if (!h->wd_running)
        return;
    pthread_mutex_lock(&h->wd_mu);
    h->wd_stop = true;
    pthread_cond_signal(&h->wd_cv);
    pthread_mutex_unlock(&h->wd_mu);
    pthread_join(h->wd_thread, NULL);
    h->wd_running = false;
}
