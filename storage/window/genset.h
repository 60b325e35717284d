/* genset: the sealed generations of one window (storage/window/gen.h): snapshots for lookups, and
 * the rule that says which to drop and which to merge. */
#ifndef INGESTD_GENSET_H
#define INGESTD_GENSET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/window/gen.h"

/*
 * The set lives in one directory of generation files. Their sequence ranges
 * never overlap except as a merge leaves them: genset_open removes a file
 * whose range lies inside another's (an input of a merge cut short by a
 * crash) and any unfinished ".tmp" file; a partial overlap is corruption.
 *
 * Threading: lookups go through a view, an immutable snapshot of the set
 * taken with genset_view() and given back with genset_view_release(); any
 * thread may hold views and look up in them while one other thread changes
 * the set (genset_add, genset_drop_oldest, genset_merge). Each change
 * publishes a new view; a generation's file is removed from the directory at
 * once, its descriptor closed when the last view holding it is released.
 * Status codes are gen.h's.
 */

/* The young store's default size before its keys are sealed into a generation (docs/window.md). */
#define GENSET_YOUNG_KEYS (1u << 20)

typedef struct genset genset_t;
typedef struct genset_view genset_view_t;

/*
 * Opens (creating it when missing) the directory `dir` and every generation
 * in it, cleaning up after a crash as above. New generations get
 * `bits_per_key` filter bits (0: GEN_BLOOM_BITS). *out freed with
 * genset_close() once every view is released. Returns GEN_OK, or GEN_EIO
 * (listing, creating or cleaning the directory), GEN_NOMEM, or gen_open's
 * errors for a file that is not whole (GEN_CORRUPT, GEN_VERSION); *out is
 * then NULL.
 */
int genset_open(const char *dir, unsigned bits_per_key, genset_t **out);

/*
 * For tools beside a running server (`ingestd check`, `backup`): changes
 * nothing on disk (covered files are passed over, not removed; a missing
 * directory is an empty set) and looks again when a file goes between the
 * listing and its open. Not for genset_add and the other changes. Errors as
 * genset_open's.
 */
int genset_open_read_only(const char *dir, genset_t **out);
void genset_close(genset_t *gs);

/* How many files genset_open removed (unfinished ".tmp" files, merge inputs a covering file
 * replaced): what a crash left, for the caller to log and count. */
uint64_t genset_cleaned(const genset_t *gs);

/* The directory (valid until genset_close) and the filter bits new generations get. */
const char *genset_dir(const genset_t *gs);
unsigned genset_bits_per_key(const genset_t *gs);

/* The current view; never NULL. Give it back with genset_view_release (NULL: no-op). */
genset_view_t *genset_view(genset_t *gs);
void genset_view_release(genset_view_t *v);

/* Generations in the view, oldest first: count, and the i-th (valid while the view is held). */
size_t genset_view_count(const genset_view_t *v);
const gen_t *genset_view_gen(const genset_view_t *v, size_t i);

/* Totals of the view. */
typedef struct genset_totals {
    uint64_t keys;     /* in the window: every key but those cut (genset_set_budget) */
    uint64_t cut_keys; /* still on disk, out of the window: their source's budget cut them */
    uint64_t file_bytes;
    uint64_t memory_bytes;
    int64_t oldest_received_ms; /* of the oldest key in the oldest generation; 0 when empty */
    uint64_t oldest_offset;     /* of the oldest generation's first record; 0 when empty */
    uint64_t end_seq;           /* the newest generation's end; 0 when empty */
} genset_totals_t;

void genset_view_totals(const genset_view_t *v, genset_totals_t *out);

/*
 * Generations are contiguous: a seal starts where the newest one ends (or at the store's sealed
 * bound when there is none), a merge covers its adjacent inputs' ranges, a rewrite keeps its
 * range, and drops take the oldest, recorded first (store_record_drop). So a range missing
 * between the store's `dropped_below` and the oldest generation, between two generations, or
 * between the newest and the store's `sealed_below`, is a lost file (its keys are forgotten),
 * never the window's doing. True, with the first such range in *missing, when there is one.
 * `dropped_below` UINT64_MAX (store.h's STORE_DROPS_UNKNOWN: a store made before drops were
 * recorded): the oldest end is not judged, as a drop and a loss there look alike.
 */
bool genset_view_missing(const genset_view_t *v, uint64_t dropped_below, uint64_t sealed_below,
                         gen_id_t *missing);

/*
 * Per-source budgets (docs/window.md): every key carries its source's tag
 * (keyhash_source). With a budget of N keys per source, each view cuts, per
 * source, the generations older than the one where its newest N keys are
 * reached: that source's keys there are out of the window. Lookups pass
 * them over, merges leave them out, genset_plan drops a generation cut for
 * every source in it and rewrites one mostly cut. So one source's flood
 * ages out only its own keys, while the files stay shared. Sets the budget
 * (0: none, the default) and publishes a view under it. GEN_OK or GEN_NOMEM.
 */
int genset_set_budget(genset_t *gs, uint64_t budget);

/* One source of a view: its keys in the window and out of it (cut, still on disk), and the
 * newest receivedAt any view of this open set cut (0: none). */
typedef struct genset_source {
    uint32_t tag;
    uint64_t keys, cut_keys;
    int64_t forgot_ms;
} genset_source_t;

/* The view's sources, by tag ascending (valid while the view is held); returns how many. */
size_t genset_view_sources(const genset_view_t *v, const genset_source_t **out);

/* Looks `key` up, newest generation first, among those its source's budget keeps. *found, and
 * *e (may be NULL) when found. GEN_OK, or gen_find's errors (GEN_EIO, GEN_CORRUPT); the
 * _after and _many forms below too. */
int genset_view_find(const genset_view_t *v, const uint8_t key[KEYHASH_LEN], bool *found,
                     gen_entry_t *e);

/*
 * The filters alone, for keys[0..n), prefetched as genset_view_find_many
 * does: maybe[i] false means no generation of v holds keys[i]. Returns the
 * newest generation's end (0 when empty): a key sealed after v lies in a
 * generation whose range ends past it, whatever merges come meanwhile (a
 * merge's range ends where its newest input's did), so a later lookup of a
 * key found nowhere here need only ask genset_view_find_after(that end).
 * Touches no file: cheap enough for the threads that submit requests.
 */
uint64_t genset_view_probe_many(const genset_view_t *v, const uint8_t (*keys)[KEYHASH_LEN],
                                size_t n, bool *maybe);

/* genset_view_find among the generations whose range ends past `after` only. */
int genset_view_find_after(const genset_view_t *v, const uint8_t key[KEYHASH_LEN], uint64_t after,
                           bool *found, gen_entry_t *e);

/*
 * genset_view_find for keys[0..n), found[i] and (when e is not NULL) e[i] for
 * each. Faster than n calls: it loads the filter blocks of keys ahead while it
 * tests the current one, so the memory waits overlap.
 */
int genset_view_find_many(const genset_view_t *v, const uint8_t (*keys)[KEYHASH_LEN], size_t n,
                          bool *found, gen_entry_t *e);

/*
 * Changes, from any thread; they are made one at a time. genset_add takes
 * `g` (a generation just written into genset_dir) as the newest; its range
 * must start at or after the newest one's end (GEN_INVALID otherwise, and
 * `g` stays the caller's). genset_drop_oldest drops the `n` oldest
 * generations of `v` (the view the caller planned on) that the set still
 * holds; one a merge took in meanwhile stays, whole. genset_merge merges the
 * `n` adjacent generations of `v` from index `first` (oldest first) into one
 * covering their ranges, writing it without holding up other changes or
 * lookups, then publishes it in their place and removes them; when one of
 * them left the set meanwhile, GEN_CHANGED and nothing changed: the output was written under
 * a temporary name (gen_merge) and is named only under the set's lock, once its inputs are
 * known to be in it, so a stale merge never replaces or removes a published file. A merge
 * leaves out the keys v's budget cut (n may be 1 for a generation with such keys, to shed
 * them: a merge of one, whose output replaces its input's file under the same name).
 * `cancel` as in gen_merge (may be NULL). Each publishes a new view.
 * Returns GEN_OK, or GEN_INVALID (genset_add, above; bad indexes), GEN_NOMEM,
 * GEN_EIO (removing a file or syncing the directory: the view is published,
 * the file may come back after a power loss, which holds every key as well),
 * and for genset_merge GEN_CHANGED, GEN_CANCELLED and gen_merge's errors.
 *
 * Rewrites (genset_merge) have one owner per set, the merger (storage/window/merger.h): two
 * concurrent merges of one set would each be safe, but would duplicate the work.
 */
int genset_add(genset_t *gs, gen_t *g);
int genset_drop_oldest(genset_t *gs, const genset_view_t *v, size_t n);
int genset_merge(genset_t *gs, const genset_view_t *v, size_t first, size_t n,
                 const atomic_bool *cancel);

/*
 * The window's rule for whole generations, stated once:
 *   - by age: a generation goes once its newest key is older than the window,
 *     so every key is kept at least `window_ms`;
 *   - by size, per source (genset_set_budget; max_keys > 0 turns it on): the
 *     oldest goes once every source in it has cut it, so each source keeps
 *     at least its budget, and at most one generation of its own more; a
 *     generation at least half cut is rewritten without the cut keys (a
 *     merge of one); with `unsealed`, the shared rule above instead;
 *   - merges: a generation smaller than 3/4 of the target (the whole
 *     window's keys divided by `target_count`, at least `merge_min_keys`) is
 *     merged with its neighbours, `fanin` at a time, oldest first, so a
 *     lookup passes a bounded number of filters (about 4/3 target_count
 *     large ones) and a generation ages out within about 1/target_count of
 *     the window; the quarter's slack keeps a window that grows past a
 *     multiple of the target from merging every generation it has.
 */
typedef struct genset_policy {
    int64_t window_ms;
    uint64_t max_keys;
    /* Sealing is off (genset_seals false): the young store alone holds each source's budget,
     * and generations sealed before go, oldest first, while the keys after them and the young
     * store's still number max_keys (the shared rule; a generation's sources are not asked) */
    bool unsealed;
    uint64_t merge_min_keys;
    size_t target_count;
    size_t fanin;
} genset_policy_t;

/* genset_plan with fanin 0 plans drops only, never a rewrite: how the threads that seal plan
 * (the checkpointer, the Kafka worker's consuming thread), leaving rewrites to the merger. */
typedef struct genset_plan {
    size_t drop_age, drop_size;  /* oldest generations to drop, by reason (age ones first) */
    size_t merge_first, merge_n; /* after the drops are done: merge_n (0: none) from index
                                    merge_first of the view as it will then be */
} genset_plan_t;

void genset_plan(const genset_view_t *v, const genset_policy_t *p, int64_t now_ms,
                 uint64_t young_keys, genset_plan_t *out);

/*
 * The policy every user of generations applies (the single-node commit and
 * each Kafka worker partition): the window's bounds, merges towards 16
 * generations, 4 at a time, none smaller than the young store's
 * `young_keys`. And whether keys are sealed at all: without a size bound, or
 * with one above young_keys (at or under it the young store alone holds the
 * window and evicts key by key, exactly).
 */
genset_policy_t genset_policy_for(int64_t window_ms, uint64_t max_keys, uint64_t young_keys);
bool genset_seals(uint64_t max_keys, uint64_t young_keys);

#endif
