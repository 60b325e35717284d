/* genbloom.c: the sizing of a generation's blocked Bloom filter (the lookups are inline in
 * genbloom.h). */
#include "storage/window/genbloom.h"

uint64_t genbloom_blocks(uint64_t keys, unsigned bits_per_key)
{
    uint64_t bits = keys * bits_per_key;
    uint64_t blocks = (bits + GENBLOOM_BLOCK_BYTES * 8 - 1) / (GENBLOOM_BLOCK_BYTES * 8);
    return blocks ? blocks : 1;
}

/* About bits * ln 2, a little less as blocked filters want (Putze et al. 2007). */
unsigned genbloom_hashes(unsigned bits_per_key)
{
    unsigned k = (bits_per_key * 2 + 2) / 3;
    return k < 1 ? 1 : k > GEN_BLOOM_MAX_K ? GEN_BLOOM_MAX_K : k;
}
