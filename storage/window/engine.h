/* engine: one de-duplication window behind one interface: the young LMDB store, its sealed
 * generations, the seal, the merger hand-off, per-source counts, and one stats struct. */
#ifndef INGESTD_WINDOW_ENGINE_H
#define INGESTD_WINDOW_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "storage/window/genset.h"
#include "storage/window/keyhash.h"
#include "storage/window/merger.h"
#include "storage/window/rule.h"
#include "storage/window/seal.h"
#include "storage/window/srcmap.h"
#include "storage/window/stats.h"
#include "storage/window/store.h"

/*
 * DESIGN. A window is a young LMDB store (store.h) whose full contents are sealed into
 * immutable generation files in DIR/gens (gen.h, genset.h, seal.h); a merger thread rewrites
 * small generations (merger.h); each source's keys are counted, because --max-keys is a
 * budget per source (srcmap.h). The engine wires those pieces once: it opens them in the
 * order a crash needs (the store, then the generations, then a seal a crash cut short is
 * finished), keeps them to the window's rule between batches, answers whether a key is
 * sealed, and counts what the window did into one window_stats_t (stats.h).
 *
 * A batch is written through the young store itself (window_engine_store: begin, insert,
 * set_applied, grow stay the store's), with the evictions and the commit or abort through
 * the engine, which keeps the per-source counts and the eviction counters true to what
 * committed.
 *
 * Threading: one thread owns an engine (every call below); the merger thread rewrites its
 * generations through the set handed to it. Statuses are store.h's (STORE_*); gen.h
 * statuses are translated (GEN_NOMEM: STORE_NOMEM, others: STORE_CORRUPT at open, STORE_EIO
 * after). Never logs: what the caller may want to log comes back in out-parameters.
 */
typedef struct window_engine window_engine_t;

typedef struct window_engine_options {
    int64_t window_ms;
    uint64_t max_keys;   /* per source; 0: none */
    uint64_t young_keys; /* keys of the young store before it is sealed; 0: GENSET_YOUNG_KEYS */
    merger_t *merger;    /* merges the generations (borrowed; outlives the engine) */
    int32_t merger_id;   /* the engine's name with the merger (its failure callback's) */
    /* The per-source counts to keep (borrowed; outlives the engine), or NULL: the engine's own.
     * The single node re-opens its window after a failure and its sources' eviction counts
     * must outlast that, so they live with it, not with one engine. */
    srcmap_t *sources;
} window_engine_options_t;

/* What opening found and repaired, for the caller to log. */
typedef struct window_engine_opened {
    int gen_rc;               /* the generations' gen.h status when they failed to open */
    seal_recovery_t recovery; /* a seal a crash cut short, finished (seal_recover) */
    uint64_t files_cleaned;   /* generation files a crash left, removed */
} window_engine_opened_t;

/*
 * Opens the window of the young store `st` (taken: closed by window_engine_close, or here on
 * failure) whose directory is `dir`: the generations in DIR/gens, a seal a crash cut short
 * finished, the set handed to the merger, the store's keys counted by source. *out on
 * STORE_OK; *opened filled either way (as far as it got).
 */
int window_engine_open(store_t *st, const char *dir, const window_engine_options_t *o,
                       window_engine_t **out, window_engine_opened_t *opened);

/* Cancels its merge, closes the store (aborting an open txn) and the generations. NULL:
 * no-op. */
void window_engine_close(window_engine_t *e);

/* The young store, borrowed until window_engine_close: a batch's writes go to it. */
store_t *window_engine_store(window_engine_t *e);

/* Whether a sealed generation holds key: *found, and *owner its offset (0 when not). */
int window_engine_find_sealed(const window_engine_t *e, const uint8_t key[KEYHASH_LEN], bool *found,
                              uint64_t *owner);

/* A key the young store took in the open batch: counted to its source. STORE_NOMEM. */
int window_engine_added(window_engine_t *e, const uint8_t key[KEYHASH_LEN]);

/* One eviction pass of the open batch (store_evict_sources), counted when it commits. */
int window_engine_evict(window_engine_t *e, window_pass_t pass);

/* Commits the open batch's write txn (store_txn_commit) and counts its evictions. On failure the
 * batch is gone; the per-source counts keep its keys until the next seal or abort recounts. */
int window_engine_commit(window_engine_t *e);

/* The open batch aborted, if any (store_txn_abort): its keys and evictions uncounted. */
void window_engine_abort(window_engine_t *e);

/*
 * Between batches (no txn open): seals a full young store, then drops generations as the
 * rule says, at most every `every_ms` unless a seal was done, and after either asks the
 * merger to merge. The window stays whole on failure (seal.h): try again later.
 */
int window_engine_maintain(window_engine_t *e, int64_t now_ms, int64_t every_ms);
/* When the engine last kept its generations to the rule (window_engine_maintain's now_ms). */
int64_t window_engine_maintained(const window_engine_t *e);

/* Where the key is: the young store's snapshot, then the generations: *found, *entry, and
 * the receivedAt of the window's oldest key (*oldest_ms, 0 when empty). Any time between
 * batches. */
int window_engine_lookup(const window_engine_t *e, const uint8_t key[KEYHASH_LEN], bool *found,
                         store_entry_t *entry, int64_t *oldest_ms);

/* Its per-source counts of the young store and its generations' view, borrowed until the
 * next call on the engine (for tallies across windows). */
const srcmap_t *window_engine_sources(const window_engine_t *e);
const genset_view_t *window_engine_view(const window_engine_t *e);

/*
 * For the single node, whose window is read and written by more than its owner thread: its
 * writer keeps its own LMDB snapshot and must take the generations' view only after each move
 * of it (a seal publishes its generation before it empties the young store), its submitter
 * threads probe the set, and its checkpointer thread seals and drops between the writer's
 * batches. The worker needs none of these: window_engine_maintain does all on one thread.
 *
 * window_engine_gens: the set, borrowed until window_engine_close (seal.h, genset.h).
 * window_engine_take_view: window_engine_view becomes the set's current view (the one it
 * returned before is released).
 * window_engine_kick: asks the merger to look again, after a seal or a drop made outside
 * window_engine_maintain.
 * window_engine_merges: rewrites the merger published for this window; any thread.
 */
genset_t *window_engine_gens(window_engine_t *e);
void window_engine_take_view(window_engine_t *e);
void window_engine_kick(window_engine_t *e);
uint64_t window_engine_merges(const window_engine_t *e);

/* What the window holds and did (stats.h). `txn_open`: the store's info is not read while a
 * batch's txn is open (keys then count the generations only). */
void window_engine_stats(const window_engine_t *e, bool txn_open, window_stats_t *out);

#endif
