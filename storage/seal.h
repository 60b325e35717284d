/* seal: moves the young store's keys into a generation file, and keeps the generations to the
 * window's rule (docs/window.md). */
#ifndef INGESTD_SEAL_H
#define INGESTD_SEAL_H

#include <stdint.h>

#include "storage/genset.h"
#include "storage/store.h"

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
 * one LMDB transaction empties the young store (store_seal). *sealed gets the
 * number of keys (0: the store was empty, nothing done). STORE_BUSY, with
 * nothing done, while the young store is not whole (a checkpoint cut short
 * by a crash, which the log replay is still renumbering): seal later. On
 * failure nothing changed but a leftover file that genset_open or the next
 * seal removes.
 */
int seal_young(store_t *st, genset_t *gs, unsigned bits_per_key, uint64_t *sealed);

/*
 * At open, before the log replay: a crash between a seal's file and its LMDB
 * transaction leaves the newest generation past the store's sealed bound,
 * with the same keys in both; this finishes the seal. STORE_CORRUPT when a
 * generation lies past the store's next sequence (the store is not the one
 * the generations were sealed from).
 */
int seal_recover(store_t *st, genset_t *gs);

/* What seal_maintain did. */
typedef struct seal_result {
    uint64_t dropped_age, dropped_size; /* keys in the generations dropped, by reason */
    unsigned merges;                    /* merges done */
} seal_result_t;

/*
 * Applies genset_plan: drops what it says and then at most one merge (a
 * merge is one sequential pass over its inputs; one per call bounds the
 * time a caller spends here). `young_keys`: the keys not sealed yet.
 */
int seal_maintain(genset_t *gs, const genset_policy_t *p, int64_t now_ms, uint64_t young_keys,
                  seal_result_t *out);

#endif
