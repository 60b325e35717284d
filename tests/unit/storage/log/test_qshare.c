/* Unit tests for storage/qshare: bytes per source and the share test of the quarantine bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "storage/log/qshare.h"

#define REC(src)                                                                                   \
    "{\"reason\":\"r\",\"error\":\",\\\"source\\\":x\",\"source\":" src ",\"receivedAt\":null}"

static void test_source_field(void **state)
{
    const char *s;
    size_t n;
    const char *rec = REC("\"web\"");
    (void)state;
    /* The escaped `,\"source\":` inside the error string is not the field. */
    qshare_source(rec, strlen(rec), &s, &n);
    assert_int_equal(n, 5);
    assert_memory_equal(s, "\"web\"", 5);
    qshare_source("{}", 2, &s, &n);
    assert_int_equal(n, 0);
}

static void test_shares(void **state)
{
    const char *a = REC("\"a\""), *b = REC("\"b\""), *legacy = REC("null");
    qshare_t *t = qshare_new();
    (void)state;
    assert_non_null(t);
    assert_int_equal(qshare_add(t, a, strlen(a), 900), 0);
    assert_int_equal(qshare_add(t, b, strlen(b), 100), 0);
    assert_int_equal(qshare_sources(t), 2);
    /* 1,000 bytes under a bound of 800: a is over its 400, b within. */
    assert_true(qshare_over(t, a, strlen(a), 800));
    assert_false(qshare_over(t, b, strlen(b), 800));
    /* A third source lowers every share: b (100) is still within 800 / 3. */
    assert_int_equal(qshare_add(t, legacy, strlen(legacy), 10), 0);
    assert_false(qshare_over(t, b, strlen(b), 800));
    assert_true(qshare_over(t, b, strlen(b), 200));
    /* A source at 0 leaves the table; one the table does not know counts as over. */
    qshare_sub(t, legacy, strlen(legacy), 50);
    assert_int_equal(qshare_sources(t), 2);
    assert_true(qshare_over(t, legacy, strlen(legacy), 1u << 30));
    qshare_sub(t, a, strlen(a), 900);
    qshare_sub(t, b, strlen(b), 100);
    assert_int_equal(qshare_sources(t), 0);
    qshare_free(t);
    qshare_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_source_field),
        cmocka_unit_test(test_shares),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
