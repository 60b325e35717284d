/* bloom: a plain Bloom filter (Bloom, 1970) over the keyed mix, k indices by double hashing: the
 * whole de-duplication of --dedupe memory:bloom, unlike storage/window/genbloom.h, the blocked,
 * immutable pre-check in front of each sealed generation's exact records. */
#include "storage/memfilter/internal.h"

/*
 * m = bits cells of one bit. Index i of a key is reduce(h[0] + i * (h[1] | 1), m)
 * (Kirsch-Mitzenmacher double hashing). It never forgets, so on an unbounded stream it
 * saturates: FNR stays 0 and FPR climbs to 1 ((1 - e^(-kn/m))^k after n unique keys).
 */
struct bloom {
    struct filter base;
    uint64_t cells;
};

static void defaults(filter_spec_t *s)
{
    s->hashes = 4;
}

static int check(const filter_spec_t *s, char *err, size_t errlen)
{
    if (s->hashes < 1 || s->hashes > 64)
        return filter_fail(err, errlen, "bloom: hashes=%u: want 1..64", s->hashes);
    return 0;
}

static void setup(filter_t *f)
{
    ((struct bloom *)f)->cells = f->spec.bits;
    f->memory_bits = f->spec.bits;
    f->nwords = filter_words_for(f->memory_bits);
}

static int insert(filter_t *f, const uint64_t h[2])
{
    uint64_t m = ((struct bloom *)f)->cells;
    uint64_t step = h[1] | 1, x = h[0];
    int seen = FILTER_DUPLICATE;
    for (uint32_t i = 0; i < f->spec.hashes; i++, x += step) {
        uint64_t c = filter_reduce(x, m);
        uint64_t bit = UINT64_C(1) << (c & 63);
        if ((f->words[c >> 6] & bit) == 0) {
            seen = FILTER_UNSEEN;
            f->words[c >> 6] |= bit;
        }
    }
    return seen;
}

static double asymptotic_fpr(const filter_t *f)
{
    (void)f;
    return 1.0;
}

const struct filter_ops filter_bloom_ops = {
    .kind = FILTER_BLOOM,
    .name = "bloom",
    .size = sizeof(struct bloom),
    .defaults = defaults,
    .check = check,
    .setup = setup,
    .insert = insert,
    .asymptotic_fpr = asymptotic_fpr,
};
