/* seal: moves the young store's keys into a generation file, and keeps the generations to the
 * window's rule (docs/window.md). */
#ifndef INGESTD_SEAL_H
#define INGESTD_SEAL_H

#include <stdbool.h>
#include <stdint.h>

#include "storage/window/genset.h"
#include "storage/window/store.h"

/*
 * Everything here runs on the one thread that writes LMDB (the
 * checkpointer, or commit_open before any thread starts), with no write
 * transaction open. Statuses are store.h's (a generation file's failure is
 * translated: GEN_EIO -> STORE_EIO, GEN_CORRUPT -> STORE_CORRUPT, ...).
 */

/*
 * Seals the young store: every key it holds goes, in key order, into one
 * generation covering the sequences from the newest generation's end (or
 * the store's sealed bound) to the store's next sequence; the file is made
 * durable and added to `gs` (so lookups through a new view find it) before
 * one LMDB transaction empties the young store (store_seal). The store is
 * flushed first (store_flush), so the file never names a commit a power loss
 * could undo. *sealed gets the
 * number of keys (0: the store was empty, nothing done). STORE_BUSY, with
 * nothing done, while the young store is not whole (a checkpoint cut short
 * by a crash, which the log replay is still renumbering): seal later. On
 * failure nothing changed but a leftover file that genset_open or the next
 * seal removes. Store statuses: STORE_OK, STORE_BUSY, the store's read and
 * write errors (store.h), STORE_EIO / STORE_NOMEM / STORE_CORRUPT for the
 * generation's (GEN_*) errors.
 */
int seal_young(store_t *st, genset_t *gs, unsigned bits_per_key, uint64_t *sealed);

/* What seal_recover repaired (for the caller to log and count). */
typedef struct seal_recovery {
    bool finished;      /* a seal was finished: the store now records generations to end_seq */
    bool rebased;       /* of it: the store's next sequence was behind end_seq (its last
                           commits undone by a power loss after a seal that wrote its file
                           first, as ingestd did before seals made the store durable first);
                           the store was moved on to end_seq and the log replays what it lost */
    uint64_t end_seq;   /* the newest generation's end (when finished) */
    uint64_t lost_from; /* when rebased: the store's next sequence before */
} seal_recovery_t;

/*
 * At open, before the log replay: a crash between a seal's file and its LMDB
 * transaction leaves the newest generation past the store's sealed bound,
 * with the same keys in both; this finishes the seal (durably) and says so in
 * *out. Never refuses a generation past the store's next sequence: see
 * `rebased`. Store statuses.
 */
int seal_recover(store_t *st, genset_t *gs, seal_recovery_t *out);

/* What seal_maintain did. */
typedef struct seal_result {
    uint64_t dropped_age, dropped_size; /* keys in the generations dropped, by reason */
} seal_result_t;

/*
 * Applies genset_plan's drops (whatever p's fanin: it never rewrites a
 * generation, which is the merger's alone, storage/window/merger.h). `young_keys`:
 * the keys not sealed yet. Before any file goes, records in `st` (a transaction of its own,
 * then flushed) the sequence below which generations are dropped (store_record_drop), so that
 * a lost file is never taken for a drop. Store statuses; on a failure before the drop, nothing
 * is dropped.
 */
int seal_maintain(store_t *st, genset_t *gs, const genset_policy_t *p, int64_t now_ms,
                  uint64_t young_keys, seal_result_t *out);

#endif
