/*
 * commit/merge.c: the single node's use of the merger (storage/window/merger.h), the
 * one owner of generation rewrites, for its one set of generations.
 *
 * DESIGN. The checkpointer only seals and drops (seal_maintain never rewrites)
 * and kicks the merger, which plans on its own view and rewrites (merges, and
 * merges of one that shed the keys per-source budgets cut) until the rule asks
 * for no more. Re-establishing storage closes the set and opens it again, so
 * it takes the set back from the merger first (commit_merge_settle, which
 * cancels a rewrite under way and waits for it to end) and gives the new one
 * after (commit_merge_resume). c->merge_set changes only there, on the writer
 * thread, under mu, while the checkpointer is idle.
 *
 * Functions, in order: on_merge_fail, set_add, commit_merge_start / _stop /
 * _kick / _settle / _resume / _count.
 */
#include <string.h>

#include "storage/commit/internal.h"

/* On the merger thread: the window stays whole; the rewrite is tried after the next kick. */
static void on_merge_fail(void *arg, int32_t id, int rc, size_t n)
{
    (void)id;
    commit_notify(arg, 1,
                  "merging %zu generation(s) failed: %s; the window stays whole, and the merge "
                  "is tried again after the next checkpoint",
                  n, gen_strerror(rc));
}

/* Gives the merger the set now open, if any. Under mu. */
static int set_add(commit_t *c)
{
    if (!c->merger || !c->gens)
        return 0;
    return merger_add(c->merger, 0, c->gens, &c->merge_set);
}

int commit_merge_start(commit_t *c, char *errbuf, size_t errlen)
{
    genset_policy_t p = commit_view_gen_policy(c);
    int rc = merger_new(&p, on_merge_fail, c, &c->merger);
    if (rc == 0) {
        pthread_mutex_lock(&c->mu);
        rc = set_add(c);
        pthread_mutex_unlock(&c->mu);
    }
    if (rc != 0) {
        errbuf_printf(errbuf, errlen, "starting the merger thread: %s", strerror(rc));
        return -1;
    }
    return 0;
}

void commit_merge_stop(commit_t *c)
{
    commit_merge_settle(c);
    merger_free(c->merger);
    c->merger = NULL;
}

void commit_merge_kick(commit_t *c)
{
    if (c->merge_set)
        merger_kick(c->merge_set);
}

void commit_merge_settle(commit_t *c)
{
    pthread_mutex_lock(&c->mu);
    merger_set_t *ms = c->merge_set;
    c->merge_set = NULL;
    c->merges_before += merger_merges(ms);
    pthread_mutex_unlock(&c->mu);
    merger_remove(ms); /* waits for a rewrite under way: not under mu, which its report takes */
}

void commit_merge_resume(commit_t *c)
{
    pthread_mutex_lock(&c->mu);
    if (!c->merge_set && set_add(c) != 0)
        commit_notify(c, 1,
                      "no memory to hand the generations to the merger: none are merged "
                      "until storage is re-established");
    pthread_mutex_unlock(&c->mu);
}

uint64_t commit_merge_count(const commit_t *c)
{
    return c->merges_before + merger_merges(c->merge_set);
}
