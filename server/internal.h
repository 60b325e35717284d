/*
 * http_internal: what the files of the HTTP transport share: http.c (requests, start and stop),
 * http_conn.c (connections: deadlines, shedding, per-address counts), http_headers.c (what a
 * request head says), http_rawhead.c (bytes its parsing would hide), http_watchdog.c (the deadline
 * watchdog) and http_tls.c (the TLS set-up).
 * Not for other modules: the public interface is http.h.
 */
#ifndef INGESTD_HTTP_INTERNAL_H
#define INGESTD_HTTP_INTERNAL_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <microhttpd.h>

#include "common/clock.h"
#include "server/addrcount.h"
#include "server/http.h"
#include "server/proxy.h"

/* How often the watchdog looks for requests past --request-timeout (bounds its lateness). */
#define WATCHDOG_TICK_MS 250

/* Query parameters a request may have (414 past it). libmicrohttpd 0.9.75 keeps each in its
 * per-connection memory pool and fails to answer at all when they do not fit (http_conn_uri);
 * the pool is sized to hold this many (start_daemon). Our routes take a handful. */
#define HTTP_MAX_QUERY_PARAMS 128

/* A client's X-Request-Id is kept when it is this short and made of safe characters. */
#define REQID_MAX 64

/* Deadline states of a connection (struct conn.deadline_ms); a positive value is armed. */
#define DEADLINE_OFF     0  /* a request is being answered: no deadline */
#define DEADLINE_EXPIRED -1 /* the watchdog closed it; the handler must not answer */

/*
 * Per-connection state, from accept to close (MHD's connection notification). It carries the
 * deadline of the request on the connection: armed when the connection opens and after each
 * response, so the headers and body of the next request must arrive within --request-timeout
 * however slowly they trickle (MHD's own timeout only counts idle time), and disarmed once the
 * whole request is here. The watchdog thread expires overdue ones; a compare-and-swap on the
 * deadline decides whether the watchdog or the handler answers, never both.
 */
struct conn {
    struct conn *prev, *next; /* http.conns (newest first), under http.wd_mu */
    MHD_socket fd;
    _Atomic int64_t deadline_ms; /* CLOCK_MONOTONIC ms, or DEADLINE_OFF / DEADLINE_EXPIRED */
    int64_t start_ms;            /* when its current request could start (MHD's thread only) */
    _Atomic int64_t head_ms;     /* when the current request's head was complete; 0: not yet */
    _Atomic uint64_t body_bytes; /* body bytes of the current request so far */
    char rid[REQID_MAX + 1];     /* id of the request on it, "" before its headers are in */
    bool reused;                 /* a response was sent on it already (under wd_mu) */
    bool shed;                   /* closed to make room (under wd_mu) */
    bool nul_in_path;            /* its current request's raw path holds %00 (MHD's thread) */
    bool bad_escape_in_path;     /* ... a '%' without two hex digits after it (same) */
    bool ctl_in_target;          /* ... a control byte or blank in its raw target (same) */
    bool too_many_params;        /* ... more than HTTP_MAX_QUERY_PARAMS in its query (same) */
    const char *raw_target;      /* its current request's target in MHD's buffer (same) */
    size_t raw_target_len;       /* up to its first NUL, before MHD cut and unescaped it */
    bool via_proxy;              /* the peer is one of --trusted-proxies */
    bool ip_counted;             /* its peer address counts in http.per_ip (under wd_mu) */
    uint8_t ip_key[16];          /* the peer address (proxy_key_sa) */
    int early_status;            /* a lingering refusal's status, 0: none (under wd_mu) */
    char early_body[256];        /* and its JSON body, for the watchdog to send (under wd_mu) */
    char peer[INET6_ADDRSTRLEN + 64];     /* client address, for log lines (under wd_mu) */
    char sock_peer[INET6_ADDRSTRLEN + 8]; /* the socket's peer, "ip:port" */
};

struct http {
    struct MHD_Daemon *daemon;
    api_t *api;
    MHD_socket listen_fd; /* handed back by MHD_quiesce_daemon; ours to close after stop */
    atomic_bool quiesced;

    /* The gate keeps api_handle() calls out once http_drain has returned, so
     * the caller may close storage while connections are still open. */
    pthread_rwlock_t gate;
    bool gate_closed;

    pthread_mutex_t mu; /* guards the two counters; cv signals when they drop */
    pthread_cond_t cv;
    unsigned inflight;  /* request contexts alive (first call .. completed callback) */
    unsigned suspended; /* parked connections whose answer has not arrived yet */

    int64_t request_timeout_ms;
    int64_t header_timeout_ms;
    uint64_t min_body_rate; /* bytes/s; 0: off */
    size_t max_header_bytes;
    proxy_list_t proxies;             /* --trusted-proxies */
    bool context_ip;                  /* hand the client address to the api for context.ip */
    uint64_t body_budget;             /* --max-body-memory */
    _Atomic uint64_t body_used;       /* bytes of request bodies buffered now */
    _Atomic int64_t budget_warned_ms; /* last "--max-body-memory" warning (CLOCK_MONOTONIC) */
    bool tls;
    char *tls_cert_path, *tls_key_path; /* --tls-cert, --tls-key: read again by http_reload_tls */
    struct tls_creds *tls_retired;      /* replaced credentials, freed later (http_tls.c) */
    int64_t tls_grace_ms;               /* how long a handshake may still use replaced ones */
    _Atomic uint64_t rid_next;          /* request ids: a counter from a random start, mixed */

    /* The request-timeout watchdog and the connections it watches. */
    pthread_mutex_t wd_mu;
    pthread_cond_t wd_cv;
    bool wd_stop;
    bool wd_running;
    pthread_t wd_thread;
    struct conn *conns, *conns_tail; /* newest first; the tail is the oldest */
    unsigned nconns, nshed;          /* open, and of those closed to make room (under wd_mu) */
    unsigned shed_at;                /* open and not shed: shed one as the next arrives; 0: never */
    /* --max-connections-per-ip: connections per peer address, or behind a trusted proxy
     * requests in flight per forwarded client address (under wd_mu); NULL: no cap. */
    addrcount_t *per_ip;
    unsigned per_ip_cap;
};

/* How long the rest of a refused body may take (lingering close, see http.c). */
#define LINGER_MAX_MS 10000

/* When this share of --max-connections is open (1/SHED_RESERVE_DIV is kept free), connections
 * that have not sent a complete request head are closed, oldest first, as new ones arrive. */
#define SHED_RESERVE_DIV 8

/* A new request id (16 hex digits, unique within the process) into out. Thread-safe. */
void http_new_request_id(http_t *h, char out[REQID_MAX + 1]);

/* Disarms c's deadline before an answer. False: the watchdog expired it first (it answered).
 * NULL: true. */
bool http_conn_disarm(struct conn *c);

/* Arms c's deadline for the next request on a kept-alive connection (not once expired). */
void http_conn_arm(http_t *h, struct conn *c);

/* Moves an armed deadline to `until` (only earlier when only_earlier); never back from expired
 * or disarmed. */
void http_conn_move(struct conn *c, int64_t until, bool only_earlier);

/* The request head is complete: from the head's deadline to the request's, and the body's rate
 * is measured from now. NULL: no-op. */
void http_conn_head(http_t *h, struct conn *c);

/* MHD_OPTION_NOTIFY_CONNECTION: a connection's state from accept to close (cls: the http_t). */
void http_conn_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                      enum MHD_ConnectionNotificationCode code);

/* MHD_OPTION_URI_LOG_CALLBACK: notes the raw target on the connection (struct conn: where it is,
 * %00, bad escapes, control bytes, too many parameters); returns NULL. */
void *http_conn_uri(void *cls, const char *uri, struct MHD_Connection *conn);

/* ---- http_headers.c: what a request head's headers say ---- */

/* Request line and headers, as near as MHD lets us count them after parsing. */
size_t http_header_bytes(struct MHD_Connection *conn, const char *method, const char *url);

/*
 * Two Content-Length headers that differ: libmicrohttpd 0.9.75 takes the first. RFC 9112 6.3
 * says refuse it (the early answer closes the connection).
 */
bool http_content_lengths_disagree(struct MHD_Connection *conn);

/*
 * A header line to refuse (RFC 9112 5.1, 5.2): a name that is not a token (libmicrohttpd 0.9.75
 * keeps a blank before the colon in the name), or one unfolded from obs-folded lines.
 */
bool http_headers_malformed(struct MHD_Connection *conn);

/* Transfer-Encoding, all its lines joined (RFC 9110 5.3): none, exactly "chunked" (any case), or
 * anything else (other codings, or chunked twice, which libmicrohttpd would read as one). */
enum http_te { HTTP_TE_NONE, HTTP_TE_CHUNKED, HTTP_TE_OTHER };
enum http_te http_transfer_encoding(struct MHD_Connection *conn);

/* How many lines of header `name` (case-insensitive) the head has. */
unsigned http_header_lines(struct MHD_Connection *conn, const char *name);

/*
 * The client that a trusted proxy names in Forwarded / X-Forwarded-For (every value of each,
 * joined), into client. False when neither names one (proxy_client). Call it only for a peer in
 * --trusted-proxies.
 */
bool http_forwarded_client(const proxy_list_t *proxies, struct MHD_Connection *conn,
                           char client[PROXY_ADDR_LEN]);

/* ---- http_rawhead.c: bytes of the head that parsing would hide ---- */

/*
 * Whether a NUL inside the request line or a header line hid bytes from libmicrohttpd's parsed
 * strings (a value cut short). method and version are the access handler's; c carries the raw
 * target (http_conn_uri). Call it on the first call only. With c NULL (no connection state) only
 * what the length-aware accessor shows is checked.
 */
bool http_head_hides_bytes(struct MHD_Connection *conn, const char *method, const char *version,
                           const struct conn *c);

/* The name of the first header whose value holds a control byte (0x00-0x1f but HTAB, or 0x7f),
 * or NULL. Borrowed from libmicrohttpd: valid while the request lives. */
const char *http_header_ctl(struct MHD_Connection *conn);

/* ---- http_watchdog.c: the thread that expires connections past their deadline ---- */

/* Starts the watchdog thread. Returns 0, or -1 when the thread cannot be created. */
int http_watchdog_start(http_t *h);
/* Stops and joins it; a no-op when it is not running. */
void http_watchdog_stop(http_t *h);

/* ---- http_tls.c: the TLS set-up ---- */

/* The GnuTLS priority string of --tls-min-version (a static string). */
const char *http_tls_priority(enum config_tls_min min);

/*
 * With cfg's --tls-cert: checks that libmicrohttpd has TLS, reads and checks the certificate and
 * key (they must match), puts them in force for the certificate callback (which also has each
 * finished handshake counted in h->api by version), sets h->tls and fills opts with the options for
 * MHD_start_daemon (the callback, the priority string of
 * --tls-min-version), MHD_OPTION_END last. Without: opts[0] is MHD_OPTION_END. Returns 0, or -1
 * with the reason in errbuf; http_tls_free either way. One TLS http_t per process at a time.
 */
int http_tls_load(http_t *h, const config_t *cfg, struct MHD_OptionItem opts[3], char *errbuf,
                  size_t errlen);

/* Frees the credentials (in force and replaced) and the paths. Only once the daemon is stopped
 * or was never started. Idempotent. */
void http_tls_free(http_t *h);

#endif
