/*
 * commit/lookup.c: "is this key in the window, and where is its record?" for
 * threads other than the writer.
 *
 * DESIGN. The writer's view of the window (pending keys in memory, the LMDB
 * snapshot, the sealed generations; commit/view.c) is writer-only, and it is
 * the only exact one: LMDB lags the log by up to a checkpoint and keeps
 * evicted keys until the checkpointer deletes them. So a lookup is a
 * question queued under mu, which the writer answers from that view between
 * two group commits (and while idle), as de-duplication would: the newest of
 * the pending generations, the snapshot, then the generations decides. The
 * caller waits on lookup_cv. Each caller has at most one question queued
 * (it blocks), so the writer answers at most one per waiting thread between
 * two batches: a few hash probes, one B-tree read and at most one page read
 * of a generation each.
 */
#include <string.h>

#include "storage/commit/internal.h"

/* Where `key` is in the writer's view (LMDB mode, storage open). A store status. */
static int view_find(commit_t *c, const uint8_t key[KEYHASH_LEN], commit_lookup_t *out)
{
    const store_entry_t *it = pending_find(c->cur, key);
    if (!it && c->flight)
        it = pending_find(c->flight, key);
    if (it) {
        out->found = it->seq >= c->floor;
        out->offset = it->offset;
        out->received_ms = it->received_ms;
        return STORE_OK;
    }
    store_entry_t e;
    bool present = false;
    int rc = store_reader_entry(c->reader, key, &present, &e);
    if (rc != STORE_OK)
        return rc;
    if (present) {
        /* Below the floor it is evicted, whether or not the checkpointer deleted it yet. */
        out->found = e.seq >= c->floor;
        out->offset = e.offset;
        out->received_ms = e.received_ms;
        return STORE_OK;
    }
    if (!c->gview)
        return STORE_OK;
    /* Not in the young store: a sealed generation, every key of which is in the window. */
    gen_entry_t ge;
    int grc = genset_view_find(c->gview, key, &out->found, &ge);
    if (grc != GEN_OK)
        return grc == GEN_NOMEM ? STORE_NOMEM : STORE_EIO;
    if (out->found) {
        out->offset = ge.offset;
        out->received_ms = ge.received_ms;
    }
    return STORE_OK;
}

static int answer_one(commit_t *c, lookup_req_t *q, int64_t window_start_ms)
{
    commit_lookup_t *out = q->out;
    memset(out, 0, sizeof(*out));
    out->window_start_ms = window_start_ms;
    if (c->failed || !c->reader)
        return COMMIT_UNAVAILABLE;
    int rc = view_find(c, q->key, out);
    if (rc == STORE_NOMEM)
        return COMMIT_NOMEM;
    return rc == STORE_OK ? COMMIT_OK : COMMIT_UNAVAILABLE;
}

void commit_lookup_answer(commit_t *c)
{
    while (c->lookups) {
        lookup_req_t *list = c->lookups;
        c->lookups = NULL;
        /* /stats' window start is the view's after the last batch: exact, since no batch runs
         * until these are answered. */
        int64_t start = c->stats.window.keys > 0 ? c->stats.window.oldest_received_ms : 0;
        pthread_mutex_unlock(&c->mu);
        for (lookup_req_t *q = list; q; q = q->next)
            q->status = answer_one(c, q, start);
        pthread_mutex_lock(&c->mu);
        for (lookup_req_t *q = list, *next; q; q = next) {
            next = q->next; /* q is the caller's once answered */
            q->answered = true;
        }
        pthread_cond_broadcast(&c->lookup_cv);
    }
}

int commit_lookup(commit_t *c, const uint8_t key[KEYHASH_LEN], commit_lookup_t *out)
{
    lookup_req_t q = {.key = key, .out = out};

    memset(out, 0, sizeof(*out));
    if (c->mode == &commit_memory_mode)
        return COMMIT_UNSUPPORTED;
    pthread_mutex_lock(&c->mu);
    if (c->closing) {
        pthread_mutex_unlock(&c->mu);
        return COMMIT_CLOSED;
    }
    q.next = c->lookups;
    /* q lives until answered: the answering thread takes the whole list off before it sets
     * `answered`, and this thread waits for that below. */
    // cppcheck-suppress autoVariables
    c->lookups = &q;
    pthread_cond_signal(&c->cv); /* an idle writer sleeps on cv */
    while (!q.answered)
        pthread_cond_wait(&c->lookup_cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    return q.status;
}
