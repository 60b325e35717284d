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
 * Threading: one thread owns an engine (every call below, but where a call says otherwise);
 * the merger thread rewrites its generations through the set handed to it. Statuses are store.h's
 * (STORE_*); gen.h statuses are translated (GEN_NOMEM: STORE_NOMEM, others: STORE_CORRUPT at open,
 * STORE_EIO after). Never logs: what the caller may want to log comes back in out-parameters.
 */
typedef struct window_engine window_engine_t;

/*
 * What a window did since it was first opened. An owner that re-opens its window (the single
 * node, after a storage failure) keeps these across engines (options.counts); the fields are
 * updated and read with relaxed atomics, so window_engine_stats may run on another thread
 * than the one that seals.
 */
typedef struct window_counts {
    uint64_t evicted_age, evicted_size; /* keys evicted by batches and by dropped generations */
    uint64_t seals;                     /* young stores sealed into a generation */
    uint64_t merges;                    /* rewrites by the merger, of engines since closed */
    /* what each open repaired after a crash: seals finished (of which rebased), files removed */
    uint64_t seals_finished, seals_rebased, files_cleaned;
} window_counts_t;

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
    /* The counts to keep (borrowed; outlives the engine), or NULL: the engine's own. */
    window_counts_t *counts;
} window_engine_options_t;

/* What opening found and repaired, for the caller to log. */
typedef struct window_engine_opened {
    int gen_rc;               /* the generations' gen.h status when they failed to open */
    seal_recovery_t recovery; /* a seal a crash cut short, finished (seal_recover) */
    uint64_t files_cleaned;   /* generation files a crash left, removed */
    bool gens_missing;        /* a generation file is lost (genset_view_missing): its keys */
    gen_id_t missing;         /* are forgotten; the first such range of sequences */
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

/* What window_engine_maintain is asked to do. */
typedef struct window_maintain {
    int64_t now_ms;
    int64_t every_ms; /* drops at most this often, unless a seal was done; 0: each call */
    uint64_t seal_at; /* seals once the young store holds this many keys; 0: young_keys */
    /*
     * The per-source counts and the view are left to the caller: the single node, whose
     * checkpointer thread seals between its writer's batches, recounts its sources after a
     * seal (with the keys it holds in memory) and takes the view (window_engine_take_view)
     * on its writer's thread once its own LMDB snapshot has moved.
     */
    bool caller_keeps_view;
} window_maintain_t;

/* What it did: keys sealed into a generation (0: no seal), keys of the generations dropped. */
typedef struct window_maintained {
    uint64_t sealed, dropped_age, dropped_size;
} window_maintained_t;

/*
 * Between batches (no txn open): seals a full young store (when the window seals:
 * genset_seals), then drops generations as the rule says, and after either asks the merger
 * to merge. Seals and dropped keys are counted (window_counts_t: a dropped generation's keys
 * are evictions, by age or by size). A young store not whole yet (STORE_BUSY from the seal)
 * is sealed a later time. The window stays whole on failure (seal.h): try again later. *out
 * filled either way (NULL: not wanted).
 */
int window_engine_maintain(window_engine_t *e, const window_maintain_t *m,
                           window_maintained_t *out);
/* When the engine last kept its generations to the rule (window_engine_maintain's now_ms). */
int64_t window_engine_maintained(const window_engine_t *e);

/* Where the key is: the young store's snapshot, then the generations: *found, *entry, and
 * the receivedAt of the window's oldest key (*oldest_ms, 0 when empty). Any time between
 * batches. */
int window_engine_lookup(const window_engine_t *e, const uint8_t key[KEYHASH_LEN], bool *found,
                         store_entry_t *entry, int64_t *oldest_ms);

/* Its per-source counts of the young store and its generations' view, borrowed until the
 * next call on the engine. */
const srcmap_t *window_engine_sources(const window_engine_t *e);
const genset_view_t *window_engine_view(const window_engine_t *e);

/*
 * Each source's part of the window into out, in the order the young part first saw them
 * (then the generations' by tag): the young part's keys and evictions, with what the
 * generations keep of it and the newest key they cut (genset_set_budget). out needs room for
 * window_engine_sources_room entries; returns how many it filled. The newest cut key is kept
 * in the per-source counts too, which outlive the generations' view (and, when the owner
 * keeps them, the engine). On the thread that takes the view.
 */
size_t window_engine_sources_room(const window_engine_t *e);
size_t window_engine_tally_sources(window_engine_t *e, window_source_t *out);

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
 * window_engine_merges: rewrites the merger published for this window (and the counts'
 * merges); any thread.
 */
genset_t *window_engine_gens(window_engine_t *e);
void window_engine_take_view(window_engine_t *e);
void window_engine_kick(window_engine_t *e);
uint64_t window_engine_merges(const window_engine_t *e);

/*
 * What the window holds and did (stats.h), all but floor_ms and below_floor (the single
 * node's). `skip_young`: the young store is not read (a batch's txn is open on it, or another
 * thread writes it): keys and the oldest key are then the generations' only, for an owner
 * that knows its young part better (the single node's writer counts keys not yet in LMDB).
 * On the thread that takes the view; the counts it reads may be written by another.
 */
void window_engine_stats(const window_engine_t *e, bool skip_young, window_stats_t *out);

#endif
