/* test_pending.c: the pending generation: order, sequence numbers, the index, reuse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "storage/window/pending.h"

/* A distinct key per integer; the first 8 bytes (the hash) collide on purpose for i % 4. */
static void mkkey(uint64_t i, uint8_t key[KEYHASH_LEN])
{
    uint64_t h = (i % 4) * 0x9e3779b97f4a7c15ull; /* only four hash values */
    memcpy(key, &h, 8);
    memcpy(key + 8, &i, 8);
}

static void test_add_find_order(void **state)
{
    (void)state;
    pending_t *p = pending_new(1000);
    uint8_t key[KEYHASH_LEN];
    uint64_t seq;
    assert_non_null(p);
    assert_int_equal(pending_count(p), 0);
    assert_int_equal(pending_end(p), 1000);
    /* Far more than the first capacity, with colliding hashes: growth and probing. */
    for (uint64_t i = 0; i < 5000; i++) {
        mkkey(i, key);
        assert_int_equal(pending_add(p, key, (int64_t)i * 10, i + 7, &seq), 0);
        assert_int_equal(seq, 1000 + i);
    }
    assert_int_equal(pending_count(p), 5000);
    assert_int_equal(pending_base(p), 1000);
    assert_int_equal(pending_end(p), 6000);
    for (uint64_t i = 0; i < 5000; i++) {
        mkkey(i, key);
        const store_entry_t *it = pending_find(p, key);
        assert_non_null(it);
        assert_int_equal(it->seq, 1000 + i);
        assert_int_equal(it->received_ms, (int64_t)i * 10);
        assert_int_equal(it->offset, i + 7);
        assert_ptr_equal(pending_at_seq(p, 1000 + i), it);
        assert_ptr_equal(&pending_items(p)[i], it);
    }
    mkkey(5000, key);
    assert_null(pending_find(p, key));
    assert_null(pending_at_seq(p, 999));
    assert_null(pending_at_seq(p, 6000));
    pending_free(p);
}

/* A key added twice: the index names the newest item; both stay in the order. */
static void test_newest_wins(void **state)
{
    (void)state;
    pending_t *p = pending_new(0);
    uint8_t key[KEYHASH_LEN];
    uint64_t seq;
    mkkey(42, key);
    assert_int_equal(pending_add(p, key, 1, 10, &seq), 0);
    mkkey(43, key);
    assert_int_equal(pending_add(p, key, 2, 11, &seq), 0);
    mkkey(42, key);
    assert_int_equal(pending_add(p, key, 3, 12, &seq), 0);
    assert_int_equal(seq, 2);
    const store_entry_t *it = pending_find(p, key);
    assert_non_null(it);
    assert_int_equal(it->seq, 2);
    assert_int_equal(it->received_ms, 3);
    assert_int_equal(pending_count(p), 3);
    assert_int_equal(pending_items(p)[0].offset, 10);
    pending_free(p);
}

static void test_reset(void **state)
{
    (void)state;
    pending_t *p = pending_new(5);
    uint8_t key[KEYHASH_LEN];
    uint64_t seq;
    for (uint64_t i = 0; i < 3000; i++) {
        mkkey(i, key);
        assert_int_equal(pending_add(p, key, 0, i, &seq), 0);
    }
    pending_reset(p, 3005);
    assert_int_equal(pending_count(p), 0);
    assert_int_equal(pending_end(p), 3005);
    mkkey(1, key);
    assert_null(pending_find(p, key));
    assert_int_equal(pending_add(p, key, 0, 0, &seq), 0);
    assert_int_equal(seq, 3005);
    assert_non_null(pending_find(p, key));
    mkkey(2, key);
    assert_null(pending_find(p, key));
    pending_free(p);
    pending_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_find_order),
        cmocka_unit_test(test_newest_wins),
        cmocka_unit_test(test_reset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
