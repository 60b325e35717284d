/* worker.c: the Kafka worker role: per-partition LMDB dedupe between two topics, exactly once. */
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
#include "storage/datadir.h"
#include "storage/window/merger.h"
#include "cluster/worker_lost.h"
#include "cluster/worker_sources.h"
#include "common/clock.h"
#include "common/errbuf.h"
#include "common/prom.h"
#include "storage/fsutil.h"
#include "storage/window/genset.h"
#include "storage/window/keyhash.h"
#include "storage/window/seal.h"
#include "storage/window/store.h"

#define DEFAULT_MAX_BATCH 1000
#define DEFAULT_BATCH_MS  50
#define DEFAULT_MAP_SIZE  (64ull << 20)
#define MAX_GROW_RETRIES  8
#define KAFKA_TIMEOUT_MS  30000 /* one transactional call (commit, abort, offsets) */
#define COMMITTED_TIMEOUT 10000 /* fetching the group's committed offsets */
#define RETRY_PAUSE_MS    500   /* between attempts while the cluster is unreachable */
#define MAINTAIN_EVERY_MS 1000  /* generations' drops and merges of a partition, at most */

/* One assigned raw partition and its store. */
typedef struct part {
    int32_t id;
    store_t *st;        /* the young store */
    genset_t *gs;       /* the sealed generations (DIR/gens) */
    genset_view_t *gv;  /* their view, taken again after every change */
    int64_t maintained; /* when the generations were last kept to the rule (now_ms) */
    uint8_t secret[KEYHASH_SECRET_LEN];
    int64_t repair_until; /* records below this offset only insert their keys */
    int64_t committed;    /* the group's committed offset as last known; -1 unknown */
    uint64_t applied;     /* the store's committed applied offset */
    bool txn_open;        /* an LMDB write txn of the current batch */
    int64_t batch_last;   /* last offset of the current batch in this partition; -1 none */
    bool needs_kafka;     /* the batch has records past repair_until here */
    uint64_t epoch;       /* which assignment opened it (cluster_worker.epochs) */
    /* its handle with the merger, which rewrites gs off this thread (storage/window/merger.h) */
    merger_set_t *mp;
    srcmap_t *sources;  /* the young store's keys by source: --max-keys is per source */
    int64_t move_to;    /* where to read on after an out-of-range position (-1: nowhere), done
                           before the next batch (move_pending) */
    int64_t move_retry; /* after a failed move, not again before this (clk_mono_ms) */
} part_t;

/* What /stats shows of one partition (copied under snap_mu). */
typedef struct part_snap {
    int32_t id;
    uint64_t keys, applied; /* keys: the young store's and the generations' */
    uint64_t generations, generation_keys, merges;
    int64_t oldest_ms, committed, high, position;
} part_snap_t;

/* A question for the run() thread, answered between batches: a cluster_worker_lookup, or a
 * cluster_worker_resume when `rout` is set. Lives on the caller's stack. */
typedef struct lookup_q {
    const char *source, *mid;
    size_t source_len, mid_len;
    cluster_lookup_t *out;
    int32_t resume; /* the partition to resume, with rout */
    cluster_resume_t *rout;
    int rc;
    bool taken, answered; /* under lk_mu */
    struct lookup_q *next;
} lookup_q_t;

typedef struct counters {
    uint64_t consumed, produced, duplicates, owners, repaired, malformed, seeded;
    uint64_t txn_committed, txn_aborted, producer_restarts, consumer_restarts, store_errors;
} counters_t;

struct cluster_worker {
    cluster_worker_options_t o;
    char txn_id[256];
    char instance_id[250]; /* group.instance.id: txn_id in the characters Kafka allows */
    rd_kafka_t *consumer, *producer;
    rd_kafka_t *mirror; /* --mirror-offsets: where offsets are mirrored (mirror_new) */
    part_t **parts;     /* indexed by partition id; NULL when not assigned */
    /* merges every partition's generations off the consuming thread */
    merger_t *merger;
    worker_sources_t *sources; /* the windows by source, for /stats and /metrics */
    worker_lost_t *lost;       /* records deleted before they were read: counts and stops */
    int32_t nparts_cap;
    uint64_t epochs; /* assignments so far: each part_open takes the next one */
    atomic_bool stop, ready;
    bool rebalanced;     /* set by the rebalance callback: check what was gathered */
    bool consumer_fatal; /* set by gather: the consumer hit a fatal error, replace it */
    bool producer_ready;
    counters_t c;
    /* crash hook (tests) */
    char crash_point[32];
    long crash_after;
    long crash_seen;
    bool crash_stop; /* ":stop": SIGSTOP (a zombie, resumed by SIGCONT) instead of SIGKILL */
    /* snapshot for the HTTP thread */
    pthread_mutex_t snap_mu;
    part_snap_t *snap;
    size_t nsnap;
    counters_t snap_c;
    /* cluster_worker_lookup's questions, answered by run() between batches */
    pthread_mutex_t lk_mu;
    pthread_cond_t lk_cv;
    lookup_q_t *lookups;
};

static void wlog(cluster_worker_t *w, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void wlog(cluster_worker_t *w, int level, const char *fmt, ...)
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

static void crash_hook(cluster_worker_t *w, const char *point)
{
    if (w->crash_point[0] == '\0' || strcmp(point, w->crash_point) != 0)
        return;
    if (++w->crash_seen == w->crash_after) {
        wlog(w, 1, "test hook: %s at %s #%ld", w->crash_stop ? "SIGSTOP" : "SIGKILL", point,
             w->crash_seen);
        raise(w->crash_stop ? SIGSTOP : SIGKILL);
    }
}

/* ---- librdkafka callbacks ---- */

static void on_kafka_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    cluster_worker_t *w = opaque;
    /* Transport errors are retried by librdkafka itself: worth a warning, not more. */
    wlog(w, err == RD_KAFKA_RESP_ERR__FATAL ? 0 : 1, "kafka %s: %s: %s", rd_kafka_name(rk),
         rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

/* ---- partitions ---- */

/*
 * Opens the partition's generations (DIR/gens) and finishes a seal a crash
 * cut short between its file and its LMDB transaction. A store status.
 */
static int part_open_gens(cluster_worker_t *w, part_t *p, const char *dir)
{
    char *gdir = datadir_in(dir, DATADIR_GENS);
    int grc = gdir ? genset_open(gdir, 0, &p->gs) : GEN_NOMEM;
    if (grc == GEN_OK)
        grc = genset_set_budget(p->gs, w->o.max_keys);
    if (grc != GEN_OK)
        wlog(w, 0, "partition %" PRId32 ": generations in %s/gens: %s", p->id, dir,
             gen_strerror(grc));
    free(gdir);
    if (grc != GEN_OK)
        return grc == GEN_NOMEM ? STORE_NOMEM : STORE_CORRUPT;
    seal_recovery_t sr;
    int src = seal_recover(p->st, p->gs, &sr);
    if (genset_cleaned(p->gs) > 0)
        wlog(w, 1, "partition %" PRId32 ": removed %" PRIu64 " generation file(s) a crash left",
             p->id, genset_cleaned(p->gs));
    if (src == STORE_OK && sr.finished)
        wlog(w, sr.rebased ? 1 : 2,
             "partition %" PRId32 ": finished a seal a crash cut short (generations end at %" PRIu64
             "%s)",
             p->id, sr.end_seq,
             sr.rebased ? "; the store had lost its last commits to a power loss, moved on" : "");
    if (src == STORE_OK && merger_add(w->merger, p->id, p->gs, &p->mp) != 0)
        src = STORE_NOMEM;
    if (src == STORE_OK)
        p->gv = genset_view(p->gs);
    return src;
}

static uint64_t young_keys(const cluster_worker_t *w)
{
    return w->o.young_keys ? w->o.young_keys : GENSET_YOUNG_KEYS;
}

/* The merger's failures (on its thread; the log sink takes any thread's). */
static void on_merge_fail(void *arg, int32_t partition, int rc, size_t n)
{
    wlog(arg, 1,
         "partition %" PRId32 ": merging %zu generations: %s; the window stays whole, and the "
         "merge is tried again after the next seal or drop",
         partition, n, gen_strerror(rc));
}

/*
 * Between batches (no LMDB transaction open): seals a full young store, then
 * drops generations as the window's rule says, at most once a second unless a
 * seal was done, and after either asks the merger to merge (storage/window/merger.h):
 * a merge takes seconds at 100M keys, which this thread must not stop
 * consuming for. A failure is logged and left for the next time: the window
 * stays whole either way (seal.h).
 */
static void part_maintain(cluster_worker_t *w, part_t *p, int64_t now)
{
    store_info_t info;
    uint64_t sealed = 0, young = young_keys(w);
    int src = store_get_info(p->st, &info);
    if (src == STORE_OK && genset_seals(w->o.max_keys, young) && info.keys >= young) {
        src = seal_young(p->st, p->gs, 0, &sealed);
        if (src == STORE_BUSY)
            src = STORE_OK; /* the young store is being made whole: seal later */
        if (src == STORE_OK && sealed > 0)
            src = store_get_info(p->st, &info);
        if (src == STORE_OK && sealed > 0)
            src = store_count_sources(p->st, p->sources); /* the young store is emptied */
    }
    if (src == STORE_OK && (sealed > 0 || now - p->maintained >= MAINTAIN_EVERY_MS)) {
        genset_policy_t gp = genset_policy_for(w->o.window_ms, w->o.max_keys, young);
        seal_result_t sr; /* seal_maintain drops only: rewrites are the merger's */
        p->maintained = now;
        src = seal_maintain(p->gs, &gp, now, info.keys, &sr);
        if (src == STORE_OK && (sealed > 0 || sr.dropped_age + sr.dropped_size > 0))
            merger_kick(p->mp);
    }
    genset_view_release(p->gv);
    p->gv = genset_view(p->gs);
    if (src != STORE_OK) {
        wlog(w, 1, "partition %" PRId32 ": sealing or keeping the generations: %s", p->id,
             store_strerror(src));
        w->c.store_errors++;
    }
}

/* Keeps every partition's generations to the rule while no batch comes (rate-limited). */
static void maintain_idle(cluster_worker_t *w)
{
    int64_t now = clk_wall_ms();
    for (int32_t i = 0; i < w->nparts_cap; i++) {
        part_t *p = w->parts[i];
        if (p != NULL && !p->txn_open && now - p->maintained >= MAINTAIN_EVERY_MS)
            part_maintain(w, p, now);
    }
}

/* Whether a generation holds `key`: *found, and its owner's offset. A store status. */
static int part_find_sealed(const part_t *p, const uint8_t key[KEYHASH_LEN], bool *found,
                            uint64_t *owner)
{
    gen_entry_t e;
    int grc = genset_view_find(p->gv, key, found, &e);
    if (grc != GEN_OK)
        return grc == GEN_NOMEM ? STORE_NOMEM : STORE_EIO;
    *owner = *found ? e.offset : 0;
    return STORE_OK;
}

/*
 * A partition store of an older format (2 or 3) holds keys without their
 * source's tag and no payloads to take it from: it is started afresh, keeping
 * its secret, applied offset 0. position() then sees it behind the group's
 * committed offset and repairs its keys from the raw topic, tagged as new
 * keys are (docs/scale-out.md: as far as the topic's retention still holds
 * the window). A store status; *st open on STORE_OK.
 */
static int part_migrate(cluster_worker_t *w, int32_t id, const char *dir, const store_options_t *so,
                        store_t **st)
{
    store_options_t old_so = {.read_only = true, .older_ok = true};
    uint8_t secret[KEYHASH_SECRET_LEN], got[KEYHASH_SECRET_LEN];
    store_t *old = NULL;
    int src = store_open(dir, &old_so, &old);
    if (src == STORE_OK)
        src = store_secret(old, NULL, secret);
    store_close(old);
    if (src != STORE_OK)
        return src;
    wlog(w, 1,
         "partition %" PRId32 ": store %s is of an older format (keys without source tags): "
         "starting it afresh and repairing its keys from the raw topic",
         id, dir);
    if (fsutil_rm_tree(dir) != 0 || fsutil_mkdirs(dir) != 0)
        return STORE_EIO;
    src = store_open(dir, so, st);
    if (src == STORE_OK)
        src = store_secret(*st, secret, got);
    if (src == STORE_OK && fsutil_sync_dir(dir) != 0)
        src = STORE_EIO;
    return src;
}

static part_t *part_get(cluster_worker_t *w, int32_t id)
{
    return id >= 0 && id < w->nparts_cap ? w->parts[id] : NULL;
}

static int part_open(cluster_worker_t *w, int32_t id, part_t **out)
{
    char dir[4096];
    store_options_t so = {.map_size = w->o.map_size ? w->o.map_size : DEFAULT_MAP_SIZE,
                          .sync = w->o.store_sync};
    *out = part_get(w, id);
    if (*out != NULL)
        return CLUSTER_OK;
    if (id >= w->nparts_cap) {
        int32_t cap = w->nparts_cap ? w->nparts_cap : 16;
        while (cap <= id)
            cap *= 2;
        part_t **np = realloc(w->parts, (size_t)cap * sizeof *np);
        if (np == NULL)
            return CLUSTER_NOMEM;
        memset(np + w->nparts_cap, 0, (size_t)(cap - w->nparts_cap) * sizeof *np);
        w->parts = np;
        w->nparts_cap = cap;
    }
    part_t *p = calloc(1, sizeof *p);
    if (p == NULL)
        return CLUSTER_NOMEM;
    p->id = id;
    p->epoch = ++w->epochs;
    p->committed = -1;
    p->repair_until = -1;
    p->batch_last = -1;
    p->move_to = -1;
    int rc = CLUSTER_STORE;
    store_info_t info;
    if (datadir_partition(dir, sizeof dir, w->o.data_dir, w->o.raw_topic, id) != 0 ||
        fsutil_mkdirs(dir) != 0) {
        wlog(w, 0, "partition %" PRId32 ": cannot create %s: %s", id, dir, strerror(errno));
        goto fail;
    }
    int src = store_open(dir, &so, &p->st);
    if (src == STORE_VERSION)
        src = part_migrate(w, id, dir, &so, &p->st);
    /* LMDB never syncs its directory: the name of a new data.mdb is durable from here. */
    if (src == STORE_OK && fsutil_sync_dir(dir) != 0)
        src = STORE_EIO;
    if (src == STORE_OK)
        src = store_secret(p->st, NULL, p->secret);
    if (src == STORE_OK && (src = part_open_gens(w, p, dir)) == STORE_OK)
        src = store_get_info(p->st, &info);
    if (src == STORE_OK)
        src = (p->sources = srcmap_new(w->o.max_keys)) ? store_count_sources(p->st, p->sources)
                                                       : STORE_NOMEM;
    if (src != STORE_OK) {
        wlog(w, 0, "partition %" PRId32 ": store %s: %s", id, dir, store_strerror(src));
        goto fail;
    }
    p->applied = info.applied;
    w->parts[id] = p;
    *out = p;
    return CLUSTER_OK;
fail:
    merger_remove(p->mp);
    genset_view_release(p->gv);
    genset_close(p->gs);
    store_close(p->st);
    srcmap_free(p->sources);
    free(p);
    return rc;
}

static void part_close(cluster_worker_t *w, int32_t id)
{
    part_t *p = part_get(w, id);
    if (p == NULL)
        return;
    merger_remove(p->mp); /* cancels its merge: a revoke must not wait seconds for it */
    store_close(p->st);   /* aborts an open txn, if any */
    genset_view_release(p->gv);
    genset_close(p->gs);
    srcmap_free(p->sources);
    free(p);
    w->parts[id] = NULL;
    /* Its new owner meets the same out-of-range position and stops it there, if still so. */
    worker_lost_unassigned(w->lost, id);
}

/*
 * Sets where each partition of `list` (the raw topic) resumes, from the
 * group's committed offsets and the stores' applied offsets (worker.h), in
 * the list's offsets. CLUSTER_OK, or CLUSTER_TIMEOUT when the committed
 * offsets could not be read.
 */
static int position(cluster_worker_t *w, rd_kafka_topic_partition_list_t *list)
{
    for (int i = 0; i < list->cnt; i++)
        list->elems[i].offset = RD_KAFKA_OFFSET_INVALID;
    rd_kafka_resp_err_t err =
        rd_kafka_committed(w->mirror ? w->mirror : w->consumer, list, COMMITTED_TIMEOUT);
    if (err) {
        wlog(w, 1, "cannot read the group's committed offsets: %s", rd_kafka_err2str(err));
        return CLUSTER_TIMEOUT;
    }
    for (int i = 0; i < list->cnt; i++) {
        rd_kafka_topic_partition_t *tp = &list->elems[i];
        part_t *p = part_get(w, tp->partition);
        if (p == NULL)
            continue;
        int64_t a = (int64_t)p->applied, c = tp->err || tp->offset < 0 ? -1 : tp->offset;
        p->committed = c >= 0 ? c : -1;
        p->repair_until = -1;
        if (c >= 0 && a < c) {
            p->repair_until = c;
            tp->offset = a;
            wlog(w, 2,
                 "partition %" PRId32 ": store applied %" PRId64 " behind committed %" PRId64
                 ": repairing (keys only)",
                 p->id, a, c);
        } else if (c >= 0) {
            tp->offset = c;
        } else {
            tp->offset = a > 0 ? a : RD_KAFKA_OFFSET_BEGINNING;
        }
        wlog(w, 2,
             "partition %" PRId32 ": applied %" PRId64 ", committed %" PRId64
             ", resume at %s%" PRId64,
             p->id, a, c, tp->offset == RD_KAFKA_OFFSET_BEGINNING ? "beginning " : "",
             tp->offset == RD_KAFKA_OFFSET_BEGINNING ? (int64_t)0 : tp->offset);
    }
    return CLUSTER_OK;
}

static void snapshot(cluster_worker_t *w);

/*
 * The rebalance protocol decides how an assignment changes: EAGER (range,
 * roundrobin: every partition is revoked, then the whole new assignment comes)
 * or COOPERATIVE (cooperative-sticky, the default here: only the partitions
 * that move are revoked or assigned, the others keep being consumed
 * throughout). Either way exactly the listed partitions' stores are opened or
 * closed. The callback runs inside rd_kafka_consumer_poll, between batches, so
 * no LMDB or Kafka transaction is open.
 */
static void on_assign(cluster_worker_t *w, rd_kafka_t *rk, rd_kafka_topic_partition_list_t *list,
                      bool coop)
{
    for (int i = 0; i < list->cnt; i++) {
        part_t *p = NULL;
        if (part_open(w, list->elems[i].partition, &p) != CLUSTER_OK) {
            /* Without its store the partition cannot be served: give up the whole worker. */
            atomic_store(&w->stop, true);
        }
    }
    /* Until the committed offsets can be read, nothing may be consumed. */
    while (position(w, list) != CLUSTER_OK && !atomic_load(&w->stop))
        usleep(RETRY_PAUSE_MS * 1000);
    rd_kafka_error_t *e = NULL;
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    if (coop)
        e = rd_kafka_incremental_assign(rk, list);
    else
        err = rd_kafka_assign(rk, list);
    if (e != NULL || err) {
        wlog(w, 0, "assign: %s; stopping", e ? rd_kafka_error_string(e) : rd_kafka_err2str(err));
        rd_kafka_error_destroy(e);
        atomic_store(&w->stop, true);
    }
    /* A partition stopped here (records lost), revoked and assigned again, starts afresh: left
     * paused it would stall without a word; read, it meets its out-of-range position again. */
    rd_kafka_resume_partitions(rk, list);
    wlog(w, 2, "assigned %d partition(s) of %s%s", list->cnt, w->o.raw_topic,
         coop ? " (incremental)" : "");
    atomic_store(&w->ready, w->producer_ready);
}

static void on_revoke(cluster_worker_t *w, rd_kafka_t *rk, rd_kafka_resp_err_t err,
                      rd_kafka_topic_partition_list_t *list, bool coop)
{
    /* Lost (session timed out, fenced): another worker may own them already. Nothing of ours
     * is uncommitted here, so closing the stores is all there is to do either way. */
    bool lost = rd_kafka_assignment_lost(rk) != 0;
    if (coop) {
        rd_kafka_error_t *e = rd_kafka_incremental_unassign(rk, list);
        if (e != NULL) {
            wlog(w, 1, "incremental unassign: %s", rd_kafka_error_string(e));
            rd_kafka_error_destroy(e);
        }
    } else {
        rd_kafka_assign(rk, NULL);
    }
    for (int i = 0; i < list->cnt; i++)
        part_close(w, list->elems[i].partition);
    wlog(w, 2, "revoked %d partition(s) (%s%s%s)", list->cnt,
         err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS ? "rebalance" : rd_kafka_err2str(err),
         coop ? ", incremental" : "", lost ? ", lost" : "");
}

static void on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *list, void *opaque)
{
    cluster_worker_t *w = opaque;
    bool coop = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
    w->rebalanced = true;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS)
        on_assign(w, rk, list, coop);
    else
        on_revoke(w, rk, err, list, coop);
    snapshot(w);
}

/* ---- clients ---- */

static int producer_new(cluster_worker_t *w, char *err, size_t errlen)
{
    char why[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    int rc;
    if (conf == NULL)
        return CLUSTER_NOMEM;
    /* murmur2_random: the output topic is keyed like the raw one, as Java producers would. */
    if ((rc = cluster_conf_set(conf, "bootstrap.servers", w->o.brokers, err, errlen)) ||
        (rc = cluster_conf_set(conf, "transactional.id", w->txn_id, err, errlen)) ||
        (rc = cluster_conf_set(conf, "partitioner", "murmur2_random", err, errlen)) ||
        (rc = cluster_conf_set(conf, "linger.ms", "5", err, errlen)) ||
        (rc = cluster_conf_apply(conf, &w->o.opts, "producer", err, errlen))) {
        rd_kafka_conf_destroy(conf);
        return rc;
    }
    rd_kafka_conf_set_opaque(conf, w);
    rd_kafka_conf_set_error_cb(conf, on_kafka_error);
    w->producer = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof why);
    if (w->producer == NULL) {
        rd_kafka_conf_destroy(conf);
        errbuf_printf(err, errlen, "kafka producer: %s", why);
        return CLUSTER_KAFKA;
    }
    w->producer_ready = false;
    return CLUSTER_OK;
}

/* init_transactions, retried while the cluster is unreachable. Fences our own earlier instance. */
static int producer_init(cluster_worker_t *w, char *err, size_t errlen)
{
    while (!atomic_load(&w->stop)) {
        rd_kafka_error_t *e = rd_kafka_init_transactions(w->producer, KAFKA_TIMEOUT_MS);
        if (e == NULL) {
            w->producer_ready = true;
            return CLUSTER_OK;
        }
        bool fatal = rd_kafka_error_is_fatal(e) && !rd_kafka_error_is_retriable(e);
        errbuf_printf(err, errlen, "init_transactions: %s", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
        if (fatal)
            return CLUSTER_KAFKA;
        wlog(w, 1, "%s; retrying", err);
        usleep(RETRY_PAUSE_MS * 1000);
    }
    errbuf_printf(err, errlen, "stopped before the producer was ready");
    return CLUSTER_TIMEOUT;
}

/*
 * How the worker joins its group, so that deploys do not stop the pipeline
 * (docs/scale-out.md, "Rebalances"):
 *  - cooperative-sticky (KIP-429): a join or leave moves only the partitions
 *    that must move; every other partition keeps being consumed throughout;
 *  - static membership (KIP-345): group.instance.id is the transactional id
 *    (PREFIX-GROUP-WORKERID, WORKERID kept in DATA/worker-id), so a worker
 *    restarted within session.timeout.ms gets its partitions back without a
 *    rebalance. A static member does not leave the group when it closes;
 *  - heartbeat.interval.ms of 1 s, not librdkafka's 3 s: the members that
 *    did not cause a rebalance learn of each of its rounds at a heartbeat, and
 *    until they do, the round waits and their transactions are refused with
 *    ILLEGAL_GENERATION (KIP-447), so the partitions that stay pause too. On a
 *    real cluster a join took 5-9 s with 3 s and 2-3 s with 1 s; the cost is
 *    one small request a second to the group coordinator. session.timeout.ms
 *    stays at librdkafka's 45 s (longer than a restart: restarts never
 *    rebalance).
 * All can be overridden with --kafka-opt (applied after these).
 */
static int membership_conf(cluster_worker_t *w, rd_kafka_conf_t *conf, char *err, size_t errlen)
{
    int rc =
        cluster_conf_set(conf, "partition.assignment.strategy", "cooperative-sticky", err, errlen);
    if (rc == CLUSTER_OK)
        rc = cluster_conf_set(conf, "heartbeat.interval.ms", "1000", err, errlen);
    if (rc == CLUSTER_OK && !w->o.dynamic_membership)
        rc = cluster_conf_set(conf, "group.instance.id", w->instance_id, err, errlen);
    return rc;
}

static int consumer_new(cluster_worker_t *w, char *err, size_t errlen)
{
    char why[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    int rc;
    if (conf == NULL)
        return CLUSTER_NOMEM;
    /* Offsets only move inside our transactions; read_committed: never act on an aborted write. */
    if ((rc = cluster_conf_set(conf, "bootstrap.servers", w->o.brokers, err, errlen)) ||
        (rc = cluster_conf_set(conf, "group.id", w->o.group, err, errlen)) ||
        (rc = cluster_conf_set(conf, "enable.auto.commit", "false", err, errlen)) ||
        (rc = cluster_conf_set(conf, "enable.auto.offset.store", "false", err, errlen)) ||
        (rc = cluster_conf_set(conf, "isolation.level", "read_committed", err, errlen)) ||
        /* Never skip silently: an out-of-range position is reported to us (out_of_range). */
        (rc = cluster_conf_set(conf, "auto.offset.reset", "error", err, errlen)) ||
        (rc = cluster_conf_set(conf, "enable.partition.eof", "false", err, errlen)) ||
        (rc = membership_conf(w, conf, err, errlen)) ||
        (rc = cluster_conf_apply(conf, &w->o.opts, "consumer", err, errlen))) {
        rd_kafka_conf_destroy(conf);
        return rc;
    }
    rd_kafka_conf_set_opaque(conf, w);
    rd_kafka_conf_set_error_cb(conf, on_kafka_error);
    rd_kafka_conf_set_rebalance_cb(conf, on_rebalance);
    w->consumer = rd_kafka_new(RD_KAFKA_CONSUMER, conf, why, sizeof why);
    if (w->consumer == NULL) {
        rd_kafka_conf_destroy(conf);
        errbuf_printf(err, errlen, "kafka consumer: %s", why);
        return CLUSTER_KAFKA;
    }
    rd_kafka_poll_set_consumer(w->consumer);
    return CLUSTER_OK;
}

/*
 * --mirror-offsets (the mock cluster keeps no transactional offsets): a
 * client that is no group member commits each transaction's offsets to group
 * GROUP.mirror, and positions are read from there. Not through the member
 * itself: a plain OffsetCommit that races a generation bump during a
 * cooperative rebalance gets ILLEGAL_GENERATION, and librdkafka (before
 * 2.10.0, #4908) then drops the whole assignment as lost, which would add a
 * rebalance round that a real cluster, taking the offsets inside the
 * transaction, never has.
 */
static int mirror_new(cluster_worker_t *w, char *err, size_t errlen)
{
    char why[512], group[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    int rc;
    if (conf == NULL)
        return CLUSTER_NOMEM;
    snprintf(group, sizeof group, "%s.mirror", w->o.group);
    if ((rc = cluster_conf_set(conf, "bootstrap.servers", w->o.brokers, err, errlen)) ||
        (rc = cluster_conf_set(conf, "group.id", group, err, errlen)) ||
        (rc = cluster_conf_set(conf, "enable.auto.commit", "false", err, errlen)) ||
        (rc = cluster_conf_apply(conf, &w->o.opts, "consumer", err, errlen))) {
        rd_kafka_conf_destroy(conf);
        return rc;
    }
    w->mirror = rd_kafka_new(RD_KAFKA_CONSUMER, conf, why, sizeof why);
    if (w->mirror == NULL) {
        rd_kafka_conf_destroy(conf);
        errbuf_printf(err, errlen, "kafka mirror client: %s", why);
        return CLUSTER_KAFKA;
    }
    return CLUSTER_OK;
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
    genset_policy_t gp = genset_policy_for(w->o.window_ms, w->o.max_keys, young_keys(w));
    if ((rc = merger_new(&gp, on_merge_fail, w, &w->merger)) != 0) {
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
    if ((rc = producer_new(w, err, errlen)) || (rc = consumer_new(w, err, errlen)) ||
        (w->o.mirror_offsets && (rc = mirror_new(w, err, errlen)))) {
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
            store_abort(p->st);
            p->txn_open = false;
            /* The batch's keys went with it: count the store again (a failure leaves the old
             * counts, which only bend the budget until the next seal). */
            store_count_sources(p->st, p->sources);
        }
        if (p != NULL) {
            p->batch_last = -1;
            p->needs_kafka = false;
        }
    }
}

/* Re-reads positions for the whole assignment and seeks there (after an aborted transaction). */
static void rewind_all(cluster_worker_t *w)
{
    rd_kafka_topic_partition_list_t *list = NULL;
    if (rd_kafka_assignment(w->consumer, &list) != 0 || list == NULL)
        return;
    /* A stopped partition stays where it stopped until the operator resumes it. */
    for (int32_t i = 0; i < w->nparts_cap; i++)
        if (w->parts[i] != NULL && worker_lost_stopped(w->lost, i, NULL))
            rd_kafka_topic_partition_list_del(list, w->o.raw_topic, i);
    while (list->cnt > 0 && position(w, list) != CLUSTER_OK && !atomic_load(&w->stop))
        usleep(RETRY_PAUSE_MS * 1000);
    if (list->cnt > 0) {
        rd_kafka_error_t *e = rd_kafka_seek_partitions(w->consumer, list, KAFKA_TIMEOUT_MS);
        if (e != NULL) {
            wlog(w, 0, "seek after abort: %s", rd_kafka_error_string(e));
            rd_kafka_error_destroy(e);
        }
    }
    rd_kafka_topic_partition_list_destroy(list);
}

/* Replaces a producer that hit a fatal error (fenced, or the coordinator lost its state). */
static int producer_restart(cluster_worker_t *w, char *err, size_t errlen)
{
    rd_kafka_destroy(w->producer);
    w->producer = NULL;
    w->c.producer_restarts++;
    int rc = producer_new(w, err, errlen);
    if (rc == CLUSTER_OK)
        rc = producer_init(w, err, errlen);
    return rc;
}

enum step { STEP_OK, STEP_GROW, STEP_FAIL };

/* Opens p's write transaction for a batch of n, age eviction first, as single-node does: a key
 * out of the window is forgotten. A store status. */
static int part_begin(part_t *p, const window_policy_t *wp, int64_t now, size_t n, uint64_t *ea,
                      uint64_t *es)
{
    int src = store_begin(p->st);
    if (src != STORE_OK)
        return src;
    p->txn_open = true;
    return store_evict_sources(p->st, window_before_batch(wp, now, n), p->sources, ea, es);
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
        wlog(w, 1,
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
    if ((src = part_find_sealed(p, key, &present, &owner)) != STORE_OK)
        return src;
    if (!present && (src = store_insert(p->st, key, ts, (uint64_t)m->offset, &dup)) != STORE_OK)
        return src;
    if (!present && !dup && srcmap_add(p->sources, key) != 0)
        return STORE_NOMEM;
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
    if (!present && (src = store_lookup(p->st, key, &present, &owner)) != STORE_OK)
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
static int stage_close(cluster_worker_t *w, const window_policy_t *wp, size_t n, uint64_t *ea,
                       uint64_t *es, part_t **failed)
{
    int src = STORE_OK;
    for (int32_t i = 0; i < w->nparts_cap; i++) {
        part_t *p = w->parts[i];
        if (p == NULL || !p->txn_open)
            continue;
        *failed = p;
        if (w->o.max_keys > 0 && (src = store_evict_sources(p->st, window_after_batch(wp, n),
                                                            p->sources, ea, es)) != STORE_OK)
            return src;
        if ((src = store_set_applied(p->st, (uint64_t)p->batch_last + 1)) != STORE_OK)
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
    uint64_t ea = 0, es = 0;
    int src = STORE_OK;
    part_t *p = NULL;

    for (size_t i = 0; i < n; i++) {
        rd_kafka_message_t *m = msgs[i];
        produce[i] = false;
        p = part_get(w, m->partition);
        if (p == NULL)
            continue;
        if (!p->txn_open && (src = part_begin(p, &wp, now, n, &ea, &es)) != STORE_OK)
            goto fail;
        p->batch_last = m->offset;
        c->consumed++;
        if (m->offset >= p->repair_until)
            p->needs_kafka = true; /* past the repair range: its offset is committed in Kafka */
        if ((src = stage_one(w, p, m, now, c, &produce[i])) != STORE_OK)
            goto fail;
    }
    if ((src = stage_close(w, &wp, n, &ea, &es, &p)) != STORE_OK)
        goto fail;
    return STEP_OK;
fail:
    if (src == STORE_FULL && p != NULL) {
        *grow_part = p->id;
        return STEP_GROW;
    }
    wlog(w, 0, "partition %" PRId32 ": store: %s (%s)", p ? p->id : -1, store_strerror(src),
         p ? store_detail(p->st) : "");
    return STEP_FAIL;
}

/* Produces one output record; waits for queue space rather than failing the transaction. */
static rd_kafka_resp_err_t produce_one(cluster_worker_t *w, const rd_kafka_message_t *m)
{
    char hdr[48];
    int hlen = snprintf(hdr, sizeof hdr, "%" PRId32 ":%" PRId64, m->partition, m->offset);
    rd_kafka_timestamp_type_t tst;
    int64_t ts = rd_kafka_message_timestamp(m, &tst);
    for (;;) {
        rd_kafka_resp_err_t err = rd_kafka_producev(
            w->producer, RD_KAFKA_V_TOPIC(w->o.out_topic), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_KEY(m->key, m->key_len), RD_KAFKA_V_VALUE(m->payload, m->len),
            RD_KAFKA_V_TIMESTAMP(ts > 0 ? ts : 0),
            RD_KAFKA_V_HEADER(CLUSTER_HEADER_INPUT, hdr, (ssize_t)hlen), RD_KAFKA_V_END);
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
            return err;
        rd_kafka_poll(w->producer, 50);
    }
}

/* What to do after a transactional call failed. */
enum txn_verdict { TXN_RETRY, TXN_ABORT, TXN_FATAL };

static enum txn_verdict verdict(cluster_worker_t *w, const char *what, rd_kafka_error_t *e)
{
    enum txn_verdict v = rd_kafka_error_is_fatal(e)             ? TXN_FATAL
                         : rd_kafka_error_txn_requires_abort(e) ? TXN_ABORT
                         : rd_kafka_error_is_retriable(e)       ? TXN_RETRY
                                                                : TXN_ABORT;
    wlog(w, v == TXN_RETRY ? 1 : 0, "%s: %s (%s)", what, rd_kafka_error_string(e),
         v == TXN_FATAL   ? "fatal: new producer"
         : v == TXN_ABORT ? "aborting"
                          : "retrying");
    rd_kafka_error_destroy(e);
    return v;
}

/*
 * Stage 2: the Kafka transaction. Returns TXN_RETRY-free outcomes: 0 committed,
 * TXN_ABORT (aborted: rewind), TXN_FATAL (producer unusable: restart, rewind).
 */
static int kafka_txn(cluster_worker_t *w, rd_kafka_message_t **msgs, size_t n, const bool *produce,
                     rd_kafka_topic_partition_list_t *offsets, counters_t *c)
{
    rd_kafka_error_t *e = rd_kafka_begin_transaction(w->producer);
    int v;
    if (e != NULL)
        return verdict(w, "begin_transaction", e) == TXN_FATAL ? TXN_FATAL : TXN_ABORT;
    for (size_t i = 0; i < n; i++) {
        if (!produce[i])
            continue;
        rd_kafka_resp_err_t err = produce_one(w, msgs[i]);
        if (err) {
            wlog(w, 0, "produce to %s: %s", w->o.out_topic, rd_kafka_err2str(err));
            v = rd_kafka_fatal_error(w->producer, NULL, 0) ? TXN_FATAL : TXN_ABORT;
            goto abort;
        }
        c->produced++;
    }
    if (w->crash_point[0] != '\0' && strcmp(w->crash_point, "produced") == 0)
        rd_kafka_flush(w->producer, 10000); /* test hook: the open txn's records on the brokers */
    crash_hook(w, "produced");
    rd_kafka_consumer_group_metadata_t *cgmd = rd_kafka_consumer_group_metadata(w->consumer);
    for (;;) {
        e = rd_kafka_send_offsets_to_transaction(w->producer, offsets, cgmd, KAFKA_TIMEOUT_MS);
        if (e == NULL)
            break;
        v = verdict(w, "send_offsets_to_transaction", e);
        if (v != TXN_RETRY || atomic_load(&w->stop)) {
            rd_kafka_consumer_group_metadata_destroy(cgmd);
            v = v == TXN_RETRY ? TXN_ABORT : v;
            goto abort;
        }
    }
    rd_kafka_consumer_group_metadata_destroy(cgmd);
    for (;;) {
        e = rd_kafka_commit_transaction(w->producer, KAFKA_TIMEOUT_MS);
        if (e == NULL)
            return 0;
        v = verdict(w, "commit_transaction", e);
        if (v != TXN_RETRY)
            goto abort;
        /* A retriable commit may have gone through: retrying tells, unless we are stopping (then
         * the abort below, or the next instance with our transactional.id, settles it). */
        if (atomic_load(&w->stop)) {
            v = TXN_ABORT;
            goto abort;
        }
    }
abort:
    if (v == TXN_ABORT) {
        e = rd_kafka_abort_transaction(w->producer, KAFKA_TIMEOUT_MS);
        if (e != NULL) {
            /* Could not abort in time: the producer is in doubt; a new one fences it. */
            wlog(w, 0, "abort_transaction: %s", rd_kafka_error_string(e));
            rd_kafka_error_destroy(e);
            v = TXN_FATAL;
        }
    }
    return v;
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
        part_t *p = part_get(w, gp);
        if (s == STEP_GROW && p != NULL && grows++ < MAX_GROW_RETRIES &&
            store_grow(p->st) == STORE_OK)
            continue;
        w->c.store_errors++;
        errbuf_printf(err, errlen, "partition store failed; stopping (the batch is not committed)");
        return CLUSTER_STORE;
    }
}

/* Offsets to commit: only partitions that moved past what the group has committed. *any says
 * whether there is one (then the batch needs a Kafka transaction). */
static rd_kafka_topic_partition_list_t *commit_offsets(cluster_worker_t *w, bool *any)
{
    rd_kafka_topic_partition_list_t *offsets = rd_kafka_topic_partition_list_new(8);
    *any = false;
    for (int32_t i = 0; i < w->nparts_cap; i++) {
        part_t *p = w->parts[i];
        if (p == NULL || !p->txn_open || !p->needs_kafka)
            continue;
        rd_kafka_topic_partition_list_add(offsets, w->o.raw_topic, p->id)->offset =
            p->batch_last + 1;
        *any = true;
    }
    return offsets;
}

/* A transaction that did not commit (v: kafka_txn's verdict): nothing of the batch counts, and
 * the partitions rewind to the group's offsets, after a new producer when the old one failed
 * for good. CLUSTER_OK, or the new producer's error. */
static int txn_undone(cluster_worker_t *w, int v, char *err, size_t errlen)
{
    abort_stores(w);
    w->c.txn_aborted++;
    if (atomic_load(&w->stop))
        return CLUSTER_OK; /* nothing is committed; the next owner resumes at the group's offsets */
    if (v == TXN_FATAL) {
        int rc = producer_restart(w, err, errlen);
        if (rc != CLUSTER_OK)
            return atomic_load(&w->stop) ? CLUSTER_OK : rc;
    }
    rewind_all(w);
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
        int src = store_commit(p->st);
        if (src != STORE_OK) {
            wlog(w, 0, "partition %" PRId32 ": store commit: %s", p->id, store_strerror(src));
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
        part_maintain(w, p, clk_wall_ms());
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
    offsets = commit_offsets(w, &kafka);
    if (kafka) {
        int v = kafka_txn(w, msgs, n, produce, offsets, &c);
        if (v != 0) {
            rc = txn_undone(w, v, err, errlen);
            goto out;
        }
        w->c.txn_committed++;
        if (w->o.mirror_offsets) {
            rd_kafka_resp_err_t ce = rd_kafka_commit(w->mirror, offsets, 0);
            if (ce)
                wlog(w, 1, "mirror offset commit: %s", rd_kafka_err2str(ce));
        }
        crash_hook(w, "kafka-committed");
    }
    bool failed = stores_commit(w);
    crash_hook(w, "stored");
    add_counters(&w->c, &c);
    if (failed)
        rewind_all(w);
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
        part_t *p = part_get(w, msgs[i]->partition);
        if (p == NULL || p->epoch != epochs[i]) {
            rd_kafka_message_destroy(msgs[i]);
            continue;
        }
        msgs[k] = msgs[i];
        epochs[k++] = epochs[i];
    }
    return k;
}

/* ---- records deleted before they were read (worker_lost.h) ---- */

/* Partition id's watermarks, retried while the cluster does not answer. A cluster status
 * (CLUSTER_TIMEOUT: stopping). */
static int watermarks(cluster_worker_t *w, int32_t id, int64_t *lo, int64_t *hi)
{
    for (;;) {
        rd_kafka_resp_err_t err = rd_kafka_query_watermark_offsets(w->consumer, w->o.raw_topic, id,
                                                                   lo, hi, COMMITTED_TIMEOUT);
        if (!err)
            return CLUSTER_OK;
        if (atomic_load(&w->stop))
            return CLUSTER_TIMEOUT;
        wlog(w, 1, "partition %" PRId32 ": reading its watermarks: %s; retrying", id,
             rd_kafka_err2str(err));
        usleep(RETRY_PAUSE_MS * 1000);
    }
}

/* Pauses (stops fetching) partition id or lets it be fetched again. */
static void pause_one(cluster_worker_t *w, int32_t id, bool pause)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, w->o.raw_topic, id);
    rd_kafka_resp_err_t err = pause ? rd_kafka_pause_partitions(w->consumer, l)
                                    : rd_kafka_resume_partitions(w->consumer, l);
    if (err || l->elems[0].err)
        wlog(w, 0, "partition %" PRId32 ": %s: %s", id, pause ? "pause" : "resume",
             rd_kafka_err2str(err ? err : l->elems[0].err));
    rd_kafka_topic_partition_list_destroy(l);
}

/*
 * Moves partition id to `offset` and lets it be fetched. After an out-of-range error
 * librdkafka has stopped the partition's fetcher and refuses a seek (its state is
 * FETCH_NONE), so the partition is taken out of the assignment and put back at the offset:
 * incrementally under the cooperative protocol; under an eager one the whole assignment is
 * set again at the positions position() gives. Only between batches (no record of the
 * assignment gathered and unprocessed). A cluster status.
 */
static int move_one(cluster_worker_t *w, int32_t id, int64_t offset)
{
    rd_kafka_topic_partition_list_t *l = NULL;
    rd_kafka_error_t *e = NULL;
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    if (strcmp(rd_kafka_rebalance_protocol(w->consumer), "COOPERATIVE") == 0) {
        l = rd_kafka_topic_partition_list_new(1);
        rd_kafka_topic_partition_list_add(l, w->o.raw_topic, id)->offset = offset;
        e = rd_kafka_incremental_unassign(w->consumer, l);
        if (e == NULL)
            e = rd_kafka_incremental_assign(w->consumer, l);
    } else if ((err = rd_kafka_assignment(w->consumer, &l)) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (position(w, l) != CLUSTER_OK)
            err = RD_KAFKA_RESP_ERR__TIMED_OUT;
        for (int i = 0; i < l->cnt; i++)
            if (l->elems[i].partition == id)
                l->elems[i].offset = offset;
        if (!err)
            err = rd_kafka_assign(w->consumer, l);
        for (int i = 0; !err && i < l->cnt; i++) /* stopped ones stay where they stopped */
            if (l->elems[i].partition != id &&
                worker_lost_stopped(w->lost, l->elems[i].partition, NULL))
                pause_one(w, l->elems[i].partition, true);
    }
    if (e != NULL || err)
        wlog(w, 0, "partition %" PRId32 ": moving to offset %" PRId64 ": %s", id, offset,
             e ? rd_kafka_error_string(e) : rd_kafka_err2str(err));
    else
        pause_one(w, id, false);
    int rc = e != NULL || err ? CLUSTER_KAFKA : CLUSTER_OK;
    rd_kafka_error_destroy(e);
    if (l != NULL)
        rd_kafka_topic_partition_list_destroy(l);
    return rc;
}

/* The moves out_of_range decided, before a batch is gathered. One that fails is logged and
 * tried again after RETRY_PAUSE_MS (the partition is not read meanwhile, and says so). */
static void move_pending(cluster_worker_t *w)
{
    int64_t now = clk_mono_ms();
    for (int32_t i = 0; i < w->nparts_cap; i++) {
        part_t *p = w->parts[i];
        if (p == NULL || p->move_to < 0 || now < p->move_retry)
            continue;
        if (move_one(w, p->id, p->move_to) == CLUSTER_OK)
            p->move_to = -1;
        else
            p->move_retry = now + RETRY_PAUSE_MS;
    }
}

/*
 * Whether keys of offsets below lo may have been in the window: the first record of the
 * partition at least as new as the window's start is at lo or before (or cannot be found).
 * Keys older than the window were due to be forgotten anyway.
 */
static bool window_reaches(cluster_worker_t *w, int32_t id, int64_t lo)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, w->o.raw_topic, id)->offset =
        clk_wall_ms() - w->o.window_ms;
    rd_kafka_resp_err_t err = rd_kafka_offsets_for_times(w->consumer, l, COMMITTED_TIMEOUT);
    int64_t first = err || l->elems[0].err ? 0 : l->elems[0].offset;
    rd_kafka_topic_partition_list_destroy(l);
    return first != RD_KAFKA_OFFSET_END && first <= lo; /* END: no record is that new */
}

/* The log line of a repair that cannot re-read the keys of r's keys range. */
static void log_keys_lost(cluster_worker_t *w, const part_t *p, const lost_range_t *r)
{
    bool window = window_reaches(w, p->id, r->lo);
    wlog(w, window ? 0 : 2,
         "partition %" PRId32 " of %s: offsets [%" PRId64 ", %" PRId64 ") were deleted before "
         "this worker re-read their keys (repair up to the committed offset %" PRId64 "): "
         "their events are in the output, but %s",
         p->id, w->o.raw_topic, r->keys_from, r->keys_to, p->repair_until,
         window ? "keys of the window are lost: a retry of one of those events within the "
                  "window passes as new"
                : "each was older than the window, so the window lost nothing");
}

/*
 * The consumer found partition p's position out of range (auto.offset.reset=error): records it
 * had not read were deleted (retention, DeleteRecords), or the log is shorter than the
 * position. Says what is lost, counts it, and stops the partition (paused; the others go on)
 * or, with continue_on_lost, goes on at the log start. Never skips without a word.
 */
static void out_of_range(cluster_worker_t *w, part_t *p, int64_t pos)
{
    int64_t lo = -1, hi = -1;
    lost_range_t r;
    if (pos < 0)
        pos = (int64_t)p->applied; /* a log truncation reports no offset */
    if (watermarks(w, p->id, &lo, &hi) != CLUSTER_OK)
        return; /* stopping: the next owner meets the same position */
    worker_lost_classify(pos, p->repair_until, lo, hi, &r);
    if (r.keys_to > r.keys_from)
        log_keys_lost(w, p, &r);
    bool stop = worker_lost_stops(&r) && !w->o.continue_on_lost;
    if (stop)
        pause_one(w, p->id, true); /* also through later seeks and re-assignments */
    else
        p->move_to = r.resume_at;
    if (worker_lost_found(w->lost, p->id, &r, stop, clk_wall_ms()) != 0)
        wlog(w, 0, "partition %" PRId32 ": out of memory counting lost offsets", p->id);
    if (!stop)
        worker_lost_skipped(w->lost, p->id, r.records_from, r.records_to);
    if (r.past_end)
        wlog(w, 0,
             "partition %" PRId32 " of %s: position %" PRId64 " is past the log end %" PRId64
             " (log start %" PRId64 "): the log was cut (unclean leader election) or the topic "
             "made again; %s",
             p->id, w->o.raw_topic, pos, hi, lo,
             stop ? "partition stopped, the others go on (docs/scale-out.md, \"Records deleted "
                    "before they were processed\")"
                  : "going on at the log end (--on-records-lost continue)");
    else if (r.records_to > r.records_from && stop)
        wlog(w, 0,
             "partition %" PRId32 " of %s: records [%" PRId64 ", %" PRId64 ") were deleted "
             "(retention or DeleteRecords) before this worker processed them: %" PRId64
             " offset(s) lost, their events are not in the output; partition stopped "
             "(--on-records-lost stop), the others go on; to go on at the log start: "
             "POST /admin/partitions/%" PRId32 "/resume",
             p->id, w->o.raw_topic, r.records_from, r.records_to, r.records_to - r.records_from,
             p->id);
    else if (r.records_to > r.records_from)
        wlog(w, 0,
             "partition %" PRId32 " of %s: records [%" PRId64 ", %" PRId64 ") were deleted "
             "(retention or DeleteRecords) before this worker processed them: %" PRId64
             " offset(s) lost, their events are not in the output; going on at the log start "
             "(--on-records-lost continue)",
             p->id, w->o.raw_topic, r.records_from, r.records_to, r.records_to - r.records_from);
    else if (r.keys_to == r.keys_from)
        wlog(w, 1,
             "partition %" PRId32 ": position %" PRId64 " reported out of range, but the log "
             "holds [%" PRId64 ", %" PRId64 "): reading on",
             p->id, pos, lo, hi);
}

/* cluster_worker_resume on the run() thread. A cluster status, *out filled on CLUSTER_OK. */
static int resume_stopped(cluster_worker_t *w, int32_t id, cluster_resume_t *out)
{
    lost_range_t r;
    int64_t lo = -1, hi = -1;
    memset(out, 0, sizeof *out);
    out->partition = id;
    out->status = part_get(w, id) == NULL                 ? CLUSTER_RESUME_NOT_OWNED
                  : !worker_lost_stopped(w->lost, id, &r) ? CLUSTER_RESUME_NOT_STOPPED
                                                          : CLUSTER_RESUME_RESUMED;
    if (out->status != CLUSTER_RESUME_RESUMED)
        return CLUSTER_OK;
    if (watermarks(w, id, &lo, &hi) != CLUSTER_OK)
        return CLUSTER_TIMEOUT;
    /* The log start may have moved on since the stop: whatever is below it now is skipped. */
    out->resumed_at = r.past_end ? hi : lo;
    out->skipped_from = r.past_end ? out->resumed_at : r.records_from;
    if (move_one(w, id, out->resumed_at) != CLUSTER_OK)
        return CLUSTER_KAFKA;
    worker_lost_skipped(w->lost, id, out->skipped_from, out->resumed_at);
    wlog(w, 1,
         "partition %" PRId32 " of %s resumed by the operator at offset %" PRId64
         ": offsets [%" PRId64 ", %" PRId64 ") skipped",
         id, w->o.raw_topic, out->resumed_at, out->skipped_from, out->resumed_at);
    return CLUSTER_OK;
}

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
    store_reader_t *r = NULL;
    store_info_t info;
    genset_totals_t gt;
    keyhash(p->secret, q->source, q->source_len, q->mid, q->mid_len, key);
    *found = false;
    int rc = store_reader_open(p->st, &r);
    if (rc == STORE_OK)
        rc = store_reader_info(r, &info);
    if (rc == STORE_OK)
        rc = store_reader_entry(r, key, found, e);
    store_reader_close(r);
    if (rc != STORE_OK)
        return rc;
    genset_view_totals(p->gv, &gt);
    *oldest_ms = gt.keys ? gt.oldest_received_ms : (info.keys ? info.oldest_received_ms : 0);
    if (*found)
        return STORE_OK;
    gen_entry_t ge;
    int grc = genset_view_find(p->gv, key, found, &ge);
    if (grc != GEN_OK)
        return grc == GEN_NOMEM ? STORE_NOMEM : STORE_EIO;
    if (*found) {
        e->offset = ge.offset;
        e->received_ms = ge.received_ms;
    }
    return STORE_OK;
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
    const part_t *p = out->partition >= 0 ? part_get(w, out->partition) : NULL;
    if (p != NULL) {
        if (lookup_part(p, q, &found, &e, &oldest) != STORE_OK)
            return CLUSTER_STORE;
        out->status = CLUSTER_LOOKUP_UNSEEN;
        out->window_start_ms = oldest;
    }
    return CLUSTER_OK;
}

/* Answers every queued lookup (the run() thread, between batches). */
static void answer_lookups(cluster_worker_t *w)
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
        q->rc = q->rout ? resume_stopped(w, q->resume, q->rout) : answer_lookup(w, q, q->out);
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

static int consumer_subscribe(cluster_worker_t *w, char *err, size_t errlen)
{
    rd_kafka_topic_partition_list_t *sub = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(sub, w->o.raw_topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t se = rd_kafka_subscribe(w->consumer, sub);
    rd_kafka_topic_partition_list_destroy(sub);
    if (se) {
        errbuf_printf(err, errlen, "subscribe to %s: %s", w->o.raw_topic, rd_kafka_err2str(se));
        return CLUSTER_KAFKA;
    }
    return CLUSTER_OK;
}

/*
 * Replaces a consumer that hit a fatal error. librdkafka makes FENCED_INSTANCE_ID fatal, and a
 * real cluster answers it without any other instance: when the group coordinator's broker dies,
 * the session times out, and the rejoin races the new coordinator (seen on Kafka 4.4 with
 * librdkafka 2.0.2, tests/kafka/test_real_failover.py). The dead consumer never consumes again,
 * so without this the worker would sit idle for good. The new one rejoins with the same
 * group.instance.id; its partitions come back through on_assign and the usual positions.
 * Called between batches (no transaction open). CLUSTER_OK, or the new consumer's error.
 */
static int consumer_restart(cluster_worker_t *w, char *err, size_t errlen)
{
    char why[512] = "";
    rd_kafka_resp_err_t fe = rd_kafka_fatal_error(w->consumer, why, sizeof why);
    wlog(w, 0, "consumer: fatal error %s (%s); replacing the consumer", rd_kafka_err2name(fe), why);
    w->c.consumer_restarts++;
    atomic_store(&w->ready, false);
    rd_kafka_consumer_close(w->consumer); /* revokes what is left: closes those stores */
    rd_kafka_destroy(w->consumer);
    w->consumer = NULL;
    w->rebalanced = false;
    int rc = consumer_new(w, err, errlen);
    if (rc == CLUSTER_OK)
        rc = consumer_subscribe(w, err, errlen);
    return rc;
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
            move_pending(w); /* nothing gathered yet: a partition may move (out_of_range) */
        if (n > 0 && left <= 0)
            break;
        rd_kafka_message_t *m = rd_kafka_consumer_poll(w->consumer, n == 0 ? 100 : (int)left);
        if (w->rebalanced) {
            n = drop_moved(w, msgs, epochs, n);
            w->rebalanced = false;
        }
        if (m == NULL) {
            if (n == 0)
                answer_lookups(w); /* idle: no batch's transaction is open */
            if (n == 0 && clk_mono_ms() - *last_snap > 1000) {
                snapshot(w);
                *last_snap = clk_mono_ms();
            }
            continue;
        }
        if (m->err == RD_KAFKA_RESP_ERR__FATAL) {
            rd_kafka_message_destroy(m);
            w->consumer_fatal = true; /* run() replaces the consumer */
            break;
        }
        if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET && part_get(w, m->partition)) {
            wlog(w, 3, "consume: %s", rd_kafka_message_errstr(m));
            out_of_range(w, part_get(w, m->partition), m->offset);
            rd_kafka_message_destroy(m);
            continue;
        }
        if (m->err) {
            if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                wlog(w, 1, "consume: %s", rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            continue;
        }
        part_t *p = part_get(w, m->partition);
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

    if ((rc = producer_init(w, err, errlen)) != CLUSTER_OK) {
        if (atomic_load(&w->stop))
            rc = CLUSTER_OK; /* stopped while waiting for the cluster */
        goto out;
    }
    if ((rc = consumer_subscribe(w, err, errlen)) != CLUSTER_OK)
        goto out;
    wlog(w, 2, "worker %s consuming %s -> %s as group %s", w->txn_id, w->o.raw_topic,
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
            if ((rc = consumer_restart(w, err, errlen)) != CLUSTER_OK)
                goto out;
            continue;
        }
        if (n == 0) {
            maintain_idle(w); /* generations age out while no record comes */
            continue;
        }
        rc = process(w, msgs, n, err, errlen);
        for (size_t i = 0; i < n; i++)
            rd_kafka_message_destroy(msgs[i]);
        n = 0;
        snapshot(w);
        last_snap = clk_mono_ms();
        answer_lookups(w);
        if (rc != CLUSTER_OK)
            goto out;
    }
    wlog(w, 2, "stopping: %s",
         w->o.dynamic_membership ? "leaving the group"
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
    snapshot(w);
    return rc;
}

/* ---- operator views ---- */

static void snapshot(cluster_worker_t *w)
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
        worker_sources_add_young(w->sources, p->sources);
        worker_sources_add_gens(w->sources, p->gv);
        store_info_t info;
        memset(&info, 0, sizeof info);
        if (!p->txn_open)
            store_get_info(p->st, &info);
        genset_totals_t gt;
        genset_view_totals(p->gv, &gt);
        int64_t oldest =
            gt.keys ? gt.oldest_received_ms : (info.keys ? info.oldest_received_ms : 0);
        int64_t lo = -1, hi = -1;
        rd_kafka_get_watermark_offsets(w->consumer, w->o.raw_topic, p->id, &lo, &hi);
        s[k++] = (part_snap_t){.id = p->id,
                               .keys = info.keys + gt.keys,
                               .generations = genset_view_count(p->gv),
                               .generation_keys = gt.keys,
                               .merges = merger_merges(p->mp),
                               .applied = p->applied,
                               .oldest_ms = oldest,
                               .committed = p->committed,
                               .high = hi,
                               .position = (int64_t)p->applied};
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
    pthread_mutex_unlock(&w->snap_mu);
    worker_sources_prom(w->sources, p, now);
    worker_lost_prom(w->lost, p);
    return prom_take(p, NULL);
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
        part_close(w, i);
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
