/* serve.c: `ingestd serve`, the HTTP event intake: wires config, storage (or the edge's Kafka
 * producer), api and http together, and runs until SIGINT or SIGTERM. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"
#include "api/auth.h"
#include "api/cors.h"
#include "cluster/edge.h"
#include "cmd/cmd.h"
#include "common/errbuf.h"
#include "server/config.h"
#include "server/http.h"
#include "server/logging.h"
#include "storage/commit/commit.h"
#include "storage/datadir.h"
#include "storage/log/log.h"
#include "storage/log/quarantine.h"
#include "storage/window/settings.h"

/* How long in-flight requests get to finish after SIGTERM before storage closes. */
#define DRAIN_MS 10000

extern char **environ;

/*
 * Storage never logs; its writer thread reports failures, recoveries and
 * retention through this (level 1: e.g. retention deleting records still
 * inside the dedupe window, which `rebuild` then cannot restore).
 */
static void on_storage_notice(void *arg, int level, const char *msg)
{
    (void)arg;
    switch (level) {
    case 0:
        LOGGING_ERROR("storage: %s", msg);
        break;
    case 1:
        LOGGING_WARN("storage: %s", msg);
        break;
    default:
        LOGGING_INFO("storage: %s", msg);
        break;
    }
}

/*
 * The quarantine (DATA/rejected/, storage/log/quarantine.h) when --rejected-max-bytes is not 0.
 * Opened after the commit, whose data dir lock makes this process its one writer. Returns 0 or -1
 * (logged).
 */
static int open_quarantine(const config_t *cfg, quarantine_t **q)
{
    char dir[4200];
    int lrc = 0;

    *q = NULL;
    if (cfg->rejected_max_bytes == 0) {
        LOGGING_INFO(
            "quarantine: off (--rejected-max-bytes 0): refused input is counted, not kept");
        return 0;
    }
    (void)datadir_put(dir, sizeof dir, cfg->data_dir, DATADIR_REJECTED);
    quarantine_options_t qo = {.max_bytes = cfg->rejected_max_bytes};
    int rc = quarantine_open(dir, &qo, q, &lrc);
    if (rc != QUARANTINE_OK) {
        LOGGING_ERROR("cannot open the quarantine %s: %s (%s)", dir, quarantine_strerror(rc),
                      lrc == LOG_EIO ? strerror(errno) : log_strerror(lrc));
        return -1;
    }
    quarantine_stats_t s;
    quarantine_get_stats(*q, &s);
    LOGGING_INFO("quarantine: %s, %" PRIu64 " records, %" PRIu64 " bytes (bound %" PRIu64 ")", dir,
                 s.records, s.bytes, s.max_bytes);
    return 0;
}

/* Writes what the quarantine still queues and closes it, saying what it could not keep. */
static void close_quarantine(quarantine_t *q)
{
    quarantine_stats_t s;

    if (q == NULL)
        return;
    quarantine_flush(q, DRAIN_MS);
    quarantine_get_stats(q, &s);
    if (s.dropped > 0 || s.failed > 0)
        LOGGING_WARN("quarantine: %" PRIu64 " records dropped (queue full) and %" PRIu64
                     " lost to write errors since start",
                     s.dropped, s.failed);
    quarantine_close(q);
}

/*
 * The write keys in force: the flag/env keys of cfg plus those of
 * --write-keys-file (when given). *keys is freed with auth_keys_free.
 * Returns 0, or -1 with a "FILE:LINE: reason" in err (never a key).
 */
static int load_keys(const config_t *cfg, api_write_key_t **keys, size_t *n, char *err,
                     size_t errlen)
{
    if (cfg->write_keys_file[0] == '\0')
        return auth_keys_parse("", 0, "flags", cfg->write_keys, cfg->nwrite_keys, keys, n, err,
                               errlen);
    if (auth_keys_load(cfg->write_keys_file, cfg->write_keys, cfg->nwrite_keys, keys, n, err,
                       errlen) != 0)
        return -1;
    if (*n == 0) {
        /* A server without keys would refuse everything: surely a mistake (an emptied file). */
        errbuf_printf(err, errlen,
                      "%.400s: no write key in the file (and none given by --write-key)",
                      cfg->write_keys_file);
        auth_keys_free(*keys, *n);
        *keys = NULL;
        return -1;
    }
    return 0;
}

/* SIGHUP: re-reads --write-keys-file; a bad file changes nothing. */
static void reload_keys(const config_t *cfg, api_t *api)
{
    api_write_key_t *keys = NULL;
    size_t n = 0;
    char err[512];

    if (cfg->write_keys_file[0] == '\0') {
        /* The TLS pair (reload_tls) is the only other thing SIGHUP reads again. */
        LOGGING_INFO("SIGHUP: no --write-keys-file to reload; the other settings are read once at "
                     "start");
        return;
    }
    err[0] = '\0';
    if (load_keys(cfg, &keys, &n, err, sizeof err) != 0) {
        LOGGING_ERROR("SIGHUP: write keys not reloaded, the previous keys stay in force: %s", err);
        return;
    }
    if (api_set_keys(api, keys, n) != 0)
        LOGGING_ERROR("SIGHUP: write keys not reloaded (out of memory); the previous keys stay in "
                      "force");
    else
        LOGGING_INFO("SIGHUP: write keys reloaded from %s: %zu keys in force (%zu from flags)",
                     cfg->write_keys_file, n, cfg->nwrite_keys);
    auth_keys_free(keys, n);
}

/* What `serve` holds while it runs; release_all frees it, whatever was set up. */
struct serving {
    config_t *cfg;
    commit_t *commit;         /* the single-node role's storage */
    quarantine_t *quarantine; /* and its quarantine (NULL: off, or the edge role) */
    cluster_edge_t *edge;     /* or the edge role's Kafka producer */
    api_sink_t sink;
    api_t *api;
    http_t *http;
    histogram_t *fsync_hist, *batch_hist, *age_hist; /* filled by the commit, read by the api */
    api_write_key_t *keys;
    size_t nkeys;
};

/*
 * Blocks the stop signals before any thread exists, so every thread inherits the mask and only
 * sigwait() in wait_for_stop ever sees them.
 */
static void block_signals(sigset_t *sigs)
{
    sigemptyset(sigs);
    sigaddset(sigs, SIGINT);
    sigaddset(sigs, SIGTERM);
    sigaddset(sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/*
 * Parses and checks the flags (and the write keys file, and the CORS origins: a bad one is a bad
 * flag, exit 2 with its reason before anything starts). Returns -1 to go on, else the exit
 * status: 0 after --help, 1 out of memory, 2 a bad flag.
 */
static int parse_flags(struct serving *s, int argc, char **argv)
{
    char err[512];
    cors_t *cors = NULL;

    s->cfg = calloc(1, sizeof *s->cfg); /* ~130 KB of key storage: not for the stack */
    if (s->cfg == NULL) {
        fprintf(stderr, "ingestd: out of memory\n");
        return 1;
    }
    switch (config_parse(s->cfg, argc, argv, environ, stdout, err, sizeof err)) {
    case 0:
        break;
    case 1:
        return 0; /* --help */
    default:
        fprintf(stderr, "ingestd serve: %s\n", err);
        return 2;
    }
    umask((mode_t)config_data_umask(s->cfg->data_mode)); /* --data-mode wins over the variable */
    /* Checked here so a bad origin exits 2 with its reason, like any bad flag (api_new would
     * only fail). */
    if (cors_new(s->cfg->cors_origin, &cors, err, sizeof err) != CORS_OK) {
        fprintf(stderr, "ingestd serve: --cors-origin: %s\n", err[0] ? err : "out of memory");
        return 2;
    }
    cors_free(cors);
    if (load_keys(s->cfg, &s->keys, &s->nkeys, err, sizeof err) != 0) {
        fprintf(stderr, "ingestd serve: --write-keys-file: %s\n", err);
        return 2;
    }
    return -1;
}

/* The first lines of the log: version, effective configuration, keys in force. */
static void log_start(const struct serving *s)
{
    const config_t *cfg = s->cfg;

    logging_level = cfg->log_level;
    cluster_set_log(logging_syslog); /* librdkafka's lines (the edge role) into our log */
    LOGGING_INFO("ingestd %s starting", INGESTD_VERSION);
    config_log(cfg);
    if (cfg->write_keys_file[0] != '\0')
        LOGGING_INFO("write keys: %zu in force (%zu from flags, %zu from %s)", s->nkeys,
                     cfg->nwrite_keys, s->nkeys - cfg->nwrite_keys, cfg->write_keys_file);
}

/*
 * The edge role keeps no storage at all (no LMDB, no log: --data is not used); the workers
 * de-duplicate downstream (docs/scale-out.md, "Edge role"). Returns 0 or -1 (logged).
 */
static int open_edge(struct serving *s)
{
    const config_t *cfg = s->cfg;
    char err[512];
    cluster_edge_options_t eopts = {
        .brokers = cfg->kafka_brokers,
        .raw_topic = cfg->raw_topic,
        .partitions_before = (int32_t)cfg->partitions_before,
        .repartition_at_ms = cfg->repartition_at_ms,
        .timeout_ms = (int)cfg->delivery_timeout_s * 1000,
        .opts = {.kv = cfg->kafka_opts, .n = cfg->nkafka_opts},
    };

    err[0] = '\0';
    int erc = cluster_edge_new(&eopts, &s->edge, err, sizeof err);
    if (erc != CLUSTER_OK) {
        LOGGING_ERROR("cannot start the edge role: %s", err[0] ? err : cluster_strerror(erc));
        return -1;
    }
    cluster_edge_sink(s->edge, &s->sink);
    LOGGING_INFO("edge: producing to %s (%d partitions) on %s", cfg->raw_topic,
                 (int)cluster_edge_partitions(s->edge), cfg->kafka_brokers);
    return 0;
}

/* The single-node role: the data dir's log and store behind the group commit. 0 or -1 (logged). */
static int open_storage(struct serving *s)
{
    const config_t *cfg = s->cfg;
    char err[512];
    commit_options_t copts = {
        .data_dir = cfg->data_dir,
        .window_ms = cfg->window_ms,
        .max_keys = cfg->max_keys,
        .young_keys = cfg->young_keys,
        .segment_bytes = cfg->segment_bytes,
        .map_size = cfg->map_size,
        .max_batch_events = cfg->max_batch_events,
        .log_retention_ms = cfg->log_retention_ms,
        .log_max_bytes = cfg->log_max_bytes,
        .queue_max_bytes = cfg->queue_max_bytes,
        .store_sync = cfg->store_sync,
        .memory_filter = strncmp(cfg->store, "memory:", 7) == 0 ? cfg->store + 7 : NULL,
        /* Tests stand in for a machine restart with their own boot id (docs/durability.md). */
        .boot_id_path = getenv("INGESTD_BOOT_ID_FILE"),
        .notify = on_storage_notice,
        .notify_arg = NULL,
        .fsync_seconds = s->fsync_hist,
        .batch_events = s->batch_hist,
        .duplicate_age_seconds = s->age_hist,
        .window_floor_ms = cfg->window_floor_ms,
    };

    err[0] = '\0';
    int rc = commit_open(&copts, &s->commit, err, sizeof err);
    if (rc != COMMIT_OK) {
        LOGGING_ERROR("cannot open data dir %s: %s", cfg->data_dir,
                      err[0] != '\0' ? err : commit_strerror(rc));
        return -1;
    }
    /* The offline tools (rebuild, check, lookup) shape the window as this server does. */
    winsettings_t ws = {cfg->window_ms, cfg->max_keys, cfg->young_keys};
    if (!copts.memory_filter && winsettings_write(cfg->data_dir, &ws) != 0)
        LOGGING_WARN(
            "cannot write %s/%s (%s): `ingestd rebuild` and `check` will use their defaults "
            "unless given the window's flags",
            cfg->data_dir, datadir_name(DATADIR_WINDOW), strerror(errno));
    return open_quarantine(cfg, &s->quarantine);
}

/* Where accepted events go: --role's storage or Kafka producer. 0 or -1 (logged). */
static int open_role(struct serving *s)
{
    switch (s->cfg->role) {
    case CONFIG_ROLE_SINGLE:
        return open_storage(s);
    case CONFIG_ROLE_EDGE:
        return open_edge(s);
    }
    return -1;
}

/* Request handling over the storage or the edge, and the HTTP transport. 0 or -1 (logged). */
static int start_serving(struct serving *s)
{
    const config_t *cfg = s->cfg;
    bool edge = s->edge != NULL;
    char err[512];
    api_options_t aopts = {
        .keys = s->keys,
        .nkeys = s->nkeys,
        .commit = s->commit,
        .sink = edge ? &s->sink : NULL,
        .admin_token = cfg->admin_token[0] != '\0' ? cfg->admin_token : NULL,
        .data_dir = edge ? NULL : cfg->data_dir,
        .cors_origin = cfg->cors_origin,
        .rate_limit = cfg->rate_limit,
        .fsync_seconds = edge ? NULL : s->fsync_hist, /* the edge has no commit */
        .batch_events = edge ? NULL : s->batch_hist,
        .quarantine = s->quarantine,
        .duplicate_age_seconds = edge ? NULL : s->age_hist,
        .tls_min_version = cfg->tls_cert[0] == '\0'         ? NULL
                           : cfg->tls_min == CONFIG_TLS_1_3 ? "1.3"
                                                            : "1.2",
        .listen_host = cfg->listen_host,
        .admin_hosts = cfg->admin_hosts,
    };

    if (api_new(&aopts, &s->api) != 0) {
        LOGGING_ERROR("cannot set up request handling (out of memory or bad write keys)");
        return -1;
    }
    err[0] = '\0';
    if (http_start(cfg, s->api, &s->http, err, sizeof err) != 0) {
        LOGGING_ERROR("%s", err);
        return -1;
    }
    return 0;
}

/* SIGHUP: reads --tls-cert and --tls-key again; a bad pair changes nothing. */
static void reload_tls(http_t *http)
{
    char err[512];

    err[0] = '\0';
    switch (http_reload_tls(http, err, sizeof err)) {
    case 0:
        LOGGING_INFO("SIGHUP: TLS certificate and key reloaded; new handshakes use them");
        break;
    case 1:
        break; /* plain HTTP */
    default:
        LOGGING_ERROR("SIGHUP: TLS certificate and key not reloaded, the previous pair stays in "
                      "force: %s",
                      err);
        break;
    }
}

/* Waits for SIGINT or SIGTERM (returned); SIGHUP reloads the write keys and the TLS pair
 * meanwhile. */
static int wait_for_stop(const struct serving *s, const sigset_t *sigs)
{
    int sig = 0;

    for (;;) {
        if (sigwait(sigs, &sig) != 0)
            continue;
        if (sig != SIGHUP)
            return sig;
        reload_keys(s->cfg, s->api);
        reload_tls(s->http);
    }
}

/*
 * The orderly stop. Order matters: stop new connections, let in-flight requests finish, flush
 * and answer every queued commit (which resumes parked connections), and only then tear the
 * daemon down.
 */
static void stop_serving(struct serving *s)
{
    http_quiesce(s->http);
    unsigned left = http_drain(s->http, DRAIN_MS);
    if (left > 0)
        LOGGING_WARN("%u requests still in flight after %d ms; closing storage anyway", left,
                     DRAIN_MS);
    cluster_edge_quiesce(s->edge); /* answers what still waits for Kafka, before the transport */
    commit_close(s->commit);
    s->commit = NULL;
    http_stop(s->http);
    s->http = NULL;
    close_quarantine(s->quarantine); /* after the transport: nothing adds to it any more */
    s->quarantine = NULL;
}

/* Frees whatever was set up. On the error paths nothing is listening yet or any more. */
static void release_all(struct serving *s)
{
    http_stop(s->http);
    commit_close(s->commit);
    close_quarantine(s->quarantine);
    cluster_edge_free(s->edge, DRAIN_MS);
    api_free(s->api);
    histogram_free(s->fsync_hist); /* after commit_close and api_free, their last users */
    histogram_free(s->batch_hist);
    histogram_free(s->age_hist);
    auth_keys_free(s->keys, s->nkeys);
    free(s->cfg);
}

int cmd_serve(int argc, char **argv)
{
    struct serving s = {0};
    sigset_t sigs;
    int ret;

    block_signals(&sigs);
    ret = parse_flags(&s, argc, argv);
    if (ret >= 0)
        goto out;
    ret = 1;
    log_start(&s);
    if (histogram_new(HISTOGRAM_SECONDS, HISTOGRAM_SECONDS_N, &s.fsync_hist) != 0 ||
        histogram_new(HISTOGRAM_EVENTS, HISTOGRAM_EVENTS_N, &s.batch_hist) != 0 ||
        histogram_new(HISTOGRAM_AGE_SECONDS, HISTOGRAM_AGE_SECONDS_N, &s.age_hist) != 0) {
        LOGGING_ERROR("out of memory");
        goto out;
    }
    if (open_role(&s) != 0)
        goto out;
    if (start_serving(&s) != 0)
        goto out;
    LOGGING_INFO("ready");
    int sig = wait_for_stop(&s, &sigs);
    LOGGING_INFO("received %s; stopping", strsignal(sig));
    stop_serving(&s);
    LOGGING_INFO("stopped");
    ret = 0;
out:
    release_all(&s);
    return ret;
}
