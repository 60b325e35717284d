/* redact: write keys cut out of the bytes the quarantine keeps for operators. */
#include "api/redact.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const char NAME[] = "writeKey";
#define NAME_LEN (sizeof(NAME) - 1)

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* One character of a JSON string at s[*i] (plain, or a \uXXXX or one-letter escape); -1 for
 * what cannot be a letter of NAME (a quote ends the string, a byte past ASCII, a bad escape). */
static int next_char(const char *s, size_t len, size_t *i)
{
    unsigned char c = (unsigned char)s[*i];

    if (c == '"' || c >= 0x80)
        return -1;
    if (c != '\\') {
        (*i)++;
        return c;
    }
    if (*i + 1 >= len)
        return -1;
    if (s[*i + 1] != 'u') {
        /* \" \\ \/ and the controls: none is a letter of NAME. */
        return -1;
    }
    if (*i + 6 > len)
        return -1;
    int v = 0;
    for (size_t k = 2; k < 6; k++) {
        int h = hexval(s[*i + k]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    *i += 6;
    return v < 0x80 ? v : -1;
}

static size_t skip_blanks(const char *s, size_t len, size_t i)
{
    while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n'))
        i++;
    return i;
}

/* Whether a string "writeKey" opens at s[q] (a '"') and a string value follows it: then *vstart
 * is the value's first byte (after its quote). */
static bool key_at(const char *s, size_t len, size_t q, size_t *vstart)
{
    size_t i = q + 1;

    for (size_t k = 0; k < NAME_LEN; k++) {
        if (i >= len || next_char(s, len, &i) != NAME[k])
            return false;
    }
    if (i >= len || s[i] != '"')
        return false;
    i = skip_blanks(s, len, i + 1);
    if (i >= len || s[i] != ':')
        return false;
    i = skip_blanks(s, len, i + 1);
    if (i >= len || s[i] != '"')
        return false;
    *vstart = i + 1;
    return true;
}

/* The end of the string value starting at s[v]: its closing quote, or len when it is cut. */
static size_t value_end(const char *s, size_t len, size_t v)
{
    while (v < len && s[v] != '"')
        v += s[v] == '\\' ? 2 : 1;
    return v < len ? v : len;
}

const char *redact_find_write_key(const char *s, size_t len, size_t *klen)
{
    size_t v;

    for (const char *q = s ? memchr(s, '"', len) : NULL; q;
         q = memchr(q + 1, '"', len - (size_t)(q + 1 - s))) {
        if (key_at(s, len, (size_t)(q - s), &v)) {
            size_t end = value_end(s, len, v);
            if (end == v)
                return NULL;
            *klen = end - v;
            return s + v;
        }
    }
    return NULL;
}

int redact_write_keys(const char *s, size_t len, char **out, size_t *out_len)
{
    char *buf = NULL;
    size_t n = 0, from = 0, v;

    *out = NULL;
    *out_len = len;
    for (size_t q = 0; s && q < len; q++) {
        if (s[q] != '"' || !key_at(s, len, q, &v))
            continue;
        size_t end = value_end(s, len, v);
        if (!buf) {
            /* Each key grows by at most the mark, and there are fewer keys than len / 12. */
            buf = malloc(len + (len / 12 + 1) * (sizeof(REDACT_MARK) - 1));
            if (!buf)
                return -1;
        }
        memcpy(buf + n, s + from, v - from);
        n += v - from;
        memcpy(buf + n, REDACT_MARK, sizeof(REDACT_MARK) - 1);
        n += sizeof(REDACT_MARK) - 1;
        from = end;
        q = end; /* the loop's q++ steps past the closing quote */
    }
    if (!buf)
        return 0;
    memcpy(buf + n, s + from, len - from);
    n += len - from;
    *out = buf;
    *out_len = n;
    return 0;
}
