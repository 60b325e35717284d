/*
 * Unit tests for api/batch: validation and normalisation. Most cases are data
 * files (tests/data/batch/valid/ and invalid/, one JSON file per case, each run
 * as its own cmocka test); limits and randomness are tested in code below.
 *
 * A case file: {"route": "batch"|"import"|"track"|..., "now": ISO time,
 *   "source"?: name (default "default"), "body": JSON | "body_text": raw text,
 *   valid/: "events": [expected normalised event...], "rejected": [{"index","error"}...]
 *   invalid/: "error": exact whole-request error, or "error_prefix": its start}
 * Assigned messageIds come from a counter: 00000000-0000-4000-8000-000000000001, ...
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>

#include <cmocka.h>
#include <jansson.h>

#include "api/api.h"
#include "api/batch.h"
#include "api/jsonparse.h"
#include "api/timestamp.h"

static const uint8_t SECRET[KEYHASH_SECRET_LEN] = {1, 2,  3,  4,  5,  6,  7,  8,
                                                   9, 10, 11, 12, 13, 14, 15, 16};
#define NOW_MS 1795332722123LL /* 2026-11-22T07:32:02.123Z */

static void counter_uuid(char out[BATCH_UUID_LEN + 1], void *arg)
{
    unsigned *n = arg;
    snprintf(out, BATCH_UUID_LEN + 1, "00000000-0000-4000-8000-%012u", ++*n);
}

/* The messageIds the first build assigns, replayed in the second so both write the same. */
typedef struct uuid_tape {
    batch_uuid_fn fn; /* NULL: batch_uuid_v4 */
    void *arg;
    char (*ids)[BATCH_UUID_LEN + 1];
    size_t n, next;
} uuid_tape_t;

static void tape_record(char out[BATCH_UUID_LEN + 1], void *arg)
{
    uuid_tape_t *t = arg;
    (t->fn ? t->fn : batch_uuid_v4)(out, t->arg);
    assert_true(t->n < API_MAX_BATCH_EVENTS + 1);
    memcpy(t->ids[t->n++], out, BATCH_UUID_LEN + 1);
}

static void tape_replay(char out[BATCH_UUID_LEN + 1], void *arg)
{
    uuid_tape_t *t = arg;
    assert_true(t->next < t->n);
    memcpy(out, t->ids[t->next++], BATCH_UUID_LEN + 1);
}

/* Runs parse + build like the api does; returns the status and fills *b / err. Every case is
 * built twice: with the input's verbatim containers copied (as the server does) and with every
 * container written member by member; the bytes must be the same. */
static int run(const char *route, const char *source, int64_t now, const char *body, size_t len,
               batch_t *b, batch_error_t *err, unsigned *uuid_counter)
{
    json_t *root = NULL;
    jsonparse_spans_t *spans = NULL;
    memset(b, 0, sizeof(*b));
    int rc = batch_parse_spans(body, len, &root, &spans, NULL, err);
    if (rc != BATCH_OK)
        return rc;
    uuid_tape_t tape = {.fn = uuid_counter ? counter_uuid : NULL, .arg = uuid_counter};
    tape.ids = calloc(API_MAX_BATCH_EVENTS + 1, sizeof(*tape.ids));
    assert_non_null(tape.ids);
    batch_options_t o = {
        .single_type =
            (!route || !strcmp(route, "batch") || !strcmp(route, "import")) ? NULL : route,
        .source = source,
        .secret = SECRET,
        .now_ms = now,
        .uuid = tape_record,
        .uuid_arg = &tape,
        .spans = spans,
    };
    rc = batch_build(root, &o, b, err);
    batch_t slow = {0};
    batch_error_t slow_err = {{0}};
    o.spans = NULL;
    o.uuid = tape_replay;
    assert_int_equal(batch_build(root, &o, &slow, &slow_err), rc);
    assert_int_equal(b->nevents, slow.nevents);
    assert_int_equal(b->nrejected, slow.nrejected);
    for (size_t i = 0; i < b->nevents; i++) {
        assert_int_equal(b->events[i].len, slow.events[i].len);
        assert_memory_equal(b->events[i].data, slow.events[i].data, slow.events[i].len);
    }
    batch_clear(&slow);
    free(tape.ids);
    jsonparse_spans_free(spans);
    json_decref(root);
    return rc;
}

/* Every produced event: one compact line, and its key is keyhash(secret, source, messageId). */
static json_t *check_event_bytes(const batch_event_t *e, const char *source)
{
    json_error_t jerr;
    uint8_t key[KEYHASH_LEN];
    assert_non_null(e->data);
    assert_int_equal(strlen(e->data), e->len);
    assert_null(memchr(e->data, '\n', e->len));
    assert_true(e->len <= API_MAX_EVENT_BYTES);
    /* JSON_ALLOW_NUL: a client's \u0000 is logged as that escape. */
    json_t *j = json_loadb(e->data, e->len, JSON_ALLOW_NUL, &jerr);
    if (!j)
        fail_msg("event is not JSON: %s", jerr.text);
    json_t *mid = json_object_get(j, "messageId");
    assert_true(json_is_string(mid));
    keyhash(SECRET, source, strlen(source), json_string_value(mid), json_string_length(mid), key);
    assert_memory_equal(key, e->key, KEYHASH_LEN);
    assert_string_equal(json_string_value(json_object_get(j, "source")), source);
    assert_null(json_object_get(j, "writeKey"));
    return j;
}

struct data_case {
    char path[1024];
    char name[256];
    int valid;
};

static void run_case(void **state)
{
    const struct data_case *c = *state;
    json_error_t jerr;
    json_t *spec = json_load_file(c->path, 0, &jerr);
    if (!spec)
        fail_msg("%s: %s (line %d)", c->path, jerr.text, jerr.line);

    const char *route = json_string_value(json_object_get(spec, "route"));
    const char *now_s = json_string_value(json_object_get(spec, "now"));
    const char *source = json_string_value(json_object_get(spec, "source"));
    int64_t now = NOW_MS;
    if (now_s)
        assert_int_equal(timestamp_parse(now_s, strlen(now_s), &now), 0);
    if (!source)
        source = "default";

    char *body;
    json_t *text = json_object_get(spec, "body_text");
    if (text)
        body = strdup(json_string_value(text));
    else
        body = json_dumps(json_object_get(spec, "body"), JSON_COMPACT | JSON_ENCODE_ANY);
    assert_non_null(body);

    batch_t b;
    batch_error_t err = {{0}};
    unsigned counter = 0;
    int rc = run(route, source, now, body, strlen(body), &b, &err, &counter);

    if (!c->valid) {
        if (rc != BATCH_BAD_REQUEST)
            fail_msg("%s: expected a whole-request error, got rc %d", c->name, rc);
        assert_int_equal(b.nevents, 0);
        assert_int_equal(b.nrejected, 0);
        const char *want = json_string_value(json_object_get(spec, "error"));
        const char *prefix = json_string_value(json_object_get(spec, "error_prefix"));
        assert_true(want || prefix);
        if (want && strcmp(err.text, want) != 0)
            fail_msg("%s: error \"%s\" want \"%s\"", c->name, err.text, want);
        if (prefix && strncmp(err.text, prefix, strlen(prefix)) != 0)
            fail_msg("%s: error \"%s\" want prefix \"%s\"", c->name, err.text, prefix);
        goto out;
    }

    if (rc != BATCH_OK)
        fail_msg("%s: rc %d (%s)", c->name, rc, err.text);
    json_t *want_ev = json_object_get(spec, "events");
    json_t *want_rej = json_object_get(spec, "rejected");
    assert_true(json_is_array(want_ev));
    if (b.nevents != json_array_size(want_ev))
        fail_msg("%s: %zu events, want %zu", c->name, b.nevents, json_array_size(want_ev));
    for (size_t i = 0; i < b.nevents; i++) {
        json_t *got = check_event_bytes(&b.events[i], source);
        json_t *want = json_deep_copy(json_array_get(want_ev, i));
        json_t *idx = json_object_get(want, "$index"); /* optional position check */
        if (idx) {
            assert_int_equal(b.events[i].index, json_integer_value(idx));
            json_object_del(want, "$index");
        }
        if (!json_equal(got, want)) {
            char *w = json_dumps(want, JSON_COMPACT);
            fail_msg("%s: event %zu\n got: %s\nwant: %s", c->name, i, b.events[i].data, w);
        }
        json_decref(want);
        json_decref(got);
    }
    size_t nrej = want_rej ? json_array_size(want_rej) : 0;
    if (b.nrejected != nrej)
        fail_msg("%s: %zu rejected, want %zu (first: %s)", c->name, b.nrejected, nrej,
                 b.nrejected ? b.rejected[0].error : "-");
    for (size_t i = 0; i < nrej; i++) {
        json_t *w = json_array_get(want_rej, i);
        assert_int_equal(b.rejected[i].index, json_integer_value(json_object_get(w, "index")));
        const char *we = json_string_value(json_object_get(w, "error"));
        if (strcmp(b.rejected[i].error, we) != 0)
            fail_msg("%s: rejected[%zu] \"%s\" want \"%s\"", c->name, i, b.rejected[i].error, we);
    }
out:
    batch_clear(&b);
    free(body);
    json_decref(spec);
}

/* ---- cases in code: limits, UUIDs, number formatting ---- */

static char *make_batch(size_t n)
{
    size_t cap = n * 64 + 64, len = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    len += (size_t)sprintf(s + len, "{\"batch\":[");
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(s + len, "%s{\"type\":\"identify\",\"userId\":\"u%zu\"}",
                               i ? "," : "", i);
    sprintf(s + len, "]}");
    return s;
}

/* Which containers the parser hands over as verbatim: only those whose bytes are exactly what
 * the serialiser writes. */
static void test_verbatim_spans(void **state)
{
    (void)state;
    static const struct {
        const char *props; /* the value of "p" */
        bool verbatim;
    } cases[] = {
        {"{\"a\":\"x\",\"b\":[1,-2,true,false,null,{}],\"c\":\"\xc3\xa9\"}", true},
        {"[]", true},
        {"{\"a\": 1}", false},                  /* whitespace */
        {"{\"a\":1 }", false},                  /* whitespace before the brace */
        {"{\"a\":\"\\/\"}", false},             /* an escape, written back as "/" */
        {"{\"a\":\"\\u00e9\"}", false},         /* written back as the raw character */
        {"{\"a\":\"\xc2\x85\"}", false},        /* U+0085 goes out escaped */
        {"{\"a\":\"\xe2\x80\xa8\"}", false},    /* U+2028 too */
        {"{\"a\":\"\xe2\x80\xa6\"}", true},     /* U+2026 does not */
        {"{\"a\":-0}", false},                  /* written as 0 */
        {"{\"a\":1.50}", false},                /* reals are formatted again */
        {"{\"a\":1234567890123456789}", false}, /* 19 digits: strtoll's path */
        {"[{\"a\":1},{\"b\": 2}]", false},      /* an inner container is not */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char body[256];
        snprintf(body, sizeof(body), "{\"p\":%s}", cases[i].props);
        jsonparse_spans_t *sp = NULL;
        json_t *root = jsonparse_spans(body, strlen(body), &sp);
        assert_non_null(root);
        const char *text = NULL;
        size_t len = 0;
        bool found = jsonparse_span(sp, json_object_get(root, "p"), &text, &len);
        if (found != cases[i].verbatim)
            fail_msg("%s: verbatim %d, expected %d", cases[i].props, found, cases[i].verbatim);
        if (found) {
            assert_int_equal(len, strlen(cases[i].props));
            assert_memory_equal(text, cases[i].props, len);
        }
        jsonparse_spans_free(sp);
        json_decref(root);
    }
    /* A repeated key frees a value whose address may come back: no spans at all then. */
    const char *dup = "{\"p\":{\"a\":{\"x\":1},\"a\":{\"y\":2}}}";
    jsonparse_spans_t *sp = NULL;
    json_t *root = jsonparse_spans(dup, strlen(dup), &sp);
    assert_non_null(root);
    assert_null(sp);
    json_decref(root);
}

/* The events of a body with verbatim and other containers, with and without spans (run()
 * compares the two), and the verbatim bytes really are the client's. */
static void test_verbatim_events(void **state)
{
    (void)state;
    const char *body =
        "{\"batch\":[{\"type\":\"track\",\"event\":\"e\",\"userId\":\"u\",\"messageId\":\"m1\","
        "\"properties\":{\"k\":[1,{\"z\":\"\xc3\xa9\"}],\"n\":null},"
        "\"context\":{\"library\":{\"name\":\"x\"}}},"
        "{\"type\":\"track\",\"event\":\"e\",\"userId\":\"u\",\"messageId\":\"m2\","
        "\"properties\":{\"k\": 1.5e3,\"s\":\"a\\u2028b\",\"t\":{\"x\":-0}}}],"
        "\"context\":{\"ip\":\"1.2.3.4\",\"o\":{\"v\":1}}}";
    batch_t b;
    batch_error_t err = {{0}};
    assert_int_equal(run("batch", "src", NOW_MS, body, strlen(body), &b, &err, NULL), BATCH_OK);
    assert_int_equal(b.nevents, 2);
    assert_non_null(
        strstr(b.events[0].data, "\"properties\":{\"k\":[1,{\"z\":\"\xc3\xa9\"}],\"n\":null}"));
    assert_non_null(
        strstr(b.events[0].data,
               "\"context\":{\"library\":{\"name\":\"x\"},\"ip\":\"1.2.3.4\",\"o\":{\"v\":1}}"));
    assert_non_null(strstr(b.events[1].data,
                           "\"properties\":{\"k\":1500.0,\"s\":\"a\\u2028b\",\"t\":{\"x\":0}}"));
    batch_clear(&b);
}

static void test_batch_cap(void **state)
{
    batch_t b;
    batch_error_t err = {{0}};
    (void)state;
    char *s = make_batch(API_MAX_BATCH_EVENTS);
    assert_int_equal(run("batch", "default", NOW_MS, s, strlen(s), &b, &err, NULL), BATCH_OK);
    assert_int_equal(b.nevents, API_MAX_BATCH_EVENTS);
    assert_int_equal(b.nrejected, 0);
    batch_clear(&b);
    assert_null(b.events);
    free(s);

    s = make_batch(API_MAX_BATCH_EVENTS + 1);
    assert_int_equal(run("batch", "default", NOW_MS, s, strlen(s), &b, &err, NULL),
                     BATCH_BAD_REQUEST);
    assert_string_equal(err.text, "too many events in batch (max 2500)");
    assert_int_equal(b.nevents, 0);
    free(s);
}

/* A batch of [small, padded, small] where the padded event normalises to `size` bytes exactly. */
static char *padded_batch(size_t pad)
{
    char *s = malloc(pad + 512);
    assert_non_null(s);
    int n = sprintf(s, "{\"batch\":[{\"type\":\"track\",\"event\":\"a\",\"userId\":\"u\","
                       "\"messageId\":\"m1\"},{\"type\":\"track\",\"event\":\"a\",\"userId\":"
                       "\"u\",\"messageId\":\"m2\",\"properties\":{\"pad\":\"");
    memset(s + n, 'x', pad);
    sprintf(s + n + pad, "\"}},{\"type\":\"track\",\"event\":\"a\",\"userId\":\"u\","
                         "\"messageId\":\"m3\"}]}");
    return s;
}

static void test_event_cap(void **state)
{
    batch_t b;
    batch_error_t err = {{0}};
    (void)state;
    /* Measure the normalised size with a small pad, then aim at the boundary exactly. */
    char *s = padded_batch(10);
    assert_int_equal(run("batch", "web", NOW_MS, s, strlen(s), &b, &err, NULL), BATCH_OK);
    assert_int_equal(b.nevents, 3);
    size_t base = b.events[1].len - 10;
    batch_clear(&b);
    free(s);

    s = padded_batch(API_MAX_EVENT_BYTES - base);
    assert_int_equal(run("batch", "web", NOW_MS, s, strlen(s), &b, &err, NULL), BATCH_OK);
    assert_int_equal(b.nevents, 3);
    assert_int_equal(b.events[1].len, API_MAX_EVENT_BYTES);
    batch_clear(&b);
    free(s);

    s = padded_batch(API_MAX_EVENT_BYTES - base + 1);
    assert_int_equal(run("batch", "web", NOW_MS, s, strlen(s), &b, &err, NULL), BATCH_OK);
    assert_int_equal(b.nevents, 2); /* the neighbours survive */
    assert_int_equal(b.events[0].index, 0);
    assert_int_equal(b.events[1].index, 2);
    assert_int_equal(b.nrejected, 1);
    assert_int_equal(b.rejected[0].index, 1);
    assert_string_equal(b.rejected[0].error, "event too large");
    batch_clear(&b);
    free(s);
}

static int is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

static void assert_uuid_v4(const char *s)
{
    assert_int_equal(strlen(s), BATCH_UUID_LEN);
    for (int i = 0; i < BATCH_UUID_LEN; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23)
            assert_int_equal(s[i], '-');
        else if (!is_hex(s[i]))
            fail_msg("not lowercase hex at %d: %s", i, s);
    }
    assert_int_equal(s[14], '4');           /* version 4 */
    assert_non_null(strchr("89ab", s[19])); /* RFC 4122 variant */
}

static void test_assigned_uuid_v4(void **state)
{
    batch_t b;
    batch_error_t err = {{0}};
    json_error_t jerr;
    char seen[3][BATCH_UUID_LEN + 1];
    (void)state;
    const char *body = "{\"batch\":[{\"type\":\"identify\",\"userId\":\"a\"},"
                       "{\"type\":\"identify\",\"userId\":\"b\"},"
                       "{\"type\":\"identify\",\"userId\":\"c\",\"messageId\":\"given\"},"
                       "{\"type\":\"identify\",\"userId\":\"d\"}]}";
    /* No uuid function: the real libuuid generator. */
    assert_int_equal(run("batch", "default", NOW_MS, body, strlen(body), &b, &err, NULL), BATCH_OK);
    assert_int_equal(b.nevents, 4);
    for (size_t i = 0, k = 0; i < 4; i++) {
        json_t *j = json_loadb(b.events[i].data, b.events[i].len, 0, &jerr);
        assert_non_null(j);
        const char *mid = json_string_value(json_object_get(j, "messageId"));
        if (i == 2) {
            assert_string_equal(mid, "given");
        } else {
            assert_uuid_v4(mid);
            strcpy(seen[k++], mid);
        }
        json_decref(j);
    }
    assert_string_not_equal(seen[0], seen[1]);
    assert_string_not_equal(seen[1], seen[2]);
    batch_clear(&b);

    char direct[BATCH_UUID_LEN + 1];
    batch_uuid_v4(direct, NULL);
    assert_uuid_v4(direct);
}

/* The logged timestamp of the only event of `body` (a single track) built with `header`. */
static void timestamp_with_header(const char *body, const char *header, const char *want)
{
    json_t *root = NULL;
    batch_t b;
    batch_error_t err = {{0}};
    assert_int_equal(batch_parse(body, strlen(body), &root, &err), BATCH_OK);
    batch_options_t o = {
        .single_type = "track",
        .source = "default",
        .secret = SECRET,
        .now_ms = NOW_MS,
        .sent_at_header = header,
    };
    assert_int_equal(batch_build(root, &o, &b, &err), BATCH_OK);
    assert_int_equal(b.nevents, 1);
    json_t *j = check_event_bytes(&b.events[0], "default");
    assert_string_equal(json_string_value(json_object_get(j, "timestamp")), want);
    json_decref(j);
    json_decref(root);
    batch_clear(&b);
}

/* A client clock sent as a header (RudderStack's JS SDK: SentAt) corrects like a body sentAt,
 * but only for an event whose body has none. */
static void test_sent_at_header(void **state)
{
    (void)state;
    /* The client's clock is 10 s ahead: its timestamp moves 10 s back. */
    const char *plain =
        "{\"userId\":\"u\",\"event\":\"e\",\"timestamp\":\"2026-11-22T07:32:00.123Z\"}";
    timestamp_with_header(plain, "2026-11-22T07:32:12.123Z", "2026-11-22T07:31:50.123Z");
    timestamp_with_header(plain, NULL, "2026-11-22T07:32:00.123Z");
    timestamp_with_header(plain, "yesterday", "2026-11-22T07:32:00.123Z"); /* only a hint */
    /* A sentAt in the body wins over the header. */
    const char *with_sent = "{\"userId\":\"u\",\"event\":\"e\",\"timestamp\":"
                            "\"2026-11-22T07:32:00.123Z\",\"sentAt\":\"2026-11-22T07:32:02.123Z\"}";
    timestamp_with_header(with_sent, "2026-11-22T07:32:12.123Z", "2026-11-22T07:32:00.123Z");
    /* A header clock gone wild: the correction would leave the sane range, the client's
     * timestamp is kept as it is. */
    timestamp_with_header(plain, "0001-01-01T00:00:00Z", "2026-11-22T07:32:00.123Z");
}

static void test_numbers_kept(void **state)
{
    batch_t b;
    batch_error_t err = {{0}};
    json_error_t jerr;
    (void)state;
    /* Reals come out as the shortest text (15..17 digits) that reads back to the same double,
     * so a price typed as 19.99 is not logged as 19.989999999999998. */
    const char *body = "{\"type\":\"track\",\"event\":\"Order\",\"userId\":\"u\","
                       "\"properties\":{\"revenue\":19.99,\"tax\":0.1,\"n\":3,\"big\":"
                       "9007199254740993,\"e\":1.5e300}}";
    assert_int_equal(run("track", "default", NOW_MS, body, strlen(body), &b, &err, NULL), BATCH_OK);
    assert_int_equal(b.nevents, 1);
    const char *d = b.events[0].data;
    assert_non_null(strstr(d, "\"properties\":{\"revenue\":19.99,\"tax\":0.1,\"n\":3,"
                              "\"big\":9007199254740993,\"e\":1.5e300}"));
    batch_clear(&b);

    /* A value that needs 17 digits raises the precision of its event: still exact. */
    body = "{\"type\":\"track\",\"event\":\"Order\",\"userId\":\"u\","
           "\"properties\":{\"revenue\":19.99,\"third\":0.30000000000000004}}";
    assert_int_equal(run("track", "default", NOW_MS, body, strlen(body), &b, &err, NULL), BATCH_OK);
    json_t *j = json_loadb(b.events[0].data, b.events[0].len, 0, &jerr);
    assert_non_null(j);
    json_t *p = json_object_get(j, "properties");
    assert_true(json_real_value(json_object_get(p, "revenue")) == 19.99);
    assert_true(json_real_value(json_object_get(p, "third")) == 0.1 + 0.2);
    assert_true(json_real_value(json_object_get(p, "third")) != 0.3);
    json_decref(j);
    batch_clear(&b);
}

/* The bytes of the first event's "event" member as logged, between its quotes. */
static const char *logged_event_name(const batch_t *b, size_t i, size_t *len)
{
    const char *d = strstr(b->events[i].data, "\"event\":\"");
    assert_non_null(d);
    d += 9;
    const char *e = d;
    while (*e != '"')
        e += *e == '\\' ? 2 : 1;
    *len = (size_t)(e - d);
    return d;
}

static void test_invalid_utf8(void **state)
{
    batch_t b;
    batch_error_t err = {{0}};
    size_t len;
    (void)state;
    /* Bytes that are not UTF-8 inside a string read as one U+FFFD each, as Go's encoding/json
     * (Segment) reads them: the event is kept, and so are the others. */
    const char body[] =
        "{\"batch\":[{\"type\":\"identify\",\"userId\":\"\xff\xfe\"},"
        "{\"type\":\"track\",\"event\":\"a\xc0\xaf\xed\xa0\x80z\",\"userId\":\"u\"}]}";
    assert_int_equal(run("batch", "default", NOW_MS, body, sizeof(body) - 1, &b, &err, NULL),
                     BATCH_OK);
    assert_int_equal(b.nevents, 2);
    assert_non_null(strstr(b.events[0].data, "\"userId\":\"\xef\xbf\xbd\xef\xbf\xbd\""));
    const char *ev = logged_event_name(&b, 1, &len);
    assert_int_equal(len, 2 + 5 * 3);
    assert_memory_equal(ev, "a\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdz", len);
    batch_clear(&b);
    /* Outside a string they stay what they were: not JSON. */
    const char bad[] = "{\"batch\":[\xff]}";
    assert_int_equal(run("batch", "default", NOW_MS, bad, sizeof(bad) - 1, &b, &err, NULL),
                     BATCH_BAD_REQUEST);
    assert_true(strncmp(err.text, "invalid JSON", 12) == 0);
    /* The client's bytes are not echoed back. */
    assert_null(strchr(err.text, '\xff'));
    assert_null(strchr(err.text, '\xef'));
    /* A body with an embedded NUL byte (not \u0000) ends the JSON: trailing garbage. */
    const char nul[] = "{\"batch\":[]}\0{}";
    assert_int_equal(run("batch", "default", NOW_MS, nul, sizeof(nul) - 1, &b, &err, NULL),
                     BATCH_BAD_REQUEST);
    assert_true(strncmp(err.text, "invalid JSON", 12) == 0);
    assert_int_equal(batch_parse(NULL, 0, &(json_t *){NULL}, &err), BATCH_BAD_REQUEST);
    assert_string_equal(err.text, "body is empty");
}

/*
 * A batch as Node's JSON.stringify writes it: a string cut inside an emoji leaves a lone
 * surrogate escape, a NUL is written \u0000. Every event is kept; the cut one with U+FFFD. A NUL
 * in a messageId rejects that event: no lookup path could carry it.
 */
static void test_stringify_escapes(void **state)
{
    batch_t b;
    batch_error_t err = {{0}};
    size_t len;
    (void)state;
    const char *body =
        "{\"batch\":["
        "{\"type\":\"track\",\"event\":\"cut \\ud83d\",\"userId\":\"u\",\"messageId\":\"m1\"},"
        "{\"type\":\"track\",\"event\":\"whole "
        "\\ud83d\\ude00\",\"userId\":\"u\",\"messageId\":\"m2\"},"
        "{\"type\":\"track\",\"event\":\"\\ude00\\ud83d!\",\"userId\":\"u\",\"messageId\":\"m3\"},"
        "{\"type\":\"track\",\"event\":\"a\\u0000b\",\"userId\":\"u\",\"messageId\":\"m\\u0000x\"},"
        "{\"type\":\"track\",\"event\":\"k\",\"userId\":\"u\",\"k\\u0000\":1},"
        "{\"type\":\"track\\u0000\",\"event\":\"t\",\"userId\":\"u\"},"
        "{\"type\":\"track\",\"event\":\"a\\u0000b\",\"userId\":\"u\",\"messageId\":\"m4\"}]}";
    assert_int_equal(run("batch", "default", NOW_MS, body, strlen(body), &b, &err, NULL), BATCH_OK);
    assert_int_equal(b.nevents, 5);
    assert_int_equal(b.nrejected, 2);
    assert_int_equal(b.rejected[0].index, 3); /* the NUL in its messageId */
    assert_string_equal(b.rejected[0].error, "messageId must not contain a NUL (\\u0000)");
    const char *ev = logged_event_name(&b, 0, &len);
    assert_int_equal(len, 7);
    assert_memory_equal(ev, "cut \xef\xbf\xbd", len);
    ev = logged_event_name(&b, 1, &len);
    assert_memory_equal(ev, "whole \xf0\x9f\x98\x80", len);
    ev = logged_event_name(&b, 2, &len);
    assert_memory_equal(ev, "\xef\xbf\xbd\xef\xbf\xbd!", len);
    /* A NUL stays in the string, written escaped: no raw NUL ever reaches the log. */
    ev = logged_event_name(&b, 4, &len);
    assert_memory_equal(ev, "a\\u0000b", len);
    /* jansson has no NUL in keys: the key reads with U+FFFD instead. */
    assert_non_null(strstr(b.events[3].data, "\"k\xef\xbf\xbd\":1"));
    /* "track\u0000" is no track: that event alone is rejected. */
    assert_int_equal(b.rejected[1].index, 5);
    for (size_t i = 0; i < b.nevents; i++)
        json_decref(check_event_bytes(&b.events[i], "default"));
    batch_clear(&b);
}

/* U+2028, U+2029 and the C1 controls (U+0085 among them) end lines for some line splitters:
 * written escaped, so an NDJSON record is never cut. Other characters stay as they are. */
static void test_line_separators_escaped(void **state)
{
    batch_t b;
    batch_error_t err = {{0}};
    size_t len;
    (void)state;
    const char *body = "{\"type\":\"track\",\"userId\":\"u\",\"event\":"
                       "\"a\xe2\x80\xa8"
                       "b\xe2\x80\xa9"
                       "c\xc2\x85"
                       "d\xc2\x80\xc2\x9f"
                       "e\xc2\xa0\xe2\x80\xa7\xe2\x80\xaa\xc3\xa9\\u2028\\u0085\","
                       "\"properties\":{\"k\xe2\x80\xa8\":1}}";
    assert_int_equal(run("track", "default", NOW_MS, body, strlen(body), &b, &err, NULL), BATCH_OK);
    assert_int_equal(b.nevents, 1);
    const char *ev = logged_event_name(&b, 0, &len);
    const char want[] = "a\\u2028b\\u2029c\\u0085d\\u0080\\u009Fe\xc2\xa0\xe2\x80\xa7\xe2\x80\xaa"
                        "\xc3\xa9\\u2028\\u0085";
    assert_int_equal(len, sizeof(want) - 1);
    assert_memory_equal(ev, want, len);
    assert_non_null(strstr(b.events[0].data, "\"k\\u2028\":1"));
    for (const char *p = b.events[0].data; *p; p++)
        assert_false((unsigned char)p[0] == 0xC2 && (unsigned char)p[1] < 0xA0);
    json_t *j = check_event_bytes(&b.events[0], "default");
    assert_string_equal(json_string_value(json_object_get(j, "event")),
                        "a\xe2\x80\xa8"
                        "b\xe2\x80\xa9"
                        "c\xc2\x85"
                        "d\xc2\x80\xc2\x9f"
                        "e\xc2\xa0\xe2\x80\xa7\xe2\x80\xaa\xc3\xa9\xe2\x80\xa8\xc2\x85");
    json_decref(j);
    batch_clear(&b);
}

static void test_write_key(void **state)
{
    json_t *root;
    size_t len = 0;
    batch_error_t err;
    (void)state;
    const char *body = "{\"writeKey\":\"k1\",\"batch\":[]}";
    assert_int_equal(batch_parse(body, strlen(body), &root, &err), BATCH_OK);
    assert_string_equal(batch_write_key(root, &len), "k1");
    assert_int_equal(len, 2);
    json_decref(root);
    body = "{\"writeKey\":7}";
    assert_int_equal(batch_parse(body, strlen(body), &root, &err), BATCH_OK);
    assert_null(batch_write_key(root, &len));
    json_decref(root);
    body = "{\"batch\":[{\"writeKey\":\"inner\"}]}"; /* only the top level counts */
    assert_int_equal(batch_parse(body, strlen(body), &root, &err), BATCH_OK);
    assert_null(batch_write_key(root, &len));
    json_decref(root);
}

/* Builds `body` with the client address `ip` and returns context.ip of event `i` (or NULL). */
static char *context_ip(const char *route, const char *body, const char *ip, size_t i)
{
    json_t *root = NULL;
    batch_t b;
    batch_error_t err = {{0}};
    json_error_t jerr;
    char *out = NULL;

    assert_int_equal(batch_parse(body, strlen(body), &root, &err), BATCH_OK);
    batch_options_t o = {
        .single_type = route, .source = "s", .secret = SECRET, .now_ms = NOW_MS, .client_ip = ip};
    assert_int_equal(batch_build(root, &o, &b, &err), BATCH_OK);
    json_decref(root);
    assert_true(i < b.nevents);
    json_t *ev = json_loadb(b.events[i].data, b.events[i].len, 0, &jerr);
    assert_non_null(ev);
    const char *v = json_string_value(json_object_get(json_object_get(ev, "context"), "ip"));
    if (v != NULL)
        out = strdup(v);
    json_decref(ev);
    batch_clear(&b);
    return out;
}

static void assert_context_ip(const char *route, const char *body, const char *ip, size_t i,
                              const char *want)
{
    char *got = context_ip(route, body, ip, i);
    if (want == NULL)
        assert_null(got);
    else
        assert_string_equal(got, want);
    free(got);
}

/* context.ip from the client address when the event (or its batch) has none, as Segment does. */
/* {"batch":[{...,"p":[[...0...]]}]}: `depth` levels in all (the root, the batch, the event and
 * depth - 3 arrays); `slow`: the innermost value is a 70-digit number, which the fast parser
 * leaves to json_loadb, so the fallback path decides. malloc'ed. */
static char *nested_body(int depth, bool slow)
{
    const char *head = "{\"batch\":[{\"type\":\"track\",\"event\":\"e\",\"userId\":\"u\",\"p\":";
    const char *leaf =
        slow ? "0.0000000000000000000000000000000000000000000000000000000000000000001" : "0";
    char *s = malloc(strlen(head) + 2 * (size_t)depth + strlen(leaf) + 8);
    assert_non_null(s);
    char *p = s + sprintf(s, "%s", head);
    for (int i = 3; i < depth; i++)
        *p++ = '[';
    p += sprintf(p, "%s", leaf);
    for (int i = 3; i < depth; i++)
        *p++ = ']';
    strcpy(p, "}]}");
    return s;
}

static void test_nesting_limit_on_both_paths(void **state)
{
    (void)state;
    for (int slow = 0; slow <= 1; slow++) {
        char *at = nested_body(JSONPARSE_MAX_DEPTH, slow);
        char *past = nested_body(JSONPARSE_MAX_DEPTH + 1, slow);
        json_t *root = NULL;
        batch_error_t err = {{0}};
        /* The fast parser takes the limit itself, and leaves the slow leaf to jansson. */
        json_t *fast = jsonparse(at, strlen(at));
        assert_true(slow ? fast == NULL : fast != NULL);
        json_decref(fast);
        assert_int_equal(batch_parse(at, strlen(at), &root, &err), BATCH_OK);
        json_decref(root);
        root = NULL;
        assert_int_equal(batch_parse(past, strlen(past), &root, &err), BATCH_BAD_REQUEST);
        assert_null(root);
        assert_non_null(strstr(err.text, "invalid JSON: nested deeper than 256 levels"));
        free(at);
        free(past);
    }
    /* Brackets inside strings do not count, escaped quotes do not end a string. */
    char s[2 * JSONPARSE_MAX_DEPTH + 16];
    size_t n = 0;
    s[n++] = '"';
    s[n++] = '\\';
    s[n++] = '"';
    for (int i = 0; i < JSONPARSE_MAX_DEPTH + 1; i++)
        s[n++] = '[';
    s[n++] = '"';
    assert_false(jsonparse_too_deep(s, n));
    assert_true(jsonparse_too_deep(s + 3, JSONPARSE_MAX_DEPTH + 1));
    assert_false(jsonparse_too_deep(s + 3, JSONPARSE_MAX_DEPTH));
}

static void test_context_ip(void **state)
{
    (void)state;
    const char *single = "{\"userId\":\"u\",\"event\":\"e\"}";
    assert_context_ip("track", single, "203.0.113.9", 0, "203.0.113.9");
    assert_context_ip("track", single, NULL, 0, NULL);
    const char *own = "{\"userId\":\"u\",\"event\":\"e\",\"context\":{\"ip\":\"1.2.3.4\","
                      "\"locale\":\"fr\"}}";
    assert_context_ip("track", own, "203.0.113.9", 0, "1.2.3.4");
    const char *other = "{\"userId\":\"u\",\"event\":\"e\",\"context\":{\"locale\":\"fr\"}}";
    assert_context_ip("track", other, "2001:db8::1", 0, "2001:db8::1");

    /* In a batch: the event's own, then the batch context's, then the client's. */
    const char *batch = "{\"batch\":[{\"type\":\"track\",\"userId\":\"u\",\"event\":\"e\"},"
                        "{\"type\":\"track\",\"userId\":\"u\",\"event\":\"e\","
                        "\"context\":{\"ip\":\"1.2.3.4\"}}]}";
    assert_context_ip(NULL, batch, "203.0.113.9", 0, "203.0.113.9");
    assert_context_ip(NULL, batch, "203.0.113.9", 1, "1.2.3.4");
    const char *bctx = "{\"context\":{\"ip\":\"5.6.7.8\",\"app\":{\"name\":\"a\"}},"
                       "\"batch\":[{\"type\":\"track\",\"userId\":\"u\",\"event\":\"e\"}]}";
    assert_context_ip(NULL, bctx, "203.0.113.9", 0, "5.6.7.8");
    const char *bctx2 = "{\"context\":{\"app\":{\"name\":\"a\"}},"
                        "\"batch\":[{\"type\":\"track\",\"userId\":\"u\",\"event\":\"e\"}]}";
    assert_context_ip(NULL, bctx2, "203.0.113.9", 0, "203.0.113.9");
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct data_case *)a)->name, ((const struct data_case *)b)->name);
}

/* Collects the case files of one folder into cases[*n...]. */
static void collect(const char *sub, int valid, struct data_case *cases, size_t cap, size_t *n)
{
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/batch/%s", TEST_DATA_DIR, sub);
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "cannot open %s\n", dir);
        exit(1);
    }
    struct dirent *e;
    while ((e = readdir(d)) && *n < cap) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json") != 0)
            continue;
        struct data_case *c = &cases[(*n)++];
        snprintf(c->path, sizeof(c->path), "%s/%s", dir, e->d_name);
        snprintf(c->name, sizeof(c->name), "%s/%.200s", sub, e->d_name);
        c->valid = valid;
    }
    closedir(d);
}

int main(void)
{
    static struct data_case cases[256];
    static struct CMUnitTest data_tests[256];
    size_t n = 0;

    collect("valid", 1, cases, 256, &n);
    collect("invalid", 0, cases, 256, &n);
    qsort(cases, n, sizeof(cases[0]), by_name);
    if (n < 20) {
        fprintf(stderr, "only %zu batch case files found under %s\n", n, TEST_DATA_DIR);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        data_tests[i].name = cases[i].name;
        data_tests[i].test_func = run_case;
        data_tests[i].initial_state = &cases[i];
    }

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verbatim_spans),
        cmocka_unit_test(test_verbatim_events),
        cmocka_unit_test(test_batch_cap),
        cmocka_unit_test(test_event_cap),
        cmocka_unit_test(test_assigned_uuid_v4),
        cmocka_unit_test(test_numbers_kept),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_write_key),
        cmocka_unit_test(test_stringify_escapes),
        cmocka_unit_test(test_line_separators_escaped),
        cmocka_unit_test(test_sent_at_header),
        cmocka_unit_test(test_context_ip),
        cmocka_unit_test(test_nesting_limit_on_both_paths),
    };
    int failed = cmocka_run_group_tests_name("batch limits", tests, NULL, NULL);
    failed += _cmocka_run_group_tests("batch data cases", data_tests, n, NULL, NULL);
    return failed;
}
