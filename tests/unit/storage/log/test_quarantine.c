/* test_quarantine.c: the quarantine log: record layout, cuts, the size bound, drops, reopen. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>
#include <jansson.h>
#include <sys/stat.h>

#include "storage/log/log.h"
#include "storage/log/quarantine.h"
#include "testutil.h"

typedef tu_fixture_t fx_t;

static int setup(void **state)
{
    return tu_fixture_setup(state, "quarantine", "rejected");
}

static int teardown(void **state)
{
    return tu_fixture_teardown(state);
}

static quarantine_t *open_q(const fx_t *fx, uint64_t max_bytes, uint64_t queue_bytes)
{
    quarantine_options_t o = {.max_bytes = max_bytes, .queue_bytes = queue_bytes};
    quarantine_t *q = NULL;
    assert_int_equal(quarantine_open(fx->dir, &o, &q, NULL), QUARANTINE_OK);
    return q;
}

/* Every record from `from` on, parsed; *n gets their number. The caller frees with json_decref. */
static json_t *read_all(const fx_t *fx, uint64_t from)
{
    log_reader_t *r = NULL;
    log_record_t rec;
    json_t *list = json_array();
    int rc;

    assert_int_equal(log_reader_open(fx->dir, from, &r), LOG_OK);
    while ((rc = log_reader_next(r, UINT64_MAX, &rec)) == LOG_OK) {
        json_error_t err;
        /* One line of NDJSON: no raw newline inside. */
        assert_null(memchr(rec.data, '\n', rec.len));
        json_t *j = json_loadb(rec.data, rec.len, 0, &err);
        assert_non_null(j);
        json_array_append_new(list, j);
    }
    assert_int_equal(rc, LOG_END);
    log_reader_close(r);
    return list;
}

static uint64_t seg_bytes(const fx_t *fx)
{
    DIR *d = opendir(fx->dir);
    struct dirent *e;
    uint64_t total = 0;
    char path[600];
    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", fx->dir, e->d_name);
        assert_int_equal(stat(path, &st), 0);
        total += (uint64_t)st.st_size;
    }
    closedir(d);
    return total;
}

static const char *str(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static void test_record_fields(void **state)
{
    fx_t *fx = *state;
    quarantine_t *q = open_q(fx, 1024 * 1024, 0);
    const char ev[] = "{\"type\":\"track\",\"note\":\"a\xe2\x80\xa8"
                      "b\xc2\x85"
                      "c\"}";
    quarantine_entry_t e = {
        .reason = "missing_field",
        .error = "userId or anonymousId is required",
        .request_id = "req-1",
        .source = "web",
        .received_ms = 1767225600123,
        .index = 3,
        .raw = ev,
        .raw_len = strlen(ev),
        .raw_cap = QUARANTINE_EVENT_BYTES,
    };
    assert_int_equal(quarantine_add(q, &e), QUARANTINE_OK);
    /* A request refused whole: binary (a gzip body) comes back in base64; unknown source. */
    const char bin[] = "\x1f\x8b\x08\x00\xff\xfe";
    quarantine_entry_t w = {.reason = "bad_encoding",
                            .error = "invalid gzip body",
                            .received_ms = 1767225600000,
                            .index = -1,
                            .raw = bin,
                            .raw_len = 6,
                            .raw_cap = QUARANTINE_REQUEST_BYTES};
    assert_int_equal(quarantine_add(q, &w), QUARANTINE_OK);
    assert_int_equal(quarantine_flush(q, 10000), QUARANTINE_OK);
    quarantine_stats_t s;
    quarantine_get_stats(q, &s);
    assert_int_equal(s.records, 2);
    assert_int_equal(s.written, 2);
    assert_int_equal(s.next_offset, 2);
    assert_true(s.bytes > 0);
    quarantine_close(q);

    json_t *list = read_all(fx, 0);
    assert_int_equal(json_array_size(list), 2);
    json_t *a = json_array_get(list, 0);
    assert_string_equal(str(a, "reason"), "missing_field");
    assert_string_equal(str(a, "error"), "userId or anonymousId is required");
    assert_string_equal(str(a, "requestId"), "req-1");
    assert_string_equal(str(a, "source"), "web");
    assert_string_equal(str(a, "receivedAt"), "2026-01-01T00:00:00.123Z");
    assert_string_equal(str(a, "scope"), "event");
    assert_int_equal(json_integer_value(json_object_get(a, "index")), 3);
    assert_true(json_is_false(json_object_get(a, "truncated")));
    assert_string_equal(str(a, "raw"), ev); /* the client's bytes exactly, after unescaping */
    json_t *b = json_array_get(list, 1);
    assert_string_equal(str(b, "scope"), "request");
    assert_null(json_object_get(b, "index"));
    assert_true(json_is_null(json_object_get(b, "source")));
    assert_true(json_is_null(json_object_get(b, "requestId")));
    assert_null(json_object_get(b, "raw"));
    assert_string_equal(str(b, "rawBase64"), "H4sIAP/+");
    json_decref(list);
}

/* The escapes that keep a line a line: U+2028 and C1 controls written as \uXXXX. */
static void test_escapes_keep_one_line(void **state)
{
    fx_t *fx = *state;
    quarantine_t *q = open_q(fx, 1024 * 1024, 0);
    const char ev[] = "x\xe2\x80\xa8y\xc2\x85z\n";
    quarantine_entry_t e = {.reason = "bad_type",
                            .index = 0,
                            .raw = ev,
                            .raw_len = strlen(ev),
                            .raw_cap = 100,
                            .source = "bad\xff"};
    assert_int_equal(quarantine_add(q, &e), QUARANTINE_OK);
    assert_int_equal(quarantine_flush(q, 10000), QUARANTINE_OK);
    quarantine_close(q);
    log_reader_t *r = NULL;
    log_record_t rec;
    assert_int_equal(log_reader_open(fx->dir, 0, &r), LOG_OK);
    assert_int_equal(log_reader_next(r, UINT64_MAX, &rec), LOG_OK);
    char *text = strndup(rec.data, rec.len);
    assert_non_null(strstr(text, "x\\u2028y\\u0085z\\u000A"));
    assert_non_null(strstr(text, "\"source\":\"bad\\uFFFD\""));
    free(text);
    log_reader_close(r);
}

/* Over the cap: cut, flagged, and the size says how much there was; a cut inside a character
 * moves back to its start, so the text stays UTF-8. */
static void test_cut_at_cap(void **state)
{
    fx_t *fx = *state;
    quarantine_t *q = open_q(fx, 1024 * 1024, 0);
    size_t len = 40000;
    char *big = malloc(len);
    assert_non_null(big);
    memset(big, 'a', len);
    /* "é" (2 bytes) straddling the 32 KiB cut */
    big[QUARANTINE_EVENT_BYTES - 1] = '\xc3';
    big[QUARANTINE_EVENT_BYTES] = '\xa9';
    quarantine_entry_t e = {.reason = "too_large",
                            .index = 0,
                            .raw = big,
                            .raw_len = len,
                            .raw_cap = QUARANTINE_EVENT_BYTES};
    assert_int_equal(quarantine_add(q, &e), QUARANTINE_OK);
    assert_int_equal(quarantine_flush(q, 10000), QUARANTINE_OK);
    quarantine_close(q);
    free(big);
    json_t *list = read_all(fx, 0);
    json_t *a = json_array_get(list, 0);
    assert_true(json_is_true(json_object_get(a, "truncated")));
    assert_int_equal(json_integer_value(json_object_get(a, "size")), 40000);
    assert_int_equal(json_string_length(json_object_get(a, "raw")), QUARANTINE_EVENT_BYTES - 1);
    json_decref(list);
}

/* A flood never grows the directory past the bound plus the active segment (and its index). */
static void test_size_bound(void **state)
{
    fx_t *fx = *state;
    const uint64_t max = 64 * 1024;
    quarantine_t *q = open_q(fx, max, 0);
    char raw[1000];
    memset(raw, 'x', sizeof raw);
    for (int i = 0; i < 2000; i++) {
        quarantine_entry_t e = {.reason = "invalid_json",
                                .index = -1,
                                .raw = raw,
                                .raw_len = sizeof raw,
                                .raw_cap = QUARANTINE_REQUEST_BYTES};
        quarantine_add(q, &e); /* a full queue drops: counted below */
        if (i % 50 == 0)
            assert_int_equal(quarantine_flush(q, 10000), QUARANTINE_OK);
    }
    assert_int_equal(quarantine_flush(q, 10000), QUARANTINE_OK);
    quarantine_stats_t s;
    quarantine_get_stats(q, &s);
    assert_int_equal(s.written + s.dropped + s.failed, 2000);
    assert_true(s.deleted > 0);
    assert_true(s.first_offset > 0);
    assert_true(s.bytes <= max + s.segment_bytes + 2 * 1024);
    assert_true(seg_bytes(fx) <= max + s.segment_bytes + 2 * 1024 + 4096 /* .idx files */);
    quarantine_close(q);
}

/* A record larger than the whole queue can never be queued: it is dropped and counted. */
static void test_full_queue_drops(void **state)
{
    fx_t *fx = *state;
    quarantine_t *q = open_q(fx, 1024 * 1024, 512);
    char raw[2000];
    memset(raw, 'y', sizeof raw);
    quarantine_entry_t e = {.reason = "invalid_json",
                            .index = -1,
                            .raw = raw,
                            .raw_len = sizeof raw,
                            .raw_cap = sizeof raw};
    assert_int_equal(quarantine_add(q, &e), QUARANTINE_DROPPED);
    e.raw_len = 10;
    assert_int_equal(quarantine_add(q, &e), QUARANTINE_OK);
    assert_int_equal(quarantine_flush(q, 10000), QUARANTINE_OK);
    quarantine_stats_t s;
    quarantine_get_stats(q, &s);
    assert_int_equal(s.dropped, 1);
    assert_int_equal(s.written, 1);
    quarantine_close(q);
}

/* Records survive a close and reopen; offsets go on. */
static void test_reopen(void **state)
{
    fx_t *fx = *state;
    for (int round = 0; round < 2; round++) {
        quarantine_t *q = open_q(fx, 1024 * 1024, 0);
        quarantine_entry_t e = {
            .reason = "bad_value", .index = round, .raw = "{}", .raw_len = 2, .raw_cap = 100};
        assert_int_equal(quarantine_add(q, &e), QUARANTINE_OK);
        quarantine_close(q); /* close writes what is queued */
    }
    json_t *list = read_all(fx, 0);
    assert_int_equal(json_array_size(list), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(list, 1), "index")), 1);
    json_decref(list);
    quarantine_t *q = open_q(fx, 1024 * 1024, 0);
    quarantine_stats_t s;
    quarantine_get_stats(q, &s);
    assert_int_equal(s.next_offset, 2);
    assert_int_equal(s.records, 2);
    quarantine_close(q);
}

static void test_bad_arguments(void **state)
{
    fx_t *fx = *state;
    quarantine_options_t o = {.max_bytes = 0};
    quarantine_t *q = NULL;
    assert_int_equal(quarantine_open(fx->dir, &o, &q, NULL), QUARANTINE_INVALID);
    assert_null(q);
    quarantine_close(NULL);
    q = open_q(fx, 1024 * 1024, 0);
    quarantine_entry_t e = {.reason = NULL};
    assert_int_equal(quarantine_add(q, &e), QUARANTINE_INVALID);
    quarantine_close(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_record_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_escapes_keep_one_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cut_at_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_size_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_queue_drops, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_arguments, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
