/* worker_partitions.c: the Kafka worker's partitions: their windows opened, kept, closed on
 * rebalances, and stopped or moved when records were deleted before they were read. */
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

/* ---- partitions ---- */

/* Logs what opening partition p's window found and repaired (engine.h). */
static void log_opened(cluster_worker_t *w, const part_t *p, const char *dir,
                       const window_engine_opened_t *o)
{
    if (o->gen_rc != GEN_OK)
        worker_log(w, 0, "partition %" PRId32 ": generations in %s/gens: %s", p->id, dir,
                   gen_strerror(o->gen_rc));
    if (o->files_cleaned > 0)
        worker_log(w, 1,
                   "partition %" PRId32 ": removed %" PRIu64 " generation file(s) a crash left",
                   p->id, o->files_cleaned);
    if (o->recovery.finished)
        worker_log(w, o->recovery.rebased ? 1 : 2,
                   "partition %" PRId32
                   ": finished a seal a crash cut short (generations end at %" PRIu64 "%s)",
                   p->id, o->recovery.end_seq,
                   o->recovery.rebased
                       ? "; the store had lost its last commits to a power loss, moved on"
                       : "");
    if (o->gens_missing)
        worker_log(w, 0,
                   "partition %" PRId32 ": generations in %s/gens: the one holding sequences "
                   "%" PRIu64 "..%" PRIu64
                   " is missing (a lost file: its keys are forgotten, and retries of their "
                   "records would be produced again)",
                   p->id, dir, o->missing.first, o->missing.end - 1);
}

uint64_t worker_part_young_keys(const cluster_worker_t *w)
{
    return w->o.young_keys ? w->o.young_keys : GENSET_YOUNG_KEYS;
}

/* The merger's failures (on its thread; the log sink takes any thread's). */
void worker_part_on_merge_fail(void *arg, int32_t partition, int rc, size_t n)
{
    worker_log(arg, 1,
               "partition %" PRId32
               ": merging %zu generations: %s; the window stays whole, and the "
               "merge is tried again after the next seal or drop",
               partition, n, gen_strerror(rc));
}

/*
 * Between batches (no LMDB transaction open): seals a full young store, drops generations,
 * asks the merger to merge (window_engine_maintain): a merge takes seconds at 100M keys,
 * which this thread must not stop consuming for. A failure is logged and left for the next
 * time: the window stays whole either way (seal.h).
 */
void worker_part_maintain(cluster_worker_t *w, part_t *p, int64_t now)
{
    window_maintain_t m = {.now_ms = now, .every_ms = MAINTAIN_EVERY_MS};
    int src = window_engine_maintain(p->win, &m, NULL);
    if (src != STORE_OK) {
        worker_log(w, 1, "partition %" PRId32 ": sealing or keeping the generations: %s", p->id,
                   store_strerror(src));
        w->c.store_errors++;
    }
}

/* Keeps every partition's generations to the rule while no batch comes (rate-limited). */
void worker_part_maintain_idle(cluster_worker_t *w)
{
    int64_t now = clk_wall_ms();
    for (int32_t i = 0; i < w->nparts_cap; i++) {
        part_t *p = w->parts[i];
        if (p != NULL && !p->txn_open &&
            now - window_engine_maintained(p->win) >= MAINTAIN_EVERY_MS)
            worker_part_maintain(w, p, now);
    }
}

/*
 * A partition store of an older format (2 or 3) holds keys without their
 * source's tag and no payloads to take it from: it is started afresh, keeping
 * its secret, applied offset 0. worker_kafka_position() then sees it behind the group's
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
    worker_log(w, 1,
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

part_t *worker_part_get(cluster_worker_t *w, int32_t id)
{
    return id >= 0 && id < w->nparts_cap ? w->parts[id] : NULL;
}

static int part_open(cluster_worker_t *w, int32_t id, part_t **out)
{
    char dir[4096];
    store_options_t so = {.map_size = w->o.map_size ? w->o.map_size : DEFAULT_MAP_SIZE,
                          .sync = w->o.store_sync};
    *out = worker_part_get(w, id);
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
    store_t *st = NULL;
    window_engine_opened_t opened;
    window_engine_options_t wo = {.window_ms = w->o.window_ms,
                                  .max_keys = w->o.max_keys,
                                  .young_keys = w->o.young_keys,
                                  .merger = w->merger,
                                  .merger_id = id};
    if (datadir_partition(dir, sizeof dir, w->o.data_dir, w->o.raw_topic, id) != 0 ||
        fsutil_mkdirs(dir) != 0) {
        worker_log(w, 0, "partition %" PRId32 ": cannot create %s: %s", id, dir, strerror(errno));
        goto fail;
    }
    int src = store_open(dir, &so, &st);
    if (src == STORE_VERSION)
        src = part_migrate(w, id, dir, &so, &st);
    /* LMDB never syncs its directory: the name of a new data.mdb is durable from here. */
    if (src == STORE_OK && fsutil_sync_dir(dir) != 0)
        src = STORE_EIO;
    if (src == STORE_OK)
        src = store_secret(st, NULL, p->secret);
    if (src == STORE_OK) {
        src = window_engine_open(st, dir, &wo, &p->win, &opened); /* takes st */
        st = NULL;
        log_opened(w, p, dir, &opened);
    }
    if (src == STORE_OK)
        src = store_get_info(window_engine_store(p->win), &info);
    if (src != STORE_OK) {
        worker_log(w, 0, "partition %" PRId32 ": store %s: %s", id, dir, store_strerror(src));
        goto fail;
    }
    p->applied = info.applied;
    w->parts[id] = p;
    *out = p;
    return CLUSTER_OK;
fail:
    store_close(st);
    window_engine_close(p->win);
    free(p);
    return rc;
}

void worker_part_close(cluster_worker_t *w, int32_t id)
{
    part_t *p = worker_part_get(w, id);
    if (p == NULL)
        return;
    window_engine_close(p->win); /* cancels its merge, aborts an open txn, if any */
    free(p);
    w->parts[id] = NULL;
    /* Its new owner meets the same out-of-range position and stops it there, if still so. */
    worker_lost_unassigned(w->lost, id);
}

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
    while (worker_kafka_position(w, list) != CLUSTER_OK && !atomic_load(&w->stop))
        usleep(RETRY_PAUSE_MS * 1000);
    rd_kafka_error_t *e = NULL;
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    if (coop)
        e = rd_kafka_incremental_assign(rk, list);
    else
        err = rd_kafka_assign(rk, list);
    if (e != NULL || err) {
        worker_log(w, 0, "assign: %s; stopping",
                   e ? rd_kafka_error_string(e) : rd_kafka_err2str(err));
        rd_kafka_error_destroy(e);
        atomic_store(&w->stop, true);
    }
    /* A partition stopped here (records lost), revoked and assigned again, starts afresh: left
     * paused it would stall without a word; read, it meets its out-of-range position again. */
    rd_kafka_resume_partitions(rk, list);
    worker_log(w, 2, "assigned %d partition(s) of %s%s", list->cnt, w->o.raw_topic,
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
            worker_log(w, 1, "incremental unassign: %s", rd_kafka_error_string(e));
            rd_kafka_error_destroy(e);
        }
    } else {
        rd_kafka_assign(rk, NULL);
    }
    for (int i = 0; i < list->cnt; i++)
        worker_part_close(w, list->elems[i].partition);
    worker_log(w, 2, "revoked %d partition(s) (%s%s%s)", list->cnt,
               err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS ? "rebalance" : rd_kafka_err2str(err),
               coop ? ", incremental" : "", lost ? ", lost" : "");
}

void worker_part_on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                              rd_kafka_topic_partition_list_t *list, void *opaque)
{
    cluster_worker_t *w = opaque;
    bool coop = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
    w->rebalanced = true;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS)
        on_assign(w, rk, list, coop);
    else
        on_revoke(w, rk, err, list, coop);
    worker_views_snapshot(w);
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
        worker_log(w, 1, "partition %" PRId32 ": reading its watermarks: %s; retrying", id,
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
        worker_log(w, 0, "partition %" PRId32 ": %s: %s", id, pause ? "pause" : "resume",
                   rd_kafka_err2str(err ? err : l->elems[0].err));
    rd_kafka_topic_partition_list_destroy(l);
}

/*
 * Moves partition id to `offset` and lets it be fetched. After an out-of-range error
 * librdkafka has stopped the partition's fetcher and refuses a seek (its state is
 * FETCH_NONE), so the partition is taken out of the assignment and put back at the offset:
 * incrementally under the cooperative protocol; under an eager one the whole assignment is
 * set again at the positions worker_kafka_position() gives. Only between batches (no record of the
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
        if (worker_kafka_position(w, l) != CLUSTER_OK)
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
        worker_log(w, 0, "partition %" PRId32 ": moving to offset %" PRId64 ": %s", id, offset,
                   e ? rd_kafka_error_string(e) : rd_kafka_err2str(err));
    else
        pause_one(w, id, false);
    int rc = e != NULL || err ? CLUSTER_KAFKA : CLUSTER_OK;
    rd_kafka_error_destroy(e);
    if (l != NULL)
        rd_kafka_topic_partition_list_destroy(l);
    return rc;
}

/* The moves worker_part_out_of_range decided, before a batch is gathered. One that fails is logged
 * and tried again after RETRY_PAUSE_MS (the partition is not read meanwhile, and says so). */
void worker_part_move_pending(cluster_worker_t *w)
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
    worker_log(w, window ? 0 : 2,
               "partition %" PRId32 " of %s: offsets [%" PRId64 ", %" PRId64
               ") were deleted before "
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
void worker_part_out_of_range(cluster_worker_t *w, part_t *p, int64_t pos)
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
        worker_log(w, 0, "partition %" PRId32 ": out of memory counting lost offsets", p->id);
    if (!stop)
        worker_lost_skipped(w->lost, p->id, r.records_from, r.records_to);
    if (r.past_end)
        worker_log(
            w, 0,
            "partition %" PRId32 " of %s: position %" PRId64 " is past the log end %" PRId64
            " (log start %" PRId64 "): the log was cut (unclean leader election) or the topic "
            "made again; %s",
            p->id, w->o.raw_topic, pos, hi, lo,
            stop ? "partition stopped, the others go on (docs/scale-out.md, \"Records deleted "
                   "before they were processed\")"
                 : "going on at the log end (--on-records-lost continue)");
    else if (r.records_to > r.records_from && stop)
        worker_log(w, 0,
                   "partition %" PRId32 " of %s: records [%" PRId64 ", %" PRId64 ") were deleted "
                   "(retention or DeleteRecords) before this worker processed them: %" PRId64
                   " offset(s) lost, their events are not in the output; partition stopped "
                   "(--on-records-lost stop), the others go on; to go on at the log start: "
                   "POST /admin/partitions/%" PRId32 "/resume",
                   p->id, w->o.raw_topic, r.records_from, r.records_to,
                   r.records_to - r.records_from, p->id);
    else if (r.records_to > r.records_from)
        worker_log(w, 0,
                   "partition %" PRId32 " of %s: records [%" PRId64 ", %" PRId64 ") were deleted "
                   "(retention or DeleteRecords) before this worker processed them: %" PRId64
                   " offset(s) lost, their events are not in the output; going on at the log start "
                   "(--on-records-lost continue)",
                   p->id, w->o.raw_topic, r.records_from, r.records_to,
                   r.records_to - r.records_from);
    else if (r.keys_to == r.keys_from)
        worker_log(w, 1,
                   "partition %" PRId32 ": position %" PRId64 " reported out of range, but the log "
                   "holds [%" PRId64 ", %" PRId64 "): reading on",
                   p->id, pos, lo, hi);
}

/* cluster_worker_resume on the run() thread. A cluster status, *out filled on CLUSTER_OK. */
int worker_part_resume(cluster_worker_t *w, int32_t id, cluster_resume_t *out)
{
    lost_range_t r;
    int64_t lo = -1, hi = -1;
    memset(out, 0, sizeof *out);
    out->partition = id;
    out->status = worker_part_get(w, id) == NULL          ? CLUSTER_RESUME_NOT_OWNED
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
    worker_log(w, 1,
               "partition %" PRId32 " of %s resumed by the operator at offset %" PRId64
               ": offsets [%" PRId64 ", %" PRId64 ") skipped",
               id, w->o.raw_topic, out->resumed_at, out->skipped_from, out->resumed_at);
    return CLUSTER_OK;
}
