/* qht: the Quotient Hash Table (Géraud, Lombard-Platet, Naccache, arXiv 1901.04358). */
#include "storage/memfilter/internal.h"

/*
 * rows = bits / (b f) rows of b buckets of f-bit fingerprints. Row reduce(h[0], rows),
 * fingerprint from h[1] (never 0, which marks an empty bucket). DUPLICATE when the fingerprint
 * is in the row; otherwise it takes an empty bucket, or a random one when the row is full.
 * A row never holds one fingerprint twice, so a saturated row matches a fresh key with
 * probability b / (2^f - 1): the asymptotic FPR.
 */
struct qht {
    struct filter base;
    filter_rows_t g;
};

void filter_qht_defaults(filter_spec_t *s)
{
    s->buckets = 4;
    s->fp_bits = 16;
}

int filter_qht_check(const filter_spec_t *s, char *err, size_t errlen)
{
    const char *name = filter_kind_name(s->kind);
    if (s->buckets < 1 || s->buckets > 64)
        return filter_fail(err, errlen, "%s: buckets=%u: want 1..64", name, s->buckets);
    if (s->fp_bits < 1 || s->fp_bits > 32)
        return filter_fail(err, errlen, "%s: fp=%u: want 1..32 fingerprint bits", name, s->fp_bits);
    if (s->bits < (uint64_t)s->buckets * s->fp_bits)
        return filter_fail(err, errlen, "%s: %llu bits do not hold one row of %u x %u bits", name,
                           (unsigned long long)s->bits, s->buckets, s->fp_bits);
    return 0;
}

void filter_qht_setup(filter_t *f, filter_rows_t *g)
{
    g->buckets = f->spec.buckets;
    g->width = f->spec.fp_bits;
    g->rows = f->spec.bits / ((uint64_t)g->buckets * g->width);
    f->memory_bits = g->rows * g->buckets * g->width;
    f->nwords = filter_words_for(f->memory_bits);
}

static void setup(filter_t *f)
{
    filter_qht_setup(f, &((struct qht *)f)->g);
}

static int insert(filter_t *f, const uint64_t h[2])
{
    const filter_rows_t *g = &((struct qht *)f)->g;
    return filter_rows_insert_if_absent(f, g, filter_reduce(h[0], g->rows),
                                        filter_qht_fingerprint(h, g->width));
}

static double asymptotic_fpr(const filter_t *f)
{
    double r = (double)f->spec.buckets / (double)((UINT64_C(1) << f->spec.fp_bits) - 1);
    return r < 1 ? r : 1;
}

const struct filter_ops filter_qht_ops = {
    .kind = FILTER_QHT,
    .name = "qht",
    .size = sizeof(struct qht),
    .defaults = filter_qht_defaults,
    .check = filter_qht_check,
    .setup = setup,
    .insert = insert,
    .asymptotic_fpr = asymptotic_fpr,
};
