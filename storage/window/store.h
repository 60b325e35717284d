/* store: the LMDB de-duplication store (keys, sequence index, meta). */
#ifndef INGESTD_STORE_H
#define INGESTD_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/window/keyhash.h"
#include "storage/window/srcmap.h"
#include "storage/window/rule.h"

/*
 * Three named LMDB databases in one environment (DIR/data.mdb):
 *   keys: MDB_DUPSORT | MDB_DUPFIXED: the key's first 2 bytes -> packed
 *         duplicates of (the other 14 bytes | u64 sequence number)
 *   seq : MDB_DUPSORT | MDB_DUPFIXED: bucket u64 sequence / B (MDB_INTEGERKEY;
 *         B values fill one page, 123 at 4 KiB) -> packed duplicates of
 *         (u8 sequence % B | 16-byte key | i64 receivedAt ms | u64 log
 *         offset), appended in order
 *   meta: "format" -> u32, "secret" -> 16 bytes, "applied" -> u64 (the log
 *         offset after the last record applied), "next_seq" -> u64,
 *         "evicting" -> u64 (store_mark_evicting), "sealed" -> u64
 *         (store_seal: every sequence below it was sealed into a generation
 *         file, storage/window/genset.h, and left LMDB)
 * Nothing outside the store's files (store.c, storekeys.c, storeevict.c,
 * storeread.c; private header storage/window/internal.h) includes lmdb.h;
 * LMDB codes are translated there.
 */

typedef struct store store_t;

enum store_status {
    STORE_OK = 0,
    STORE_FULL = -1,    /* map full: abort, store_grow(), replay the transaction */
    STORE_EIO = -2,     /* I/O error or disk full */
    STORE_CORRUPT = -3, /* the database is unusable */
    STORE_NOMEM = -4,
    STORE_VERSION = -5, /* written by an incompatible format version */
    STORE_BUSY = -6,    /* locked by another process / too many readers */
    STORE_ERROR = -7,   /* anything else (see store_strerror) */
    STORE_NOTFOUND = -8,
    STORE_TXN_FULL = -9, /* the write transaction holds as many dirty pages as LMDB allows:
                            abort, and go on in a new one (after committing what came before) */
};

/* 2: `keys` and `seq` as packed fixed-size duplicates; 3: meta "sealed"; 4: every key carries
 * its source's tag (keyhash.h). A format 2 or 3 store is STORE_VERSION: its keys (and its
 * generations') lack the tag, so the commit module rebuilds it from the log
 * (storage/window/retag.h). */
#define STORE_FORMAT_VERSION 4

/* How LMDB makes its own commits durable (docs/durability.md says which is safe when). */
enum store_sync {
    STORE_SYNC_META = 0, /* MDB_NOMETASYNC: data pages fsynced per commit, the meta page with the
                            next one; a power loss may undo the last commit, never corrupt (the
                            log replays it). The default. */
    STORE_SYNC_FULL = 1, /* LMDB's default: data pages and the meta page synced per commit */
    STORE_SYNC_NONE = 2, /* MDB_NOSYNC: nothing synced per commit; an operating-system crash
                            can corrupt the store. Only safe with the commit module's "lazy"
                            protocol (a boot-id marker, and a rebuild from the log after a crash
                            of the machine) */
};

typedef struct store_options {
    uint64_t map_size; /* initial map size in bytes (grown on demand); 0: 1 GiB */
    bool read_only;    /* open for reading only (e.g. `log cat`, `check`) */
    bool older_ok;     /* read_only only: take a format 2 or 3 store too (the same databases,
                          keys without tags), for readers of its meta values, applied offset and
                          secret (`log cat`, `backup`), never of its keys */
    enum store_sync sync;
} store_options_t;

typedef struct store_info {
    uint64_t keys;              /* entries in `keys` */
    uint64_t next_seq;          /* sequence the next insert gets */
    uint64_t applied;           /* log offset after the last applied record */
    int64_t oldest_received_ms; /* receivedAt of the oldest retained key; 0 when empty */
    uint64_t oldest_offset;     /* log offset of the oldest retained key; `applied` when empty */
    uint64_t map_size;          /* current map size in bytes */
    uint64_t used_bytes;        /* pages in use * page size */
    uint64_t evicting_below;    /* sequences below it may have lost their keys already: a
                                   checkpoint's evictions in progress (store_mark_evicting) */
    uint64_t sealed_below;      /* sequences below it live in generation files (store_seal) */
    uint64_t dropped_below;     /* generations below it were dropped by the rule
                                   (store_record_drop), those from it on are all kept;
                                   STORE_DROPS_UNKNOWN in a store made before it was recorded */
} store_info_t;

#define STORE_DROPS_UNKNOWN UINT64_MAX

/*
 * Opens or creates the environment in `dir` (must exist). *out freed with store_close().
 * Returns STORE_OK, or STORE_NOTFOUND (no `dir`; read-only: no environment), STORE_VERSION
 * (another store format), STORE_CORRUPT, STORE_BUSY (locked, no reader slot), STORE_EIO,
 * STORE_NOMEM, STORE_ERROR; *out is then NULL.
 */
int store_open(const char *dir, const store_options_t *opts, store_t **out);
void store_close(store_t *st);

/* True when store_open created the environment (no commit had ever been made in `dir`): a new
 * store, not one that has simply applied nothing yet. */
bool store_created(const store_t *st);

/*
 * Returns the hash secret, creating and committing a random one when the
 * store has none yet: `secret_in` (may be NULL) is used instead of a random
 * one, so a rebuilt store keeps the data dir's secret. No transaction open.
 * Returns STORE_OK, or STORE_NOTFOUND (read-only and none), STORE_CORRUPT (not 16 bytes),
 * STORE_ERROR (no randomness), or the errors of a write transaction (below).
 */
int store_secret(store_t *st, const uint8_t *secret_in, uint8_t secret_out[KEYHASH_SECRET_LEN]);

/* Reads the counters above in a short read transaction (no write txn needed). */
int store_get_info(store_t *st, store_info_t *info);

/*
 * Write transactions: one at a time, from one thread (the commit writer).
 * store_txn_begin() .. store_insert()* store_evict() store_set_applied() ..
 * store_txn_commit() or store_txn_abort(). After any error the caller must
 * store_txn_abort(); after STORE_FULL it may store_grow() and start over.
 *
 * Every call below that writes returns STORE_OK or: STORE_ERROR (no write
 * transaction open, or store_txn_begin on a read-only store or inside one),
 * STORE_FULL (map full), STORE_TXN_FULL (too many dirty pages), STORE_EIO,
 * STORE_NOMEM, STORE_CORRUPT (LMDB found, or a decode saw, a broken page).
 */
int store_txn_begin(store_t *st);

/*
 * Inserts `key` unless present. *duplicate is set to true (and nothing
 * written) when the key is already in the store, including earlier in the
 * same transaction.
 */
int store_insert(store_t *st, const uint8_t key[KEYHASH_LEN], int64_t received_ms,
                 uint64_t log_offset, bool *duplicate);

/*
 * Replay only: inserts `key` like store_insert, but when it is already
 * present the newer record wins (its old sequence entry is dropped), so a key
 * re-accepted after it aged out is remembered from its latest receivedAt.
 */
int store_upsert(store_t *st, const uint8_t key[KEYHASH_LEN], int64_t received_ms,
                 uint64_t log_offset, bool *replaced /* may be NULL: the key was present */);

/*
 * Like store_contains, and when `key` is present also the log offset stored
 * with it in *log_offset (the Kafka worker stores the input offset there: the
 * record that "owns" the key). Inside the open write txn, or a read txn.
 */
int store_lookup(store_t *st, const uint8_t key[KEYHASH_LEN], bool *present, uint64_t *log_offset);

/* True in *present when `key` is in the store (inside the open write txn, or a read txn).
 * Both: STORE_OK, or STORE_CORRUPT (store_lookup: a key without its sequence entry),
 * STORE_BUSY (no reader slot), STORE_EIO, STORE_NOMEM. */
int store_contains(store_t *st, const uint8_t key[KEYHASH_LEN], bool *present);

/*
 * Ages keys out, oldest first, in at most `max_steps` deletions: while the
 * oldest key was received before `older_than_ms`, or more than `max_keys`
 * keys remain (0: no size bound): window_judge's rule. *evicted_age /
 * *evicted_size count the deletions by reason. store_evict_pass takes the
 * bounds as one window pass (window.h: window_before_batch, ...).
 */
int store_evict(store_t *st, int64_t older_than_ms, uint64_t max_keys, size_t max_steps,
                uint64_t *evicted_age, uint64_t *evicted_size);
int store_evict_pass(store_t *st, window_pass_t pass, uint64_t *evicted_age,
                     uint64_t *evicted_size);

/*
 * Deletes, oldest first and at most `max_steps`, the sequence entries below
 * `floor_seq` and the keys they name; *evicted counts them.
 */
int store_evict_below(store_t *st, uint64_t floor_seq, size_t max_steps, uint64_t *evicted);

/*
 * In the open write transaction: empties `keys` and `seq` (LMDB keeps their
 * pages for reuse: the file does not grow again) and records that every
 * sequence below `sealed_below` (at most the next sequence) now lives in
 * generation files. The caller wrote those files, durably, before.
 */
int store_seal(store_t *st, uint64_t sealed_below);

/*
 * In the open write transaction: records that the generations below sequence `dropped_below` are
 * dropped by the window's rule (before their files go, and made durable first: a power loss may
 * then leave a file below it, never a hole above it), so that a generation file lost from the
 * oldest end can be told from a drop (genset_view_missing). A new store records 0. The caller
 * never moves it back, but for `rebuild`, which records where the generations it keeps begin.
 * STORE_OK, STORE_ERROR (no transaction), or LMDB's errors.
 */
int store_record_drop(store_t *st, uint64_t dropped_below);

/*
 * In the open write transaction: the next sequence becomes `next_seq` (at
 * least the current one; STORE_ERROR otherwise). For a window sealed into
 * generation files by other means than the young store, such as
 * ingestd-commit-bench --preload-sealed: its sequences must be behind the
 * store's before store_seal records them.
 */
int store_advance_seq(store_t *st, uint64_t next_seq);

/* Records that the log up to (not including) `next_offset` is applied. */
int store_set_applied(store_t *st, uint64_t next_offset);

int store_txn_commit(store_t *st);
void store_txn_abort(store_t *st);

/* Flushes everything committed to disk (mdb_env_sync, forced). STORE_OK or STORE_EIO. */
int store_flush(store_t *st);

/* Doubles the map size (no transaction may be open). STORE_OK, or STORE_ERROR / STORE_NOMEM
 * (LMDB refused the new size). */
int store_grow(store_t *st);

/* Callbacks of store_scan(); return 0 to go on, anything else to stop the scan with it. */
typedef int (*store_seq_fn)(void *arg, uint64_t seq, const uint8_t key[KEYHASH_LEN],
                            int64_t received_ms, uint64_t log_offset);
/* `seq_ok`: the key's sequence entry exists and names this key. */
typedef int (*store_key_fn)(void *arg, const uint8_t key[KEYHASH_LEN], uint64_t seq, bool seq_ok);

/*
 * Reads one consistent snapshot (one read transaction, held for the whole
 * scan: for operator tools, not the server): fills *info, then calls on_seq
 * for every sequence entry in order, then on_key for every key. Either
 * callback may be NULL. Returns STORE_OK, a store error, or what a callback
 * returned.
 */
int store_scan(store_t *st, store_info_t *info, store_seq_fn on_seq, store_key_fn on_key,
               void *arg);

/* One sequence entry: what `seq` holds for it. */
typedef struct store_entry {
    uint64_t seq;
    uint8_t key[KEYHASH_LEN];
    int64_t received_ms;
    uint64_t offset;
} store_entry_t;

/*
 * store_evict_pass with the size bound per source (window_judge_source):
 * pass.max_keys is each source's budget, `sources` the store's keys counted
 * by source (store_count_sources), kept up to date here as keys leave. A key
 * of a source within its budget, met while another source is over, is
 * carried: put again at the next sequence with its receivedAt and offset.
 * Carried keys count as steps. Inside the open write transaction.
 */
int store_evict_sources(store_t *st, window_pass_t pass, srcmap_t *sources, uint64_t *evicted_age,
                        uint64_t *evicted_size);

/* Counts the store's keys by source into `sources` (whose keys it zeroes first). In the open
 * write transaction, or a read transaction of its own. */
int store_count_sources(store_t *st, srcmap_t *sources);

/*
 * store_upsert at the exact sequence `seq`, which must be the one the open
 * transaction gives next (STORE_ERROR otherwise: the caller numbered its keys
 * from another state of the store). A checkpoint in one transaction; the
 * checkpointer itself uses the parts below (store_put_keys and the rest).
 */
int store_put_seq(store_t *st, const uint8_t key[KEYHASH_LEN], uint64_t seq, int64_t received_ms,
                  uint64_t log_offset);

/*
 * store_put_seq of n entries at once: entries[i].seq must be the open
 * transaction's next sequence plus i (STORE_ERROR otherwise, before anything
 * is written). The keys go into the tree in key order, which costs LMDB far
 * less than arrival order. STORE_NOMEM when the sort space cannot be had.
 * On any other error the transaction holds part of the entries: abort it.
 */
int store_put_entries(store_t *st, const store_entry_t *entries, size_t n);

/*
 * The same in parts, for a checkpoint spread over several transactions:
 *
 * store_key_order fills order[0..n) with the indices of entries in key order
 * (the order of LMDB's tree; stable, so of one key's entries the older comes
 * first). STORE_NOMEM when its sort space cannot be had.
 *
 * store_put_keys puts the `keys` entries of entries[order[i]], i < n (order
 * may be NULL: as they come), retiring an older entry of the same key with its
 * sequence entry. Consecutive slices of one key order touch disjoint ranges of
 * the tree, so each transaction writes only its own pages.
 *
 * store_append_seq then puts their sequence entries, numbered from the open
 * transaction's next sequence (STORE_ERROR otherwise, nothing written). Until
 * it has committed, the keys already put name sequences past the store's
 * next_seq: store_scan reports them as not named back, and a replay from the
 * applied offset, which numbers the same records again, makes them whole.
 */
int store_key_order(const store_entry_t *entries, size_t n, uint32_t *order);
int store_put_keys(store_t *st, const store_entry_t *entries, const uint32_t *order, size_t n);
int store_append_seq(store_t *st, const store_entry_t *entries, size_t n);

/*
 * A checkpoint's evictions in the same key-range transactions as its keys, so
 * that no leaf is written twice:
 *
 * store_read_front copies the oldest sequence entries below `below_seq`, at
 * most `max`, into out[0..*n), in sequence order; nothing is deleted. Inside
 * the open write transaction, or a read transaction of its own. The others
 * need the open write transaction.
 *
 * store_mark_evicting records, in the first transaction that deletes any of
 * their keys, that sequences below `below_seq` may have lost their keys ahead
 * of their sequence entries (store_info_t.evicting_below). A store opened
 * after a crash finishes that with store_evict_below(evicting_below), which
 * passes over keys already gone; store_scan's callers count such entries as
 * evictions in progress, not as damage.
 *
 * store_delete_keys deletes the `keys` entries of entries[order[i]], i < n
 * (order may be NULL): exactly the key with that sequence, so a newer entry
 * of the same key stays; one already gone is passed over. *deleted counts
 * the deletions.
 *
 * store_cut_front, in the last transaction, deletes the sequence entries
 * below `below_seq` from the front, leaving their keys alone (they are gone
 * already); *cut counts them.
 */
int store_read_front(store_t *st, uint64_t below_seq, store_entry_t *out, size_t max, size_t *n);
int store_mark_evicting(store_t *st, uint64_t below_seq);
/*
 * After a crash, before the replay: settles up to `max_steps` of the oldest
 * sequence entries below a checkpoint's eviction mark (`below_seq`). An entry
 * whose key no longer names it was evicted by a transaction that landed: the
 * entry goes. One whose key still names it was not (its slice, or the carry
 * that moves a within-budget key to the young end, was lost): the key stays in
 * the window, moved to the young end (*kept counts these). Never loses a key
 * a landed transaction did not delete, and leaves every entry naming its key.
 * *done: entries settled (fewer than max_steps: none left, and the mark is
 * cleared). Inside the open write transaction.
 */
int store_settle_evictions(store_t *st, uint64_t below_seq, size_t max_steps, size_t *done,
                           uint64_t *kept);
int store_delete_keys(store_t *st, const store_entry_t *entries, const uint32_t *order, size_t n,
                      uint64_t *deleted);
int store_cut_front(store_t *st, uint64_t below_seq, uint64_t *cut);

/*
 * A reader: one read transaction, on the latest commit when opened or
 * refreshed, kept (with its snapshot) until the next refresh. It may be used
 * by one thread at a time while another thread writes. It pins the pages of
 * its snapshot, so refresh it after every commit that matters. Freed with
 * store_reader_close(), before store_close().
 */
typedef struct store_reader store_reader_t;

int store_reader_open(store_t *st, store_reader_t **out);
void store_reader_close(store_reader_t *r);
/* Moves the reader to the latest commit. */
int store_reader_refresh(store_reader_t *r);
/*
 * store_grow while the reader is the process's only open transaction (the
 * caller makes sure no other thread has one): parks the reader, doubles the
 * map, and moves the reader to the latest commit.
 */
int store_reader_grow(store_reader_t *r);
/* *present when `key` is in the snapshot, with its sequence number in *seq (may be NULL). */
int store_reader_find(store_reader_t *r, const uint8_t key[KEYHASH_LEN], bool *present,
                      uint64_t *seq);
/* The first sequence entry at or after `from` in the snapshot: *found, and *e when found. */
int store_reader_first_from(store_reader_t *r, uint64_t from, bool *found, store_entry_t *e);
/* Calls fn on every sequence entry of the snapshot in [from, below), in order; a status other
 * than STORE_OK from fn stops the walk and is returned. */
typedef int (*store_entry_fn)(void *arg, const store_entry_t *e);
int store_reader_each(store_reader_t *r, uint64_t from, uint64_t below, store_entry_fn fn,
                      void *arg);
/* store_get_info of the snapshot. */
int store_reader_info(store_reader_t *r, store_info_t *info);
/* *present when `key` is in the snapshot, with its whole sequence entry in *e (lookups). */
int store_reader_entry(store_reader_t *r, const uint8_t key[KEYHASH_LEN], bool *present,
                       store_entry_t *e);

/*
 * Writes a compacted copy of the environment into the existing directory
 * `dir`, durably: the file is fsynced and so is `dir` (its entry). STORE_OK,
 * STORE_EIO when a sync fails, or LMDB's error of the copy.
 */
int store_copy(store_t *st, const char *dir);

/* Clears stale reader slots left by dead processes; *cleared gets their number. */
int store_reader_check(store_t *st, int *cleared);

const char *store_strerror(int status);

/* LMDB's own message for the last error of this store (static string). */
const char *store_detail(const store_t *st);

#endif
