/* qqhtd: the Queued QHT with Duplicates (arXiv 1901.04358): each row is a FIFO queue. */
#include <math.h>

#include "storage/memfilter/internal.h"

/*
 * QHT's geometry and fingerprints, but every key, duplicate or not, is appended to its row's
 * queue and the oldest bucket is popped: a row always holds the fingerprints of the last b
 * keys that hashed to it, repeats included, which favours recently repeated items on real
 * data. Asymptotic FPR: a fresh key matches one of b independent fingerprints,
 * 1 - (1 - 1/(2^f - 1))^b. Bucket 0 is the oldest, bucket b-1 the newest.
 */
struct qqhtd {
    struct filter base;
    filter_rows_t g;
};

static void setup(filter_t *f)
{
    filter_qht_setup(f, &((struct qqhtd *)f)->g);
}

static int insert(filter_t *f, const uint64_t h[2])
{
    const filter_rows_t *g = &((struct qqhtd *)f)->g;
    uint64_t row = filter_reduce(h[0], g->rows);
    uint64_t fp = filter_qht_fingerprint(h, g->width);
    int seen = FILTER_UNSEEN;
    /* One pass: look for fp and shift every bucket one place towards the front. */
    for (uint32_t i = 0; i < g->buckets; i++) {
        uint64_t v = filter_row_get(f, g, row, i);
        if (v == fp)
            seen = FILTER_DUPLICATE;
        if (i > 0)
            filter_row_set(f, g, row, i - 1, v);
    }
    filter_row_set(f, g, row, g->buckets - 1, fp);
    return seen;
}

static double asymptotic_fpr(const filter_t *f)
{
    double one = 1.0 / (double)((UINT64_C(1) << f->spec.fp_bits) - 1);
    return 1.0 - pow(1.0 - one, f->spec.buckets);
}

const struct filter_ops filter_qqhtd_ops = {
    .kind = FILTER_QQHTD,
    .name = "qqhtd",
    .size = sizeof(struct qqhtd),
    .defaults = filter_qht_defaults,
    .check = filter_qht_check,
    .setup = setup,
    .insert = insert,
    .asymptotic_fpr = asymptotic_fpr,
};
