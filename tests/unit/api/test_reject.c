/* api/test_reject.c: every rejection sentence maps to one reason of the fixed set. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/internal.h"
#include "testutil.h"

/* The sentences batch.c, ingest.c and the transport answer with, and the reason each counts
 * under (docs/operations.md, "Rejection reasons"). */
static const struct {
    const char *error;
    const char *reason;
} CASES[] = {
    {"body is empty", "invalid_json"},
    {"invalid JSON: '[' or '{' expected (line 1, column 1)", "invalid_json"},
    {"body must be a JSON object", "not_object"},
    {"event must be a JSON object", "not_object"},
    {"batch must be an array", "bad_type"},
    {"batch is empty", "missing_field"},
    {"too many events in batch (max 2500)", "batch_too_large"},
    {"sentAt must be an ISO-8601 string", "bad_value"},
    {"context must be an object", "bad_type"},
    {"integrations must be an object", "bad_type"},
    {"type does not match the endpoint", "bad_value"},
    {"type is required", "missing_field"},
    {"type must be one of track, identify, page, screen, group, alias", "bad_value"},
    {"userId must be a string or number", "bad_type"},
    {"anonymousId must be a string or number", "bad_type"},
    {"userId or anonymousId is required", "missing_field"},
    {"event must be a non-empty string for track", "missing_field"},
    {"groupId is required for group", "missing_field"},
    {"userId is required for alias", "missing_field"},
    {"previousId is required for alias", "missing_field"},
    {"messageId must be a non-empty string", "bad_type"},
    {"messageId is longer than 256 bytes", "bad_value"},
    {"messageId must not contain a NUL (\\u0000)", "bad_value"},
    {"timestamp must be an ISO-8601 string", "bad_value"},
    {"originalTimestamp must be an ISO-8601 string", "bad_value"},
    {"receivedAt out of range", "bad_value"},
    {"timestamp out of range", "bad_value"},
    {"event too large", "too_large"},
    {"unsupported Content-Type", "bad_content_type"},
    {"request body too large (max 512000 bytes)", "request_too_large"},
    {"unsupported Content-Encoding (use gzip or none)", "bad_encoding"},
    {"invalid gzip body", "bad_encoding"},
};

static void test_reasons(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(CASES) / sizeof(CASES[0]); i++) {
        const char *got = api_reject_reason(CASES[i].error);
        if (strcmp(got, CASES[i].reason) != 0)
            fail_msg("\"%s\": reason %s, expected %s", CASES[i].error, got, CASES[i].reason);
    }
}

/* Every sentence batch.c can reject with (`return "..."`, `*why = "..."`, `seterr(err, "...")`)
 * has a reason other than "other": a new one fails here until reject.c's table knows it. */
static void test_batch_sentences_known(void **state)
{
    static const char *const LEADS[] = {"return \"", "*why = \"", "seterr(err, \""};
    char *src = NULL;
    char sentence[256];
    size_t n = 0;
    (void)state;
    assert_int_equal(tu_read_file(TEST_DATA_DIR "/../../api/batch.c", &src, NULL), 0);
    for (size_t k = 0; k < sizeof(LEADS) / sizeof(LEADS[0]); k++) {
        for (const char *p = strstr(src, LEADS[k]); p; p = strstr(p + 1, LEADS[k])) {
            const char *start = p + strlen(LEADS[k]);
            const char *end = strchr(start, '"');
            assert_non_null(end);
            size_t len = (size_t)(end - start) < sizeof(sentence) - 1 ? (size_t)(end - start)
                                                                      : sizeof(sentence) - 1;
            memcpy(sentence, start, len);
            sentence[len] = '\0';
            if (strcmp(sentence, "out of memory") != 0 && /* a 503, no rejection */
                strcmp(api_reject_reason(sentence), "other") == 0)
                fail_msg("batch.c rejects with \"%s\", which has no reason", sentence);
            n++;
        }
    }
    assert_true(n >= 25); /* the scan found the sentences */
    free(src);
}

static void test_unknown_is_other(void **state)
{
    (void)state;
    assert_string_equal(api_reject_reason("something new"), "other");
    assert_string_equal(api_reject_reason(NULL), "other");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reasons),
        cmocka_unit_test(test_batch_sentences_known),
        cmocka_unit_test(test_unknown_is_other),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
