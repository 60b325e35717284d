/* worker.c: the Kafka worker role: per-partition LMDB dedupe between two topics, exactly once: the
 * loop, one batch, and the worker's life (new, run, free). */
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
#include "storage/datadir.h"
#include "storage/fsutil.h"
#include "storage/window/genset.h"
#include "storage/window/keyhash.h"
#include "storage/window/merger.h"
#include "storage/window/seal.h"
#include "storage/window/store.h"

void worker_log(cluster_worker_t *w, int level, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    if (w->o.log == NULL)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    w->o.log(w->o.log_arg, level, msg);
}

void worker_crash_hook(cluster_worker_t *w, const char *point)
{
    if (w->crash_point[0] == '\0' || strcmp(point, w->crash_point) != 0)
        return;
    if (++w->crash_seen == w->crash_after) {
        worker_log(w, 1, "test hook: %s at %s #%ld", w->crash_stop ? "SIGSTOP" : "SIGKILL", point,
                   w->crash_seen);
        raise(w->crash_stop ? SIGSTOP : SIGKILL);
    }
}

/* DATA/worker-id: 16 hex digits, random at first start, kept across restarts. */
static int worker_id(const char *data_dir, char id[17], char *err, size_t errlen)
{
    char path[4096];
    if (datadir_put(path, sizeof path, data_dir, DATADIR_WORKER_ID) != 0) {
        errbuf_printf(err, errlen, "%s: path too long", data_dir);
        return CLUSTER_EINVAL;
    }
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        bool ok = fscanf(f, "%16[0-9a-f]", id) == 1 && strlen(id) == 16;
        fclose(f);
        if (ok)
            return CLUSTER_OK;
        errbuf_printf(err, errlen, "%s: not a worker id (16 hex digits)", path);
        return CLUSTER_EINVAL;
    }
    uint8_t r[8];
    if (keyhash_random(r, sizeof r) != 0) {
        errbuf_printf(err, errlen, "no randomness for the worker id: %s", strerror(errno));
        return CLUSTER_STORE;
    }
    for (int i = 0; i < 8; i++)
        snprintf(id + 2 * i, 3, "%02x", r[i]);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    f = fopen(tmp, "w");
    if (f == NULL || fprintf(f, "%s\n", id) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0 ||
        fclose(f) != 0 || rename(tmp, path) != 0) {
        errbuf_printf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return CLUSTER_STORE;
    }
    return CLUSTER_OK;
}

int cluster_worker_new(const cluster_worker_options_t *o, cluster_worker_t **out, char *err,
                       size_t errlen)
{
    cluster_worker_t *w = NULL;
    char id[17] = "";
    int rc;

    *out = NULL;
    if (o == NULL || !o->brokers || !o->raw_topic || !o->out_topic || !o->group || !o->data_dir ||
        !o->brokers[0] || !o->raw_topic[0] || !o->out_topic[0] || !o->group[0] || !o->data_dir[0]) {
        errbuf_printf(err, errlen,
                      "--kafka-brokers, --raw-topic, --out-topic, --group and --data are "
                      "required");
        return CLUSTER_EINVAL;
    }
    if (strcmp(o->raw_topic, o->out_topic) == 0) {
        errbuf_printf(err, errlen, "--raw-topic and --out-topic must differ");
        return CLUSTER_EINVAL;
    }
    if (o->window_ms <= 0) {
        errbuf_printf(err, errlen, "--window must be positive");
        return CLUSTER_EINVAL;
    }
    if (fsutil_mkdirs(o->data_dir) != 0) {
        errbuf_printf(err, errlen, "cannot create %s: %s", o->data_dir, strerror(errno));
        return CLUSTER_STORE;
    }
    if ((rc = worker_id(o->data_dir, id, err, errlen)))
        return rc;
    w = calloc(1, sizeof *w);
    if (w == NULL)
        return CLUSTER_NOMEM;
    w->o = *o;
    if (w->o.max_batch == 0)
        w->o.max_batch = DEFAULT_MAX_BATCH;
    if (w->o.batch_ms <= 0)
        w->o.batch_ms = DEFAULT_BATCH_MS;
    pthread_mutex_init(&w->snap_mu, NULL);
    pthread_mutex_init(&w->lk_mu, NULL);
    pthread_cond_init(&w->lk_cv, NULL);
    if ((w->sources = worker_sources_new()) == NULL ||
        (w->lost = worker_lost_new(!o->continue_on_lost)) == NULL) {
        cluster_worker_free(w);
        return CLUSTER_NOMEM;
    }
    genset_policy_t gp =
        genset_policy_for(w->o.window_ms, w->o.max_keys, worker_part_young_keys(w));
    if ((rc = merger_new(&gp, worker_part_on_merge_fail, w, &w->merger)) != 0) {
        errbuf_printf(err, errlen, "starting the merger thread: %s", strerror(rc));
        cluster_worker_free(w);
        return CLUSTER_NOMEM;
    }
    atomic_init(&w->stop, false);
    atomic_init(&w->ready, false);
    snprintf(w->txn_id, sizeof w->txn_id, "%s-%s-%s",
             o->txn_id_prefix ? o->txn_id_prefix : "ingestd", o->group, id);
    /* Brokers refuse a group.instance.id outside [A-Za-z0-9._-] or over 249 bytes; a group
     * name may hold other characters. The worker id at the end keeps it unique. */
    size_t tl = strlen(w->txn_id), keep = sizeof w->instance_id - 1 - 17;
    snprintf(w->instance_id, sizeof w->instance_id, "%.*s-%s",
             (int)(tl - 17 < keep ? tl - 17 : keep), w->txn_id, id);
    for (char *c = w->instance_id; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '.' && *c != '_' && *c != '-')
            *c = '_';
    const char *crash = getenv(CLUSTER_CRASH_ENV);
    if (crash != NULL && crash[0] != '\0') {
        const char *colon = strchr(crash, ':');
        size_t n = colon ? (size_t)(colon - crash) : strlen(crash);
        if (n < sizeof w->crash_point) {
            memcpy(w->crash_point, crash, n);
            w->crash_after = colon ? strtol(colon + 1, NULL, 10) : 1;
            const char *mode = colon ? strchr(colon + 1, ':') : NULL;
            w->crash_stop = mode != NULL && strcmp(mode + 1, "stop") == 0;
        }
    }
    if ((rc = worker_kafka_clients_new(w, err, errlen))) {
        cluster_worker_free(w);
        return rc;
    }
    *out = w;
    return CLUSTER_OK;
}

void cluster_worker_stop(cluster_worker_t *w)
{
    atomic_store(&w->stop, true);
}

bool cluster_worker_ready(cluster_worker_t *w)
{
    return atomic_load(&w->ready) && worker_lost_stopped_count(w->lost) == 0;
}

/* ---- one batch ---- */

static void abort_stores(cluster_worker_t *w)
{
    for (int32_t i = 0; i < w->nparts_cap; i++) {
        part_t *p = w->parts[i];
        if (p != NULL && p->txn_open) {
            window_engine_abort(p->win); /* the batch's keys and evictions go with it */
            p->txn_open = false;
        }
        if (p != NULL) {
            p->batch_last = -1;
            p->needs_kafka = false;
        }
    }
}

enum step { STEP_OK, STEP_GROW, STEP_FAIL };

/* Opens p's write transaction for a batch of n, age eviction first, as single-node does: a key
 * out of the window is forgotten. A store status. */
static int part_begin(part_t *p, const window_policy_t *wp, int64_t now, size_t n)
{
    int src = store_txn_begin(window_engine_store(p->win));
    if (src != STORE_OK)
        return src;
    p->txn_open = true;
    return window_engine_evict(p->win, window_before_batch(wp, now, n));
}

/* Whether m is a seed record (cluster.h): a single node's event, its key to remember only. */
static bool is_seed(const rd_kafka_message_t *m)
{
    rd_kafka_headers_t *hdrs = NULL;
    const void *val;
    size_t len;
    return rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR &&
           rd_kafka_header_get_last(hdrs, CLUSTER_HEADER_SEED, &val, &len) ==
               RD_KAFKA_RESP_ERR_NO_ERROR;
}

/* One raw message m of partition p: its key into the store, counted; *produce when it goes
 * to the output topic. A store status (a malformed key is counted and skipped). */
static int stage_one(cluster_worker_t *w, part_t *p, const rd_kafka_message_t *m, int64_t now,
                     counters_t *c, bool *produce)
{
    const char *src_s, *mid;
    size_t src_len, mid_len;
    uint8_t key[KEYHASH_LEN];
    rd_kafka_timestamp_type_t tst;
    bool dup = false, present = false;
    uint64_t owner = 0;
    int src;

    if (cluster_key_decode(m->key, m->key_len, &src_s, &src_len, &mid, &mid_len) != CLUSTER_OK) {
        c->malformed++;
        worker_log(w, 1,
                   "partition %" PRId32 " offset %" PRId64 ": key is not source NUL messageId; "
                   "skipped",
                   m->partition, m->offset);
        return STORE_OK;
    }
    keyhash(p->secret, src_s, src_len, mid, mid_len, key);
    worker_sources_name(w->sources, keyhash_source(key), src_s, src_len);
    int64_t ts = rd_kafka_message_timestamp(m, &tst);
    if (ts <= 0)
        ts = now;
    /* A sealed key is in the window: the young store must not take it again. */
    if ((src = window_engine_find_sealed(p->win, key, &present, &owner)) != STORE_OK)
        return src;
    if (!present && (src = store_insert(window_engine_store(p->win), key, ts, (uint64_t)m->offset,
                                        &dup)) != STORE_OK)
        return src;
    if (!present && !dup && (src = window_engine_added(p->win, key)) != STORE_OK)
        return src;
    if (m->offset < p->repair_until) {
        c->repaired++;
        return STORE_OK;
    }
    /* The single node delivered this event already: its key is kept (a later raw record of it
     * is a duplicate), the record itself never goes out, whether it inserted the key or is
     * re-processed as its owner. */
    if (is_seed(m)) {
        c->seeded++;
        return STORE_OK;
    }
    if (!present && !dup) {
        *produce = true;
        return STORE_OK;
    }
    if (!present &&
        (src = store_lookup(window_engine_store(p->win), key, &present, &owner)) != STORE_OK)
        return src;
    if (present && owner == (uint64_t)m->offset) {
        *produce = true; /* the record that inserted the key, re-processed */
        c->owners++;
    } else {
        c->duplicates++;
    }
    return STORE_OK;
}

/* After the batch, in every partition it opened: size eviction and the applied offset. A store
 * status, with *failed the partition that failed. */
static int stage_close(cluster_worker_t *w, const window_policy_t *wp, size_t n, part_t **failed)
{
    int src = STORE_OK;
    for (int32_t i = 0; i < w->nparts_cap; i++) {
        part_t *p = w->parts[i];
        if (p == NULL || !p->txn_open)
            continue;
        *failed = p;
        if (w->o.max_keys > 0 &&
            (src = window_engine_evict(p->win, window_after_batch(wp, n))) != STORE_OK)
            return src;
        if ((src = store_set_applied(window_engine_store(p->win), (uint64_t)p->batch_last + 1)) !=
            STORE_OK)
            return src;
    }
    return STORE_OK;
}

/*
 * Stage 1: the LMDB side of a batch. Marks in `produce` which messages go to
 * the output topic. STEP_GROW when partition *grow_part's map is full.
 */
static enum step stage_keys(cluster_worker_t *w, rd_kafka_message_t **msgs, size_t n, bool *produce,
                            counters_t *c, int32_t *grow_part)
{
    int64_t now = clk_wall_ms();
    window_policy_t wp = {.window_ms = w->o.window_ms, .max_keys = w->o.max_keys};
    int src = STORE_OK;
    part_t *p = NULL;

    for (size_t i = 0; i < n; i++) {
        rd_kafka_message_t *m = msgs[i];
        produce[i] = false;
        p = worker_part_get(w, m->partition);
        if (p == NULL)
            continue;
        if (!p->txn_open && (src = part_begin(p, &wp, now, n)) != STORE_OK)
            goto fail;
        p->batch_last = m->offset;
        c->consumed++;
        if (m->offset >= p->repair_until)
            p->needs_kafka = true; /* past the repair range: its offset is committed in Kafka */
        if ((src = stage_one(w, p, m, now, c, &produce[i])) != STORE_OK)
            goto fail;
    }
    if ((src = stage_close(w, &wp, n, &p)) != STORE_OK)
        goto fail;
    return STEP_OK;
fail:
    if (src == STORE_FULL && p != NULL) {
        *grow_part = p->id;
        return STEP_GROW;
    }
    worker_log(w, 0, "partition %" PRId32 ": store: %s (%s)", p ? p->id : -1, store_strerror(src),
               p ? store_detail(window_engine_store(p->win)) : "");
    return STEP_FAIL;
}

/* Stage 1 with its retries: a full map grows and the batch is staged again. CLUSTER_OK, or
 * CLUSTER_STORE (the stores aborted). */
static int stage_all(cluster_worker_t *w, rd_kafka_message_t **msgs, size_t n, bool *produce,
                     counters_t *c, char *err, size_t errlen)
{
    for (int grows = 0;;) {
        int32_t gp = -1;
        memset(c, 0, sizeof *c);
        enum step s = stage_keys(w, msgs, n, produce, c, &gp);
        if (s == STEP_OK)
            return CLUSTER_OK;
        abort_stores(w);
        part_t *p = worker_part_get(w, gp);
        if (s == STEP_GROW && p != NULL && grows++ < MAX_GROW_RETRIES &&
            store_grow(window_engine_store(p->win)) == STORE_OK)
            continue;
        w->c.store_errors++;
        errbuf_printf(err, errlen, "partition store failed; stopping (the batch is not committed)");
        return CLUSTER_STORE;
    }
}

/* A transaction that did not commit (v: worker_kafka_txn's verdict): nothing of the batch counts,
 * and the partitions rewind to the group's offsets, after a new producer when the old one failed
 * for good. CLUSTER_OK, or the new producer's error. */
static int txn_undone(cluster_worker_t *w, int v, char *err, size_t errlen)
{
    abort_stores(w);
    w->c.txn_aborted++;
    if (atomic_load(&w->stop))
        return CLUSTER_OK; /* nothing is committed; the next owner resumes at the group's offsets */
    if (v == TXN_FATAL) {
        int rc = worker_kafka_producer_restart(w, err, errlen);
        if (rc != CLUSTER_OK)
            return atomic_load(&w->stop) ? CLUSTER_OK : rc;
    }
    worker_kafka_rewind(w);
    return CLUSTER_OK;
}

/* Stage 3: the stores follow the committed transaction. Returns true when a store commit failed
 * (Kafka has the batch; the repair on the rewind restores the missing keys). */
static bool stores_commit(cluster_worker_t *w)
{
    bool failed = false;
    for (int32_t i = 0; i < w->nparts_cap; i++) {
        part_t *p = w->parts[i];
        if (p == NULL || !p->txn_open)
            continue;
        p->txn_open = false;
        int src = window_engine_commit(p->win);
        if (src != STORE_OK) {
            worker_log(w, 0, "partition %" PRId32 ": store commit: %s", p->id, store_strerror(src));
            w->c.store_errors++;
            failed = true;
            continue;
        }
        p->applied = (uint64_t)p->batch_last + 1;
        if (p->needs_kafka && (int64_t)p->applied > p->committed)
            p->committed = (int64_t)p->applied;
        if (p->repair_until >= 0 && (int64_t)p->applied >= p->repair_until)
            p->repair_until = -1;
        p->batch_last = -1;
        p->needs_kafka = false;
        worker_part_maintain(w, p, clk_wall_ms());
    }
    return failed;
}

static void add_counters(counters_t *to, const counters_t *c)
{
    to->consumed += c->consumed;
    to->produced += c->produced;
    to->duplicates += c->duplicates;
    to->owners += c->owners;
    to->repaired += c->repaired;
    to->malformed += c->malformed;
    to->seeded += c->seeded;
}

/* Processes one gathered batch. CLUSTER_OK (also after an abort and rewind) or a fatal error. */
static int process(cluster_worker_t *w, rd_kafka_message_t **msgs, size_t n, char *err,
                   size_t errlen)
{
    bool *produce = calloc(n, sizeof *produce);
    rd_kafka_topic_partition_list_t *offsets = NULL;
    counters_t c;
    bool kafka = false;

    if (produce == NULL)
        return CLUSTER_NOMEM;
    int rc = stage_all(w, msgs, n, produce, &c, err, errlen);
    if (rc != CLUSTER_OK)
        goto out;
    offsets = worker_kafka_txn_offsets(w, &kafka);
    if (kafka) {
        int v = worker_kafka_txn(w, msgs, n, produce, offsets, &c);
        if (v != 0) {
            rc = txn_undone(w, v, err, errlen);
            goto out;
        }
        w->c.txn_committed++;
        if (w->o.mirror_offsets) {
            rd_kafka_resp_err_t ce = rd_kafka_commit(w->mirror, offsets, 0);
            if (ce)
                worker_log(w, 1, "mirror offset commit: %s", rd_kafka_err2str(ce));
        }
        worker_crash_hook(w, "kafka-committed");
    }
    bool failed = stores_commit(w);
    worker_crash_hook(w, "stored");
    add_counters(&w->c, &c);
    if (failed)
        worker_kafka_rewind(w);
out:
    abort_stores(w);
    if (offsets != NULL)
        rd_kafka_topic_partition_list_destroy(offsets);
    free(produce);
    return rc;
}

/* ---- the loop ---- */

/*
 * After a rebalance: drops the gathered records of partitions revoked, or
 * assigned anew, since they were read (their positions were reset), and keeps
 * the others: under the cooperative protocol the partitions that stay are not
 * repositioned, so dropping their records would skip them.
 */
static size_t drop_moved(cluster_worker_t *w, rd_kafka_message_t **msgs, uint64_t *epochs, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        part_t *p = worker_part_get(w, msgs[i]->partition);
        if (p == NULL || p->epoch != epochs[i]) {
            rd_kafka_message_destroy(msgs[i]);
            continue;
        }
        msgs[k] = msgs[i];
        epochs[k++] = epochs[i];
    }
    return k;
}

/* Polls one batch: up to max_batch records or batch_ms. Returns how many are in msgs, each
 * with the epoch of its partition's assignment when it was read in epochs. */
static size_t gather(cluster_worker_t *w, rd_kafka_message_t **msgs, uint64_t *epochs,
                     int64_t *last_snap)
{
    int64_t deadline = clk_mono_ms() + w->o.batch_ms;
    size_t n = 0;
    while (n < w->o.max_batch && !atomic_load(&w->stop)) {
        int64_t left = deadline - clk_mono_ms();
        if (n == 0)
            worker_part_move_pending(
                w); /* nothing gathered yet: a partition may move (worker_part_out_of_range) */
        if (n > 0 && left <= 0)
            break;
        rd_kafka_message_t *m = rd_kafka_consumer_poll(w->consumer, n == 0 ? 100 : (int)left);
        if (w->rebalanced) {
            n = drop_moved(w, msgs, epochs, n);
            w->rebalanced = false;
        }
        if (m == NULL) {
            if (n == 0)
                worker_lookup_answer_all(w); /* idle: no batch's transaction is open */
            if (n == 0 && clk_mono_ms() - *last_snap > 1000) {
                worker_views_snapshot(w);
                *last_snap = clk_mono_ms();
            }
            continue;
        }
        if (m->err == RD_KAFKA_RESP_ERR__FATAL) {
            rd_kafka_message_destroy(m);
            w->consumer_fatal = true; /* run() replaces the consumer */
            break;
        }
        if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET && worker_part_get(w, m->partition)) {
            worker_log(w, 3, "consume: %s", rd_kafka_message_errstr(m));
            worker_part_out_of_range(w, worker_part_get(w, m->partition), m->offset);
            rd_kafka_message_destroy(m);
            continue;
        }
        if (m->err) {
            if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                worker_log(w, 1, "consume: %s", rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            continue;
        }
        part_t *p = worker_part_get(w, m->partition);
        if (p == NULL) {
            rd_kafka_message_destroy(m);
            continue;
        }
        epochs[n] = p->epoch;
        msgs[n++] = m;
    }
    return n;
}

int cluster_worker_run(cluster_worker_t *w, char *err, size_t errlen)
{
    rd_kafka_message_t **msgs = calloc(w->o.max_batch, sizeof *msgs);
    uint64_t *epochs = calloc(w->o.max_batch, sizeof *epochs);
    size_t n = 0;
    int rc = CLUSTER_OK;
    if (msgs == NULL || epochs == NULL) {
        free(msgs);
        free(epochs);
        return CLUSTER_NOMEM;
    }

    if ((rc = worker_kafka_producer_init(w, err, errlen)) != CLUSTER_OK) {
        if (atomic_load(&w->stop))
            rc = CLUSTER_OK; /* stopped while waiting for the cluster */
        goto out;
    }
    if ((rc = worker_kafka_subscribe(w, err, errlen)) != CLUSTER_OK)
        goto out;
    worker_log(w, 2, "worker %s consuming %s -> %s as group %s", w->txn_id, w->o.raw_topic,
               w->o.out_topic, w->o.group);

    int64_t last_snap = 0;
    while (!atomic_load(&w->stop)) {
        n = gather(w, msgs, epochs, &last_snap);
        if (w->consumer_fatal) {
            /* what was gathered came from the dead consumer's assignment: read again later */
            for (size_t i = 0; i < n; i++)
                rd_kafka_message_destroy(msgs[i]);
            n = 0;
            w->consumer_fatal = false;
            if ((rc = worker_kafka_consumer_restart(w, err, errlen)) != CLUSTER_OK)
                goto out;
            continue;
        }
        if (n == 0) {
            worker_part_maintain_idle(w); /* generations age out while no record comes */
            continue;
        }
        rc = process(w, msgs, n, err, errlen);
        for (size_t i = 0; i < n; i++)
            rd_kafka_message_destroy(msgs[i]);
        n = 0;
        worker_views_snapshot(w);
        last_snap = clk_mono_ms();
        worker_lookup_answer_all(w);
        if (rc != CLUSTER_OK)
            goto out;
    }
    worker_log(w, 2, "stopping: %s",
               w->o.dynamic_membership
                   ? "leaving the group"
                   : "closing (a static member keeps its partitions until it is "
                     "back or the session times out)");
out:
    for (size_t i = 0; i < n; i++)
        rd_kafka_message_destroy(msgs[i]);
    free(msgs);
    free(epochs);
    atomic_store(&w->ready, false);
    /* Revokes (closing the stores). A dynamic member also leaves the group, so its partitions
     * move on at once; a static one keeps them until it is back or session.timeout.ms passed. */
    if (w->consumer != NULL)
        rd_kafka_consumer_close(w->consumer);
    worker_views_snapshot(w);
    return rc;
}

void cluster_worker_free(cluster_worker_t *w)
{
    if (w == NULL)
        return;
    if (w->consumer != NULL)
        rd_kafka_destroy(w->consumer);
    if (w->mirror != NULL)
        rd_kafka_destroy(w->mirror);
    if (w->producer != NULL)
        rd_kafka_destroy(w->producer);
    for (int32_t i = 0; i < w->nparts_cap; i++)
        worker_part_close(w, i);
    merger_free(w->merger); /* after the partitions: none is left to merge */
    worker_sources_free(w->sources);
    worker_lost_free(w->lost);
    free(w->parts);
    free(w->snap);
    pthread_mutex_destroy(&w->snap_mu);
    pthread_mutex_destroy(&w->lk_mu);
    pthread_cond_destroy(&w->lk_cv);
    free(w);
}
