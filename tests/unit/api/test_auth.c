/* Unit tests for api/auth: base64, HTTP Basic parsing, key lookup, keys files and key sets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <unistd.h>

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

/* Bearer: the token borrowed from the header, blanks around it dropped; other schemes are none. */
static void test_bearer(void **state)
{
    (void)state;
    const char *tok = NULL;
    size_t len = 0;
    assert_int_equal(auth_bearer_token("Bearer  s3cret \t", &tok, &len), AUTH_OK);
    assert_int_equal(len, 6);
    assert_memory_equal(tok, "s3cret", 6);
    assert_int_equal(auth_bearer_token("bearer\tx", &tok, &len), AUTH_OK);
    assert_int_equal(len, 1);
    assert_int_equal(auth_bearer_token("Bearer ", &tok, &len), AUTH_OK);
    assert_int_equal(len, 0);
    assert_int_equal(auth_bearer_token("Bearerx", &tok, &len), AUTH_NONE);
    assert_null(tok);
    assert_int_equal(auth_bearer_token("Basic eDo=", &tok, &len), AUTH_NONE);
    assert_int_equal(auth_bearer_token(NULL, &tok, &len), AUTH_NONE);
    assert_null(tok);
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

/* ---- keys files ---- */

/* Parses `text` (NUL-terminated) over `base`; returns the status, keys in *out / *n. */
static int parse(const char *text, const api_write_key_t *base, size_t nbase, api_write_key_t **out,
                 size_t *n, char *err, size_t errlen)
{
    err[0] = '\0';
    return auth_keys_parse(text, strlen(text), "keys.txt", base, nbase, out, n, err, errlen);
}

static void test_keys_file_ok(void **state)
{
    api_write_key_t *k = NULL;
    size_t n = 0;
    char err[256];
    (void)state;

    const char *text = "# ingestd write keys\n"
                       "\n"
                       "wk_one\n"
                       "   wk_two:ios   \n"
                       "\t# indented comment\n"
                       "wk_three:web:eu\r\n" /* CRLF; the first ':' separates */
                       "wk#hash\n"           /* '#' inside a key is part of it */
                       "wk_last:android";    /* no final newline */
    assert_int_equal(parse(text, KEYS, 1, &k, &n, err, sizeof err), 0);
    assert_int_equal(n, 6);
    assert_string_equal(k[0].key, "k_web"); /* base first */
    assert_string_equal(k[0].source, "web");
    assert_string_equal(k[1].key, "wk_one");
    assert_string_equal(k[1].source, "default");
    assert_string_equal(k[2].key, "wk_two");
    assert_string_equal(k[2].source, "ios");
    assert_string_equal(k[3].key, "wk_three");
    assert_string_equal(k[3].source, "web:eu");
    assert_string_equal(k[4].key, "wk#hash");
    assert_string_equal(k[5].key, "wk_last");
    assert_string_equal(k[5].source, "android");
    auth_keys_free(k, n);

    /* Nothing but comments over no base: zero keys is the caller's call. */
    assert_int_equal(parse("# none yet\n\n", NULL, 0, &k, &n, err, sizeof err), 0);
    assert_int_equal(n, 0);
    auth_keys_free(k, n);
    auth_keys_free(NULL, 0);
}

/* Every bad line is refused with "name:line: reason", and the reason never holds the key. */
static void test_keys_file_errors(void **state)
{
    static const struct {
        const char *text;
        const char *want; /* the whole error */
    } bad[] = {
        {"ok1\n:src\n", "keys.txt:2: empty write key"},
        {"ok1\n\nsecret1:\n", "keys.txt:3: empty source after ':'"},
        {"secret1 secret2\n", "keys.txt:1: blank, control character or ',' in a write key or "
                              "source (one KEY[:SOURCE] per line)"},
        {"secret1,secret2\n", "keys.txt:1: blank, control character or ',' in a write key or "
                              "source (one KEY[:SOURCE] per line)"},
        {"ok1\nsecret\x01x\n", "keys.txt:2: blank, control character or ',' in a write key or "
                               "source (one KEY[:SOURCE] per line)"},
        {"ok1\nsecret1:my src\n", "keys.txt:2: blank, control character or ',' in a write key or "
                                  "source (one KEY[:SOURCE] per line)"},
        {"secret1\nok2\nsecret1:other\n", "keys.txt:3: write key given twice (also on line 1)"},
        {"ok1\nk_web:elsewhere\n", "keys.txt:2: write key also given by --write-key or "
                                   "INGESTD_WRITE_KEY"},
    };
    api_write_key_t *k = NULL;
    size_t n = 0;
    char err[256];
    (void)state;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(parse(bad[i].text, KEYS, NKEYS, &k, &n, err, sizeof err), -1);
        assert_null(k);
        assert_int_equal(n, 0);
        assert_string_equal(err, bad[i].want);
        assert_null(strstr(err, "secret"));
    }

    /* A NUL byte inside a line (the length is explicit, so it is seen). */
    static const char nul[] = "ok1\nsec\0ret\n";
    assert_int_equal(auth_keys_parse(nul, sizeof(nul) - 1, "f", NULL, 0, &k, &n, err, sizeof err),
                     -1);
    assert_string_equal(err, "f:2: blank, control character or ',' in a write key or source "
                             "(one KEY[:SOURCE] per line)");

    /* key + source at most AUTH_KEY_BYTES ("default" counts when no source is given). */
    char line[AUTH_KEY_BYTES + 8];
    memset(line, 'k', sizeof line);
    line[AUTH_KEY_BYTES - 7] = '\0'; /* + "default" = 510 */
    assert_int_equal(parse(line, NULL, 0, &k, &n, err, sizeof err), 0);
    assert_int_equal(n, 1);
    auth_keys_free(k, n);
    line[AUTH_KEY_BYTES - 7] = 'k';
    line[AUTH_KEY_BYTES - 6] = '\0';
    assert_int_equal(parse(line, NULL, 0, &k, &n, err, sizeof err), -1);
    assert_string_equal(err, "keys.txt:1: write key or source too long (max 510 bytes)");
    line[AUTH_KEY_BYTES - 6] = 'k';
    line[100] = ':'; /* an explicit source: 510 bytes of key and source */
    line[AUTH_KEY_BYTES + 1] = '\0';
    assert_int_equal(parse(line, NULL, 0, &k, &n, err, sizeof err), 0);
    auth_keys_free(k, n);
    line[AUTH_KEY_BYTES + 1] = 'x';
    line[AUTH_KEY_BYTES + 2] = '\0';
    assert_int_equal(parse(line, NULL, 0, &k, &n, err, sizeof err), -1);
    assert_string_equal(err, "keys.txt:1: write key or source too long (max 510 bytes)");
}

/* More than AUTH_MAX_KEYS keys in all is refused at the line that passes the bound. */
static void test_keys_file_too_many(void **state)
{
    size_t cap = (AUTH_MAX_KEYS + 1) * 12 + 1, used = 0;
    char *text = malloc(cap);
    api_write_key_t *k = NULL;
    size_t n = 0;
    char err[256], want[128];
    (void)state;

    assert_non_null(text);
    for (int i = 0; i < AUTH_MAX_KEYS - 1; i++)
        used += (size_t)snprintf(text + used, cap - used, "key%07d\n", i);
    /* With one base key that is exactly the bound. */
    assert_int_equal(parse(text, KEYS, 1, &k, &n, err, sizeof err), 0);
    assert_int_equal(n, AUTH_MAX_KEYS);
    auth_keys_free(k, n);
    snprintf(text + used, cap - used, "one_more\n");
    assert_int_equal(parse(text, KEYS, 1, &k, &n, err, sizeof err), -1);
    snprintf(want, sizeof want, "keys.txt:%d: more than %d write keys in all", AUTH_MAX_KEYS,
             AUTH_MAX_KEYS);
    assert_string_equal(err, want);
    free(text);
}

static void test_keys_file_load(void **state)
{
    char path[] = "/tmp/ingestd-keys-XXXXXX";
    api_write_key_t *k = NULL;
    size_t n = 0;
    char err[512];
    (void)state;

    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs("# test\nfile_key:src\n", f);
    fclose(f);
    assert_int_equal(auth_keys_load(path, KEYS, NKEYS, &k, &n, err, sizeof err), 0);
    assert_int_equal(n, NKEYS + 1);
    assert_string_equal(k[NKEYS].key, "file_key");
    assert_string_equal(k[NKEYS].source, "src");
    auth_keys_free(k, n);

    /* A bad line names the path. */
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("good\n\nbad key\n", f);
    fclose(f);
    assert_int_equal(auth_keys_load(path, NULL, 0, &k, &n, err, sizeof err), -1);
    char want[128];
    snprintf(want, sizeof want, "%s:3: ", path);
    assert_memory_equal(err, want, strlen(want));

    /* Larger than AUTH_MAX_FILE_SIZE: refused whole. */
    f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i <= AUTH_MAX_FILE_SIZE / 64; i++)
        fputs("# padding padding padding padding padding padding padding paddi\n", f);
    fclose(f);
    assert_int_equal(auth_keys_load(path, NULL, 0, &k, &n, err, sizeof err), -1);
    assert_non_null(strstr(err, "larger than"));

    unlink(path);
    assert_int_equal(auth_keys_load(path, NULL, 0, &k, &n, err, sizeof err), -1);
    assert_non_null(strstr(err, "No such file"));
}

/* ---- key sets ---- */

static void test_keyset(void **state)
{
    auth_keyset_t *ks = NULL, *ks2 = NULL;
    ratelimit_t *rl = NULL, *rl2 = NULL;
    uint32_t wait = 0;
    (void)state;

    /* Without a rate limit: lookups, no buckets. */
    assert_int_equal(auth_keyset_new(KEYS, NKEYS, 0, NULL, 0, &ks), 0);
    assert_int_equal(auth_keyset_size(ks), NKEYS);
    const api_write_key_t *k = auth_keyset_find(ks, "k_ios", 5, &rl);
    assert_non_null(k);
    assert_string_equal(k->source, "ios");
    assert_ptr_not_equal(k, &KEYS[1]); /* a copy */
    assert_null(rl);
    assert_null(auth_keyset_find(ks, "k_io", 4, &rl));
    assert_non_null(auth_keyset_find(ks, "k_ios", 5, NULL)); /* limit may be NULL */
    auth_keyset_release(ks);

    /* With one: each key has its own bucket. */
    assert_int_equal(auth_keyset_new(KEYS, NKEYS, 10, NULL, 1000, &ks), 0);
    assert_non_null(auth_keyset_find(ks, "k_web", 5, &rl));
    assert_non_null(rl);
    assert_non_null(auth_keyset_find(ks, "k_ios", 5, &rl2));
    assert_ptr_not_equal(rl, rl2);
    assert_int_equal(ratelimit_take(rl, 10, 1000, &wait), RATELIMIT_OK);
    assert_int_equal(ratelimit_take(rl, 1, 1000, &wait), RATELIMIT_LIMITED);
    assert_int_equal(ratelimit_take(rl2, 10, 1000, &wait), RATELIMIT_OK);

    /* A reload: k_web keeps its empty bucket, a new key starts full; the old set lives on while
     * someone holds it. */
    static const api_write_key_t next[] = {{"k_new", NULL}, {"k_web", "web"}};
    auth_keyset_retain(ks); /* a request still using the old set */
    assert_int_equal(auth_keyset_new(next, 2, 10, ks, 1000, &ks2), 0);
    auth_keyset_release(ks); /* the api's reference */
    assert_non_null(auth_keyset_find(ks2, "k_web", 5, &rl2));
    assert_int_equal(ratelimit_take(rl2, 1, 1000, &wait), RATELIMIT_LIMITED);
    k = auth_keyset_find(ks2, "k_new", 5, &rl2);
    assert_non_null(k);
    assert_string_equal(k->source, "default");
    assert_int_equal(ratelimit_take(rl2, 10, 1000, &wait), RATELIMIT_OK);
    assert_null(auth_keyset_find(ks2, "k_ios", 5, NULL));    /* gone */
    assert_non_null(auth_keyset_find(ks, "k_ios", 5, NULL)); /* but the old set still has it */
    auth_keyset_release(ks);                                 /* the request ends: freed */
    auth_keyset_release(ks2);
    auth_keyset_release(NULL);

    /* An empty key is refused. */
    static const api_write_key_t empty[] = {{"", "x"}};
    assert_int_equal(auth_keyset_new(empty, 1, 0, NULL, 0, &ks), -1);
    assert_null(ks);
    /* No keys at all is a valid (if useless) set. */
    assert_int_equal(auth_keyset_new(NULL, 0, 5, NULL, 0, &ks), 0);
    assert_null(auth_keyset_find(ks, "k", 1, NULL));
    auth_keyset_release(ks);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base64),
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_bearer),
        cmocka_unit_test(test_lookup),
        cmocka_unit_test(test_equal),
        cmocka_unit_test(test_keys_file_ok),
        cmocka_unit_test(test_keys_file_errors),
        cmocka_unit_test(test_keys_file_too_many),
        cmocka_unit_test(test_keys_file_load),
        cmocka_unit_test(test_keyset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
