/* worker_lost.c: raw records deleted before the worker read them: what was lost, counts, stops. */
#include "cluster/worker_lost.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* One partition's tallies; kept when the partition moves away, so a scrape never goes back. */
typedef struct lost_part {
    int32_t id;
    uint64_t out_of_range;  /* positions found out of range */
    uint64_t records, keys; /* offsets moved past: never processed / keys not re-read */
    bool stopped;           /* here, now */
    lost_range_t stop;      /* what stopped it */
    int64_t since_ms;
} lost_part_t;

struct worker_lost {
    pthread_mutex_t mu;
    bool stop_policy;
    lost_part_t *parts; /* sorted by id */
    size_t n, cap;
};

void worker_lost_classify(int64_t position, int64_t repair_until, int64_t lo, int64_t hi,
                          lost_range_t *r)
{
    memset(r, 0, sizeof *r);
    r->position = position;
    r->lo = lo;
    r->hi = hi;
    r->resume_at = lo;
    if (hi >= 0 && position > hi) {
        /* Offsets that no longer exist: an unclean leader election cut the log, or the topic
         * was deleted and made again. Nothing below hi was skipped. */
        r->past_end = true;
        r->resume_at = hi;
        return;
    }
    if (position >= lo) {
        r->resume_at = position; /* in range after all (a stale answer): nothing lost */
        return;
    }
    int64_t split = position;
    if (repair_until > position) {
        split = repair_until < lo ? repair_until : lo;
        r->keys_from = position;
        r->keys_to = split;
    }
    r->records_from = split;
    r->records_to = lo > split ? lo : split;
}

bool worker_lost_stops(const lost_range_t *r)
{
    return r->past_end || r->records_to > r->records_from;
}

worker_lost_t *worker_lost_new(bool stop_policy)
{
    worker_lost_t *l = calloc(1, sizeof *l);
    if (l == NULL)
        return NULL;
    pthread_mutex_init(&l->mu, NULL);
    l->stop_policy = stop_policy;
    return l;
}

void worker_lost_free(worker_lost_t *l)
{
    if (l == NULL)
        return;
    pthread_mutex_destroy(&l->mu);
    free(l->parts);
    free(l);
}

/* The entry of `id`, or NULL; with `add`, made when missing (NULL: out of memory). Under mu. */
static lost_part_t *find(worker_lost_t *l, int32_t id, bool add)
{
    size_t i = 0;
    while (i < l->n && l->parts[i].id < id)
        i++;
    if (i < l->n && l->parts[i].id == id)
        return &l->parts[i];
    if (!add)
        return NULL;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        lost_part_t *np = realloc(l->parts, cap * sizeof *np);
        if (np == NULL)
            return NULL;
        l->parts = np;
        l->cap = cap;
    }
    memmove(&l->parts[i + 1], &l->parts[i], (l->n - i) * sizeof *l->parts);
    l->n++;
    memset(&l->parts[i], 0, sizeof *l->parts);
    l->parts[i].id = id;
    return &l->parts[i];
}

int worker_lost_found(worker_lost_t *l, int32_t partition, const lost_range_t *r, bool stop,
                      int64_t now_ms)
{
    pthread_mutex_lock(&l->mu);
    lost_part_t *e = find(l, partition, true);
    if (e != NULL) {
        e->out_of_range++;
        e->keys += (uint64_t)(r->keys_to - r->keys_from);
        if (stop) {
            e->stopped = true;
            e->stop = *r;
            e->since_ms = now_ms;
        }
    }
    pthread_mutex_unlock(&l->mu);
    return e != NULL ? 0 : -1;
}

void worker_lost_skipped(worker_lost_t *l, int32_t partition, int64_t from, int64_t to)
{
    pthread_mutex_lock(&l->mu);
    lost_part_t *e = find(l, partition, true);
    if (e != NULL) {
        if (to > from)
            e->records += (uint64_t)(to - from);
        e->stopped = false;
    }
    pthread_mutex_unlock(&l->mu);
}

void worker_lost_unassigned(worker_lost_t *l, int32_t partition)
{
    pthread_mutex_lock(&l->mu);
    lost_part_t *e = find(l, partition, false);
    if (e != NULL)
        e->stopped = false;
    pthread_mutex_unlock(&l->mu);
}

bool worker_lost_stopped(worker_lost_t *l, int32_t partition, lost_range_t *r)
{
    pthread_mutex_lock(&l->mu);
    const lost_part_t *e = find(l, partition, false);
    bool stopped = e != NULL && e->stopped;
    if (stopped && r != NULL)
        *r = e->stop;
    pthread_mutex_unlock(&l->mu);
    return stopped;
}

size_t worker_lost_stopped_count(worker_lost_t *l)
{
    size_t k = 0;
    pthread_mutex_lock(&l->mu);
    for (size_t i = 0; i < l->n; i++)
        k += l->parts[i].stopped;
    pthread_mutex_unlock(&l->mu);
    return k;
}

/* The stop's reason and range, as /stats shows them. */
static void stop_json(const lost_part_t *e, FILE *f)
{
    const lost_range_t *r = &e->stop;
    fprintf(f,
            "{\"reason\":\"%s\",\"from\":%" PRId64 ",\"to\":%" PRId64 ",\"log_start\":%" PRId64
            ",\"log_end\":%" PRId64 ",\"since_ms\":%" PRId64 "}",
            r->past_end ? "position past the log end" : "records deleted",
            r->past_end ? r->hi : r->records_from, r->past_end ? r->position : r->records_to, r->lo,
            r->hi, e->since_ms);
}

void worker_lost_json_partition(worker_lost_t *l, int32_t partition, FILE *f)
{
    pthread_mutex_lock(&l->mu);
    const lost_part_t *e = find(l, partition, false);
    fputs("\"stopped\":", f);
    if (e != NULL && e->stopped)
        stop_json(e, f);
    else
        fputs("null", f);
    pthread_mutex_unlock(&l->mu);
}

void worker_lost_json(worker_lost_t *l, FILE *f)
{
    uint64_t oor = 0, records = 0, keys = 0;
    pthread_mutex_lock(&l->mu);
    fprintf(f, "\"records_lost\":{\"on_records_lost\":\"%s\",\"stopped\":[",
            l->stop_policy ? "stop" : "continue");
    bool first = true;
    for (size_t i = 0; i < l->n; i++) {
        const lost_part_t *e = &l->parts[i];
        oor += e->out_of_range;
        records += e->records;
        keys += e->keys;
        if (!e->stopped)
            continue;
        fprintf(f, "%s{\"partition\":%" PRId32 ",\"stopped\":", first ? "" : ",", e->id);
        stop_json(e, f);
        fputc('}', f);
        first = false;
    }
    pthread_mutex_unlock(&l->mu);
    fprintf(f,
            "],\"out_of_range\":%" PRIu64 ",\"offsets_records\":%" PRIu64
            ",\"offsets_keys\":%" PRIu64 "}",
            oor, records, keys);
}

void worker_lost_prom(worker_lost_t *l, prom_t *p)
{
    char lb[64], id[16];
    size_t stopped = 0;
    pthread_mutex_lock(&l->mu);
    prom_head(p, "worker_out_of_range_total", PROM_COUNTER,
              "Times a partition's position was out of range: records deleted before they were "
              "processed, or a log shorter than the position.");
    for (size_t i = 0; i < l->n; i++) {
        lb[0] = '\0';
        snprintf(id, sizeof id, "%" PRId32, l->parts[i].id);
        prom_label(lb, sizeof lb, "partition", id);
        prom_sample_u64(p, "worker_out_of_range_total", lb, l->parts[i].out_of_range);
    }
    prom_head(p, "worker_offsets_lost_total", PROM_COUNTER,
              "Raw offsets moved past without processing: kind=records never processed (their "
              "events are not in the output), kind=keys produced already but their keys could not "
              "be re-read into the window.");
    for (size_t i = 0; i < l->n; i++) {
        const lost_part_t *e = &l->parts[i];
        snprintf(id, sizeof id, "%" PRId32, e->id);
        lb[0] = '\0';
        prom_label(lb, sizeof lb, "partition", id);
        prom_label(lb, sizeof lb, "kind", "records");
        prom_sample_u64(p, "worker_offsets_lost_total", lb, e->records);
        lb[0] = '\0';
        prom_label(lb, sizeof lb, "partition", id);
        prom_label(lb, sizeof lb, "kind", "keys");
        prom_sample_u64(p, "worker_offsets_lost_total", lb, e->keys);
        stopped += e->stopped;
    }
    pthread_mutex_unlock(&l->mu);
    prom_gauge(p, "worker_partitions_stopped",
               "Partitions stopped because records were deleted before they were processed.",
               (double)stopped);
}
