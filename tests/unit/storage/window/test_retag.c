/* test_retag.c: DIR/TAGGED_FROM and the tag given to keys of records from before tags. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "storage/datadir.h"
#include "storage/window/keyhash.h"
#include "storage/window/retag.h"
#include "testutil.h"

static const uint8_t SECRET[KEYHASH_SECRET_LEN] = "0123456789abcde";

/* A record as an older release wrote it: keyhash's bytes with the tag's 4 bytes as they were
 * before tags (here: zeros, any value will do), and the event ingestd logged. */
static log_record_t legacy(const char *source, const char *mid, const char *json, uint8_t key[16])
{
    keyhash(SECRET, source, strlen(source), mid, strlen(mid), key);
    memset(key + KEYHASH_TAG_AT, 0, 4);
    log_record_t rec = {.offset = 5, .received_ms = 1, .data = json, .len = (uint32_t)strlen(json)};
    memcpy(rec.key, key, KEYHASH_LEN);
    return rec;
}

static void test_legacy_record_gets_a_new_events_key(void **state)
{
    (void)state;
    uint8_t want[16], old[16];
    const char *ev = "{\"type\":\"track\",\"messageId\":\"m-1\",\"context\":{\"source\":\"x\"},"
                     "\"source\":\"web\\u00e9\",\"event\":\"E\"}";
    log_record_t rec = legacy("web\xc3\xa9", "m-1", ev, old);
    keyhash(SECRET, "web\xc3\xa9", 5, "m-1", 3, want);
    assert_memory_not_equal(rec.key, want, KEYHASH_LEN);

    /* Below the tagged offset: tagged from the top-level source (escapes decoded, not the
     * nested one), exactly what keyhash gives a new event; again: no change. */
    assert_int_equal(retag_record(SECRET, 6, &rec), RETAG_RETAGGED);
    assert_memory_equal(rec.key, want, KEYHASH_LEN);
    assert_int_equal(retag_record(SECRET, RETAG_NONE, &rec), RETAG_RETAGGED);
    assert_memory_equal(rec.key, want, KEYHASH_LEN);

    /* At or past it: left alone. */
    memcpy(rec.key, old, KEYHASH_LEN);
    assert_int_equal(retag_record(SECRET, 5, &rec), RETAG_TAGGED);
    assert_memory_equal(rec.key, old, KEYHASH_LEN);
}

static void test_record_without_source_keeps_its_key(void **state)
{
    (void)state;
    const char *bad[] = {"{\"type\":\"track\"}", "{\"source\":7}", "[\"source\",\"web\"]",
                         "{\"source\":\"web\"", "not json"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t old[16];
        log_record_t rec = legacy("web", "m", bad[i], old);
        assert_int_equal(retag_record(SECRET, RETAG_NONE, &rec), RETAG_NOSOURCE);
        assert_memory_equal(rec.key, old, KEYHASH_LEN);
    }
}

/* The scan that finds most sources (retag.c: source_scan) agrees with jansson on every event,
 * including the ones where it hands over to jansson. */
static void test_scan_agrees_with_a_parse(void **state)
{
    (void)state;
    const char *events[] = {
        "{\"a\":\"x\\\"}\",\"source\":\"web\"}",
        "{\"a\":{\"source\":\"no\",\"b\":[1,{\"c\":\"}\"}]},\"source\":\"web\"}",
        "{\"source\":\"we\\\"b\"}",
        "{\"sou\\u0072ce\":\"web\"}",
        "{\"source\":\"a\",\"source\":\"b\"}",
        "{\"n\":-1.5e3,\"t\":true,\"z\":null,\"source\":\"web\",\"e\":[]}",
        " { \"source\" :\t\"mobile\" }\n",
        "{\"source\":\"web\"} trailing",
        "{\"source\":\"web\"",
        "{\"x\":[1,2,\"]\"],\"source\":\"web\"}",
        "{\"a\":\"\\\\\",\"source\":\"web\"}",
        "{\"source\":\"w\xc3\xa9"
        "b\"}",
        "{}",
        "{\"source\":null}",
        "{\"source\":\"\"}",
        "[]",
    };
    for (size_t i = 0; i < sizeof(events) / sizeof(events[0]); i++) {
        uint8_t old[16], want[16];
        char *src = NULL;
        size_t n = 0;
        log_record_t rec = legacy("web", "m", events[i], old);
        int parsed = retag_source_of(events[i], strlen(events[i]), &src, &n);
        enum retag_result r = retag_record(SECRET, RETAG_NONE, &rec);
        memcpy(want, old, sizeof(want));
        if (parsed == 0)
            keyhash_set_source(want, keyhash_source_tag(SECRET, src, n));
        assert_int_equal(r, parsed == 0 ? RETAG_RETAGGED : RETAG_NOSOURCE);
        assert_memory_equal(rec.key, want, KEYHASH_LEN);
        free(src);
    }
}

static void test_source_of(void **state)
{
    (void)state;
    char *s = NULL;
    size_t n = 0;
    const char ev[] = "{\"p\":\"\\u0000\",\"source\":\"a\\u0000b\",\"x\":[{\"source\":\"no\"}]}";
    assert_int_equal(retag_source_of(ev, sizeof(ev) - 1, &s, &n), 0);
    assert_int_equal(n, 3); /* an embedded NUL is part of the source, as keyhash saw it */
    assert_memory_equal(s, "a\0b", 3);
    free(s);
    assert_int_equal(retag_source_of("{}", 2, &s, &n), -1);
    assert_null(s);
}

static void test_tagged_from_file(void **state)
{
    tu_fixture_t *fx = *state;
    uint64_t from = 0;
    char path[400];
    snprintf(path, sizeof(path), "%s/%s", fx->dir, datadir_name(DATADIR_TAGGED_FROM));

    assert_int_equal(retag_read_from(fx->dir, &from), 1); /* none: nothing is tagged */
    assert_true(from == RETAG_NONE);
    assert_int_equal(retag_write_from(fx->dir, 0), 0);
    assert_int_equal(retag_read_from(fx->dir, &from), 0);
    assert_true(from == 0);
    assert_int_equal(retag_write_from(fx->dir, 123456789012ull), 0);
    assert_int_equal(retag_read_from(fx->dir, &from), 0);
    assert_true(from == 123456789012ull);

    /* Anything else is an error, never an offset guessed from it. */
    const char *bad[] = {"", "12\n", "0000000000000000000x\n", "00000000000000000012",
                         "000000000000000000012\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(tu_write_file(path, bad[i], strlen(bad[i])), 0);
        errno = 0;
        assert_int_equal(retag_read_from(fx->dir, &from), -1);
        assert_true(errno == EINVAL || errno == EFBIG);
    }
}

static int setup(void **state)
{
    return tu_fixture_setup(state, "retag", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_legacy_record_gets_a_new_events_key),
        cmocka_unit_test(test_record_without_source_keeps_its_key),
        cmocka_unit_test(test_scan_agrees_with_a_parse),
        cmocka_unit_test(test_source_of),
        cmocka_unit_test_setup_teardown(test_tagged_from_file, setup, tu_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
