/* worker_lookup.c: the Kafka worker's answers to the operator thread (lookups, resumes),
 * given by the consuming thread between batches. */
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

/* ---- lookups (cluster_worker_lookup) ---- */

/*
 * The key of (source, mid) in partition p: its young store, then its sealed generations (a key
 * is in one of them). *found, where (e), and the receivedAt of the partition's oldest key
 * (*oldest_ms, 0 when it has none). A store status.
 */
static int lookup_part(const part_t *p, const lookup_q_t *q, bool *found, store_entry_t *e,
                       int64_t *oldest_ms)
{
    uint8_t key[KEYHASH_LEN];
    keyhash(p->secret, q->source, q->source_len, q->mid, q->mid_len, key);
    return window_engine_lookup(p->win, key, found, e, oldest_ms);
}

/* The raw topic's partition count from the consumer's metadata; -1 when unknown. */
static int32_t raw_partitions(cluster_worker_t *w)
{
    const struct rd_kafka_metadata *md = NULL;
    int32_t count = -1;
    if (rd_kafka_metadata(w->consumer, 0, NULL, &md, 2000) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return -1;
    for (int i = 0; i < md->topic_cnt; i++)
        if (strcmp(md->topics[i].topic, w->o.raw_topic) == 0 && md->topics[i].err == 0)
            count = md->topics[i].partition_cnt;
    rd_kafka_metadata_destroy(md);
    return count;
}

static int answer_lookup(cluster_worker_t *w, const lookup_q_t *q, cluster_lookup_t *out)
{
    char kbuf[CLUSTER_KEY_MAX];
    store_entry_t e;
    int64_t oldest = 0;
    bool found;
    memset(out, 0, sizeof(*out));
    for (int32_t i = 0; i < w->nparts_cap; i++) {
        const part_t *p = w->parts[i];
        if (p == NULL)
            continue;
        if (lookup_part(p, q, &found, &e, &oldest) != STORE_OK)
            return CLUSTER_STORE;
        if (found) {
            *out = (cluster_lookup_t){.status = CLUSTER_LOOKUP_SEEN,
                                      .partition = p->id,
                                      .offset = e.offset,
                                      .received_ms = e.received_ms};
            return CLUSTER_OK;
        }
    }
    size_t klen =
        cluster_key_encode(q->source, q->source_len, q->mid, q->mid_len, kbuf, sizeof(kbuf));
    int32_t count = klen ? raw_partitions(w) : -1;
    out->status = CLUSTER_LOOKUP_NOT_OWNED;
    out->partition = count > 0 ? cluster_partition_of_key(kbuf, klen, count) : -1;
    const part_t *p = out->partition >= 0 ? worker_part_get(w, out->partition) : NULL;
    if (p != NULL) {
        if (lookup_part(p, q, &found, &e, &oldest) != STORE_OK)
            return CLUSTER_STORE;
        out->status = CLUSTER_LOOKUP_UNSEEN;
        out->window_start_ms = oldest;
    }
    return CLUSTER_OK;
}

/* Answers every queued lookup (the run() thread, between batches). */
void worker_lookup_answer_all(cluster_worker_t *w)
{
    pthread_mutex_lock(&w->lk_mu);
    lookup_q_t *list = w->lookups;
    w->lookups = NULL;
    for (lookup_q_t *q = list; q; q = q->next)
        q->taken = true;
    pthread_mutex_unlock(&w->lk_mu);
    if (list == NULL)
        return;
    for (lookup_q_t *q = list; q; q = q->next)
        q->rc = q->rout ? worker_part_resume(w, q->resume, q->rout) : answer_lookup(w, q, q->out);
    pthread_mutex_lock(&w->lk_mu);
    for (lookup_q_t *q = list, *next; q; q = next) {
        next = q->next; /* q is the caller's once answered */
        q->answered = true;
    }
    pthread_cond_broadcast(&w->lk_cv);
    pthread_mutex_unlock(&w->lk_mu);
}

/* Queues q for the run() thread and waits up to timeout_ms for it to be taken (then until it
 * is answered). q->rc: the answer's, or CLUSTER_TIMEOUT. */
static int ask(cluster_worker_t *w, lookup_q_t *q, int timeout_ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (dl.tv_nsec >= 1000000000) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000;
    }
    q->rc = CLUSTER_TIMEOUT;
    pthread_mutex_lock(&w->lk_mu);
    q->next = w->lookups;
    /* q lives until answered: the answering thread takes the whole list off before it sets
     * `answered`, and this thread waits for that below. */
    w->lookups = q;
    while (!q->answered) {
        if (q->taken) {
            pthread_cond_wait(&w->lk_cv, &w->lk_mu); /* being answered: q must outlive it */
        } else if (pthread_cond_timedwait(&w->lk_cv, &w->lk_mu, &dl) != 0 && !q->taken) {
            /* run() did not get to it: take it back off the queue before it goes */
            lookup_q_t **pp = &w->lookups;
            while (*pp != q)
                pp = &(*pp)->next;
            *pp = q->next;
            break;
        }
    }
    pthread_mutex_unlock(&w->lk_mu);
    return q->rc;
}

int cluster_worker_lookup(cluster_worker_t *w, const char *source, size_t source_len,
                          const char *message_id, size_t message_id_len, int timeout_ms,
                          cluster_lookup_t *out)
{
    lookup_q_t q = {.source = source,
                    .source_len = source_len,
                    .mid = message_id,
                    .mid_len = message_id_len,
                    .out = out};
    if (source_len == 0)
        return CLUSTER_EINVAL;
    return ask(w, &q, timeout_ms);
}

int cluster_worker_resume(cluster_worker_t *w, int32_t partition, int timeout_ms,
                          cluster_resume_t *out)
{
    lookup_q_t q = {.resume = partition, .rout = out};
    if (partition < 0)
        return CLUSTER_EINVAL;
    return ask(w, &q, timeout_ms);
}

size_t cluster_worker_stopped_partitions(cluster_worker_t *w)
{
    return worker_lost_stopped_count(w->lost);
}
