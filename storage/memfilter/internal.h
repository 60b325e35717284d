/* internal: what the filter kinds share behind filter.h (base struct, vtable, bit packing). */
#ifndef INGESTD_FILTER_INTERNAL_H
#define INGESTD_FILTER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/memfilter/filter.h"

/*
 * One vtable per kind. check() validates a spec (already holding the kind's defaults) and
 * writes the reason to err; setup() derives the geometry of f->spec into the kind's own
 * fields and sets f->nwords and f->memory_bits; insert() gets the 128-bit keyed mix of the
 * key (h[0] and h[1] are independent 64-bit halves) and returns FILTER_DUPLICATE/UNSEEN.
 * All state lives in f->words, so reset, serialize and deserialize are generic.
 */
struct filter_ops {
    filter_kind_t kind;
    const char *name;
    size_t size; /* sizeof the kind's struct, which starts with struct filter */
    void (*defaults)(filter_spec_t *spec);
    int (*check)(const filter_spec_t *spec, char *err, size_t errlen);
    void (*setup)(filter_t *f);
    int (*insert)(filter_t *f, const uint64_t h[2]);
    double (*asymptotic_fpr)(const filter_t *f);
};

struct filter {
    const struct filter_ops *ops;
    filter_spec_t spec;
    uint8_t secret[FILTER_SECRET_LEN];
    uint64_t rng;    /* splitmix64 state: random evictions and SBF decrements */
    uint64_t rng0;   /* its value after filter_new(), restored by filter_reset() */
    uint64_t *words; /* the table, nwords 64-bit words, bit-packed */
    size_t nwords;
    uint64_t memory_bits;
};

extern const struct filter_ops filter_nsq_ops;
extern const struct filter_ops filter_bloom_ops;
extern const struct filter_ops filter_sbf_ops;
extern const struct filter_ops filter_sqf_ops;
extern const struct filter_ops filter_qht_ops;
extern const struct filter_ops filter_qqhtd_ops;

/* Formats into err when it is not NULL; returns FILTER_EINVAL. */
int filter_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* __extension__ keeps -Wpedantic quiet: GCC and Clang have 128-bit integers on 64-bit targets. */
__extension__ typedef unsigned __int128 filter_u128;

/* Maps a uniform 64-bit value onto [0, n) without division (Lemire's multiply-high). */
static inline uint64_t filter_reduce(uint64_t x, uint64_t n)
{
    return (uint64_t)(((filter_u128)x * n) >> 64);
}

/* splitmix64: a small, fast, seedable generator; state advances by one call. */
static inline uint64_t filter_rand(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* Reads `width` (1..64) bits starting at bit `off` of a packed array (LSB first). */
static inline uint64_t filter_get_bits(const uint64_t *w, uint64_t off, unsigned width)
{
    uint64_t idx = off >> 6;
    unsigned sh = (unsigned)(off & 63);
    uint64_t v = w[idx] >> sh;
    if (sh + width > 64)
        v |= w[idx + 1] << (64 - sh);
    return width == 64 ? v : v & ((UINT64_C(1) << width) - 1);
}

/* Writes the low `width` (1..64) bits of v at bit `off` of a packed array. */
static inline void filter_set_bits(uint64_t *w, uint64_t off, unsigned width, uint64_t v)
{
    uint64_t idx = off >> 6;
    unsigned sh = (unsigned)(off & 63);
    uint64_t mask = width == 64 ? ~UINT64_C(0) : (UINT64_C(1) << width) - 1;
    v &= mask;
    w[idx] = (w[idx] & ~(mask << sh)) | (v << sh);
    if (sh + width > 64) {
        unsigned lo = 64 - sh; /* bits that went into w[idx] */
        w[idx + 1] = (w[idx + 1] & ~(mask >> lo)) | (v >> lo);
    }
}

/* Words needed for `bits` bits. */
static inline size_t filter_words_for(uint64_t bits)
{
    return (size_t)((bits + 63) / 64);
}

/*
 * The rows of a QHT-like table (sqf, qht, qqhtd): `rows` rows of `buckets` cells of `width`
 * bits, a stored value of 0 meaning "empty". Helpers shared by those three kinds.
 */
typedef struct {
    uint64_t rows;
    uint32_t buckets;
    uint32_t width;
} filter_rows_t;

static inline uint64_t filter_row_get(const filter_t *f, const filter_rows_t *g, uint64_t row,
                                      uint32_t i)
{
    return filter_get_bits(f->words, (row * g->buckets + i) * g->width, g->width);
}

static inline void filter_row_set(filter_t *f, const filter_rows_t *g, uint64_t row, uint32_t i,
                                  uint64_t v)
{
    filter_set_bits(f->words, (row * g->buckets + i) * g->width, g->width, v);
}

/*
 * Insert-if-absent into a row with random eviction (SQF and QHT): DUPLICATE when fp (non-zero)
 * is in the row; otherwise it goes into the first empty bucket, or over a random one.
 */
int filter_rows_insert_if_absent(filter_t *f, const filter_rows_t *g, uint64_t row, uint64_t fp);

/*
 * QHT's fingerprint: the first non-zero f-bit chunk of h[1], else (all chunks zero, about
 * 2^-64) of a re-mix of the key; uniform over 1..2^f-1, so 0 stays free to mean "empty".
 */
static inline uint64_t filter_qht_fingerprint(const uint64_t h[2], unsigned f)
{
    uint64_t mask = (UINT64_C(1) << f) - 1, x = h[1], state = h[0] ^ h[1];
    for (;;) {
        for (unsigned used = 0; used + f <= 64; used += f, x >>= f)
            if ((x & mask) != 0)
                return x & mask;
        x = filter_rand(&state);
    }
}

/* The parameters and geometry qht.c and qqhtd.c share (defined in qht.c). */
void filter_qht_defaults(filter_spec_t *s);
int filter_qht_check(const filter_spec_t *s, char *err, size_t errlen);
void filter_qht_setup(filter_t *f, filter_rows_t *g);

#endif
