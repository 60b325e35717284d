/*
 * genbloom: the blocked Bloom filter of a sealed generation (storage/window/gen.h): which
 * generations may hold a key, so that a lookup reads the pages of none of the others.
 *
 * How it differs from storage/memfilter/bloom.c: that one is a plain Bloom filter, the whole
 * de-duplication of `--dedupe memory:bloom` over an unbounded stream (it saturates and never
 * forgets), its bits spread over all of memory. This one is immutable, built once per
 * generation for a known number of keys, and only a pre-check in front of the generation's
 * exact sorted records: a false positive costs one page read, never a lost event. It is
 * blocked (Putze et al., "Cache-, Hash- and Space-Efficient Bloom Filters", 2007): all k bits
 * of a key in one 64-byte block, one cache line per test. Keys are already keyed hashes
 * (keyhash.h), so their bytes are used as they are, no hashing.
 *
 * The filter is `blocks` * GENBLOOM_BLOCK_BYTES bytes, stored as it is in the generation
 * file: its layout is an on-disk format. No state of its own; thread-safe as its bytes are.
 */
#ifndef INGESTD_GENBLOOM_H
#define INGESTD_GENBLOOM_H

#include <stdbool.h>
#include <stdint.h>

#include "common/bytes.h"
#include "storage/window/keyhash.h"

#define GEN_BLOOM_BITS       14 /* default filter bits per key: about 0.4% false positives */
#define GEN_BLOOM_MAX_BITS   32
#define GEN_BLOOM_MAX_K      16 /* bits set per key: about 2/3 of the bits per key, at most this */
#define GENBLOOM_BLOCK_BYTES 64 /* one cache line */

/* Blocks for `keys` keys at `bits_per_key` bits each: at least 1. */
uint64_t genbloom_blocks(uint64_t keys, unsigned bits_per_key);

/* Bits set per key (k) for `bits_per_key`: 1..GEN_BLOOM_MAX_K. */
unsigned genbloom_hashes(unsigned bits_per_key);

/* __extension__ keeps -Wpedantic quiet: GCC and Clang have 128-bit integers on 64-bit targets. */
__extension__ typedef unsigned __int128 genbloom_u128;

/*
 * The key's block: Lemire's multiply-shift of its first 8 bytes onto [0, blocks), without a
 * division. Inline, as the test and the add below: they run per key per generation.
 */
static inline const uint8_t *genbloom_block(const uint8_t *filter, uint64_t blocks,
                                            const uint8_t key[KEYHASH_LEN])
{
    uint64_t b = (uint64_t)(((genbloom_u128)bytes_get_be64(key) * blocks) >> 64);
    return filter + b * GENBLOOM_BLOCK_BYTES;
}

/* Bit i of a key in its 512-bit block: double hashing on the key's last 8 bytes, an odd step so
 * that the first 512 positions differ. */
static inline unsigned genbloom_bit(uint64_t h, unsigned i)
{
    uint64_t step = (h >> 32) | 1;
    return (unsigned)((h + i * step) & 511);
}

/* Sets the key's k bits. */
static inline void genbloom_add(uint8_t *filter, uint64_t blocks, unsigned k,
                                const uint8_t key[KEYHASH_LEN])
{
    uint8_t *b = (uint8_t *)genbloom_block(filter, blocks, key);
    uint64_t h = bytes_get_le64(key + 8);
    for (unsigned i = 0; i < k; i++) {
        unsigned bit = genbloom_bit(h, i);
        b[bit >> 3] |= (uint8_t)(1u << (bit & 7));
    }
}

/* false: the key was never added; true: it may have been. */
static inline bool genbloom_test(const uint8_t *filter, uint64_t blocks, unsigned k,
                                 const uint8_t key[KEYHASH_LEN])
{
    const uint8_t *b = genbloom_block(filter, blocks, key);
    uint64_t h = bytes_get_le64(key + 8);
    for (unsigned i = 0; i < k; i++) {
        unsigned bit = genbloom_bit(h, i);
        if (!(b[bit >> 3] & (1u << (bit & 7))))
            return false;
    }
    return true;
}

#endif
