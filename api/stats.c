/* stats: GET /stats (JSON), GET /metrics (Prometheus text) and GET /healthz, from commit and api
 * counters. */
#include "api/internal.h"

#include "api/auth.h"
#include "common/clock.h"
#include "storage/log/groups.h"
#include "storage/window/stats.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t load(atomic_uint_fast64_t *a)
{
    return (uint64_t)atomic_load_explicit(a, memory_order_relaxed);
}

/*
 * dedupe.duplicate_age_seconds: how late retries come. The quantiles are estimated from the
 * histogram's buckets (histogram_quantile), never above the exact max; all 0 while count is 0.
 */
static json_t *duplicate_ages_json(const api_t *api, const commit_stats_t *s)
{
    static const char *const NAMES[] = {"p50", "p99", "p999"};
    static const double QS[] = {0.5, 0.99, 0.999};
    double max = (double)s->duplicate_age_max_ms / 1000.0;
    json_t *j = json_pack("{s:I, s:f}", "count", (json_int_t)histogram_count(api->duplicate_ages),
                          "max", max);
    for (size_t i = 0; j && i < sizeof(QS) / sizeof(QS[0]); i++) {
        double v = 0;
        if (histogram_quantile(api->duplicate_ages, QS[i], &v) != 0 || v > max)
            v = histogram_count(api->duplicate_ages) ? max : 0;
        json_object_set_new(j, NAMES[i], json_real(v));
    }
    return j;
}

static double ratio(double num, uint64_t den)
{
    return den ? num / (double)den : 0.0;
}

static int64_t uptime_s(const api_t *api)
{
    return (clk_mono_ms() - api->started_ms) / 1000;
}

/*
 * The consumer groups of the data dir: *out (caller frees) and *n; none when
 * the api has no data dir or the directory cannot be listed (stats stay up).
 */
static void list_groups(const api_t *api, groups_entry_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (!api->data_dir || groups_list(api->data_dir, out, n) != GROUPS_OK) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
}

/* How far a group is behind the committed end; 0 for a group ahead of it (e.g. after restore). */
static uint64_t group_lag(const groups_entry_t *g, uint64_t committed)
{
    return committed > g->offset ? committed - g->offset : 0;
}

/* [{"name":..,"offset":..,"lag":..}, ...]; NULL when out of memory. */
static json_t *groups_json(const api_t *api, uint64_t committed)
{
    groups_entry_t *gs = NULL;
    size_t n = 0;
    json_t *arr = json_array();

    list_groups(api, &gs, &n);
    for (size_t i = 0; arr && i < n; i++) {
        json_t *g =
            json_pack("{s:s, s:I, s:I}", "name", gs[i].name, "offset", (json_int_t)gs[i].offset,
                      "lag", (json_int_t)group_lag(&gs[i], committed));
        if (!g || json_array_append_new(arr, g) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    free(gs);
    return arr;
}

/* HTTP responses so far by status, and their total: /stats `requests`. NULL when out of memory. */
static json_t *by_status_json(api_t *api, uint64_t *total)
{
    char code[16];
    json_t *by = json_object();
    *total = 0;
    for (int i = 0; by && i < API_STATUS_SLOTS; i++) {
        uint64_t n = load(&api->by_status[i]);
        if (n == 0)
            continue;
        *total += n;
        snprintf(code, sizeof(code), "%d", i);
        if (json_object_set_new(by, code, json_integer((json_int_t)n)) != 0) {
            json_decref(by);
            by = NULL;
        }
    }
    return by;
}

/* /stats `dedupe`: the window, its bounds and evictions, its store, and how late retries come. */
static json_t *dedupe_json(const api_t *api, const commit_stats_t *s, int64_t now_ms)
{
    json_t *dd = window_stats_json(&s->window, now_ms);
    if (!dd)
        return NULL;
    json_object_set_new(dd, "store_map_bytes", json_integer((json_int_t)s->store_map_size));
    json_object_set_new(dd, "store_used_bytes", json_integer((json_int_t)s->store_used_bytes));
    /* Which store holds the window; a filter states its error rate, which operators must know. */
    json_object_set_new(dd, "store", json_string(s->memory_store ? "memory" : "lmdb"));
    /* How late retries come: how long the window must be (docs/operations.md). */
    json_object_set_new(dd, "duplicate_age_seconds", duplicate_ages_json(api, s));
    /* A memory filter has no sealed part: its error rate instead. */
    if (s->memory_store) {
        json_object_del(dd, "generations");
        json_object_set_new(dd, "filter",
                            json_pack("{s:s, s:I, s:f}", "spec", s->filter_spec, "memory_bits",
                                      (json_int_t)s->filter_bits, "asymptotic_fpr", s->filter_fpr));
    }
    return dd;
}

/* One source of the window, named. */
typedef struct {
    window_source_t s;
    char name[64]; /* its source name, or "tag:XXXXXXXX" when no write key names it now */
} named_source_t;

/*
 * The window's sources (commit_sources) with their names, found by the tag
 * each write key's source has: malloc'ed (caller frees), *n of them; NULL
 * with *n 0 when there are none or no memory.
 */
static named_source_t *named_sources(api_t *api, size_t *n)
{
    *n = 0;
    size_t have = commit_sources(api->commit, NULL, 0);
    named_source_t *out = have ? calloc(have, sizeof(*out)) : NULL;
    window_source_t *raw = have ? calloc(have, sizeof(*raw)) : NULL;
    auth_keyset_t *ks = out && raw ? api_keys_get(api) : NULL;
    if (ks) {
        size_t got = commit_sources(api->commit, raw, have); /* fewer only if storage reopened */
        if (got < have)
            have = got;
        const uint8_t *secret = commit_secret(api->commit);
        for (size_t i = 0; i < have; i++) {
            out[i].s = raw[i];
            snprintf(out[i].name, sizeof(out[i].name), "tag:%08" PRIx32, raw[i].tag);
            for (size_t k = 0; k < auth_keyset_size(ks); k++) {
                const char *src = auth_keyset_at(ks, k)->source;
                if (keyhash_source_tag(secret, src, strlen(src)) == raw[i].tag) {
                    snprintf(out[i].name, sizeof(out[i].name), "%s", src);
                    break;
                }
            }
        }
        *n = have;
        auth_keyset_release(ks);
    }
    free(raw);
    if (*n == 0) {
        free(out);
        out = NULL;
    }
    return out;
}

/* The seconds since a source last forgot a key (its effective window); -1: it never did. */
static int64_t source_window_s(const window_source_t *s, int64_t now_ms)
{
    return s->forgot_ms > 0 ? (now_ms - s->forgot_ms) / 1000 : -1;
}

/* /stats `dedupe.sources`: each source's part of the window and what it forgot. */
static json_t *sources_json(api_t *api, int64_t now_ms)
{
    size_t n;
    named_source_t *ns = named_sources(api, &n);
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        int64_t w = source_window_s(&ns[i].s, now_ms);
        json_array_append_new(
            arr, json_pack("{s:s, s:I, s:I, s:I, s:o}", "source", ns[i].name, "keys",
                           (json_int_t)ns[i].s.keys, "evicted_age", (json_int_t)ns[i].s.evicted_age,
                           "evicted_size", (json_int_t)ns[i].s.evicted_size,
                           "effective_window_seconds", w >= 0 ? json_integer(w) : json_null()));
    }
    free(ns);
    return arr;
}

/* The per-source series of /metrics. */
static void metrics_sources(prom_t *p, api_t *api, int64_t now_ms)
{
    size_t n;
    named_source_t *ns = named_sources(api, &n);
    prom_source_t *ps = n ? calloc(n, sizeof(*ps)) : NULL;
    for (size_t i = 0; ps && i < n; i++)
        ps[i] = (prom_source_t){.name = ns[i].name,
                                .keys = ns[i].s.keys,
                                .evicted_age = ns[i].s.evicted_age,
                                .evicted_size = ns[i].s.evicted_size,
                                .window_s = source_window_s(&ns[i].s, now_ms)};
    prom_sources(p, ps, ps ? n : 0);
    free(ps);
    free(ns);
}

/* /stats `log`: its offsets, size and retention. */
static json_t *log_json(const commit_stats_t *s)
{
    // clang-format off
    return json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:I, s:{s:I, s:I, s:I, s:I, s:I}}",
        "first_offset", (json_int_t)s->log_first_offset,
        "next_offset", (json_int_t)s->log_next_offset,
        "bytes", (json_int_t)s->log_bytes,
        "segments", (json_int_t)s->log_segments,
        "committed_offset", (json_int_t)s->committed_offset,
        "window_first_offset", (json_int_t)s->window_first_offset,
        "retention",
            "segments_deleted", (json_int_t)s->retention_segments,
            "records_deleted", (json_int_t)s->retention_records,
            "window_records_deleted", (json_int_t)s->retention_window_records,
            "held_bytes", (json_int_t)s->retention_held_bytes,
            "waits", (json_int_t)s->retention_waits);
    // clang-format on
}

/* /stats `commit`: group commits, fsyncs, the queue and the LMDB checkpoints. */
static json_t *commit_json(const commit_stats_t *s)
{
    // clang-format off
    json_t *cm = json_pack(
        "{s:I, s:I, s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:I}",
        "batches", (json_int_t)s->batches,
        "events", (json_int_t)s->batch_events,
        "avg_batch_events", ratio((double)s->batch_events, s->batches),
        "last_batch_events", (json_int_t)s->last_batch_events,
        "max_batch_events", (json_int_t)s->max_batch_events,
        "last_batch_requests", (json_int_t)s->last_batch_requests,
        "failures", (json_int_t)s->failures,
        "queue_events", (json_int_t)s->queue_events,
        "fsyncs", (json_int_t)s->fsyncs,
        "fsync_ms_last", s->fsync_ms_last,
        "fsync_ms_avg", ratio(s->fsync_ms_total, s->fsyncs),
        "fsync_ms_max", s->fsync_ms_max,
        "map_grows", (json_int_t)s->map_grows);
    // clang-format on
    if (!cm)
        return NULL;
    json_object_set_new(cm, "queue_bytes", json_integer((json_int_t)s->queue_bytes));
    /* LMDB checkpoints (storage/commit/commit.h): a checkpointer thread writes the keys every 3 s.
     */
    json_object_set_new(cm, "checkpoints", json_integer((json_int_t)s->checkpoints));
    json_object_set_new(cm, "checkpoint_failures",
                        json_integer((json_int_t)s->checkpoint_failures));
    json_object_set_new(cm, "checkpoint_ms_avg",
                        json_real(ratio(s->checkpoint_ms_total, s->checkpoints)));
    json_object_set_new(cm, "checkpoint_ms_max", json_real(s->checkpoint_ms_max));
    return cm;
}

/* /stats `auth` and `limits`: write keys in force and what the limits refused (README). */
static void add_limits(api_t *api, const commit_stats_t *s, json_t *j)
{
    auth_keyset_t *ks = api_keys_get(api);
    size_t nkeys = auth_keyset_size(ks);
    auth_keyset_release(ks);
    // clang-format off
    json_object_set_new(j, "auth", json_pack("{s:I}", "write_keys", (json_int_t)nkeys));
    json_object_set_new(j, "limits", json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
        "rate_limit", (json_int_t)api->rate_limit,
        "rate_limited_requests", (json_int_t)load(&api->rate_limited_requests),
        "rate_limited_events", (json_int_t)load(&api->rate_limited_events),
        "queue_max_bytes", (json_int_t)s->queue_max_bytes,
        "queue_bytes", (json_int_t)s->queue_bytes,
        "queue_full_requests", (json_int_t)load(&api->queue_full_requests),
        "queue_full_events", (json_int_t)load(&api->queue_full_events)));
    // clang-format on
}

void api_stats(api_t *api, int64_t now_ms, api_resp_t *resp)
{
    commit_stats_t s;
    uint64_t total;

    commit_get_stats(api->commit, &s);
    json_t *by = by_status_json(api, &total);
    json_t *groups = by ? groups_json(api, s.committed_offset) : NULL;
    if (!by || !groups) {
        json_decref(by);
        json_decref(groups);
        api_error(resp, 503, "out of memory, retry later");
        return;
    }
    /* One key per line mirrors the documented /stats shape; clang-format would pack them. */
    // clang-format off
    json_t *j = json_pack(
        "{s:s, s:I, s:o, s:{s:I, s:I, s:I}, s:{s:I, s:o}, s:o, s:o, s:o,"
        " s:{s:I, s:I, s:b, s:I, s:I, s:I}, s:{s:b, s:I}}",
        "version", INGESTD_VERSION,
        "uptime_seconds", (json_int_t)uptime_s(api),
        "dedupe", dedupe_json(api, &s, now_ms),
        "events",
            "accepted", (json_int_t)s.accepted,
            "duplicates", (json_int_t)s.duplicates,
            "rejected", (json_int_t)load(&api->rejected),
        "requests",
            "total", (json_int_t)total,
            "by_status", by,
        "log", log_json(&s),
        "groups", groups,
        "commit", commit_json(&s),
        "recovery",
            "replayed_records", (json_int_t)s.replayed_at_open,
            "truncated_bytes", (json_int_t)s.truncated_at_open,
            "store_rebuilt", (int)s.rebuilt_at_open,
            "seals_finished", (json_int_t)s.window.seals_finished,
            "seals_rebased", (json_int_t)s.window.seals_rebased,
            "generation_files_cleaned", (json_int_t)s.window.generation_files_cleaned,
        "storage",
            "failed", (int)s.storage_failed,
            "recoveries", (json_int_t)s.recoveries);
    // clang-format on
    if (!j) {
        api_error(resp, 503, "out of memory, retry later");
        return;
    }
    if (!s.memory_store) {
        json_t *dd = json_object_get(j, "dedupe");
        json_object_set_new(dd, "sources", sources_json(api, now_ms));
        json_object_set_new(dd, "carried", json_integer((json_int_t)s.carried));
    }
    add_limits(api, &s, j);
    api_reject_stats(api, j);
    api_tls_stats(api, j);
    api_resp_json(resp, 200, j);
}

/* ingestd_requests_total, one sample per status answered so far. */
static void metric_requests(prom_t *p, api_t *api)
{
    char lb[32], code[8];

    prom_head(p, "requests_total", PROM_COUNTER, "HTTP responses by status code.");
    for (int i = 0; i < API_STATUS_SLOTS; i++) {
        uint64_t n = load(&api->by_status[i]);
        if (!n)
            continue;
        lb[0] = '\0';
        snprintf(code, sizeof(code), "%d", i);
        prom_label(lb, sizeof(lb), "code", code);
        prom_sample_u64(p, "requests_total", lb, n);
    }
}

/* Adds the uptime, ends the writer `p` and answers with its text. */
static void metrics_finish(const api_t *api, prom_t *p, api_resp_t *resp)
{
    size_t len = 0;

    prom_gauge(p, "uptime_seconds", "Seconds since start.", (double)uptime_s(api));
    char *text = prom_take(p, &len);
    if (!text) {
        api_error(resp, 503, "out of memory, retry later");
        return;
    }
    memset(resp, 0, sizeof(*resp));
    resp->status = 200;
    resp->content_type = "text/plain; version=0.0.4";
    resp->body = text;
    resp->body_len = len;
}

/* The window: its keys, bounds, evictions, floor and generations, named as the worker's. */
static void metrics_dedupe(prom_t *p, const commit_stats_t *s, int64_t now_ms)
{
    static const char *const none[] = {""};
    window_stats_prom(p, &s->window, none, 1, now_ms);
}

/* The per-write-key rate limit and the requests it refused (both roles). */
static void metrics_rate_limit(prom_t *p, api_t *api)
{
    prom_gauge(p, "rate_limit_events_per_second",
               "Configured rate limit per write key (--rate-limit; 0: none).",
               (double)api->rate_limit);
    prom_counter(p, "rate_limited_requests_total",
                 "Requests answered 429 by the per-write-key rate limit.",
                 (double)load(&api->rate_limited_requests));
}

/* The group commit, its queue and what the limits refused. */
static void metrics_commit(prom_t *p, api_t *api, const commit_stats_t *s)
{
    prom_counter(p, "commit_batches_total", "Group commits.", (double)s->batches);
    prom_counter(p, "commit_events_total", "Events in group commits.", (double)s->batch_events);
    prom_counter(p, "commit_failures_total", "Group commits that failed.", (double)s->failures);
    prom_gauge(p, "commit_queue_events", "Events waiting for the next group commit.",
               (double)s->queue_events);
    prom_gauge(p, "commit_queue_bytes",
               "Event bytes submitted and not yet answered (bounded by --queue-max-bytes).",
               (double)s->queue_bytes);
    prom_gauge(p, "commit_queue_max_bytes", "Configured bound on commit_queue_bytes (0: none).",
               (double)s->queue_max_bytes);
    prom_counter(p, "queue_full_requests_total",
                 "Requests answered 503 because the commit queue was full.",
                 (double)load(&api->queue_full_requests));
    prom_counter(
        p, "queue_full_events_total",
        "Events in requests answered 503 for a full commit queue (those whose body was read).",
        (double)load(&api->queue_full_events));
    metrics_rate_limit(p, api);
    prom_counter(p, "rate_limited_events_total",
                 "Events in requests answered 429 (those whose body was read).",
                 (double)load(&api->rate_limited_events));
}

/* fsyncs and LMDB checkpoints. */
static void metrics_durability(prom_t *p, const commit_stats_t *s)
{
    prom_counter(p, "fsyncs_total", "Log fsyncs.", (double)s->fsyncs);
    prom_counter(p, "fsync_seconds_total", "Time spent in fsync.", s->fsync_ms_total / 1000.0);
    prom_gauge(p, "fsync_seconds_max", "Longest fsync.", s->fsync_ms_max / 1000.0);
    prom_counter(p, "checkpoints_total", "LMDB checkpoints (commits of the write transaction).",
                 (double)s->checkpoints);
    prom_counter(p, "checkpoint_failures_total",
                 "Failed LMDB checkpoints (storage re-established from the log; no request "
                 "failed).",
                 (double)s->checkpoint_failures);
    prom_counter(p, "checkpoint_seconds_total", "Time spent in LMDB checkpoints.",
                 s->checkpoint_ms_total / 1000.0);
}

/* The log: its size, offsets and retention. */
static void metrics_log(prom_t *p, const commit_stats_t *s)
{
    prom_gauge(p, "log_bytes", "Bytes in the log.", (double)s->log_bytes);
    prom_gauge(p, "log_segments", "Log segment files.", (double)s->log_segments);
    prom_gauge(p, "log_first_offset", "Offset of the oldest retained record.",
               (double)s->log_first_offset);
    prom_gauge(p, "log_next_offset", "Offset the next record gets.", (double)s->log_next_offset);
    prom_gauge(p, "log_committed_offset",
               "Offset after the last acknowledged record (what consumers can read up to).",
               (double)s->committed_offset);
    prom_gauge(p, "log_window_first_offset",
               "Offset of the oldest record still inside the dedupe window.",
               (double)s->window_first_offset);
    prom_counter(p, "log_retention_deleted_segments_total", "Log segments deleted by retention.",
                 (double)s->retention_segments);
    prom_counter(p, "log_retention_deleted_records_total", "Log records deleted by retention.",
                 (double)s->retention_records);
    prom_counter(p, "log_retention_window_records_total",
                 "Records deleted by retention while still inside the dedupe window (rebuild "
                 "cannot restore their keys): raise --log-retention / --log-max-bytes.",
                 (double)s->retention_window_records);
    prom_gauge(p, "log_retention_held_bytes",
               "Bytes of log past --log-retention / --log-max-bytes kept because the store has "
               "not durably applied their records yet (at the last retention pass).",
               (double)s->retention_held_bytes);
    prom_counter(p, "log_retention_waits_total",
                 "Retention passes that kept segments past the bounds for the store to catch up.",
                 (double)s->retention_waits);
}

/* Each consumer group's offset and lag. */
static void metrics_groups(prom_t *p, const api_t *api, uint64_t committed)
{
    groups_entry_t *gs = NULL;
    size_t ng = 0;
    char lb[GROUPS_NAME_MAX * 2 + 16];

    list_groups(api, &gs, &ng);
    prom_head(p, "group_offset", PROM_GAUGE, "Next offset each consumer group reads.");
    for (size_t i = 0; i < ng; i++) {
        lb[0] = '\0';
        prom_label(lb, sizeof(lb), "group", gs[i].name);
        prom_sample_u64(p, "group_offset", lb, gs[i].offset);
    }
    prom_head(p, "group_lag", PROM_GAUGE,
              "Committed records each consumer group has not read yet.");
    for (size_t i = 0; i < ng; i++) {
        lb[0] = '\0';
        prom_label(lb, sizeof(lb), "group", gs[i].name);
        prom_sample_u64(p, "group_lag", lb, group_lag(&gs[i], committed));
    }
    free(gs);
}

/* The store: LMDB, health, and a memory filter's error rate (the generations: metrics_dedupe). */
static void metrics_store(prom_t *p, const commit_stats_t *s)
{
    prom_gauge(p, "store_map_bytes", "LMDB map size.", (double)s->store_map_size);
    prom_gauge(p, "store_used_bytes", "LMDB bytes in use.", (double)s->store_used_bytes);
    prom_gauge(p, "storage_failed",
               "1 while storage is failed and being re-established (every write gets 503).",
               s->storage_failed ? 1.0 : 0.0);
    prom_counter(p, "storage_recoveries_total",
                 "Times storage was re-established from disk after a failure.",
                 (double)s->recoveries);
    if (s->memory_store)
        prom_gauge(
            p, "dedupe_filter_asymptotic_fpr",
            "Memory store: the filter's asymptotic false positive rate (a lost unique event).",
            s->filter_fpr);
}

void api_metrics(api_t *api, int64_t now_ms, api_resp_t *resp)
{
    commit_stats_t s;

    commit_get_stats(api->commit, &s);
    prom_t *p = prom_new("ingestd_");
    if (!p) {
        api_error(resp, 503, "out of memory, retry later");
        return;
    }
    prom_counter(p, "events_accepted_total", "Events appended to the log.", (double)s.accepted);
    prom_counter(p, "events_duplicates_total", "Events dropped as duplicates.",
                 (double)s.duplicates);
    api_reject_metrics(api, p);
    metric_requests(p, api);
    metrics_dedupe(p, &s, now_ms);
    if (!s.memory_store)
        metrics_sources(p, api, now_ms);
    metrics_commit(p, api, &s);
    metrics_durability(p, &s);
    metrics_log(p, &s);
    metrics_groups(p, api, s.committed_offset);
    metrics_store(p, &s);
    api_tls_metrics(api, p);
    api_metrics_histograms(api, p);
    metrics_finish(api, p, resp);
}

/* Requests by status, for both /stats shapes; NULL when out of memory. */
/*
 * The edge role: no dedupe, log or commit here (the workers decide duplicates), so /stats
 * reports the role, the api's counters and the sink's own section under its role's name.
 */
void api_stats_sink(api_t *api, api_resp_t *resp)
{
    uint64_t total = 0;
    json_t *by = by_status_json(api, &total);
    char *text = api->sink.stats_json(api->sink.ctx);
    json_t *section = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    auth_keyset_t *ks = api_keys_get(api);
    size_t nkeys = auth_keyset_size(ks);
    auth_keyset_release(ks);
    if (!by || !section) {
        json_decref(by);
        json_decref(section);
        api_error(resp, 503, "out of memory, retry later");
        return;
    }
    // clang-format off
    json_t *j = json_pack(
        "{s:s, s:s, s:I,"
        " s:{s:I, s:I, s:I},"
        " s:{s:I, s:o},"
        " s:o,"
        " s:{s:I},"
        " s:{s:I, s:I, s:I}}",
        "version", INGESTD_VERSION,
        "role", api->sink.role ? api->sink.role : "sink",
        "uptime_seconds", (json_int_t)uptime_s(api),
        "events",
            "accepted", (json_int_t)load(&api->sink_accepted),
            "duplicates", (json_int_t)0,
            "rejected", (json_int_t)load(&api->rejected),
        "requests",
            "total", (json_int_t)total,
            "by_status", by,
        api->sink.role ? api->sink.role : "sink", section,
        "auth",
            "write_keys", (json_int_t)nkeys,
        "limits",
            "rate_limit", (json_int_t)api->rate_limit,
            "rate_limited_requests", (json_int_t)load(&api->rate_limited_requests),
            "rate_limited_events", (json_int_t)load(&api->rate_limited_events));
    // clang-format on
    if (!j) {
        api_error(resp, 503, "out of memory, retry later");
        return;
    }
    api_reject_stats(api, j);
    api_tls_stats(api, j);
    api_resp_json(resp, 200, j);
}

void api_metrics_sink(api_t *api, api_resp_t *resp)
{
    char *more = api->sink.metrics(api->sink.ctx);
    prom_t *p = more ? prom_new("ingestd_") : NULL;
    if (!p) {
        free(more);
        api_error(resp, 503, "out of memory, retry later");
        return;
    }
    prom_counter(p, "events_accepted_total",
                 "Events of requests answered 200 (handed on; duplicates are decided downstream).",
                 (double)load(&api->sink_accepted));
    api_reject_metrics(api, p);
    metric_requests(p, api);
    metrics_rate_limit(p, api);
    prom_text(p, more);
    free(more);
    api_tls_metrics(api, p);
    api_metrics_histograms(api, p);
    metrics_finish(api, p, resp);
}

void api_healthz(api_t *api, api_resp_t *resp)
{
    const char *why = api->has_sink ? api->sink.unhealthy(api->sink.ctx) : NULL;
    if (why) {
        /* The edge's producer failed for good: balancers should send writes elsewhere. */
        api_resp_json(resp, 503, json_pack("{s:s, s:s}", "status", "unavailable", "error", why));
        resp->retry_after = API_RETRY_AFTER_S;
        return;
    }
    if (api->has_sink) {
        api_resp_json(resp, 200, json_pack("{s:s}", "status", "ok"));
        return;
    }
    /* Unhealthy while storage is being re-established: balancers should send writes elsewhere. */
    commit_stats_t s;
    commit_get_stats(api->commit, &s);
    if (s.storage_failed) {
        api_resp_json(resp, 503,
                      json_pack("{s:s, s:s}", "status", "unavailable", "error",
                                "storage failed; re-establishing it from disk"));
        resp->retry_after = API_RETRY_AFTER_S;
    } else {
        api_resp_json(resp, 200, json_pack("{s:s}", "status", "ok"));
    }
}
