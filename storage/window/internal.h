/*
 * storage/window/internal.h: private to the young LMDB store's files, store.c (open, meta,
 * transactions, info), storekeys.c (puts and look-ups of keys), storeevict.c (eviction from
 * the sequence index's oldest end) and storeread.c (scans and long-lived readers). Only they
 * include lmdb.h; everyone else goes through storage/window/store.h, which translates LMDB's
 * codes into store statuses.
 *
 * Every function here returns a store status (STORE_OK or an error, LMDB's code kept for
 * store_detail()) unless it says otherwise. None takes a lock: a store_t is used by one
 * thread at a time (store.h).
 */
#ifndef INGESTD_WINDOW_INTERNAL_H
#define INGESTD_WINDOW_INTERNAL_H

#include <lmdb.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "storage/window/store.h"

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

/* An LMDB code (0, MDB_*, errno) as a store status; remembers it for store_detail(). */
int store_xlate(store_t *st, int rc);

static inline MDB_val store_val(const void *p, size_t n)
{
    MDB_val v = {.mv_size = n, .mv_data = (void *)p};
    return v;
}

/* A meta value of 8 bytes, in LMDB's native byte order (0 when it has another size). */
static inline uint64_t store_get_u64(const MDB_val *v)
{
    uint64_t x = 0;
    if (v->mv_size == sizeof(x))
        memcpy(&x, v->mv_data, sizeof(x));
    return x;
}

/* ---- store.c ---- */

/* Decodes one `seq` entry; STORE_CORRUPT when its sizes are wrong. */
int store_seq_decode(const store_t *st, const MDB_val *k, const MDB_val *v, store_entry_t *r);

/* Positions `cur` (on `seq`) at the entry of `seq`; *found says whether there is one. */
int store_seq_find(store_t *st, MDB_cursor *cur, uint64_t seq, bool *found);

/* Meta value `name` as a u64: *found false (and *out untouched) when absent. */
int store_meta_get_u64(store_t *st, MDB_txn *txn, const char *name, uint64_t *out, bool *found);

int store_meta_put(store_t *st, MDB_txn *txn, const char *name, const void *data, size_t n);

/* A read transaction (the caller aborts it); adopts a map size another process grew. */
int store_txn_begin_read(store_t *st, MDB_txn **txn);

/* The counters of store_info_t as `txn` sees them. */
int store_read_info(store_t *st, MDB_txn *txn, store_info_t *info);

/* ---- storekeys.c ---- */

/*
 * Looks `key` up in `keys` through cursor `cur`: *found, and its sequence
 * number in *seq (may be NULL) when found. Leaves the cursor on or near it.
 */
int store_find_key(store_t *st, MDB_cursor *cur, const uint8_t key[KEYHASH_LEN], bool *found,
                   uint64_t *seq);

/* The `keys` entry (prefix, suffix|seq) of a key, in `value` (k and v point into it). No status. */
void store_key_entry(const uint8_t key[KEYHASH_LEN], uint64_t seq, uint8_t value[KEY_VALUE],
                     MDB_val *k, MDB_val *v);

/* The open write transaction's cursor on `keys`, opened on first use (LMDB closes it with the txn).
 */
int store_keys_cursor(store_t *st, MDB_cursor **cur);

/* store_key_order into st->order (grown as needed, freed by store_close). NULL when out of memory.
 */
const uint32_t *store_key_order_of(store_t *st, const store_entry_t *e, size_t n);

#endif
