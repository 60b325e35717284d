/* nsq: the "opposite of a Bloom filter" (NSQ, 2012): one digest per slot, overwritten. */
#include <math.h>

#include "storage/memfilter/internal.h"

/*
 * N slots of fp bits. A key goes to slot reduce(h[0], N) and is a DUPLICATE only when the slot
 * holds exactly its digest; otherwise its digest replaces what was there. With fp=128 the
 * digest is the whole keyed mix h (SipHash-128 of the key), so an unseen key is answered
 * DUPLICATE only on a 128-bit collision; with fp=64 or 32 the digest is h[1] (independent of
 * the slot index) or its low half, a false positive about 2^-fp per lookup since a lookup
 * compares one slot. The all-zero digest marks an empty slot; a key whose digest is zero is
 * stored as 1 instead (the paper's "re-hash the empty value"), one more 2^-fp collision case.
 */
struct nsq {
    struct filter base;
    uint64_t slots;
    unsigned words_per_slot; /* 1 for fp <= 64, 2 for fp = 128 */
};

static void defaults(filter_spec_t *s)
{
    s->fp_bits = 128;
}

static int check(const filter_spec_t *s, char *err, size_t errlen)
{
    if (s->fp_bits != 32 && s->fp_bits != 64 && s->fp_bits != 128)
        return filter_fail(err, errlen, "nsq: fp=%u: the digest is 32, 64 or 128 bits", s->fp_bits);
    if (s->bits < s->fp_bits)
        return filter_fail(err, errlen, "nsq: %llu bits do not hold one %u-bit slot",
                           (unsigned long long)s->bits, s->fp_bits);
    return 0;
}

static void setup(filter_t *f)
{
    struct nsq *n = (struct nsq *)f;
    n->slots = f->spec.bits / f->spec.fp_bits;
    n->words_per_slot = f->spec.fp_bits == 128 ? 2 : 1;
    f->memory_bits = n->slots * f->spec.fp_bits;
    f->nwords = filter_words_for(f->memory_bits);
}

static int insert(filter_t *f, const uint64_t h[2])
{
    struct nsq *n = (struct nsq *)f;
    uint64_t slot = filter_reduce(h[0], n->slots);
    if (n->words_per_slot == 2) {
        /* The slot index came from h[0]'s high bits; the digest keeps all 128 bits. */
        uint64_t *w = f->words + 2 * slot;
        uint64_t d0 = h[0], d1 = h[1];
        if (d0 == 0 && d1 == 0)
            d1 = 1;
        if (w[0] == d0 && w[1] == d1)
            return FILTER_DUPLICATE;
        w[0] = d0;
        w[1] = d1;
        return FILTER_UNSEEN;
    }
    unsigned width = f->spec.fp_bits;
    /* h[1] is independent of the slot index, so all of it is digest. */
    uint64_t d = width == 64 ? h[1] : h[1] & 0xffffffffu;
    if (d == 0)
        d = 1;
    uint64_t off = slot * width;
    if (filter_get_bits(f->words, off, width) == d)
        return FILTER_DUPLICATE;
    filter_set_bits(f->words, off, width, d);
    return FILTER_UNSEEN;
}

static double asymptotic_fpr(const filter_t *f)
{
    return f->spec.fp_bits == 128 ? 0.0 : ldexp(1.0, -(int)f->spec.fp_bits);
}

const struct filter_ops filter_nsq_ops = {
    .kind = FILTER_NSQ,
    .name = "nsq",
    .size = sizeof(struct nsq),
    .defaults = defaults,
    .check = check,
    .setup = setup,
    .insert = insert,
    .asymptotic_fpr = asymptotic_fpr,
};
