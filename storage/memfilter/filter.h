/* filter: bounded-memory duplicate filters behind one interface (NSQ, Bloom, SBF, SQF, QHT, QQHTD).
 */
#ifndef INGESTD_FILTER_H
#define INGESTD_FILTER_H

#include <stddef.h>
#include <stdint.h>

/*
 * A filter answers "have I seen this key?" for an unbounded stream of 16-byte keys in a fixed
 * amount of memory, and remembers the key for later questions. Keys are expected to be keyed
 * hashes already (storage/window/keyhash.h); every filter mixes them again with its own 16-byte
 * secret (SipHash-2-4, 128-bit output) before deriving rows, cells and fingerprints, so
 * nobody who lacks that secret can aim keys at one row or forge a fingerprint (section 7 of
 * Géraud, Lombard-Platet, Naccache, "Quotient Hash Tables", arXiv 1901.04358).
 *
 * The error rates, as the QHT paper defines them over a stream:
 *   FPR = false positives / unique items   (an unseen key answered DUPLICATE)
 *   FNR = false negatives / duplicate items (a seen key answered UNSEEN)
 * For ingestd a false positive drops a unique event; a false negative lets a retry through.
 * "Asymptotic FPR" is the FPR of a saturated filter, the rate it tends to on a long stream:
 *
 *   nsq    the "opposite of a Bloom filter" (NSQ, 2012): N = bits/fp slots, each keeping the
 *          last digest that hashed there. FPR 0 with fp=128 (the digest is the key itself;
 *          only a SipHash-128 collision of two source keys can be a false positive), about
 *          2^-fp per lookup with fp=64 or 32. A duplicate is forgotten after x further unique
 *          keys with probability 1 - (1 - 1/N)^x.
 *   bloom  Bloom filter, m = bits cells, k = hashes: FPR after n keys (1 - e^(-kn/m))^k;
 *          never forgets, so its asymptotic FPR is 1 (FNR is always 0).
 *   sbf    Stable Bloom Filter (Deng, Rafiei, SIGMOD 2006): m = bits/d cells of d bits, K
 *          hashes, P cells decremented per insert. Asymptotic FPR
 *          (1 - (1 / (1 + 1/(P (1/K - 1/m))))^(2^d - 1))^K; P is derived from target= when
 *          not given.
 *   sqf    Streaming Quotient Filter (Dutta et al., VLDB 2013): rows of b buckets; a bucket
 *          holds the reduced remainder (r' low bits of an r-bit remainder) and the remainder's
 *          Hamming weight, ceil(log2(r+1)) + r' bits. Asymptotic FPR for b = 1 is the
 *          collision probability q of two fingerprints (1/4 for r=2, r'=1); about 1-(1-q)^b
 *          for larger b.
 *   qht    Quotient Hash Table: rows of b buckets of f-bit fingerprints (0 is "empty"; a
 *          fingerprint that would be 0 is re-hashed), insert if absent, evict a random bucket
 *          of a full row. Asymptotic FPR b / (2^f - 1).
 *   qqhtd  Queued QHT with Duplicates: the row is a FIFO queue, every key (duplicate or not)
 *          is appended and the oldest popped. Asymptotic FPR 1 - (1 - 1/(2^f - 1))^b.
 *
 * Threading: a filter_t is not thread-safe; one thread (or a caller-held lock) at a time.
 * Status codes: 0 (FILTER_OK) or a negative FILTER_E* code; see filter_strerror().
 */

typedef struct filter filter_t;

enum {
    FILTER_OK = 0,
    FILTER_EINVAL = -1,   /* bad spec or argument */
    FILTER_ENOMEM = -2,   /* allocation failed */
    FILTER_ECORRUPT = -3, /* serialized filter: bad magic, length, parameters or checksum */
    FILTER_EVERSION = -4, /* serialized filter: unknown format version or filter kind */
    FILTER_ESECRET = -5,  /* serialized filter was made with another secret */
};

/* Answers of filter_insert_if_absent(). */
enum { FILTER_UNSEEN = 0, FILTER_DUPLICATE = 1 };

typedef enum {
    FILTER_NSQ = 1,
    FILTER_BLOOM = 2,
    FILTER_SBF = 3,
    FILTER_SQF = 4,
    FILTER_QHT = 5,
    FILTER_QQHTD = 6,
} filter_kind_t;

#define FILTER_SECRET_LEN 16
#define FILTER_KEY_LEN    16
#define FILTER_MAX_BITS   (UINT64_C(1) << 36) /* 8 GiB of table */

/*
 * What to build. filter_parse_spec() fills every field (defaults for the ones the text does
 * not name); a caller building one by hand starts from filter_spec_default(). Fields a kind
 * does not use are ignored (and 0 after parsing).
 */
typedef struct {
    filter_kind_t kind;
    uint64_t bits;           /* memory budget in bits; the table uses at most this much */
    uint32_t buckets;        /* sqf/qht/qqhtd: buckets per row */
    uint32_t fp_bits;        /* qht/qqhtd: fingerprint bits (1..32); nsq: digest 32/64/128 */
    uint32_t hashes;         /* bloom/sbf: hash functions (cells set per key) */
    uint32_t cell_bits;      /* sbf: bits per cell, 1..8 */
    uint32_t remainder_bits; /* sqf: r, 1..16 */
    uint32_t reduced_bits;   /* sqf: r', 1..r */
    uint64_t decrement;      /* sbf: P, cells decremented per insert; 0 = derive from target */
    double target_fpr;       /* sbf: asymptotic FPR aimed at when decrement is 0, (0,1) */
} filter_spec_t;

/* The defaults of a kind for a budget of `bits` (which the caller still has to check). */
void filter_spec_default(filter_kind_t kind, uint64_t bits, filter_spec_t *out);

/*
 * Parses "NAME[:ITEM[,ITEM...]]" where NAME is nsq|bloom|sbf|sqf|qht|qqhtd and each ITEM is
 * either a size or key=value. Sizes: a number (decimal, or 8e6 / 2^20 forms) with an
 * optional unit: bit|bits (the default), kbit, Mbit, Gbit (powers of 1000), Kibit, Mibit,
 * Gibit (powers of 1024), B, kB, MB, GB, KiB, MiB, GiB (bytes). Keys: bits=SIZE,
 * buckets (b), fp (f), hashes (k), cellbits (d), remainder (r), reduced (r'), p (SBF's P),
 * target (SBF's target FPR). A later item wins over an earlier one. Examples:
 * "qqhtd:8Mbit", "qht:bits=1000000,buckets=1,fp=3", "sbf:1MiB,cellbits=2,hashes=2,target=0.02".
 * The result is validated as filter_new() would (sizes, ranges, at least one row).
 * Returns 0, or FILTER_EINVAL with a one-line reason in err (errlen bytes, caller-owned,
 * may be NULL).
 */
int filter_parse_spec(const char *text, filter_spec_t *out, char *err, size_t errlen);

/*
 * Writes the canonical spec of `spec` ("qht:bits=8000000,buckets=1,fp=3") to buf, truncated
 * to len bytes (NUL-terminated when len > 0). Returns the length it needed (snprintf-style).
 */
int filter_spec_format(const filter_spec_t *spec, char *buf, size_t len);

/* "nsq", "bloom", ... or NULL for an unknown kind. Static strings. */
const char *filter_kind_name(filter_kind_t kind);

/*
 * Builds an empty filter. The secret is copied (keep it, e.g. in the data dir, to reload a
 * serialized filter). Returns 0 with *out set (free with filter_free()), FILTER_EINVAL for a
 * bad spec, FILTER_ENOMEM.
 */
int filter_new(const filter_spec_t *spec, const uint8_t secret[FILTER_SECRET_LEN], filter_t **out);

/*
 * Answers whether key was seen (FILTER_DUPLICATE) or not (FILTER_UNSEEN) and records it, in
 * O(1) (O(P + k) for the SBF). Never fails. Unseen keys are always recorded; duplicates are
 * re-recorded by the kinds that do so (qqhtd appends them, sbf refreshes its cells).
 */
int filter_insert_if_absent(filter_t *f, const uint8_t key[FILTER_KEY_LEN]);

/* Bits of table the filter holds (<= spec bits: whole rows/cells only), without overhead. */
uint64_t filter_memory_bits(const filter_t *f);

/* The asymptotic false positive rate of this filter's parameters (see above). */
double filter_asymptotic_fpr(const filter_t *f);

/* The filter's (normalized) spec; valid as long as f. */
const filter_spec_t *filter_spec(const filter_t *f);

/* Forgets everything: the filter is as filter_new() made it. */
void filter_reset(filter_t *f);

/*
 * Serializes the filter (parameters, state and a CRC-32) into a malloc'ed buffer the caller
 * frees: *out and *len on success. The secret is not in it, only an 8-byte check value.
 * Format version 1, all integers little-endian:
 *   "IDFL" u16 version u8 kind u8 0  u64 bits  u32 buckets fp_bits hashes cell_bits
 *   remainder_bits reduced_bits  u64 decrement  u64 target_fpr (IEEE-754 bits)
 *   u64 secret check  u64 rng state  u64 payload words  payload (u64 words)  u32 crc32
 * Returns 0 or FILTER_ENOMEM.
 */
int filter_serialize(const filter_t *f, uint8_t **out, size_t *len);

/*
 * Rebuilds a filter from filter_serialize() output and the same secret. Returns 0 with *out
 * set, FILTER_ECORRUPT (truncated, bad magic, checksum or parameters), FILTER_EVERSION,
 * FILTER_ESECRET (other secret) or FILTER_ENOMEM; *out is NULL on failure.
 */
int filter_deserialize(const uint8_t *buf, size_t len, const uint8_t secret[FILTER_SECRET_LEN],
                       filter_t **out);

/* Frees f; NULL is a no-op. */
void filter_free(filter_t *f);

/* A static description of a status code. */
const char *filter_strerror(int rc);

#endif
