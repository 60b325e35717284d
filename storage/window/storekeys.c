/* storekeys.c: the young store's puts and look-ups of keys, each with its `seq` entry
 * (storage/window/store.h; private header storage/window/internal.h). */
#include "storage/window/store.h"

#include <lmdb.h>
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "storage/window/internal.h"

/*
 * Looks `key` up in `keys` through cursor `cur`: *found, and its sequence
 * number in *seq when found. Leaves the cursor on or near it.
 */
int store_find_key(store_t *st, MDB_cursor *cur, const uint8_t key[KEYHASH_LEN], bool *found,
                   uint64_t *seq)
{
    uint8_t probe[KEY_VALUE] = {0};
    memcpy(probe, key + KEY_PREFIX, KEY_SUFFIX);
    MDB_val k = store_val(key, KEY_PREFIX), v = store_val(probe, sizeof(probe));
    *found = false;
    /* The first value of the bucket at or after suffix|0: ours if its suffix matches. */
    int rc = mdb_cursor_get(cur, &k, &v, MDB_GET_BOTH_RANGE);
    if (rc == MDB_NOTFOUND)
        return STORE_OK;
    if (rc)
        return store_xlate(st, rc);
    if (v.mv_size != KEY_VALUE)
        return STORE_CORRUPT;
    if (memcmp(v.mv_data, key + KEY_PREFIX, KEY_SUFFIX) == 0) {
        *found = true;
        if (seq)
            memcpy(seq, (const char *)v.mv_data + KEY_SUFFIX, 8);
    }
    return STORE_OK;
}

/* The `keys` entry (prefix, suffix|seq) of a key. */
void store_key_entry(const uint8_t key[KEYHASH_LEN], uint64_t seq, uint8_t value[KEY_VALUE],
                     MDB_val *k, MDB_val *v)
{
    memcpy(value, key + KEY_PREFIX, KEY_SUFFIX);
    memcpy(value + KEY_SUFFIX, &seq, 8);
    *k = store_val(key, KEY_PREFIX);
    *v = store_val(value, KEY_VALUE);
}

int store_keys_cursor(store_t *st, MDB_cursor **cur)
{
    if (!st->kcur) {
        int rc = mdb_cursor_open(st->txn, st->keys, &st->kcur);
        if (rc)
            return store_xlate(st, rc);
    }
    *cur = st->kcur;
    return STORE_OK;
}

/* Appends the `seq` entry of `e`, whose sequence must come after every one in the tree. */
static int seq_append(store_t *st, const store_entry_t *e)
{
    uint8_t rec[SEQ_VALUE_LEN];
    uint64_t bucket = e->seq / st->bucket;
    rec[0] = (uint8_t)(e->seq % st->bucket);
    memcpy(rec + 1, e->key, KEYHASH_LEN);
    memcpy(rec + 17, &e->received_ms, 8);
    memcpy(rec + 25, &e->offset, 8);
    MDB_val sk = store_val(&bucket, sizeof(bucket)), sv = store_val(rec, sizeof(rec));
    /* The first of a bucket opens it at the tree's end; the others go at its end. One cursor
     * for the transaction's appends: it stays on the last page, where LMDB finds the bucket
     * without a search from the root (mdb_put opens a fresh cursor for each). */
    unsigned flags = e->seq % st->bucket == 0 ? MDB_APPEND : MDB_APPENDDUP;
    if (!st->acur) {
        int rc = store_xlate(st, mdb_cursor_open(st->txn, st->seq, &st->acur));
        if (rc) {
            st->acur = NULL;
            return rc;
        }
    }
    return store_xlate(st, mdb_cursor_put(st->acur, &sk, &sv, flags));
}

/*
 * Puts the `keys` entry of `e`. When `cur` stands on an older entry of the
 * same key (found by find_key just before), that entry and its sequence entry
 * are retired first, so the newer record wins.
 */
static int key_put(store_t *st, MDB_cursor *cur, const store_entry_t *e, bool found,
                   uint64_t old_seq)
{
    uint8_t value[KEY_VALUE];
    MDB_val k, v;
    int rc;

    if (found) {
        MDB_cursor *scur = NULL;
        bool have;
        if ((rc = store_xlate(st, mdb_cursor_del(cur, 0))) ||
            (rc = store_xlate(st, mdb_cursor_open(st->txn, st->seq, &scur))))
            return rc;
        rc = store_seq_find(st, scur, old_seq, &have);
        /*
         * Only when the entry names this key: a checkpoint cut short between
         * its transactions leaves keys whose sequence entries were not written
         * yet (store_put_keys), and a replay may have numbered others since.
         */
        MDB_val sk, sv;
        store_entry_t r;
        if (rc == STORE_OK && have &&
            (rc = store_xlate(st, mdb_cursor_get(scur, &sk, &sv, MDB_GET_CURRENT))) == STORE_OK &&
            (rc = store_seq_decode(st, &sk, &sv, &r)) == STORE_OK &&
            memcmp(r.key, e->key, KEYHASH_LEN) == 0)
            rc = store_xlate(st, mdb_cursor_del(scur, 0));
        mdb_cursor_close(scur);
        if (rc)
            return rc;
    }
    store_key_entry(e->key, e->seq, value, &k, &v);
    return store_xlate(st, mdb_cursor_put(cur, &k, &v, MDB_NODUPDATA));
}

/* One key at the open transaction's next sequence: upserted, or skipped when present. */
static int put_one(store_t *st, const uint8_t key[KEYHASH_LEN], int64_t received_ms,
                   uint64_t log_offset, bool upsert, bool *duplicate)
{
    store_entry_t e = {.seq = st->txn_seq, .received_ms = received_ms, .offset = log_offset};
    MDB_cursor *cur = NULL;
    uint64_t old_seq = 0;
    bool found;
    int rc;

    memcpy(e.key, key, KEYHASH_LEN);
    if ((rc = store_keys_cursor(st, &cur)) || (rc = store_find_key(st, cur, key, &found, &old_seq)))
        return rc;
    *duplicate = found;
    if (found && !upsert)
        return STORE_OK;
    if ((rc = key_put(st, cur, &e, found, old_seq)) || (rc = seq_append(st, &e)))
        return rc;
    st->txn_seq++;
    return STORE_OK;
}

int store_insert(store_t *st, const uint8_t key[KEYHASH_LEN], int64_t received_ms,
                 uint64_t log_offset, bool *duplicate)
{
    return put_one(st, key, received_ms, log_offset, false, duplicate);
}

int store_upsert(store_t *st, const uint8_t key[KEYHASH_LEN], int64_t received_ms,
                 uint64_t log_offset, bool *replaced)
{
    bool found = false;
    int rc = put_one(st, key, received_ms, log_offset, true, &found);
    if (replaced)
        *replaced = found;
    return rc;
}

/*
 * Keys are hashes, so in arrival order every put lands on a random page; in
 * key order the cursor stays on its page from one put to the next, and LMDB
 * searches only that page. The sort looks at the first 32 key bits (the
 * tree's byte order; ties are rare and harmless): two 16-bit passes of a
 * radix sort over (bits, index) pairs, stable.
 */
#define RADIX (1u << 16)
int store_key_order(const store_entry_t *e, size_t n, uint32_t *order)
{
    if (n > UINT32_MAX)
        return STORE_ERROR;
    uint64_t *a = malloc((2 * n + RADIX) * sizeof(*a));
    if (!a)
        return STORE_NOMEM;
    uint64_t *b = a + n, *count = a + 2 * n;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *k = e[i].key;
        uint64_t hi = bytes_get_be32(k);
        a[i] = hi << 32 | (uint64_t)i;
    }
    for (int shift = 32; shift <= 48; shift += 16) {
        memset(count, 0, RADIX * sizeof(*count));
        for (size_t i = 0; i < n; i++)
            count[(a[i] >> shift) & 0xffff]++;
        uint64_t sum = 0;
        for (size_t d = 0; d < RADIX; d++) {
            uint64_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++)
            b[count[(a[i] >> shift) & 0xffff]++] = a[i];
        uint64_t *t = a;
        a = b;
        b = t;
    }
    /* Two passes: the sorted pairs are back in the first half, where the block starts. */
    for (size_t i = 0; i < n; i++)
        order[i] = (uint32_t)a[i];
    free(a);
    return STORE_OK;
}

const uint32_t *store_key_order_of(store_t *st, const store_entry_t *e, size_t n)
{
    if (n > st->order_cap) {
        uint32_t *o = realloc(st->order, n * sizeof(*o));
        if (!o)
            return NULL;
        st->order = o;
        st->order_cap = n;
    }
    return store_key_order(e, n, st->order) == STORE_OK ? st->order : NULL;
}

int store_put_keys(store_t *st, const store_entry_t *e, const uint32_t *order, size_t n)
{
    MDB_cursor *cur = NULL;
    int rc = st->txn ? store_keys_cursor(st, &cur) : STORE_ERROR;
    for (size_t i = 0; rc == STORE_OK && i < n; i++) {
        const store_entry_t *x = order ? &e[order[i]] : &e[i];
        uint64_t old_seq = 0;
        bool found;
        if ((rc = store_find_key(st, cur, x->key, &found, &old_seq)) == STORE_OK)
            rc = key_put(st, cur, x, found, old_seq);
    }
    return rc;
}

int store_append_seq(store_t *st, const store_entry_t *e, size_t n)
{
    if (!st->txn)
        return STORE_ERROR;
    for (size_t i = 0; i < n; i++)
        if (e[i].seq != st->txn_seq + i)
            return STORE_ERROR; /* the caller's numbering and the store's must agree */
    int rc = STORE_OK;
    for (size_t i = 0; rc == STORE_OK && i < n; i++)
        rc = seq_append(st, &e[i]);
    if (rc == STORE_OK)
        st->txn_seq += n;
    return rc;
}

int store_put_entries(store_t *st, const store_entry_t *e, size_t n)
{
    const uint32_t *order = NULL;
    if (n > 1 && !(order = store_key_order_of(st, e, n)))
        return STORE_NOMEM;
    /*
     * `seq` first, so that a key put twice retires its older entry whole, as
     * one at a time would (the sort is stable: the older goes in first).
     */
    int rc = store_append_seq(st, e, n);
    return rc ? rc : store_put_keys(st, e, order, n);
}

int store_put_seq(store_t *st, const uint8_t key[KEYHASH_LEN], uint64_t seq, int64_t received_ms,
                  uint64_t log_offset)
{
    store_entry_t e = {.seq = seq, .received_ms = received_ms, .offset = log_offset};
    memcpy(e.key, key, KEYHASH_LEN);
    return store_put_entries(st, &e, 1);
}

int store_contains(store_t *st, const uint8_t key[KEYHASH_LEN], bool *present)
{
    MDB_txn *txn = st->txn;
    MDB_cursor *cur = NULL;
    int rc;

    *present = false;
    if (!txn && (rc = store_txn_begin_read(st, &txn)))
        return rc;
    rc = store_xlate(st, mdb_cursor_open(txn, st->keys, &cur));
    if (rc == STORE_OK)
        rc = store_find_key(st, cur, key, present, NULL);
    if (cur)
        mdb_cursor_close(cur);
    if (txn != st->txn)
        mdb_txn_abort(txn);
    return rc;
}

int store_lookup(store_t *st, const uint8_t key[KEYHASH_LEN], bool *present, uint64_t *log_offset)
{
    MDB_txn *txn = st->txn;
    MDB_cursor *cur = NULL, *scur = NULL;
    uint64_t seq = 0;
    int rc;

    *present = false;
    *log_offset = 0;
    if (!txn && (rc = store_txn_begin_read(st, &txn)))
        return rc;
    rc = store_xlate(st, mdb_cursor_open(txn, st->keys, &cur));
    if (rc == STORE_OK)
        rc = store_find_key(st, cur, key, present, &seq);
    if (rc == STORE_OK && *present)
        rc = store_xlate(st, mdb_cursor_open(txn, st->seq, &scur));
    if (rc == STORE_OK && *present) {
        bool have = false;
        rc = store_seq_find(st, scur, seq, &have);
        if (rc == STORE_OK && !have)
            rc = STORE_CORRUPT; /* a key whose sequence entry is gone */
        MDB_val k, v;
        store_entry_t r;
        if (rc == STORE_OK)
            rc = store_xlate(st, mdb_cursor_get(scur, &k, &v, MDB_GET_CURRENT));
        if (rc == STORE_OK)
            rc = store_seq_decode(st, &k, &v, &r);
        if (rc == STORE_OK)
            *log_offset = r.offset;
    }
    if (scur)
        mdb_cursor_close(scur);
    if (cur)
        mdb_cursor_close(cur);
    if (txn != st->txn)
        mdb_txn_abort(txn);
    return rc;
}
