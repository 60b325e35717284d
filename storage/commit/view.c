/*
 * commit/view.c: the writer's read view of the window (LMDB mode), and the
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
 * set taken with every move of the snapshot; `live` counts none of them. A
 * batch asks them all its keys at once (view_look_batch), before it decides
 * key by key in order (view_is_dup).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "storage/commit/internal.h"

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
        errbuf_printf(errbuf, errlen, "reading the LMDB store: %s (%s)", store_strerror(rc),
                      store_detail(c->store));
        return -1;
    }
    commit_view_take_gens(c);
    commit_view_share_gens(c, true);
    c->next_seq = c->snap_end = si.next_seq;
    c->floor = c->handed_floor = found ? e.seq : si.next_seq;
    c->live = si.keys;
    c->cur = pending_new(si.next_seq);
    c->spare = pending_new(si.next_seq);
    if (!c->cur || !c->spare) {
        errbuf_printf(errbuf, errlen, "out of memory");
        return -1;
    }
    c->cur_since_ms = clk_mono_ms();
    c->ckpt_store_bytes = si.used_bytes; /* the checkpointer is idle while the view opens */
    if ((rc = commit_view_count_sources(c)) != STORE_OK) {
        errbuf_printf(errbuf, errlen, "counting the window's keys by source: %s",
                      store_strerror(rc));
        return -1;
    }
    pthread_mutex_lock(&c->mu);
    c->stats.store_map_size = si.map_size;
    c->stats.store_used_bytes = si.used_bytes;
    pthread_mutex_unlock(&c->mu);
    return 0;
}

static int count_one(void *arg, const store_entry_t *e)
{
    return srcmap_add(arg, e->key) == 0 ? STORE_OK : STORE_NOMEM;
}

/* Pending items from sequence `from` on: counted by source. */
static int count_pending(srcmap_t *m, const pending_t *p, uint64_t from)
{
    const store_entry_t *it = pending_items(p);
    for (size_t i = 0, n = pending_count(p); i < n; i++)
        if (it[i].seq >= from && srcmap_add(m, it[i].key) != 0)
            return STORE_NOMEM;
    return STORE_OK;
}

int commit_view_count_sources(commit_t *c)
{
    srcmap_zero_keys(c->sources);
    int rc = store_reader_each(c->reader, c->floor, c->snap_end, count_one, c->sources);
    uint64_t from = c->floor > c->snap_end ? c->floor : c->snap_end;
    if (rc == STORE_OK && c->flight)
        rc = count_pending(c->sources, c->flight, from);
    if (rc == STORE_OK && c->cur)
        rc = count_pending(c->sources, c->cur, from);
    return rc;
}

/* What the snapshot and the generations say of one event's key (look_state). */
enum look {
    LOOK_PENDING, /* the key was pending when the batch began: pending decides */
    LOOK_NEW,     /* in neither, or only out of the window */
    LOOK_DUP,     /* in the window */
    LOOK_GENS,    /* not in the young store: asked of the generations */
};

static int look_reserve(commit_t *c, size_t n)
{
    if (n <= c->look_cap)
        return 0;
    size_t cap = c->look_cap ? c->look_cap : 1024;
    while (cap < n)
        cap *= 2;
    /* Each grows on its own; a failure leaves the bigger ones and the old cap: still consistent. */
    uint8_t *st = realloc(c->look_state, cap * sizeof(*st));
    if (st)
        c->look_state = st;
    uint8_t(*keys)[KEYHASH_LEN] = realloc(c->look_keys, cap * sizeof(*keys));
    if (keys)
        c->look_keys = keys;
    size_t *ev = realloc(c->look_event, cap * sizeof(*ev));
    if (ev)
        c->look_event = ev;
    bool *found = realloc(c->look_found, cap * sizeof(*found));
    if (found)
        c->look_found = found;
    gen_entry_t *first = realloc(c->look_first, cap * sizeof(*first));
    if (first)
        c->look_first = first;
    gen_entry_t *gen = realloc(c->look_gen, cap * sizeof(*gen));
    if (gen)
        c->look_gen = gen;
    if (!st || !keys || !ev || !found || !first || !gen)
        return -1;
    c->look_cap = cap;
    return 0;
}

static const store_entry_t *view_pending(const commit_t *c, const uint8_t key[KEYHASH_LEN])
{
    const store_entry_t *it = pending_find(c->cur, key);
    if (!it && c->flight)
        it = pending_find(c->flight, key);
    return it;
}

/*
 * The copy of a key the young store holds at `seq`: its sequence entry's
 * offset and receivedAt into *first (received_ms 0 when there is no such
 * entry). Only duplicates pay for this second lookup.
 */
static int look_store_first(commit_t *c, uint64_t seq, gen_entry_t *first)
{
    store_entry_t e = {0};
    bool found = false;
    int rc = store_reader_first_from(c->reader, seq, &found, &e);
    first->offset = e.offset;
    first->received_ms = rc == STORE_OK && found && e.seq == seq ? e.received_ms : 0;
    return rc;
}

/*
 * First pass over a batch: what the LMDB snapshot and the sealed generations
 * say of each key, into look_state, and of a key in the window the copy they
 * hold, into look_first. Neither changes while a batch is applied,
 * so they can be asked ahead of the pending keys, which do (the second pass
 * asks those in order). The keys the young store lacks are asked of the
 * generations together (genset_view_find_many): their filter blocks are
 * prefetched across the batch, so the cache misses of a big window overlap
 * instead of adding up, one key after another.
 */
static int view_look_batch(commit_t *c, commit_req_t *batch, size_t nevents)
{
    size_t i = 0, nask = 0;
    if (look_reserve(c, nevents) != 0)
        return STORE_NOMEM;
    for (commit_req_t *q = batch; q; q = q->next) {
        for (size_t k = 0; k < q->n; k++, i++) {
            const uint8_t *key = q->events[k].key;
            uint64_t seq = 0;
            bool present = false;
            if (view_pending(c, key)) {
                c->look_state[i] = LOOK_PENDING;
                continue;
            }
            int rc = store_reader_find(c->reader, key, &present, &seq);
            if (rc != STORE_OK)
                return rc;
            if (present || !c->gview) {
                /* The young store decides for a key it has; the generations only after. */
                c->look_state[i] = present && seq >= c->floor ? LOOK_DUP : LOOK_NEW;
                if (c->look_state[i] == LOOK_DUP &&
                    (rc = look_store_first(c, seq, &c->look_first[i])))
                    return rc;
                continue;
            }
            const commit_event_t *ev = &q->events[k];
            if (ev->prepared && !ev->maybe_sealed) {
                /* No generation the submitter saw has it: ask those sealed since only. */
                bool found = false;
                int grc = genset_view_find_after(c->gview, key, ev->probed_end, &found,
                                                 &c->look_first[i]);
                if (grc != GEN_OK)
                    return grc == GEN_NOMEM ? STORE_NOMEM : STORE_EIO;
                c->look_state[i] = found ? LOOK_DUP : LOOK_NEW;
                continue;
            }
            c->look_state[i] = LOOK_GENS;
            memcpy(c->look_keys[nask], key, KEYHASH_LEN);
            c->look_event[nask++] = i;
        }
    }
    if (nask == 0)
        return STORE_OK;
    int grc = genset_view_find_many(c->gview, (const uint8_t(*)[KEYHASH_LEN])c->look_keys, nask,
                                    c->look_found, c->look_gen);
    if (grc != GEN_OK)
        return grc == GEN_NOMEM ? STORE_NOMEM : STORE_EIO;
    /* Every key of a sealed generation is in the window. The answers come by question (their
     * own array: look_first already holds the young store's answers, by event). */
    for (size_t j = 0; j < nask; j++) {
        size_t e = c->look_event[j];
        c->look_state[e] = c->look_found[j] ? LOOK_DUP : LOOK_NEW;
        c->look_first[e] = c->look_gen[j];
    }
    return STORE_OK;
}

/*
 * Second pass, in order: *dup when the key of the batch's i-th event is in
 * the window. The newest generation that has the key decides (a key accepted
 * again after it left the window has a newer sequence there, and a key taken
 * earlier in this very batch is pending now); the first pass only when no
 * pending generation has it. When a duplicate, ev gets the copy the window
 * holds: its offset and first_received_ms (0 when unknown).
 */
static bool view_is_dup(const commit_t *c, commit_event_t *ev, size_t i)
{
    const store_entry_t *it = view_pending(c, ev->key);
    const gen_entry_t *g = &c->look_first[i];
    bool dup = it ? it->seq >= c->floor : c->look_state[i] == LOOK_DUP;
    if (dup) {
        ev->offset = it ? it->offset : g->offset;
        ev->first_received_ms = it ? it->received_ms : g->received_ms;
    }
    return dup;
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
    if (!c->engine)
        return;
    window_engine_take_view(c->engine);
    c->gview = window_engine_view(c->engine);
}

void commit_view_share_gens(commit_t *c, bool share)
{
    pthread_mutex_lock(&c->mu);
    c->probe_gens = share ? c->gens : NULL;
    while (!share && c->probing > 0)
        pthread_cond_wait(&c->probe_cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

/* Sizes a probe's scratch on the stack up to this many keys; a bigger request mallocs it. */
#define PROBE_STACK 256

void commit_prepare(commit_t *c, commit_event_t *events, size_t n)
{
    uint8_t(stack_keys)[PROBE_STACK][KEYHASH_LEN];
    bool stack_maybe[PROBE_STACK];
    uint8_t(*keys)[KEYHASH_LEN] = stack_keys;
    bool *maybe = stack_maybe;
    if (n == 0)
        return;
    pthread_mutex_lock(&c->mu);
    genset_t *gs = c->probe_gens;
    if (gs)
        c->probing++;
    pthread_mutex_unlock(&c->mu);
    if (!gs)
        return;
    if (n > PROBE_STACK) {
        keys = malloc(n * sizeof(*keys));
        maybe = malloc(n * sizeof(*maybe));
    }
    if (keys && maybe) {
        for (size_t i = 0; i < n; i++)
            memcpy(keys[i], events[i].key, KEYHASH_LEN);
        genset_view_t *v = genset_view(gs);
        uint64_t end = genset_view_probe_many(v, (const uint8_t(*)[KEYHASH_LEN])keys, n, maybe);
        genset_view_release(v);
        for (size_t i = 0; i < n; i++) {
            events[i].prepared = true;
            events[i].maybe_sealed = maybe[i];
            events[i].probed_end = end;
        }
    } /* out of memory: not prepared, the writer asks every generation */
    if (keys != stack_keys) {
        free(keys);
        free(maybe);
    }
    pthread_mutex_lock(&c->mu);
    if (--c->probing == 0)
        pthread_cond_broadcast(&c->probe_cv);
    pthread_mutex_unlock(&c->mu);
}

bool commit_view_seals(const commit_t *c)
{
    uint64_t young = c->opts.young_keys ? c->opts.young_keys : COMMIT_YOUNG_KEYS;
    return genset_seals(c->opts.max_keys, young);
}

genset_policy_t commit_view_gen_policy(const commit_t *c)
{
    uint64_t young = c->opts.young_keys ? c->opts.young_keys : COMMIT_YOUNG_KEYS;
    return genset_policy_for(c->opts.window_ms, c->opts.max_keys, young);
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
 * Ages keys out of the view, oldest first, as window_judge_source says. Only
 * the floor moves; the checkpointer deletes them. A carried key is added to
 * the pending generation again with its receivedAt and offset (it is not
 * logged again: its record is where it was).
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
        int why = window_judge_source(p, e.received_ms, srcmap_keys_of(c->sources, e.key),
                                      srcmap_over(c->sources));
        if (why == WINDOW_KEEP)
            break;
        if (why == WINDOW_CARRY) {
            uint64_t seq;
            if (pending_add(c->cur, e.key, e.received_ms, e.offset, &seq) != 0)
                return STORE_NOMEM;
            c->next_seq = seq + 1;
            c->floor = e.seq + 1;
            c->carried++;
            continue;
        }
        c->floor = e.seq + 1;
        c->live--;
        srcmap_evicted(c->sources, e.key, e.received_ms, why);
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
    int64_t now = clk_wall_ms();
    size_t nrec = 0;
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
    if (rc == STORE_OK)
        rc = view_look_batch(c, batch, nevents);
    size_t n = 0; /* the event's index in the batch */
    for (commit_req_t *q = batch; rc == STORE_OK && q; q = q->next) {
        for (size_t i = 0; rc == STORE_OK && i < q->n; i++, n++) {
            commit_event_t *ev = &q->events[i];
            uint64_t off = li.next_offset + nrec, seq;
            if (view_is_dup(c, ev, n)) {
                ev->result = COMMIT_DUPLICATE;
                bo->duplicates++;
                continue;
            }
            if (srcmap_add(c->sources, ev->key) != 0 ||
                pending_add(c->cur, ev->key, ev->received_ms, off, &seq) != 0) {
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
