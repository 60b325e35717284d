/* config: the `serve` settings table and the parser, --help and start-up log it drives. */
#include "server/config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "api/timestamp.h"
#include "common/errbuf.h"
#include "server/logging.h"
#include "server/options.h"
#include "storage/memfilter/filter.h"

enum kind {
    K_LISTEN,   /* HOST:PORT into listen_host / listen_port */
    K_PATH,     /* a string field */
    K_KEYS,     /* KEY[:SOURCE] list into write_keys */
    K_DURATION, /* milliseconds into an int64 field */
    K_SECONDS,  /* a duration stored as whole seconds */
    K_SIZE,     /* bytes, with k/M/G/T suffixes */
    K_COUNT,    /* a plain unsigned number */
    K_LEVEL,    /* a log level name */
    K_SECRET,   /* a string field never logged (a token); empty: not set */
    K_CHOICE,   /* one word of the metavar "a|b|c", stored as its index in an enum field */
    K_TIME,     /* an ISO-8601 UTC time or ms since the epoch into an int64 field (ms) */
    K_LIST,     /* NAME=VALUE strings, repeatable, into kafka_opts (the variable: one a line) */
    K_BOOL, /* a switch: the flag alone (or =true/false); the variable 1/true/yes or 0/false/no */
};

struct setting {
    const char *name; /* flag without the leading "--" */
    const char *env;  /* environment variable */
    const char *def;  /* default as the user would type it; NULL: computed */
    enum kind kind;
    uint64_t min, max;   /* bounds of the parsed value (ms, bytes, seconds or count) */
    size_t off, width;   /* the field in config_t */
    const char *metavar; /* for --help */
    const char *help;
};

#define FIELD(f) offsetof(config_t, f), sizeof(((config_t *)0)->f)

/* K_CHOICE fields are enums stored and read as the int index of their word. */
#define CHOICE_FIELDS_ARE_INT                                                                      \
    (sizeof(enum config_data_mode) == sizeof(int) && sizeof(enum store_sync) == sizeof(int) &&     \
     sizeof(enum config_role) == sizeof(int) && sizeof(enum config_tls_min) == sizeof(int))
_Static_assert(CHOICE_FIELDS_ARE_INT, "a K_CHOICE field is not the size of an int");

/* The one table: parsing, validation, --help and config_log all walk it. */
static const struct setting settings[] = {
    {"listen", "INGESTD_LISTEN", "127.0.0.1:8080", K_LISTEN, 0, 65535, FIELD(listen_port),
     "HOST:PORT", "address to listen on; port 0 picks a free port; IPv6 as [::1]:8080"},
    {"data", "INGESTD_DATA", OPTS_DEFAULT_DATA, K_PATH, 1, sizeof(((config_t *)0)->data_dir) - 1,
     FIELD(data_dir), "DIR", "data directory (LOCK, secret, store/, log/); created if missing"},
    {"write-key", "INGESTD_WRITE_KEY", NULL, K_KEYS, 1, CONFIG_MAX_WRITE_KEYS, FIELD(nwrite_keys),
     "KEY[:SOURCE]",
     "a write key and the source stamped on its events (default \"default\"); repeatable, "
     "and the variable takes a comma-separated list; at least one is required"},
    {"window", "INGESTD_WINDOW", OPTS_DEFAULT_WINDOW, K_DURATION, OPTS_WINDOW_MIN_MS,
     OPTS_WINDOW_MAX_MS, FIELD(window_ms), "DURATION",
     "de-duplication window by age: 90s, 15m, 24h, 28d (1s..365d)"},
    {"max-keys", "INGESTD_MAX_KEYS", OPTS_DEFAULT_MAX_KEYS, K_COUNT, 0, OPTS_MAX_KEYS_MAX,
     FIELD(max_keys), "N",
     "de-duplication window by size, per source: at least N keys of each source kept (up to "
     "the young store's size, exactly N; above it, whole generations go: up to one more is "
     "kept); 0: no size bound"},
    {"young-keys", "INGESTD_YOUNG_KEYS", OPTS_DEFAULT_YOUNG_KEYS, K_COUNT, 1, OPTS_YOUNG_KEYS_MAX,
     FIELD(young_keys), "N",
     "keys the young LMDB store holds before they are sealed into a generation file "
     "(docs/window.md; 1..2^32)"},
    {"window-floor", "INGESTD_WINDOW_FLOOR", "0", K_DURATION, 0,
     (uint64_t)(365 * CONFIG_MS_PER_DAY), FIELD(window_floor_ms), "DURATION",
     "warn (log line, /metrics ingestd_dedupe_window_below_floor, /stats "
     "dedupe.window_below_floor) while the size bound evicts keys younger than this, so the "
     "effective window is shorter; at most --window; 0: off (docs/operations.md)"},
    {"segment-bytes", "INGESTD_SEGMENT_BYTES", "64MiB", K_SIZE, 4 * CONFIG_KIB, 64 * CONFIG_GIB,
     FIELD(segment_bytes), "SIZE",
     "rotate the event log to a new segment at this size (4KiB..64GiB)"},
    {"map-size", "INGESTD_MAP_SIZE", "1GiB", K_SIZE, CONFIG_MIB, 16 * CONFIG_TIB, FIELD(map_size),
     "SIZE", "initial LMDB map size, doubled once the store fills half (1MiB..16TiB)"},
    {"threads", "INGESTD_THREADS", NULL, K_COUNT, 1, 64, FIELD(threads), "N",
     "HTTP worker threads (1..64)"},
    {"max-connections", "INGESTD_MAX_CONNECTIONS", "1024", K_COUNT, 1, 1000000,
     FIELD(max_connections), "N", "concurrent client connections at most"},
    {"timeout", "INGESTD_TIMEOUT", "30s", K_SECONDS, 1, 3600, FIELD(timeout_s), "DURATION",
     "close a connection idle this long (1s..1h)"},
    {"commit-max-events", "INGESTD_COMMIT_MAX_EVENTS", "50000", K_COUNT, 1, 10000000,
     FIELD(max_batch_events), "N", "events per group commit (one log append + fsync) at most"},
    {"log-level", "INGESTD_LOG_LEVEL", "info", K_LEVEL, 0, 0, FIELD(log_level), "LEVEL",
     "error, warn, info or debug"},
    {"admin-token", "INGESTD_ADMIN_TOKEN", NULL, K_SECRET, 1,
     sizeof(((config_t *)0)->admin_token) - 1, FIELD(admin_token), "TOKEN",
     "bearer token for GET /v1/log, /stats and /metrics (/healthz stays open); without one "
     "/v1/log is off (404) and /stats, /metrics, /dashboard answer only a Host that is localhost, "
     "an IP address or in --admin-hosts. Printable ASCII without blanks, at most 255 bytes"},
    {"admin-hosts", "INGESTD_ADMIN_HOSTS", NULL, K_PATH, 1,
     sizeof(((config_t *)0)->admin_hosts) - 1, FIELD(admin_hosts), "NAME,...",
     "without --admin-token: more Host names (e.g. ingestd.internal) that may read /stats, "
     "/metrics and /dashboard, besides localhost, IP addresses and the --listen host; any other "
     "Host gets 403, so a page that rebinds its own name to this server cannot read them; * for "
     "any Host"},
    {"log-retention", "INGESTD_LOG_RETENTION", "0", K_DURATION, 0,
     (uint64_t)(3650 * CONFIG_MS_PER_DAY), FIELD(log_retention_ms), "DURATION",
     "delete closed log segments last written longer ago than this, e.g. 7d; 0: keep forever. "
     "The active segment is never deleted"},
    {"log-max-bytes", "INGESTD_LOG_MAX_BYTES", "0", K_SIZE, 0, 1024 * CONFIG_TIB,
     FIELD(log_max_bytes), "SIZE",
     "delete the oldest closed log segments while the log is larger than this; 0: no bound"},
    {"rejected-max-bytes", "INGESTD_REJECTED_MAX_BYTES", "256MiB", K_SIZE, 0, 1024 * CONFIG_TIB,
     FIELD(rejected_max_bytes), "SIZE",
     "keep refused events and requests (reason, request id, raw bytes) in DATA/rejected/, "
     "deleting its oldest segments past this size, each source its share (GET "
     "/v1/log?log=rejected, `log cat --log "
     "rejected`); 0: keep none (single role only)"},
    {"store", "INGESTD_STORE", "lmdb", K_PATH, 1, sizeof(((config_t *)0)->store) - 1, FIELD(store),
     "lmdb|memory:SPEC",
     "where the de-duplication window lives: lmdb (exact, on disk), or memory:SPEC, a "
     "bounded-memory filter such as memory:qqhtd:8Mbit or memory:nsq:64Mbit (no disk, fixed "
     "memory, approximate: a false positive drops a unique event; docs/filters.md)"},
    {"max-connections-per-ip", "INGESTD_MAX_CONNECTIONS_PER_IP", NULL, K_COUNT, 0, 1000000,
     FIELD(max_connections_per_ip), "N",
     "concurrent connections from one socket address at most, past it closed at accept (the "
     "connections of --trusted-proxies are not counted; their forwarded clients may each have "
     "this many requests in flight); 0: no per-address cap"},
    {"header-timeout", "INGESTD_HEADER_TIMEOUT", "10s", K_SECONDS, 1, 3600, FIELD(header_timeout_s),
     "DURATION",
     "a new connection's request line and headers must arrive within this (1s..1h); when "
     "connections near --max-connections, those still without a complete request head are "
     "closed first, oldest first"},
    {"request-timeout", "INGESTD_REQUEST_TIMEOUT", "60s", K_SECONDS, 1, 3600,
     FIELD(request_timeout_s), "DURATION",
     "a request's headers and body must arrive within this, however slowly they trickle "
     "(1s..1h)"},
    {"min-body-rate", "INGESTD_MIN_BODY_RATE", "1KiB", K_SIZE, 0, CONFIG_GIB, FIELD(min_body_rate),
     "BYTES",
     "bytes per second a request body must average once --header-timeout has passed since its "
     "headers (answered 408 otherwise); 0: no minimum"},
    {"max-body-memory", "INGESTD_MAX_BODY_MEMORY", "128MiB", K_SIZE, CONFIG_MIB, CONFIG_TIB,
     FIELD(max_body_memory), "SIZE",
     "request bodies buffered at once, all connections together, at most; past it a request "
     "gets 503 with Retry-After (its body is read and dropped)"},
    {"trusted-proxies", "INGESTD_TRUSTED_PROXIES", NULL, K_PATH, 1,
     sizeof(((config_t *)0)->trusted_proxies) - 1, FIELD(trusted_proxies), "CIDR,...",
     "proxies whose X-Forwarded-For / Forwarded header names the client: for connections from "
     "these networks that address is the client's (context.ip, log lines)"},
    {"no-context-ip", "INGESTD_NO_CONTEXT_IP", "false", K_BOOL, 0, 0, FIELD(no_context_ip), "",
     "do not fill context.ip from the client address (events that carry one keep it)"},
    {"max-header-bytes", "INGESTD_MAX_HEADER_BYTES", "16KiB", K_SIZE, 4 * CONFIG_KIB, CONFIG_MIB,
     FIELD(max_header_bytes), "SIZE",
     "request line and headers at most (4KiB..1MiB); more is answered 431"},
    {"queue-max-bytes", "INGESTD_QUEUE_MAX_BYTES", "64MiB", K_SIZE, CONFIG_MIB, 64 * CONFIG_GIB,
     FIELD(queue_max_bytes), "SIZE",
     "event bytes waiting for the group commit at most; past it requests get 503 with "
     "Retry-After instead of using more memory"},
    {"rate-limit", "INGESTD_RATE_LIMIT", "0", K_COUNT, 0, UINT64_C(1000000000), FIELD(rate_limit),
     "EVENTS",
     "events per second per write key (token bucket, bursts of one second); past it 429 with "
     "Retry-After; 0: no limit"},
    {"write-keys-file", "INGESTD_WRITE_KEYS_FILE", NULL, K_PATH, 1,
     sizeof(((config_t *)0)->write_keys_file) - 1, FIELD(write_keys_file), "FILE",
     "more write keys, one KEY[:SOURCE] per line (# comments); reloaded on SIGHUP"},
    {"tls-cert", "INGESTD_TLS_CERT", NULL, K_PATH, 1, sizeof(((config_t *)0)->tls_cert) - 1,
     FIELD(tls_cert), "FILE", "PEM certificate (chain) to serve HTTPS; needs --tls-key"},
    {"tls-key", "INGESTD_TLS_KEY", NULL, K_PATH, 1, sizeof(((config_t *)0)->tls_key) - 1,
     FIELD(tls_key), "FILE", "PEM private key of --tls-cert; both are read again on SIGHUP"},
    /* The words' positions are enum config_tls_min's values. */
    {"tls-min-version", "INGESTD_TLS_MIN_VERSION", "1.2", K_CHOICE, 0, 0, FIELD(tls_min), "1.2|1.3",
     "the oldest TLS version served with --tls-cert; either way only forward-secret AEAD "
     "suites (ECDHE or DHE with AES-GCM or ChaCha20-Poly1305, and TLS 1.3's)"},
    {"cors-origin", "INGESTD_CORS_ORIGIN", "*", K_PATH, 1, sizeof(((config_t *)0)->cors_origin) - 1,
     FIELD(cors_origin), "ORIGINS",
     "browser origins allowed by CORS, comma-separated (https://app.example.com), or * for any "
     "(never with credentials)"},
    /* The words' positions are enum config_data_mode's values. */
    {"data-mode", "INGESTD_DATA_MODE", "private", K_CHOICE, 0, 0, FIELD(data_mode), "private|group",
     "who may read the files ingestd creates in --data (log segments, LMDB, groups): private: "
     "files 0600, directories 0700; group: 0640 and 0750, for a reader in the service user's "
     "group. The secret stays 0600. Existing files keep their modes"},
    /* The words' positions are enum store_sync's values (storage/window/store.h). */
    {"store-sync", "INGESTD_STORE_SYNC", "meta", K_CHOICE, 0, 0, FIELD(store_sync),
     "meta|full|lazy",
     "how LMDB syncs its commits (the log is always fsynced before an ack): meta syncs data "
     "pages per commit; full also the meta page; lazy syncs LMDB only at shutdown and rebuilds "
     "the store from the log after a machine crash (docs/durability.md)"},
    /* Scale-out on Kafka (docs/scale-out.md, "Edge role"). The words' positions are enum
     * config_role's values. */
    {"role", "INGESTD_ROLE", "single", K_CHOICE, 0, 0, FIELD(role), "single|edge",
     "single: accepted events go to the local log (--data); edge: they are produced to the Kafka "
     "raw topic and de-duplicated downstream by `ingestd worker` (--data is not used)"},
    {"kafka-brokers", "INGESTD_KAFKA_BROKERS", NULL, K_PATH, 1,
     sizeof(((config_t *)0)->kafka_brokers) - 1, FIELD(kafka_brokers), "LIST",
     "edge: Kafka bootstrap servers, host:port,..."},
    {"raw-topic", "INGESTD_RAW_TOPIC", NULL, K_PATH, 1, sizeof(((config_t *)0)->raw_topic) - 1,
     FIELD(raw_topic), "NAME", "edge: the topic accepted events are produced to (must exist)"},
    {"partitions-before", "INGESTD_PARTITIONS_BEFORE", "0", K_COUNT, 0, 100000,
     FIELD(partitions_before), "COUNT",
     "edge: the raw topic's partition count before partitions were added; events whose client "
     "timestamp is before --repartition-at are routed with it. 0: no repartition"},
    {"repartition-at", "INGESTD_REPARTITION_AT", NULL, K_TIME, 1, (uint64_t)INT64_MAX,
     FIELD(repartition_at_ms), "TIMESTAMP",
     "edge: the cut-over of --partitions-before, an ISO-8601 UTC time "
     "(2026-01-31T00:00:00Z) or ms since the epoch"},
    {"delivery-timeout", "INGESTD_DELIVERY_TIMEOUT", "10s", K_SECONDS, 1, 300,
     FIELD(delivery_timeout_s), "DURATION",
     "edge: how long a request waits for Kafka's delivery reports before it gets 503 (1s..5m)"},
    {"kafka-opt", "INGESTD_KAFKA_OPTS", NULL, K_LIST, 0, CONFIG_MAX_KAFKA_OPTS, FIELD(nkafka_opts),
     "NAME=VALUE",
     "edge: a librdkafka setting, e.g. security.protocol=SASL_SSL; repeatable (the variable: "
     "one NAME=VALUE a line); values are never logged"},
};

#define NSETTINGS (sizeof settings / sizeof settings[0])

/* Position of `word` in "a|b|c", or -1. */
static int choice_index(const char *choices, const char *word)
{
    size_t n = strlen(word);
    int i = 0;
    for (const char *w = choices; w; i++) {
        size_t len = strcspn(w, "|");
        if (len == n && strncmp(w, word, n) == 0)
            return i;
        w = w[len] == '|' ? w + len + 1 : NULL;
    }
    return -1;
}

unsigned config_data_umask(enum config_data_mode mode)
{
    switch (mode) {
    case CONFIG_DATA_GROUP:
        return 027;
    case CONFIG_DATA_PRIVATE:
        break;
    }
    return 077;
}

enum config_data_mode config_data_mode_env(const char *value)
{
    int i = value ? choice_index("private|group", value) : -1;
    return i == CONFIG_DATA_GROUP ? CONFIG_DATA_GROUP : CONFIG_DATA_PRIVATE;
}

static unsigned cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);

    if (n < 1)
        return 1;
    return n > 64 ? 64 : (unsigned)n;
}

static void put_uint(config_t *cfg, const struct setting *st, uint64_t v)
{
    char *p = (char *)cfg + st->off;

    switch (st->width) {
    case sizeof(uint16_t): {
        uint16_t x = (uint16_t)v;
        memcpy(p, &x, sizeof x);
        break;
    }
    case sizeof(uint32_t): {
        uint32_t x = (uint32_t)v;
        memcpy(p, &x, sizeof x);
        break;
    }
    default: {
        uint64_t x = v;
        memcpy(p, &x, sizeof x);
        break;
    }
    }
}

static uint64_t get_uint(const config_t *cfg, const struct setting *st)
{
    const char *p = (const char *)cfg + st->off;

    switch (st->width) {
    case sizeof(uint16_t): {
        uint16_t x;
        memcpy(&x, p, sizeof x);
        return x;
    }
    case sizeof(uint32_t): {
        uint32_t x;
        memcpy(&x, p, sizeof x);
        return x;
    }
    default: {
        uint64_t x;
        memcpy(&x, p, sizeof x);
        return x;
    }
    }
}

/* --listen into listen_host / listen_port. */
static int parse_listen(config_t *cfg, const char *v, const char *origin, char *errbuf,
                        size_t errlen)
{
    return config_parse_hostport(v, origin, cfg->listen_host, sizeof cfg->listen_host,
                                 &cfg->listen_port, errbuf, errlen);
}

/* --repartition-at: "2026-01-31T00:00:00Z" (api/timestamp.h) or plain ms since the epoch. */
static int parse_time(const char *v, int64_t *ms)
{
    const char *end;
    uint64_t n;
    if (config_parse_u64(v, &end, &n) == 0 && *end == '\0')
        return n > 0 && n <= (uint64_t)INT64_MAX ? (*ms = (int64_t)n, 0) : -1;
    return timestamp_parse(v, strlen(v), ms) == 0 && *ms > 0 ? 0 : -1;
}

/* A number of setting `st` (a duration, a size or a count) within its bounds. */
static int apply_number(config_t *cfg, const struct setting *st, const char *v, const char *origin,
                        char *errbuf, size_t errlen)
{
    uint64_t u = 0;
    int64_t ms = 0;
    const char *end;
    char lo[32], hi[32];

    switch (st->kind) {
    case K_DURATION:
    case K_SECONDS:
        if (config_parse_duration(v, &ms) != 0) {
            errbuf_printf(errbuf, errlen,
                          "invalid %s \"%s\": expected a duration such as 90s, 15m, 24h or 28d",
                          origin, v);
            return -1;
        }
        u = st->kind == K_SECONDS ? (uint64_t)(ms / CONFIG_MS_PER_S) : (uint64_t)ms;
        if (u < st->min || u > st->max) {
            uint64_t f = st->kind == K_SECONDS ? (uint64_t)CONFIG_MS_PER_S : 1;
            config_fmt_duration(lo, sizeof lo, (int64_t)(st->min * f));
            config_fmt_duration(hi, sizeof hi, (int64_t)(st->max * f));
            errbuf_printf(errbuf, errlen, "invalid %s \"%s\": must be between %s and %s", origin, v,
                          lo, hi);
            return -1;
        }
        put_uint(cfg, st, u);
        return 0;
    case K_SIZE:
        if (config_parse_size(v, &u) != 0) {
            errbuf_printf(errbuf, errlen,
                          "invalid %s \"%s\": expected a size such as 1048576, 64k, 64MiB or 1G",
                          origin, v);
            return -1;
        }
        if (u < st->min || u > st->max) {
            config_fmt_size(lo, sizeof lo, st->min);
            config_fmt_size(hi, sizeof hi, st->max);
            errbuf_printf(errbuf, errlen, "invalid %s \"%s\": must be between %s and %s", origin, v,
                          lo, hi);
            return -1;
        }
        put_uint(cfg, st, u);
        return 0;
    case K_COUNT:
        if (config_parse_u64(v, &end, &u) != 0 || *end != '\0') {
            errbuf_printf(errbuf, errlen, "invalid %s \"%s\": expected a whole number", origin, v);
            return -1;
        }
        if (u < st->min || u > st->max) {
            errbuf_printf(errbuf, errlen,
                          "invalid %s \"%s\": must be between %" PRIu64 " and %" PRIu64, origin, v,
                          st->min, st->max);
            return -1;
        }
        put_uint(cfg, st, u);
        return 0;
    default:
        break;
    }
    return -1;
}

/* The admin token: printable ASCII without blanks, within the length bounds. */
static int apply_secret(config_t *cfg, const struct setting *st, const char *v, const char *origin,
                        char *errbuf, size_t errlen)
{
    size_t n = strlen(v);
    if (n < st->min || n > st->max) {
        errbuf_printf(errbuf, errlen, "invalid %s: must be 1 to %" PRIu64 " bytes", origin,
                      st->max);
        return -1;
    }
    /* It travels in an Authorization header: printable ASCII, no blanks (RFC 6750 token). */
    for (size_t i = 0; i < n; i++) {
        if (v[i] <= ' ' || v[i] > '~') {
            errbuf_printf(errbuf, errlen,
                          "invalid %s: only printable ASCII without blanks is allowed", origin);
            return -1;
        }
    }
    memcpy((char *)cfg + st->off, v, n + 1);
    return 0;
}

/* Parses one value of setting `st`; `origin` names the flag or variable for errors. */
static int apply(config_t *cfg, const struct setting *st, const char *v, const char *origin,
                 char *errbuf, size_t errlen)
{
    int64_t ms = 0;

    switch (st->kind) {
    case K_LISTEN:
        return parse_listen(cfg, v, origin, errbuf, errlen);
    case K_PATH: {
        size_t n = strlen(v);
        if (n < st->min || n > st->max) {
            errbuf_printf(errbuf, errlen, "invalid %s: the path is empty or too long", origin);
            return -1;
        }
        memcpy((char *)cfg + st->off, v, n + 1);
        return 0;
    }
    case K_KEYS:
        return config_add_keys(cfg, v, origin, errbuf, errlen);
    case K_LIST:
        return config_add_kafka_opt(cfg, v, origin, errbuf, errlen);
    case K_BOOL: {
        bool on = strcasecmp(v, "true") == 0 || strcasecmp(v, "yes") == 0 || strcmp(v, "1") == 0;
        if (!on && strcasecmp(v, "false") != 0 && strcasecmp(v, "no") != 0 && strcmp(v, "0") != 0) {
            errbuf_printf(errbuf, errlen, "invalid %s \"%s\": expected true or false", origin, v);
            return -1;
        }
        *(bool *)((char *)cfg + st->off) = on;
        return 0;
    }
    case K_TIME:
        if (parse_time(v, &ms) != 0) {
            errbuf_printf(errbuf, errlen,
                          "invalid %s \"%s\": expected an ISO-8601 UTC time such as "
                          "2026-01-31T00:00:00Z or milliseconds since the epoch",
                          origin, v);
            return -1;
        }
        memcpy((char *)cfg + st->off, &ms, sizeof ms);
        return 0;
    case K_SECRET:
        return apply_secret(cfg, st, v, origin, errbuf, errlen);
    case K_LEVEL: {
        int lvl = logging_parse_level(v);
        if (lvl < 0) {
            errbuf_printf(errbuf, errlen,
                          "invalid %s \"%s\": expected one of error, warn, info, debug", origin, v);
            return -1;
        }
        cfg->log_level = lvl;
        return 0;
    }
    case K_CHOICE: {
        int i = choice_index(st->metavar, v);
        if (i < 0) {
            errbuf_printf(errbuf, errlen, "invalid %s \"%s\": expected %s", origin, v, st->metavar);
            return -1;
        }
        memcpy((char *)cfg + st->off, &i, sizeof i); /* an enum field (CHOICE_FIELDS_ARE_INT) */
        return 0;
    }
    case K_DURATION:
    case K_SECONDS:
    case K_SIZE:
    case K_COUNT:
        return apply_number(cfg, st, v, origin, errbuf, errlen);
    }
    return -1;
}

static const char *env_get(char **envp, const char *name)
{
    size_t n = strlen(name);

    for (char **e = envp; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    }
    return NULL;
}

static const struct setting *find_flag(const char *name, size_t len)
{
    for (size_t i = 0; i < NSETTINGS; i++) {
        if (strlen(settings[i].name) == len && strncmp(settings[i].name, name, len) == 0)
            return &settings[i];
    }
    return NULL;
}

/* The edge settings go together, and only with --role edge (a half-configured edge, or a
 * single node given Kafka flags, is surely a mistake). */
static int check_role(const config_t *cfg, char *errbuf, size_t errlen)
{
    bool edge = cfg->role == CONFIG_ROLE_EDGE;
    const char *stray = cfg->kafka_brokers[0]    ? "--kafka-brokers"
                        : cfg->raw_topic[0]      ? "--raw-topic"
                        : cfg->nkafka_opts       ? "--kafka-opt"
                        : cfg->partitions_before ? "--partitions-before"
                        : cfg->repartition_at_ms ? "--repartition-at"
                                                 : NULL;
    if (!edge && stray) {
        errbuf_printf(errbuf, errlen, "%s is for --role edge only (this is --role single)", stray);
        return -1;
    }
    if (!edge)
        return 0;
    if (!cfg->kafka_brokers[0] || !cfg->raw_topic[0]) {
        errbuf_printf(errbuf, errlen,
                      "--role edge needs --kafka-brokers LIST and --raw-topic NAME");
        return -1;
    }
    if ((cfg->partitions_before > 0) != (cfg->repartition_at_ms > 0)) {
        errbuf_printf(errbuf, errlen, "%s",
                      cfg->partitions_before > 0
                          ? "--partitions-before needs --repartition-at TIMESTAMP"
                          : "--repartition-at needs --partitions-before COUNT");
        return -1;
    }
    return 0;
}

/* The flags as given, by setting; --write-key and --kafka-opt may repeat, so they keep them all. */
struct given {
    const char *flagval[NSETTINGS];
    const char **keyvals, **optvals;
    size_t nkeyvals, noptvals;
};

static bool wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return true;
    }
    return false;
}

/* Sorts argv's flags into g by setting, unparsed. Returns 0 or -1 (unknown flag, no value). */
static int collect_flags(int argc, char **argv, struct given *g, char *errbuf, size_t errlen)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *name, *eq, *val;
        const struct setting *st;

        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
            errbuf_printf(errbuf, errlen, "unexpected argument \"%s\" (see ingestd serve --help)",
                          arg);
            return -1;
        }
        name = arg + 2;
        eq = strchr(name, '=');
        st = find_flag(name, eq != NULL ? (size_t)(eq - name) : strlen(name));
        if (st == NULL) {
            errbuf_printf(errbuf, errlen, "unknown flag %.*s (see ingestd serve --help)",
                          (int)(eq != NULL ? (size_t)(eq - arg) : strlen(arg)), arg);
            return -1;
        }
        if (eq != NULL) {
            val = eq + 1;
        } else if (st->kind == K_BOOL) {
            val = "true"; /* a switch takes no value unless given with = */
        } else if (i + 1 < argc) {
            val = argv[++i];
        } else {
            errbuf_printf(errbuf, errlen, "flag --%s needs a value (%s)", st->name, st->metavar);
            return -1;
        }
        if (st->kind == K_KEYS)
            g->keyvals[g->nkeyvals++] = val;
        else if (st->kind == K_LIST)
            g->optvals[g->noptvals++] = val;
        else
            g->flagval[st - settings] = val; /* the last one wins, as with most tools */
    }
    return 0;
}

/*
 * Sets one setting from its flags, else its variable, else its default. The repeatable ones
 * (write keys, Kafka options) take every flag, and the flags replace the variable as a whole.
 */
static int apply_setting(config_t *cfg, const struct setting *st, const char *flag,
                         const struct given *g, char **envp, char *errbuf, size_t errlen)
{
    const char *env = env_get(envp, st->env);
    char flagname[64];

    snprintf(flagname, sizeof flagname, "--%s", st->name);
    if (env != NULL && env[0] == '\0')
        env = NULL; /* an empty variable counts as unset */

    if (st->kind == K_KEYS) {
        for (size_t k = 0; k < g->nkeyvals; k++) {
            if (apply(cfg, st, g->keyvals[k], flagname, errbuf, errlen) != 0)
                return -1;
        }
        if (g->nkeyvals == 0 && env != NULL)
            return apply(cfg, st, env, st->env, errbuf, errlen);
        return 0;
    }
    if (st->kind == K_LIST) {
        for (size_t k = 0; k < g->noptvals; k++) {
            if (apply(cfg, st, g->optvals[k], flagname, errbuf, errlen) != 0)
                return -1;
        }
        if (g->noptvals == 0 && env != NULL)
            return config_add_kafka_opt_lines(cfg, env, st->env, errbuf, errlen);
        return 0;
    }
    if (flag != NULL)
        return apply(cfg, st, flag, flagname, errbuf, errlen);
    if (env != NULL)
        return apply(cfg, st, env, st->env, errbuf, errlen);
    if (st->def != NULL)
        return apply(cfg, st, st->def, "default", errbuf, errlen); /* a bad one is a bug */
    if (st->off == offsetof(config_t, max_connections_per_ip))
        put_uint(cfg, st, UINT32_MAX); /* a share of --max-connections: check_together */
    else if (st->kind == K_COUNT)
        put_uint(cfg, st, cpu_count()); /* threads */
    /* Else a K_SECRET without default: it stays empty (not set). */
    return 0;
}

/* What no single setting can check: settings that go together, and the parsed lists. */
static int check_together(config_t *cfg, char *errbuf, size_t errlen)
{
    /* A keys file may hold every key; whether it has any is checked when it is read (cmd/serve.c).
     */
    if (cfg->nwrite_keys == 0 && cfg->write_keys_file[0] == '\0') {
        errbuf_printf(errbuf, errlen,
                      "no write key: give --write-key KEY[:SOURCE], set INGESTD_WRITE_KEY "
                      "(comma-separated) or give --write-keys-file FILE");
        return -1;
    }
    if (strcmp(cfg->store, "lmdb") != 0) {
        filter_spec_t spec;
        char ferr[160];
        if (strncmp(cfg->store, "memory:", 7) != 0) {
            errbuf_printf(errbuf, errlen, "invalid --store \"%s\": expected lmdb or memory:SPEC",
                          cfg->store);
            return -1;
        }
        if (filter_parse_spec(cfg->store + 7, &spec, ferr, sizeof(ferr)) != FILTER_OK) {
            errbuf_printf(errbuf, errlen, "invalid --store \"%s\": %s", cfg->store, ferr);
            return -1;
        }
    }
    /* Half a TLS configuration would silently serve plain HTTP: refuse it. */
    if ((cfg->tls_cert[0] != '\0') != (cfg->tls_key[0] != '\0')) {
        errbuf_printf(errbuf, errlen, "%s without %s: give both (PEM files) or neither",
                      cfg->tls_cert[0] != '\0' ? "--tls-cert" : "--tls-key",
                      cfg->tls_cert[0] != '\0' ? "--tls-key" : "--tls-cert");
        return -1;
    }
    /* One client address may take a share of the connections, never all of them (README
     * "Limits"): the rest stays for everyone else. */
    if (cfg->max_connections_per_ip == UINT32_MAX) {
        unsigned share = cfg->max_connections / CONFIG_PER_IP_SHARE_DIV;
        cfg->max_connections_per_ip = share > 0 ? share : 1;
    }
    if (cfg->window_floor_ms > cfg->window_ms) {
        errbuf_printf(errbuf, errlen,
                      "--window-floor must not exceed --window: the window never reaches it");
        return -1;
    }
    if (check_role(cfg, errbuf, errlen) != 0)
        return -1;
    return proxy_parse(cfg->trusted_proxies, &cfg->proxies, errbuf, errlen);
}

int config_parse(config_t *cfg, int argc, char **argv, char **envp, FILE *out, char *errbuf,
                 size_t errlen)
{
    struct given g = {0};
    int rc = 2;

    memset(cfg, 0, sizeof *cfg);
    if (errbuf != NULL && errlen > 0)
        errbuf[0] = '\0';
    if (wants_help(argc, argv)) {
        config_usage(out);
        return 1;
    }
    g.keyvals = calloc((size_t)(argc > 0 ? argc : 1), sizeof *g.keyvals);
    g.optvals = calloc((size_t)(argc > 0 ? argc : 1), sizeof *g.optvals);
    if (g.keyvals == NULL || g.optvals == NULL) {
        errbuf_printf(errbuf, errlen, "out of memory");
        goto out;
    }
    if (collect_flags(argc, argv, &g, errbuf, errlen) != 0)
        goto out;
    for (size_t i = 0; i < NSETTINGS; i++) {
        if (apply_setting(cfg, &settings[i], g.flagval[i], &g, envp, errbuf, errlen) != 0)
            goto out;
    }
    if (check_together(cfg, errbuf, errlen) != 0)
        goto out;
    rc = 0;

out:
    free(g.keyvals);
    free(g.optvals);
    return rc;
}

/* Shows a key by its first characters only, and never more than half of it. */
static void mask_key(char *buf, size_t len, const char *key)
{
    size_t n = strlen(key) / 2;

    if (n > 3)
        n = 3;
    snprintf(buf, len, "%.*s\xe2\x80\xa6", (int)n, key);
}

/* The write keys, masked, with their sources. */
static void fmt_keys(const config_t *cfg, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < cfg->nwrite_keys && used + 1 < len; i++) {
        char masked[32];
        mask_key(masked, sizeof masked, cfg->write_keys[i].key);
        int w = snprintf(buf + used, len - used, "%s%s:%s", i > 0 ? ", " : "", masked,
                         cfg->write_keys[i].source);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

/* The --kafka-opt names only: a value may be a password (sasl.password). */
static void fmt_kafka_opts(const config_t *cfg, char *buf, size_t len)
{
    size_t used = 0;
    snprintf(buf, len, "none");
    for (size_t i = 0; i < cfg->nkafka_opts && used + 1 < len; i++) {
        const char *o = cfg->kafka_opts[i];
        int w = snprintf(buf + used, len - used, "%s%.*s=(hidden)", i > 0 ? ", " : "",
                         (int)strcspn(o, "="), o);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

static void fmt_value(const config_t *cfg, const struct setting *st, char *buf, size_t len)
{
    switch (st->kind) {
    case K_LISTEN:
        if (strchr(cfg->listen_host, ':') != NULL)
            snprintf(buf, len, "[%s]:%u", cfg->listen_host, (unsigned)cfg->listen_port);
        else
            snprintf(buf, len, "%s:%u", cfg->listen_host, (unsigned)cfg->listen_port);
        return;
    case K_PATH: {
        const char *v = (const char *)cfg + st->off;
        snprintf(buf, len, "%s", v[0] != '\0' ? v : "none");
        return;
    }
    case K_KEYS:
        fmt_keys(cfg, buf, len);
        return;
    case K_LEVEL: {
        static const char *const names[] = {"error", "warn", "info", "debug"};
        int l = cfg->log_level;
        snprintf(buf, len, "%s", l >= 0 && l <= LOGGING_LEVEL_DEBUG ? names[l] : "?");
        return;
    }
    case K_SECRET:
        /* Never any part of it: unlike a write key, the token alone grants access. */
        snprintf(buf, len, "%s",
                 ((const char *)cfg + st->off)[0] != '\0' ? "(set, hidden)" : "none");
        return;
    case K_CHOICE: {
        /* The n-th word of "a|b|c". */
        const char *w = st->metavar;
        int n;
        memcpy(&n, (const char *)cfg + st->off, sizeof n);
        for (int i = n; i > 0 && w; i--)
            w = strchr(w, '|') ? strchr(w, '|') + 1 : NULL;
        snprintf(buf, len, "%.*s", w ? (int)strcspn(w, "|") : 1, w ? w : "?");
        return;
    }
    case K_LIST:
        fmt_kafka_opts(cfg, buf, len);
        return;
    case K_TIME: {
        int64_t ms;
        memcpy(&ms, (const char *)cfg + st->off, sizeof ms);
        if (ms == 0 || len < TIMESTAMP_BUF_LEN || timestamp_format(ms, buf) != 0)
            snprintf(buf, len, "%s", ms == 0 ? "none" : "?");
        return;
    }
    case K_BOOL:
        snprintf(buf, len, "%s", *(const bool *)((const char *)cfg + st->off) ? "true" : "false");
        return;
    case K_DURATION:
        config_fmt_duration(buf, len, (int64_t)get_uint(cfg, st));
        return;
    case K_SECONDS:
        config_fmt_duration(buf, len, (int64_t)get_uint(cfg, st) * CONFIG_MS_PER_S);
        return;
    case K_SIZE:
        config_fmt_size(buf, len, get_uint(cfg, st));
        return;
    case K_COUNT:
        snprintf(buf, len, "%" PRIu64, get_uint(cfg, st));
        return;
    }
}

void config_log(const config_t *cfg)
{
    char val[2048];

    for (size_t i = 0; i < NSETTINGS; i++) {
        fmt_value(cfg, &settings[i], val, sizeof val);
        LOGGING_INFO("config %s = %s", settings[i].name, val);
    }
}

/* Prints `text` word-wrapped at `width` columns, each line indented by `indent`. */
void config_wrap(FILE *out, const char *text, int indent, int width)
{
    const char *p = text;

    while (*p != '\0') {
        int room = width - indent;
        int n = (int)strlen(p);
        if (n > room) {
            n = room;
            while (n > 0 && p[n] != ' ')
                n--;
            if (n == 0)
                n = room; /* one long word: cut it */
        }
        fprintf(out, "%*s%.*s\n", indent, "", n, p);
        p += n;
        while (*p == ' ')
            p++;
    }
}

void config_usage(FILE *out)
{
    fprintf(out, "Usage: ingestd serve [--flag value | --flag=value]...\n"
                 "\n"
                 "Runs the HTTP event intake in the foreground; logs go to stderr, SIGTERM or\n"
                 "SIGINT stop it after in-flight commits. Every flag has an environment\n"
                 "variable; a flag wins over its variable.\n"
                 "\n"
                 "Flags:\n");
    for (size_t i = 0; i < NSETTINGS; i++) {
        const struct setting *st = &settings[i];
        char head[64], def[64];

        snprintf(head, sizeof head, "--%s%s%s", st->name, st->metavar[0] ? " " : "", st->metavar);
        if (st->def != NULL)
            snprintf(def, sizeof def, "%s", st->def);
        else if (st->kind == K_KEYS)
            snprintf(def, sizeof def, "none (required)");
        else if (st->off == offsetof(config_t, max_connections_per_ip))
            snprintf(def, sizeof def, "1/%d of --max-connections", CONFIG_PER_IP_SHARE_DIV);
        else if (st->kind == K_SECRET || st->kind == K_PATH || st->kind == K_TIME ||
                 st->kind == K_LIST)
            snprintf(def, sizeof def, "none");
        else
            snprintf(def, sizeof def, "number of CPUs (%u here)", cpu_count());
        fprintf(out, "  %s\n", head);
        config_wrap(out, st->help, 6, 78);
        fprintf(out, "      env %s; default %s\n", st->env, def);
    }
    fprintf(out, "  -h, --help\n      show this help and exit\n");
    fprintf(out, "\nDurations: 90s, 15m, 24h, 28d (plain numbers are seconds).\n"
                 "Sizes: 1048576, 64k, 64MiB, 1G (powers of 1024).\n");
}
