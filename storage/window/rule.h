/* window: the de-duplication window's eviction rule, stated once: by age, then by size. */
#ifndef INGESTD_WINDOW_H
#define INGESTD_WINDOW_H

#include <stddef.h>
#include <stdint.h>

/* The window as configured (--window, --max-keys). */
typedef struct window_policy {
    int64_t window_ms; /* age bound: a key received before now - window_ms leaves (> 0) */
    uint64_t max_keys; /* size bound: past it the oldest keys leave (0: none) */
} window_policy_t;

/*
 * One eviction pass over a window's oldest end (store_evict_pass, the commit
 * writer's view): what may leave, oldest first, and how many at most.
 */
typedef struct window_pass {
    int64_t older_than_ms; /* keys received before this leave (INT64_MIN: none by age) */
    uint64_t max_keys;     /* then keys leave while more than this remain (0: none by size) */
    size_t max_steps;      /* at most this many leave (0: the pass has nothing to do) */
} window_pass_t;

enum window_verdict {
    WINDOW_KEEP = 0,  /* the key stays, and so does every younger one: the pass ends */
    WINDOW_AGE = 1,   /* the key leaves: it is older than the window */
    WINDOW_SIZE = 2,  /* the key leaves: the window holds more keys than its bound */
    WINDOW_CARRY = 3, /* the key stays but moves to the young end (window_judge_source) */
};

/*
 * The rule. Judges the oldest key of a window, received at `received_ms`,
 * with `keys` keys in the window (itself included): WINDOW_AGE when it was
 * received before p->older_than_ms, else WINDOW_SIZE when p->max_keys > 0 and
 * keys > p->max_keys, else WINDOW_KEEP. Pure; p->max_steps is the caller's.
 */
int window_judge(const window_pass_t *p, int64_t received_ms, uint64_t keys);

/*
 * The rule with the size bound per source (docs/window.md, "Per-source
 * budgets"): p->max_keys is each source's budget, `source_keys` the keys of
 * the judged key's own source, `over` how many sources hold more than it.
 * As window_judge on the source's keys; but a key it would keep while some
 * other source is over its budget is WINDOW_CARRY: it stays in the window,
 * put again at the young end with its receivedAt and log offset, so the
 * pass goes on to the over-budget source's keys behind it. One source's
 * flood thus ages out only its own keys. Pure.
 */
int window_judge_source(const window_pass_t *p, int64_t received_ms, uint64_t source_keys,
                        size_t over);

/*
 * The two passes around a batch of `nevents` new keys judged at `now_ms`
 * (CLOCK_REALTIME), the same for the single-node writer and a Kafka worker's
 * partition. Each may take twice the batch, at least WINDOW_MIN_STEPS: more
 * than a batch adds, so a window over its bound shrinks back.
 * - window_before_batch: the age bound only, before the batch is looked up,
 *   so a key past the window is accepted again rather than dropped.
 * - window_after_batch: the size bound only, after the batch's inserts, so it
 *   holds when the batch is acknowledged (max_steps 0 when there is none).
 */
#define WINDOW_MIN_STEPS 1024
window_pass_t window_before_batch(const window_policy_t *w, int64_t now_ms, size_t nevents);
window_pass_t window_after_batch(const window_policy_t *w, size_t nevents);

/*
 * Replaying one logged record received at `received_ms` into a store: both
 * bounds at once, judged at the record's own time (as when it was accepted),
 * in WINDOW_REPLAY_STEPS: more than the one key the record adds.
 */
#define WINDOW_REPLAY_STEPS 4
window_pass_t window_replay_record(const window_policy_t *w, int64_t received_ms);

#endif
