/* auth: HTTP Basic parsing, base64 decoding and constant-time write-key lookup. */
#include "api/auth.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int b64val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int auth_base64_decode(const char *in, size_t len, unsigned char *out, size_t *outlen)
{
    size_t pad = 0, o = 0;
    uint32_t acc = 0;
    int bits = 0;

    if (len % 4 == 0 && len > 0) {
        if (in[len - 1] == '=')
            pad++;
        if (len > 1 && in[len - 2] == '=')
            pad++;
    }
    len -= pad;
    /* One leftover character carries only 6 bits: no whole byte, so it cannot be valid. */
    if (len % 4 == 1)
        return -1;
    for (size_t i = 0; i < len; i++) {
        int v = b64val((unsigned char)in[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    /* Leftover bits must be zero, else two encodings would decode to the same bytes. */
    if (acc != 0)
        return -1;
    *outlen = o;
    return 0;
}

int auth_basic_key(const char *header, char **key, size_t *keylen)
{
    unsigned char *buf = NULL;
    size_t n = 0;
    int rc = AUTH_NONE;

    *key = NULL;
    *keylen = 0;
    if (!header)
        return AUTH_NONE;
    while (*header == ' ' || *header == '\t')
        header++;
    if (strncasecmp(header, "Basic", 5) != 0 || (header[5] != ' ' && header[5] != '\t'))
        return AUTH_NONE;
    const char *b64 = header + 5;
    while (*b64 == ' ' || *b64 == '\t')
        b64++;
    size_t len = strlen(b64);
    while (len > 0 && (b64[len - 1] == ' ' || b64[len - 1] == '\t'))
        len--;

    buf = malloc((len / 4 + 1) * 3 + 1);
    if (!buf)
        return AUTH_NOMEM;
    if (auth_base64_decode(b64, len, buf, &n) != 0 || memchr(buf, '\0', n)) {
        rc = AUTH_MALFORMED;
        goto out;
    }
    buf[n] = '\0';

    const char *user = (const char *)buf;
    size_t ulen = n;
    const char *colon = memchr(buf, ':', n);
    if (colon) {
        ulen = (size_t)(colon - user);
        if (ulen == 0) {
            user = colon + 1;
            ulen = n - 1;
        }
    }
    if (ulen == 0)
        goto out;
    char *k = malloc(ulen + 1);
    if (!k) {
        rc = AUTH_NOMEM;
        goto out;
    }
    memcpy(k, user, ulen);
    k[ulen] = '\0';
    *key = k;
    *keylen = ulen;
    rc = AUTH_OK;
out:
    free(buf);
    return rc;
}

int auth_equal(const char *a, size_t alen, const char *b, size_t blen)
{
    /* The loop runs over b (the secret side) whatever a is; a's length is the caller's own. */
    volatile unsigned char diff = (unsigned char)(alen != blen);
    for (size_t i = 0; i < blen; i++) {
        unsigned char ca = i < alen ? (unsigned char)a[i] : 0;
        diff |= ca ^ (unsigned char)b[i];
    }
    return diff == 0;
}

const api_write_key_t *auth_lookup(const api_write_key_t *keys, size_t n, const char *key,
                                   size_t keylen)
{
    const api_write_key_t *found = NULL;
    if (!key)
        return NULL;
    /* No early exit: every key is compared so the time does not say which one matched. */
    for (size_t i = 0; i < n; i++) {
        int eq = auth_equal(key, keylen, keys[i].key, strlen(keys[i].key));
        if (eq && !found)
            found = &keys[i];
    }
    return found;
}
