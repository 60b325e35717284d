/* test_datadir.c: the data dir's layout: names, where each entry lives, paths into fixed buffers.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "storage/datadir.h"

/* The names are an on-disk format: a data dir written by an older release must still be found. */
static void test_names_are_the_on_disk_layout(void **state)
{
    (void)state;
    static const struct {
        datadir_entry_t e;
        const char *path; /* from the data dir "D" */
    } want[] = {
        {DATADIR_LOCK, "D/LOCK"},
        {DATADIR_SECRET, "D/secret"},
        {DATADIR_WINDOW, "D/WINDOW"},
        {DATADIR_TAGGED_FROM, "D/TAGGED_FROM"},
        {DATADIR_LOG, "D/log"},
        {DATADIR_LOG_PROBE, "D/log/probe.tmp"},
        {DATADIR_REJECTED, "D/rejected"},
        {DATADIR_GROUPS, "D/groups"},
        {DATADIR_STORE, "D/store"},
        {DATADIR_LMDB_DATA, "D/store/data.mdb"},
        {DATADIR_GENS, "D/store/gens"},
        {DATADIR_ACKED, "D/store/ACKED"},
        {DATADIR_UNSYNCED, "D/store/UNSYNCED"},
        {DATADIR_WORKER_ID, "D/worker-id"},
        {DATADIR_PARTITIONS, "D/partitions"},
    };
    assert_int_equal(sizeof want / sizeof want[0], DATADIR_ENTRIES); /* every entry pinned */
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char *p = datadir_path("D", want[i].e);
        assert_non_null(p);
        assert_string_equal(p, want[i].path);
        free(p);
        const char *leaf = strrchr(want[i].path, '/') + 1;
        assert_string_equal(datadir_name(want[i].e), leaf);
    }
    assert_string_equal(DATADIR_REBUILD_PREFIX, "store.rebuild-");
}

/* datadir_in joins only the leaf: a store's entries inside any store dir (a rebuild's sibling). */
static void test_in_a_given_folder(void **state)
{
    (void)state;
    char *p = datadir_in("/d/store.rebuild-1-2", DATADIR_GENS);
    assert_string_equal(p, "/d/store.rebuild-1-2/gens");
    free(p);
    p = datadir_in("/d", DATADIR_LOCK);
    assert_string_equal(p, "/d/LOCK");
    free(p);
}

static void test_put_into_a_buffer(void **state)
{
    (void)state;
    char buf[16];
    assert_int_equal(datadir_put(buf, sizeof buf, "/data", DATADIR_STORE), 0);
    assert_string_equal(buf, "/data/store");
    /* "/data/" + "TAGGED_FROM" is 17 bytes with its NUL: too long, and nothing half-written. */
    errno = 0;
    assert_int_equal(datadir_put(buf, sizeof buf, "/data", DATADIR_TAGGED_FROM), -1);
    assert_int_equal(errno, ENAMETOOLONG);
    assert_string_equal(buf, "");
    /* Exactly fitting. */
    assert_int_equal(datadir_put(buf, 12, "/data", DATADIR_STORE), 0);
    assert_int_equal(datadir_put(buf, 11, "/data", DATADIR_STORE), -1);
}

/* A worker's store dir per raw partition. */
static void test_partition_dir(void **state)
{
    (void)state;
    char buf[64];
    assert_int_equal(datadir_partition(buf, sizeof buf, "/d", "raw", 7), 0);
    assert_string_equal(buf, "/d/partitions/raw-7");
    assert_int_equal(datadir_partition(buf, 10, "/d", "raw", 7), -1);
    assert_int_equal(errno, ENAMETOOLONG);
    assert_string_equal(buf, "");
}

static void test_not_an_entry(void **state)
{
    (void)state;
    char buf[64];
    assert_null(datadir_name(DATADIR_ENTRIES));
    errno = 0;
    assert_null(datadir_path("/d", DATADIR_ENTRIES));
    assert_int_equal(errno, EINVAL);
    assert_null(datadir_in("/d", (datadir_entry_t)-1));
    assert_int_equal(datadir_put(buf, sizeof buf, "/d", DATADIR_ENTRIES), -1);
    assert_int_equal(errno, EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_are_the_on_disk_layout),
        cmocka_unit_test(test_in_a_given_folder),
        cmocka_unit_test(test_put_into_a_buffer),
        cmocka_unit_test(test_partition_dir),
        cmocka_unit_test(test_not_an_entry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
