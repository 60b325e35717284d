/* merger: the one owner of generation rewrites (merges, merges of one), on a thread of its own,
 * for every set of generations of a process: the single node's one, or each Kafka partition's. */
#ifndef INGESTD_MERGER_H
#define INGESTD_MERGER_H

#include <stdint.h>

#include "storage/window/genset.h"

/*
 * Why one owner: a rewrite takes seconds at 100M keys, so it runs off the
 * thread that seals (the checkpointer, the worker's consuming thread); and a
 * generation rewritten by two threads at once was lost when the loser removed
 * what the winner had published. So the threads that seal only seal and drop
 * (genset_plan with fanin 0 plans no rewrite) and kick the merger, which
 * plans on its own view of each set and rewrites while the rule asks for it,
 * one rewrite per turn, so that no set waits for another's whole backlog.
 * A set takes seals and drops meanwhile (genset.h): a rewrite whose input was
 * dropped publishes nothing (GEN_CHANGED: plan again), a seal added meanwhile
 * stays. A view held elsewhere keeps every key it had: a rewrite publishes a
 * new view and leaves the old one's generations open until it is released.
 *
 * Threading: merger_new, _free, _add, _remove and _kick belong to the thread
 * that owns the sets (it adds and removes them); merger_merges and the
 * failure callback may run on any thread.
 */

typedef struct merger merger_t;
typedef struct merger_set merger_set_t;

/* A rewrite failed: the set's `id` (as given to merger_add), the gen.h status, and how many
 * generations it would have merged. Called on the merger thread; it is tried again at the next
 * kick, and the window stays whole meanwhile. */
typedef void (*merger_fail_fn)(void *arg, int32_t id, int rc, size_t n);

/*
 * Starts the merger thread with the window's rule `p` (genset_policy_for; its
 * fanin and sizes say what to merge). `fail` (may be NULL) hears failures.
 * *out freed with merger_free(). 0, or an errno value (nothing started).
 */
int merger_new(const genset_policy_t *p, merger_fail_fn fail, void *fail_arg, merger_t **out);

/*
 * Cancels a rewrite under way (gen_merge looks every 64 Ki keys) and joins
 * the thread. Every set must have been removed first. NULL: no-op.
 */
void merger_free(merger_t *m);

/*
 * Gives the merger the set `gs` (borrowed until merger_remove returns), named
 * `id` in failure reports, and asks for a first look at it: what the last run
 * left to rewrite. *out is the set's handle. 0 or ENOMEM.
 */
int merger_add(merger_t *m, int32_t id, genset_t *gs, merger_set_t **out);

/* Asks the merger to look at this set again (after a seal or a drop). */
void merger_kick(merger_set_t *ms);

/*
 * Takes the set back: cancels its rewrite under way, if any, and waits for
 * the merger to let go of it (a cancelled rewrite ends within one 64 Ki-key
 * step and leaves no file). After it returns the set may be closed. Frees ms.
 * NULL: no-op.
 */
void merger_remove(merger_set_t *ms);

/* Rewrites published for this set so far (NULL: 0). Any thread. */
uint64_t merger_merges(const merger_set_t *ms);

#endif
