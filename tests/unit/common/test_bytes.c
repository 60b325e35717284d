/* common/test_bytes.c: the byte order of common/bytes.h, pinned to literal bytes: every on-disk
 * format depends on it, so a helper that changed order would silently break old files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/bytes.h"

static void test_little_endian(void **state)
{
    (void)state;
    uint8_t b[8];
    bytes_put_le64(b, 0x0807060504030201ull);
    const uint8_t want[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    assert_memory_equal(b, want, 8);
    assert_int_equal(bytes_get_le64(b), 0x0807060504030201ull);
    assert_int_equal(bytes_get_le32(b), 0x04030201u);
    bytes_put_le32(b, 0xa1b2c3d4u);
    const uint8_t want32[4] = {0xd4, 0xc3, 0xb2, 0xa1};
    assert_memory_equal(b, want32, 4);
    assert_int_equal(b[4], 5); /* only four bytes written */
}

/* The 6-byte fields of generation records: the low bytes only, the neighbours untouched. */
static void test_partial_width(void **state)
{
    (void)state;
    uint8_t b[8] = {0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee};
    bytes_put_le(b + 1, 0xffff0000aabbccddull, 6);
    const uint8_t want[8] = {0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x00, 0x00, 0xee};
    assert_memory_equal(b, want, 8);
    assert_int_equal(bytes_get_le(b + 1, 6), 0x0000aabbccddull);
}

/* Big-endian: memcmp order is numeric order (keys sort by their leading bytes). */
static void test_big_endian_sorts(void **state)
{
    (void)state;
    uint8_t a[8], b[8];
    bytes_put_be32(a, 0x01020304u);
    const uint8_t want[4] = {1, 2, 3, 4};
    assert_memory_equal(a, want, 4);
    assert_int_equal(bytes_get_be32(a), 0x01020304u);
    bytes_put_be32(a, 0x000000ffu);
    bytes_put_be32(a + 4, 0);
    bytes_put_be32(b, 0x00000100u);
    bytes_put_be32(b + 4, 0);
    assert_true(memcmp(a, b, 8) < 0);
    assert_true(bytes_get_be64(a) < bytes_get_be64(b));
    assert_int_equal(bytes_get_be64(b), 0x0000010000000000ull);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_little_endian),
        cmocka_unit_test(test_partial_width),
        cmocka_unit_test(test_big_endian_sorts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
