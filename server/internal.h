/*
 * internal: what the files of the HTTP transport share: http.c (the daemon: start, quiesce,
 * drain, stop), http_request.c (the access handler: one request from its head to its answer),
 * http_answer.c (queuing answers), http_refuse.c (early refusals: lingering close, quarantine),
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

/* How long the rest of a refused body may take (lingering close, see http_refuse.c). */
#define LINGER_MAX_MS 10000

/* The largest body a refusal waits for (lingering close, see http_refuse.c). */
#define LINGER_MAX_BYTES ((size_t)8 * API_MAX_REQUEST_BYTES)

/* too_large()'s sentence, for the quarantine record (static). */
#define TOO_LARGE_MSG "request body too large (max 512000 bytes)" /* API_MAX_REQUEST_BYTES */

enum encoding { ENC_IDENTITY, ENC_GZIP };

enum phase {
    PH_BODY,     /* reading the body */
    PH_DISCARD,  /* body over the cap, or refused early: reading and dropping the rest */
    PH_PENDING,  /* api_handle returned API_PENDING; waiting for on_done */
    PH_ANSWERED, /* a response is queued */
};

/* Per-request state: allocated on the first handler call, freed in http_request_completed. */
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

/* ---- http.c: the daemon ---- */

/* Adds delta to *c, one of h's request counters (inflight, suspended), under h->mu; wakes
 * http_drain and http_stop when it drops. */
void http_counter_add(http_t *h, unsigned *c, int delta);

/* ---- http_request.c: libmicrohttpd's access handler, one request from head to answer ---- */

/* MHD's access handler (cls: the http_t): the first call, each piece of body, the final call. */
enum MHD_Result http_request_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                     const char *method, const char *version,
                                     const char *upload_data, size_t *upload_data_size,
                                     void **con_cls);

/* MHD_OPTION_NOTIFY_COMPLETED: frees the request's state (cls: the http_t). */
void http_request_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                            enum MHD_RequestTerminationCode toe);

/* The api_req_t of r (method as given; no body), borrowing r's and MHD's strings. */
void http_request_fill(const struct req *r, const char *method, api_req_t *areq);

/* Frees r's body buffer and gives its bytes back to --max-body-memory. */
void http_request_drop_body(struct req *r);

/* ---- http_answer.c: queuing answers ---- */

/*
 * Queues `resp` (taking its body) on r's connection and counts it. Must run in the access
 * handler. Returns what the handler should return (MHD_NO: the watchdog answered first, or no
 * memory).
 */
enum MHD_Result http_answer(struct req *r, api_resp_t *resp);

/* The api's per-route headers for an answer the transport made itself (CORS on ingest routes). */
void http_answer_headers(struct req *r, api_resp_t *resp);

/* A JSON error made by the transport, with http_answer_headers, queued now. */
enum MHD_Result http_answer_error(struct req *r, int status, const char *msg);

/* The 400 for a body over API_MAX_REQUEST_BYTES, queued now. */
enum MHD_Result http_answer_too_large(struct req *r);

/* ---- http_refuse.c: refusals before the body, and their quarantine record ---- */

/* A refusal decided on the first call (headers only): answered after the body is read and
 * dropped when that is possible (lingering close), else at once. Takes resp's body either way. */
enum MHD_Result http_refuse(struct req *r, api_resp_t *resp);

/* http_refuse of a JSON error made by the transport (with http_answer_headers). */
enum MHD_Result http_refuse_error(struct req *r, int status, const char *msg);

/* Keeps resp (taking its body) as the answer to send once the body has been read and dropped. */
enum MHD_Result http_refuse_linger(struct req *r, api_resp_t *resp);

/* Marks r's refusal for the quarantine (reason and error: strings that outlive the record). */
void http_refuse_mark(struct req *r, const char *reason, const char *error);

/* Counts n body bytes and, when the refusal is to be recorded, keeps the first ones. */
void http_refuse_keep(struct req *r, const char *data, size_t n);

/* Records a marked refusal once (api_refused_request) with body[0..len), or with the bytes kept
 * when body is NULL; no-op when none is marked. */
void http_refuse_record(struct req *r, const char *body, size_t len);

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
