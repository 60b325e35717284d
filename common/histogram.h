/* histogram: a lock-free Prometheus histogram (fixed bucket bounds, _bucket/_sum/_count). */
#ifndef INGESTD_HISTOGRAM_H
#define INGESTD_HISTOGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "common/prom.h"

typedef struct histogram histogram_t;

#define HISTOGRAM_MAX_BOUNDS 32

/* Bucket bounds shared by the server's histograms (docs/operations.md lists them). */
extern const double HISTOGRAM_SECONDS[]; /* 0.1 ms .. 10 s: request and fsync durations */
extern const size_t HISTOGRAM_SECONDS_N;
extern const double HISTOGRAM_EVENTS[]; /* 1 .. 50,000: events per group commit */
extern const size_t HISTOGRAM_EVENTS_N;
extern const double HISTOGRAM_AGE_SECONDS[]; /* 1 s .. 28 d: ages of duplicates */
extern const size_t HISTOGRAM_AGE_SECONDS_N;

/*
 * A histogram with upper bounds bounds[0..n) (strictly increasing, finite; copied) and an
 * implicit +Inf bucket. Returns 0 and *out (free with histogram_free), or -1 (bad bounds,
 * n > HISTOGRAM_MAX_BOUNDS, out of memory).
 */
int histogram_new(const double *bounds, size_t n, histogram_t **out);

/* NULL is a no-op. No observe or write may run any more. */
void histogram_free(histogram_t *h);

/*
 * Counts one sample `v` (NaN is ignored). NULL is a no-op, so code that measures need not
 * know whether anyone reads. Lock-free and thread-safe: any number of threads may observe
 * while others write.
 */
void histogram_observe(histogram_t *h, double v);

/* Samples so far (the +Inf bucket). Thread-safe. */
uint64_t histogram_count(const histogram_t *h);

/*
 * Writes the samples of `name` (without p's prefix) through prom_histogram (common/prom.h):
 * name_bucket{LABELS,le=".."} lines (cumulative, +Inf last), name_sum and name_count. `labels`
 * is NULL or "" for none, else label pairs without braces, e.g. `route="/v1/batch",code="2xx"`
 * (the caller escapes them, prom_label does). The # HELP / # TYPE lines are the caller's
 * (prom_head, once per name, however many label sets).
 * Concurrent observations may land between the bucket reads: _count always equals the +Inf
 * bucket written, _sum may be one sample ahead or behind, as in Prometheus' own clients.
 */
void histogram_write(const histogram_t *h, prom_t *p, const char *name, const char *labels);

/*
 * Estimates the q-quantile (0 <= q <= 1) of the samples from the bucket counts as Prometheus'
 * histogram_quantile() does: linear within the bucket the rank falls in, from the bound below
 * it (0 for the first) to its own; in the +Inf bucket, the largest finite bound. So the answer
 * is exact only to the bucket. Returns 0 and *out, or -1 when there are no samples (or q is
 * out of range). Thread-safe, like histogram_write.
 */
int histogram_quantile(const histogram_t *h, double q, double *out);

#endif
