/* worker_views.c: the Kafka worker's operator views: the snapshot, /stats and /metrics. */
#include "cluster/worker.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/internal.h"
#include "cluster/partition.h"
#include "cluster/worker_lost.h"
#include "cluster/worker_sources.h"
#include "common/clock.h"
#include "common/errbuf.h"
#include "common/prom.h"
#include "storage/fsutil.h"
#include "storage/window/genset.h"
#include "storage/window/keyhash.h"
#include "storage/window/merger.h"
#include "storage/window/seal.h"
#include "storage/window/store.h"

/* ---- operator views ---- */

void worker_views_snapshot(cluster_worker_t *w)
{
    size_t cnt = 0;
    for (int32_t i = 0; i < w->nparts_cap; i++)
        cnt += w->parts[i] != NULL;
    part_snap_t *s = cnt ? calloc(cnt, sizeof *s) : NULL;
    if (cnt && s == NULL)
        return;
    size_t k = 0;
    worker_sources_begin(w->sources);
    for (int32_t i = 0; i < w->nparts_cap && k < cnt; i++) {
        part_t *p = w->parts[i];
        if (p == NULL)
            continue;
        size_t room = window_engine_sources_room(p->win);
        window_source_t *src = room ? malloc(room * sizeof *src) : NULL;
        if (src)
            worker_sources_add(w->sources, src, window_engine_tally_sources(p->win, src));
        free(src); /* out of memory: the source is left out of this tally */
        window_stats_t win;
        window_engine_stats(p->win, p->txn_open, &win);
        int64_t lo = -1, hi = -1;
        rd_kafka_get_watermark_offsets(w->consumer, w->o.raw_topic, p->id, &lo, &hi);
        s[k++] = (part_snap_t){.id = p->id,
                               .keys = win.keys,
                               .generations = win.generations,
                               .generation_keys = win.generation_keys,
                               .merges = win.merges,
                               .applied = p->applied,
                               .oldest_ms = win.oldest_received_ms,
                               .committed = p->committed,
                               .high = hi,
                               .position = (int64_t)p->applied,
                               .win = win};
    }
    worker_sources_publish(w->sources);
    pthread_mutex_lock(&w->snap_mu);
    free(w->snap);
    w->snap = s;
    w->nsnap = k;
    w->snap_c = w->c;
    pthread_mutex_unlock(&w->snap_mu);
}

/* /stats' not_ready_reason: a JSON string, or null when ready. */
static const char *not_ready_json(cluster_worker_t *w)
{
    if (!atomic_load(&w->ready))
        return "\"joining the group or waiting for the transaction coordinator\"";
    if (worker_lost_stopped_count(w->lost) > 0)
        return "\"a partition is stopped: records were deleted before they were processed "
               "(records_lost.stopped)\"";
    return "null";
}

char *cluster_worker_stats_json(cluster_worker_t *w)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL)
        return NULL;
    int64_t now = clk_wall_ms();
    pthread_mutex_lock(&w->snap_mu);
    const counters_t *c = &w->snap_c;
    fprintf(f,
            "{\"role\":\"worker\",\"ready\":%s,\"not_ready_reason\":%s,\"group\":\"%s\",\"group_"
            "instance_id\":%s%s%s,"
            "\"raw_topic\":\"%s\","
            "\"out_topic\":\"%s\",\"transactional_id\":\"%s\","
            "\"dedupe\":{\"window_seconds\":%" PRId64 ",\"max_keys\":%" PRIu64 ",\"sources\":",
            cluster_worker_ready(w) ? "true" : "false", not_ready_json(w), w->o.group,
            w->o.dynamic_membership ? "" : "\"", w->o.dynamic_membership ? "null" : w->instance_id,
            w->o.dynamic_membership ? "" : "\"", w->o.raw_topic, w->o.out_topic, w->txn_id,
            w->o.window_ms / 1000, w->o.max_keys);
    worker_sources_json(w->sources, f, now);
    fprintf(f,
            "},\"events\":{\"consumed\":%" PRIu64 ",\"produced\":%" PRIu64
            ",\"duplicates\":%" PRIu64 ",\"owner_replays\":%" PRIu64 ",\"repaired\":%" PRIu64
            ",\"malformed\":%" PRIu64 ",\"seeded\":%" PRIu64 "},"
            "\"transactions\":{\"committed\":%" PRIu64 ",\"aborted\":%" PRIu64
            ",\"producer_restarts\":%" PRIu64 "},\"consumer_restarts\":%" PRIu64
            ",\"store_errors\":%" PRIu64 ",",
            c->consumed, c->produced, c->duplicates, c->owners, c->repaired, c->malformed,
            c->seeded, c->txn_committed, c->txn_aborted, c->producer_restarts, c->consumer_restarts,
            c->store_errors);
    worker_lost_json(w->lost, f);
    fputs(",\"partitions\":[", f);
    for (size_t i = 0; i < w->nsnap; i++) {
        const part_snap_t *s = &w->snap[i];
        int64_t eff = s->keys && now > s->oldest_ms ? (now - s->oldest_ms) / 1000 : 0;
        int64_t lag =
            s->high >= 0 && s->high > (int64_t)s->applied ? s->high - (int64_t)s->applied : 0;
        fprintf(f,
                "%s{\"partition\":%" PRId32 ",\"keys\":%" PRIu64 ",\"generations\":%" PRIu64
                ",\"generation_keys\":%" PRIu64 ",\"merges\":%" PRIu64
                ",\"effective_window_seconds\":%" PRId64 ",\"applied_offset\":%" PRIu64
                ",\"committed_offset\":%" PRId64 ",\"high_watermark\":%" PRId64 ",\"lag\":%" PRId64
                ",",
                i ? "," : "", s->id, s->keys, s->generations, s->generation_keys, s->merges, eff,
                s->applied, s->committed, s->high, lag);
        worker_lost_json_partition(w->lost, s->id, f);
        /* Its window as the single node's /stats dedupe shows its own (storage/window/stats.h). */
        json_t *win = window_stats_json(&s->win, now);
        fputs(",\"window\":", f);
        if (win == NULL || json_dumpf(win, f, JSON_COMPACT) != 0)
            fputs("null", f);
        json_decref(win);
        fputc('}', f);
    }
    pthread_mutex_unlock(&w->snap_mu);
    fputs("]}", f);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* Gauge g of the partition snapshot s at wall time now (the table in cluster_worker_metrics). */
static int64_t part_gauge(const part_snap_t *s, size_t g, int64_t now)
{
    switch (g) {
    case 0:
        return (int64_t)s->keys;
    case 1:
        return s->keys && now > s->oldest_ms ? (now - s->oldest_ms) / 1000 : 0;
    case 2:
        return (int64_t)s->applied;
    case 3:
        return s->committed;
    default:
        return s->high > (int64_t)s->applied ? s->high - (int64_t)s->applied : 0;
    }
}

/* Each partition's window under the single node's names, labelled partition="ID". */
static void window_prom(prom_t *p, const part_snap_t *snap, size_t n, int64_t now)
{
    window_stats_t *ws = n ? calloc(n, sizeof *ws) : NULL;
    char(*lbs)[32] = n ? calloc(n, sizeof *lbs) : NULL;
    const char **labels = n ? calloc(n, sizeof *labels) : NULL;
    char id[16];
    if (n > 0 && (ws == NULL || lbs == NULL || labels == NULL))
        goto out; /* out of memory: /metrics goes on without them */
    for (size_t i = 0; i < n; i++) {
        ws[i] = snap[i].win;
        snprintf(id, sizeof id, "%" PRId32, snap[i].id);
        prom_label(lbs[i], sizeof lbs[i], "partition", id);
        labels[i] = lbs[i];
    }
    window_stats_prom(p, ws, labels, n, now);
out:
    free(ws);
    free(lbs);
    free(labels);
}

char *cluster_worker_metrics(cluster_worker_t *w)
{
    static const char *const events[] = {"produced", "duplicate", "owner_replay",
                                         "repaired", "malformed", "seeded"};
    static const char *const txns[] = {"committed", "aborted"};
    static const char *const gauges[][2] = {
        {"worker_partition_keys", "Keys in the partition's store."},
        {"worker_partition_effective_window_seconds", "Age of the oldest retained key."},
        {"worker_partition_applied_offset", "Raw offset the store has applied up to."},
        {"worker_partition_committed_offset", "Group offset as last committed (-1: none)."},
        {"worker_partition_lag", "High watermark minus applied offset."},
    };
    char lb[32], id[16];
    prom_t *p = prom_new("ingestd_");
    if (p == NULL)
        return NULL;
    int64_t now = clk_wall_ms();
    pthread_mutex_lock(&w->snap_mu);
    const counters_t *c = &w->snap_c;
    const uint64_t nev[] = {c->produced, c->duplicates, c->owners,
                            c->repaired, c->malformed,  c->seeded};
    const uint64_t ntx[] = {c->txn_committed, c->txn_aborted};
    prom_head(p, "worker_events_total", PROM_COUNTER, "Raw-topic records by outcome.");
    cluster_prom_outcomes(p, "worker_events_total", events, nev, 6);
    prom_head(p, "worker_transactions_total", PROM_COUNTER, "Kafka transactions by outcome.");
    cluster_prom_outcomes(p, "worker_transactions_total", txns, ntx, 2);
    prom_counter(p, "worker_producer_restarts_total", "Producers replaced after fatal errors.",
                 (double)c->producer_restarts);
    prom_counter(p, "worker_consumer_restarts_total",
                 "Consumers replaced after fatal errors (a static member fenced).",
                 (double)c->consumer_restarts);
    prom_gauge(p, "worker_ready",
               "1 when assigned, the producer is ready and no partition is stopped.",
               cluster_worker_ready(w) ? 1 : 0);
    for (size_t g = 0; g < sizeof gauges / sizeof gauges[0]; g++) {
        prom_head(p, gauges[g][0], PROM_GAUGE, gauges[g][1]);
        for (size_t i = 0; i < w->nsnap; i++) {
            lb[0] = '\0';
            snprintf(id, sizeof id, "%" PRId32, w->snap[i].id);
            prom_label(lb, sizeof lb, "partition", id);
            prom_sample_i64(p, gauges[g][0], lb, part_gauge(&w->snap[i], g, now));
        }
    }
    window_prom(p, w->snap, w->nsnap, now);
    pthread_mutex_unlock(&w->snap_mu);
    worker_sources_prom(w->sources, p, now);
    worker_lost_prom(w->lost, p);
    return prom_take(p, NULL);
}
