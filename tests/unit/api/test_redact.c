/* Unit tests for api/redact: write keys cut out of kept bytes, valid JSON or not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/redact.h"

/* redact_write_keys(in) as a NUL-terminated string (in itself when nothing changed). */
static char *redacted(const char *in)
{
    char *out = NULL;
    size_t n = 0;
    assert_int_equal(redact_write_keys(in, strlen(in), &out, &n), 0);
    if (!out)
        return strdup(in);
    char *s = malloc(n + 1);
    assert_non_null(s);
    memcpy(s, out, n);
    s[n] = '\0';
    free(out);
    return s;
}

static void test_cases(void **state)
{
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"{\"writeKey\":\"k1\"}", "{\"writeKey\":\"[redacted]\"}"},
        {"{\"writeKey\" : \n \"k1\",\"a\":1}", "{\"writeKey\" : \n \"[redacted]\",\"a\":1}"},
        {"{\"a\":{\"writeKey\":\"x\\\"y\"},\"writeKey\":\"z\"}",
         "{\"a\":{\"writeKey\":\"[redacted]\"},\"writeKey\":\"[redacted]\"}"},
        {"{\"write\\u004Bey\":\"k1\"}", "{\"write\\u004Bey\":\"[redacted]\"}"},
        {"{\"writeKey\":\"cut sho", "{\"writeKey\":\"[redacted]"},
        {"garbage \"a\":x\" \"writeKey\":\"k\" more",
         "garbage \"a\":x\" \"writeKey\":\"[redacted]\" more"},
        {"{\"writeKey\":\"\"}", "{\"writeKey\":\"[redacted]\"}"},
        /* Not a key: another name, a non-string value, the name inside a longer one. */
        {"{\"writeKeys\":\"k\",\"writeKey\":12,\"xwriteKey\":\"k\"}",
         "{\"writeKeys\":\"k\",\"writeKey\":12,\"xwriteKey\":\"k\"}"},
        {"{\"writeKey\"", "{\"writeKey\""},
        {"", ""},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *got = redacted(cases[i].in);
        assert_string_equal(got, cases[i].want);
        free(got);
    }
}

static void test_many_short_keys_fit(void **state)
{
    /* The output grows by the mark per key: the bound must hold for the densest input. */
    char in[12 * 100 + 1] = "";
    (void)state;
    for (int i = 0; i < 100; i++)
        strcat(in, "\"writeKey\":\"");
    char *got = redacted(in);
    assert_non_null(strstr(got, "[redacted]"));
    free(got);
}

static void test_find(void **state)
{
    size_t n = 0;
    const char *s = "{\"batch\":[],\"writeKey\":\"abc\\\"d\",\"writeKey\":\"second\"}";
    (void)state;
    const char *k = redact_find_write_key(s, strlen(s), &n);
    assert_non_null(k);
    assert_int_equal(n, 6);
    assert_memory_equal(k, "abc\\\"d", 6);
    assert_null(redact_find_write_key("{\"writeKey\":\"\"}", 15, &n));
    assert_null(redact_find_write_key("{}", 2, &n));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_many_short_keys_fit),
        cmocka_unit_test(test_find),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
