/*
 * commit/checkpoint.c: the checkpointer thread, which writes the keys the
 * writer acknowledged into LMDB in the background.
 *
 * DESIGN. A group commit is acknowledged once the log is fsynced;
 * its keys stay in the writer's pending generation (pending.h), which is
 * handed to the checkpointer thread every CHECKPOINT_MS or CHECKPOINT_EVENTS
 * keys, whichever comes first, when the checkpointer is idle. What a crash
 * loses of LMDB since the last checkpoint the log replays at start (it is
 * durable: every batch was fsynced to the log before its ack).
 * Keys are hashes, so a checkpoint touches leaf pages all over the tree: at a
 * few million keys, every one of them. Its cost is the pages it writes, so
 * checkpoints are rare and big (more keys per page written), and a
 * generation's keys, and the keys it evicts, go in key order, OPS_PER_TXN
 * per transaction: each transaction writes and syncs its own slice of the
 * tree, so the disk never holds more than one small sync ahead of the log's
 * fsyncs (ckpt_run). Deletions below the floor beyond what a checkpoint reads
 * ahead (as many as it puts, at least EVICT_READ_MIN) go in the last
 * transactions, up to `ckpt_chunk` each; when LMDB runs out of dirty-page
 * room (STORE_TXN_FULL) that is halved, and it grows back after each full
 * one that fits. LMDB holds a transaction's dirty pages in memory until the
 * commit, and in a big window every deletion dirties a leaf page of its own,
 * so once the store outgrows DIRTY_MAX_BYTES a transaction deletes at most
 * CHUNK_BIG_WINDOW keys.
 * PENDING_MAX bounds the keys waiting for a checkpoint: past it the writer
 * waits for the checkpointer (a slow disk or a huge window), so memory stays
 * bounded (~50 bytes a key, two generations) and the queue bound (503) does
 * the rest.
 *
 * Functions, in order: ckpt_cancelled, ckpt_commit, ckpt_key_bits, ckpt_run
 * (one job), ckpt_thread, commit_ckpt_start / _stop / _settle; then the
 * writer's side: ckpt_finish, ckpt_grow_ahead, commit_ckpt_hand_off,
 * commit_ckpt_wait, and the rest of its part in commit_lmdb_mode:
 * commit_ckpt_throttle, _drain, _due.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "storage/commit/internal.h"
#include "storage/window/seal.h"

#define CHECKPOINT_MS     3000
#define CHECKPOINT_EVENTS 524288
#define PENDING_MAX       1048576
#define OPS_PER_TXN       4096
#define EVICT_READ_MIN    65536
#define CHUNK_MIN         1024
#define DIRTY_MAX_BYTES   (512ull << 20)
/* ckpt_run's result when commit_ckpt_settle stopped it (not a store status). */
#define JOB_CANCELLED 1

static bool ckpt_cancelled(commit_t *c)
{
    pthread_mutex_lock(&c->mu);
    bool stop = c->job.cancel;
    pthread_mutex_unlock(&c->mu);
    return stop;
}

/* One LMDB transaction of a checkpoint; counts it for the writer (see commit_ckpt_hand_off). */
static int ckpt_commit(commit_t *c, int rc)
{
    if (rc == STORE_OK)
        rc = store_txn_commit(c->store);
    else
        store_txn_abort(c->store);
    if (rc == STORE_OK) {
        pthread_mutex_lock(&c->mu);
        c->job.commits++; /* the writer may move its snapshot on */
        pthread_mutex_unlock(&c->mu);
    }
    return rc;
}

/* The first 32 bits of a key: the order store_key_order sorts by. */
static uint32_t ckpt_key_bits(const store_entry_t *e)
{
    return bytes_get_be32(e->key);
}

/*
 * Keys both put and evicted by one checkpoint: a key carried to the young end by a per-source
 * budget (its old entry below the floor, its new one in the generation), or one accepted again
 * after it aged out. Marks them (by item and by gone index) and takes them out of `order` and
 * `gorder` (both in key order), into `corder`: they are written in the checkpoint's last-phase
 * transaction, with the sequence entries, never in the slices. Written in a slice, the new
 * `keys` entry replaced the old one while its sequence entry came only with that later
 * transaction: a crash in between left a key that names a sequence which never names it back
 * (and which the replay gives to another key), since a carried key has no record to replay.
 */
static void ckpt_split_shared(const store_entry_t *items, uint32_t *order, size_t *n,
                              const store_entry_t *gone, uint32_t *gorder, size_t *ng,
                              uint32_t *corder, size_t *nc, bool *shared_item, bool *shared_gone)
{
    size_t i = 0, g = 0;
    while (i < *n && g < *ng) {
        uint32_t a = ckpt_key_bits(&items[order[i]]), b = ckpt_key_bits(&gone[gorder[g]]);
        if (a != b) {
            i += a < b;
            g += b < a;
            continue;
        }
        size_t ie = i, ge = g;
        while (ie < *n && ckpt_key_bits(&items[order[ie]]) == a)
            ie++;
        while (ge < *ng && ckpt_key_bits(&gone[gorder[ge]]) == a)
            ge++;
        for (size_t x = i; x < ie; x++)
            for (size_t y = g; y < ge; y++)
                if (memcmp(items[order[x]].key, gone[gorder[y]].key, KEYHASH_LEN) == 0)
                    shared_item[order[x]] = shared_gone[gorder[y]] = true;
        i = ie;
        g = ge;
    }
    size_t k = 0;
    *nc = 0;
    for (size_t x = 0; x < *n; x++) {
        if (shared_item[order[x]])
            corder[(*nc)++] = order[x];
        else
            order[k++] = order[x];
    }
    *n = k;
    k = 0;
    for (size_t y = 0; y < *ng; y++)
        if (!shared_gone[gorder[y]])
            gorder[k++] = gorder[y];
    *ng = k;
}

/*
 * Writes a generation into LMDB. First its keys and the keys it evicts (the
 * oldest sequences below the floor, up to the generation's size or
 * EVICT_READ_MIN), merged in key order, OPS_PER_TXN puts and deletions per
 * transaction: each transaction covers its own slice of the key space, so it
 * writes (and syncs) only the pages of that slice, and no page twice over
 * the whole checkpoint. A checkpoint is thus many small syncs, not one of the
 * whole tree, and the log's fsyncs never queue behind more than one of them.
 * Then one transaction with the keys both put and evicted (carried ones:
 * ckpt_split_shared), the sequence entries, the cut of the evicted ones, any further deletions
 * below the floor (`ckpt_chunk` at most, halved whenever LMDB runs out of dirty pages) and the
 * applied offset; then transactions of deletions only, until none is left below the floor. A crash
 * before the applied offset is written replays the whole generation from the log, which numbers it
 * the same way; the evictions it had begun are finished first (store_mark_evicting, and recovery's
 * replay).
 */
static int ckpt_run(commit_t *c, const ckpt_job_t *j)
{
    const store_entry_t *items = pending_items(j->gen);
    size_t n = pending_count(j->gen), ng = 0, nc = 0, nall = n;
    size_t gmax = n > EVICT_READ_MIN ? n : EVICT_READ_MIN;
    store_entry_t *gone = malloc(gmax * sizeof(*gone));
    uint32_t *order = malloc((2 * n + gmax) * sizeof(*order)), *gorder = order ? order + n : NULL;
    uint32_t *corder = order ? order + n + gmax : NULL; /* keys both put and evicted */
    bool *shared = calloc(n + gmax, sizeof(*shared));
    uint64_t cut_below = 0, deleted = 0;
    int rc = gone && order && shared ? STORE_OK : STORE_NOMEM;

    if (rc == STORE_OK)
        rc = store_read_front(c->store, j->floor, gone, gmax, &ng);
    if (rc == STORE_OK && n > 0)
        rc = store_key_order(items, n, order);
    if (rc == STORE_OK && ng > 0) {
        rc = store_key_order(gone, ng, gorder);
        cut_below = gone[ng - 1].seq + 1;
    }
    if (rc == STORE_OK)
        ckpt_split_shared(items, order, &n, gone, gorder, &ng, corder, &nc, shared, shared + nall);
    for (size_t ip = 0, ig = 0; rc == STORE_OK && (ip < n || ig < ng);) {
        if (ckpt_cancelled(c)) {
            rc = JOB_CANCELLED;
            break;
        }
        size_t mp = 0, mg = 0; /* this slice: puts and deletions, merged in key order */
        while (mp + mg < OPS_PER_TXN && (ip + mp < n || ig + mg < ng)) {
            if (ig + mg == ng || (ip + mp < n && ckpt_key_bits(&items[order[ip + mp]]) <=
                                                     ckpt_key_bits(&gone[gorder[ig + mg]])))
                mp++;
            else
                mg++;
        }
        rc = store_txn_begin(c->store);
        if (rc == STORE_OK && ig == 0 && mg > 0)
            rc = store_mark_evicting(c->store, cut_below);
        if (rc == STORE_OK)
            rc = store_put_keys(c->store, items, order + ip, mp);
        if (rc == STORE_OK)
            rc = store_delete_keys(c->store, gone, gorder + ig, mg, &deleted);
        rc = ckpt_commit(c, rc);
        ip += mp;
        ig += mg;
    }
    free(gone);
    free(shared);

    bool first = true, evicting = true;
    while (rc == STORE_OK && (first || evicting)) {
        if (ckpt_cancelled(c)) {
            rc = JOB_CANCELLED;
            break;
        }
        size_t chunk = c->ckpt_chunk;
        if (c->ckpt_store_bytes > DIRTY_MAX_BYTES && chunk > CHUNK_BIG_WINDOW)
            chunk = CHUNK_BIG_WINDOW;
        uint64_t evicted = 0, cut = 0;
        rc = store_txn_begin(c->store);
        if (rc == STORE_OK && first && nc > 0)
            rc = store_put_keys(c->store, items, corder, nc);
        if (rc == STORE_OK && first)
            rc = store_append_seq(c->store, items, nall);
        if (rc == STORE_OK && first && cut_below > 0)
            rc = store_cut_front(c->store, cut_below, &cut);
        if (rc == STORE_OK)
            rc = store_evict_below(c->store, j->floor, chunk, &evicted);
        if (rc == STORE_OK && first)
            rc = store_set_applied(c->store, j->applied);
        rc = ckpt_commit(c, rc);
        if (rc == STORE_TXN_FULL && chunk > CHUNK_MIN) {
            c->ckpt_chunk = chunk / 2; /* redo it with fewer deletions */
            rc = STORE_OK;
            continue;
        }
        first = false;
        evicting = evicted == chunk;
        if (rc == STORE_OK && evicting && chunk < CHUNK_MAX)
            c->ckpt_chunk = chunk * 2;
    }
    free(order);
    return rc;
}

/*
 * After a checkpoint, on the checkpointer thread (the one writer of LMDB):
 * the engine seals the young store once it holds young_keys, then applies the
 * window's rule to the generations (docs/window.md), and counts both. The job
 * has just put every key it had and deleted every one below its floor, so the
 * young store is whole. The writer recounts its sources after a seal and takes
 * the new view itself (caller_keeps_view). A failure is the checkpoint's: storage is
 * re-established from disk.
 */
static int ckpt_seal(commit_t *c, window_maintained_t *out)
{
    if (!c->engine)
        return STORE_OK;
    window_maintain_t m = {.now_ms = clk_wall_ms(), .every_ms = 0, .caller_keeps_view = true};
    return window_engine_maintain(c->engine, &m, out);
}

/*
 * The checkpointer thread: runs the jobs the writer hands it, one at a time,
 * and reports each back (JOB_DONE, signalling cv). It never touches the log,
 * the view or the queue; the writer never writes LMDB while a job runs.
 */
static void *ckpt_thread(void *arg)
{
    commit_t *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (c->job.state != JOB_QUEUED && !c->job.quit)
            pthread_cond_wait(&c->ckpt_cv, &c->mu);
        if (c->job.state != JOB_QUEUED)
            break;
        c->job.state = JOB_RUNNING;
        ckpt_job_t j = c->job;
        pthread_mutex_unlock(&c->mu);

        double t0 = clk_mono_msf();
        int rc = ckpt_run(c, &j);
        if (rc == STORE_OK) /* log retention may now delete what the job applied */
            rc = commit_retain_store_durable(c, j.applied);
        double ms = clk_mono_msf() - t0;
        window_maintained_t sr = {0};
        if (rc == STORE_OK)
            rc = ckpt_seal(c, &sr);
        store_info_t si;
        bool info = rc == STORE_OK && store_get_info(c->store, &si) == STORE_OK;

        pthread_mutex_lock(&c->mu);
        if (rc == STORE_OK) {
            c->stats.checkpoints++;
            c->stats.checkpoint_ms_last = ms;
            c->stats.checkpoint_ms_total += ms;
            if (ms > c->stats.checkpoint_ms_max)
                c->stats.checkpoint_ms_max = ms;
        } else if (rc != JOB_CANCELLED) {
            c->stats.checkpoint_failures++;
        }
        if (info) {
            c->ckpt_store_bytes = si.used_bytes;
            c->stats.store_map_size = si.map_size;
            c->stats.store_used_bytes = si.used_bytes;
        }
        c->job.sealed = sr.sealed;
        c->job.status = rc;
        c->job.state = JOB_DONE;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int commit_ckpt_start(commit_t *c, char *errbuf, size_t errlen)
{
    if (pthread_create(&c->ckpt_thread, NULL, ckpt_thread, c) != 0) {
        errbuf_printf(errbuf, errlen, "starting the checkpointer thread: %s", strerror(errno));
        return -1;
    }
    c->ckpt_started = true;
    return 0;
}

void commit_ckpt_stop(commit_t *c)
{
    if (!c->ckpt_started)
        return;
    commit_ckpt_settle(c); /* only when the writer never ran: it leaves none behind */
    pthread_mutex_lock(&c->mu);
    c->job.quit = true;
    pthread_cond_signal(&c->ckpt_cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->ckpt_thread, NULL);
    c->ckpt_started = false;
}

/* Waits for the checkpointer's job to end, cancelling what is left of it, and drops it. */
void commit_ckpt_settle(commit_t *c)
{
    pthread_mutex_lock(&c->mu);
    if (c->job.state == JOB_QUEUED || c->job.state == JOB_RUNNING) {
        c->job.cancel = true;
        while (c->job.state != JOB_DONE)
            pthread_cond_wait(&c->cv, &c->mu);
    }
    c->job.state = JOB_IDLE;
    c->job.cancel = false;
    pthread_mutex_unlock(&c->mu);
}

/*
 * After a seal the young store is empty: every key below the pending
 * generation is in a generation file now, which `live` does not count. (A
 * key the writer aged out while the seal ran stays in the generation until
 * the generation goes: kept longer, never shorter, than the window.)
 */
static void ckpt_count_live(commit_t *c)
{
    uint64_t base = pending_base(c->cur), n = pending_count(c->cur);
    c->live = c->floor <= base ? n : c->floor >= base + n ? 0 : base + n - c->floor;
}

/*
 * Takes a finished job's result. Written: the snapshot moves on to include
 * it, and its generation is no longer needed. Failed: every batch in it is
 * durable in the log and acknowledged, so the failure costs no request:
 * storage is re-opened from disk, which replays them.
 */
static void ckpt_finish(commit_t *c)
{
    pthread_mutex_lock(&c->mu);
    int status = c->job.status;
    uint64_t sealed = c->job.sealed;
    c->job.state = JOB_IDLE;
    pthread_mutex_unlock(&c->mu);
    if (status == STORE_OK) {
        store_info_t si;
        status = commit_view_refresh(c);
        if (status == STORE_OK)
            status = store_reader_info(c->reader, &si);
        /* The checkpoint must have numbered its keys exactly as the view did. */
        if (status == STORE_OK && si.next_seq != pending_end(c->flight))
            status = STORE_CORRUPT;
        if (status == STORE_OK) {
            c->snap_end = si.next_seq;
            c->spare = c->flight;
            c->flight = NULL;
            /* A seal emptied the young store: what is left of the window's young part is cur. */
            if (sealed > 0) {
                ckpt_count_live(c);
                status = commit_view_count_sources(c);
            }
            commit_refresh_stats(c); /* a seal or a drop changes the window while idle too */
            if (status == STORE_OK)
                return;
        }
    }
    commit_notify(c, 1, "LMDB checkpoint failed: %s (%s); re-establishing storage from the log",
                  store_strerror(status), store_detail(c->store));
    commit_recover(c, status == STORE_FULL);
    commit_refresh_stats(c);
}

/*
 * Doubles LMDB's map once the store fills half of it. A checkpoint that finds
 * the map full fails, and storage is then re-established from the log, which
 * stalls the writer for a second or more; growing ahead costs only address
 * space. Only while the checkpointer is idle: the writer's snapshot is then
 * the one transaction open.
 */
static void ckpt_grow_ahead(commit_t *c)
{
    pthread_mutex_lock(&c->mu);
    uint64_t used = c->stats.store_used_bytes, map = c->stats.store_map_size;
    pthread_mutex_unlock(&c->mu);
    if (map == 0 || used <= map / 2)
        return;
    store_info_t si;
    int rc = store_reader_grow(c->reader);
    if (rc == STORE_OK) {
        commit_view_take_gens(c); /* the reader moved on */
        rc = store_reader_info(c->reader, &si);
    }
    if (rc != STORE_OK) {
        commit_notify(c, 1, "growing the LMDB map failed: %s; re-establishing storage",
                      store_detail(c->store));
        commit_recover(c, true);
        return;
    }
    pthread_mutex_lock(&c->mu);
    c->stats.map_grows++;
    c->stats.store_map_size = si.map_size;
    pthread_mutex_unlock(&c->mu);
    commit_notify(c, 2, "LMDB map grown to %llu MiB (the store uses %llu MiB)",
                  (unsigned long long)(si.map_size >> 20), (unsigned long long)(used >> 20));
}

/*
 * Whether the generations are due to be dropped (their rule says so) while
 * nothing else is: an idle server must still let its window age out, and the
 * checkpointer's job is where generations go.
 */
static bool ckpt_gens_due(commit_t *c)
{
    if (!c->gview || genset_view_count(c->gview) == 0)
        return false;
    genset_policy_t p = commit_view_gen_policy(c);
    genset_plan_t plan;
    p.fanin = 0; /* merges wait for the next checkpoint */
    genset_plan(c->gview, &p, clk_wall_ms(), c->live, &plan);
    return plan.drop_age + plan.drop_size > 0;
}

/*
 * Hands the pending generation to the checkpointer when it is idle and a
 * checkpoint is due (or `force`), taking a finished job's result first.
 */
void commit_ckpt_hand_off(commit_t *c, bool force)
{
    pthread_mutex_lock(&c->mu);
    int state = c->job.state;
    uint64_t commits = c->job.commits;
    pthread_mutex_unlock(&c->mu);
    if (state == JOB_RUNNING && commits != c->seen_commits && c->reader) {
        /*
         * A job of several transactions: move the snapshot on after each, so it pins no
         * pages the next one could reuse (else a big window's file grows by every
         * transaction's copy-on-write). The flight is still consulted first and agrees
         * with the snapshot on every key the snapshot now has; snap_end stays at its base.
         */
        c->seen_commits = commits;
        if (commit_view_refresh(c) != STORE_OK) {
            commit_notify(c, 1, "refreshing the LMDB snapshot failed: %s; re-establishing storage",
                          store_detail(c->store));
            commit_recover(c, false);
            commit_refresh_stats(c);
            return;
        }
    }
    if (state == JOB_DONE) {
        ckpt_finish(c);
        state = JOB_IDLE;
    }
    if (state != JOB_IDLE || !c->reader || c->failed)
        return;
    ckpt_grow_ahead(c);
    if (!c->reader || c->failed)
        return;
    size_t n = pending_count(c->cur);
    int64_t t = clk_mono_ms();
    if (n == 0 && c->floor == c->handed_floor && !ckpt_gens_due(c)) {
        if (t - c->cur_since_ms >= CHECKPOINT_MS)
            c->cur_since_ms = t; /* looked: the generations are due again in CHECKPOINT_MS */
        return;
    }
    if (!force && n < CHECKPOINT_EVENTS && t - c->cur_since_ms < CHECKPOINT_MS)
        return;
    log_info_t li;
    log_get_info(c->log, &li);
    pending_reset(c->spare, pending_end(c->cur));
    c->flight = c->cur;
    c->cur = c->spare;
    c->spare = NULL;
    c->handed_floor = c->floor;
    c->cur_since_ms = t;
    pthread_mutex_lock(&c->mu);
    c->job.state = JOB_QUEUED;
    c->job.gen = c->flight;
    c->job.floor = c->floor;
    c->job.applied = li.synced_offset;
    pthread_cond_signal(&c->ckpt_cv);
    pthread_mutex_unlock(&c->mu);
}

/* Waits until the checkpointer is idle or done, and takes its result. */
void commit_ckpt_wait(commit_t *c)
{
    pthread_mutex_lock(&c->mu);
    while (c->job.state == JOB_QUEUED || c->job.state == JOB_RUNNING)
        pthread_cond_wait(&c->cv, &c->mu);
    bool done = c->job.state == JOB_DONE;
    pthread_mutex_unlock(&c->mu);
    if (done)
        ckpt_finish(c);
}

/* The writer, before a batch: past PENDING_MAX keys, let the checkpointer catch up first. */
void commit_ckpt_throttle(commit_t *c)
{
    if (c->cur && pending_count(c->cur) >= PENDING_MAX) {
        commit_ckpt_wait(c);
        commit_ckpt_hand_off(c, true);
    }
}

/* A clean stop leaves nothing to replay: the job under way, then the rest. */
void commit_ckpt_drain(commit_t *c)
{
    commit_ckpt_wait(c);
    commit_ckpt_hand_off(c, true);
    commit_ckpt_wait(c);
}

int64_t commit_ckpt_due(commit_t *c)
{
    if (c->job.state == JOB_DONE)
        return INT64_MIN; /* a result to take */
    /* An idle server checkpoints too, and lets its generations age out (ckpt_gens_due). */
    if (c->reader && c->job.state == JOB_IDLE &&
        (pending_count(c->cur) > 0 || c->floor != c->handed_floor ||
         (c->gview && genset_view_count(c->gview) > 0)))
        return c->cur_since_ms + CHECKPOINT_MS;
    return INT64_MAX;
}
