/* test_merger.c: the merger thread (storage/window/merger.h): rewrites in the background with a
 * view held across them, and a removal that cancels a merge under way. Real generation files in a
 * temporary directory. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "storage/window/merger.h"
#include "common/clock.h"
#include "storage/window/genset.h"
#include "storage/window/keyhash.h"
#include "testutil.h"

#define WAIT_MS 30000 /* every wait below is bounded */

static const uint8_t SECRET[KEYHASH_SECRET_LEN] = "wmerge-secret-16";

static void mkkey(uint64_t i, uint8_t key[KEYHASH_LEN])
{
    char id[32];
    int n = snprintf(id, sizeof(id), "m-%llu", (unsigned long long)i);
    keyhash(SECRET, "default", 7, id, (size_t)n, key);
}

static int cmp_entry(const void *a, const void *b)
{
    return memcmp(((const gen_entry_t *)a)->key, ((const gen_entry_t *)b)->key, KEYHASH_LEN);
}

/* Adds the generation of ids [from, from + n) covering sequences [from, from + n). */
static void add(genset_t *gs, uint64_t from, size_t n)
{
    gen_entry_t *e = calloc(n, sizeof(*e));
    assert_non_null(e);
    for (size_t i = 0; i < n; i++) {
        mkkey(from + i, e[i].key);
        e[i].offset = from + i;
        e[i].received_ms = clk_wall_ms();
    }
    qsort(e, n, sizeof(*e), cmp_entry);
    gen_writer_t *w = NULL;
    gen_t *g = NULL;
    assert_int_equal(gen_writer_open(genset_dir(gs), (gen_id_t){from, from + n}, n, 0, &w), GEN_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(gen_writer_add(w, &e[i]), GEN_OK);
    assert_int_equal(gen_writer_finish(w, &g), GEN_OK);
    assert_int_equal(genset_add(gs, g), GEN_OK);
    free(e);
}

/* Whether v holds every id of [0, n). */
static bool holds_all(const genset_view_t *v, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        uint8_t key[KEYHASH_LEN];
        bool found = false;
        mkkey(i, key);
        assert_int_equal(genset_view_find(v, key, &found, NULL), GEN_OK);
        if (!found)
            return false;
    }
    return true;
}

/* Files in dir ending in `suffix`. */
static size_t files_ending(const char *dir, const char *suffix)
{
    size_t n = 0, sl = strlen(suffix);
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        size_t l = strlen(de->d_name);
        n += l >= sl && strcmp(de->d_name + l - sl, suffix) == 0;
    }
    closedir(d);
    return n;
}

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int setup(void **state)
{
    return tu_fixture_setup(state, "wmerge", "gens");
}

static int teardown(void **state)
{
    return tu_fixture_teardown(state);
}

/* Eight small generations become two, off the caller's thread; a view taken before the merges
 * still finds every key, and so does one taken after. */
static void test_merges_in_background(void **state)
{
    tu_fixture_t *fx = *state;
    genset_t *gs = NULL;
    assert_int_equal(genset_open(fx->dir, 0, &gs), GEN_OK);
    for (uint64_t i = 0; i < 8; i++)
        add(gs, i * 10, 10);
    genset_view_t *before = genset_view(gs);
    genset_policy_t p = genset_policy_for(3600 * 1000, 0, 100); /* under 75 keys is small */
    merger_t *m = NULL;
    merger_set_t *mp = NULL;
    assert_int_equal(merger_new(&p, NULL, NULL, &m), 0);
    assert_int_equal(merger_add(m, 7, gs, &mp), 0);
    int64_t deadline = clk_mono_ms() + WAIT_MS;
    while (merger_merges(mp) < 2 && clk_mono_ms() < deadline)
        pause_ms(1);
    assert_int_equal(merger_merges(mp), 2);
    /* No third merge: two generations of 40 are fewer than the fan-in. A kick finds nothing. */
    merger_kick(mp);
    genset_view_t *after = genset_view(gs);
    assert_int_equal(genset_view_count(after), 2);
    assert_int_equal(genset_view_count(before), 8);
    assert_true(holds_all(before, 80)); /* its inputs stay open while it is held */
    assert_true(holds_all(after, 80));
    genset_view_release(before);
    genset_view_release(after);
    assert_int_equal(files_ending(fx->dir, ".gen"), 2);
    merger_remove(mp);
    merger_free(m);
    assert_int_equal(merger_merges(NULL), 0);
    genset_close(gs);
}

/* Removing a partition while its merge writes cancels that merge: the set stays as it was, no
 * file is left behind, and the removal does not wait for the merge to finish. */
static void test_remove_cancels_merge(void **state)
{
    tu_fixture_t *fx = *state;
    const size_t per = 256 * 1024; /* 4 x 256 Ki keys: a merge of 1 Mi keys, ~30 MB */
    genset_t *gs = NULL;
    assert_int_equal(genset_open(fx->dir, 0, &gs), GEN_OK);
    for (uint64_t i = 0; i < 4; i++)
        add(gs, i * per, per);
    genset_policy_t p = genset_policy_for(3600 * 1000, 0, 4 * per); /* each one is small */
    merger_t *m = NULL;
    merger_set_t *mp = NULL;
    assert_int_equal(merger_new(&p, NULL, NULL, &m), 0);
    assert_int_equal(merger_add(m, 0, gs, &mp), 0);
    /* The merge is under way once its file is being written. */
    int64_t deadline = clk_mono_ms() + WAIT_MS;
    while (files_ending(fx->dir, ".tmp") == 0 && merger_merges(mp) == 0 && clk_mono_ms() < deadline)
        ;
    assert_int_equal(merger_merges(mp), 0); /* caught it mid-merge */
    assert_int_equal(files_ending(fx->dir, ".tmp"), 1);
    merger_remove(mp);
    genset_view_t *v = genset_view(gs);
    assert_int_equal(genset_view_count(v), 4);
    genset_view_release(v);
    assert_int_equal(files_ending(fx->dir, ".tmp"), 0);
    assert_int_equal(files_ending(fx->dir, ".gen"), 4);
    merger_free(m);
    genset_close(gs);
}

/* Freeing the merger with no partition left, and a partition removed before its first look. */
static void test_add_remove_free(void **state)
{
    tu_fixture_t *fx = *state;
    genset_t *gs = NULL;
    assert_int_equal(genset_open(fx->dir, 0, &gs), GEN_OK);
    genset_policy_t p = genset_policy_for(3600 * 1000, 0, 100);
    merger_t *m = NULL;
    merger_set_t *a = NULL, *b = NULL;
    assert_int_equal(merger_new(&p, NULL, NULL, &m), 0);
    assert_int_equal(merger_add(m, 1, gs, &a), 0);
    assert_int_equal(merger_add(m, 2, gs, &b), 0);
    merger_remove(a);
    merger_kick(b);
    merger_remove(b);
    merger_remove(NULL);
    merger_free(m);
    merger_free(NULL);
    genset_close(gs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_merges_in_background, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove_cancels_merge, setup, teardown),
        cmocka_unit_test_setup_teardown(test_add_remove_free, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
