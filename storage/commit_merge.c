/*
 * commit_merge.c: the merger thread (LMDB mode), which merges sealed
 * generations in the background.
 *
 * DESIGN. A merge rewrites its inputs in one sequential pass: at a 1B-key
 * window, 64 Mi keys and 2 GB, half a minute or more. On the checkpointer
 * thread that held up every checkpoint behind it, the writer then waited for
 * the checkpointer (PENDING_MAX), and requests for the merge: 19 s in the
 * first 1B-key run. So the checkpointer only seals and drops (genset_plan
 * without merges) and then kicks this thread, which plans on its own view and
 * merges until the rule asks for no more. The set takes changes from both
 * threads (genset.h): a merge whose input was dropped meanwhile publishes
 * nothing, and a seal added meanwhile stays. Re-establishing storage pauses
 * the merger and cancels a merge under way (gen_merge reads the flag every
 * 64 Ki keys), since the set is closed and opened again; so does closing.
 *
 * Functions, in order: merge_all (one wake-up's work), merge_thread,
 * commit_merge_start / _stop / _kick / _settle / _resume.
 */
#include <errno.h>
#include <string.h>

#include "storage/commit_internal.h"

/* Merges while the rule asks for one, the merger not paused and nothing cancelled. */
static void merge_all(commit_t *c)
{
    genset_policy_t p = commit_view_gen_policy(c);
    while (c->gens && !atomic_load(&c->merger.cancel)) {
        genset_view_t *v = genset_view(c->gens);
        genset_plan_t plan;
        genset_plan(v, &p, clk_wall_ms(), 0, &plan);
        size_t first = plan.drop_age + plan.drop_size + plan.merge_first;
        int rc = plan.merge_n > 0 ? genset_merge(c->gens, v, first, plan.merge_n, &c->merger.cancel)
                                  : GEN_OK;
        genset_view_release(v);
        if (plan.merge_n == 0 || rc == GEN_CANCELLED)
            return;
        if (rc == GEN_OK) {
            pthread_mutex_lock(&c->mu);
            c->stats.merges++;
            pthread_mutex_unlock(&c->mu);
        } else if (rc != GEN_CHANGED) { /* changed: the checkpointer dropped one; plan again */
            commit_notify(c, 1,
                          "merging %zu generations failed: %s; the window stays whole, and the "
                          "merge is tried again after the next checkpoint",
                          plan.merge_n, gen_strerror(rc));
            return;
        }
    }
}

static void *merge_thread(void *arg)
{
    commit_t *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->merger.quit && (c->merger.paused || !c->merger.wanted))
            pthread_cond_wait(&c->merge_cv, &c->mu);
        if (c->merger.quit)
            break;
        c->merger.wanted = false;
        c->merger.running = true;
        pthread_mutex_unlock(&c->mu);
        merge_all(c);
        pthread_mutex_lock(&c->mu);
        c->merger.running = false;
        pthread_cond_broadcast(&c->merge_cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int commit_merge_start(commit_t *c, char *errbuf, size_t errlen)
{
    atomic_store(&c->merger.cancel, false);
    c->merger.wanted = true; /* what the last run left to merge */
    if (pthread_create(&c->merge_thread, NULL, merge_thread, c) != 0) {
        errbuf_printf(errbuf, errlen, "starting the merger thread: %s", strerror(errno));
        return -1;
    }
    c->merger.started = true;
    return 0;
}

void commit_merge_stop(commit_t *c)
{
    if (!c->merger.started)
        return;
    atomic_store(&c->merger.cancel, true);
    pthread_mutex_lock(&c->mu);
    c->merger.quit = true;
    pthread_cond_broadcast(&c->merge_cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->merge_thread, NULL);
    c->merger.started = false;
}

void commit_merge_kick(commit_t *c)
{
    c->merger.wanted = true;
    pthread_cond_broadcast(&c->merge_cv);
}

void commit_merge_settle(commit_t *c)
{
    if (!c->merger.started)
        return;
    atomic_store(&c->merger.cancel, true);
    pthread_mutex_lock(&c->mu);
    c->merger.paused = true;
    while (c->merger.running)
        pthread_cond_wait(&c->merge_cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    atomic_store(&c->merger.cancel, false);
}

void commit_merge_resume(commit_t *c)
{
    pthread_mutex_lock(&c->mu);
    c->merger.paused = false;
    c->merger.wanted = true;
    pthread_cond_broadcast(&c->merge_cv);
    pthread_mutex_unlock(&c->mu);
}
