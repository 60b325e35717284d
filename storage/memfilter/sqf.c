/* sqf: the Streaming Quotient Filter (Dutta, Narang, Bera, VLDB 2013). */
#include <math.h>

#include "storage/memfilter/internal.h"

/*
 * rows = bits / (b w) rows of b buckets. The row is reduce(h[0], rows) (the quotient); the
 * r-bit remainder is the low r bits of h[1], and a bucket stores its r' low bits together with
 * the Hamming weight of the whole remainder: w = r' + ceil(log2(r + 1)) bits. Insertion is
 * QHT's (insert if absent, empty bucket first, else a random one). The value "weight 0,
 * reduced remainder 1" cannot occur (a non-zero reduced remainder has weight >= 1), so it is
 * the empty marker; it is stored as 0 by XOR-ing every stored value with 1.
 * Two random remainders give one fingerprint with probability
 * q = 2^-r' * C(2(r-r'), r-r') / 4^(r-r') (equal low bits, equal weight of the high bits);
 * a saturated one-bucket row has FPR q, and about 1 - (1 - q)^b with b buckets.
 * The paper's benchmark (r=2, r'=1: 3-bit buckets) has q = 1/4.
 */
struct sqf {
    struct filter base;
    filter_rows_t g;
};

static unsigned weight_bits(unsigned r)
{
    unsigned n = 0;
    while ((1u << n) < r + 1)
        n++;
    return n;
}

static void defaults(filter_spec_t *s)
{
    s->buckets = 4;
    s->remainder_bits = 12;
    s->reduced_bits = 8;
}

static int check(const filter_spec_t *s, char *err, size_t errlen)
{
    if (s->buckets < 1 || s->buckets > 64)
        return filter_fail(err, errlen, "sqf: buckets=%u: want 1..64", s->buckets);
    if (s->remainder_bits < 1 || s->remainder_bits > 16)
        return filter_fail(err, errlen, "sqf: remainder=%u: want 1..16", s->remainder_bits);
    if (s->reduced_bits < 1 || s->reduced_bits > s->remainder_bits)
        return filter_fail(err, errlen, "sqf: reduced=%u: want 1..remainder (%u)", s->reduced_bits,
                           s->remainder_bits);
    uint64_t row = (uint64_t)s->buckets * (s->reduced_bits + weight_bits(s->remainder_bits));
    if (s->bits < row)
        return filter_fail(err, errlen, "sqf: %llu bits do not hold one row of %llu bits",
                           (unsigned long long)s->bits, (unsigned long long)row);
    return 0;
}

static void setup(filter_t *f)
{
    filter_rows_t *g = &((struct sqf *)f)->g;
    g->buckets = f->spec.buckets;
    g->width = f->spec.reduced_bits + weight_bits(f->spec.remainder_bits);
    g->rows = f->spec.bits / ((uint64_t)g->buckets * g->width);
    f->memory_bits = g->rows * g->buckets * g->width;
    f->nwords = filter_words_for(f->memory_bits);
}

static int insert(filter_t *f, const uint64_t h[2])
{
    const filter_rows_t *g = &((struct sqf *)f)->g;
    unsigned r = f->spec.remainder_bits, rr = f->spec.reduced_bits;
    uint64_t rem = h[1] & ((UINT64_C(1) << r) - 1);
    uint64_t fp = ((uint64_t)__builtin_popcountll(rem) << rr) | (rem & ((UINT64_C(1) << rr) - 1));
    return filter_rows_insert_if_absent(f, g, filter_reduce(h[0], g->rows), fp ^ 1);
}

static double asymptotic_fpr(const filter_t *f)
{
    int hi = (int)(f->spec.remainder_bits - f->spec.reduced_bits);
    /* C(2hi, hi) / 4^hi, computed incrementally to stay in range. */
    double c = 1.0;
    for (int i = 1; i <= hi; i++)
        c *= (double)(hi + i) / (double)i / 4.0;
    double q = ldexp(c, -(int)f->spec.reduced_bits);
    return 1.0 - pow(1.0 - q, f->spec.buckets);
}

const struct filter_ops filter_sqf_ops = {
    .kind = FILTER_SQF,
    .name = "sqf",
    .size = sizeof(struct sqf),
    .defaults = defaults,
    .check = check,
    .setup = setup,
    .insert = insert,
    .asymptotic_fpr = asymptotic_fpr,
};
