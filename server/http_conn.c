/* http_conn: connections from accept to close: deadlines, the watchdog, shedding, per-address
 * counts. */
#include "server/http_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "server/logging.h"

/*
 * DESIGN. Each connection has a struct conn (socket context) on http.conns, newest first, under
 * wd_mu. Its deadline (an atomic) is armed at accept for the head (--header-timeout), moved to
 * the request's (--request-timeout) once the head is in, moved earlier while a refused body is
 * read and dropped (lingering close), and disarmed once the request is complete. The watchdog
 * thread wakes a few times a second, expires overdue connections and those whose body is below
 * --min-body-rate; a compare-and-swap on the deadline decides whether the watchdog or the
 * request handler answers, never both. New connections past 7/8 of --max-connections close the
 * oldest connection without a complete head (shed_oldest).
 *
 * Functions: http_new_request_id, http_conn_disarm/arm/move/head, format_peer,
 * shed_oldest, conn_started, http_conn_notify, http_conn_uri, send_raw, expire, too_slow,
 * http_watchdog, http_watchdog_stop.
 */

/*
 * A new request id: 16 hex digits, unique within the process. The counter starts at a random
 * value and goes through splitmix64's finaliser, a bijection on 64 bits, so distinct counts give
 * distinct ids that do not read as a sequence (nor reveal the request rate). One atomic add.
 */
void http_new_request_id(http_t *h, char out[REQID_MAX + 1])
{
    uint64_t x = atomic_fetch_add(&h->rid_next, 1);

    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    x ^= x >> 31;
    snprintf(out, REQID_MAX + 1, "%016" PRIx64, x);
}

/* Disarms the request deadline before answering. False: the watchdog expired it first. */
bool http_conn_disarm(struct conn *c)
{
    if (c == NULL)
        return true;
    int64_t d = atomic_load(&c->deadline_ms);
    while (d != DEADLINE_OFF) {
        if (d == DEADLINE_EXPIRED)
            return false;
        if (atomic_compare_exchange_weak(&c->deadline_ms, &d, DEADLINE_OFF))
            break;
    }
    return true;
}

/* Arms the deadline for the next request on a keep-alive connection (not once expired). */
void http_conn_arm(http_t *h, struct conn *c)
{
    if (c == NULL)
        return;
    int64_t d = atomic_load(&c->deadline_ms);
    c->start_ms = clk_mono_ms();
    atomic_store(&c->head_ms, 0);
    atomic_store(&c->body_bytes, 0);
    int64_t next = c->start_ms + h->request_timeout_ms;
    while (d != DEADLINE_EXPIRED && !atomic_compare_exchange_weak(&c->deadline_ms, &d, next))
        ;
}

/* Moves an armed deadline to `until` (never back from expired or disarmed). */
void http_conn_move(struct conn *c, int64_t until, bool only_earlier)
{
    int64_t d = atomic_load(&c->deadline_ms);
    while (d > 0 && (!only_earlier || until < d) &&
           !atomic_compare_exchange_weak(&c->deadline_ms, &d, until))
        ;
}

/*
 * The head is complete: from the --header-timeout deadline of a new connection to the
 * --request-timeout one of the whole request (counted from the same start), and the body's rate
 * is measured from now.
 */
void http_conn_head(http_t *h, struct conn *c)
{
    if (c == NULL)
        return;
    atomic_store(&c->head_ms, clk_mono_ms());
    http_conn_move(c, c->start_ms + h->request_timeout_ms, false);
}

/* "1.2.3.4:5678" or "[::1]:5678" for log lines; "?" when unknown. */
static void format_peer(struct MHD_Connection *conn, char *out, size_t len)
{
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ai != NULL ? ai->client_addr : NULL;
    char a[INET6_ADDRSTRLEN];

    snprintf(out, len, "?");
    if (sa != NULL && sa->sa_family == AF_INET &&
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, a, sizeof a))
        snprintf(out, len, "%s:%u", a, (unsigned)ntohs(((const struct sockaddr_in *)sa)->sin_port));
    else if (sa != NULL && sa->sa_family == AF_INET6 &&
             inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, a, sizeof a))
        snprintf(out, len, "[%s]:%u", a,
                 (unsigned)ntohs(((const struct sockaddr_in6 *)sa)->sin6_port));
}

/*
 * Makes room before --max-connections is reached, where libmicrohttpd would stop accepting and a
 * client that sends its request promptly would wait behind slowloris connections: closes the
 * oldest connection that has no complete request head (a new one still trickling its headers, or
 * a kept-alive one between requests). Runs with wd_mu held; `except` is the newcomer.
 */
static void shed_oldest(http_t *h, const struct conn *except)
{
    for (struct conn *x = h->conns_tail; x != NULL; x = x->prev) {
        int64_t d = atomic_load(&x->deadline_ms);
        if (x == except || x->shed || x->rid[0] != '\0' || d <= 0)
            continue;
        if (!atomic_compare_exchange_strong(&x->deadline_ms, &d, DEADLINE_EXPIRED))
            continue; /* its head has just come in, or the watchdog took it */
        x->shed = true;
        h->nshed++;
        LOG_DEBUG("http: %u connections open; closing the oldest without a request head (%s)",
                  h->nconns - h->nshed + 1, x->peer);
        shutdown(x->fd, SHUT_RDWR); /* MHD sees the end and closes it; see expire() */
        return;
    }
}

static void conn_started(http_t *h, struct MHD_Connection *conn, void **socket_context)
{
    const union MHD_ConnectionInfo *fi =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct conn *c = calloc(1, sizeof *c);

    if (c == NULL || fi == NULL) {
        free(c); /* no deadline for this one; the idle timeout still applies */
        return;
    }
    c->fd = fi->connect_fd;
    c->start_ms = clk_mono_ms();
    atomic_init(&c->deadline_ms, c->start_ms + h->header_timeout_ms);
    atomic_init(&c->head_ms, 0);
    atomic_init(&c->body_bytes, 0);
    format_peer(conn, c->sock_peer, sizeof c->sock_peer);
    memcpy(c->peer, c->sock_peer, sizeof c->sock_peer);
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ai != NULL ? ai->client_addr : NULL;
    bool have_key = proxy_key_sa(sa, c->ip_key) == 0;
    c->via_proxy = h->proxies.n > 0 && proxy_trusted_sa(&h->proxies, sa);
    pthread_mutex_lock(&h->wd_mu);
    if (h->per_ip != NULL && have_key && !c->via_proxy) {
        c->ip_counted = addrcount_take(h->per_ip, c->ip_key, h->per_ip_cap);
        if (!c->ip_counted) {
            /* As libmicrohttpd's own cap did: closed at once, no answer. */
            LOG_DEBUG("http: %u connections from %s already (--max-connections-per-ip); closing",
                      h->per_ip_cap, c->peer);
            atomic_store(&c->deadline_ms, DEADLINE_EXPIRED);
            shutdown(c->fd, SHUT_RDWR);
        }
    }
    c->next = h->conns;
    if (h->conns != NULL)
        h->conns->prev = c;
    else
        h->conns_tail = c;
    h->conns = c;
    h->nconns++;
    if (h->shed_at > 0 && h->nconns - h->nshed > h->shed_at)
        shed_oldest(h, c);
    pthread_mutex_unlock(&h->wd_mu);
    *socket_context = c;
}

/* Accept and close of a connection: its deadline state lives from one to the other. */
void http_conn_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                      enum MHD_ConnectionNotificationCode code)
{
    http_t *h = cls;
    struct conn *c;

    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_started(h, conn, socket_context);
        return;
    }
    /* MHD_CONNECTION_NOTIFY_CLOSED comes before MHD closes the socket, so once c is off the list
     * (under wd_mu, which the watchdog holds while it touches c->fd) the fd is never reused
     * under the watchdog's hands. */
    c = *socket_context;
    if (c == NULL)
        return;
    pthread_mutex_lock(&h->wd_mu);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        h->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    else
        h->conns_tail = c->prev;
    h->nconns--;
    if (c->shed)
        h->nshed--;
    if (c->ip_counted)
        addrcount_give(h->per_ip, c->ip_key);
    pthread_mutex_unlock(&h->wd_mu);
    *socket_context = NULL;
    free(c);
}

/* libmicrohttpd's URI log callback sees the request target before it is unescaped: a %00 there
 * would cut the path short (/stats%00.css served as /stats). Its return value would become the
 * request's context, so it returns NULL and leaves a mark on the connection instead. */
void *http_conn_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct conn *c = ci != NULL ? ci->socket_context : NULL;

    (void)cls;
    if (c != NULL && uri != NULL) {
        size_t n = strcspn(uri, "?");
        c->nul_in_path = false;
        for (size_t i = 0; i + 2 < n; i++) {
            if (uri[i] == '%' && uri[i + 1] == '0' && uri[i + 2] == '0') {
                c->nul_in_path = true;
                break;
            }
        }
    }
    return NULL;
}

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
        LOG_DEBUG("http: kept-alive connection from %s has no complete next request within "
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
    LOG_INFO("http: %s from %s (%s); %s", msg, c->peer, flag, answer ? "answering" : "closing");
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
void *http_watchdog(void *arg)
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
