/* fuzz_batch: request body parsing and validation (api/jsonparse, api/batch) under libFuzzer. */
#include <jansson.h>
#include <string.h>

#include "api/api.h"
#include "api/batch.h"
#include "api/jsonparse.h"
#include "fuzz.h"

/*
 * Properties checked on every input:
 * - the fast parser (jsonparse) never accepts what json_loadb rejects on the repaired text
 *   (jsonparse_repair, JSON_ALLOW_NUL), and when it accepts, builds the same tree: equal
 *   values, same member order, same real formatting; repairing twice changes nothing;
 * - batch_parse accepts exactly the bodies json_loadb reads as an object once repaired, and
 *   its error text is printable ASCII (it goes into a JSON error body);
 * - batch_build on the tree from either parser writes the same bytes (the fast path, with the
 *   verbatim containers jsonparse_spans found copied as they came, changes
 *   nothing), every event it writes is one compact JSON object within the event cap with the
 *   server's fields and a dedupe key over its messageId, no raw NUL, C1 control, U+2028 or
 *   U+2029 (NDJSON framing), and every event of the batch is either accepted or rejected,
 *   once, in order.
 */

static const uint8_t SECRET[KEYHASH_SECRET_LEN] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6};
#define SOURCE "fuzz"
#define NOW_MS 1795332722123LL /* 2026-11-22T07:32:02.123Z */

/* Deterministic ids, so two builds of one body can be compared byte for byte. */
static void counter_uuid(char out[BATCH_UUID_LEN + 1], void *arg)
{
    unsigned *n = arg;
    snprintf(out, BATCH_UUID_LEN + 1, "00000000-0000-4000-8000-%012u", ++*n);
}

static char *dump(const json_t *j)
{
    return json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
}

static void check_same_tree(const json_t *fast, const json_t *ref)
{
    FUZZ_CHECK(ref != NULL); /* jsonparse accepted what json_loadb rejects */
    FUZZ_CHECK(json_equal(fast, ref));
    char *a = dump(fast), *b = dump(ref);
    FUZZ_CHECK(a && b);
    FUZZ_CHECK(strcmp(a, b) == 0); /* member order or real formatting differ */
    free(a);
    free(b);
}

static void check_event(const batch_event_t *e)
{
    json_error_t jerr;
    uint8_t key[KEYHASH_LEN];

    FUZZ_CHECK(e->data != NULL);
    FUZZ_CHECK(e->data[e->len] == '\0');
    FUZZ_CHECK(strlen(e->data) == e->len);             /* no NUL inside: C consumers of the log */
    FUZZ_CHECK(memchr(e->data, '\n', e->len) == NULL); /* one line of NDJSON */
    /* Nor anything else a line splitter takes as a line end: C1 controls, U+2028, U+2029. */
    for (size_t i = 0; i + 1 < e->len; i++) {
        const unsigned char *u = (const unsigned char *)e->data + i;
        FUZZ_CHECK(!(u[0] == 0xC2 && u[1] >= 0x80 && u[1] <= 0x9F));
        FUZZ_CHECK(!(i + 2 < e->len && u[0] == 0xE2 && u[1] == 0x80 && (u[2] & 0xFE) == 0xA8));
    }
    FUZZ_CHECK(e->len <= API_MAX_EVENT_BYTES);
    json_t *j = json_loadb(e->data, e->len, JSON_ALLOW_NUL, &jerr); /* a client's \u0000 */
    FUZZ_CHECK(json_is_object(j));
    const json_t *mid = json_object_get(j, "messageId");
    FUZZ_CHECK(json_is_string(mid));
    FUZZ_CHECK(json_string_length(mid) > 0 && json_string_length(mid) <= API_MAX_MESSAGE_ID);
    keyhash(SECRET, SOURCE, strlen(SOURCE), json_string_value(mid), json_string_length(mid), key);
    FUZZ_CHECK(memcmp(key, e->key, KEYHASH_LEN) == 0);
    FUZZ_CHECK(json_is_string(json_object_get(j, "type")));
    FUZZ_CHECK(json_is_string(json_object_get(j, "receivedAt")));
    FUZZ_CHECK(json_is_string(json_object_get(j, "timestamp")));
    FUZZ_CHECK(strcmp(json_string_value(json_object_get(j, "source")), SOURCE) == 0);
    FUZZ_CHECK(json_object_get(j, "writeKey") == NULL);
    json_decref(j);
}

static int build(json_t *root, const jsonparse_spans_t *spans, const char *single_type, size_t size,
                 batch_t *b, batch_error_t *err)
{
    unsigned counter = 0;
    batch_options_t o = {
        .single_type = single_type,
        .source = SOURCE,
        .secret = SECRET,
        .now_ms = NOW_MS,
        .uuid = counter_uuid,
        .uuid_arg = &counter,
        .size_hint = size,
        .spans = spans,
    };
    return batch_build(root, &o, b, err);
}

static void check_build(json_t *root, const jsonparse_spans_t *spans, json_t *other,
                        const char *single_type, size_t size)
{
    batch_t b, b2;
    batch_error_t err = {{0}}, err2 = {{0}};
    int rc = build(root, spans, single_type, size, &b, &err);

    FUZZ_CHECK(rc == BATCH_OK || rc == BATCH_BAD_REQUEST);
    if (rc != BATCH_OK) {
        FUZZ_CHECK(err.text[0] != '\0');
        FUZZ_CHECK(b.nevents == 0 && b.nrejected == 0);
    } else {
        const json_t *list = single_type ? NULL : json_object_get(root, "batch");
        size_t n = list ? json_array_size(list) : 1;
        FUZZ_CHECK(n >= 1 && n <= API_MAX_BATCH_EVENTS);
        FUZZ_CHECK(b.nevents + b.nrejected == n);
        /* Accepted and rejected indexes together are 0..n-1, each once, each list ascending. */
        size_t ie = 0, ir = 0;
        for (size_t i = 0; i < n; i++) {
            if (ie < b.nevents && b.events[ie].index == i) {
                check_event(&b.events[ie]);
                ie++;
            } else {
                FUZZ_CHECK(ir < b.nrejected && b.rejected[ir].index == i);
                FUZZ_CHECK(b.rejected[ir].error && b.rejected[ir].error[0]);
                ir++;
            }
        }
        FUZZ_CHECK(ie == b.nevents && ir == b.nrejected);
    }

    /* The tree of the other parser, written member by member (no spans), must come out the
     * same, byte for byte, as root's with its verbatim containers copied. */
    if (other) {
        int rc2 = build(other, NULL, single_type, size, &b2, &err2);
        FUZZ_CHECK(rc2 == rc);
        FUZZ_CHECK(strcmp(err.text, err2.text) == 0);
        FUZZ_CHECK(b2.nevents == b.nevents && b2.nrejected == b.nrejected);
        for (size_t i = 0; i < b.nevents; i++) {
            FUZZ_CHECK(b2.events[i].len == b.events[i].len);
            FUZZ_CHECK(memcmp(b2.events[i].data, b.events[i].data, b.events[i].len) == 0);
            FUZZ_CHECK(memcmp(b2.events[i].key, b.events[i].key, KEYHASH_LEN) == 0);
        }
        for (size_t i = 0; i < b.nrejected; i++)
            FUZZ_CHECK(strcmp(b2.rejected[i].error, b.rejected[i].error) == 0);
        batch_clear(&b2);
    }
    batch_clear(&b);
}

/* How many arrays and objects of t are open inside each other at the deepest point (1 for a flat
 * object): the reference for the one nesting limit both parsers keep (JSONPARSE_MAX_DEPTH). */
static size_t tree_depth(json_t *t)
{
    size_t deepest = 0;
    if (json_is_object(t)) {
        const char *k;
        json_t *v;
        json_object_foreach(t, k, v)
        {
            size_t d = tree_depth(v);
            deepest = d > deepest ? d : deepest;
        }
    } else if (json_is_array(t)) {
        size_t i;
        json_t *v;
        json_array_foreach(t, i, v)
        {
            size_t d = tree_depth(v);
            deepest = d > deepest ? d : deepest;
        }
    } else {
        return 0;
    }
    return deepest + 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    json_error_t jerr;
    batch_error_t err = {{0}};
    json_t *root = NULL;

    /* The reference: jansson on the repaired text (lone surrogate escapes and bytes that are not
     * UTF-8 as U+FFFD, NUL in keys as U+FFFD), NUL allowed in values. */
    char *fixed = NULL;
    size_t flen = size;
    FUZZ_CHECK(jsonparse_repair(s, size, &fixed, &flen) == 0);
    if (fixed) {
        FUZZ_CHECK(flen >= size && flen <= 3 * size); /* escapes keep their length */
        FUZZ_CHECK(fixed[flen] == '\0');
    }
    json_t *fast = jsonparse(s, size);
    json_t *ref = json_loadb(fixed ? fixed : s, flen, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (fast)
        check_same_tree(fast, ref);
    /* The same parse into an arena (as the server does): the same tree, and nothing freed on
     * its own (a repeated key, a failure half way), which ASan would catch. */
    jsonparse_use_arenas();
    jsonparse_arena_t *arena = NULL;
    json_t *in_arena = jsonparse_tree(s, size, NULL, &arena);
    FUZZ_CHECK((in_arena != NULL) == (fast != NULL) && (arena != NULL) == (fast != NULL));
    if (in_arena)
        check_same_tree(in_arena, ref);
    jsonparse_arena_free(arena);
    if (fixed) {
        /* Repairing is idempotent: a repaired text needs nothing more. */
        char *again = NULL;
        size_t alen = 0;
        FUZZ_CHECK(jsonparse_repair(fixed, flen, &again, &alen) == 0);
        FUZZ_CHECK(again == NULL && alen == flen);
        free(fixed);
    }

    jsonparse_spans_t *spans = NULL;
    int rc = batch_parse_spans(s, size, &root, &spans, NULL, &err);
    FUZZ_CHECK(rc == BATCH_OK || rc == BATCH_BAD_REQUEST);
    FUZZ_CHECK((rc == BATCH_OK) == (json_is_object(ref) && tree_depth(ref) <= JSONPARSE_MAX_DEPTH));
    if (rc != BATCH_OK) {
        FUZZ_CHECK(root == NULL && err.text[0] != '\0');
        for (const char *c = err.text; *c; c++)
            FUZZ_CHECK(*c >= 0x20 && *c <= 0x7e); /* safe to put in a JSON error body */
    } else {
        /* root came from jsonparse when it took the body: build from json_loadb's tree too. */
        json_t *other = fast ? ref : NULL;
        check_build(root, spans, other, NULL, size);
        check_build(root, spans, other, "track", size);
        jsonparse_spans_free(spans);
        json_decref(root);
    }
    json_decref(fast);
    json_decref(ref);
    return 0;
}
