/* worker_merge: the Kafka worker's merger thread, which merges every partition's generations
 * off the consuming thread. */
#ifndef INGESTD_CLUSTER_WORKER_MERGE_H
#define INGESTD_CLUSTER_WORKER_MERGE_H

#include <stdint.h>

#include "storage/genset.h"

/*
 * One thread for all partitions of a worker. The consuming thread seals and
 * drops (genset_plan with fanin 0) between batches and kicks the merger,
 * which plans on its own view of that partition's set and merges while the
 * rule asks for a merge, one merge per turn so that no partition waits for
 * another's whole backlog. The set takes the consuming thread's seals and
 * drops meanwhile (genset.h): a merge whose input was dropped publishes
 * nothing (GEN_CHANGED: plan again), a seal added meanwhile stays. A view
 * the consuming thread holds keeps every key it had: a merge publishes a new
 * view and leaves the old one's generations open until it is released.
 *
 * Threading: every function but the counters is for the one thread that
 * owns the partitions (the consuming thread, or whoever frees the worker).
 */

typedef struct worker_merger worker_merger_t;
typedef struct worker_merge_part worker_merge_part_t;

/* A merge failed: `partition`, the gen.h status, the generations it would have merged. Called
 * on the merger thread. */
typedef void (*worker_merge_fail_fn)(void *arg, int32_t partition, int rc, size_t n);

/*
 * Starts the merger thread with the window's rule `p` (genset_policy_for; its
 * fanin and sizes say what to merge). `fail` (may be NULL) hears failures;
 * the merge is tried again at the next kick. *out freed with
 * worker_merger_free(). 0, or an errno value (nothing started).
 */
int worker_merger_new(const genset_policy_t *p, worker_merge_fail_fn fail, void *fail_arg,
                      worker_merger_t **out);

/*
 * Cancels a merge under way (gen_merge looks every 64 Ki keys) and joins
 * the thread. Every partition must have been removed first. NULL: no-op.
 */
void worker_merger_free(worker_merger_t *m);

/*
 * Gives the merger partition `partition`'s set `gs` (borrowed until
 * worker_merger_remove returns) and asks for a first look at it: what the
 * last run left to merge. *out is the partition's handle. 0 or ENOMEM.
 */
int worker_merger_add(worker_merger_t *m, int32_t partition, genset_t *gs,
                      worker_merge_part_t **out);

/* Asks the merger to look at this partition's set again (after a seal or a drop). */
void worker_merger_kick(worker_merge_part_t *mp);

/*
 * Takes the partition back: cancels its merge under way, if any, and waits
 * for the merger to let go of the set (a cancelled merge ends within one
 * 64 Ki-key step and leaves no file). After it returns the set may be
 * closed. Frees mp. NULL: no-op.
 */
void worker_merger_remove(worker_merge_part_t *mp);

/* Merges published for this partition so far. Any thread. */
uint64_t worker_merger_merges(const worker_merge_part_t *mp);

#endif
