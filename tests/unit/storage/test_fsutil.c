/* test_fsutil.c: the storage layer's file-system helpers: directories made durable as they are
 * created (observed through the fsyncs they make), and durable small files. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "fsyncspy.h"
#include "storage/fsutil.h"
#include "testutil.h"

typedef tu_fixture_t fx_t;

static int setup(void **state)
{
    return tu_fixture_setup(state, "fsutil", NULL);
}

static int teardown(void **state)
{
    return tu_fixture_teardown(state);
}

static void path_in(const fx_t *fx, const char *rel, char *out, size_t len)
{
    snprintf(out, len, "%s/%s", fx->base, rel);
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Every directory created has its name made durable: its parent is fsynced, and the leaf itself
 * too (a power loss under strict POSIX would otherwise take the whole new chain with it). */
static void test_mkdirs_syncs_each_parent(void **state)
{
    fx_t *fx = *state;
    char a[512], ab[512], abc[512];
    path_in(fx, "a", a, sizeof(a));
    path_in(fx, "a/b", ab, sizeof(ab));
    path_in(fx, "a/b/c", abc, sizeof(abc));

    fsyncspy_reset();
    assert_int_equal(fsutil_mkdirs(abc), 0);
    assert_true(is_dir(abc));
    assert_true(fsyncspy_synced(fx->base)); /* a's name */
    assert_true(fsyncspy_synced(a));        /* b's name */
    assert_true(fsyncspy_synced(ab));       /* c's name */
    assert_true(fsyncspy_synced(abc));      /* the new directory itself */
}

/* Only what was created is synced: the existing part of the path is left alone. */
static void test_mkdirs_existing_part(void **state)
{
    fx_t *fx = *state;
    char a[512], ab[512], abc[512];
    path_in(fx, "a", a, sizeof(a));
    path_in(fx, "a/b", ab, sizeof(ab));
    path_in(fx, "a/b/c/", abc, sizeof(abc)); /* a trailing slash is the same directory */
    assert_int_equal(mkdir(a, 0755), 0);

    fsyncspy_reset();
    assert_int_equal(fsutil_mkdirs(abc), 0);
    assert_false(fsyncspy_synced(fx->base));
    assert_true(fsyncspy_synced(a));
    assert_true(fsyncspy_synced(ab));
    path_in(fx, "a/b/c", abc, sizeof(abc));
    assert_true(fsyncspy_synced(abc));

    fsyncspy_reset();
    assert_int_equal(fsutil_mkdirs(abc), 0); /* all there: nothing to create, nothing synced */
    assert_int_equal(fsyncspy.n, 0);
}

static void test_mkdirs_fails_under_a_file(void **state)
{
    fx_t *fx = *state;
    char f[512], under[512];
    path_in(fx, "f", f, sizeof(f));
    path_in(fx, "f/x", under, sizeof(under));
    assert_int_equal(tu_write_file(f, "x", 1), 0);
    assert_int_equal(fsutil_mkdirs(under), -1);
    assert_int_equal(errno, ENOTDIR);
    assert_int_equal(fsutil_mkdirs(""), -1);
}

/* One directory: EEXIST when it is there (nothing synced), else durable in its parent. */
static void test_mkdir_one(void **state)
{
    fx_t *fx = *state;
    char d[512];
    path_in(fx, "d", d, sizeof(d));
    fsyncspy_reset();
    assert_int_equal(fsutil_mkdir(d), 0);
    assert_true(fsyncspy_synced(fx->base));
    assert_true(fsyncspy_synced(d));

    fsyncspy_reset();
    assert_int_equal(fsutil_mkdir(d), -1);
    assert_int_equal(errno, EEXIST);
    assert_int_equal(fsyncspy.n, 0);
}

/* A small file replaced atomically: its data and its directory entry synced, no temp left. */
static void test_write_atomic(void **state)
{
    fx_t *fx = *state;
    char p[512], tmp[512], *got = NULL;
    size_t len = 0;
    path_in(fx, "small", p, sizeof(p));
    path_in(fx, ".small.tmp", tmp, sizeof(tmp));
    assert_int_equal(tu_write_file(p, "old", 3), 0);

    fsyncspy_reset();
    assert_int_equal(fsutil_write_atomic(p, "new!", 4, 0640), 0);
    assert_true(fsyncspy_synced(p));
    assert_true(fsyncspy_synced(fx->base));
    assert_int_equal(tu_read_file(p, &got, &len), 0);
    assert_int_equal(len, 4);
    assert_memory_equal(got, "new!", 4);
    free(got);
    assert_int_equal(access(tmp, F_OK), -1);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0640);
}

/* The write-all and read-full loops: offsets kept, short reads only at the end, errors returned. */
static void test_write_all_read_full(void **state)
{
    fx_t *fx = *state;
    char p[512], got[16];
    path_in(fx, "rw", p, sizeof(p));
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(fsutil_write_all(fd, "abcdef", 6), 0);
    assert_int_equal(fsutil_pwrite_all(fd, "XY", 2, 1), 0);
    assert_int_equal(lseek(fd, 0, SEEK_CUR), 6); /* pwrite left the file offset alone */
    assert_int_equal(fsutil_pread_full(fd, got, 6, 0), 6);
    assert_memory_equal(got, "aXYdef", 6);
    assert_int_equal(fsutil_pread_full(fd, got, sizeof(got), 4), 2); /* short only at the end */
    assert_memory_equal(got, "ef", 2);
    close(fd);
    errno = 0;
    assert_int_equal(fsutil_write_all(fd, "a", 1), -1);
    assert_int_equal(errno, EBADF);
    assert_int_equal(fsutil_pwrite_all(fd, "a", 1, 0), -1);
    assert_int_equal(fsutil_pread_full(fd, got, 1, 0), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_mkdirs_syncs_each_parent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mkdirs_existing_part, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mkdirs_fails_under_a_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mkdir_one, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_atomic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_all_read_full, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
