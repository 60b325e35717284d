/* prom: the one writer of Prometheus text (exposition format 0.0.4) for every /metrics. */
#ifndef INGESTD_COMMON_PROM_H
#define INGESTD_COMMON_PROM_H

#include <stddef.h>
#include <stdint.h>

/*
 * A growable text buffer plus the few line shapes /metrics needs. A writer belongs to one
 * thread (one scrape); it is not thread-safe.
 *
 * Writes never fail on their own: when memory runs out the writer remembers it, ignores what
 * follows, and prom_take answers NULL. So a caller writes every metric and checks once.
 *
 * Names: every name passed below is the metric's name without the writer's prefix.
 * Labels: NULL or "" for none, else `key="value"` pairs separated by commas and without
 * braces, as prom_label builds them. The caller escapes label values (prom_label does).
 * Values: doubles are written in the shortest form that reads back as the same double
 * (integers up to 2^53 as integers, NaN and +Inf/-Inf as Prometheus spells them); integer
 * counters that may exceed 2^53 go through prom_sample_u64 / prom_sample_i64.
 */
typedef struct prom prom_t;

typedef enum {
    PROM_COUNTER,
    PROM_GAUGE,
    PROM_HISTOGRAM,
} prom_type_t;

/*
 * A writer whose metric names all begin with `prefix` (e.g. "ingestd_"; NULL for none; copied).
 * Returns NULL when out of memory. Release it with prom_take or prom_free.
 */
prom_t *prom_new(const char *prefix);

/* Discards the writer and its text. NULL is a no-op. */
void prom_free(prom_t *p);

/*
 * Ends the writer: returns its text, NUL-terminated, and its length in *len (len may be NULL);
 * the caller frees the text with free(). Returns NULL when a write ran out of memory. Frees
 * `p` either way (NULL gives NULL).
 */
char *prom_take(prom_t *p, size_t *len);

/*
 * The `# HELP` and `# TYPE` lines of a metric: once per name, before its samples, however
 * many label sets follow. Backslashes and newlines in `help` are escaped.
 */
void prom_head(prom_t *p, const char *name, prom_type_t type, const char *help);

/*
 * Appends `text` as it is: whole lines another writer made (prom_take's text of a module that
 * builds its own part, e.g. the edge's sink). NULL is a no-op.
 */
void prom_text(prom_t *p, const char *text);

/* One sample line: `name{labels} value`. */
void prom_sample(prom_t *p, const char *name, const char *labels, double v);
void prom_sample_u64(prom_t *p, const char *name, const char *labels, uint64_t v);
void prom_sample_i64(prom_t *p, const char *name, const char *labels, int64_t v);

/* A metric of one sample without labels: its head and its sample. */
void prom_counter(prom_t *p, const char *name, const char *help, double v);
void prom_gauge(prom_t *p, const char *name, const char *help, double v);

/*
 * One label set of a histogram: name_bucket{labels,le="B"} for each bound of bounds[0..n)
 * (cumulative counts), le="+Inf", then name_sum{labels} and name_count{labels}.
 * Bounds are written in the fewest digits that read back exactly, with an exponent from 1e6
 * and below 1e-4 ("0.005", "86400", "2.4192e+06"), as Prometheus' own clients write le.
 * counts[0..n] are per bucket, not cumulative: counts[i] for i < n holds the samples in
 * (bounds[i-1], bounds[i]], counts[n] those above bounds[n-1]. The head (prom_head with
 * PROM_HISTOGRAM) is the caller's.
 */
void prom_histogram(prom_t *p, const char *name, const char *labels, const double *bounds,
                    const uint64_t *counts, size_t n, double sum);

/*
 * Appends `key="value"` to the NUL-terminated label list in buf[0..len), after a comma when
 * the list is not empty; the value is escaped (\\, \", \n). Returns 0, or -1 when it does not
 * fit (buf is then unchanged). Start with buf[0] = '\0'.
 */
int prom_label(char *buf, size_t len, const char *key, const char *value);

/* One source's window (per-source budgets, docs/window.md), for prom_sources. */
typedef struct prom_source {
    const char *name;
    uint64_t keys, evicted_age, evicted_size;
    int64_t window_s; /* seconds since its newest forgotten key; < 0: it forgot none */
} prom_source_t;

/* The ingestd_dedupe_source_* series of src[0..n) (the server's and the worker's): keys,
 * evicted_total{reason} and effective_window_seconds (only of those that forgot one). */
void prom_sources(prom_t *p, const prom_source_t *src, size_t n);

#endif
