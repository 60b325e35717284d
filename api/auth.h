/* auth: write-key lookup from a Basic header or a body "writeKey", compared in constant time. */
#ifndef INGESTD_API_AUTH_H
#define INGESTD_API_AUTH_H

#include <stddef.h>

#include "api/api.h"

enum auth_status {
    AUTH_OK = 0,
    AUTH_NONE = 1,       /* no credentials in the header (absent, other scheme, empty user+pass) */
    AUTH_MALFORMED = -1, /* Basic with bad base64 or a NUL byte in the credentials */
    AUTH_NOMEM = -2,
};

/*
 * Decodes standard base64 (RFC 4648 alphabet; '=' padding optional, but if
 * present it must be correct; no whitespace). `out` must hold at least
 * (len / 4 + 1) * 3 bytes. Returns 0 and *outlen, or -1 on a bad character,
 * bad padding or an impossible length. Thread-safe.
 */
int auth_base64_decode(const char *in, size_t len, unsigned char *out, size_t *outlen);

/*
 * Extracts the write key from an Authorization header value "Basic <b64>"
 * (scheme case-insensitive). The decoded "user:password" gives user as the key;
 * when user is empty and password is not, the password is the key (some SDKs
 * send ":KEY"); with no colon the whole decoded text is the key.
 * Returns AUTH_OK with *key (malloc'ed, NUL-terminated, caller frees) and
 * *keylen, AUTH_NONE (header NULL, not Basic, or both parts empty), or
 * AUTH_MALFORMED / AUTH_NOMEM. Thread-safe.
 */
int auth_basic_key(const char *header, char **key, size_t *keylen);

/*
 * Finds `key` among keys[0..n). Every configured key is compared in full
 * whatever matches, so timing reveals neither which key matched nor how
 * many leading bytes were right. Returns the matching entry (borrowed from
 * `keys`) or NULL. Thread-safe.
 */
const api_write_key_t *auth_lookup(const api_write_key_t *keys, size_t n, const char *key,
                                   size_t keylen);

/* Constant-time (for a given `b`) equality of two byte strings; 1 equal, 0 not. */
int auth_equal(const char *a, size_t alen, const char *b, size_t blen);

#endif
