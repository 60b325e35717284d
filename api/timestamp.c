/* timestamp: ISO-8601 <-> epoch milliseconds with civil-calendar arithmetic, no libc time zones. */
#include "api/timestamp.h"

#include <stdbool.h>

#define MS_PER_DAY 86400000LL

/* Days since 1970-01-01 of a proleptic Gregorian date; eras of 400 years keep it exact. */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static bool is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int days_in_month(int64_t y, int m)
{
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : days[m - 1];
}

/* Reads exactly n ASCII digits; isdigit() is avoided because it depends on the locale. */
static bool digits(const char *s, size_t len, size_t *pos, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (*pos >= len || s[*pos] < '0' || s[*pos] > '9')
            return false;
        v = v * 10 + (s[*pos] - '0');
        (*pos)++;
    }
    *out = v;
    return true;
}

static bool expect(const char *s, size_t len, size_t *pos, char a, char b)
{
    if (*pos >= len || (s[*pos] != a && s[*pos] != b))
        return false;
    (*pos)++;
    return true;
}

int timestamp_parse(const char *s, size_t len, int64_t *ms)
{
    size_t p = 0;
    int year, mon, day, hour, min, sec, frac_ms = 0;

    if (!s || !ms)
        return -1;
    if (!digits(s, len, &p, 4, &year) || !expect(s, len, &p, '-', '-') ||
        !digits(s, len, &p, 2, &mon) || !expect(s, len, &p, '-', '-') ||
        !digits(s, len, &p, 2, &day) || !expect(s, len, &p, 'T', 't') ||
        !digits(s, len, &p, 2, &hour) || !expect(s, len, &p, ':', ':') ||
        !digits(s, len, &p, 2, &min) || !expect(s, len, &p, ':', ':') ||
        !digits(s, len, &p, 2, &sec))
        return -1;
    if (mon < 1 || mon > 12 || day < 1 || day > days_in_month(year, mon) || hour > 23 || min > 59 ||
        sec > 60)
        return -1;

    if (p < len && s[p] == '.') {
        int scale = 100, n = 0;
        p++;
        while (p < len && s[p] >= '0' && s[p] <= '9') {
            /* Digits past the millisecond are accepted and dropped (truncation, not rounding,
             * so a time never moves into the next second). */
            frac_ms += (s[p] - '0') * scale;
            scale /= 10;
            p++;
            n++;
        }
        if (n == 0)
            return -1;
    }

    int64_t offset_min = 0;
    if (p >= len)
        return -1;
    if (s[p] == 'Z' || s[p] == 'z') {
        p++;
    } else if (s[p] == '+' || s[p] == '-') {
        int sign = s[p] == '-' ? -1 : 1, oh, om;
        p++;
        if (!digits(s, len, &p, 2, &oh))
            return -1;
        if (p < len && s[p] == ':')
            p++;
        if (!digits(s, len, &p, 2, &om) || oh > 23 || om > 59)
            return -1;
        offset_min = sign * (oh * 60 + om);
    } else {
        return -1;
    }
    if (p != len)
        return -1;

    int64_t t = days_from_civil(year, mon, day) * MS_PER_DAY;
    t += ((int64_t)hour * 3600 + min * 60 + sec) * 1000 + frac_ms;
    /* Local time = UTC + offset, so UTC = local - offset. */
    t -= offset_min * 60000;
    *ms = t;
    return 0;
}

/* Writes v (0 <= v < 10^n) as exactly n decimal digits. */
static void put_digits(char *out, int v, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        out[i] = (char)('0' + v % 10);
        v /= 10;
    }
}

int timestamp_format(int64_t ms, char out[TIMESTAMP_BUF_LEN])
{
    /* Floor division so times before 1970 land on the right day. */
    int64_t days = ms / MS_PER_DAY, rem = ms % MS_PER_DAY;
    if (rem < 0) {
        rem += MS_PER_DAY;
        days--;
    }
    int64_t y;
    int m, d;
    civil_from_days(days, &y, &m, &d);
    if (y < 0 || y > 9999)
        return -1;
    int h = (int)(rem / 3600000), mi = (int)(rem / 60000 % 60), s = (int)(rem / 1000 % 60),
        f = (int)(rem % 1000);
    /* "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ" by hand: snprintf was most of the cost, and every
     * event needs up to two of these. */
    put_digits(out, (int)y, 4);
    out[4] = '-';
    put_digits(out + 5, m, 2);
    out[7] = '-';
    put_digits(out + 8, d, 2);
    out[10] = 'T';
    put_digits(out + 11, h, 2);
    out[13] = ':';
    put_digits(out + 14, mi, 2);
    out[16] = ':';
    put_digits(out + 17, s, 2);
    out[19] = '.';
    put_digits(out + 20, f, 3);
    out[23] = 'Z';
    out[24] = '\0';
    return 0;
}
