/* http_conn: connections from accept to close: deadlines, shedding, per-address counts. */
#include "server/internal.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "server/logging.h"

/*
 * DESIGN. Each connection has a struct conn (socket context) on http.conns, newest first, under
 * wd_mu. Its deadline (an atomic) is armed at accept for the head (--header-timeout), moved to
 * the request's (--request-timeout) once the head is in, moved earlier while a refused body is
 * read and dropped (lingering close), and disarmed once the request is complete; the watchdog
 * (http_watchdog.c) expires overdue ones. New connections past 7/8 of --max-connections close
 * the oldest connection without a complete head (shed_oldest).
 *
 * Functions: http_new_request_id, http_conn_disarm/arm/move/head, format_peer,
 * shed_oldest, conn_started, http_conn_notify, cut_query, scan_target, http_conn_uri.
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
        LOGGING_DEBUG("http: %u connections open; closing the oldest without a request head (%s)",
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
            LOGGING_DEBUG(
                "http: %u connections from %s already (--max-connections-per-ip); closing",
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

/*
 * libmicrohttpd 0.9.75 found the query's '?' before it calls us and parses the parameters after
 * we return, into the connection's memory pool (one record of some 56 bytes each). When they do
 * not fit it queues a 431 that it never sends (its parser goes on waiting for headers with its
 * buffer dropped) and the client gets no answer at all. So a query with too many parameters is
 * emptied here, its first byte made the NUL that ends the string libmicrohttpd is about to parse,
 * and first_call answers 414. The target lies in libmicrohttpd's read buffer, which is writable
 * (the const is the callback's signature); only on 0.9.75, whose order of steps this relies on.
 */
static void cut_query(char *query)
{
#if MHD_VERSION == 0x00097500
    query[1] = '\0';
#else
    (void)query;
#endif
}

/* The raw target's checks (struct conn); n is its length up to the first NUL. */
static void scan_target(struct conn *c, const char *uri, size_t n)
{
    size_t path = strcspn(uri, "?");
    unsigned params = 1;

    for (size_t i = 0; i + 2 < path; i++) {
        if (uri[i] == '%' && uri[i + 1] == '0' && uri[i + 2] == '0') {
            c->nul_in_path = true;
            break;
        }
    }
    /* MHD passes "%zz" on as it is, so after unescaping it could not be told from "%25zz"
     * (GET /v1/events/{messageId} answers such a path 400, not a lookup of another id). */
    for (size_t i = 0; i < path; i++)
        if (uri[i] == '%' && (i + 2 >= path || !isxdigit((unsigned char)uri[i + 1]) ||
                              !isxdigit((unsigned char)uri[i + 2])))
            c->bad_escape_in_path = true;
    /* RFC 9112 3.2: the target has no blanks or control bytes (a request line a proxy in front
     * may split elsewhere); libmicrohttpd 0.9.75 takes them as part of the path. */
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)uri[i] <= ' ' || uri[i] == 0x7f)
            c->ctl_in_target = true;
    for (size_t i = path; i < n; i++)
        params += uri[i] == '&';
    if (path < n && params > HTTP_MAX_QUERY_PARAMS) {
        c->too_many_params = true;
        cut_query(memchr(uri, '?', n)); /* libmicrohttpd's buffer, not ours: see cut_query */
    }
}

/* libmicrohttpd's URI log callback sees the request target before it is unescaped and its query
 * parsed: a %00 there would cut the path short (/stats%00.css served as /stats). Its return value
 * would become the request's context, so it returns NULL and leaves marks on the connection. */
void *http_conn_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct conn *c = ci != NULL ? ci->socket_context : NULL;

    (void)cls;
    if (c == NULL)
        return NULL;
    c->nul_in_path = false;
    c->bad_escape_in_path = false;
    c->ctl_in_target = false;
    c->too_many_params = false;
    c->raw_target = uri;
    c->raw_target_len = uri != NULL ? strlen(uri) : 0;
    if (uri != NULL)
        scan_target(c, uri, c->raw_target_len);
    return NULL;
}
