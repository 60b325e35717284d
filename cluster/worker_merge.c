/*
 * worker_merge.c: the Kafka worker's merger thread.
 *
 * DESIGN. A merge rewrites its inputs in one sequential pass: at 100M keys
 * per partition, seconds. Inline on the consuming thread it stopped every
 * partition's consumption for that long (lag, and a rebalance when it
 * outlasts max.poll.interval.ms). So, as storage/commit_merge.c does for the
 * single node, the consuming thread only seals and drops and this thread
 * merges, with the same safety rules: it plans on its own view, merges with
 * genset_merge (which publishes only when every input is still in the set)
 * and plans again after GEN_CHANGED. The partitions wait in one list; the
 * thread takes the first that asked, does one merge and puts it at the end,
 * so one partition's backlog does not hold up another's merges. Removing a
 * partition (revoke, close, shutdown) cancels its merge under way through
 * the partition's own flag and waits for the thread to let go of its set.
 *
 * Functions, in order: merge_one, next_wanted, merge_thread, then the
 * public ones (worker_merge.h).
 */
#include "cluster/worker_merge.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/clock.h"

struct worker_merge_part {
    worker_merger_t *m;
    int32_t id;
    genset_t *gs;
    bool wanted;               /* under m->mu: asked for a look */
    atomic_bool cancel;        /* being removed: stop the merge under way */
    _Atomic uint64_t merges;   /* published */
    worker_merge_part_t *next; /* m->parts, under m->mu */
};

struct worker_merger {
    genset_policy_t p;
    worker_merge_fail_fn fail;
    void *fail_arg;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    worker_merge_part_t *parts;   /* in turn order */
    worker_merge_part_t *current; /* the one being merged; removal waits for it */
    bool quit;
};

/* One merge of mp's set if the rule asks for one. Whether to look again (a merge done, or the
 * set changed under it). */
static bool merge_one(worker_merger_t *m, worker_merge_part_t *mp)
{
    genset_view_t *v = genset_view(mp->gs);
    genset_plan_t plan;
    /* young_keys 0: the drops are the consuming thread's; only skip what it would drop. */
    genset_plan(v, &m->p, clk_wall_ms(), 0, &plan);
    size_t first = plan.drop_age + plan.drop_size + plan.merge_first;
    int rc = plan.merge_n > 0 ? genset_merge(mp->gs, v, first, plan.merge_n, &mp->cancel) : GEN_OK;
    genset_view_release(v);
    if (plan.merge_n == 0 || rc == GEN_CANCELLED)
        return false;
    if (rc == GEN_OK) {
        atomic_fetch_add(&mp->merges, 1);
        return true;
    }
    if (rc == GEN_CHANGED) /* the consuming thread dropped an input: plan again */
        return true;
    if (m->fail != NULL) /* the window stays whole; the next seal or drop tries again */
        m->fail(m->fail_arg, mp->id, rc, plan.merge_n);
    return false;
}

/* The first partition that asked for a look, or NULL. Under m->mu. */
static worker_merge_part_t *next_wanted(worker_merger_t *m)
{
    for (worker_merge_part_t *mp = m->parts; mp != NULL; mp = mp->next)
        if (mp->wanted)
            return mp;
    return NULL;
}

/* Takes mp out of the turn list. Under m->mu. */
static void unlink_part(worker_merger_t *m, worker_merge_part_t *mp)
{
    for (worker_merge_part_t **pp = &m->parts; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == mp) {
            *pp = mp->next;
            mp->next = NULL;
            return;
        }
    }
}

/* Puts mp at the end of the turn list. Under m->mu. */
static void append_part(worker_merger_t *m, worker_merge_part_t *mp)
{
    worker_merge_part_t **pp = &m->parts;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = mp;
}

static void *merge_thread(void *arg)
{
    worker_merger_t *m = arg;
    worker_merge_part_t *mp;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        while (!m->quit && (mp = next_wanted(m)) == NULL)
            pthread_cond_wait(&m->cv, &m->mu);
        if (m->quit)
            break;
        mp->wanted = false;
        m->current = mp;
        pthread_mutex_unlock(&m->mu);
        bool again = merge_one(m, mp);
        pthread_mutex_lock(&m->mu);
        m->current = NULL;
        /* mp is still listed: worker_merger_remove unlinks it only once it is not current. */
        unlink_part(m, mp);
        append_part(m, mp);
        if (again && !atomic_load(&mp->cancel))
            mp->wanted = true;
        pthread_cond_broadcast(&m->cv);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

int worker_merger_new(const genset_policy_t *p, worker_merge_fail_fn fail, void *fail_arg,
                      worker_merger_t **out)
{
    worker_merger_t *m = calloc(1, sizeof *m);
    *out = NULL;
    if (m == NULL)
        return ENOMEM;
    m->p = *p;
    m->fail = fail;
    m->fail_arg = fail_arg;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    int rc = pthread_create(&m->thread, NULL, merge_thread, m);
    if (rc != 0) {
        pthread_cond_destroy(&m->cv);
        pthread_mutex_destroy(&m->mu);
        free(m);
        return rc;
    }
    *out = m;
    return 0;
}

void worker_merger_free(worker_merger_t *m)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->quit = true;
    if (m->current != NULL)
        atomic_store(&m->current->cancel, true);
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->thread, NULL);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

int worker_merger_add(worker_merger_t *m, int32_t partition, genset_t *gs,
                      worker_merge_part_t **out)
{
    worker_merge_part_t *mp = calloc(1, sizeof *mp);
    *out = NULL;
    if (mp == NULL)
        return ENOMEM;
    mp->m = m;
    mp->id = partition;
    mp->gs = gs;
    atomic_init(&mp->cancel, false);
    atomic_init(&mp->merges, 0);
    pthread_mutex_lock(&m->mu);
    append_part(m, mp);
    mp->wanted = true;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    *out = mp;
    return 0;
}

void worker_merger_kick(worker_merge_part_t *mp)
{
    worker_merger_t *m = mp->m;
    pthread_mutex_lock(&m->mu);
    mp->wanted = true;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

void worker_merger_remove(worker_merge_part_t *mp)
{
    if (mp == NULL)
        return;
    worker_merger_t *m = mp->m;
    pthread_mutex_lock(&m->mu);
    atomic_store(&mp->cancel, true);
    while (m->current == mp)
        pthread_cond_wait(&m->cv, &m->mu);
    unlink_part(m, mp);
    pthread_mutex_unlock(&m->mu);
    free(mp);
}

uint64_t worker_merger_merges(const worker_merge_part_t *mp)
{
    return mp != NULL ? atomic_load(&mp->merges) : 0;
}
