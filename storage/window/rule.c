/* window.c: the de-duplication window's eviction rule (window.h). */
#include "storage/window/rule.h"

int window_judge(const window_pass_t *p, int64_t received_ms, uint64_t keys)
{
    if (received_ms < p->older_than_ms)
        return WINDOW_AGE;
    if (p->max_keys > 0 && keys > p->max_keys)
        return WINDOW_SIZE;
    return WINDOW_KEEP;
}

int window_judge_source(const window_pass_t *p, int64_t received_ms, uint64_t source_keys,
                        size_t over)
{
    int why = window_judge(p, received_ms, source_keys);
    return why == WINDOW_KEEP && p->max_keys > 0 && over > 0 ? WINDOW_CARRY : why;
}

static size_t batch_steps(size_t nevents)
{
    return nevents * 2 > WINDOW_MIN_STEPS ? nevents * 2 : WINDOW_MIN_STEPS;
}

window_pass_t window_before_batch(const window_policy_t *w, int64_t now_ms, size_t nevents)
{
    return (window_pass_t){
        .older_than_ms = now_ms - w->window_ms, .max_keys = 0, .max_steps = batch_steps(nevents)};
}

window_pass_t window_after_batch(const window_policy_t *w, size_t nevents)
{
    return (window_pass_t){.older_than_ms = INT64_MIN,
                           .max_keys = w->max_keys,
                           .max_steps = w->max_keys > 0 ? batch_steps(nevents) : 0};
}

window_pass_t window_replay_record(const window_policy_t *w, int64_t received_ms)
{
    return (window_pass_t){.older_than_ms = received_ms - w->window_ms,
                           .max_keys = w->max_keys,
                           .max_steps = WINDOW_REPLAY_STEPS};
}
