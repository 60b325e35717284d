/* common/test_errbuf.c: errbuf_printf formats, truncates, and is a no-op without a buffer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/errbuf.h"

static void test_formats_and_truncates(void **state)
{
    (void)state;
    char err[16];
    errbuf_printf(err, sizeof(err), "bad %s: %d", "port", 70000);
    assert_string_equal(err, "bad port: 70000");
    errbuf_printf(err, 8, "%s", "much too long");
    assert_string_equal(err, "much to");
}

static void test_no_buffer_is_a_no_op(void **state)
{
    (void)state;
    char err[4] = "abc";
    errbuf_printf(NULL, 16, "x");
    errbuf_printf(err, 0, "x");
    assert_string_equal(err, "abc");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_formats_and_truncates),
        cmocka_unit_test(test_no_buffer_is_a_no_op),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
