/* test_options: the subcommands' table-driven parser: flags, variables, defaults, kinds, bounds,
 * repeats, operands and --help from the table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/options.h"

enum { O_DATA, O_WINDOW, O_COUNT, O_FOLLOW, O_OPT, O_NAME, O_MAX };

static const opts_spec_t SPECS[] = {
    OPTS_SPEC_DATA,
    {"window", NULL, "TEST_OPTS_WINDOW", "30m", OPTS_DURATION, 1000, 3600000, "DURATION",
     "a window"},
    {"count", NULL, "TEST_OPTS_COUNT", "7", OPTS_COUNT, 1, 100, "N", "a count"},
    {"follow", "-f", "TEST_OPTS_FOLLOW", NULL, OPTS_BOOL, 0, 0, "", "a switch"},
    {"opt", NULL, "TEST_OPTS_OPT", NULL, OPTS_REPEAT, 0, 3, "K=V", "repeatable"},
    {"name", NULL, NULL, NULL, OPTS_STRING, 1, 4, "NAME", "short name"},
};

static const opts_cmd_t CMD = {
    "test", "Usage: ingestd test [FLAGS]\n", "About.\n", "Exit 0.\n", SPECS, O_MAX, false};
static const opts_cmd_t CMD_IDS = {
    "test", "Usage: ingestd test [FLAGS] ID...\n", NULL, NULL, SPECS, O_MAX, true};

static opts_val_t v[O_MAX];

/* Parses "test" + a NULL-terminated list of args with CMD (or CMD_IDS when ids). */
static int parse(const opts_cmd_t *c, int *first, ...)
{
    char *argv[32];
    int argc = 0;
    va_list ap;

    argv[argc++] = (char *)"test";
    va_start(ap, first);
    for (char *a = va_arg(ap, char *); a != NULL; a = va_arg(ap, char *))
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    opts_free(c, v);
    return opts_parse(c, argc, argv, v, first);
}

static int teardown(void **state)
{
    (void)state;
    opts_free(&CMD, v);
    unsetenv("TEST_OPTS_WINDOW");
    unsetenv("TEST_OPTS_COUNT");
    unsetenv("TEST_OPTS_FOLLOW");
    unsetenv("TEST_OPTS_OPT");
    unsetenv("INGESTD_DATA");
    return 0;
}

static void test_defaults(void **state)
{
    (void)state;
    unsetenv("INGESTD_DATA");
    assert_int_equal(parse(&CMD, NULL, NULL), 0);
    assert_string_equal(v[O_DATA].str, OPTS_DEFAULT_DATA);
    assert_true(v[O_WINDOW].set);
    assert_int_equal(v[O_WINDOW].ms, 30 * 60 * 1000);
    assert_int_equal(v[O_COUNT].n, 7);
    assert_false(v[O_FOLLOW].set);
    assert_false(v[O_FOLLOW].on);
    assert_int_equal(v[O_OPT].nitems, 0);
    assert_null(v[O_NAME].str);
}

static void test_flags_win_over_variables(void **state)
{
    (void)state;
    setenv("TEST_OPTS_COUNT", "9", 1);
    setenv("TEST_OPTS_WINDOW", "90s", 1);
    setenv("INGESTD_DATA", "/from/env", 1);
    assert_int_equal(parse(&CMD, NULL, "--count", "12", "--data=/d", "-f", NULL), 0);
    assert_int_equal(v[O_COUNT].n, 12);
    assert_string_equal(v[O_DATA].str, "/d");
    assert_int_equal(v[O_WINDOW].ms, 90000); /* no flag: the variable */
    assert_true(v[O_FOLLOW].on);
    assert_int_equal(parse(&CMD, NULL, "--count", "3", "--count", "4", NULL), 0);
    assert_int_equal(v[O_COUNT].n, 4); /* the last one wins */
    setenv("TEST_OPTS_COUNT", "", 1);  /* empty: unset */
    assert_int_equal(parse(&CMD, NULL, NULL), 0);
    assert_int_equal(v[O_COUNT].n, 7);
}

static void test_bad_values_are_usage_errors(void **state)
{
    (void)state;
    assert_int_equal(parse(&CMD, NULL, "--bogus", NULL), 2);
    assert_int_equal(parse(&CMD, NULL, "--count", NULL), 2);        /* needs a value */
    assert_int_equal(parse(&CMD, NULL, "--count", "0", NULL), 2);   /* below min */
    assert_int_equal(parse(&CMD, NULL, "--count", "101", NULL), 2); /* above max */
    assert_int_equal(parse(&CMD, NULL, "--count", "-1", NULL), 2);
    assert_int_equal(parse(&CMD, NULL, "--count", "1x", NULL), 2);
    assert_int_equal(parse(&CMD, NULL, "--window", "soon", NULL), 2);
    assert_int_equal(parse(&CMD, NULL, "--window", "2h", NULL), 2); /* above 1h */
    assert_int_equal(parse(&CMD, NULL, "--window", "0s", NULL), 2); /* below 1s */
    assert_int_equal(parse(&CMD, NULL, "--follow=1", NULL), 2);     /* a switch takes none */
    assert_int_equal(parse(&CMD, NULL, "--name", "toolong", NULL), 2);
    assert_int_equal(parse(&CMD, NULL, "--name", "", NULL), 2);
    assert_int_equal(parse(&CMD, NULL, "--data", "", NULL), 2);
    assert_int_equal(parse(&CMD, NULL, "stray", NULL), 2); /* no operands here */
    setenv("TEST_OPTS_WINDOW", "forever", 1);
    assert_int_equal(parse(&CMD, NULL, NULL), 2);
    setenv("TEST_OPTS_FOLLOW", "perhaps", 1);
    unsetenv("TEST_OPTS_WINDOW");
    assert_int_equal(parse(&CMD, NULL, NULL), 2);
    setenv("TEST_OPTS_FOLLOW", "yes", 1);
    assert_int_equal(parse(&CMD, NULL, NULL), 0);
    assert_true(v[O_FOLLOW].on);
}

static void test_repeat(void **state)
{
    (void)state;
    setenv("TEST_OPTS_OPT", "a=1\n\nb=2\n", 1);
    assert_int_equal(parse(&CMD, NULL, NULL), 0);
    assert_int_equal(v[O_OPT].nitems, 2); /* the variable: one a line, blank lines skipped */
    assert_string_equal(v[O_OPT].items[1], "b=2");
    assert_int_equal(parse(&CMD, NULL, "--opt", "x=1", "--opt=y=2", NULL), 0);
    assert_int_equal(v[O_OPT].nitems, 2); /* flags replace the variable as a whole */
    assert_string_equal(v[O_OPT].items[0], "x=1");
    assert_string_equal(v[O_OPT].items[1], "y=2");
    assert_int_equal(
        parse(&CMD, NULL, "--opt", "1", "--opt", "2", "--opt", "3", "--opt", "4", NULL),
        2); /* more than max */
}

static void test_operands(void **state)
{
    (void)state;
    int first = -1;
    assert_int_equal(parse(&CMD_IDS, &first, "--name", "ab", "id1", "--count", NULL), 0);
    assert_int_equal(first, 3); /* the first operand ends the flags */
    assert_string_equal(v[O_NAME].str, "ab");
    assert_int_equal(parse(&CMD_IDS, &first, "--", "-x", NULL), 0);
    assert_int_equal(first, 2);
    assert_int_equal(parse(&CMD_IDS, &first, NULL), 0);
    assert_int_equal(first, 1); /* none: argc */
}

static void test_help_lists_every_flag(void **state)
{
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    opts_usage(&CMD, f);
    assert_int_equal(fclose(f), 0);
    for (size_t i = 0; i < O_MAX; i++) {
        char flag[64];
        snprintf(flag, sizeof flag, "--%s", SPECS[i].name);
        assert_non_null(strstr(buf, flag));
        if (SPECS[i].env)
            assert_non_null(strstr(buf, SPECS[i].env));
    }
    assert_non_null(strstr(buf, "--follow, -f"));
    assert_non_null(strstr(buf, "default 30m"));
    assert_non_null(strstr(buf, "repeatable"));
    assert_non_null(strstr(buf, "About."));
    assert_non_null(strstr(buf, "Exit 0."));
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_defaults, teardown),
        cmocka_unit_test_teardown(test_flags_win_over_variables, teardown),
        cmocka_unit_test_teardown(test_bad_values_are_usage_errors, teardown),
        cmocka_unit_test_teardown(test_repeat, teardown),
        cmocka_unit_test_teardown(test_operands, teardown),
        cmocka_unit_test_teardown(test_help_lists_every_flag, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
