/* edge.c: the edge's sink: route, produce, answer each request once its deliveries are in. */
#include "cluster/edge.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster/internal.h"
#include "cluster/partition.h"
#include "cluster/producer.h"
#include "common/clock.h"
#include "common/errbuf.h"
#include "common/prom.h"

#define MAX_OPTS      256 /* pass-through options at most (config allows fewer) */
#define ANSWER_CHUNK  64  /* requests answered per pass of the timer (outside the lock) */
#define IDLE_WAIT_MS  1000
#define MSG_FAILED    "kafka did not take every event of this request, retry later"
#define MSG_TIMEOUT   "kafka did not confirm every event of this request in time, retry later"
#define MSG_SHUTDOWN  "server is shutting down, retry later"
#define MSG_FATAL     "the kafka producer failed fatally; restart this edge"
#define FATAL_WHY_LEN 256

/*
 * One request waiting for its delivery reports. It lives until its batch's
 * completion callback, which always frees it; the timer or quiesce may answer
 * it before (answered = true, moved to the `late` list), and the callback
 * then only counts.
 */
struct ereq {
    cluster_edge_t *e;
    cluster_batch_t *b;
    api_sink_done_fn done;
    void *arg;
    int64_t deadline_ms; /* CLOCK_MONOTONIC */
    bool answered;       /* under e->mu: in `late`, else in `waiting` */
    struct ereq *prev, *next;
};

struct list {
    struct ereq *head, *tail;
    uint64_t n;
};

struct cluster_edge {
    cluster_producer_t *producer;
    cluster_partitioner_t *part;
    char *topic;
    int32_t partitions, partitions_before;
    int64_t repartition_at_ms;
    int timeout_ms;
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* wakes the timer: a new head, or stop */
    struct list waiting; /* unanswered, oldest (earliest deadline) first */
    struct list late;    /* answered by the timer/quiesce, reports still to come */
    bool stop;
    bool mu_ok, cv_ok, timer_started; /* what cluster_edge_free must undo */
    pthread_t timer;
    atomic_bool closing;
    atomic_uint_fast64_t produced, delivered, failed, refused_events;
    atomic_uint_fast64_t req_delivered, req_failed, req_timed_out, req_refused;
    char timeout_opt[64]; /* "message.timeout.ms=N", first of opts */
    const char **opts;    /* timeout_opt + the caller's, borrowed strings */
};

static void list_push(struct list *l, struct ereq *r)
{
    r->next = NULL;
    r->prev = l->tail;
    if (l->tail != NULL)
        l->tail->next = r;
    else
        l->head = r;
    l->tail = r;
    l->n++;
}

static void list_unlink(struct list *l, struct ereq *r)
{
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        l->head = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    else
        l->tail = r->prev;
    r->prev = r->next = NULL;
    l->n--;
}

static void add(atomic_uint_fast64_t *a, uint64_t n)
{
    atomic_fetch_add_explicit(a, n, memory_order_relaxed);
}

static uint64_t load(atomic_uint_fast64_t *a)
{
    return (uint64_t)atomic_load_explicit(a, memory_order_relaxed);
}

/* A batch nobody waits for any more (its request was refused): only count its reports. */
static void count_only(cluster_batch_t *b, void *arg)
{
    cluster_edge_t *e = arg;
    uint64_t d, f, pending;
    cluster_batch_counts(b, &d, &f, &pending);
    add(&e->delivered, d);
    add(&e->failed, f);
    cluster_batch_release(b);
}

/* Every report of r's batch is in (poll thread, or the submitting thread). */
static void on_complete(cluster_batch_t *b, void *arg)
{
    struct ereq *r = arg;
    cluster_edge_t *e = r->e;
    uint64_t d, f, pending;

    cluster_batch_counts(b, &d, &f, &pending);
    add(&e->delivered, d);
    add(&e->failed, f);
    pthread_mutex_lock(&e->mu);
    bool mine = !r->answered;
    list_unlink(mine ? &e->waiting : &e->late, r);
    r->answered = true;
    pthread_mutex_unlock(&e->mu);
    if (mine) {
        add(f > 0 ? &e->req_failed : &e->req_delivered, 1);
        r->done(f > 0 ? MSG_FAILED : NULL, r->arg);
    }
    cluster_batch_release(b);
    free(r);
}

/*
 * Answers `why` to the waiting requests whose deadline is at or before
 * `cutoff`, a chunk at a time: the callbacks run outside the lock, with
 * done/arg copied first (the completion may free r as soon as the lock is
 * released). Returns how many were answered.
 */
static uint64_t answer_due(cluster_edge_t *e, int64_t cutoff, const char *why,
                           atomic_uint_fast64_t *counter)
{
    struct {
        api_sink_done_fn done;
        void *arg;
    } due[ANSWER_CHUNK];
    uint64_t total = 0;
    size_t n;

    do {
        n = 0;
        pthread_mutex_lock(&e->mu);
        while (n < ANSWER_CHUNK && e->waiting.head != NULL &&
               e->waiting.head->deadline_ms <= cutoff) {
            struct ereq *r = e->waiting.head;
            list_unlink(&e->waiting, r);
            r->answered = true;
            list_push(&e->late, r);
            due[n].done = r->done;
            due[n].arg = r->arg;
            n++;
        }
        pthread_mutex_unlock(&e->mu);
        for (size_t i = 0; i < n; i++)
            due[i].done(why, due[i].arg);
        add(counter, n);
        total += n;
    } while (n == ANSWER_CHUNK);
    return total;
}

/* The timer: answers 503 to requests whose reports did not come within the timeout. */
static void *timer_main(void *arg)
{
    cluster_edge_t *e = arg;

    pthread_mutex_lock(&e->mu);
    while (!e->stop) {
        int64_t now = clk_mono_ms();
        int64_t wake = now + IDLE_WAIT_MS;
        if (e->waiting.head != NULL && e->waiting.head->deadline_ms <= now) {
            pthread_mutex_unlock(&e->mu);
            answer_due(e, now, MSG_TIMEOUT, &e->req_timed_out);
            pthread_mutex_lock(&e->mu);
            continue;
        }
        if (e->waiting.head != NULL && e->waiting.head->deadline_ms < wake)
            wake = e->waiting.head->deadline_ms;
        struct timespec until = {.tv_sec = wake / 1000, .tv_nsec = (long)(wake % 1000) * 1000000L};
        pthread_cond_timedwait(&e->cv, &e->mu, &until);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* Refuses the request now: what was queued already is delivered (or not) on its own. */
static int refuse(cluster_edge_t *e, cluster_batch_t *b, size_t n)
{
    add(&e->req_refused, 1);
    add(&e->refused_events, n);
    if (b != NULL)
        cluster_batch_on_complete(b, count_only, e);
    return -1;
}

static int edge_submit(void *ctx, const char *source, int64_t received_ms,
                       const api_sink_event_t *events, size_t n, api_sink_done_fn done, void *arg)
{
    cluster_edge_t *e = ctx;
    char key[CLUSTER_KEY_MAX];
    size_t slen = strlen(source);

    if (atomic_load(&e->closing) || cluster_producer_fatal(e->producer, NULL, 0))
        return refuse(e, NULL, n);
    struct ereq *r = calloc(1, sizeof *r);
    cluster_batch_t *b = cluster_batch_new();
    if (r == NULL || b == NULL) {
        free(r);
        cluster_batch_release(b);
        return refuse(e, NULL, n);
    }
    for (size_t i = 0; i < n; i++) {
        const api_sink_event_t *ev = &events[i];
        size_t klen =
            cluster_key_encode(source, slen, ev->message_id, ev->message_id_len, key, sizeof key);
        /* The api bounds source and messageId well below the key limit; refuse rather than
         * route an event by a key the workers would not see. */
        if (klen == 0) {
            free(r);
            return refuse(e, b, n);
        }
        int32_t p = cluster_partition_for(e->part, source, slen, ev->message_id, ev->message_id_len,
                                          ev->timestamp_ms);
        if (cluster_producer_send(e->producer, p, key, klen, ev->data, ev->len, received_ms, b) !=
            CLUSTER_OK) {
            free(r);
            return refuse(e, b, n);
        }
        add(&e->produced, 1);
    }
    r->e = e;
    r->b = b;
    r->done = done;
    r->arg = arg;
    pthread_mutex_lock(&e->mu);
    /* Taken under the lock, so the list stays in deadline order for the timer. */
    r->deadline_ms = clk_mono_ms() + e->timeout_ms;
    bool first = e->waiting.head == NULL;
    list_push(&e->waiting, r);
    if (first)
        pthread_cond_signal(&e->cv); /* the timer may sleep longer than this deadline */
    pthread_mutex_unlock(&e->mu);
    /* From here r belongs to the completion (which may run right now, on this thread). */
    cluster_batch_on_complete(b, on_complete, r);
    return 0;
}

static void snapshot(cluster_edge_t *e, cluster_edge_stats_t *s, char *fatal, size_t fatal_len)
{
    memset(s, 0, sizeof *s);
    s->raw_topic = e->topic;
    s->partitions = e->partitions;
    s->partitions_before = e->partitions_before;
    s->repartition_at_ms = e->repartition_at_ms;
    s->timeout_ms = e->timeout_ms;
    s->events_produced = load(&e->produced);
    s->events_delivered = load(&e->delivered);
    s->events_failed = load(&e->failed);
    s->events_refused = load(&e->refused_events);
    pthread_mutex_lock(&e->mu);
    s->requests_waiting = e->waiting.n;
    pthread_mutex_unlock(&e->mu);
    s->requests_delivered = load(&e->req_delivered);
    s->requests_failed = load(&e->req_failed);
    s->requests_timed_out = load(&e->req_timed_out);
    s->requests_refused = load(&e->req_refused);
    s->fatal = cluster_producer_fatal(e->producer, fatal, fatal_len) ? fatal : NULL;
}

static char *edge_stats(void *ctx)
{
    cluster_edge_stats_t s;
    char fatal[FATAL_WHY_LEN];
    snapshot(ctx, &s, fatal, sizeof fatal);
    return cluster_edge_stats_json(&s);
}

static char *edge_metrics(void *ctx)
{
    cluster_edge_stats_t s;
    char fatal[FATAL_WHY_LEN];
    snapshot(ctx, &s, fatal, sizeof fatal);
    return cluster_edge_metrics_text(&s);
}

static const char *edge_unhealthy(void *ctx)
{
    cluster_edge_t *e = ctx;
    return cluster_producer_fatal(e->producer, NULL, 0) ? MSG_FATAL : NULL;
}

void cluster_edge_sink(cluster_edge_t *e, api_sink_t *sink)
{
    memset(sink, 0, sizeof *sink);
    sink->submit = edge_submit;
    sink->stats_json = edge_stats;
    sink->metrics = edge_metrics;
    sink->unhealthy = edge_unhealthy;
    sink->role = "edge";
    sink->ctx = e;
}

int32_t cluster_edge_partitions(const cluster_edge_t *e)
{
    return e->partitions;
}

/* A new edge's state, counters and locks; its producer is not there yet. NULL: out of memory. */
static cluster_edge_t *edge_alloc(const cluster_edge_options_t *o)
{
    pthread_condattr_t ca;
    cluster_edge_t *e = calloc(1, sizeof *e);
    if (e == NULL)
        return NULL;
    e->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : CLUSTER_EDGE_TIMEOUT_MS;
    e->partitions_before = o->partitions_before;
    e->repartition_at_ms = o->repartition_at_ms;
    atomic_init(&e->closing, false);
    atomic_init(&e->produced, 0);
    atomic_init(&e->delivered, 0);
    atomic_init(&e->failed, 0);
    atomic_init(&e->refused_events, 0);
    atomic_init(&e->req_delivered, 0);
    atomic_init(&e->req_failed, 0);
    atomic_init(&e->req_timed_out, 0);
    atomic_init(&e->req_refused, 0);
    e->topic = strdup(o->raw_topic);
    e->opts = calloc(o->opts.n + 1, sizeof *e->opts);
    if (e->topic == NULL || e->opts == NULL || pthread_mutex_init(&e->mu, NULL) != 0)
        goto fail;
    e->mu_ok = true;
    /* The timer sleeps on CLOCK_MONOTONIC: a wall-clock step must not fire or stall deadlines. */
    if (pthread_condattr_init(&ca) != 0)
        goto fail;
    e->cv_ok =
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 && pthread_cond_init(&e->cv, &ca) == 0;
    pthread_condattr_destroy(&ca);
    if (!e->cv_ok)
        goto fail;
    return e;
fail:
    cluster_edge_free(e, 0);
    return NULL;
}

/* The producer on the raw topic, its partition count and the partitioner. CLUSTER_OK or why not. */
static int edge_connect(cluster_edge_t *e, const cluster_edge_options_t *o, char *err,
                        size_t errlen)
{
    /* librdkafka gives up on a message after message.timeout.ms (default 5 minutes): bound it by
     * the request's timeout, so a report never comes long after the 503. An explicit
     * --kafka-opt comes later in the list and wins. */
    snprintf(e->timeout_opt, sizeof e->timeout_opt, "message.timeout.ms=%d", e->timeout_ms);
    e->opts[0] = e->timeout_opt;
    for (size_t i = 0; i < o->opts.n; i++)
        e->opts[i + 1] = o->opts.kv[i];
    cluster_producer_options_t po = {
        .brokers = o->brokers,
        .topic = o->raw_topic,
        .opts = {.kv = e->opts, .n = o->opts.n + 1},
    };
    int rc = cluster_producer_new(&po, &e->producer, err, errlen);
    if (rc != CLUSTER_OK)
        return rc;
    rc = cluster_producer_partitions(
        e->producer, o->metadata_timeout_ms > 0 ? o->metadata_timeout_ms : 10000, &e->partitions);
    if (rc != CLUSTER_OK) {
        errbuf_printf(err, errlen, "raw topic %s: %s (the topic must exist: create it first)",
                      o->raw_topic,
                      rc == CLUSTER_TIMEOUT ? "no metadata from the cluster in time"
                                            : "no partition count in the cluster's metadata");
        return rc;
    }
    cluster_partition_config_t pc = {.partitions = e->partitions,
                                     .partitions_before = o->partitions_before,
                                     .repartition_at_ms = o->repartition_at_ms};
    if ((rc = cluster_partitioner_new(&pc, &e->part)) != CLUSTER_OK) {
        errbuf_printf(err, errlen,
                      "--partitions-before %" PRId32 " does not fit raw topic %s with %" PRId32
                      " partitions (it must be 1..%" PRId32 ")",
                      o->partitions_before, o->raw_topic, e->partitions, e->partitions);
        return rc;
    }
    return CLUSTER_OK;
}

int cluster_edge_new(const cluster_edge_options_t *o, cluster_edge_t **out, char *err,
                     size_t errlen)
{
    cluster_edge_t *e = NULL;
    int rc;

    *out = NULL;
    if (o == NULL || o->brokers == NULL || o->brokers[0] == '\0' || o->raw_topic == NULL ||
        o->raw_topic[0] == '\0' || o->opts.n > MAX_OPTS || o->timeout_ms < 0 ||
        o->partitions_before < 0 || (o->partitions_before > 0 && o->repartition_at_ms <= 0)) {
        errbuf_printf(err, errlen,
                      "edge: brokers and raw topic are required (and a cut-over with "
                      "partitions_before)");
        return CLUSTER_EINVAL;
    }
    e = edge_alloc(o);
    if (e == NULL) {
        errbuf_printf(err, errlen, "out of memory");
        return CLUSTER_NOMEM;
    }
    if ((rc = edge_connect(e, o, err, errlen)) != CLUSTER_OK)
        goto fail;
    if (pthread_create(&e->timer, NULL, timer_main, e) != 0) {
        errbuf_printf(err, errlen, "cannot start the edge's timer thread");
        rc = CLUSTER_NOMEM;
        goto fail;
    }
    e->timer_started = true;
    *out = e;
    return CLUSTER_OK;
fail:
    cluster_edge_free(e, 0);
    return rc;
}

void cluster_edge_quiesce(cluster_edge_t *e)
{
    if (e == NULL)
        return;
    atomic_store(&e->closing, true);
    answer_due(e, INT64_MAX, MSG_SHUTDOWN, &e->req_failed);
}

void cluster_edge_free(cluster_edge_t *e, int flush_ms)
{
    if (e == NULL)
        return;
    if (e->mu_ok)
        cluster_edge_quiesce(e);
    if (e->timer_started) {
        pthread_mutex_lock(&e->mu);
        e->stop = true;
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->timer, NULL);
    }
    /* Completions still to come run inside (and free their requests); e must stay alive. */
    cluster_producer_free(e->producer, flush_ms);
    /* Requests whose reports librdkafka dropped at destroy: nobody else will free them. */
    while (e->late.head != NULL) {
        struct ereq *r = e->late.head;
        list_unlink(&e->late, r);
        free(r);
    }
    cluster_partitioner_free(e->part);
    if (e->cv_ok)
        pthread_cond_destroy(&e->cv);
    if (e->mu_ok)
        pthread_mutex_destroy(&e->mu);
    free(e->opts);
    free(e->topic);
    free(e);
}

/* ---- rendering (pure) ---- */

/* Appends a JSON string; a Kafka topic name is [a-zA-Z0-9._-], escaped anyway. */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s != NULL && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* Closes the memstream; *buf is only set by the close. */
static char *finish(FILE *f, char **buf)
{
    if (fclose(f) != 0) {
        free(*buf);
        return NULL;
    }
    return *buf;
}

char *cluster_edge_stats_json(const cluster_edge_stats_t *s)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL)
        return NULL;
    fputs("{\"raw_topic\":", f);
    json_str(f, s->raw_topic);
    fprintf(f,
            ",\"partitions\":%" PRId32 ",\"partitions_before\":%" PRId32
            ",\"repartition_at_ms\":%" PRId64 ",\"delivery_timeout_ms\":%d"
            ",\"events\":{\"produced\":%" PRIu64 ",\"delivered\":%" PRIu64 ",\"failed\":%" PRIu64
            ",\"refused\":%" PRIu64 "}"
            ",\"requests\":{\"waiting\":%" PRIu64 ",\"delivered\":%" PRIu64 ",\"failed\":%" PRIu64
            ",\"timed_out\":%" PRIu64 ",\"refused\":%" PRIu64 "},\"producer_fatal\":",
            s->partitions, s->partitions_before,
            s->partitions_before > 0 ? s->repartition_at_ms : 0, s->timeout_ms, s->events_produced,
            s->events_delivered, s->events_failed, s->events_refused, s->requests_waiting,
            s->requests_delivered, s->requests_failed, s->requests_timed_out, s->requests_refused);
    if (s->fatal != NULL)
        json_str(f, s->fatal);
    else
        fputs("null", f);
    fputc('}', f);
    return finish(f, &buf);
}

char *cluster_edge_metrics_text(const cluster_edge_stats_t *s)
{
    static const char *const events[] = {"produced", "delivered", "failed", "refused"};
    static const char *const requests[] = {"delivered", "failed", "timed_out", "refused"};
    const uint64_t ev[] = {s->events_produced, s->events_delivered, s->events_failed,
                           s->events_refused};
    const uint64_t rq[] = {s->requests_delivered, s->requests_failed, s->requests_timed_out,
                           s->requests_refused};
    prom_t *p = prom_new("ingestd_");
    if (p == NULL)
        return NULL;
    prom_head(p, "edge_events_total", PROM_COUNTER,
              "Events of the edge by outcome: produced (queued), delivered (acks=all), failed, "
              "refused (librdkafka refused the request at once).");
    cluster_prom_outcomes(p, "edge_events_total", events, ev, 4);
    prom_head(p, "edge_requests_total", PROM_COUNTER,
              "Ingest requests the edge answered, by outcome (all but delivered got 503).");
    cluster_prom_outcomes(p, "edge_requests_total", requests, rq, 4);
    prom_gauge(p, "edge_requests_waiting", "Requests waiting for their delivery reports.",
               (double)s->requests_waiting);
    prom_gauge(p, "edge_partitions", "Partitions of the raw topic the edge routes over.",
               s->partitions);
    prom_gauge(p, "edge_partitions_before",
               "Partition count used for events before the cut-over (0: no repartition).",
               s->partitions_before);
    prom_gauge(p, "edge_repartition_at_seconds",
               "The repartition cut-over, seconds since the epoch (0: none).",
               s->partitions_before > 0 ? (double)s->repartition_at_ms / 1000.0 : 0.0);
    prom_gauge(p, "edge_producer_fatal", "1 when the Kafka producer failed fatally.",
               s->fatal != NULL ? 1 : 0);
    return prom_take(p, NULL);
}
