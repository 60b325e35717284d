/*
 * commit_view.c: the writer's read view of the window (LMDB mode), and the
 * group commit's de-duplication against it.
 *
 * DESIGN. The writer never writes LMDB and never waits for it. It answers
 * "is this key in the window?" from a read snapshot of LMDB (sequences below
 * snap_end) plus the keys acknowledged since, held in memory in sequence
 * order: the generation handed to the checkpointer (`flight`, until its
 * commit is in the snapshot) and the one being filled (`cur`). The newest
 * generation that has a key decides. Eviction only moves the floor: every
 * sequence below it is out of the window whether or not LMDB has deleted it
 * yet (the checkpointer does, later), and every sequence in [floor,
 * next_seq) that exists names a key in the window, `live` of them. So
 * /stats is exact after every batch.
 *
 * Older keys live in sealed generations (docs/window.md): files the
 * checkpointer writes once the young store holds young_keys, dropped whole by
 * the window's rule (genset_plan). They are asked last, through a view of the
 * set taken with every move of the snapshot; `live` counts none of them.
 */
#include <limits.h>
#include <string.h>

#include "storage/commit_internal.h"

/*
 * The writer's view of a freshly opened (and replayed) store: a snapshot of
 * it, nothing pending, the floor at its oldest entry.
 */
int commit_view_open(commit_t *c, char *errbuf, size_t errlen)
{
    store_info_t si;
    store_entry_t e;
    bool found = false;
    int rc = store_reader_open(c->store, &c->reader);
    if (rc == STORE_OK)
        rc = store_reader_info(c->reader, &si);
    if (rc == STORE_OK)
        rc = store_reader_first_from(c->reader, 0, &found, &e);
    if (rc != STORE_OK) {
        commit_errf(errbuf, errlen, "reading the LMDB store: %s (%s)", store_strerror(rc),
                    store_detail(c->store));
        return -1;
    }
    commit_view_take_gens(c);
    c->next_seq = c->snap_end = si.next_seq;
    c->floor = c->handed_floor = found ? e.seq : si.next_seq;
    c->live = si.keys;
    c->cur = pending_new(si.next_seq);
    c->spare = pending_new(si.next_seq);
    if (!c->cur || !c->spare) {
        commit_errf(errbuf, errlen, "out of memory");
        return -1;
    }
    c->cur_since_ms = commit_now_ms(CLOCK_MONOTONIC);
    c->ckpt_store_bytes = si.used_bytes; /* the checkpointer is idle while the view opens */
    pthread_mutex_lock(&c->mu);
    c->stats.store_map_size = si.map_size;
    c->stats.store_used_bytes = si.used_bytes;
    pthread_mutex_unlock(&c->mu);
    return 0;
}

/*
 * *dup when `key` is in the window. The newest generation that has the key
 * decides (a key accepted again after it left the window has a newer
 * sequence there); the snapshot only when no generation has it.
 */
static int view_contains(commit_t *c, const uint8_t key[KEYHASH_LEN], bool *dup)
{
    const store_entry_t *it = pending_find(c->cur, key);
    if (!it && c->flight)
        it = pending_find(c->flight, key);
    if (it) {
        *dup = it->seq >= c->floor;
        return STORE_OK;
    }
    uint64_t seq = 0;
    bool present = false;
    int rc = store_reader_find(c->reader, key, &present, &seq);
    *dup = rc == STORE_OK && present && seq >= c->floor;
    if (rc != STORE_OK || present || !c->gview)
        return rc;
    /* Not in the young store: a sealed generation, every key of which is in the window. */
    int grc = genset_view_find(c->gview, key, dup, NULL);
    return grc == GEN_OK ? STORE_OK : grc == GEN_NOMEM ? STORE_NOMEM : STORE_EIO;
}

int commit_view_refresh(commit_t *c)
{
    int rc = store_reader_refresh(c->reader);
    if (rc == STORE_OK)
        commit_view_take_gens(c);
    return rc;
}

void commit_view_take_gens(commit_t *c)
{
    if (!c->gens)
        return;
    genset_view_release(c->gview);
    c->gview = genset_view(c->gens);
}

bool commit_view_seals(const commit_t *c)
{
    uint64_t young = c->opts.young_keys ? c->opts.young_keys : COMMIT_YOUNG_KEYS;
    return c->opts.max_keys == 0 || c->opts.max_keys > young;
}

genset_policy_t commit_view_gen_policy(const commit_t *c)
{
    uint64_t young = c->opts.young_keys ? c->opts.young_keys : COMMIT_YOUNG_KEYS;
    return (genset_policy_t){.window_ms = c->opts.window_ms,
                             .max_keys = c->opts.max_keys,
                             .merge_min_keys = young,
                             .target_count = 16,
                             .fanin = 4};
}

/* The oldest key in the window (the entry at or after the floor): *found, and *e. */
int commit_view_oldest(commit_t *c, store_entry_t *e, bool *found)
{
    uint64_t from = c->floor;
    *found = false;
    if (from < c->snap_end) {
        int rc = store_reader_first_from(c->reader, from, found, e);
        if (rc != STORE_OK || (*found && e->seq < c->snap_end))
            return rc;
        *found = false;
        from = c->snap_end;
    }
    /* Past the snapshot every sequence up to next_seq is a pending item. */
    const store_entry_t *it = c->flight ? pending_at_seq(c->flight, from) : NULL;
    if (!it)
        it = pending_at_seq(c->cur, from);
    if (it) {
        e->seq = it->seq;
        memcpy(e->key, it->key, KEYHASH_LEN);
        e->received_ms = it->received_ms;
        e->offset = it->offset;
        *found = true;
    }
    return STORE_OK;
}

/*
 * Ages keys out of the view, oldest first, as window_judge says. Only the
 * floor moves; the checkpointer deletes them.
 */
static int view_evict(commit_t *c, const window_pass_t *p, uint64_t *evicted_age,
                      uint64_t *evicted_size)
{
    for (size_t step = 0; step < p->max_steps; step++) {
        store_entry_t e;
        bool found;
        int rc = commit_view_oldest(c, &e, &found);
        if (rc != STORE_OK)
            return rc;
        if (!found)
            break;
        int why = window_judge(p, e.received_ms, c->live);
        if (why == WINDOW_KEEP)
            break;
        c->floor = e.seq + 1;
        c->live--;
        (*(why == WINDOW_AGE ? evicted_age : evicted_size))++;
    }
    return STORE_OK;
}

/*
 * One batch: each key is looked up in the view and, when new, added to the
 * pending generation; the new records go to the log in one append and one
 * fsync, and the batch is acknowledged. LMDB is not written here: the
 * checkpointer does that later, in the background. On failure the log is
 * rolled back and the caller recovers, which rebuilds the view from disk.
 */
int commit_view_apply(commit_t *c, commit_req_t *batch, size_t nevents, batch_out_t *bo,
                      int *store_rc)
{
    log_info_t li;
    int64_t now = commit_now_ms(CLOCK_REALTIME);
    size_t nrec = 0;
    bool dup;
    int rc;

    memset(bo, 0, sizeof(*bo));
    *store_rc = STORE_OK;
    if (commit_writer_reserve(c, nevents) != 0)
        return APPLY_FAILED;
    log_get_info(c->log, &li);
    window_policy_t wp = {.window_ms = c->opts.window_ms, .max_keys = c->opts.max_keys};
    window_pass_t before = window_before_batch(&wp, now, nevents);
    window_pass_t after = window_after_batch(&wp, nevents);
    rc = view_evict(c, &before, &bo->evicted_age, &bo->evicted_size);
    for (commit_req_t *q = batch; rc == STORE_OK && q; q = q->next) {
        for (size_t i = 0; rc == STORE_OK && i < q->n; i++) {
            commit_event_t *ev = &q->events[i];
            uint64_t off = li.next_offset + nrec, seq;
            rc = view_contains(c, ev->key, &dup);
            if (rc != STORE_OK)
                break;
            if (dup) {
                ev->result = COMMIT_DUPLICATE;
                bo->duplicates++;
                continue;
            }
            if (pending_add(c->cur, ev->key, ev->received_ms, off, &seq) != 0) {
                rc = STORE_NOMEM;
                break;
            }
            c->next_seq = seq + 1;
            c->live++;
            commit_writer_take(c, ev, off, &nrec);
        }
    }
    if (rc == STORE_OK)
        rc = view_evict(c, &after, &bo->evicted_age, &bo->evicted_size);
    if (rc != STORE_OK) {
        *store_rc = rc;
        return APPLY_FAILED;
    }
    if (nrec > 0 && commit_writer_write_log(c, nrec, bo) != LOG_OK) {
        log_rollback(c->log); /* a failure here leaves the log failed: recovery reopens */
        return APPLY_FAILED;
    }
    bo->accepted = nrec;
    return APPLY_OK;
}
