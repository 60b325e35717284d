/* auth: write-key lookup from a Basic header or a body "writeKey", compared in constant time. */
#ifndef INGESTD_API_AUTH_H
#define INGESTD_API_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "api/api.h"
#include "api/ratelimit.h"

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
 * The token of an Authorization header value "Bearer <token>" (scheme case-insensitive, blanks
 * around the token ignored). Returns AUTH_OK with *tok (borrowed from `header`, not
 * NUL-terminated at *len) and *len (0 for an empty token), or AUTH_NONE (header NULL or not
 * Bearer; *tok NULL). Thread-safe.
 */
int auth_bearer_token(const char *header, const char **tok, size_t *len);

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

/* ---- write keys files (--write-keys-file) ---- */

#define AUTH_MAX_KEYS      10000 /* write keys in all (flags + file): each lookup scans them all */
#define AUTH_KEY_BYTES     510   /* key + source bytes at most, as for --write-key */
#define AUTH_MAX_FILE_SIZE (4 << 20) /* a keys file larger than this is refused */

/*
 * Parses the text of a write keys file and appends its keys to `base`:
 * *out gets deep copies of base[0..nbase) followed by the file's keys
 * (caller frees with auth_keys_free(*out, *n)).
 *
 * Format: one KEY[:SOURCE] per line (SOURCE defaults to "default"; the first
 * ':' separates them); blanks around an item are ignored, as are empty lines
 * and lines whose first non-blank character is '#'. A key or source with a
 * blank, control character or ',' (the list separator of --write-key), an
 * empty key or source, key + source over AUTH_KEY_BYTES, a key given twice
 * (in the file or also in `base`: two sources for one key would make the
 * source ambiguous), or more than AUTH_MAX_KEYS keys in all are errors.
 *
 * Returns 0, or -1 with `errbuf` set to "NAME:LINE: reason" (never any part
 * of a key: keys are secrets and errors go to logs). `name` names the text
 * in errors (the file's path). Thread-safe.
 */
int auth_keys_parse(const char *text, size_t len, const char *name, const api_write_key_t *base,
                    size_t nbase, api_write_key_t **out, size_t *n, char *errbuf, size_t errlen);

/* Reads `path` (at most AUTH_MAX_FILE_SIZE bytes) and parses it with auth_keys_parse. */
int auth_keys_load(const char *path, const api_write_key_t *base, size_t nbase,
                   api_write_key_t **out, size_t *n, char *errbuf, size_t errlen);

/* Frees what auth_keys_parse/auth_keys_load returned; NULL is a no-op. */
void auth_keys_free(api_write_key_t *keys, size_t n);

/* ---- key sets: what requests look keys up in ---- */

/*
 * An immutable set of write keys plus one rate-limit bucket per key, shared by
 * reference count so the key set can be replaced (SIGHUP) while requests use
 * the old one: whoever holds a reference may use the set and the keys it
 * returned; the last auth_keyset_release frees it.
 */
typedef struct auth_keyset auth_keyset_t;

/*
 * Builds a set from deep copies of keys[0..n) (each key non-empty; a NULL or
 * empty source becomes "default"). rate_limit > 0 gives every key a full
 * token bucket of that many events a second (ratelimit.h); a key also in
 * `prev` (may be NULL) keeps the level of its bucket there. The new set holds
 * one reference. Returns 0, or -1 (bad key, out of memory).
 */
int auth_keyset_new(const api_write_key_t *keys, size_t n, uint64_t rate_limit, auth_keyset_t *prev,
                    int64_t now_ms, auth_keyset_t **out);

/* Adds a reference; thread-safe. */
void auth_keyset_retain(auth_keyset_t *ks);

/* Drops a reference, freeing the set with the last one; NULL is a no-op; thread-safe. */
void auth_keyset_release(auth_keyset_t *ks);

/* Number of keys. */
size_t auth_keyset_size(const auth_keyset_t *ks);

/* The i-th key (i < auth_keyset_size), borrowed like auth_keyset_find's. */
const api_write_key_t *auth_keyset_at(const auth_keyset_t *ks, size_t i);

/*
 * auth_lookup over the set (constant time in the same sense). Returns the key
 * (borrowed: valid while the caller holds its reference) and, when rate
 * limiting is on, *limit = its bucket, else *limit = NULL (limit may be NULL).
 */
const api_write_key_t *auth_keyset_find(auth_keyset_t *ks, const char *key, size_t keylen,
                                        ratelimit_t **limit);

#endif
