/*
 * api/test_jsonparse: the fast parser must never disagree with jansson. Whatever jsonparse()
 * accepts, json_loadb() accepts too, with the same tree in the same member order; whatever
 * json_loadb() rejects, jsonparse() rejects (returns NULL). Checked on hand-picked edge cases
 * and on seeded random mutations of valid documents.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "api/jsonparse.h"

static char *dump(const json_t *j)
{
    return json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY |
                             JSON_REAL_PRECISION(17));
}

/* The property, for one input. Returns 1 when jsonparse decided (non-NULL), else 0. */
static int agree(const char *s, size_t len)
{
    json_error_t err;
    char *fixed = NULL;
    size_t flen = 0;
    json_t *fast = jsonparse(s, len);
    assert_int_equal(jsonparse_repair(s, len, &fixed, &flen), 0);
    json_t *ref = json_loadb(fixed ? fixed : s, flen, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    free(fixed);
    int decided = fast != NULL;
    if (fast) {
        if (!ref)
            fail_msg("jsonparse accepted what jansson rejects (%s): %.*s", err.text, (int)len, s);
        char *a = dump(fast), *b = dump(ref);
        assert_non_null(a);
        assert_non_null(b);
        if (strcmp(a, b) != 0)
            fail_msg("trees differ for %.*s:\n fast %s\n ref  %s", (int)len, s, a, b);
        free(a);
        free(b);
    }
    /* The same tree in an arena (main installed them): taken or not alike, equal when taken;
     * a text it does not take leaves no arena (and under ASan, no stray free). */
    jsonparse_spans_t *sp = NULL;
    jsonparse_arena_t *arena = NULL;
    json_t *in_arena = jsonparse_tree(s, len, &sp, &arena);
    assert_int_equal(in_arena != NULL, decided);
    assert_int_equal(arena != NULL, decided);
    if (in_arena) {
        char *a = dump(fast), *b = dump(in_arena);
        assert_string_equal(a, b);
        free(a);
        free(b);
    }
    jsonparse_arena_free(arena);
    jsonparse_spans_free(sp);
    json_decref(fast);
    json_decref(ref);
    return decided;
}

static void test_valid_documents(void **state)
{
    (void)state;
    static const char *const docs[] = {
        "{}",
        "[]",
        "{\"a\":1,\"b\":[true,false,null],\"c\":{\"d\":\"e\"}}",
        "  {\"batch\" : [ {\"type\":\"track\", \"event\":\"x\"} ] }  \n",
        "{\"k\":1,\"k\":2}", /* repeated key: first position, last value */
        "{\"a\":1,\"k\":1,\"b\":2,\"k\":[3]}",
        "\"plain\"",
        "\"esc \\\" \\\\ \\/ \\b \\f \\n \\r \\t\"",
        "\"\\u00e9\\u4e2d\\ud83d\\ude00\"",
        "\"caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80\"",
        "0",
        "-0",
        "123456789012345678",
        "-123456789012345678",
        "1.5",
        "-0.0",
        "1e10",
        "1E-10",
        "2.5e+3",
        "0.1",
        "19.99",
        "1.7976931348623157e308",
        "[1,[2,[3,[4,[5]]]]]",
        "{\"long\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}",
    };
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++)
        assert_int_equal(agree(docs[i], strlen(docs[i])), 1);
}

static void test_invalid_documents(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        " ",
        "{",
        "{\"a\":}",
        "{\"a\" 1}",
        "{\"a\":1,}",
        "[1,]",
        "[1 2]",
        "{} x",
        "{}{}",
        "01",
        "-",
        "1.",
        ".5",
        "1e",
        "1e+",
        "+1",
        "NaN",
        "Infinity",
        "tru",
        "nul",
        "\"unterminated",
        "\"bad \\x escape\"",
        "\"\\u12\"",
        "\"tab\there\"",    /* raw control character */
        "\"\xc3\"",         /* truncated UTF-8: U+FFFD, but decided by the repaired path */
        "\"\xc0\xaf\"",     /* overlong */
        "\"\xed\xa0\x80\"", /* UTF-8 encoded surrogate */
        "{\"k\\u0000\":1}", /* NUL in a key: U+FFFD, decided by the repaired path */
        "[\\ud800]",        /* an escape outside a string stays invalid */
        "[\xff]",
        "\"\xff\"",
        "1e999", /* overflow */
        "[\"a\" \"b\"]",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t len = strlen(bad[i]);
        agree(bad[i], len);
        assert_null(jsonparse(bad[i], len));
    }
    /* The trailing NUL case, which strlen cannot express. */
    assert_null(jsonparse("{\"a\":1}\0", 8));
}

/* A string as jsonparse returns it: its bytes must be want[0..wlen). */
static void want_string(const char *doc, const char *want, size_t wlen)
{
    json_t *j = jsonparse(doc, strlen(doc));
    if (!j)
        fail_msg("jsonparse did not decide %s", doc);
    assert_true(json_is_string(j));
    assert_int_equal(json_string_length(j), wlen);
    assert_memory_equal(json_string_value(j), want, wlen);
    json_decref(j);
    assert_int_equal(agree(doc, strlen(doc)), 1);
}

/* What JSON.stringify writes for a string cut inside a pair (and Go's encoding/json reads as
 * U+FFFD), and its \u0000: decided by the fast parser, the same as the repaired jansson path. */
static void test_stringify_escapes(void **state)
{
    (void)state;
    want_string("\"\\ud800\"", "\xef\xbf\xbd", 3);
    want_string("\"\\udc00\"", "\xef\xbf\xbd", 3);
    want_string("\"a\\ud83d\"", "a\xef\xbf\xbd", 4);
    want_string("\"\\ud800\\u0041\"",
                "\xef\xbf\xbd"
                "A",
                4);
    want_string("\"\\udc00\\ud800\"", "\xef\xbf\xbd\xef\xbf\xbd", 6);
    want_string("\"\\ud83d\\ud83d\\ude00\"", "\xef\xbf\xbd\xf0\x9f\x98\x80", 7);
    want_string("\"\\ud800\\\\\"", "\xef\xbf\xbd\\", 4);
    want_string("\"\\u0000\"", "\0", 1);
    want_string("\"a\\u0000b\"", "a\0b", 3);
    /* An escaped backslash before "ud800" is no escape of a surrogate. */
    want_string("\"\\\\ud800\"", "\\ud800", 6);
    const char *keyed = "{\"\\ud800\":\"\\udfff\"}";
    assert_int_equal(agree(keyed, strlen(keyed)), 1);

    /* The repair itself: equal-length escapes, U+FFFD bytes for bytes that are not UTF-8. */
    char *out = NULL;
    size_t n = 0;
    const char *doc = "{\"\\ud83d\\u0000\":\"\\u0000\\ud83d\\ude00\xff\"}";
    assert_int_equal(jsonparse_repair(doc, strlen(doc), &out, &n), 0);
    assert_non_null(out);
    assert_string_equal(out, "{\"\\ufffd\\ufffd\":\"\\u0000\\ud83d\\ude00\xef\xbf\xbd\"}");
    assert_int_equal(n, strlen(out));
    free(out);
    doc = "{\"a\":\"\\ud83d\\ude00\\u00e9\"}";
    assert_int_equal(jsonparse_repair(doc, strlen(doc), &out, &n), 0);
    assert_null(out);
    assert_int_equal(n, strlen(doc));
}

static void test_outside_the_subset_falls_back(void **state)
{
    (void)state;
    /* Nesting deeper than the limit: jansson decides (and does accept this). */
    char deep[2 * (JSONPARSE_MAX_DEPTH + 10) + 1];
    size_t n = 0;
    for (int i = 0; i < JSONPARSE_MAX_DEPTH + 10; i++)
        deep[n++] = '[';
    for (int i = 0; i < JSONPARSE_MAX_DEPTH + 10; i++)
        deep[n++] = ']';
    assert_int_equal(agree(deep, n), 0);
    /* A 400-digit integer: beyond a double as well, left to jansson (which refuses it). */
    char huge[401];
    memset(huge, '9', 400);
    huge[400] = '\0';
    assert_int_equal(agree(huge, 400), 0);
}

/* Integers beyond 64 bits (JSON.stringify(1e20) writes 100000000000000000000) read as the
 * nearest double, as JavaScript and Go read them; within 64 bits they stay integers. */
static void test_big_integers_read_as_reals(void **state)
{
    (void)state;
    static const struct {
        const char *doc;
        int integer; /* 1: stays an integer */
        double value;
    } cases[] = {
        {"9223372036854775807", 1, 9223372036854775807.0},
        {"-9223372036854775808", 1, -9223372036854775808.0},
        {"9223372036854775808", 0, 9223372036854775808.0},
        {"-9223372036854775809", 0, -9223372036854775809.0},
        {"100000000000000000000", 0, 1e20},
        {"18446744073709552000", 0, 18446744073709552000.0},
        {"[12345678901234567890123]", 0, 12345678901234567890123.0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *doc = cases[i].doc;
        assert_int_equal(agree(doc, strlen(doc)), 1);
        json_t *j = jsonparse(doc, strlen(doc));
        json_t *v = json_is_array(j) ? json_array_get(j, 0) : j;
        assert_int_equal(json_is_integer(v), cases[i].integer);
        assert_true(json_number_value(v) == cases[i].value);
        json_decref(j);
    }
    /* The repair adds ".0" only to such integers, never inside strings or to reals. */
    char *out = NULL;
    size_t n = 0;
    const char *doc = "{\"a\":100000000000000000000,\"b\":\"100000000000000000000\","
                      "\"c\":1e30,\"d\":-99999999999999999999,\"e\":[1,-0]}";
    assert_int_equal(jsonparse_repair(doc, strlen(doc), &out, &n), 0);
    assert_string_equal(out, "{\"a\":100000000000000000000.0,\"b\":\"100000000000000000000\","
                             "\"c\":1e30,\"d\":-99999999999999999999.0,\"e\":[1,-0]}");
    free(out);
    /* Leading zeros stay invalid: the repair never makes bad JSON good. */
    assert_int_equal(agree("000000000000000000000001", 24), 0);
    assert_null(jsonparse("000000000000000000000001", 24));
}

/* Seeded random mutations of valid documents: flips, deletions, insertions of JSON-ish bytes. */
static void test_mutations_agree(void **state)
{
    (void)state;
    static const char *const seeds[] = {
        "{\"batch\":[{\"type\":\"track\",\"userId\":\"u1\",\"event\":\"Order\",\"properties\":"
        "{\"revenue\":19.99,\"items\":[1,2,3],\"ok\":true,\"none\":null}}],\"sentAt\":"
        "\"2026-11-22T07:32:02.123Z\"}",
        "{\"a\":\"\\u00e9\\ud83d\\ude00\",\"b\":-1.5e-3,\"c\":[{},[],\"x\\ny\"]}",
        "[123456789012345678,-0.0,\"caf\xc3\xa9\",{\"k\":1,\"k\":2}]",
        "{\"cut\":\"x\\ud83d\",\"nul\":\"\\u0000\",\"k\\u0000\":\"\\udc00\\ud800\\\\\"}",
    };
    static const char alphabet[] = "{}[]\",:\\u0123456789.eE+-tfnrl \x80\xc3\xff";
    unsigned seed = 12345;
    unsigned decided = 0, total = 0;
    char buf[512];
    for (int round = 0; round < 20000; round++) {
        const char *src = seeds[round % (sizeof(seeds) / sizeof(seeds[0]))];
        size_t len = strlen(src);
        memcpy(buf, src, len);
        int edits = 1 + (int)(rand_r(&seed) % 3);
        for (int e = 0; e < edits && len > 0 && len < sizeof(buf) - 1; e++) {
            size_t at = (size_t)rand_r(&seed) % len;
            char ch = alphabet[(size_t)rand_r(&seed) % (sizeof(alphabet) - 1)];
            switch (rand_r(&seed) % 3) {
            case 0:
                buf[at] = ch;
                break;
            case 1:
                memmove(buf + at, buf + at + 1, len - at - 1);
                len--;
                break;
            default:
                memmove(buf + at + 1, buf + at, len - at);
                buf[at] = ch;
                len++;
                break;
            }
        }
        decided += (unsigned)agree(buf, len);
        total++;
    }
    /* Some mutants stay valid and must have been decided by the fast path, not all fallback. */
    assert_true(decided > 100);
    assert_true(decided < total);
}

int main(void)
{
    jsonparse_use_arenas(); /* agree() checks the arena trees too */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_documents),
        cmocka_unit_test(test_invalid_documents),
        cmocka_unit_test(test_stringify_escapes),
        cmocka_unit_test(test_big_integers_read_as_reals),
        cmocka_unit_test(test_outside_the_subset_falls_back),
        cmocka_unit_test(test_mutations_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
