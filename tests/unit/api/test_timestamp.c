/* Unit tests for api/timestamp: ISO-8601 parsing (offsets, fractions, ranges) and formatting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "api/timestamp.h"

static int parse(const char *s, int64_t *ms)
{
    return timestamp_parse(s, strlen(s), ms);
}

static void test_parse_valid(void **state)
{
    static const struct {
        const char *in;
        int64_t ms;
    } cases[] = {
        {"1970-01-01T00:00:00Z", 0},
        {"1970-01-01T00:00:00.001Z", 1},
        {"2026-11-22T07:32:02.123Z", 1795332722123LL},
        {"2026-11-22T07:32:02Z", 1795332722000LL},
        {"2026-11-22T07:32:02.1Z", 1795332722100LL},
        {"2026-11-22T07:32:02.12Z", 1795332722120LL},
        {"2026-11-22T07:32:02.123456789Z", 1795332722123LL}, /* truncated, not rounded */
        {"2026-11-22T07:32:02.9999Z", 1795332722999LL},
        {"2026-11-22t07:32:02.123z", 1795332722123LL},
        {"2026-11-22T09:32:02.123+02:00", 1795332722123LL},
        {"2026-11-22T09:32:02.123+0200", 1795332722123LL},
        {"2026-11-22T02:02:02.123-05:30", 1795332722123LL},
        {"2026-11-22T07:32:02.123+00:00", 1795332722123LL},
        {"2026-11-22T07:32:02.123-00:00", 1795332722123LL},
        {"2026-11-23T00:30:00+17:00", 1795332600000LL}, /* offset crosses the day back */
        {"2024-02-29T12:00:00Z", 1709208000000LL},      /* leap day */
        {"2000-02-29T00:00:00Z", 951782400000LL},       /* divisible by 400: leap */
        {"1969-12-31T23:59:59.999Z", -1},
        {"1900-01-01T00:00:00Z", -2208988800000LL},
        {"2016-12-31T23:59:60Z", 1483228800000LL}, /* leap second: next minute's first second */
        {"9999-12-31T23:59:59.999Z", 253402300799999LL},
        {"0000-01-01T00:00:00Z", -62167219200000LL},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t ms = 42;
        if (parse(cases[i].in, &ms) != 0)
            fail_msg("rejected valid %s", cases[i].in);
        if (ms != cases[i].ms)
            fail_msg("%s: got %lld want %lld", cases[i].in, (long long)ms, (long long)cases[i].ms);
    }
}

static void test_parse_invalid(void **state)
{
    static const char *const bad[] = {
        "",
        "2026",
        "2026-11-22",                    /* date only */
        "2026-11-22T07:32:02",           /* no zone */
        "2026-11-22 07:32:02Z",          /* space separator */
        "2026-11-22T07:32Z",             /* no seconds */
        "2026-11-22T07:32:02.Z",         /* empty fraction */
        "2026-11-22T07:32:02,123Z",      /* comma fraction */
        "2026-13-01T00:00:00Z",          /* month 13 */
        "2026-00-01T00:00:00Z",          /* month 0 */
        "2026-11-31T00:00:00Z",          /* November has 30 days */
        "2026-02-29T00:00:00Z",          /* not a leap year */
        "1900-02-29T00:00:00Z",          /* divisible by 100: not leap */
        "2026-11-00T00:00:00Z",          /* day 0 */
        "2026-11-22T24:00:00Z",          /* hour 24 */
        "2026-11-22T07:60:00Z",          /* minute 60 */
        "2026-11-22T07:32:61Z",          /* second 61 */
        "2026-11-22T07:32:02+24:00",     /* offset hour 24 */
        "2026-11-22T07:32:02+05:60",     /* offset minute 60 */
        "2026-11-22T07:32:02+5:00",      /* one-digit offset */
        "2026-11-22T07:32:02+05",        /* offset without minutes */
        "2026-11-22T07:32:02Zjunk",      /* trailing bytes */
        "2026-11-22T07:32:02.123Z ",     /* trailing space */
        " 2026-11-22T07:32:02.123Z",     /* leading space */
        "+2026-11-22T07:32:02Z",         /* sign before year */
        "20261122T073202Z",              /* basic format */
        "2026-1-22T07:32:02Z",           /* one-digit month */
        "2026-11-22T07:32:02.12a3Z",     /* letter in fraction */
        "２026-11-22T07:32:02Z",         /* non-ASCII digit */
        "2026-11-22T07:32:02.123456789", /* fraction, no zone */
    };
    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t ms = 42;
        if (parse(bad[i], &ms) == 0)
            fail_msg("accepted invalid \"%s\"", bad[i]);
        assert_int_equal(ms, 42); /* untouched on failure */
    }
}

static void test_parse_len_bounds(void **state)
{
    int64_t ms = 0;
    (void)state;
    /* Only s[0..len) counts: a valid prefix of a longer buffer parses, a cut one does not. */
    const char *s = "2026-11-22T07:32:02.123Zgarbage";
    assert_int_equal(timestamp_parse(s, 24, &ms), 0);
    assert_int_equal(ms, 1795332722123LL);
    assert_int_equal(timestamp_parse(s, 23, &ms), -1);
    assert_int_equal(timestamp_parse(NULL, 0, &ms), -1);
}

static void test_format(void **state)
{
    char buf[TIMESTAMP_BUF_LEN];
    (void)state;
    assert_int_equal(timestamp_format(0, buf), 0);
    assert_string_equal(buf, "1970-01-01T00:00:00.000Z");
    assert_int_equal(timestamp_format(1795332722123LL, buf), 0);
    assert_string_equal(buf, "2026-11-22T07:32:02.123Z");
    assert_int_equal(timestamp_format(-1, buf), 0);
    assert_string_equal(buf, "1969-12-31T23:59:59.999Z");
    assert_int_equal(timestamp_format(951782400000LL, buf), 0);
    assert_string_equal(buf, "2000-02-29T00:00:00.000Z");
    assert_int_equal(timestamp_format(253402300799999LL, buf), 0);
    assert_string_equal(buf, "9999-12-31T23:59:59.999Z");
    assert_int_equal(timestamp_format(-62167219200000LL, buf), 0);
    assert_string_equal(buf, "0000-01-01T00:00:00.000Z");
    assert_int_equal(timestamp_format(253402300800000LL, buf), -1); /* year 10000 */
    assert_int_equal(timestamp_format(-62167219200001LL, buf), -1); /* year -1 */
}

static void test_roundtrip(void **state)
{
    char buf[TIMESTAMP_BUF_LEN];
    int64_t back;
    (void)state;
    /* Every step of a few days across a leap day and year ends, including negative times. */
    for (int64_t ms = -86400000LL * 3; ms < 86400000LL * 3; ms += 3599999) {
        assert_int_equal(timestamp_format(ms, buf), 0);
        assert_int_equal(timestamp_parse(buf, strlen(buf), &back), 0);
        assert_int_equal(back, ms);
    }
    for (int64_t ms = 951609600000LL; ms < 951609600000LL + 86400000LL * 4; ms += 7777777) {
        assert_int_equal(timestamp_format(ms, buf), 0);
        assert_int_equal(timestamp_parse(buf, strlen(buf), &back), 0);
        assert_int_equal(back, ms);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_valid),      cmocka_unit_test(test_parse_invalid),
        cmocka_unit_test(test_parse_len_bounds), cmocka_unit_test(test_format),
        cmocka_unit_test(test_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
