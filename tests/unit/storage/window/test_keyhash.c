/* test_keyhash.c: SipHash-2-4-128 reference vectors and the keyed (source, messageId) hash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "storage/window/keyhash.h"

/* From the SipHash reference implementation (vectors.h, vectors_sip128): key 00..0f, msg 00..len-1.
 */
static const char *const vectors[] = {
    "a3817f04ba25a8e66df67214c7550293", "da87c1d86b99af44347659119b22fc45",
    "8177228da4a45dc7fca38bdef60affe4", "9c70b60c5267a94e5f33b6b02985ed51",
    "f88164c12d9c8faf7d0f6e7c7bcd5579", "1368875980776f8854527a07690e9627",
    "14eeca338b208613485ea0308fd7a15e", "a1f1ebbed8dbc153c0b84aa61ff08239",
    "3b62a9ba6258f5610f83e264f31497b4", "264499060ad9baabc47f8b02bb6d71ed",
};

static void hex(const uint8_t *p, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", p[i]);
}

static void seq_key(uint8_t key[16])
{
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)i;
}

static void test_reference_vectors(void **state)
{
    (void)state;
    uint8_t key[16], msg[16], out[16];
    char got[33];
    seq_key(key);
    for (size_t i = 0; i < sizeof(msg); i++)
        msg[i] = (uint8_t)i;
    for (size_t len = 0; len < sizeof(vectors) / sizeof(vectors[0]); len++) {
        keyhash_siphash128(key, msg, len, out);
        hex(out, sizeof(out), got);
        assert_string_equal(got, vectors[len]);
    }
}

/* keyhash() feeds its input in pieces; the result must equal hashing the concatenation at once. */
static void test_keyhash_matches_flat_encoding(void **state)
{
    (void)state;
    uint8_t secret[16], a[16], b[16];
    uint8_t flat[64];
    seq_key(secret);
    const char *src = "web-source", *mid = "0b7c1d1e-5b1a-4c3f-9e51-message-id";
    size_t sl = strlen(src), ml = strlen(mid);
    flat[0] = (uint8_t)sl;
    flat[1] = flat[2] = flat[3] = 0;
    memcpy(flat + 4, src, sl);
    memcpy(flat + 4 + sl, mid, ml);
    keyhash(secret, src, sl, mid, ml, a);
    keyhash_siphash128(secret, flat, 4 + sl + ml, b);
    keyhash_set_source(b, keyhash_source_tag(secret, src, sl));
    assert_memory_equal(a, b, 16);
}

/* Every split of a buffer fed through keyhash's incremental path gives the one-shot hash. */
static void test_incremental_boundaries(void **state)
{
    (void)state;
    uint8_t secret[16], a[16], b[16], flat[40];
    char buf[36];
    seq_key(secret);
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (char)('a' + i % 26);
    for (size_t sl = 0; sl <= 20; sl++) {
        size_t ml = sizeof(buf) - sl;
        flat[0] = (uint8_t)sl;
        flat[1] = flat[2] = flat[3] = 0;
        memcpy(flat + 4, buf, sizeof(buf));
        keyhash(secret, buf, sl, buf + sl, ml, a);
        keyhash_siphash128(secret, flat, 4 + sizeof(buf), b);
        keyhash_set_source(b, keyhash_source_tag(secret, buf, sl));
        assert_memory_equal(a, b, 16);
    }
}

/* keyhash() of two strings. */
static void hash(const uint8_t secret[KEYHASH_SECRET_LEN], const char *source, const char *mid,
                 uint8_t out[KEYHASH_LEN])
{
    keyhash(secret, source, strlen(source), mid, strlen(mid), out);
}

static void test_keyhash_separates_fields(void **state)
{
    (void)state;
    uint8_t secret[16], a[16], b[16], c[16];
    seq_key(secret);
    hash(secret, "ab", "c", a);
    hash(secret, "a", "bc", b);
    hash(secret, "", "abc", c);
    assert_memory_not_equal(a, b, 16);
    assert_memory_not_equal(a, c, 16);
    assert_memory_not_equal(b, c, 16);
}

static void test_keyhash_secret_matters(void **state)
{
    (void)state;
    uint8_t s1[16], s2[16], a[16], b[16];
    seq_key(s1);
    memcpy(s2, s1, 16);
    s2[15] ^= 0x01;
    hash(s1, "default", "m-1", a);
    hash(s2, "default", "m-1", b);
    assert_memory_not_equal(a, b, 16);
}

static void test_keyhash_deterministic(void **state)
{
    (void)state;
    uint8_t secret[16], a[16], b[16], c[16];
    seq_key(secret);
    hash(secret, "default", "m-1", a);
    hash(secret, "default", "m-1", b);
    hash(secret, "default", "m-2", c);
    assert_memory_equal(a, b, 16);
    assert_memory_not_equal(a, c, 16);
}

/* Every key of a source carries that source's tag, and only there: the rest is the hash. */
static void test_keys_carry_their_source(void **state)
{
    (void)state;
    uint8_t secret[16], a[16], b[16], c[16];
    seq_key(secret);
    hash(secret, "web", "m-1", a);
    hash(secret, "web", "m-2", b);
    hash(secret, "ios", "m-1", c);
    uint32_t web = keyhash_source_tag(secret, "web", 3), ios = keyhash_source_tag(secret, "ios", 3);
    assert_int_not_equal(web, ios);
    assert_int_equal(keyhash_source(a), web);
    assert_int_equal(keyhash_source(b), web);
    assert_int_equal(keyhash_source(c), ios);
    assert_memory_not_equal(a, b, KEYHASH_TAG_AT); /* the hash's bytes still differ */
    /* Retagging is idempotent: a tagged key stays itself. */
    memcpy(c, a, 16);
    keyhash_set_source(c, web);
    assert_memory_equal(a, c, 16);
    /* The tag is keyed like the hash: another data dir's secret gives another tag. */
    secret[0] ^= 1;
    assert_int_not_equal(keyhash_source_tag(secret, "web", 3), web);
}

static void test_random_fills(void **state)
{
    (void)state;
    uint8_t a[64], b[64], zero[64];
    memset(a, 0, sizeof(a));
    memset(b, 0, sizeof(b));
    memset(zero, 0, sizeof(zero));
    assert_int_equal(keyhash_random(a, sizeof(a)), 0);
    assert_int_equal(keyhash_random(b, sizeof(b)), 0);
    /* 512 random bits all zero, or two draws equal, is a broken generator, not bad luck. */
    assert_memory_not_equal(a, zero, sizeof(a));
    assert_memory_not_equal(a, b, sizeof(a));
    /* The tail is filled too, not only a prefix. */
    assert_memory_not_equal(a + 48, zero, 16);
    assert_int_equal(keyhash_random(a, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_vectors),
        cmocka_unit_test(test_keyhash_matches_flat_encoding),
        cmocka_unit_test(test_incremental_boundaries),
        cmocka_unit_test(test_keyhash_separates_fields),
        cmocka_unit_test(test_keyhash_secret_matters),
        cmocka_unit_test(test_keyhash_deterministic),
        cmocka_unit_test(test_keys_carry_their_source),
        cmocka_unit_test(test_random_fills),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
