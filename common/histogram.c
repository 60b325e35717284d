/* histogram: a lock-free Prometheus histogram (fixed bucket bounds, _bucket/_sum/_count). */
#include "common/histogram.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

const double HISTOGRAM_SECONDS[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                    0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
const size_t HISTOGRAM_SECONDS_N = sizeof(HISTOGRAM_SECONDS) / sizeof(HISTOGRAM_SECONDS[0]);
const double HISTOGRAM_EVENTS[] = {1,   2,    5,    10,   20,    50,    100,  200,
                                   500, 1000, 2000, 5000, 10000, 20000, 50000};
const size_t HISTOGRAM_EVENTS_N = sizeof(HISTOGRAM_EVENTS) / sizeof(HISTOGRAM_EVENTS[0]);
/* Retries come within seconds (a lost response), minutes (an app in the background) or days (an
 * offline phone's queue): 1 s to the longest sensible --window, 28 d. */
const double HISTOGRAM_AGE_SECONDS[] = {1,     5,     15,     30,     60,     120,     300,
                                        600,   900,   1800,   3600,   7200,   14400,   21600,
                                        43200, 86400, 172800, 345600, 604800, 1209600, 2419200};
const size_t HISTOGRAM_AGE_SECONDS_N =
    sizeof(HISTOGRAM_AGE_SECONDS) / sizeof(HISTOGRAM_AGE_SECONDS[0]);

struct histogram {
    size_t n;
    double bounds[HISTOGRAM_MAX_BOUNDS];
    /* Per-bucket (not cumulative) counts, so an observation touches one counter; the writer
     * adds them up. counts[n] is the +Inf bucket. */
    atomic_uint_fast64_t counts[HISTOGRAM_MAX_BOUNDS + 1];
    /* C11 has no atomic add for doubles: observe adds with a compare-and-swap loop. */
    _Atomic double sum;
};

int histogram_new(const double *bounds, size_t n, histogram_t **out)
{
    *out = NULL;
    if (n > HISTOGRAM_MAX_BOUNDS || (n > 0 && !bounds))
        return -1;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1]))
            return -1;
    histogram_t *h = calloc(1, sizeof(*h));
    if (!h)
        return -1;
    h->n = n;
    for (size_t i = 0; i < n; i++)
        h->bounds[i] = bounds[i];
    for (size_t i = 0; i <= n; i++)
        atomic_init(&h->counts[i], 0);
    atomic_init(&h->sum, 0.0);
    *out = h;
    return 0;
}

void histogram_free(histogram_t *h)
{
    free(h);
}

void histogram_observe(histogram_t *h, double v)
{
    if (!h || isnan(v))
        return;
    /* Linear scan: at most 32 bounds, cheaper than a branchy binary search at this size. */
    size_t i = 0;
    while (i < h->n && v > h->bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
    double old = atomic_load_explicit(&h->sum, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&h->sum, &old, old + v, memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
}

uint64_t histogram_count(const histogram_t *h)
{
    uint64_t total = 0;
    for (size_t i = 0; h && i <= h->n; i++)
        total += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
    return total;
}

void histogram_write(const histogram_t *h, prom_t *p, const char *name, const char *labels)
{
    uint64_t counts[HISTOGRAM_MAX_BOUNDS + 1];

    /* _count is the sum of the buckets read here, so it always equals the +Inf bucket. */
    for (size_t i = 0; i <= h->n; i++)
        counts[i] = atomic_load_explicit(&h->counts[i], memory_order_relaxed);
    prom_histogram(p, name, labels, h->bounds, counts, h->n,
                   atomic_load_explicit(&h->sum, memory_order_relaxed));
}

int histogram_quantile(const histogram_t *h, double q, double *out)
{
    uint64_t counts[HISTOGRAM_MAX_BOUNDS + 1], total = 0;
    if (!h || !(q >= 0 && q <= 1))
        return -1;
    /* One read of every bucket, so the rank and the walk agree however others observe. */
    for (size_t i = 0; i <= h->n; i++) {
        counts[i] = atomic_load_explicit(&h->counts[i], memory_order_relaxed);
        total += counts[i];
    }
    if (total == 0)
        return -1;
    double rank = q * (double)total;
    uint64_t below = 0;
    size_t i = 0;
    while (i < h->n && (double)(below + counts[i]) < rank) {
        below += counts[i];
        i++;
    }
    if (i == h->n) {
        *out = h->n > 0 ? h->bounds[h->n - 1] : 0;
        return 0;
    }
    double lo = i > 0 ? h->bounds[i - 1] : 0, hi = h->bounds[i];
    if (counts[i] == 0) {
        *out = lo; /* q == 0 over empty leading buckets */
        return 0;
    }
    *out = lo + (hi - lo) * ((rank - (double)below) / (double)counts[i]);
    return 0;
}
