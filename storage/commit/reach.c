/*
 * commit/reach.c: how far back retries come and how far back the window reaches: the ages of
 * duplicates (opts.duplicate_age_seconds) and the window's floor (opts.window_floor_ms).
 *
 * DESIGN. A duplicate's age is its receivedAt minus its first copy's, which the mode's apply
 * reports with the verdict (commit_event_t.first_received_ms); the writer counts them once a
 * batch is durable. The floor is judged on the writer thread after every batch and at every
 * idle wake-up. The effective window (the age of the oldest retained key) alone would cry
 * wolf: a server that just started, or that was idle for longer than --window and then aged
 * everything out at once, holds young keys only, yet it has forgotten nothing a retry could
 * still need. So the window is below the floor only while it forgets keys younger than the
 * floor: a key was evicted by the size bound (in the view, or a generation dropped for it)
 * when the oldest retained key was received less than a floor ago. That mark moves with every
 * such eviction; once a floor's time has passed since it (and the oldest key is older than
 * the floor too) the window is back, and the writer wakes for exactly that moment.
 */
#include "storage/commit/internal.h"

void commit_reach_count_ages(commit_t *c, const commit_req_t *batch)
{
    int64_t max_ms = -1;
    for (const commit_req_t *q = batch; q; q = q->next) {
        for (size_t i = 0; i < q->n; i++) {
            const commit_event_t *ev = &q->events[i];
            if (ev->result != COMMIT_DUPLICATE || ev->first_received_ms == 0)
                continue;
            /* A clock stepped back between the copies makes no negative age. */
            int64_t age = ev->received_ms > ev->first_received_ms
                              ? ev->received_ms - ev->first_received_ms
                              : 0;
            histogram_observe(c->opts.duplicate_age_seconds, (double)age / 1000.0);
            if (age > max_ms)
                max_ms = age;
        }
    }
    if (max_ms < 0)
        return;
    pthread_mutex_lock(&c->mu);
    if (max_ms > c->stats.duplicate_age_max_ms)
        c->stats.duplicate_age_max_ms = max_ms;
    pthread_mutex_unlock(&c->mu);
}

void commit_reach_judge(commit_t *c)
{
    int64_t floor = c->opts.window_floor_ms;
    if (floor <= 0)
        return;
    int64_t now = clk_wall_ms();
    pthread_mutex_lock(&c->mu);
    int64_t oldest = c->stats.window.keys > 0 ? c->stats.window.oldest_received_ms : 0;
    bool evicted = c->stats.window.evicted_size != c->reach_seen_evicted;
    if (evicted || c->reach_recheck) {
        /* A generation dropped by the checkpointer is counted before the writer's view of the
         * window moves on: take the mark once more at the next judgement. */
        c->reach_recheck = evicted;
        c->reach_seen_evicted = c->stats.window.evicted_size;
        int64_t mark = oldest > 0 ? oldest : now;
        if (mark > c->reach_forgot_ms)
            c->reach_forgot_ms = mark;
    }
    int64_t effective = oldest > 0 && now > oldest ? now - oldest : 0;
    bool below = c->reach_forgot_ms > 0 && now - c->reach_forgot_ms < floor && effective < floor;
    bool was = c->stats.window.below_floor;
    c->stats.window.below_floor = below;
    pthread_mutex_unlock(&c->mu);
    if (below && !was)
        commit_notify(c, 1,
                      "the dedupe window fell below --window-floor: keys received %llds ago were "
                      "evicted by --max-keys (effective window %llds, floor %llds); retries older "
                      "than that are accepted again: raise --max-keys",
                      (long long)((now - c->reach_forgot_ms) / 1000), (long long)(effective / 1000),
                      (long long)(floor / 1000));
    else if (!below && was)
        commit_notify(c, 2,
                      "the dedupe window is back above --window-floor (effective window %llds, "
                      "floor %llds)",
                      (long long)(effective / 1000), (long long)(floor / 1000));
}

int64_t commit_reach_wake(const commit_t *c)
{
    if (c->opts.window_floor_ms <= 0 || !c->stats.window.below_floor)
        return INT64_MAX;
    /* When the mark is a floor old (realtime), as a CLOCK_MONOTONIC time (the writer's clock). */
    int64_t left = c->reach_forgot_ms + c->opts.window_floor_ms - clk_wall_ms();
    return clk_mono_ms() + (left > 0 ? left : 0) + 1;
}
