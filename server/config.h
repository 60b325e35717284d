/* config: the one table of `serve` settings (flag, environment variable, default, bounds, help). */
#ifndef INGESTD_CONFIG_H
#define INGESTD_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "api/api.h"
#include "server/logging.h"
#include "server/proxy.h"
#include "storage/window/store.h"

#define CONFIG_MAX_WRITE_KEYS 256
#define CONFIG_MAX_KAFKA_OPTS 64

/* --role: what `serve` does with accepted events (the words of the setting, in order). */
enum config_role {
    CONFIG_ROLE_SINGLE = 0, /* the local group commit (LMDB + log in --data) */
    CONFIG_ROLE_EDGE = 1,   /* produce them to Kafka's raw topic (cluster/edge.h) */
};

/* --tls-min-version: the oldest TLS version served (the words of the setting, in order). */
enum config_tls_min {
    CONFIG_TLS_1_2 = 0, /* TLS 1.2 and 1.3 */
    CONFIG_TLS_1_3 = 1, /* TLS 1.3 only */
};

/* --max-connections-per-ip when neither the flag nor its variable gives it: a share of
 * --max-connections (config_parse resolves it, so the parsed config never holds this). */
#define CONFIG_PER_IP_SHARE_DIV 4

/* --data-mode: who may read what ingestd creates in a data dir (the umask it runs under). */
enum config_data_mode {
    CONFIG_DATA_PRIVATE = 0, /* files 0600, directories 0700: the service user only */
    CONFIG_DATA_GROUP = 1,   /* files 0640, directories 0750: also read by the user's group */
};

/* The umask of `mode`; storage asks for 0644 files, 0755 directories (the secret 0600), and the
 * umask takes the rest away. */
unsigned config_data_umask(enum config_data_mode mode);

/* The data mode that INGESTD_DATA_MODE names ("private", "group"), for the commands without a
 * --data-mode flag; private when unset or not one of them. */
enum config_data_mode config_data_mode_env(const char *value);

typedef struct config {
    char listen_host[256]; /* --listen HOST:PORT (INGESTD_LISTEN), default 127.0.0.1:8080 */
    uint16_t listen_port;
    char data_dir[4096];                               /* --data (INGESTD_DATA), default ./data */
    api_write_key_t write_keys[CONFIG_MAX_WRITE_KEYS]; /* --write-key KEY[:SOURCE], repeatable;
                                                          INGESTD_WRITE_KEY comma-separated */
    size_t nwrite_keys;
    int64_t window_ms;      /* --window DURATION (INGESTD_WINDOW), default 24h */
    uint64_t max_keys;      /* --max-keys (INGESTD_MAX_KEYS), default 100000000; 0: no size bound */
    uint64_t young_keys;    /* --young-keys (INGESTD_YOUNG_KEYS), default 1 Mi */
    uint64_t segment_bytes; /* --segment-bytes (INGESTD_SEGMENT_BYTES), default 64 MiB */
    uint64_t map_size;      /* --map-size (INGESTD_MAP_SIZE), initial LMDB map, default 1 GiB */
    unsigned threads;       /* --threads (INGESTD_THREADS), HTTP threads, default: CPUs */
    unsigned max_connections; /* --max-connections (INGESTD_MAX_CONNECTIONS), default 1024 */
    unsigned timeout_s;       /* --timeout (INGESTD_TIMEOUT), idle connection timeout, default 30 */
    size_t max_batch_events;  /* --commit-max-events (INGESTD_COMMIT_MAX_EVENTS), default 50000 */
    enum logging_severity log_level; /* --log-level (INGESTD_LOG_LEVEL), default info */
    enum store_sync store_sync; /* --store-sync meta|full|lazy (INGESTD_STORE_SYNC), default meta */
    char store[128];            /* --store lmdb|memory:SPEC (INGESTD_STORE), default lmdb */
    char admin_token[256];      /* --admin-token (INGESTD_ADMIN_TOKEN), default "" (none): when set,
                                   /v1/log, /stats, /metrics need `Authorization: Bearer TOKEN`;
                                   without, /v1/log is off */
    int64_t log_retention_ms; /* --log-retention (INGESTD_LOG_RETENTION), default 0: keep forever */
    uint64_t log_max_bytes;   /* --log-max-bytes (INGESTD_LOG_MAX_BYTES), default 0: no bound */
    uint64_t rejected_max_bytes; /* --rejected-max-bytes (INGESTD_REJECTED_MAX_BYTES): bound of
                                    the quarantine DATA/rejected/, default 256 MiB; 0: off */
    int64_t window_floor_ms;     /* --window-floor (INGESTD_WINDOW_FLOOR), default 0: off */
    /* Hardening (issue #6; README "Limits"). */
    unsigned max_connections_per_ip; /* --max-connections-per-ip (INGESTD_MAX_CONNECTIONS_PER_IP),
                                        default a quarter of --max-connections (README "Limits"
                                        says why); 0: no per-address cap */
    unsigned request_timeout_s;      /* --request-timeout (INGESTD_REQUEST_TIMEOUT): headers and
                                        body must arrive within this, default 60s */
    unsigned header_timeout_s;       /* --header-timeout (INGESTD_HEADER_TIMEOUT): the request
                                        line and headers must arrive within this, default 10s */
    uint64_t min_body_rate;          /* --min-body-rate (INGESTD_MIN_BODY_RATE): bytes/s a body
                                        must average, default 1KiB; 0: off */
    uint64_t max_body_memory;        /* --max-body-memory (INGESTD_MAX_BODY_MEMORY): request
                                        bodies buffered at once at most, default 128MiB */
    char trusted_proxies[1024];      /* --trusted-proxies (INGESTD_TRUSTED_PROXIES): CIDR list */
    proxy_list_t proxies;            /* trusted_proxies parsed */
    bool no_context_ip;              /* --no-context-ip (INGESTD_NO_CONTEXT_IP): leave
                                        context.ip alone */
    uint64_t max_header_bytes;       /* --max-header-bytes (INGESTD_MAX_HEADER_BYTES), request
                                        line + headers at most, default 16KiB */
    uint64_t queue_max_bytes;        /* --queue-max-bytes (INGESTD_QUEUE_MAX_BYTES): event bytes
                                        waiting for the group commit before 503, default 64MiB */
    uint64_t rate_limit;             /* --rate-limit (INGESTD_RATE_LIMIT): events/s per write key,
                                        default 0 (off) */
    char write_keys_file[4096];      /* --write-keys-file (INGESTD_WRITE_KEYS_FILE), "" : none;
                                        one KEY[:SOURCE] per line, reloaded on SIGHUP */
    char tls_cert[4096];             /* --tls-cert (INGESTD_TLS_CERT) PEM path, "": plain HTTP */
    char tls_key[4096];              /* --tls-key (INGESTD_TLS_KEY) PEM path, "": plain HTTP */
    enum config_tls_min tls_min;     /* --tls-min-version 1.2|1.3 (INGESTD_TLS_MIN_VERSION) */
    char admin_hosts[1024];          /* --admin-hosts (INGESTD_ADMIN_HOSTS): Host names that may
                                        read /stats, /metrics, /dashboard without --admin-token
                                        besides localhost and IP addresses; "*": any */
    char cors_origin[1024];          /* --cors-origin (INGESTD_CORS_ORIGIN): allowed browser
                                        origins, comma-separated, default "*" */
    enum config_data_mode data_mode; /* --data-mode private|group (INGESTD_DATA_MODE) */
    /* Scale-out on Kafka (docs/scale-out.md): the edge role. */
    enum config_role role;       /* --role single|edge (INGESTD_ROLE) */
    char kafka_brokers[1024];    /* --kafka-brokers (INGESTD_KAFKA_BROKERS), "": none */
    char raw_topic[256];         /* --raw-topic (INGESTD_RAW_TOPIC), "": none */
    uint32_t partitions_before;  /* --partitions-before (INGESTD_PARTITIONS_BEFORE), 0: none */
    int64_t repartition_at_ms;   /* --repartition-at (INGESTD_REPARTITION_AT): ISO-8601 UTC time
                                    or ms since the epoch; 0: none */
    unsigned delivery_timeout_s; /* --delivery-timeout (INGESTD_DELIVERY_TIMEOUT), default 10s */
    const char *kafka_opts[CONFIG_MAX_KAFKA_OPTS]; /* --kafka-opt NAME=VALUE, repeatable;
                                                      INGESTD_KAFKA_OPTS one per line */
    size_t nkafka_opts;
    char kafka_opt_storage[CONFIG_MAX_KAFKA_OPTS][512];
    /* storage for strings the write_keys point into */
    char key_storage[CONFIG_MAX_WRITE_KEYS][512];
} config_t;

/*
 * Parses `serve` arguments (argv[0] is "serve") over the environment `envp`
 * (NULL-terminated "NAME=value" strings; flags win over environment).
 * Returns 0 on success; 1 when --help was printed to `out`; 2 on a bad value,
 * with a one-line reason in errbuf. Pure apart from writing to `out`.
 */
int config_parse(config_t *cfg, int argc, char **argv, char **envp, FILE *out, char *errbuf,
                 size_t errlen);

/* Prints the effective configuration, one line per setting, write keys masked, the admin token
 * hidden. */
void config_log(const config_t *cfg);

/* ---- the value syntax (config_values.c) ---- */

/* Units of the values: sizes are powers of 1024. */
#define CONFIG_MS_PER_S   INT64_C(1000)
#define CONFIG_MS_PER_DAY (86400 * CONFIG_MS_PER_S)
#define CONFIG_KIB        UINT64_C(1024)
#define CONFIG_MIB        (1024 * CONFIG_KIB)
#define CONFIG_GIB        (1024 * CONFIG_MIB)
#define CONFIG_TIB        (1024 * CONFIG_GIB)

/* Strict decimal: digits only, no sign, no blanks, no overflow; *end after the digits.
 * Returns 0 or -1. */
int config_parse_u64(const char *s, const char **end, uint64_t *v);

/* "90s", "15m", "24h", "28d" or plain seconds -> ms. Returns 0 or -1. */
int config_parse_duration(const char *s, int64_t *ms);

/* "1048576", "64k", "64MiB", "1G" -> bytes (powers of 1024). Returns 0 or -1. */
int config_parse_size(const char *s, uint64_t *bytes);

/* A plain decimal count ("0", "100000000": no sign, no suffix) -> value. Returns 0 or -1. */
int config_parse_count(const char *s, uint64_t *v);

/*
 * "HOST:PORT" or "[IPV6]:PORT" (port 0..65535; 0 picks a free one): the host without brackets
 * into host[0..hostlen), the port into *port. The one parser of a listen address (serve's
 * --listen, the worker's). Returns 0, or -1 with "invalid ORIGIN \"V\": reason" in errbuf.
 */
int config_parse_hostport(const char *v, const char *origin, char *host, size_t hostlen,
                          uint16_t *port, char *errbuf, size_t errlen);

/* ms in the largest unit that divides it into buf: 2419200000 -> "28d", 5400000 -> "90m". */
void config_fmt_duration(char *buf, size_t len, int64_t ms);

/* bytes in the largest unit that divides it into buf: 67108864 -> "64MiB", 1000 -> "1000". */
void config_fmt_size(char *buf, size_t len, uint64_t b);

/*
 * The list values, added to cfg: the comma-separated KEY[:SOURCE] items of --write-key; one
 * NAME=VALUE of --kafka-opt (librdkafka checks name and value later); the lines of
 * INGESTD_KAFKA_OPTS (one item a line, values may hold commas; blank lines skipped). Each
 * returns 0, or -1 with "invalid ORIGIN ...: reason" in errbuf.
 */
int config_add_keys(config_t *cfg, const char *v, const char *origin, char *errbuf, size_t errlen);
int config_add_kafka_opt(config_t *cfg, const char *v, const char *origin, char *errbuf,
                         size_t errlen);
int config_add_kafka_opt_lines(config_t *cfg, const char *v, const char *origin, char *errbuf,
                               size_t errlen);

/* ---- the settings (config.c) ---- */

/* Prints `text` word-wrapped at `width` columns, each line indented by `indent` (--help). */
void config_wrap(FILE *out, const char *text, int indent, int width);

/* Prints the --help text of `serve`. */
void config_usage(FILE *out);

#endif
