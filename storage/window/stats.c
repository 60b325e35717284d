/* stats.c: the window's stats rendered for /metrics and /stats (stats.h). */
#include "storage/window/stats.h"

#include <stdio.h>
#include <string.h>

int64_t window_stats_effective_s(const window_stats_t *s, int64_t now_ms)
{
    if (s->keys == 0 || s->oldest_received_ms <= 0 || now_ms <= s->oldest_received_ms)
        return 0;
    return (now_ms - s->oldest_received_ms) / 1000;
}

/* One metric of the table in window_stats_prom: its value for one window. */
typedef double (*value_fn)(const window_stats_t *s, int64_t now_ms);

#define FIELD(f)                                                                                   \
    static double v_##f(const window_stats_t *s, int64_t now_ms)                                   \
    {                                                                                              \
        (void)now_ms;                                                                              \
        return (double)s->f;                                                                       \
    }
FIELD(keys)
FIELD(max_keys)
FIELD(below_floor)
FIELD(generations)
FIELD(generation_keys)
FIELD(generation_bytes)
FIELD(generation_memory_bytes)
FIELD(seals)
FIELD(merges)
FIELD(seals_finished)
FIELD(seals_rebased)
FIELD(generation_files_cleaned)
#undef FIELD

static double v_window(const window_stats_t *s, int64_t now_ms)
{
    (void)now_ms;
    return (double)s->window_ms / 1000.0;
}

static double v_floor(const window_stats_t *s, int64_t now_ms)
{
    (void)now_ms;
    return (double)s->floor_ms / 1000.0;
}

static double v_effective(const window_stats_t *s, int64_t now_ms)
{
    return (double)window_stats_effective_s(s, now_ms);
}

/* Every window metric but the evictions (two samples a window, by reason), in /metrics order. */
static const struct {
    const char *name;
    prom_type_t type;
    const char *help;
    value_fn value;
} METRICS[] = {
    {"dedupe_keys", PROM_GAUGE, "Keys in the dedupe window.", v_keys},
    {"dedupe_window_seconds", PROM_GAUGE, "Configured dedupe window.", v_window},
    {"dedupe_effective_window_seconds", PROM_GAUGE, "Age of the oldest retained key.", v_effective},
    {"dedupe_max_keys", PROM_GAUGE, "Configured size bound of the window (0: none).", v_max_keys},
    {"dedupe_window_floor_seconds", PROM_GAUGE, "Configured --window-floor (0: off).", v_floor},
    {"dedupe_window_below_floor", PROM_GAUGE,
     "1 while the size bound evicts keys younger than --window-floor.", v_below_floor},
    {"generations", PROM_GAUGE, "Sealed generation files of the window.", v_generations},
    {"generation_keys", PROM_GAUGE, "Keys in sealed generations (part of dedupe_keys).",
     v_generation_keys},
    {"generation_bytes", PROM_GAUGE, "Bytes of the sealed generation files on disk.",
     v_generation_bytes},
    {"generation_memory_bytes", PROM_GAUGE,
     "Bytes of the generations' filters and fences in memory.", v_generation_memory_bytes},
    {"seals_total", PROM_COUNTER, "Young stores sealed into generation files.", v_seals},
    {"generation_merges_total", PROM_COUNTER, "Merges of small generations.", v_merges},
    {"recovery_seals_finished_total", PROM_COUNTER,
     "Seals a crash cut short, finished when storage was opened.", v_seals_finished},
    {"recovery_seals_rebased_total", PROM_COUNTER,
     "Of those, seals whose store had lost its last commits to a power loss.", v_seals_rebased},
    {"recovery_generation_files_cleaned_total", PROM_COUNTER,
     "Generation files a crash left (unfinished, or merge inputs) removed at open.",
     v_generation_files_cleaned},
};

void window_stats_prom(prom_t *p, const window_stats_t *s, const char *const *labels, size_t n,
                       int64_t now_ms)
{
    char lb[256];
    if (n == 0)
        return;
    for (size_t m = 0; m < sizeof METRICS / sizeof METRICS[0]; m++) {
        prom_head(p, METRICS[m].name, METRICS[m].type, METRICS[m].help);
        for (size_t i = 0; i < n; i++)
            prom_sample(p, METRICS[m].name, labels[i], METRICS[m].value(&s[i], now_ms));
    }
    prom_head(p, "dedupe_evicted_total", PROM_COUNTER, "Keys evicted from the window, by reason.");
    for (size_t i = 0; i < n; i++) {
        snprintf(lb, sizeof lb, "%s", labels[i]);
        size_t keep = strlen(lb);
        if (prom_label(lb, sizeof lb, "reason", "age") == 0)
            prom_sample_u64(p, "dedupe_evicted_total", lb, s[i].evicted_age);
        lb[keep] = '\0';
        if (prom_label(lb, sizeof lb, "reason", "size") == 0)
            prom_sample_u64(p, "dedupe_evicted_total", lb, s[i].evicted_size);
    }
}

json_t *window_stats_json(const window_stats_t *s, int64_t now_ms)
{
    // clang-format off
    return json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:{s:I, s:I, s:I, s:I, s:I, s:I}}",
        "window_seconds", (json_int_t)(s->window_ms / 1000),
        "effective_window_seconds", (json_int_t)window_stats_effective_s(s, now_ms),
        "keys", (json_int_t)s->keys,
        "max_keys", (json_int_t)s->max_keys,
        "evicted_age", (json_int_t)s->evicted_age,
        "evicted_size", (json_int_t)s->evicted_size,
        "window_floor_seconds", (json_int_t)(s->floor_ms / 1000),
        "window_below_floor", (int)s->below_floor,
        "generations",
            "count", (json_int_t)s->generations,
            "keys", (json_int_t)s->generation_keys,
            "bytes", (json_int_t)s->generation_bytes,
            "memory_bytes", (json_int_t)s->generation_memory_bytes,
            "seals", (json_int_t)s->seals,
            "merges", (json_int_t)s->merges);
    // clang-format on
}
