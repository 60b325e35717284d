/* store.c: the LMDB de-duplication store; the only file that includes lmdb.h. */
#include "storage/window/store.h"

#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "storage/datadir.h"
#include "storage/fsutil.h"

#define DEFAULT_MAP_SIZE (1ull << 30)
/*
 * `seq` is MDB_DUPSORT | MDB_DUPFIXED too: the bucket seq / B (u64,
 * MDB_INTEGERKEY) -> packed 33-byte duplicates (seq % B | key | receivedAt |
 * log offset), where B is how many values fill one page exactly (123 for
 * 4 KiB pages). Sequences only grow, so every put is an append (a new bucket
 * at the tree's end, a new value at its bucket's end): each bucket is one
 * full page, with no node header per entry.
 */
#define SEQ_VALUE_LEN 33
#define PAGE_HEADER   16 /* LMDB's page header */
/*
 * `keys` is MDB_DUPSORT | MDB_DUPFIXED: the first KEY_PREFIX bytes of a dedupe
 * key are the LMDB key, and the rest plus the sequence number a fixed-size
 * duplicate value. Duplicate values are packed without per-item headers, so
 * a key costs its 22 bytes (at the B-tree's fill factor) instead of a node
 * of 8 + 16 + 8. The 65,536 prefixes keep every bucket small.
 */
#define KEY_PREFIX 2
#define KEY_SUFFIX (KEYHASH_LEN - KEY_PREFIX)
#define KEY_VALUE  (KEY_SUFFIX + 8) /* suffix | seq */

struct store {
    MDB_env *env;
    MDB_dbi keys, seq, meta;
    MDB_txn *txn;      /* the open write transaction, if any */
    MDB_cursor *kcur;  /* a cursor on `keys` in txn (LMDB closes it with the txn) */
    MDB_cursor *acur;  /* the cursor seq_append appends with, in txn (closed with it too) */
    uint64_t bucket;   /* sequences per `seq` bucket: one page of values */
    uint64_t next_seq; /* committed */
    uint64_t txn_seq;  /* next sequence inside the open transaction */
    bool read_only;
    bool older_ok;   /* store_options_t.older_ok */
    bool created;    /* store_created() */
    int last_mdb;    /* last LMDB error code, for store_detail() */
    uint32_t *order; /* sort space of key_order */
    size_t order_cap;
    store_entry_t *gone; /* evict_front's round of entries */
    bool *gone_carry;    /* and which of them are carried (WINDOW_CARRY) */
    size_t gone_cap;
};

static int xlate(store_t *st, int rc)
{
    if (rc == 0)
        return STORE_OK;
    if (st)
        st->last_mdb = rc;
    switch (rc) {
    case MDB_MAP_FULL:
        return STORE_FULL;
    case MDB_TXN_FULL:
        return STORE_TXN_FULL;
    case MDB_NOTFOUND:
        return STORE_NOTFOUND;
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_INVALID:
        return STORE_CORRUPT;
    case MDB_VERSION_MISMATCH:
        return STORE_VERSION;
    case MDB_READERS_FULL:
    case EAGAIN:
    case EBUSY:
        return STORE_BUSY;
    case ENOMEM:
        return STORE_NOMEM;
    case ENOENT:
        return STORE_NOTFOUND;
    case EIO:
    case ENOSPC:
    case EDQUOT:
        return STORE_EIO;
    default:
        return STORE_ERROR;
    }
}

static MDB_val val(const void *p, size_t n)
{
    MDB_val v = {.mv_size = n, .mv_data = (void *)p};
    return v;
}

static uint64_t get_u64(const MDB_val *v)
{
    uint64_t x = 0;
    if (v->mv_size == sizeof(x))
        memcpy(&x, v->mv_data, sizeof(x));
    return x;
}

static int seq_decode(const store_t *st, const MDB_val *k, const MDB_val *v, store_entry_t *r)
{
    uint64_t bucket;
    if (k->mv_size != sizeof(bucket) || v->mv_size != SEQ_VALUE_LEN)
        return STORE_CORRUPT;
    const uint8_t *p = v->mv_data;
    memcpy(&bucket, k->mv_data, sizeof(bucket));
    r->seq = bucket * st->bucket + p[0];
    memcpy(r->key, p + 1, KEYHASH_LEN);
    memcpy(&r->received_ms, p + 17, 8);
    memcpy(&r->offset, p + 25, 8);
    return STORE_OK;
}

/* Positions `cur` (on `seq`) at the entry of `seq`; *found says whether there is one. */
static int seq_find(store_t *st, MDB_cursor *cur, uint64_t seq, bool *found)
{
    uint64_t bucket = seq / st->bucket;
    uint8_t probe[SEQ_VALUE_LEN] = {(uint8_t)(seq % st->bucket)};
    MDB_val k = val(&bucket, sizeof(bucket)), v = val(probe, sizeof(probe));
    int rc = mdb_cursor_get(cur, &k, &v, MDB_GET_BOTH_RANGE);
    *found = false;
    if (rc == MDB_NOTFOUND)
        return STORE_OK;
    if (rc)
        return xlate(st, rc);
    *found = v.mv_size == SEQ_VALUE_LEN && ((const uint8_t *)v.mv_data)[0] == probe[0];
    return STORE_OK;
}

static int meta_get_u64(store_t *st, MDB_txn *txn, const char *name, uint64_t *out, bool *found)
{
    MDB_val k = val(name, strlen(name)), v;
    int rc = mdb_get(txn, st->meta, &k, &v);
    *found = false;
    if (rc == MDB_NOTFOUND)
        return STORE_OK;
    if (rc != 0)
        return xlate(st, rc);
    if (v.mv_size != sizeof(uint64_t))
        return STORE_CORRUPT;
    *out = get_u64(&v);
    *found = true;
    return STORE_OK;
}

static int meta_put(store_t *st, MDB_txn *txn, const char *name, const void *data, size_t n)
{
    MDB_val k = val(name, strlen(name)), v = val(data, n);
    return xlate(st, mdb_put(txn, st->meta, &k, &v, 0));
}

/* A read transaction; adopts a map size another process grew in the meantime. */
static int begin_read(store_t *st, MDB_txn **txn)
{
    int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, txn);
    if (rc == MDB_MAP_RESIZED) {
        mdb_env_set_mapsize(st->env, 0);
        rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, txn);
    }
    return xlate(st, rc);
}

/* Opens (or creates) the three databases and checks the format version. */
static int open_dbs(store_t *st)
{
    MDB_txn *txn = NULL;
    unsigned create = st->read_only ? 0 : MDB_CREATE;
    int rc = xlate(st, mdb_txn_begin(st->env, NULL, st->read_only ? MDB_RDONLY : 0, &txn));
    if (rc)
        return rc;
    if ((rc = xlate(st, mdb_dbi_open(txn, "meta", create, &st->meta))))
        goto out;
    /* The format first: an older store's databases may have other flags. */
    MDB_val k = val("format", 6), v;
    int mrc = mdb_get(txn, st->meta, &k, &v);
    if (mrc == 0) {
        uint32_t fmt = 0;
        if (v.mv_size != sizeof(fmt)) {
            rc = STORE_CORRUPT;
            goto out;
        }
        memcpy(&fmt, v.mv_data, sizeof(fmt));
        /* Formats 2 and 3 hold keys without their source's tag: only a rebuild can add it. */
        if (fmt != STORE_FORMAT_VERSION && !(st->older_ok && (fmt == 2 || fmt == 3))) {
            rc = STORE_VERSION;
            goto out;
        }
    } else if (mrc == MDB_NOTFOUND && !st->read_only) {
        uint32_t fmt = STORE_FORMAT_VERSION;
        if ((rc = meta_put(st, txn, "format", &fmt, sizeof(fmt))))
            goto out;
    } else if (mrc != MDB_NOTFOUND) {
        rc = xlate(st, mrc);
        goto out;
    }
    if ((rc = xlate(st,
                    mdb_dbi_open(txn, "keys", create | MDB_DUPSORT | MDB_DUPFIXED, &st->keys))) ||
        (rc = xlate(st,
                    mdb_dbi_open(txn, "seq", create | MDB_INTEGERKEY | MDB_DUPSORT | MDB_DUPFIXED,
                                 &st->seq))))
        goto out;
    bool found;
    st->next_seq = 0;
    if ((rc = meta_get_u64(st, txn, "next_seq", &st->next_seq, &found)))
        goto out;
    /* Commit even a read-only txn: aborting it would close the dbi handles just opened. */
    rc = xlate(st, mdb_txn_commit(txn));
    return rc;
out:
    mdb_txn_abort(txn);
    return rc;
}

int store_open(const char *dir, const store_options_t *opts, store_t **out)
{
    store_t *st = calloc(1, sizeof(*st));
    int rc;

    *out = NULL;
    if (!st)
        return STORE_NOMEM;
    st->read_only = opts && opts->read_only;
    st->older_ok = st->read_only && opts->older_ok;
    if ((rc = xlate(st, mdb_env_create(&st->env))))
        goto fail;
    uint64_t map = opts && opts->map_size ? opts->map_size : DEFAULT_MAP_SIZE;
    if ((rc = xlate(st, mdb_env_set_maxdbs(st->env, 4))) ||
        (rc = xlate(st, mdb_env_set_mapsize(st->env, (size_t)map))))
        goto fail;
    /* MDB_NORDAHEAD: lookups of random keys gain nothing from read-ahead. MDB_NOTLS: a read
     * transaction belongs to its store_reader_t, not its thread, so the commit writer can hold
     * one while the checkpointer thread writes. */
    unsigned flags = MDB_NORDAHEAD | MDB_NOTLS;
    if (st->read_only)
        flags |= MDB_RDONLY;
    else if (opts && opts->sync == STORE_SYNC_META)
        flags |= MDB_NOMETASYNC;
    else if (opts && opts->sync == STORE_SYNC_NONE)
        flags |= MDB_NOSYNC;
    if ((rc = xlate(st, mdb_env_open(st->env, dir, flags, 0644))))
        goto fail;
    MDB_envinfo ei;
    if ((rc = xlate(st, mdb_env_info(st->env, &ei))))
        goto fail;
    st->created = ei.me_last_txnid == 0; /* nothing ever committed: a new environment */
    MDB_stat ms;
    if ((rc = xlate(st, mdb_env_stat(st->env, &ms))))
        goto fail;
    /* The page size is the file's: a store's buckets always have the same size. */
    st->bucket = (ms.ms_psize - PAGE_HEADER) / SEQ_VALUE_LEN;
    if (st->bucket > 255)
        st->bucket = 255; /* the position in a bucket is one byte */
    if ((rc = open_dbs(st)))
        goto fail;
    int dead = 0;
    mdb_reader_check(st->env, &dead);
    *out = st;
    return STORE_OK;
fail:
    store_close(st);
    return rc;
}

bool store_created(const store_t *st)
{
    return st->created;
}

void store_close(store_t *st)
{
    if (!st)
        return;
    if (st->txn)
        mdb_txn_abort(st->txn);
    if (st->env)
        mdb_env_close(st->env);
    free(st->order);
    free(st->gone);
    free(st->gone_carry);
    free(st);
}

int store_secret(store_t *st, const uint8_t *secret_in, uint8_t secret_out[KEYHASH_SECRET_LEN])
{
    MDB_txn *txn = NULL;
    MDB_val k = val("secret", 6), v;
    int rc = begin_read(st, &txn);
    if (rc)
        return rc;
    int mrc = mdb_get(txn, st->meta, &k, &v);
    if (mrc == 0) {
        rc = v.mv_size == KEYHASH_SECRET_LEN ? STORE_OK : STORE_CORRUPT;
        if (rc == STORE_OK)
            memcpy(secret_out, v.mv_data, KEYHASH_SECRET_LEN);
        mdb_txn_abort(txn);
        return rc;
    }
    mdb_txn_abort(txn);
    if (mrc != MDB_NOTFOUND)
        return xlate(st, mrc);
    if (st->read_only)
        return STORE_NOTFOUND;

    uint8_t secret[KEYHASH_SECRET_LEN];
    if (secret_in)
        memcpy(secret, secret_in, sizeof(secret));
    else if (keyhash_random(secret, sizeof(secret)) != 0)
        return STORE_ERROR;
    if ((rc = xlate(st, mdb_txn_begin(st->env, NULL, 0, &txn))))
        return rc;
    if ((rc = meta_put(st, txn, "secret", secret, sizeof(secret)))) {
        mdb_txn_abort(txn);
        return rc;
    }
    if ((rc = xlate(st, mdb_txn_commit(txn))))
        return rc;
    memcpy(secret_out, secret, sizeof(secret));
    return STORE_OK;
}

/* The counters of store_info_t as `txn` sees them. */
static int read_info(store_t *st, MDB_txn *txn, store_info_t *info)
{
    MDB_cursor *cur = NULL;
    MDB_stat ms;
    MDB_envinfo ei;
    MDB_val k, v;
    bool found;
    int rc;

    memset(info, 0, sizeof(*info));
    if ((rc = xlate(st, mdb_stat(txn, st->keys, &ms))))
        return rc;
    info->keys = ms.ms_entries;
    if ((rc = meta_get_u64(st, txn, "applied", &info->applied, &found)) ||
        (rc = meta_get_u64(st, txn, "next_seq", &info->next_seq, &found)) ||
        (rc = meta_get_u64(st, txn, "evicting", &info->evicting_below, &found)) ||
        (rc = meta_get_u64(st, txn, "sealed", &info->sealed_below, &found)))
        return rc;
    if ((rc = xlate(st, mdb_cursor_open(txn, st->seq, &cur))))
        return rc;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    info->oldest_offset = info->applied;
    store_entry_t r;
    if (mrc == 0 && seq_decode(st, &k, &v, &r) == STORE_OK) {
        info->oldest_received_ms = r.received_ms;
        info->oldest_offset = r.offset;
    } else if (mrc != 0 && mrc != MDB_NOTFOUND) {
        rc = xlate(st, mrc);
    }
    mdb_cursor_close(cur);
    if (rc)
        return rc;
    if (mdb_env_info(st->env, &ei) == 0 && mdb_env_stat(st->env, &ms) == 0) {
        info->map_size = ei.me_mapsize;
        info->used_bytes = (uint64_t)(ei.me_last_pgno + 1) * ms.ms_psize;
    }
    return STORE_OK;
}

int store_get_info(store_t *st, store_info_t *info)
{
    MDB_txn *txn = st->txn;
    int rc;

    if (!txn && (rc = begin_read(st, &txn))) {
        memset(info, 0, sizeof(*info));
        return rc;
    }
    rc = read_info(st, txn, info);
    if (txn == st->txn)
        info->next_seq = st->txn_seq; /* inside the open write transaction */
    else
        mdb_txn_abort(txn);
    return rc;
}

int store_begin(store_t *st)
{
    if (st->txn || st->read_only)
        return STORE_ERROR;
    int rc = xlate(st, mdb_txn_begin(st->env, NULL, 0, &st->txn));
    if (rc) {
        st->txn = NULL;
        return rc;
    }
    st->txn_seq = st->next_seq;
    return STORE_OK;
}

/*
 * Looks `key` up in `keys` through cursor `cur`: *found, and its sequence
 * number in *seq when found. Leaves the cursor on or near it.
 */
static int find_key(store_t *st, MDB_cursor *cur, const uint8_t key[KEYHASH_LEN], bool *found,
                    uint64_t *seq)
{
    uint8_t probe[KEY_VALUE] = {0};
    memcpy(probe, key + KEY_PREFIX, KEY_SUFFIX);
    MDB_val k = val(key, KEY_PREFIX), v = val(probe, sizeof(probe));
    *found = false;
    /* The first value of the bucket at or after suffix|0: ours if its suffix matches. */
    int rc = mdb_cursor_get(cur, &k, &v, MDB_GET_BOTH_RANGE);
    if (rc == MDB_NOTFOUND)
        return STORE_OK;
    if (rc)
        return xlate(st, rc);
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
static void key_entry(const uint8_t key[KEYHASH_LEN], uint64_t seq, uint8_t value[KEY_VALUE],
                      MDB_val *k, MDB_val *v)
{
    memcpy(value, key + KEY_PREFIX, KEY_SUFFIX);
    memcpy(value + KEY_SUFFIX, &seq, 8);
    *k = val(key, KEY_PREFIX);
    *v = val(value, KEY_VALUE);
}

static int cursor(store_t *st, MDB_cursor **cur)
{
    if (!st->kcur) {
        int rc = mdb_cursor_open(st->txn, st->keys, &st->kcur);
        if (rc)
            return xlate(st, rc);
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
    MDB_val sk = val(&bucket, sizeof(bucket)), sv = val(rec, sizeof(rec));
    /* The first of a bucket opens it at the tree's end; the others go at its end. One cursor
     * for the transaction's appends: it stays on the last page, where LMDB finds the bucket
     * without a search from the root (mdb_put opens a fresh cursor for each). */
    unsigned flags = e->seq % st->bucket == 0 ? MDB_APPEND : MDB_APPENDDUP;
    if (!st->acur) {
        int rc = xlate(st, mdb_cursor_open(st->txn, st->seq, &st->acur));
        if (rc) {
            st->acur = NULL;
            return rc;
        }
    }
    return xlate(st, mdb_cursor_put(st->acur, &sk, &sv, flags));
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
        if ((rc = xlate(st, mdb_cursor_del(cur, 0))) ||
            (rc = xlate(st, mdb_cursor_open(st->txn, st->seq, &scur))))
            return rc;
        rc = seq_find(st, scur, old_seq, &have);
        /*
         * Only when the entry names this key: a checkpoint cut short between
         * its transactions leaves keys whose sequence entries were not written
         * yet (store_put_keys), and a replay may have numbered others since.
         */
        MDB_val sk, sv;
        store_entry_t r;
        if (rc == STORE_OK && have &&
            (rc = xlate(st, mdb_cursor_get(scur, &sk, &sv, MDB_GET_CURRENT))) == STORE_OK &&
            (rc = seq_decode(st, &sk, &sv, &r)) == STORE_OK &&
            memcmp(r.key, e->key, KEYHASH_LEN) == 0)
            rc = xlate(st, mdb_cursor_del(scur, 0));
        mdb_cursor_close(scur);
        if (rc)
            return rc;
    }
    key_entry(e->key, e->seq, value, &k, &v);
    return xlate(st, mdb_cursor_put(cur, &k, &v, MDB_NODUPDATA));
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
    if ((rc = cursor(st, &cur)) || (rc = find_key(st, cur, key, &found, &old_seq)))
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
        uint64_t hi = (uint64_t)k[0] << 24 | (uint64_t)k[1] << 16 | (uint64_t)k[2] << 8 | k[3];
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

/* store_key_order into st->order (grown as needed, freed by store_close). NULL when out of memory.
 */
static const uint32_t *key_order(store_t *st, const store_entry_t *e, size_t n)
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
    int rc = st->txn ? cursor(st, &cur) : STORE_ERROR;
    for (size_t i = 0; rc == STORE_OK && i < n; i++) {
        const store_entry_t *x = order ? &e[order[i]] : &e[i];
        uint64_t old_seq = 0;
        bool found;
        if ((rc = find_key(st, cur, x->key, &found, &old_seq)) == STORE_OK)
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
    if (n > 1 && !(order = key_order(st, e, n)))
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
    if (!txn && (rc = begin_read(st, &txn)))
        return rc;
    rc = xlate(st, mdb_cursor_open(txn, st->keys, &cur));
    if (rc == STORE_OK)
        rc = find_key(st, cur, key, present, NULL);
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
    if (!txn && (rc = begin_read(st, &txn)))
        return rc;
    rc = xlate(st, mdb_cursor_open(txn, st->keys, &cur));
    if (rc == STORE_OK)
        rc = find_key(st, cur, key, present, &seq);
    if (rc == STORE_OK && *present)
        rc = xlate(st, mdb_cursor_open(txn, st->seq, &scur));
    if (rc == STORE_OK && *present) {
        bool have = false;
        rc = seq_find(st, scur, seq, &have);
        if (rc == STORE_OK && !have)
            rc = STORE_CORRUPT; /* a key whose sequence entry is gone */
        MDB_val k, v;
        store_entry_t r;
        if (rc == STORE_OK)
            rc = xlate(st, mdb_cursor_get(scur, &k, &v, MDB_GET_CURRENT));
        if (rc == STORE_OK)
            rc = seq_decode(st, &k, &v, &r);
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
    int rc = st->txn ? cursor(st, &cur) : STORE_ERROR;
    for (size_t i = 0; rc == STORE_OK && i < n; i++) {
        const store_entry_t *e = order ? &gone[order[i]] : &gone[i];
        /* Exactly this key's entry with this sequence: a newer one for the key is never hit. */
        uint8_t value[KEY_VALUE];
        MDB_val k, v;
        key_entry(e->key, e->seq, value, &k, &v);
        int mrc = mdb_cursor_get(cur, &k, &v, MDB_GET_BOTH);
        if (mrc == 0 && (mrc = mdb_cursor_del(cur, 0)) == 0)
            (*deleted)++;
        if (mrc && mrc != MDB_NOTFOUND)
            rc = xlate(st, mrc);
    }
    return rc;
}

/* Deletes the `keys` entries of gone[0..n), in key order (see key_order); *count drops by each. */
static int evict_keys(store_t *st, const store_entry_t *gone, size_t n, uint64_t *count)
{
    const uint32_t *order = n > 1 ? key_order(st, gone, n) : NULL;
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

    if ((rc = xlate(st, mdb_stat(st->txn, st->keys, &ms))))
        return rc;
    uint64_t count = ms.ms_entries;
    if ((rc = xlate(st, mdb_cursor_open(st->txn, st->seq, &cur))))
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
            if ((rc = seq_decode(st, &k, &v, r)))
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
            rc = xlate(st, mrc);
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
                (rc = put_one(st, r->key, r->received_ms, r->offset, false, &dup)) == STORE_OK)
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
    if (!txn && (rc = begin_read(st, &txn)))
        return rc;
    /* The `keys` entries, as the size bound counts keys (a checkpoint cut short leaves keys
     * whose sequence entries are not written yet: the replay puts those again). */
    if ((rc = xlate(st, mdb_cursor_open(txn, st->keys, &cur))) == STORE_OK) {
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
            rc = xlate(st, mrc);
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
    if (!txn && (rc = begin_read(st, &txn)))
        return rc;
    if ((rc = xlate(st, mdb_cursor_open(txn, st->seq, &cur))) == STORE_OK) {
        int mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
        for (; mrc == 0 && *n < max; mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            if ((rc = seq_decode(st, &k, &v, &out[*n])) || out[*n].seq >= below_seq)
                break;
            (*n)++;
        }
        if (rc == STORE_OK && mrc && mrc != MDB_NOTFOUND)
            rc = xlate(st, mrc);
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
        rc = cursor(st, &cur);
    for (size_t i = 0; rc == STORE_OK && i < n; i++) {
        const store_entry_t *e = &gone[i];
        bool found = false, dup = false;
        uint64_t seq = 0;
        if ((rc = find_key(st, cur, e->key, &found, &seq)) != STORE_OK || !found || seq != e->seq)
            continue; /* its eviction landed (or a newer entry of the key stands) */
        /* The eviction (or carry) never landed: the key stays, moved to the young end. */
        rc = put_one(st, e->key, e->received_ms, e->offset, true, &dup);
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
    return st->txn ? meta_put(st, st->txn, "evicting", &below_seq, sizeof(below_seq)) : STORE_ERROR;
}

int store_cut_front(store_t *st, uint64_t below_seq, uint64_t *cut)
{
    MDB_cursor *cur = NULL;
    MDB_val k, v;
    int rc = st->txn ? xlate(st, mdb_cursor_open(st->txn, st->seq, &cur)) : STORE_ERROR;
    if (rc)
        return rc;
    int mrc = 0;
    for (;;) {
        store_entry_t r;
        size_t dups = 0;
        if ((mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST)) || (rc = seq_decode(st, &k, &v, &r)))
            break;
        if (r.seq >= below_seq)
            break;
        /* A whole bucket below the bound goes at once; the one it ends in, value by value. */
        unsigned flags = 0;
        if ((mrc = mdb_cursor_get(cur, &k, &v, MDB_LAST_DUP)) || (rc = seq_decode(st, &k, &v, &r)))
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
        rc = xlate(st, mrc);
    mdb_cursor_close(cur);
    return rc;
}

int store_seal(store_t *st, uint64_t sealed_below)
{
    if (!st->txn || sealed_below > st->txn_seq)
        return STORE_ERROR;
    int rc = xlate(st, mdb_drop(st->txn, st->keys, 0));
    if (rc == STORE_OK)
        rc = xlate(st, mdb_drop(st->txn, st->seq, 0));
    if (rc == STORE_OK)
        rc = meta_put(st, st->txn, "sealed", &sealed_below, sizeof(sealed_below));
    return rc;
}

int store_advance_seq(store_t *st, uint64_t next_seq)
{
    if (!st->txn || next_seq < st->txn_seq)
        return STORE_ERROR;
    st->txn_seq = next_seq;
    return STORE_OK;
}

int store_set_applied(store_t *st, uint64_t next_offset)
{
    return meta_put(st, st->txn, "applied", &next_offset, sizeof(next_offset));
}

int store_commit(store_t *st)
{
    int rc = meta_put(st, st->txn, "next_seq", &st->txn_seq, sizeof(st->txn_seq));
    if (rc) {
        store_abort(st);
        return rc;
    }
    rc = mdb_txn_commit(st->txn);
    st->txn = NULL; /* committed or, on error, freed by LMDB, with its cursors */
    st->kcur = NULL;
    st->acur = NULL;
    if (rc)
        return xlate(st, rc);
    st->next_seq = st->txn_seq;
    return STORE_OK;
}

void store_abort(store_t *st)
{
    if (st->txn)
        mdb_txn_abort(st->txn); /* closes kcur and acur too */
    st->txn = NULL;
    st->kcur = NULL;
    st->acur = NULL;
    st->txn_seq = st->next_seq;
}

int store_flush(store_t *st)
{
    return xlate(st, mdb_env_sync(st->env, 1));
}

int store_grow(store_t *st)
{
    MDB_envinfo ei;
    if (st->txn)
        return STORE_ERROR;
    int rc = xlate(st, mdb_env_info(st->env, &ei));
    if (rc)
        return rc;
    return xlate(st, mdb_env_set_mapsize(st->env, ei.me_mapsize * 2));
}

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
    int rc = seq_decode(s->st, k, v, &r);
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
    int rc = seq_find(s->st, s->seqcur, seq, &ok);
    if (rc)
        return rc;
    if (ok) {
        MDB_val ck, cv;
        store_entry_t r;
        ok = mdb_cursor_get(s->seqcur, &ck, &cv, MDB_GET_CURRENT) == 0 &&
             seq_decode(s->st, &ck, &cv, &r) == STORE_OK && memcmp(r.key, key, KEYHASH_LEN) == 0;
    }
    return s->on_key(s->arg, key, seq, ok);
}

/* Calls `entry` for every entry of `dbi` in key order; stops at the first non-zero result. */
static int walk(scan_t *s, MDB_dbi dbi, int (*entry)(scan_t *, const MDB_val *, const MDB_val *))
{
    MDB_cursor *cur = NULL;
    MDB_val k, v;
    int rc = xlate(s->st, mdb_cursor_open(s->txn, dbi, &cur));
    if (rc)
        return rc;
    for (int op = MDB_FIRST;; op = MDB_NEXT) {
        int mrc = mdb_cursor_get(cur, &k, &v, op);
        if (mrc == MDB_NOTFOUND)
            break;
        if (mrc) {
            rc = xlate(s->st, mrc);
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
    if ((rc = begin_read(st, &txn)))
        return rc;
    scan_t s = {.st = st, .txn = txn, .on_seq = on_seq, .on_key = on_key, .arg = arg};
    rc = read_info(st, txn, info);
    if (rc == STORE_OK && on_seq)
        rc = walk(&s, st->seq, scan_seq_entry);
    if (rc == STORE_OK && on_key &&
        (rc = xlate(st, mdb_cursor_open(txn, st->seq, &s.seqcur))) == 0) {
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
    if ((rc = begin_read(st, &r->txn)) ||
        (rc = xlate(st, mdb_cursor_open(r->txn, st->keys, &r->kcur))) ||
        (rc = xlate(st, mdb_cursor_open(r->txn, st->seq, &r->scur)))) {
        store_reader_close(r);
        return rc;
    }
    *out = r;
    return STORE_OK;
}

int store_reader_refresh(store_reader_t *r)
{
    mdb_txn_reset(r->txn);
    int rc = xlate(r->st, mdb_txn_renew(r->txn));
    if (rc == STORE_OK)
        rc = xlate(r->st, mdb_cursor_renew(r->txn, r->kcur));
    if (rc == STORE_OK)
        rc = xlate(r->st, mdb_cursor_renew(r->txn, r->scur));
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
    return find_key(r->st, r->kcur, key, present, seq);
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
        k = val(&bucket, sizeof(bucket));
        int mrc = mdb_cursor_get(r->scur, &k, &v, MDB_SET_RANGE);
        if (mrc == MDB_NOTFOUND)
            return STORE_OK;
        if (mrc)
            return xlate(st, mrc);
        int rc = seq_decode(st, &k, &v, &rec);
        if (rc)
            return rc;
        if (rec.seq < from) {
            uint8_t probe[SEQ_VALUE_LEN] = {(uint8_t)(from % st->bucket)};
            v = val(probe, sizeof(probe));
            mrc = mdb_cursor_get(r->scur, &k, &v, MDB_GET_BOTH_RANGE);
            if (mrc == MDB_NOTFOUND)
                continue;
            if (mrc)
                return xlate(st, mrc);
            if ((rc = seq_decode(st, &k, &v, &rec)))
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
            return xlate(r->st, mrc);
        rc = seq_decode(r->st, &k, &v, &e);
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
    return read_info(r->st, r->txn, info);
}

int store_copy(store_t *st, const char *dir)
{
    int rc = xlate(st, mdb_env_copy2(st->env, dir, MDB_CP_COMPACT));
    if (rc != STORE_OK)
        return rc;
    /* mdb_env_copy2 writes the file without syncing it, nor its name: a backup that says it
     * is durable must be. */
    char *path = datadir_in(dir, DATADIR_LMDB_DATA);
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0 || fsync(fd) != 0 || fsutil_sync_dir(dir) != 0)
        rc = path ? STORE_EIO : STORE_NOMEM;
    if (fd >= 0)
        close(fd);
    free(path);
    return rc;
}

int store_reader_check(store_t *st, int *cleared)
{
    *cleared = 0;
    return xlate(st, mdb_reader_check(st->env, cleared));
}

const char *store_detail(const store_t *st)
{
    return st && st->last_mdb ? mdb_strerror(st->last_mdb) : "no error";
}

const char *store_strerror(int status)
{
    switch (status) {
    case STORE_OK:
        return "ok";
    case STORE_FULL:
        return "LMDB map full";
    case STORE_EIO:
        return "LMDB I/O error";
    case STORE_CORRUPT:
        return "LMDB store corrupt";
    case STORE_NOMEM:
        return "out of memory";
    case STORE_VERSION:
        return "LMDB store has an incompatible format version";
    case STORE_BUSY:
        return "LMDB store busy (locked or reader table full)";
    case STORE_NOTFOUND:
        return "not found";
    case STORE_TXN_FULL:
        return "LMDB write transaction full (too many dirty pages)";
    default:
        return "LMDB error";
    }
}
