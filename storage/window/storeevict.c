/* storeevict.c: eviction from the oldest end of the sequence index: by age, size and source, cuts
 * and settles (storage/window/store.h; private header storage/window/internal.h). */
#include "storage/window/store.h"

#include <lmdb.h>
#include <stdlib.h>
#include <string.h>

#include "storage/window/internal.h"

/*
 * Deletes entries from the front of `seq` (and the `keys` entry each names),
 * at most `max_steps`, while `more` says the oldest one must go. It is given
 * the entry and the number of keys left, and says which counter to add to
 * (enum window_verdict: WINDOW_KEEP ends the eviction).
 */
#define EVICT_ROUND 65536 /* entries read, then deleted, at a time */
typedef int (*evict_pred_t)(const void *arg, const store_entry_t *r, uint64_t keys_left);

int store_delete_keys(store_t *st, const store_entry_t *gone, const uint32_t *order, size_t n,
                      uint64_t *deleted)
{
    MDB_cursor *cur = NULL;
    int rc = st->txn ? store_keys_cursor(st, &cur) : STORE_ERROR;
    for (size_t i = 0; rc == STORE_OK && i < n; i++) {
        const store_entry_t *e = order ? &gone[order[i]] : &gone[i];
        /* Exactly this key's entry with this sequence: a newer one for the key is never hit. */
        uint8_t value[KEY_VALUE];
        MDB_val k, v;
        store_key_entry(e->key, e->seq, value, &k, &v);
        int mrc = mdb_cursor_get(cur, &k, &v, MDB_GET_BOTH);
        if (mrc == 0 && (mrc = mdb_cursor_del(cur, 0)) == 0)
            (*deleted)++;
        if (mrc && mrc != MDB_NOTFOUND)
            rc = store_xlate(st, mrc);
    }
    return rc;
}

/* Deletes the `keys` entries of gone[0..n), in key order (see key_order); *count drops by each. */
static int evict_keys(store_t *st, const store_entry_t *gone, size_t n, uint64_t *count)
{
    const uint32_t *order = n > 1 ? store_key_order_of(st, gone, n) : NULL;
    uint64_t deleted = 0;
    int rc = n > 1 && !order ? STORE_NOMEM : store_delete_keys(st, gone, order, n, &deleted);
    *count -= deleted;
    return rc;
}

/*
 * Evicts from the oldest end of `seq` while `more` says so, at most max_steps
 * entries. In rounds of at most EVICT_ROUND: read the entries, delete their
 * keys in key order (as store_put_entries puts them, for the same reason),
 * then cut the entries off the front (store_cut_front). An entry `more`
 * calls WINDOW_CARRY leaves the front the same way and is then put again at
 * the next sequence, with its receivedAt and offset: it stays in the window.
 */
static int evict_front(store_t *st, size_t max_steps, evict_pred_t more, const void *arg,
                       uint64_t *evicted_age, uint64_t *evicted_size)
{
    MDB_cursor *cur = NULL;
    MDB_stat ms;
    MDB_val k, v;
    int rc;

    if ((rc = store_xlate(st, mdb_stat(st->txn, st->keys, &ms))))
        return rc;
    uint64_t count = ms.ms_entries;
    if ((rc = store_xlate(st, mdb_cursor_open(st->txn, st->seq, &cur))))
        return rc;
    bool more_left = true;
    for (size_t steps = 0; rc == STORE_OK && more_left && steps < max_steps;) {
        size_t want = max_steps - steps < EVICT_ROUND ? max_steps - steps : EVICT_ROUND, n = 0;
        size_t carried = 0; /* the round's carried entries, moved to the end of gone[0..n) */
        if (want > st->gone_cap) {
            store_entry_t *g = realloc(st->gone, want * sizeof(*g));
            if (g)
                st->gone = g;
            bool *gc = realloc(st->gone_carry, want * sizeof(*gc));
            if (gc)
                st->gone_carry = gc;
            if (!g || !gc) {
                rc = STORE_NOMEM;
                break;
            }
            st->gone_cap = want;
        }
        int mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
        for (; mrc == 0 && n < want; mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            store_entry_t *r = &st->gone[n];
            if ((rc = store_seq_decode(st, &k, &v, r)))
                break;
            /* Each entry ahead of this one takes its key with it (a carried one comes back). */
            int why = more(arg, r, count - (n - carried));
            if (why == WINDOW_KEEP)
                break;
            st->gone_carry[n] = why == WINDOW_CARRY;
            if (why == WINDOW_CARRY)
                carried++;
            else
                (*(why == WINDOW_AGE ? evicted_age : evicted_size))++;
            n++;
        }
        if (rc == STORE_OK && mrc && mrc != MDB_NOTFOUND)
            rc = store_xlate(st, mrc);
        more_left = n == want;
        if (rc == STORE_OK)
            rc = evict_keys(st, st->gone, n, &count);
        uint64_t cut = 0; /* the n entries read are exactly those below the last one's successor */
        if (rc == STORE_OK && n > 0)
            rc = store_cut_front(st, st->gone[n - 1].seq + 1, &cut);
        for (size_t i = 0; rc == STORE_OK && carried > 0 && i < n; i++) {
            const store_entry_t *r = &st->gone[i];
            bool dup = false;
            if (st->gone_carry[i] &&
                (rc = store_insert(st, r->key, r->received_ms, r->offset, &dup)) == STORE_OK)
                count += !dup;
        }
        steps += n;
    }
    mdb_cursor_close(cur);
    return rc;
}

static int past_window(const void *arg, const store_entry_t *r, uint64_t keys_left)
{
    return window_judge(arg, r->received_ms, keys_left);
}

int store_evict(store_t *st, int64_t older_than_ms, uint64_t max_keys, size_t max_steps,
                uint64_t *evicted_age, uint64_t *evicted_size)
{
    window_pass_t p = {
        .older_than_ms = older_than_ms, .max_keys = max_keys, .max_steps = max_steps};
    return store_evict_pass(st, p, evicted_age, evicted_size);
}

int store_evict_pass(store_t *st, window_pass_t pass, uint64_t *evicted_age, uint64_t *evicted_size)
{
    return evict_front(st, pass.max_steps, past_window, &pass, evicted_age, evicted_size);
}

/* store_evict_sources' pass: the rule per source, its counts kept as keys leave. */
typedef struct {
    window_pass_t pass;
    srcmap_t *sources;
} source_pass_t;

static int past_source_window(const void *arg, const store_entry_t *r, uint64_t keys_left)
{
    const source_pass_t *sp = arg;
    (void)keys_left;
    int why = window_judge_source(&sp->pass, r->received_ms, srcmap_keys_of(sp->sources, r->key),
                                  srcmap_over(sp->sources));
    if (why == WINDOW_AGE || why == WINDOW_SIZE)
        srcmap_evicted(sp->sources, r->key, r->received_ms, why);
    return why;
}

int store_evict_sources(store_t *st, window_pass_t pass, srcmap_t *sources, uint64_t *evicted_age,
                        uint64_t *evicted_size)
{
    source_pass_t sp = {.pass = pass, .sources = sources};
    return evict_front(st, pass.max_steps, past_source_window, &sp, evicted_age, evicted_size);
}

int store_count_sources(store_t *st, srcmap_t *sources)
{
    MDB_txn *txn = st->txn;
    MDB_cursor *cur = NULL;
    MDB_val k, v;
    int rc;

    srcmap_zero_keys(sources);
    if (!txn && (rc = store_txn_begin_read(st, &txn)))
        return rc;
    /* The `keys` entries, as the size bound counts keys (a checkpoint cut short leaves keys
     * whose sequence entries are not written yet: the replay puts those again). */
    if ((rc = store_xlate(st, mdb_cursor_open(txn, st->keys, &cur))) == STORE_OK) {
        int mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
        for (; mrc == 0; mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            uint8_t key[KEYHASH_LEN];
            if (k.mv_size != KEY_PREFIX || v.mv_size != KEY_VALUE) {
                rc = STORE_CORRUPT;
                break;
            }
            memcpy(key, k.mv_data, KEY_PREFIX);
            memcpy(key + KEY_PREFIX, v.mv_data, KEY_SUFFIX);
            if (srcmap_add(sources, key) != 0) {
                rc = STORE_NOMEM;
                break;
            }
        }
        if (rc == STORE_OK && mrc && mrc != MDB_NOTFOUND)
            rc = store_xlate(st, mrc);
        mdb_cursor_close(cur);
    }
    if (txn != st->txn)
        mdb_txn_abort(txn);
    return rc;
}

static int below_seq(const void *arg, const store_entry_t *r, uint64_t keys_left)
{
    (void)keys_left;
    return r->seq < *(const uint64_t *)arg ? WINDOW_AGE : WINDOW_KEEP;
}

int store_evict_below(store_t *st, uint64_t floor_seq, size_t max_steps, uint64_t *evicted)
{
    uint64_t unused = 0;
    return evict_front(st, max_steps, below_seq, &floor_seq, evicted, &unused);
}

int store_read_front(store_t *st, uint64_t below_seq, store_entry_t *out, size_t max, size_t *n)
{
    MDB_txn *txn = st->txn;
    MDB_cursor *cur = NULL;
    MDB_val k, v;
    int rc;

    *n = 0;
    if (!txn && (rc = store_txn_begin_read(st, &txn)))
        return rc;
    if ((rc = store_xlate(st, mdb_cursor_open(txn, st->seq, &cur))) == STORE_OK) {
        int mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
        for (; mrc == 0 && *n < max; mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            if ((rc = store_seq_decode(st, &k, &v, &out[*n])) || out[*n].seq >= below_seq)
                break;
            (*n)++;
        }
        if (rc == STORE_OK && mrc && mrc != MDB_NOTFOUND)
            rc = store_xlate(st, mrc);
        mdb_cursor_close(cur);
    }
    if (txn != st->txn)
        mdb_txn_abort(txn);
    return rc;
}

int store_settle_evictions(store_t *st, uint64_t below_seq, size_t max_steps, size_t *done,
                           uint64_t *kept)
{
    size_t n = 0;
    *done = 0;
    if (!st->txn)
        return STORE_ERROR;
    store_entry_t *gone = malloc((max_steps ? max_steps : 1) * sizeof(*gone));
    if (!gone)
        return STORE_NOMEM;
    int rc = store_read_front(st, below_seq, gone, max_steps, &n);
    MDB_cursor *cur = NULL;
    if (rc == STORE_OK && n > 0)
        rc = store_keys_cursor(st, &cur);
    for (size_t i = 0; rc == STORE_OK && i < n; i++) {
        const store_entry_t *e = &gone[i];
        bool found = false, dup = false;
        uint64_t seq = 0;
        if ((rc = store_find_key(st, cur, e->key, &found, &seq)) != STORE_OK || !found ||
            seq != e->seq)
            continue; /* its eviction landed (or a newer entry of the key stands) */
        /* The eviction (or carry) never landed: the key stays, moved to the young end. */
        rc = store_upsert(st, e->key, e->received_ms, e->offset, &dup);
        *kept += rc == STORE_OK;
    }
    uint64_t cut = 0;
    if (rc == STORE_OK && n > 0)
        rc = store_cut_front(st, gone[n - 1].seq + 1, &cut);
    if (rc == STORE_OK && n < max_steps)
        rc = store_mark_evicting(st, 0); /* all below the mark settled */
    *done = n;
    free(gone);
    return rc;
}

int store_mark_evicting(store_t *st, uint64_t below_seq)
{
    return st->txn ? store_meta_put(st, st->txn, "evicting", &below_seq, sizeof(below_seq))
                   : STORE_ERROR;
}

int store_cut_front(store_t *st, uint64_t below_seq, uint64_t *cut)
{
    MDB_cursor *cur = NULL;
    MDB_val k, v;
    int rc = st->txn ? store_xlate(st, mdb_cursor_open(st->txn, st->seq, &cur)) : STORE_ERROR;
    if (rc)
        return rc;
    int mrc = 0;
    for (;;) {
        store_entry_t r;
        size_t dups = 0;
        if ((mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST)) ||
            (rc = store_seq_decode(st, &k, &v, &r)))
            break;
        if (r.seq >= below_seq)
            break;
        /* A whole bucket below the bound goes at once; the one it ends in, value by value. */
        unsigned flags = 0;
        if ((mrc = mdb_cursor_get(cur, &k, &v, MDB_LAST_DUP)) ||
            (rc = store_seq_decode(st, &k, &v, &r)))
            break;
        if (r.seq < below_seq && (mrc = mdb_cursor_count(cur, &dups)) == 0)
            flags = MDB_NODUPDATA;
        else if (mrc || (mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST_DUP)))
            break;
        if ((mrc = mdb_cursor_del(cur, flags)))
            break;
        *cut += flags ? dups : 1;
    }
    if (rc == STORE_OK && mrc && mrc != MDB_NOTFOUND)
        rc = store_xlate(st, mrc);
    mdb_cursor_close(cur);
    return rc;
}
