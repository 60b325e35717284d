/* Unit tests for api/auth: base64, HTTP Basic parsing (user or password as key) and key lookup. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/auth.h"

static const api_write_key_t KEYS[] = {
    {"k_web", "web"},
    {"k_ios", "ios"},
    {"k_web2", "web2"}, /* k_web is a prefix of it: lookup must not stop at a prefix */
};
#define NKEYS (sizeof(KEYS) / sizeof(KEYS[0]))

static void test_base64(void **state)
{
    static const struct {
        const char *in, *out;
    } ok[] = {
        {"", ""},
        {"YQ==", "a"},
        {"YQ", "a"},
        {"YWI=", "ab"},
        {"YWI", "ab"},
        {"YWJj", "abc"},
        {"a193ZWI6", "k_web:"},
        {"Ojpr", "::k"},
        {"+/+/", "\xfb\xff\xbf"},
    };
    static const char *const bad[] = {
        "Y",        /* 6 bits: no byte */
        "YQ=",      /* padding that does not complete a quantum */
        "Y===",     /* too much padding */
        "====",     /* padding only */
        "YR==",     /* non-zero leftover bits: non-canonical */
        "YW I=",    /* space */
        "YW-_",     /* URL-safe alphabet is not Basic's */
        "YQ==YQ==", /* padding in the middle */
        "YWJj\n",
    };
    unsigned char out[64];
    size_t n;
    (void)state;
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        n = 999;
        if (auth_base64_decode(ok[i].in, strlen(ok[i].in), out, &n) != 0)
            fail_msg("rejected %s", ok[i].in);
        assert_int_equal(n, strlen(ok[i].out));
        assert_memory_equal(out, ok[i].out, n);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (auth_base64_decode(bad[i], strlen(bad[i]), out, &n) == 0)
            fail_msg("accepted bad base64 \"%s\"", bad[i]);
}

/* Runs auth_basic_key and checks the status and, for AUTH_OK, the key. */
static void basic(const char *header, int want_rc, const char *want_key)
{
    char *key = (char *)"sentinel";
    size_t len = 77;
    int rc = auth_basic_key(header, &key, &len);
    if (rc != want_rc)
        fail_msg("header \"%s\": rc %d want %d", header ? header : "(null)", rc, want_rc);
    if (want_rc == AUTH_OK) {
        assert_non_null(key);
        assert_string_equal(key, want_key);
        assert_int_equal(len, strlen(want_key));
    } else {
        assert_null(key);
        assert_int_equal(len, 0);
    }
    free(key);
}

static void test_basic(void **state)
{
    (void)state;
    basic("Basic a193ZWI6", AUTH_OK, "k_web");         /* "k_web:" */
    basic("basic a193ZWI6", AUTH_OK, "k_web");         /* scheme is case-insensitive */
    basic("BASIC   a193ZWI6  ", AUTH_OK, "k_web");     /* extra blanks */
    basic("Basic a193ZWI=", AUTH_OK, "k_web");         /* "k_web", no colon */
    basic("Basic Omtfd2Vi", AUTH_OK, "k_web");         /* ":k_web": password is the key */
    basic("Basic a193ZWI6c2VjcmV0", AUTH_OK, "k_web"); /* "k_web:secret": user wins */
    basic("Basic a193ZWI6Og==", AUTH_OK, "k_web");     /* "k_web::" */
    basic("Basic Ojo=", AUTH_OK, ":");                 /* "::": empty user, password ":" */
    basic(NULL, AUTH_NONE, NULL);
    basic("", AUTH_NONE, NULL);
    basic("Bearer a193ZWI6", AUTH_NONE, NULL);
    basic("Basica193ZWI6", AUTH_NONE, NULL);
    basic("Basic Og==", AUTH_NONE, NULL); /* ":" : neither part */
    basic("Basic ", AUTH_NONE, NULL);     /* nothing decoded */
    basic("Basic !!!!", AUTH_MALFORMED, NULL);
    basic("Basic a193ZWI6=", AUTH_MALFORMED, NULL);
    basic("Basic AGs=", AUTH_MALFORMED, NULL); /* "\0k": NUL inside credentials */
}

static void test_lookup(void **state)
{
    (void)state;
    const api_write_key_t *k = auth_lookup(KEYS, NKEYS, "k_web", 5);
    assert_ptr_equal(k, &KEYS[0]);
    assert_string_equal(k->source, "web");
    assert_ptr_equal(auth_lookup(KEYS, NKEYS, "k_ios", 5), &KEYS[1]);
    assert_ptr_equal(auth_lookup(KEYS, NKEYS, "k_web2", 6), &KEYS[2]);
    assert_null(auth_lookup(KEYS, NKEYS, "k_we", 4));    /* prefix of a key */
    assert_null(auth_lookup(KEYS, NKEYS, "k_web22", 7)); /* key is a prefix of it */
    assert_null(auth_lookup(KEYS, NKEYS, "K_WEB", 5));   /* case matters */
    assert_null(auth_lookup(KEYS, NKEYS, "", 0));
    assert_null(auth_lookup(KEYS, NKEYS, NULL, 0));
    assert_null(auth_lookup(KEYS, 0, "k_web", 5));
    /* Length is explicit: a body key with a NUL after "k_web" is not "k_web". */
    assert_null(auth_lookup(KEYS, NKEYS, "k_web\0x", 7));
}

static void test_equal(void **state)
{
    (void)state;
    assert_true(auth_equal("abc", 3, "abc", 3));
    assert_false(auth_equal("abd", 3, "abc", 3));
    assert_false(auth_equal("ab", 2, "abc", 3));
    assert_false(auth_equal("abcd", 4, "abc", 3));
    assert_false(auth_equal("ab\0", 3, "ab", 2));
    assert_true(auth_equal("", 0, "", 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base64),
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_lookup),
        cmocka_unit_test(test_equal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
