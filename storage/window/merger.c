/*
 * merger.c: the merger thread, the one owner of generation rewrites (merger.h).
 *
 * DESIGN. The sets wait in one list; the thread takes the first that asked,
 * does one rewrite (genset_merge, which publishes only when every input is
 * still in the set) and puts it at the end, so one set's backlog does not
 * hold up another's rewrites. Removing a set (re-establishing storage, a
 * Kafka revoke, close, shutdown) cancels its rewrite under way through the
 * set's own flag and waits for the thread to let go of it.
 *
 * Functions, in order: merge_one, next_wanted, unlink_set, append_set,
 * merge_thread, then the public ones (merger.h).
 */
#include "storage/window/merger.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/clock.h"

struct merger_set {
    merger_t *m;
    int32_t id;
    genset_t *gs;
    bool wanted;             /* under m->mu: asked for a look */
    atomic_bool cancel;      /* being removed: stop the merge under way */
    _Atomic uint64_t merges; /* published */
    merger_set_t *next;      /* m->sets, under m->mu */
};

struct merger {
    genset_policy_t p;
    merger_fail_fn fail;
    void *fail_arg;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    merger_set_t *sets;    /* in turn order */
    merger_set_t *current; /* the one being merged; removal waits for it */
    bool quit;
};

/* One merge of ms's set if the rule asks for one. Whether to look again (a merge done, or the
 * set changed under it). */
static bool merge_one(merger_t *m, merger_set_t *ms)
{
    genset_view_t *v = genset_view(ms->gs);
    genset_plan_t plan;
    /* young_keys 0: the drops are the sealing thread's; only skip what it would drop. */
    genset_plan(v, &m->p, clk_wall_ms(), 0, &plan);
    size_t first = plan.drop_age + plan.drop_size + plan.merge_first;
    int rc = plan.merge_n > 0 ? genset_merge(ms->gs, v, first, plan.merge_n, &ms->cancel) : GEN_OK;
    genset_view_release(v);
    if (plan.merge_n == 0 || rc == GEN_CANCELLED)
        return false;
    if (rc == GEN_OK) {
        atomic_fetch_add(&ms->merges, 1);
        return true;
    }
    if (rc == GEN_CHANGED) /* the sealing thread dropped an input: plan again */
        return true;
    if (m->fail != NULL) /* the window stays whole; the next seal or drop tries again */
        m->fail(m->fail_arg, ms->id, rc, plan.merge_n);
    return false;
}

/* The first set that asked for a look, or NULL. Under m->mu. */
static merger_set_t *next_wanted(merger_t *m)
{
    for (merger_set_t *ms = m->sets; ms != NULL; ms = ms->next)
        if (ms->wanted)
            return ms;
    return NULL;
}

/* Takes ms out of the turn list. Under m->mu. */
static void unlink_set(merger_t *m, merger_set_t *ms)
{
    for (merger_set_t **pp = &m->sets; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == ms) {
            *pp = ms->next;
            ms->next = NULL;
            return;
        }
    }
}

/* Puts ms at the end of the turn list. Under m->mu. */
static void append_set(merger_t *m, merger_set_t *ms)
{
    merger_set_t **pp = &m->sets;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = ms;
}

static void *merge_thread(void *arg)
{
    merger_t *m = arg;
    merger_set_t *ms;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        while (!m->quit && (ms = next_wanted(m)) == NULL)
            pthread_cond_wait(&m->cv, &m->mu);
        if (m->quit)
            break;
        ms->wanted = false;
        m->current = ms;
        pthread_mutex_unlock(&m->mu);
        bool again = merge_one(m, ms);
        pthread_mutex_lock(&m->mu);
        m->current = NULL;
        /* ms is still listed: merger_remove unlinks it only once it is not current. */
        unlink_set(m, ms);
        append_set(m, ms);
        if (again && !atomic_load(&ms->cancel))
            ms->wanted = true;
        pthread_cond_broadcast(&m->cv);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

int merger_new(const genset_policy_t *p, merger_fail_fn fail, void *fail_arg, merger_t **out)
{
    merger_t *m = calloc(1, sizeof *m);
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

void merger_free(merger_t *m)
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

int merger_add(merger_t *m, int32_t id, genset_t *gs, merger_set_t **out)
{
    merger_set_t *ms = calloc(1, sizeof *ms);
    *out = NULL;
    if (ms == NULL)
        return ENOMEM;
    ms->m = m;
    ms->id = id;
    ms->gs = gs;
    atomic_init(&ms->cancel, false);
    atomic_init(&ms->merges, 0);
    pthread_mutex_lock(&m->mu);
    append_set(m, ms);
    ms->wanted = true;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    *out = ms;
    return 0;
}

void merger_kick(merger_set_t *ms)
{
    merger_t *m = ms->m;
    pthread_mutex_lock(&m->mu);
    ms->wanted = true;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

void merger_remove(merger_set_t *ms)
{
    if (ms == NULL)
        return;
    merger_t *m = ms->m;
    pthread_mutex_lock(&m->mu);
    atomic_store(&ms->cancel, true);
    while (m->current == ms)
        pthread_cond_wait(&m->cv, &m->mu);
    unlink_set(m, ms);
    pthread_mutex_unlock(&m->mu);
    free(ms);
}

uint64_t merger_merges(const merger_set_t *ms)
{
    return ms != NULL ? atomic_load(&ms->merges) : 0;
}
