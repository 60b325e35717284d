/* http: the transport's daemon: start (listen, limits, TLS), quiesce, drain and stop. The
 * requests themselves are http_request.c's, their answers http_answer.c's and http_refuse.c's
 * (server/internal.h). */
#include "server/internal.h"

#include <arpa/inet.h>
#include <errno.h>
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
#include "server/logging.h"

/* How long http_stop waits for parked requests to be answered before giving up. */
#define STOP_WAIT_MS 5000

void http_counter_add(http_t *h, unsigned *c, int delta)
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
            LOGGING_DEBUG("http: %s", msg);
            return;
        }
    }
    LOGGING_WARN("http: %s", msg);
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
        flags, cfg->listen_port, NULL, NULL, http_request_handler, h,
        /* The logger goes first, or MHD prints what it logs before it to stderr itself. */
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h, MHD_OPTION_THREAD_POOL_SIZE, pool,
        MHD_OPTION_CONNECTION_LIMIT, cfg->max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
        cfg->timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, pool_bytes, MHD_OPTION_SOCK_ADDR,
        (const struct sockaddr *)ss, MHD_OPTION_NOTIFY_COMPLETED, http_request_completed, h,
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
    LOGGING_INFO("listening on %s://%s%s%s:%u", h->tls ? "https" : "http", v6 ? "[" : "",
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
        LOGGING_WARN("http: could not stop accepting connections (quiesce failed)");
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
            LOGGING_WARN("http: %u answers not sent after %d ms; closing their connections", unsent,
                         STOP_WAIT_MS);
    }
    http_watchdog_stop(h);
    if (parked > 0) {
        LOGGING_ERROR("http: %u requests still wait for storage; leaving the daemon running",
                      parked);
        return; /* leaked on purpose: the process is about to exit */
    }
    /* Closes every connection; each one's state goes in its close notification. */
    MHD_stop_daemon(h->daemon);
    if (h->listen_fd != MHD_INVALID_SOCKET)
        close(h->listen_fd);
    destroy(h);
}
