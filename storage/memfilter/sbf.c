/* sbf: the Stable Bloom Filter (Deng and Rafiei, SIGMOD 2006). */
#include <math.h>

#include "storage/memfilter/internal.h"

/*
 * m = bits/d cells of d bits (Max = 2^d - 1). A key is a DUPLICATE when all K of its cells are
 * non-zero. Then P cells are decremented (P consecutive cells from a random start, the
 * variant the paper allows) and the key's K cells are set to Max. The fraction of zero cells
 * converges to (1 / (1 + 1/(P (1/K - 1/m))))^Max, hence the asymptotic FPR
 * (1 - that)^K. Given a target FPR, P is derived from the paper's formula
 * P = 1 / ((1/(1 - target^(1/K))^(1/Max) - 1) (1/K - 1/m)), rounded to the nearest integer.
 */
struct sbf {
    struct filter base;
    uint64_t cells;
    uint64_t decrement; /* P */
    uint32_t max;
};

static void defaults(filter_spec_t *s)
{
    s->cell_bits = 3;
    s->hashes = 4;
    s->target_fpr = 0.01;
}

static double derive_p(uint64_t m, uint32_t k, uint32_t d, double target)
{
    double max = (double)((1u << d) - 1);
    double denom =
        (1.0 / pow(1.0 - pow(target, 1.0 / k), 1.0 / max) - 1.0) * (1.0 / k - 1.0 / (double)m);
    return denom > 0 ? 1.0 / denom : (double)m;
}

static uint64_t p_of(const filter_spec_t *s)
{
    uint64_t m = s->bits / s->cell_bits;
    if (s->decrement != 0)
        return s->decrement;
    double p = floor(derive_p(m, s->hashes, s->cell_bits, s->target_fpr) + 0.5);
    if (p < 1)
        p = 1;
    if (p > (double)m)
        p = (double)m;
    return (uint64_t)p;
}

static int check(const filter_spec_t *s, char *err, size_t errlen)
{
    if (s->cell_bits < 1 || s->cell_bits > 8)
        return filter_fail(err, errlen, "sbf: cellbits=%u: want 1..8", s->cell_bits);
    if (s->hashes < 1 || s->hashes > 64)
        return filter_fail(err, errlen, "sbf: hashes=%u: want 1..64", s->hashes);
    uint64_t m = s->bits / s->cell_bits;
    if (m <= s->hashes)
        return filter_fail(err, errlen, "sbf: %llu cells: want more cells than hashes (%u)",
                           (unsigned long long)m, s->hashes);
    if (s->decrement == 0 && !(s->target_fpr > 0 && s->target_fpr < 1))
        return filter_fail(err, errlen, "sbf: give target=RATE in (0,1) or p=CELLS");
    if (s->decrement > m)
        return filter_fail(err, errlen, "sbf: p=%llu is more than the %llu cells",
                           (unsigned long long)s->decrement, (unsigned long long)m);
    return 0;
}

static void setup(filter_t *f)
{
    struct sbf *b = (struct sbf *)f;
    b->cells = f->spec.bits / f->spec.cell_bits;
    b->decrement = p_of(&f->spec);
    b->max = (1u << f->spec.cell_bits) - 1;
    f->memory_bits = b->cells * f->spec.cell_bits;
    f->nwords = filter_words_for(f->memory_bits);
}

static int insert(filter_t *f, const uint64_t h[2])
{
    struct sbf *b = (struct sbf *)f;
    unsigned d = f->spec.cell_bits;
    uint64_t step = h[1] | 1, x = h[0];
    int seen = FILTER_DUPLICATE;
    for (uint32_t i = 0; i < f->spec.hashes; i++, x += step)
        if (filter_get_bits(f->words, filter_reduce(x, b->cells) * d, d) == 0) {
            seen = FILTER_UNSEEN;
            break;
        }

    uint64_t c = filter_reduce(filter_rand(&f->rng), b->cells);
    for (uint64_t i = 0; i < b->decrement; i++) {
        uint64_t v = filter_get_bits(f->words, c * d, d);
        if (v > 0)
            filter_set_bits(f->words, c * d, d, v - 1);
        if (++c == b->cells)
            c = 0;
    }

    x = h[0];
    for (uint32_t i = 0; i < f->spec.hashes; i++, x += step)
        filter_set_bits(f->words, filter_reduce(x, b->cells) * d, d, b->max);
    return seen;
}

static double asymptotic_fpr(const filter_t *f)
{
    const struct sbf *b = (const struct sbf *)f;
    double k = f->spec.hashes, m = (double)b->cells, p = (double)b->decrement;
    double zero = pow(1.0 / (1.0 + 1.0 / (p * (1.0 / k - 1.0 / m))), b->max);
    return pow(1.0 - zero, k);
}

const struct filter_ops filter_sbf_ops = {
    .kind = FILTER_SBF,
    .name = "sbf",
    .size = sizeof(struct sbf),
    .defaults = defaults,
    .check = check,
    .setup = setup,
    .insert = insert,
    .asymptotic_fpr = asymptotic_fpr,
};
