/* ingestd-load: an HTTP load generator for ingestd (epoll, keep-alive, duplicates, --verify). */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "common/clock.h"
#include "server/progress.h"

/*
 * Why it looks like this: on a 2-core machine the generator shares the CPUs
 * with the server, so it must be cheap. One or two threads each run an epoll
 * loop over non-blocking keep-alive connections (one request in flight per
 * connection, HTTP/1.1 without pipelining); request bodies are a pre-rendered
 * event template with the messageId and userId digits written in place; the
 * latency histogram is log-bucketed (no per-request storage).
 *
 * messageIds are "<run id>-<16 hex digits of N>", with N = counter * threads +
 * thread index, and an event's bytes depend on N alone, so a duplicate is an
 * exact re-send of an earlier event. With --verify the ids each 200 answer
 * acknowledged are kept (one byte per id) and checked against the log.
 */

#define MAX_THREADS     2
#define MAX_BODY        512000u /* the server's request limit after decompression */
#define MAX_EVENT       32768u  /* the server's per-event limit */
#define MAX_BATCH       2500u
#define MAX_RUN_ID      32
#define ID_HEX          16
#define CONNECT_GIVE_UP 5000000000u /* ns of failed connects, none succeeding, before giving up */
#define MAX_RESPONSE    (1u << 20)

/* ---- options ---------------------------------------------------------------------------- */

typedef struct {
    const char *url;
    char host[256]; /* as given, without brackets */
    char port[8];
    struct sockaddr_storage addr;
    socklen_t addrlen;
    const char *write_key;
    unsigned connections, threads, batch, event_bytes, gzip_level;
    uint64_t events;   /* events to send at most (UINT64_MAX: bound by duration only) */
    uint64_t duration; /* seconds at most (0: bound by events only) */
    double dup_ratio;
    double rate; /* --rate: events/s to offer, open loop (0: closed loop, as fast as answered) */
    bool gzip, allow_remote, quiet;
    uint64_t timeout; /* seconds a request may take before it counts as an error */
    const char *verify_dir, *ingestd_bin;
    char run_id[MAX_RUN_ID + 1];
} opts_t;

static opts_t o = {.connections = 64,
                   .threads = 1,
                   .batch = 50,
                   .event_bytes = 400,
                   .gzip_level = 1,
                   .timeout = 30,
                   .ingestd_bin = "./build/ingestd"};

/* ---- statistics, shared by the workers (relaxed atomics: counters, not synchronisation) ---- */

/*
 * Latency histogram in microseconds, HDR style: values below 128 exactly, above
 * that 64 buckets per power of two (under 1.6% relative error), up to 2^47 us.
 */
#define H_LINEAR  128u
#define H_SUB     64u
#define H_BUCKETS (H_LINEAR + 40u * H_SUB)

typedef struct {
    atomic_uint_fast64_t requests, requests_ok, events_sent, events_ok;
    atomic_uint_fast64_t accepted, duplicates, rejected;
    atomic_uint_fast64_t errors, timeouts, connects, bytes_sent;
    atomic_uint_fast64_t status[600];
    atomic_uint_fast64_t hist[H_BUCKETS];
    atomic_uint_fast64_t max_us;
} stats_t;

static stats_t st;
static volatile sig_atomic_t interrupted;
static atomic_int fatal;
static char fatal_msg[1024];
static pthread_mutex_t fatal_mu = PTHREAD_MUTEX_INITIALIZER;

static unsigned h_index(uint64_t v)
{
    if (v < H_LINEAR)
        return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v); /* >= 7 */
    unsigned i = H_LINEAR + (e - 7u) * H_SUB + (unsigned)((v >> (e - 6u)) - H_SUB);
    return i < H_BUCKETS ? i : H_BUCKETS - 1;
}

/* The highest value that falls in bucket i (what HDR histograms report). */
static uint64_t h_upper(unsigned i)
{
    if (i < H_LINEAR)
        return i;
    unsigned e = (i - H_LINEAR) / H_SUB + 7u;
    uint64_t m = (i - H_LINEAR) % H_SUB + H_SUB;
    return ((m + 1) << (e - 6u)) - 1;
}

static void h_record(uint64_t us)
{
    atomic_fetch_add_explicit(&st.hist[h_index(us)], 1, memory_order_relaxed);
    uint64_t m = atomic_load_explicit(&st.max_us, memory_order_relaxed);
    while (us > m && !atomic_compare_exchange_weak_explicit(
                         &st.max_us, &m, us, memory_order_relaxed, memory_order_relaxed))
        ;
}

/* Percentiles (0..100) of a snapshot of the histogram, in milliseconds. */
static void h_percentiles(const double *pct, double *out_ms, size_t n)
{
    static uint64_t snap[H_BUCKETS];
    uint64_t total = 0;
    for (unsigned i = 0; i < H_BUCKETS; i++) {
        snap[i] = atomic_load_explicit(&st.hist[i], memory_order_relaxed);
        total += snap[i];
    }
    uint64_t max = atomic_load_explicit(&st.max_us, memory_order_relaxed);
    for (size_t k = 0; k < n; k++) {
        out_ms[k] = 0;
        if (total == 0)
            continue;
        uint64_t rank = (uint64_t)(pct[k] / 100.0 * (double)total + 0.999999);
        if (rank < 1)
            rank = 1;
        uint64_t seen = 0;
        for (unsigned i = 0; i < H_BUCKETS; i++) {
            seen += snap[i];
            if (seen >= rank) {
                uint64_t v = h_upper(i);
                out_ms[k] = (double)(v < max ? v : max) / 1e3;
                break;
            }
        }
    }
}

static uint64_t ld(atomic_uint_fast64_t *a)
{
    return atomic_load_explicit(a, memory_order_relaxed);
}

static void add(atomic_uint_fast64_t *a, uint64_t v)
{
    atomic_fetch_add_explicit(a, v, memory_order_relaxed);
}

/* Stops the run: the first reason is kept and printed (a: what, b: why, may be ""). */
static void set_fatal(const char *a, const char *b)
{
    pthread_mutex_lock(&fatal_mu);
    if (!atomic_load(&fatal)) {
        snprintf(fatal_msg, sizeof(fatal_msg), "%s%s%s", a, *b ? ": " : "", b);
        atomic_store(&fatal, 1);
    }
    pthread_mutex_unlock(&fatal_mu);
}

/* ---- request template ------------------------------------------------------------------- */

static char *ev_tmpl; /* one event; the digits at uid_at and id_at are overwritten */
static size_t ev_len, uid_at, id_at;
static char req_head[1024]; /* request line and headers up to "Content-Length: " */
static size_t req_head_len;
static const char body_open[] = "{\"batch\":[";
static const char body_close[] = "]}";

static void base64(const unsigned char *in, size_t n, char *out)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t j = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)in[i] << 16;
        if (i + 1 < n)
            v |= (unsigned)in[i + 1] << 8;
        if (i + 2 < n)
            v |= in[i + 2];
        out[j++] = t[(v >> 18) & 63];
        out[j++] = t[(v >> 12) & 63];
        out[j++] = i + 1 < n ? t[(v >> 6) & 63] : '=';
        out[j++] = i + 2 < n ? t[v & 63] : '=';
    }
    out[j] = '\0';
}

static char *put(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}

static int build_templates(void)
{
    static const char a[] = "{\"type\":\"track\",\"event\":\"Load Test\",\"userId\":\"user-";
    static const char b[] = "\",\"messageId\":\"";
    static const char c[] =
        "\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"properties\":{\"pad\":\"";
    static const char d[] =
        "\"},\"context\":{\"library\":{\"name\":\"ingestd-load\",\"version\":\"1\"}}}";
    size_t rid = strlen(o.run_id);
    size_t base = strlen(a) + 3 + strlen(b) + rid + 1 + ID_HEX + strlen(c) + strlen(d);
    size_t pad = o.event_bytes > base ? o.event_bytes - base : 0;
    ev_len = base + pad;
    ev_tmpl = malloc(ev_len + 1);
    if (!ev_tmpl)
        return -1;
    char *p = ev_tmpl;
    p = put(p, a, strlen(a));
    uid_at = (size_t)(p - ev_tmpl);
    p = put(p, "000", 3);
    p = put(p, b, strlen(b));
    p = put(p, o.run_id, rid);
    *p++ = '-';
    id_at = (size_t)(p - ev_tmpl);
    memset(p, '0', ID_HEX);
    p += ID_HEX;
    p = put(p, c, strlen(c));
    memset(p, 'x', pad);
    p += pad;
    p = put(p, d, strlen(d));
    *p = '\0';

    char cred[512], auth[700];
    int n = snprintf(cred, sizeof(cred), "%s:", o.write_key);
    base64((const unsigned char *)cred, (size_t)n, auth);
    bool v6 = strchr(o.host, ':') != NULL;
    n = snprintf(req_head, sizeof(req_head),
                 "POST /v1/batch HTTP/1.1\r\nHost: %s%s%s:%s\r\nAuthorization: Basic %s\r\n"
                 "Content-Type: application/json\r\nUser-Agent: ingestd-load\r\n%s"
                 "Content-Length: ",
                 v6 ? "[" : "", o.host, v6 ? "]" : "", o.port, auth,
                 o.gzip ? "Content-Encoding: gzip\r\n" : "");
    if (n < 0 || (size_t)n >= sizeof(req_head))
        return -1;
    req_head_len = (size_t)n;
    return 0;
}

/* Writes event number `id` into dst (ev_len bytes): the same id always gives the same bytes. */
static void render_event(char *dst, uint64_t id)
{
    static const char hex[] = "0123456789abcdef";
    memcpy(dst, ev_tmpl, ev_len);
    unsigned u = (unsigned)(id % 1000);
    dst[uid_at] = (char)('0' + u / 100);
    dst[uid_at + 1] = (char)('0' + u / 10 % 10);
    dst[uid_at + 2] = (char)('0' + u % 10);
    for (int i = ID_HEX - 1; i >= 0; i--, id >>= 4)
        dst[id_at + (size_t)i] = hex[id & 15];
}

/* ---- connections and workers ------------------------------------------------------------ */

/* C_IDLE: connected, waiting for the next scheduled send (--rate only). */
enum { C_CLOSED, C_WAIT, C_CONNECTING, C_IDLE, C_SENDING, C_READING, C_DONE };

typedef struct worker worker_t;

typedef struct {
    worker_t *w;
    int fd, state;
    uint64_t t_start, retry_at; /* ns: request sent / next connect attempt */
    char hdr[64];               /* "Content-Length" value and the blank line */
    size_t hdr_len;
    char *body; /* rendered batch */
    size_t body_len;
    unsigned char *gz; /* compressed body (--gzip) */
    size_t gz_len;
    size_t sent;   /* bytes of req_head + hdr + payload written */
    uint64_t *ids; /* counters (per worker) of the events in flight */
    unsigned nids;
    char *in; /* response bytes, NUL-terminated */
    size_t in_len, in_cap;
    bool in_idle; /* on its worker's idle stack (--rate) */
} conn_t;

struct worker {
    unsigned index;
    int ep;
    conn_t *conns;
    unsigned nconns, live;
    uint64_t quota, handed; /* events this worker may send, and has sent */
    uint64_t next_ctr;      /* new ids issued */
    uint64_t rng;
    uint8_t *acked; /* --verify: per counter, 1 once a 200 answer acknowledged it */
    size_t acked_cap;
    uint64_t failing_since; /* ns: first of the failed connects since the last success (0: none) */
    /* --rate: the next request is due at sched_next (ns); one every interval_ns on this thread.
     * Connections with nothing in flight wait on the idle stack until then. */
    uint64_t sched_next, interval_ns;
    conn_t **idle;
    unsigned nidle;
    z_stream z;
    bool z_ok;
    pthread_t th;
};

static worker_t workers[MAX_THREADS];
static char connect_what[300]; /* "cannot connect to URL" */
static uint64_t t_begin, t_deadline, t_end;
static atomic_int workers_done;

static uint64_t rnd(worker_t *w)
{
    /* xorshift64*: seeded from the run id, so a run's id choices are reproducible */
    w->rng ^= w->rng >> 12;
    w->rng ^= w->rng << 25;
    w->rng ^= w->rng >> 27;
    return w->rng * 2685821657736338717ull;
}

static void conn_close(conn_t *c, int next_state)
{
    if (c->fd >= 0) {
        epoll_ctl(c->w->ep, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->fd = -1;
    }
    if (c->state != C_DONE && next_state == C_DONE)
        c->w->live--;
    c->state = next_state;
    c->in_len = 0;
}

static void conn_error(conn_t *c, bool timeout)
{
    add(&st.errors, 1);
    if (timeout)
        add(&st.timeouts, 1);
    if (c->state == C_SENDING || c->state == C_READING) {
        add(&st.requests, 1);
        add(&st.events_sent, c->nids);
    }
    c->nids = 0;
    conn_close(c, C_WAIT);
    c->retry_at = 0; /* reconnect at once; a failed connect backs off */
}

static void conn_progress(conn_t *c);

/* Retries in 200 ms; gives the run up when no connect of this thread worked for 5 s. */
static void connect_failed(conn_t *c, int err)
{
    uint64_t t = (uint64_t)clk_mono_ns();
    conn_close(c, C_WAIT);
    c->retry_at = t + 200000000u;
    if (!c->w->failing_since)
        c->w->failing_since = t;
    else if (t - c->w->failing_since >= CONNECT_GIVE_UP)
        set_fatal(connect_what, strerror(err));
}

static void conn_connect(conn_t *c)
{
    worker_t *w = c->w;
    int fd = socket(o.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        set_fatal("socket", strerror(errno));
        conn_close(c, C_DONE);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c->fd = fd;
    if (connect(fd, (struct sockaddr *)&o.addr, o.addrlen) != 0 && errno != EINPROGRESS) {
        connect_failed(c, errno);
        return;
    }
    /* Edge-triggered for both directions: no epoll_ctl per request. */
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = c};
    if (epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        set_fatal("epoll_ctl", strerror(errno));
        conn_close(c, C_DONE);
        return;
    }
    c->state = C_CONNECTING;
    c->t_start = (uint64_t)clk_mono_ns();
}

/* Renders the next batch into c; returns false when this worker has nothing left to send. */
static bool next_request(conn_t *c)
{
    worker_t *w = c->w;
    if (interrupted || atomic_load_explicit(&fatal, memory_order_relaxed) || w->handed >= w->quota)
        return false;
    if (t_deadline && (uint64_t)clk_mono_ns() >= t_deadline)
        return false;
    uint64_t left = w->quota - w->handed;
    unsigned n = left < o.batch ? (unsigned)left : o.batch;
    char *p = c->body;
    memcpy(p, body_open, sizeof(body_open) - 1);
    p += sizeof(body_open) - 1;
    for (unsigned i = 0; i < n; i++) {
        uint64_t ctr;
        if (w->next_ctr > 0 && o.dup_ratio > 0 &&
            (double)(rnd(w) >> 11) * 0x1.0p-53 < o.dup_ratio) {
            ctr = rnd(w) % w->next_ctr; /* an exact re-send of an earlier event */
        } else {
            ctr = w->next_ctr++;
            if (o.verify_dir && ctr >= w->acked_cap) {
                size_t cap = w->acked_cap ? w->acked_cap * 2 : 1u << 16;
                uint8_t *a = realloc(w->acked, cap);
                if (!a) {
                    set_fatal("out of memory", "");
                    return false;
                }
                memset(a + w->acked_cap, 0, cap - w->acked_cap);
                w->acked = a;
                w->acked_cap = cap;
            }
        }
        c->ids[i] = ctr;
        if (i > 0)
            *p++ = ',';
        render_event(p, ctr * o.threads + w->index);
        p += ev_len;
    }
    memcpy(p, body_close, sizeof(body_close) - 1);
    p += sizeof(body_close) - 1;
    c->body_len = (size_t)(p - c->body);
    c->nids = n;
    w->handed += n;
    size_t plen = c->body_len;
    if (o.gzip) {
        deflateReset(&w->z);
        w->z.next_in = (unsigned char *)c->body;
        w->z.avail_in = (uInt)c->body_len;
        w->z.next_out = c->gz;
        w->z.avail_out = (uInt)deflateBound(&w->z, MAX_BODY);
        if (deflate(&w->z, Z_FINISH) != Z_STREAM_END) {
            set_fatal("deflate failed", "");
            return false;
        }
        c->gz_len = (size_t)(w->z.next_out - c->gz);
        plen = c->gz_len;
    }
    c->hdr_len = (size_t)snprintf(c->hdr, sizeof(c->hdr), "%zu\r\n\r\n", plen);
    c->sent = 0;
    c->in_len = 0;
    c->state = C_SENDING;
    c->t_start = (uint64_t)clk_mono_ns();
    return true;
}

/* Finds a header's value (case-insensitive name) in [h, end); NULL when absent. */
static const char *header(const char *h, const char *end, const char *name, size_t *vlen)
{
    size_t nl = strlen(name);
    for (const char *p = h; p < end;) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        if ((size_t)(eol - p) > nl && p[nl] == ':' && !strncasecmp(p, name, nl)) {
            const char *v = p + nl + 1;
            while (v < eol && (*v == ' ' || *v == '\t'))
                v++;
            const char *ve = eol;
            while (ve > v && (ve[-1] == '\r' || ve[-1] == ' '))
                ve--;
            *vlen = (size_t)(ve - v);
            return v;
        }
        p = eol + 1;
    }
    return NULL;
}

static uint64_t json_count(const char *body, const char *field)
{
    const char *p = strstr(body, field);
    return p ? strtoull(p + strlen(field), NULL, 10) : 0;
}

/* A complete response: count it, and with --verify remember which ids it acknowledged. */
static void on_response(conn_t *c, int status, const char *body)
{
    worker_t *w = c->w;
    uint64_t us = ((uint64_t)clk_mono_ns() - c->t_start) / 1000;
    h_record(us);
    add(&st.requests, 1);
    add(&st.events_sent, c->nids);
    add(&st.status[status >= 100 && status < 600 ? status : 0], 1);
    if (status != 200) {
        c->nids = 0;
        return;
    }
    add(&st.requests_ok, 1);
    add(&st.events_ok, c->nids);
    add(&st.accepted, json_count(body, "\"accepted\":"));
    add(&st.duplicates, json_count(body, "\"duplicates\":"));
    /* Rejected events (none expected: the template is valid) are not acknowledged. */
    bool rej[MAX_BATCH];
    memset(rej, 0, c->nids * sizeof(rej[0]));
    const char *r = strstr(body, "\"rejected\":[");
    for (const char *p = r; p && (p = strstr(p, "\"index\":")) != NULL;) {
        p += 8;
        /* The loop test assigns p and checks it: cppcheck reads only the first `p &&`. */
        // cppcheck-suppress nullPointerRedundantCheck
        unsigned long i = strtoul(p, NULL, 10);
        if (i < c->nids) {
            rej[i] = true;
            add(&st.rejected, 1);
        }
    }
    if (o.verify_dir) {
        for (unsigned i = 0; i < c->nids; i++)
            if (!rej[i])
                w->acked[c->ids[i]] = 1;
    }
    c->nids = 0;
}

/* Parses c->in; returns 1 when a whole response was handled, 0 if more bytes are needed. */
static int parse_response(conn_t *c, bool *close_after)
{
    char *end = strstr(c->in, "\r\n\r\n");
    if (!end)
        return c->in_len > 65536 ? -1 : 0;
    if (c->in_len < 12 || strncmp(c->in, "HTTP/1.", 7) != 0)
        return -1;
    int status = atoi(c->in + 9);
    size_t vlen;
    const char *v = header(c->in, end + 2, "Content-Length", &vlen);
    if (!v)
        return -1; /* ingestd always sends Content-Length; chunked is not spoken here */
    size_t clen = strtoull(v, NULL, 10);
    size_t need = (size_t)(end + 4 - c->in) + clen;
    if (need > MAX_RESPONSE)
        return -1;
    if (c->in_len < need)
        return 0;
    v = header(c->in, end + 2, "Connection", &vlen);
    *close_after = v && vlen == 5 && !strncasecmp(v, "close", 5);
    char saved = c->in[need];
    c->in[need] = '\0';
    on_response(c, status, end + 4);
    c->in[need] = saved;
    return c->in_len == need ? 1 : -1; /* bytes past the answer: nothing was asked for them */
}

static void conn_start(conn_t *c)
{
    if (o.rate > 0) {
        /* Open loop: the schedule, not the answer, decides when the next request goes out. */
        c->state = C_IDLE;
        c->in_len = 0;
        if (!c->in_idle) {
            c->in_idle = true;
            c->w->idle[c->w->nidle++] = c;
        }
        return;
    }
    if (next_request(c))
        conn_progress(c);
    else
        conn_close(c, C_DONE);
}

/*
 * --rate: sends every request whose time has come on an idle connection. Latency
 * counts from the scheduled time, not the send, so a server that falls behind
 * shows it in the percentiles (no coordinated omission): a request waiting for a
 * free connection is waiting for the server.
 */
static void dispatch_due(worker_t *w, uint64_t t)
{
    while (w->nidle > 0 && w->sched_next <= t) {
        conn_t *c = w->idle[--w->nidle];
        c->in_idle = false;
        if (c->state != C_IDLE)
            continue; /* closed meanwhile; it comes back when it reconnects */
        if (!next_request(c)) {
            conn_close(c, C_DONE);
            continue;
        }
        c->t_start = w->sched_next;
        w->sched_next += w->interval_ns;
        conn_progress(c);
    }
}

/* Moves c forward as far as the socket allows (edge-triggered: until EAGAIN). */
static void conn_progress(conn_t *c)
{
    if (c->state == C_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err == EINPROGRESS || err == EALREADY)
            return;
        if (err != 0) {
            connect_failed(c, err);
            return;
        }
        c->w->failing_since = 0;
        add(&st.connects, 1);
        conn_start(c);
        return;
    }
    if (c->state == C_IDLE) {
        char b[256];
        ssize_t n = read(c->fd, b, sizeof(b));
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        conn_close(c, C_WAIT); /* closed by the server (or it spoke unasked): reconnect */
        c->retry_at = 0;
        return;
    }
    while (c->state == C_SENDING) {
        const char *payload = o.gzip ? (const char *)c->gz : c->body;
        size_t plen = o.gzip ? c->gz_len : c->body_len;
        struct iovec iov[3] = {
            {(void *)req_head, req_head_len}, {c->hdr, c->hdr_len}, {(void *)payload, plen}};
        size_t skip = c->sent;
        int k = 0;
        /* While sending, sent < total: the rest always ends in iov[2], never past it. */
        while (k < 2 && skip >= iov[k].iov_len)
            skip -= iov[k++].iov_len;
        iov[k].iov_base = (char *)iov[k].iov_base + skip;
        iov[k].iov_len -= skip;
        ssize_t n = writev(c->fd, iov + k, 3 - k);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return;
            conn_error(c, false);
            return;
        }
        add(&st.bytes_sent, (uint64_t)n);
        c->sent += (size_t)n;
        if (c->sent == req_head_len + c->hdr_len + plen)
            c->state = C_READING;
    }
    while (c->state == C_READING) {
        if (c->in_cap - c->in_len < 4096) {
            size_t cap = c->in_cap * 2;
            char *p = cap <= MAX_RESPONSE * 2 ? realloc(c->in, cap + 1) : NULL;
            if (!p) {
                conn_error(c, false);
                return;
            }
            c->in = p;
            c->in_cap = cap;
        }
        ssize_t n = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (n <= 0) {
            conn_error(c, false); /* the server closed or reset with a request in flight */
            return;
        }
        c->in_len += (size_t)n;
        c->in[c->in_len] = '\0';
        bool close_after = false;
        int r = parse_response(c, &close_after);
        if (r < 0) {
            conn_error(c, false);
            return;
        }
        if (r == 0)
            continue;
        if (close_after) {
            conn_close(c, C_WAIT);
            c->retry_at = 0;
            return;
        }
        conn_start(c);
    }
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    struct epoll_event evs[64];
    uint64_t timeout_ns = o.timeout * 1000000000u;
    uint64_t last_tick = 0;

    while (w->live > 0) {
        uint64_t t = (uint64_t)clk_mono_ns();
        if (t - last_tick >= 50000000u) {
            last_tick = t;
            for (unsigned i = 0; i < w->nconns; i++) {
                conn_t *c = &w->conns[i];
                if (c->state == C_WAIT && t >= c->retry_at) {
                    if (atomic_load(&fatal) || interrupted || w->handed >= w->quota ||
                        (t_deadline && t >= t_deadline))
                        conn_close(c, C_DONE);
                    else
                        conn_connect(c);
                } else if ((c->state == C_SENDING || c->state == C_READING ||
                            c->state == C_CONNECTING) &&
                           t - c->t_start > timeout_ns) {
                    conn_error(c, true);
                } else if (c->state == C_CONNECTING && atomic_load(&fatal)) {
                    conn_close(c, C_DONE);
                }
            }
            if (o.rate > 0 && (atomic_load(&fatal) || interrupted || w->handed >= w->quota ||
                               (t_deadline && t >= t_deadline))) {
                for (unsigned i = 0; i < w->nconns; i++)
                    if (w->conns[i].state == C_IDLE)
                        conn_close(&w->conns[i], C_DONE);
            }
            if (w->live == 0)
                break;
        }
        int wait_ms = 50;
        if (o.rate > 0) {
            dispatch_due(w, t);
            if (w->nidle > 0) {
                uint64_t due = w->sched_next > t ? w->sched_next - t : 0;
                wait_ms = (int)((due + 999999) / 1000000);
                if (wait_ms > 50)
                    wait_ms = 50;
            }
        }
        int n = epoll_wait(w->ep, evs, 64, wait_ms);
        for (int i = 0; i < n; i++)
            conn_progress(evs[i].data.ptr);
    }
    atomic_fetch_add(&workers_done, 1);
    return NULL;
}

static int worker_init(worker_t *w, unsigned index, unsigned nconns, uint64_t quota)
{
    w->index = index;
    w->nconns = nconns;
    w->live = nconns;
    w->quota = quota;
    uint64_t seed = 1469598103934665603ull; /* FNV-1a of the run id and the thread */
    for (const char *p = o.run_id; *p; p++)
        seed = (seed ^ (unsigned char)*p) * 1099511628211ull;
    w->rng = (seed ^ (index + 1)) * 1099511628211ull | 1;
    w->ep = epoll_create1(EPOLL_CLOEXEC);
    w->conns = calloc(nconns, sizeof(*w->conns));
    w->idle = calloc(nconns, sizeof(*w->idle));
    if (w->ep < 0 || !w->conns || !w->idle)
        return -1;
    if (o.rate > 0) {
        /* Each thread offers its share of the rate, whole batches at even intervals. */
        w->interval_ns = (uint64_t)((double)o.batch * o.threads * 1e9 / o.rate);
        if (w->interval_ns == 0)
            w->interval_ns = 1;
        w->sched_next = t_begin + w->interval_ns * index / o.threads;
    }
    if (o.gzip) {
        if (deflateInit2(&w->z, (int)o.gzip_level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
            Z_OK)
            return -1;
        w->z_ok = true;
    }
    size_t body_cap = sizeof(body_open) + (size_t)o.batch * (ev_len + 1) + sizeof(body_close);
    for (unsigned i = 0; i < nconns; i++) {
        conn_t *c = &w->conns[i];
        c->w = w;
        c->fd = -1;
        c->state = C_WAIT;
        c->body = malloc(body_cap);
        c->ids = calloc(o.batch, sizeof(*c->ids));
        c->in_cap = 8192;
        c->in = malloc(c->in_cap + 1);
        if (o.gzip)
            c->gz = malloc(deflateBound(&w->z, MAX_BODY));
        if (!c->body || !c->ids || !c->in || (o.gzip && !c->gz))
            return -1;
    }
    return 0;
}

static void worker_free(worker_t *w)
{
    for (unsigned i = 0; w->conns && i < w->nconns; i++) {
        free(w->conns[i].body);
        free(w->conns[i].ids);
        free(w->conns[i].in);
        free(w->conns[i].gz);
    }
    free(w->conns);
    free(w->idle);
    free(w->acked);
    if (w->z_ok)
        deflateEnd(&w->z);
    if (w->ep >= 0)
        close(w->ep);
}

/* ---- verify ----------------------------------------------------------------------------- */

/*
 * Reads `ingestd log cat --data DIR` and checks: every acknowledged id of this
 * run is in the log exactly once, no id of this run is there twice, and no id
 * of this run is there that was never sent. Returns 0 when all hold, 1 on a
 * violation, -1 when the log could not be read.
 */
static int verify(uint64_t *acked_n, uint64_t *logged_n)
{
    uint8_t *seen[MAX_THREADS] = {0};
    uint64_t missing = 0, twice = 0, unknown = 0, acked = 0, logged = 0;
    int rc = -1, pfd[2] = {-1, -1}, status = 0;
    FILE *f = NULL;
    char *line = NULL;
    size_t cap = 0, rid = strlen(o.run_id);
    pid_t pid = -1;
    bool syserr = true; /* until the child runs: a failure below is a system call's */

    for (unsigned t = 0; t < o.threads; t++) {
        seen[t] = calloc(workers[t].next_ctr + 1, 1);
        if (!seen[t])
            goto out;
    }
    if (pipe(pfd) != 0)
        goto out;
    fflush(stdout);
    pid = fork();
    if (pid < 0)
        goto out;
    if (pid == 0) {
        dup2(pfd[1], STDOUT_FILENO);
        close(pfd[0]);
        close(pfd[1]);
        execl(o.ingestd_bin, o.ingestd_bin, "log", "cat", "--data", o.verify_dir, (char *)NULL);
        fprintf(stderr, "ingestd-load: cannot run %s: %s\n", o.ingestd_bin, strerror(errno));
        _exit(127);
    }
    close(pfd[1]);
    pfd[1] = -1;
    f = fdopen(pfd[0], "r");
    if (!f)
        goto out;
    pfd[0] = -1;
    syserr = false;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) >= 0) {
        const char *m = strstr(line, "\"messageId\":\"");
        if (!m)
            continue;
        m += 13;
        if (strncmp(m, o.run_id, rid) != 0 || m[rid] != '-')
            continue;
        const char *h = m + rid + 1;
        uint64_t id = 0;
        int k = 0;
        for (; k < ID_HEX && isxdigit((unsigned char)h[k]); k++)
            id = id * 16 +
                 (uint64_t)(isdigit((unsigned char)h[k]) ? h[k] - '0' : (h[k] | 0x20) - 'a' + 10);
        if (k != ID_HEX || h[k] != '"')
            continue; /* not an id this generator makes */
        logged++;
        uint64_t t = id % o.threads, ctr = id / o.threads;
        if (ctr >= workers[t].next_ctr) {
            unknown++;
            continue;
        }
        if (seen[t][ctr] < 255)
            seen[t][ctr]++;
    }
    fclose(f);
    f = NULL;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "ingestd-load: verify: `%s log cat --data %s` failed (%s %d)\n",
                o.ingestd_bin, o.verify_dir, WIFEXITED(status) ? "exit" : "signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        pid = -1;
        goto out;
    }
    pid = -1;
    for (unsigned t = 0; t < o.threads; t++) {
        for (uint64_t i = 0; i < workers[t].next_ctr; i++) {
            bool a = workers[t].acked && workers[t].acked[i];
            acked += a;
            if (a && seen[t][i] == 0)
                missing++;
            if (seen[t][i] > 1)
                twice++;
        }
    }
    *acked_n = acked;
    *logged_n = logged;
    printf("verify: %" PRIu64 " acknowledged ids, %" PRIu64 " log events of run %s; "
           "missing %" PRIu64 ", logged more than once %" PRIu64 ", never sent %" PRIu64 ": %s\n",
           acked, logged, o.run_id, missing, twice, unknown,
           missing || twice || unknown ? "VIOLATION" : "ok");
    rc = missing || twice || unknown ? 1 : 0;
out:
    if (syserr)
        fprintf(stderr, "ingestd-load: verify: %s\n", strerror(errno));
    if (f)
        fclose(f);
    if (pfd[0] >= 0)
        close(pfd[0]);
    if (pfd[1] >= 0)
        close(pfd[1]);
    if (pid > 0)
        waitpid(pid, &status, 0);
    free(line);
    for (unsigned t = 0; t < MAX_THREADS; t++)
        free(seen[t]);
    return rc;
}

/* ---- arguments -------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: ingestd-load --url http://HOST:PORT --write-key KEY [options]\n"
            "\n"
            "Posts batches of track events to POST /v1/batch over persistent HTTP/1.1\n"
            "connections (one request in flight each) and reports throughput, latency and\n"
            "answers. Stops by itself after --events or --duration, whichever comes first.\n"
            "\n"
            "  --url http://HOST:PORT  the server (default http://127.0.0.1:8080). HOST is an\n"
            "                        address or name; IPv6 as [::1]. Only loopback addresses\n"
            "                        (127.0.0.0/8, ::1) unless --allow-remote\n"
            "  --write-key KEY       write key, sent as HTTP Basic user name (required)\n"
            "  --connections N       concurrent keep-alive connections (default 64, 1..10000)\n"
            "  --threads N           epoll threads, 1 or 2 (default 1)\n"
            "  --batch N             events per request (default 50, 1..2500)\n"
            "  --event-bytes N       size of one event's JSON (default 400; at least ~%u\n"
            "                        for the fixed fields, at most 32768)\n"
            "  --events N            events to send in all, duplicates included (default\n"
            "                        1000000 when --duration is not given)\n"
            "  --duration D          stop sending after D: 30, 30s, 5m, 1h (at most 24h)\n"
            "  --rate EVENTS         open loop: offer EVENTS events/s in evenly spaced batches,\n"
            "                        whatever the answers; latency counts from each batch's\n"
            "                        scheduled time, so a server that falls behind shows it\n"
            "                        (default: closed loop, each connection sends again once\n"
            "                        answered). --connections bounds the batches in flight\n"
            "  --dup-ratio R         share of events that are exact re-sends of an earlier\n"
            "                        event (same messageId, same bytes), 0..1 (default 0)\n"
            "  --gzip                send bodies gzip-compressed (Content-Encoding: gzip)\n"
            "  --gzip-level N        zlib level 1..9 (default 1)\n"
            "  --timeout D           a request not answered within D is an error and its\n"
            "                        connection is reopened (default 30s)\n"
            "  --run-id ID           messageId prefix, [A-Za-z0-9_] up to 32 (default: random);\n"
            "                        messageIds are ID-<16 hex digits of a counter>\n"
            "  --verify DIR          after the run, read DIR's log and check every acknowledged\n"
            "                        event is there exactly once and no event of this run twice\n"
            "  --ingestd BIN         ingestd binary for --verify (`BIN log cat --data DIR`;\n"
            "                        default ./build/ingestd)\n"
            "  --allow-remote        allow a non-loopback server (only with its owner's consent)\n"
            "  --quiet               no progress line\n"
            "  --help                this text\n"
            "\n"
            "Progress: one line per second on stderr (events/s and requests/s of the last\n"
            "second, p50/p99 so far, errors = transport errors + non-200 answers).\n"
            "Result on stdout: throughput, latency p50/p90/p99/max, answers by status,\n"
            "accepted/duplicates/rejected from the 200 bodies, and a last line\n"
            "`SUMMARY key=value ...` for scripts.\n"
            "Exit: 0 done (and --verify held), 1 --verify found a violation or the run\n"
            "failed (no connection, log unreadable), 2 bad arguments.\n",
            230u);
}

static int bad(const char *opt, const char *v, const char *why)
{
    fprintf(stderr, "ingestd-load: %s%s%s: %s (see --help)\n", opt, v ? " " : "", v ? v : "", why);
    return 2;
}

static bool parse_u64(const char *v, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    if (!v || !isdigit((unsigned char)*v))
        return false;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || x < min || x > max)
        return false;
    *out = x;
    return true;
}

static bool parse_seconds(const char *v, uint64_t *out)
{
    char *end;
    if (!v || !isdigit((unsigned char)*v))
        return false;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    uint64_t mul = !*end || !strcmp(end, "s") ? 1
                   : !strcmp(end, "m")        ? 60
                   : !strcmp(end, "h")        ? 3600
                                              : 0;
    if (errno || mul == 0 || x == 0 || x > 86400 / mul)
        return false;
    *out = x * mul;
    return true;
}

static bool is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
        return (ntohl(s->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return true;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return false;
}

/* http://HOST:PORT (an optional trailing slash, nothing else); resolves into o.addr. */
static int parse_url(const char *url)
{
    if (strncmp(url, "http://", 7) != 0)
        return bad("--url", url, "must be http://HOST:PORT");
    const char *h = url + 7, *he, *p;
    if (*h == '[') {
        he = strchr(h, ']');
        if (!he || he[1] != ':')
            return bad("--url", url, "must be http://[IPV6]:PORT");
        h++;
        p = he + 2;
    } else {
        he = strchr(h, ':');
        if (!he)
            return bad("--url", url, "needs a port: http://HOST:PORT");
        p = he + 1;
    }
    if (he == h || (size_t)(he - h) >= sizeof(o.host))
        return bad("--url", url, "bad host");
    memcpy(o.host, h, (size_t)(he - h));
    o.host[he - h] = '\0';
    size_t pl = strspn(p, "0123456789");
    if (pl == 0 || pl > 5 || (p[pl] && strcmp(p + pl, "/") != 0))
        return bad("--url", url, "must be http://HOST:PORT with no path");
    memcpy(o.port, p, pl);
    o.port[pl] = '\0';
    if (atoi(o.port) < 1 || atoi(o.port) > 65535)
        return bad("--url", url, "port must be 1..65535");
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *ai = NULL;
    int e = getaddrinfo(o.host, o.port, &hints, &ai);
    if (e != 0)
        return bad("--url", url, gai_strerror(e));
    memcpy(&o.addr, ai->ai_addr, ai->ai_addrlen);
    o.addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);
    if (!o.allow_remote && !is_loopback((struct sockaddr *)&o.addr))
        return bad("--url", url,
                   "not a loopback address (127.0.0.0/8, ::1); load on other machines needs "
                   "--allow-remote and their owner's consent");
    o.url = url;
    snprintf(connect_what, sizeof(connect_what), "cannot connect to %s", url);
    return 0;
}

static int parse_args(int argc, char **argv)
{
    const char *url = "http://127.0.0.1:8080";
    bool events_set = false;
    uint64_t x;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(a, "--gzip")) {
            o.gzip = true;
            continue;
        }
        if (!strcmp(a, "--allow-remote")) {
            o.allow_remote = true;
            continue;
        }
        if (!strcmp(a, "--quiet")) {
            o.quiet = true;
            continue;
        }
        static const char *const valued[] = {
            "--url",        "--write-key",   "--connections", "--threads", "--batch",
            "--events",     "--event-bytes", "--duration",    "--timeout", "--dup-ratio",
            "--gzip-level", "--run-id",      "--verify",      "--ingestd", "--rate"};
        bool known = false;
        for (size_t k = 0; k < sizeof(valued) / sizeof(valued[0]); k++)
            known |= !strcmp(a, valued[k]);
        if (!known)
            return bad(a, NULL, "unknown option");
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        if (!v)
            return bad(a, NULL, "needs a value");
        if (!strcmp(a, "--url")) {
            url = v;
        } else if (!strcmp(a, "--write-key")) {
            if (!*v || strlen(v) > 256 || strpbrk(v, "\r\n:"))
                return bad(a, v, "must be 1..256 characters without ':' or line breaks");
            o.write_key = v;
        } else if (!strcmp(a, "--connections")) {
            if (!parse_u64(v, 1, 10000, &x))
                return bad(a, v, "must be 1..10000");
            o.connections = (unsigned)x;
        } else if (!strcmp(a, "--threads")) {
            if (!parse_u64(v, 1, MAX_THREADS, &x))
                return bad(a, v, "must be 1 or 2");
            o.threads = (unsigned)x;
        } else if (!strcmp(a, "--batch")) {
            if (!parse_u64(v, 1, MAX_BATCH, &x))
                return bad(a, v, "must be 1..2500");
            o.batch = (unsigned)x;
        } else if (!strcmp(a, "--event-bytes")) {
            if (!parse_u64(v, 1, MAX_EVENT, &x))
                return bad(a, v, "must be 1..32768");
            o.event_bytes = (unsigned)x;
        } else if (!strcmp(a, "--events")) {
            if (!parse_u64(v, 1, 1000000000000ull, &o.events))
                return bad(a, v, "must be 1..10^12");
            events_set = true;
        } else if (!strcmp(a, "--duration")) {
            if (!parse_seconds(v, &o.duration))
                return bad(a, v, "must be 1s..24h, e.g. 30s, 5m");
        } else if (!strcmp(a, "--timeout")) {
            if (!parse_seconds(v, &o.timeout))
                return bad(a, v, "must be 1s..24h, e.g. 30s");
        } else if (!strcmp(a, "--dup-ratio")) {
            char *end;
            errno = 0;
            o.dup_ratio = strtod(v, &end);
            if (errno || *end || end == v || !(o.dup_ratio >= 0 && o.dup_ratio <= 1))
                return bad(a, v, "must be 0..1");
        } else if (!strcmp(a, "--rate")) {
            char *end;
            errno = 0;
            o.rate = strtod(v, &end);
            if (errno || *end || end == v || !(o.rate >= 1 && o.rate <= 1e9))
                return bad(a, v, "must be 1..10^9 events/s");
        } else if (!strcmp(a, "--gzip-level")) {
            if (!parse_u64(v, 1, 9, &x))
                return bad(a, v, "must be 1..9");
            o.gzip_level = (unsigned)x;
        } else if (!strcmp(a, "--run-id")) {
            if (!*v || strlen(v) > MAX_RUN_ID ||
                strspn(v, "abcdefghijklmnopqrstuvwxyz"
                          "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != strlen(v))
                return bad(a, v, "must be 1..32 of [A-Za-z0-9_]");
            strcpy(o.run_id, v);
        } else if (!strcmp(a, "--verify")) {
            o.verify_dir = v;
        } else if (!strcmp(a, "--ingestd")) {
            o.ingestd_bin = v;
        } else {
            return bad(a, NULL, "unknown option");
        }
    }
    if (!o.write_key)
        return bad("--write-key", NULL, "is required");
    if (o.connections < o.threads)
        return bad("--connections", NULL, "must be at least --threads");
    if (!events_set)
        o.events = o.duration ? UINT64_MAX : 1000000;
    if ((uint64_t)o.batch * (o.event_bytes + 1) + 16 > MAX_BODY)
        return bad("--batch", NULL,
                   "times --event-bytes exceeds the server's 500 KB request limit");
    if (o.verify_dir && access(o.ingestd_bin, X_OK) != 0)
        return bad("--ingestd", o.ingestd_bin, "is not an executable (needed by --verify)");
    if (!o.run_id[0]) {
        uint64_t r = (uint64_t)clk_mono_ns() ^ ((uint64_t)getpid() << 32);
        FILE *f = fopen("/dev/urandom", "rb");
        if (f) {
            if (fread(&r, sizeof(r), 1, f) != 1)
                r ^= (uint64_t)time(NULL);
            fclose(f);
        }
        snprintf(o.run_id, sizeof(o.run_id), "ld%012" PRIx64, (uint64_t)(r & 0xffffffffffffull));
    }
    return parse_url(url);
}

/* ---- main ------------------------------------------------------------------------------- */

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1; /* stop sending; answers in flight are still waited for */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
}

static uint64_t status_errors(void)
{
    uint64_t n = 0;
    for (unsigned s = 0; s < 600; s++)
        if (s != 200)
            n += ld(&st.status[s]);
    return n;
}

/*
 * The progress of the last second: on a terminal `tty` (server/progress.h, the line the
 * ingestd tools share: percent and ETA when --events bounds the run), else one line per
 * second, which logs of long runs keep.
 */
static void progress(uint64_t *last_ev, uint64_t *last_rq, uint64_t *last_t, progress_t *tty)
{
    static const double pct[2] = {50, 99};
    double ms[2];
    char line[160];
    uint64_t t = (uint64_t)clk_mono_ns(), ev = ld(&st.events_ok), rq = ld(&st.requests);
    double dt = (double)(t - *last_t) / 1e9;
    h_percentiles(pct, ms, 2);
    uint64_t errors = ld(&st.errors) + status_errors();
    int n = snprintf(line, sizeof(line), "%8.0f events/s %6.0f req/s  p50 %7.2f ms  p99 %7.2f ms",
                     (double)(ev - *last_ev) / dt, (double)(rq - *last_rq) / dt, ms[0], ms[1]);
    if (tty) {
        snprintf(line + n, sizeof(line) - (size_t)n, "  errors %" PRIu64, errors);
        progress_update(tty, "load", ev, o.events == UINT64_MAX ? 0 : o.events, "events", line);
    } else {
        fprintf(stderr, "[%5.0fs] %s  events %" PRIu64 "  errors %" PRIu64 "\n",
                (double)(t - t_begin) / 1e9, line, ev, errors);
    }
    *last_ev = ev;
    *last_rq = rq;
    *last_t = t;
}

int main(int argc, char **argv)
{
    int rc = parse_args(argc, argv);
    if (rc != 0)
        return rc;
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    if (build_templates() != 0) {
        fprintf(stderr, "ingestd-load: out of memory\n");
        return 1;
    }

    t_begin = (uint64_t)clk_mono_ns();
    t_deadline = o.duration ? t_begin + o.duration * 1000000000u : 0;
    for (unsigned t = 0; t < o.threads; t++) {
        unsigned nc = o.connections / o.threads + (t < o.connections % o.threads);
        uint64_t q =
            o.events == UINT64_MAX ? UINT64_MAX : o.events / o.threads + (t < o.events % o.threads);
        workers[t].ep = -1;
        if (worker_init(&workers[t], t, nc, q) != 0) {
            fprintf(stderr, "ingestd-load: cannot set up thread %u: %s\n", t, strerror(errno));
            return 1;
        }
    }
    for (unsigned t = 0; t < o.threads; t++) {
        if (pthread_create(&workers[t].th, NULL, worker_main, &workers[t]) != 0) {
            fprintf(stderr, "ingestd-load: pthread_create failed\n");
            return 1;
        }
    }

    /* The main thread only reports progress; the workers say when they are done. */
    progress_t *tty = o.quiet ? NULL : progress_new(stderr); /* NULL: stderr is no terminal */
    uint64_t last_ev = 0, last_rq = 0, last_t = t_begin, next = t_begin + 1000000000u;
    while (atomic_load(&workers_done) < (int)o.threads) {
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL); /* a ticker, not synchronisation: the joins below wait */
        if (!o.quiet && (uint64_t)clk_mono_ns() >= next) {
            progress(&last_ev, &last_rq, &last_t, tty);
            next += 1000000000u;
        }
    }
    for (unsigned t = 0; t < o.threads; t++)
        pthread_join(workers[t].th, NULL);
    t_end = (uint64_t)clk_mono_ns();
    progress_free(tty);
    if (atomic_load(&fatal)) {
        fprintf(stderr, "ingestd-load: %s\n", fatal_msg);
        rc = 1;
    }

    static const double pct[4] = {50, 90, 99, 100};
    double ms[4];
    h_percentiles(pct, ms, 4);
    ms[3] = (double)ld(&st.max_us) / 1e3;
    double secs = (double)(t_end - t_begin) / 1e9;
    uint64_t rq = ld(&st.requests), rq_ok = ld(&st.requests_ok), ev = ld(&st.events_sent),
             ev_ok = ld(&st.events_ok), acc = ld(&st.accepted), dup = ld(&st.duplicates),
             rej = ld(&st.rejected), errs = ld(&st.errors), non200 = status_errors();
    printf("ingestd-load %s: %u connections, %u thread%s, batches of %u, events of %zu B, "
           "dup ratio %.3f, gzip %s, run id %s\n",
           o.url, o.connections, o.threads, o.threads > 1 ? "s" : "", o.batch, ev_len, o.dup_ratio,
           o.gzip ? "on" : "off", o.run_id);
    if (o.rate > 0)
        printf("open loop: %.0f events/s offered, latency from each batch's scheduled time\n",
               o.rate);
    printf("%.2f s: %" PRIu64 " requests (%" PRIu64 " answered 200), %" PRIu64
           " events sent (%" PRIu64 " in 200 answers)\n",
           secs, rq, rq_ok, ev, ev_ok);
    printf("throughput: %.0f events/s, %.0f requests/s (200 answers)\n", (double)ev_ok / secs,
           (double)rq_ok / secs);
    printf("latency: p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms\n", ms[0], ms[1], ms[2],
           ms[3]);
    printf("answers:");
    for (unsigned s = 0; s < 600; s++)
        if (ld(&st.status[s]))
            printf(" %u: %" PRIu64 ";", s, ld(&st.status[s]));
    printf(" transport errors: %" PRIu64 " (timeouts %" PRIu64 "), connects %" PRIu64 "\n", errs,
           ld(&st.timeouts), ld(&st.connects));
    printf("events: accepted %" PRIu64 ", duplicates %" PRIu64 ", rejected %" PRIu64 "\n", acc, dup,
           rej);

    const char *vres = "skipped";
    if (o.verify_dir && !atomic_load(&fatal)) {
        uint64_t acked = 0, logged = 0;
        int v = verify(&acked, &logged);
        vres = v == 0 ? "ok" : v > 0 ? "violation" : "error";
        if (v != 0)
            rc = 1;
    }
    printf("SUMMARY run_id=%s seconds=%.3f connections=%u threads=%u batch=%u event_bytes=%zu "
           "dup_ratio=%.4f gzip=%d requests=%" PRIu64 " requests_ok=%" PRIu64
           " events_sent=%" PRIu64 " events_ok=%" PRIu64 " events_per_s=%.0f requests_per_s=%.0f "
           "p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f max_ms=%.3f accepted=%" PRIu64
           " duplicates=%" PRIu64 " rejected=%" PRIu64 " errors=%" PRIu64 " timeouts=%" PRIu64
           " non200=%" PRIu64 " bytes_sent=%" PRIu64,
           o.run_id, secs, o.connections, o.threads, o.batch, ev_len, o.dup_ratio, o.gzip, rq,
           rq_ok, ev, ev_ok, (double)ev_ok / secs, (double)rq_ok / secs, ms[0], ms[1], ms[2], ms[3],
           acc, dup, rej, errs, ld(&st.timeouts), non200, ld(&st.bytes_sent));
    for (unsigned s = 0; s < 600; s++)
        if (ld(&st.status[s]))
            printf(" status_%u=%" PRIu64, s, ld(&st.status[s]));
    printf(" rate=%.0f verify=%s\n", o.rate, vres);
    fflush(stdout);
    for (unsigned t = 0; t < o.threads; t++)
        worker_free(&workers[t]);
    free(ev_tmpl);
    return rc;
}
