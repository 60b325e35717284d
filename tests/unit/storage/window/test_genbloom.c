/* test_genbloom.c: the generations' blocked Bloom filter: sizing, no false negatives, a false
 * positive rate near its design, and its bit layout (an on-disk format) pinned. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "storage/window/genbloom.h"

static void key_of(uint64_t i, uint8_t key[KEYHASH_LEN])
{
    keyhash((const uint8_t *)"0123456789abcdef", "s", 1, (const char *)&i, sizeof i, key);
}

static void test_sizing(void **state)
{
    (void)state;
    assert_int_equal(genbloom_blocks(0, GEN_BLOOM_BITS), 1);
    assert_int_equal(genbloom_blocks(1000, 16), 1000 * 16 / 512 + 1); /* 31.25 blocks, rounded up */
    assert_int_equal(genbloom_blocks(32, 16), 1);
    assert_int_equal(genbloom_hashes(GEN_BLOOM_BITS), 10);
    assert_int_equal(genbloom_hashes(0), 1);
    assert_int_equal(genbloom_hashes(GEN_BLOOM_MAX_BITS), GEN_BLOOM_MAX_K);
}

/* Every key added is found; keys never added mostly are not (about 0.4% at 14 bits per key). */
static void test_no_false_negatives_few_positives(void **state)
{
    (void)state;
    const uint64_t n = 20000;
    uint64_t blocks = genbloom_blocks(n, GEN_BLOOM_BITS);
    unsigned k = genbloom_hashes(GEN_BLOOM_BITS);
    uint8_t *f = calloc(blocks, GENBLOOM_BLOCK_BYTES), key[KEYHASH_LEN];
    assert_non_null(f);
    for (uint64_t i = 0; i < n; i++) {
        key_of(i, key);
        genbloom_add(f, blocks, k, key);
    }
    for (uint64_t i = 0; i < n; i++) {
        key_of(i, key);
        assert_true(genbloom_test(f, blocks, k, key));
    }
    uint64_t fp = 0;
    for (uint64_t i = n; i < 2 * n; i++) {
        key_of(i, key);
        fp += genbloom_test(f, blocks, k, key);
    }
    assert_true(fp < n / 100); /* under 1% */
    free(f);
}

/* The layout files hold: block by the first 8 key bytes, bits by the last 8 (little-endian). */
static void test_bit_layout(void **state)
{
    (void)state;
    uint8_t f[2 * GENBLOOM_BLOCK_BYTES], key[KEYHASH_LEN] = {0};
    memset(f, 0, sizeof f);
    key[0] = 0x80; /* the upper half of [0, 2 blocks): block 1 */
    key[8] = 5;    /* h = 5: the first bit is bit 5 of byte 0 */
    genbloom_add(f, 2, 1, key);
    assert_int_equal(f[GENBLOOM_BLOCK_BYTES], 0x20);
    for (size_t i = 0; i < sizeof f; i++)
        if (i != GENBLOOM_BLOCK_BYTES)
            assert_int_equal(f[i], 0);
    assert_ptr_equal(genbloom_block(f, 2, key), f + GENBLOOM_BLOCK_BYTES);
    key[0] = 0x7f;
    assert_ptr_equal(genbloom_block(f, 2, key), f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizing),
        cmocka_unit_test(test_no_false_negatives_few_positives),
        cmocka_unit_test(test_bit_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
