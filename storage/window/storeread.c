/* storeread.c: whole-store scans and the long-lived readers (one read transaction each, renewed on
 * demand) (storage/window/store.h; private header storage/window/internal.h). */
#include "storage/window/store.h"

#include <lmdb.h>
#include <stdlib.h>
#include <string.h>

#include "storage/window/internal.h"

/* What one store_scan pass calls per entry of its database. */
typedef struct {
    store_t *st;
    MDB_txn *txn;
    store_seq_fn on_seq;
    store_key_fn on_key;
    void *arg;
    MDB_cursor *seqcur; /* for the key pass's look-ups in `seq` */
} scan_t;

static int scan_seq_entry(scan_t *s, const MDB_val *k, const MDB_val *v)
{
    store_entry_t r;
    int rc = store_seq_decode(s->st, k, v, &r);
    return rc ? rc : s->on_seq(s->arg, r.seq, r.key, r.received_ms, r.offset);
}

static int scan_key_entry(scan_t *s, const MDB_val *k, const MDB_val *v)
{
    if (k->mv_size != KEY_PREFIX || v->mv_size != KEY_VALUE)
        return STORE_CORRUPT;
    uint8_t key[KEYHASH_LEN];
    uint64_t seq;
    memcpy(key, k->mv_data, KEY_PREFIX);
    memcpy(key + KEY_PREFIX, v->mv_data, KEY_SUFFIX);
    memcpy(&seq, (const char *)v->mv_data + KEY_SUFFIX, 8);
    /* The sequence entry it names must exist and name it back. */
    bool ok = false;
    int rc = store_seq_find(s->st, s->seqcur, seq, &ok);
    if (rc)
        return rc;
    if (ok) {
        MDB_val ck, cv;
        store_entry_t r;
        ok = mdb_cursor_get(s->seqcur, &ck, &cv, MDB_GET_CURRENT) == 0 &&
             store_seq_decode(s->st, &ck, &cv, &r) == STORE_OK &&
             memcmp(r.key, key, KEYHASH_LEN) == 0;
    }
    return s->on_key(s->arg, key, seq, ok);
}

/* Calls `entry` for every entry of `dbi` in key order; stops at the first non-zero result. */
static int walk(scan_t *s, MDB_dbi dbi, int (*entry)(scan_t *, const MDB_val *, const MDB_val *))
{
    MDB_cursor *cur = NULL;
    MDB_val k, v;
    int rc = store_xlate(s->st, mdb_cursor_open(s->txn, dbi, &cur));
    if (rc)
        return rc;
    for (int op = MDB_FIRST;; op = MDB_NEXT) {
        int mrc = mdb_cursor_get(cur, &k, &v, op);
        if (mrc == MDB_NOTFOUND)
            break;
        if (mrc) {
            rc = store_xlate(s->st, mrc);
            break;
        }
        if ((rc = entry(s, &k, &v)))
            break;
    }
    mdb_cursor_close(cur);
    return rc;
}

int store_scan(store_t *st, store_info_t *info, store_seq_fn on_seq, store_key_fn on_key, void *arg)
{
    MDB_txn *txn = NULL;
    int rc;

    if (st->txn)
        return STORE_ERROR;
    if ((rc = store_txn_begin_read(st, &txn)))
        return rc;
    scan_t s = {.st = st, .txn = txn, .on_seq = on_seq, .on_key = on_key, .arg = arg};
    rc = store_read_info(st, txn, info);
    if (rc == STORE_OK && on_seq)
        rc = walk(&s, st->seq, scan_seq_entry);
    if (rc == STORE_OK && on_key &&
        (rc = store_xlate(st, mdb_cursor_open(txn, st->seq, &s.seqcur))) == 0) {
        rc = walk(&s, st->keys, scan_key_entry);
        mdb_cursor_close(s.seqcur);
    }
    mdb_txn_abort(txn);
    return rc;
}

/* ---- readers: one long read transaction each, renewed on demand ---- */

struct store_reader {
    store_t *st;
    MDB_txn *txn;
    MDB_cursor *kcur, *scur; /* on `keys` and `seq`, renewed with txn */
};

void store_reader_close(store_reader_t *r)
{
    if (!r)
        return;
    if (r->kcur)
        mdb_cursor_close(r->kcur);
    if (r->scur)
        mdb_cursor_close(r->scur);
    if (r->txn)
        mdb_txn_abort(r->txn);
    free(r);
}

int store_reader_open(store_t *st, store_reader_t **out)
{
    store_reader_t *r = calloc(1, sizeof(*r));
    int rc;

    *out = NULL;
    if (!r)
        return STORE_NOMEM;
    r->st = st;
    if ((rc = store_txn_begin_read(st, &r->txn)) ||
        (rc = store_xlate(st, mdb_cursor_open(r->txn, st->keys, &r->kcur))) ||
        (rc = store_xlate(st, mdb_cursor_open(r->txn, st->seq, &r->scur)))) {
        store_reader_close(r);
        return rc;
    }
    *out = r;
    return STORE_OK;
}

int store_reader_refresh(store_reader_t *r)
{
    mdb_txn_reset(r->txn);
    int rc = store_xlate(r->st, mdb_txn_renew(r->txn));
    if (rc == STORE_OK)
        rc = store_xlate(r->st, mdb_cursor_renew(r->txn, r->kcur));
    if (rc == STORE_OK)
        rc = store_xlate(r->st, mdb_cursor_renew(r->txn, r->scur));
    return rc;
}

int store_reader_grow(store_reader_t *r)
{
    mdb_txn_reset(r->txn); /* LMDB may re-map only with no transaction open */
    int rc = store_grow(r->st), rrc = store_reader_refresh(r);
    return rc ? rc : rrc;
}

int store_reader_find(store_reader_t *r, const uint8_t key[KEYHASH_LEN], bool *present,
                      uint64_t *seq)
{
    return store_find_key(r->st, r->kcur, key, present, seq);
}

int store_reader_first_from(store_reader_t *r, uint64_t from, bool *found, store_entry_t *e)
{
    store_t *st = r->st;
    uint64_t bucket = from / st->bucket;
    MDB_val k, v;
    store_entry_t rec;

    *found = false;
    /* The bucket of `from` (or the next one there is), then the first value at or past its
     * position; a bucket holding only earlier positions sends us on to the next bucket. */
    for (int tries = 0; tries < 2; tries++, bucket++) {
        k = store_val(&bucket, sizeof(bucket));
        int mrc = mdb_cursor_get(r->scur, &k, &v, MDB_SET_RANGE);
        if (mrc == MDB_NOTFOUND)
            return STORE_OK;
        if (mrc)
            return store_xlate(st, mrc);
        int rc = store_seq_decode(st, &k, &v, &rec);
        if (rc)
            return rc;
        if (rec.seq < from) {
            uint8_t probe[SEQ_VALUE_LEN] = {(uint8_t)(from % st->bucket)};
            v = store_val(probe, sizeof(probe));
            mrc = mdb_cursor_get(r->scur, &k, &v, MDB_GET_BOTH_RANGE);
            if (mrc == MDB_NOTFOUND)
                continue;
            if (mrc)
                return store_xlate(st, mrc);
            if ((rc = store_seq_decode(st, &k, &v, &rec)))
                return rc;
        }
        *found = true;
        *e = rec;
        return STORE_OK;
    }
    return STORE_OK;
}

int store_reader_each(store_reader_t *r, uint64_t from, uint64_t below, store_entry_fn fn,
                      void *arg)
{
    store_entry_t e;
    bool found = false;
    int rc = store_reader_first_from(r, from, &found, &e);
    while (rc == STORE_OK && found && e.seq < below) {
        if ((rc = fn(arg, &e)) != STORE_OK)
            break;
        MDB_val k, v;
        int mrc = mdb_cursor_get(r->scur, &k, &v, MDB_NEXT);
        if (mrc == MDB_NOTFOUND)
            break;
        if (mrc)
            return store_xlate(r->st, mrc);
        rc = store_seq_decode(r->st, &k, &v, &e);
    }
    return rc;
}

int store_reader_entry(store_reader_t *r, const uint8_t key[KEYHASH_LEN], bool *present,
                       store_entry_t *e)
{
    uint64_t seq = 0;
    int rc = store_reader_find(r, key, present, &seq);
    if (rc == STORE_OK && *present) {
        rc = store_reader_first_from(r, seq, present, e);
        /* A key whose sequence entry is gone: evictions of a checkpoint cut short. */
        *present = rc == STORE_OK && *present && e->seq == seq;
    }
    return rc;
}

int store_reader_info(store_reader_t *r, store_info_t *info)
{
    return store_read_info(r->st, r->txn, info);
}
