/* test_groups.c: consumer group offsets: names, get/commit/overwrite, listing, corrupt files,
 * atomic replacement. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>
#include <sys/stat.h>

#include "storage/log/groups.h"
#include "testutil.h"

/* fx->base is the data dir (removed in teardown); groups live in base/groups. */
typedef tu_fixture_t fx_t;

static int setup(void **state)
{
    return tu_fixture_setup(state, "groups", NULL);
}

static int teardown(void **state)
{
    return tu_fixture_teardown(state);
}

static void group_path(const fx_t *fx, const char *name, char *out, size_t len)
{
    snprintf(out, len, "%s/groups/%s", fx->base, name);
}

/* Number of directory entries of base/groups other than . and .. */
static int count_entries(const fx_t *fx)
{
    char dir[512];
    DIR *d;
    struct dirent *e;
    int n = 0;

    snprintf(dir, sizeof dir, "%s/groups", fx->base);
    d = opendir(dir);
    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    }
    closedir(d);
    return n;
}

static void test_valid_names(void **state)
{
    (void)state;
    const char *good[] = {
        "g",           "loader",
        "warehouse-1", "a.b_c-D9",
        "-x",          "_",
        "x.",          "0123456789012345678901234567890123456789012345678901234567890123"};
    const char *bad[] = {
        "",    ".",
        "..",  ".hidden",
        "a/b", "a b",
        "a\n", "caf\xc3\xa9",
        "x:y", "01234567890123456789012345678901234567890123456789012345678901234"};

    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        if (!groups_valid_name(good[i]))
            fail_msg("\"%s\" should be valid", good[i]);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (groups_valid_name(bad[i]))
            fail_msg("\"%s\" should be invalid", bad[i]);
    }
    assert_int_equal(strlen(good[7]), GROUPS_NAME_MAX);
    assert_false(groups_valid_name(NULL));
}

static void test_invalid_name_rejected_everywhere(void **state)
{
    fx_t *fx = *state;
    uint64_t off = 99;

    assert_int_equal(groups_commit(fx->base, "../escape", 1), GROUPS_INVALID);
    assert_int_equal(groups_commit(fx->base, ".tmp", 1), GROUPS_INVALID);
    assert_int_equal(groups_get(fx->base, "a/b", &off), GROUPS_INVALID);
    assert_int_equal(off, 99);
    assert_non_null(groups_strerror(GROUPS_INVALID));
}

static void test_get_missing_is_notfound(void **state)
{
    fx_t *fx = *state;
    uint64_t off = 7;
    groups_entry_t *list = NULL;
    size_t n = 1;

    /* No groups dir at all, then an empty one. */
    assert_int_equal(groups_get(fx->base, "nobody", &off), GROUPS_NOTFOUND);
    assert_int_equal(off, 7);
    assert_int_equal(groups_list(fx->base, &list, &n), GROUPS_OK);
    assert_int_equal(n, 0);
    assert_null(list);
    assert_int_equal(groups_commit(fx->base, "other", 3), GROUPS_OK);
    assert_int_equal(groups_get(fx->base, "nobody", &off), GROUPS_NOTFOUND);
}

static void test_commit_then_get(void **state)
{
    fx_t *fx = *state;
    uint64_t off = 0;
    char path[512], *text = NULL;
    size_t len = 0;

    assert_int_equal(groups_commit(fx->base, "loader", 12345), GROUPS_OK);
    assert_int_equal(groups_get(fx->base, "loader", &off), GROUPS_OK);
    assert_int_equal(off, 12345);
    /* The documented file format: one decimal line. */
    group_path(fx, "loader", path, sizeof path);
    assert_int_equal(tu_read_file(path, &text, &len), 0);
    assert_string_equal(text, "12345\n");
    free(text);

    assert_int_equal(groups_commit(fx->base, "zero", 0), GROUPS_OK);
    assert_int_equal(groups_get(fx->base, "zero", &off), GROUPS_OK);
    assert_int_equal(off, 0);
    assert_int_equal(groups_commit(fx->base, "max", UINT64_MAX - 1), GROUPS_OK);
    assert_int_equal(groups_get(fx->base, "max", &off), GROUPS_OK);
    assert_true(off == UINT64_MAX - 1);
}

static void test_overwrite(void **state)
{
    fx_t *fx = *state;
    uint64_t off = 0;

    assert_int_equal(groups_commit(fx->base, "g", 100), GROUPS_OK);
    assert_int_equal(groups_commit(fx->base, "g", 250), GROUPS_OK);
    assert_int_equal(groups_get(fx->base, "g", &off), GROUPS_OK);
    assert_int_equal(off, 250);
    /* Moving back (`log cat --from` wins over the committed offset) is allowed too. */
    assert_int_equal(groups_commit(fx->base, "g", 5), GROUPS_OK);
    assert_int_equal(groups_get(fx->base, "g", &off), GROUPS_OK);
    assert_int_equal(off, 5);
    /* A longer value replaced by a shorter one leaves no trailing digits behind. */
    assert_int_equal(groups_commit(fx->base, "g", 1000000), GROUPS_OK);
    assert_int_equal(groups_commit(fx->base, "g", 7), GROUPS_OK);
    assert_int_equal(groups_get(fx->base, "g", &off), GROUPS_OK);
    assert_int_equal(off, 7);
}

static void test_list_sorted(void **state)
{
    fx_t *fx = *state;
    const char *names[] = {"zeta", "alpha", "Mid", "beta-2", "beta-10", "_x"};
    const uint64_t offs[] = {6, 1, 3, 5, 4, 2};
    groups_entry_t *list = NULL;
    size_t n = 0;

    for (size_t i = 0; i < 6; i++)
        assert_int_equal(groups_commit(fx->base, names[i], offs[i]), GROUPS_OK);
    assert_int_equal(groups_list(fx->base, &list, &n), GROUPS_OK);
    assert_int_equal(n, 6);
    assert_non_null(list);
    /* strcmp order (bytes): upper case before '_' before lower case. */
    const char *want[] = {"Mid", "_x", "alpha", "beta-10", "beta-2", "zeta"};
    const uint64_t want_off[] = {3, 2, 1, 4, 5, 6};
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(list[i].name, want[i]);
        assert_int_equal(list[i].offset, want_off[i]);
    }
    free(list);
}

static void test_corrupt_file(void **state)
{
    fx_t *fx = *state;
    char dir[512], path[512];
    uint64_t off = 42;
    const char *bad[] = {"", "abc\n", "12a\n", "-1\n", "\n", "1 2\n", "99999999999999999999999\n"};

    snprintf(dir, sizeof dir, "%s/groups", fx->base);
    assert_int_equal(mkdir(dir, 0755), 0);
    group_path(fx, "broken", path, sizeof path);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(tu_write_file(path, bad[i], strlen(bad[i])), 0);
        if (groups_get(fx->base, "broken", &off) != GROUPS_CORRUPT)
            fail_msg("content \"%s\" should be GROUPS_CORRUPT", bad[i]);
        assert_int_equal(off, 42);
    }
    /* A hand-written file without the newline still holds an offset. */
    assert_int_equal(tu_write_file(path, "17", 2), 0);
    assert_int_equal(groups_get(fx->base, "broken", &off), GROUPS_OK);
    assert_int_equal(off, 17);
    /* A commit repairs a corrupt file. */
    assert_int_equal(tu_write_file(path, "junk", 4), 0);
    assert_int_equal(groups_commit(fx->base, "broken", 9), GROUPS_OK);
    assert_int_equal(groups_get(fx->base, "broken", &off), GROUPS_OK);
    assert_int_equal(off, 9);
    assert_non_null(groups_strerror(GROUPS_CORRUPT));
}

static void test_atomic_no_temp_left(void **state)
{
    fx_t *fx = *state;
    uint64_t off = 0;
    groups_entry_t *list = NULL;
    size_t n = 0;

    for (uint64_t i = 0; i < 50; i++) {
        assert_int_equal(groups_commit(fx->base, "a", i * 1000), GROUPS_OK);
        assert_int_equal(groups_commit(fx->base, "b", i), GROUPS_OK);
    }
    /* Only the two group files: no temporary file survives a commit. */
    assert_int_equal(count_entries(fx), 2);
    assert_int_equal(groups_get(fx->base, "a", &off), GROUPS_OK);
    assert_int_equal(off, 49000);

    /* A temporary file left by a crash mid-commit is not a group and does not break listing. */
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s/groups/.a.tmp", fx->base);
    assert_int_equal(tu_write_file(tmp, "12", 2), 0);
    assert_int_equal(groups_list(fx->base, &list, &n), GROUPS_OK);
    assert_int_equal(n, 2);
    assert_string_equal(list[0].name, "a");
    assert_string_equal(list[1].name, "b");
    free(list);
    assert_int_equal(groups_commit(fx->base, "a", 1), GROUPS_OK);
    assert_int_equal(groups_get(fx->base, "a", &off), GROUPS_OK);
    assert_int_equal(off, 1);
}

static void test_strerror_total(void **state)
{
    (void)state;
    const int codes[] = {GROUPS_OK,      GROUPS_NOTFOUND, GROUPS_INVALID, GROUPS_EIO,
                         GROUPS_CORRUPT, GROUPS_NOMEM,    12345};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *s = groups_strerror(codes[i]);
        assert_non_null(s);
        assert_true(s[0] != '\0');
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_names),
        cmocka_unit_test_setup_teardown(test_invalid_name_rejected_everywhere, setup, teardown),
        cmocka_unit_test_setup_teardown(test_get_missing_is_notfound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_commit_then_get, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overwrite, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_sorted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_atomic_no_temp_left, setup, teardown),
        cmocka_unit_test(test_strerror_total),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
