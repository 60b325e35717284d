/* ingestd-nats-load: publishes events to NATS JetStream with Nats-Msg-Id, for load/compare. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"

/*
 * The NATS text protocol, spoken directly (no client library): each connection
 * sends CONNECT (headers on), subscribes to its own inbox "_I.<conn>.*" and
 * keeps --inflight messages published at once, each
 *
 *   HPUB <subject> _I.<conn>.<slot> <hdr_len> <total_len>
 *   NATS/1.0 / Nats-Msg-Id: <id> / (blank) / <payload of --event-bytes>
 *
 * JetStream answers every publish with a PubAck on the reply subject
 * ({"stream":..,"seq":..} plus "duplicate": true when the id was in the
 * stream's duplicate window); the slot in the subject gives the send time, and
 * the slot is reused at once for the next message. One epoll loop drives all
 * connections. Ids are "<run>-<16 hex of N>"; with probability --dup-ratio a
 * message re-sends the id (and bytes) of an earlier one, chosen uniformly.
 * --create-stream NAME first creates a file-storage stream on the subject with
 * a 24 h duplicate window. One `SUMMARY key=value ...` line ends the output.
 */

#define MAX_CONNS    256
#define MAX_INFLIGHT 8192
#define IN_CAP       (256u * 1024u)
#define BIN_US       10u     /* latency histogram: 10 µs bins ... */
#define BINS         200000u /* ... up to 2 s (the last bin holds the rest) */

typedef struct {
    int fd;
    unsigned idx, pending; /* messages not yet acknowledged */
    bool want_out;         /* EPOLLOUT is on */
    char in[IN_CAP];
    size_t inlen;
    char *out;
    size_t outlen, outoff, outcap;
    uint64_t *sent; /* send time (ns) per slot */
} conn_t;

static struct {
    unsigned port, conns, inflight, event_bytes;
    double dup_ratio, seconds;
    const char *subject, *stream;
    bool quiet;
} o = {.conns = 8, .inflight = 256, .event_bytes = 400, .seconds = 10, .subject = "ingest.events"};

static conn_t *cs;
static char run_id[16], *payload;
static size_t hdr_len, id_off;
static uint64_t next_id, published, acks, dups, errors, lat_max, rng = 88172645463325252ull;
static uint64_t *hist;

static uint64_t xorshift(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void die(const char *what)
{
    fprintf(stderr, "ingestd-nats-load: %s%s%s\n", what, errno ? ": " : "",
            errno ? strerror(errno) : "");
    exit(1);
}

static int dial(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o.port)};
    int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        die("connect to 127.0.0.1");
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("write");
        p += w;
        n -= (size_t)w;
    }
}

static const char CONNECT[] = "CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,"
                              "\"no_responders\":true,\"name\":\"ingestd-nats-load\"}\r\n";

/* A file-storage stream on the subject, 24 h duplicate window; blocking, before the run. */
static void create_stream(void)
{
    char json[512], req[1024], buf[4096];
    size_t got = 0;
    int fd = dial(), n;
    struct timeval tv = {.tv_sec = 30};

    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    n = snprintf(json, sizeof json,
                 "{\"name\":\"%s\",\"subjects\":[\"%s\"],\"storage\":\"file\",\"retention\":"
                 "\"limits\",\"num_replicas\":1,\"duplicate_window\":%llu}",
                 o.stream, o.subject, 86400ull * 1000000000ull);
    n = snprintf(req, sizeof req, "%sSUB _C 1\r\nPUB $JS.API.STREAM.CREATE.%s _C %d\r\n%s\r\n",
                 CONNECT, o.stream, n, json);
    send_all(fd, req, (size_t)n);
    for (;;) { /* wait for the answer: "MSG _C 1 <len>\r\n<json>\r\n" */
        char *m;
        ssize_t r = read(fd, buf + got, sizeof buf - 1 - got);
        if (r <= 0)
            die("no answer to the stream create request");
        got += (size_t)r;
        buf[got] = '\0';
        if ((m = strstr(buf, "MSG _C")) != NULL && strstr(m, "}\r\n") != NULL) {
            if (strstr(m, "\"error\"") != NULL) {
                fprintf(stderr, "ingestd-nats-load: stream create failed: %s", m);
                exit(1);
            }
            break;
        }
        if (strstr(buf, "-ERR") != NULL || got == sizeof buf - 1) {
            fprintf(stderr, "ingestd-nats-load: stream create: %s\n", buf);
            exit(1);
        }
    }
    close(fd);
}

/* Bytes one queued message takes at most. */
static size_t msg_max(void)
{
    return 64 + strlen(o.subject) + hdr_len + o.event_bytes + 2;
}

/* Room for `need` more bytes in c's output (it never holds more than --inflight messages). */
static char *reserve(conn_t *c, size_t need)
{
    if (c->outlen + need > c->outcap) {
        memmove(c->out, c->out + c->outoff, c->outlen - c->outoff);
        c->outlen -= c->outoff;
        c->outoff = 0;
        if (c->outlen + need > c->outcap)
            die("output buffer full");
    }
    return c->out + c->outlen;
}

/* Queue one message into slot `slot` of connection c. */
static void publish(conn_t *c, unsigned slot)
{
    uint64_t id = next_id;
    char *p = reserve(c, msg_max()), hex[17];
    int n;

    if (next_id > 0 && (double)(xorshift() >> 11) / 9007199254740992.0 < o.dup_ratio)
        id = xorshift() % next_id;
    else
        next_id++;
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)id);
    n = sprintf(p, "HPUB %s _I.%u.%u %zu %zu\r\nNATS/1.0\r\nNats-Msg-Id: %s-%s\r\n\r\n", o.subject,
                c->idx, slot, hdr_len, hdr_len + o.event_bytes, run_id, hex);
    memcpy(p + n, payload, o.event_bytes);
    memcpy(p + n + id_off, hex, 16); /* the payload carries the id too: a re-send is exact */
    memcpy(p + n + o.event_bytes, "\r\n", 2);
    c->outlen += (size_t)n + o.event_bytes + 2;
    c->sent[slot] = (uint64_t)clk_mono_ns();
    c->pending++;
    published++;
}

static void flush_out(int ep, conn_t *c)
{
    struct epoll_event ev = {.data.ptr = c};

    while (c->outoff < c->outlen) {
        ssize_t w = send(c->fd, c->out + c->outoff, c->outlen - c->outoff, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            break;
        if (w <= 0)
            die("write to nats-server");
        c->outoff += (size_t)w;
    }
    if (c->outoff == c->outlen)
        c->outoff = c->outlen = 0;
    if (c->want_out != (c->outlen > 0)) {
        c->want_out = c->outlen > 0;
        ev.events = EPOLLIN | (c->want_out ? EPOLLOUT : 0u);
        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
    }
}

/* A PubAck's "duplicate": true (2.9 writes it with a space, later versions without). */
static bool is_duplicate(const char *body, size_t len)
{
    const char *p = memmem(body, len, "\"duplicate\":", 12), *e = body + len;

    if (p == NULL)
        return false;
    for (p += 12; p < e && *p == ' '; p++)
        ;
    return e - p >= 4 && memcmp(p, "true", 4) == 0;
}

static void on_ack(conn_t *c, const char *subj, const char *body, size_t len, bool hdrs,
                   bool sending)
{
    const char *dot = strrchr(subj, '.');
    unsigned slot = dot ? (unsigned)strtoul(dot + 1, NULL, 10) : o.inflight;
    uint64_t lat;

    if (slot >= o.inflight || c->sent[slot] == 0) {
        errors++; /* not an ack of ours */
        return;
    }
    lat = ((uint64_t)clk_mono_ns() - c->sent[slot]) / 1000u;
    c->sent[slot] = 0;
    c->pending--;
    hist[lat / BIN_US < BINS ? lat / BIN_US : BINS - 1]++;
    if (lat > lat_max)
        lat_max = lat;
    if (hdrs || memmem(body, len, "\"error\"", 7) != NULL)
        errors++; /* a status message (503: no stream) or a JetStream error */
    else if (is_duplicate(body, len))
        acks++, dups++;
    else
        acks++;
    if (sending)
        publish(c, slot);
}

/* Parse what c has read: MSG / HMSG (acks), PING, +OK, PONG, INFO, -ERR. */
static void parse(conn_t *c, bool sending)
{
    size_t pos = 0;

    for (;;) {
        char *line = c->in + pos, *eol = memmem(line, c->inlen - pos, "\r\n", 2), subj[128];
        unsigned long a = 0, b = 0, d = 0;
        size_t ll;

        if (eol == NULL)
            break;
        ll = (size_t)(eol - line);
        if (ll > 4 && (memcmp(line, "MSG ", 4) == 0 || memcmp(line, "HMSG ", 5) == 0)) {
            bool h = line[0] == 'H';
            char tmp[300];
            int k;
            size_t body;
            memcpy(tmp, line, ll < sizeof tmp - 1 ? ll : sizeof tmp - 1);
            tmp[ll < sizeof tmp - 1 ? ll : sizeof tmp - 1] = '\0';
            /* [H]MSG <subject> <sid> [reply] [hdr_len] <total_len>: the last number is the size */
            k = sscanf(tmp + (h ? 5 : 4), "%127s %lu %lu %lu", subj, &a, &b, &d);
            body = (size_t)(k == 4 ? d : k == 3 ? b : 0);
            if (k < 3)
                die("cannot parse a MSG line");
            if (c->inlen - pos < ll + 2 + body + 2)
                break; /* the body is not all here yet */
            on_ack(c, subj, eol + 2, body, h, sending);
            pos += ll + 2 + body + 2;
            continue;
        }
        if (ll >= 4 && memcmp(line, "PING", 4) == 0) {
            memcpy(reserve(c, 6), "PONG\r\n", 6);
            c->outlen += 6;
        } else if (ll >= 4 && memcmp(line, "-ERR", 4) == 0) {
            fprintf(stderr, "ingestd-nats-load: nats-server: %.*s\n", (int)ll, line);
            exit(1);
        }
        pos += ll + 2;
    }
    memmove(c->in, c->in + pos, c->inlen - pos);
    c->inlen -= pos;
}

static double pct(double q, uint64_t n)
{
    uint64_t seen = 0, want = (uint64_t)(q * (double)n + 0.5);

    for (unsigned i = 0; i < BINS; i++)
        if ((seen += hist[i]) >= want && want > 0)
            return (i + 0.5) * BIN_US / 1000.0;
    return 0;
}

static void usage(int status)
{
    fprintf(
        status ? stderr : stdout,
        "usage: ingestd-nats-load --port PORT [--subject S] [--create-stream NAME]\n"
        "    [--connections N (8)] [--inflight N per connection (256)] [--event-bytes N (400)]\n"
        "    [--dup-ratio R (0)] [--duration SECONDS (10)] [--quiet]\n"
        "Publishes to nats-server on 127.0.0.1:PORT with Nats-Msg-Id headers, many messages\n"
        "in flight per connection, and counts the JetStream acks and duplicates.\n");
    exit(status);
}

int main(int argc, char **argv)
{
    uint64_t t0, end, last, drain_end = 0, last_acks = 0;
    int ep;
    char tmpl[160];

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--quiet") == 0) {
            o.quiet = true;
            continue;
        }
        if (strcmp(a, "--help") == 0)
            usage(0);
        if (v == NULL)
            usage(2);
        i++;
        if (strcmp(a, "--port") == 0)
            o.port = (unsigned)atoi(v);
        else if (strcmp(a, "--subject") == 0)
            o.subject = v;
        else if (strcmp(a, "--create-stream") == 0)
            o.stream = v;
        else if (strcmp(a, "--connections") == 0)
            o.conns = (unsigned)atoi(v);
        else if (strcmp(a, "--inflight") == 0)
            o.inflight = (unsigned)atoi(v);
        else if (strcmp(a, "--event-bytes") == 0)
            o.event_bytes = (unsigned)atoi(v);
        else if (strcmp(a, "--dup-ratio") == 0)
            o.dup_ratio = atof(v);
        else if (strcmp(a, "--duration") == 0)
            o.seconds = atof(v);
        else
            usage(2);
    }
    if (o.port < 1 || o.port > 65535 || o.conns < 1 || o.conns > MAX_CONNS || o.inflight < 1 ||
        o.inflight > MAX_INFLIGHT || o.event_bytes < 100 || o.event_bytes > 65536 ||
        !(o.dup_ratio >= 0 && o.dup_ratio < 1) || !(o.seconds > 0) || strlen(o.subject) > 100)
        usage(2);
    rng ^= (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid();
    snprintf(run_id, sizeof run_id, "%08llx", (unsigned long long)(xorshift() & 0xffffffffu));
    /* The payload: a track event of --event-bytes bytes, its messageId at id_off. */
    int tl = snprintf(tmpl, sizeof tmpl,
                      "{\"type\":\"track\",\"event\":\"Load Test\",\"userId\":\"user-1\","
                      "\"messageId\":\"%s-0000000000000000\",\"properties\":{\"pad\":\"",
                      run_id);
    payload = malloc(o.event_bytes);
    hist = calloc(BINS, sizeof *hist);
    cs = calloc(o.conns, sizeof *cs);
    if (payload == NULL || hist == NULL || cs == NULL)
        die("out of memory");
    if (o.event_bytes < (unsigned)tl + 3)
        usage(2);
    memset(payload, 'x', o.event_bytes);
    memcpy(payload, tmpl, (size_t)tl);
    memcpy(payload + o.event_bytes - 3, "\"}}", 3);
    id_off = (size_t)(strstr(tmpl, "-0000000000000000") + 1 - tmpl);
    hdr_len = strlen("NATS/1.0\r\nNats-Msg-Id: ") + strlen(run_id) + 1 + 16 + 4;
    if (o.stream)
        create_stream();

    if ((ep = epoll_create1(0)) < 0)
        die("epoll_create1");
    last = t0 = (uint64_t)clk_mono_ns();
    end = t0 + (uint64_t)(o.seconds * 1e9);
    for (unsigned i = 0; i < o.conns; i++) {
        conn_t *c = &cs[i];
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
        int n;
        c->idx = i;
        c->fd = dial();
        fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
        c->outcap = (size_t)o.inflight * msg_max() + 4096;
        c->out = malloc(c->outcap);
        c->sent = calloc(o.inflight, sizeof *c->sent);
        if (c->out == NULL || c->sent == NULL)
            die("out of memory");
        n = sprintf(c->out, "%sSUB _I.%u.* 1\r\n", CONNECT, i);
        c->outlen = (size_t)n;
        for (unsigned s = 0; s < o.inflight; s++)
            publish(c, s);
        c->want_out = true;
        if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) != 0)
            die("epoll_ctl");
        flush_out(ep, c);
    }
    for (;;) {
        struct epoll_event evs[64];
        uint64_t now = (uint64_t)clk_mono_ns(), pending = 0;
        bool sending = now < end;
        int n = epoll_wait(ep, evs, 64, 100);

        for (unsigned i = 0; i < o.conns; i++)
            pending += cs[i].pending;
        if (!sending && drain_end == 0)
            drain_end = now + 30000000000ull; /* wait up to 30 s for the acks in flight */
        if (pending == 0 || (drain_end && now > drain_end))
            break;
        if (!o.quiet && now - last >= 1000000000u) {
            fprintf(stderr, "ingestd-nats-load: %4.0f s  %9llu acks/s  %llu acks, %llu dup\n",
                    (now - t0) / 1e9, (unsigned long long)(acks - last_acks),
                    (unsigned long long)acks, (unsigned long long)dups);
            last = now, last_acks = acks;
        }
        for (int k = 0; k < n; k++) {
            conn_t *c = evs[k].data.ptr;
            if (evs[k].events & EPOLLIN) {
                ssize_t r = read(c->fd, c->in + c->inlen, IN_CAP - c->inlen);
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
                    die("nats-server closed the connection");
                if (r > 0) {
                    c->inlen += (size_t)r;
                    parse(c, sending);
                }
            }
            flush_out(ep, c);
        }
    }
    double secs = ((uint64_t)clk_mono_ns() - t0) / 1e9;
    uint64_t n = acks + errors, lost = published > n ? published - n : 0;
    printf("published %llu, acknowledged %llu (%llu duplicates), %llu errors, %llu unanswered\n"
           "%.0f acks/s over %.3f s; ack latency p50 %.3f ms p99 %.3f ms max %.3f ms\n",
           (unsigned long long)published, (unsigned long long)acks, (unsigned long long)dups,
           (unsigned long long)errors, (unsigned long long)lost, acks / secs, secs, pct(0.5, n),
           pct(0.99, n), lat_max / 1000.0);
    printf("SUMMARY run_id=%s seconds=%.3f connections=%u inflight=%u event_bytes=%u "
           "dup_ratio=%.4f published=%llu acks=%llu duplicates=%llu errors=%llu unanswered=%llu "
           "events_per_s=%.0f p50_ms=%.3f p99_ms=%.3f max_ms=%.3f\n",
           run_id, secs, o.conns, o.inflight, o.event_bytes, o.dup_ratio,
           (unsigned long long)published, (unsigned long long)acks, (unsigned long long)dups,
           (unsigned long long)errors, (unsigned long long)lost, acks / secs, pct(0.5, n),
           pct(0.99, n), lat_max / 1000.0);
    return errors || lost ? 1 : 0;
}
