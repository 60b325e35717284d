/* stats: what the de-duplication window holds and did, one struct for both roles, and its
 * renderers into /metrics (Prometheus text) and /stats (JSON). */
#ifndef INGESTD_WINDOW_STATS_H
#define INGESTD_WINDOW_STATS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/prom.h"

/*
 * One window: the single node's, or one worker partition's. The single node fills it from
 * its group commit (commit_stats_t), the worker from each partition's store and generations;
 * both render it with the functions below, so the window's metric names are one list.
 */
typedef struct window_stats {
    /* its bounds, as configured */
    int64_t window_ms;
    uint64_t max_keys; /* 0: none */
    int64_t floor_ms;  /* --window-floor; 0: off (the worker has none) */
    bool below_floor;  /* the size bound evicts keys younger than the floor */
    /* what it holds */
    uint64_t keys;              /* young store and generations */
    int64_t oldest_received_ms; /* 0 when empty */
    uint64_t evicted_age, evicted_size;
    /* its sealed part (docs/window.md): files, their keys (part of keys), bytes on disk and of
     * filters and fences in memory; seals and merges done */
    uint64_t generations, generation_keys, generation_bytes, generation_memory_bytes;
    uint64_t seals, merges;
    /* what opening it finished after a crash: seals (of which rebased) and files removed */
    uint64_t seals_finished, seals_rebased, generation_files_cleaned;
} window_stats_t;

/*
 * One source's part of one window. Every key carries its source's tag (keyhash_source), and
 * --max-keys is each source's budget: one source's new keys age out only its own
 * (docs/window.md, "Per-source budgets"). Both roles tally these (window_engine_tally_sources).
 */
typedef struct window_source {
    uint32_t tag;                       /* keyhash_source_tag of its name */
    uint64_t keys;                      /* its keys in the window (young part and generations) */
    uint64_t evicted_age, evicted_size; /* its keys that left the young part, key by key, since
                                           the start (generations go whole, uncounted here) */
    int64_t forgot_ms;                  /* the newest receivedAt among the keys it left, young or
                                           cut in a generation (0: none): every key of it
                                           received later is still in the window */
} window_source_t;

/* Age in seconds of the oldest retained key at now_ms: how far back the window reaches. */
int64_t window_stats_effective_s(const window_stats_t *s, int64_t now_ms);

/*
 * The window's series of s[0..n) into p: each metric's head once, then one sample per window
 * with labels[i] (a prom_label list, "" for none; e.g. partition="3"). Names (after p's
 * prefix): dedupe_keys, dedupe_window_seconds, dedupe_effective_window_seconds,
 * dedupe_max_keys, dedupe_window_floor_seconds, dedupe_window_below_floor,
 * dedupe_evicted_total{reason}, generations, generation_keys, generation_bytes,
 * generation_memory_bytes, seals_total, generation_merges_total,
 * recovery_seals_finished_total, recovery_seals_rebased_total,
 * recovery_generation_files_cleaned_total. Nothing is written when n is 0.
 */
void window_stats_prom(prom_t *p, const window_stats_t *s, const char *const *labels, size_t n,
                       int64_t now_ms);

/*
 * s as a /stats object: window_seconds, effective_window_seconds, keys, max_keys,
 * evicted_age, evicted_size, window_floor_seconds, window_below_floor, and generations
 * {count, keys, bytes, memory_bytes, seals, merges}. A new reference the caller owns
 * (json_decref), or NULL when out of memory.
 */
json_t *window_stats_json(const window_stats_t *s, int64_t now_ms);

#endif
