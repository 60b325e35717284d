/* test_secret.c: DIR/secret, its one writer (atomic and durable) and its one reader. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>

#include "fsyncspy.h"
#include "storage/datadir.h"
#include "storage/secret.h"
#include "testutil.h"

typedef tu_fixture_t fx_t;

static const uint8_t S1[KEYHASH_SECRET_LEN] = "0123456789abcde";
static const uint8_t S2[KEYHASH_SECRET_LEN] = "fedcba987654321";

static int setup(void **state)
{
    return tu_fixture_setup(state, "secret", NULL);
}

static int teardown(void **state)
{
    return tu_fixture_teardown(state);
}

static void secret_path(const fx_t *fx, char *out, size_t len)
{
    snprintf(out, len, "%s/%s", fx->base, datadir_name(DATADIR_SECRET));
}

/* Entries of the data dir besides . and .. (a temporary file left behind would show). */
static int entries(const fx_t *fx)
{
    DIR *d = opendir(fx->base);
    struct dirent *e;
    int n = 0;
    assert_non_null(d);
    while ((e = readdir(d)) != NULL)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static void test_missing(void **state)
{
    fx_t *fx = *state;
    uint8_t got[KEYHASH_SECRET_LEN];
    assert_int_equal(secret_read(fx->base, got), 0);
    assert_int_equal(errno, ENOENT);
}

/* Written durably (the file fsynced, then the data dir holding its name), mode 0600, whole. */
static void test_write_then_read(void **state)
{
    fx_t *fx = *state;
    char path[512];
    uint8_t got[KEYHASH_SECRET_LEN];
    struct stat st;
    secret_path(fx, path, sizeof(path));

    fsyncspy_reset();
    assert_int_equal(secret_write(fx->base, S1), 0);
    assert_true(fsyncspy_synced(path));
    assert_true(fsyncspy_synced(fx->base));
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(entries(fx), 1);
    assert_int_equal(secret_read(fx->base, got), 1);
    assert_memory_equal(got, S1, sizeof(got));
}

/* A rewrite replaces the file by a rename (a reader never sees a mix), also over a short file
 * that a crash of a non-atomic writer could have left. */
static void test_replace(void **state)
{
    fx_t *fx = *state;
    char path[512];
    uint8_t got[KEYHASH_SECRET_LEN];
    struct stat before, after;
    secret_path(fx, path, sizeof(path));
    assert_int_equal(tu_write_file(path, S1, 7), 0);
    assert_int_equal(stat(path, &before), 0);

    assert_int_equal(secret_write(fx->base, S2), 0);
    assert_int_equal(stat(path, &after), 0);
    assert_true(before.st_ino != after.st_ino);
    assert_int_equal(entries(fx), 1);
    assert_int_equal(secret_read(fx->base, got), 1);
    assert_memory_equal(got, S2, sizeof(got));
}

/* Not a secret: shorter or longer than one is an error (EINVAL), never a guess. */
static void test_wrong_size(void **state)
{
    fx_t *fx = *state;
    char path[512];
    uint8_t got[KEYHASH_SECRET_LEN], longer[KEYHASH_SECRET_LEN + 1] = {0};
    secret_path(fx, path, sizeof(path));

    assert_int_equal(tu_write_file(path, S1, 7), 0);
    assert_int_equal(secret_read(fx->base, got), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(tu_write_file(path, longer, sizeof(longer)), 0);
    assert_int_equal(secret_read(fx->base, got), -1);
    assert_int_equal(errno, EINVAL);
}

static void test_write_fails_without_dir(void **state)
{
    fx_t *fx = *state;
    char missing[512];
    snprintf(missing, sizeof(missing), "%s/nope", fx->base);
    assert_int_equal(secret_write(missing, S1), -1);
    assert_int_equal(errno, ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_missing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_then_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_size, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_fails_without_dir, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
