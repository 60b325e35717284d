/*
 * commit/merge.c: the single node's use of the merger (storage/window/merger.h), the
 * one owner of generation rewrites, for its one set of generations.
 *
 * DESIGN. The checkpointer only seals and drops (seal_maintain never rewrites)
 * and kicks the merger, which plans on its own view and rewrites (merges, and
 * merges of one that shed the keys per-source budgets cut) until the rule asks
 * for no more. The window engine (storage/window/engine.h) hands its set to the
 * merger when it opens and takes it back when it closes (cancelling a rewrite
 * under way and waiting for it to end), so re-establishing storage needs
 * nothing here; the merger thread starts before the first engine opens and
 * ends after the last one closed.
 *
 * Functions, in order: on_merge_fail, commit_merge_start / _stop / _kick /
 * _count.
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

int commit_merge_start(commit_t *c, char *errbuf, size_t errlen)
{
    if (c->merger)
        return 0;
    genset_policy_t p = commit_view_gen_policy(c);
    int rc = merger_new(&p, on_merge_fail, c, &c->merger);
    if (rc != 0) {
        errbuf_printf(errbuf, errlen, "starting the merger thread: %s", strerror(rc));
        return -1;
    }
    return 0;
}

void commit_merge_stop(commit_t *c)
{
    merger_free(c->merger);
    c->merger = NULL;
}

void commit_merge_kick(commit_t *c)
{
    if (c->engine)
        window_engine_kick(c->engine);
}

uint64_t commit_merge_count(const commit_t *c)
{
    /* While storage is re-established, the count the stats last had. */
    return c->engine ? window_engine_merges(c->engine) : c->stats.window.merges;
}
