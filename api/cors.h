/* cors: which browser origins may call the ingest routes, and the CORS headers that say so. */
#ifndef INGESTD_API_CORS_H
#define INGESTD_API_CORS_H

#include <stdbool.h>
#include <stddef.h>

#include "api/api.h"

/* Longest configured origin, in bytes: it is echoed in an api_header_t value. */
#define CORS_ORIGIN_MAX 255

/* Access-Control-Max-Age of a preflight answer: Chromium's cap (2 h); Firefox caps at 24 h. */
#define CORS_MAX_AGE_S 7200

/* A preflight's Access-Control-Allow-Headers echoes the names the browser asks for, at most
 * this many and this many bytes (it goes into an api_header_t value). Real SDKs ask for a few:
 * RudderStack's JS SDK up to 9 names in about 150 bytes. */
#define CORS_MAX_ALLOW_HEADERS 32
#define CORS_ALLOW_HEADERS_LEN 255

/* Headers a browser script may read from an answer (Access-Control-Expose-Headers). */
#define CORS_EXPOSE_HEADERS "Retry-After, X-Request-Id"

enum cors_status {
    CORS_OK = 0,
    CORS_INVALID = -1, /* the origin list is malformed; the message says how */
    CORS_NOMEM = -2,
};

/* The parsed --cors-origin; immutable once made, so safe to share between threads. */
typedef struct cors cors_t;

/* The CORS headers of one answer, computed while the request is at hand, added later. */
typedef struct cors_headers {
    api_header_t h[5];
    size_t n;
} cors_headers_t;

/*
 * Parses `spec`: "*" (any origin) or a comma-separated list of origins, each
 * `scheme://host[:port]` as browsers send it in Origin (no path, query,
 * user info or wildcard; one trailing "/" is dropped; blanks around an entry
 * are ignored; compared case-insensitively). NULL or blank means "*".
 * Returns CORS_OK with *out (free with cors_free), or CORS_INVALID with a
 * NUL-terminated reason in err[0..errlen) (errlen may be 0), or CORS_NOMEM.
 */
int cors_new(const char *spec, cors_t **out, char *err, size_t errlen);

/* Frees; NULL is a no-op. */
void cors_free(cors_t *c);

/* Whether any origin is allowed ("*"): then answers say "*" and need no Vary: Origin. */
bool cors_any(const cors_t *c);

/* Whether `origin` (an Origin header value, NULL allowed: then false) may call. */
bool cors_allowed(const cors_t *c, const char *origin);

/*
 * The Access-Control-Allow-Headers of a preflight: the names of a request's
 * Access-Control-Request-Headers (comma-separated, any case, NULL allowed)
 * that are HTTP tokens (RFC 9110 field names), written lower case, each once,
 * ", "-separated, NUL-terminated, into out[0..outlen). Left out: names that are
 * not tokens, the client-address headers a proxy sets (Forwarded,
 * X-Forwarded-*, X-Real-IP), and whatever comes past CORS_MAX_ALLOW_HEADERS
 * names or past outlen - 1 bytes (whole names only). A browser whose header is
 * left out fails the preflight itself. Returns how many names were written.
 */
size_t cors_allow_headers(const char *requested, char *out, size_t outlen);

/*
 * The headers of an actual answer (any status) of an ingest route to a request
 * with `origin`: Access-Control-Allow-Origin ("*", or the origin when `c` is a
 * list) and Access-Control-Expose-Headers when allowed; Vary: Origin whenever
 * `c` is a list, so a shared cache never serves one origin's answer to
 * another. Nothing else, and never Access-Control-Allow-Credentials.
 */
void cors_actual(const cors_t *c, const char *origin, cors_headers_t *out);

/*
 * Answers an OPTIONS request on an ingest route into *resp (which it
 * overwrites): a preflight from an allowed origin gets 204 with
 * Access-Control-Allow-Origin/-Methods (POST, OPTIONS)/-Headers (acr_headers as
 * cors_allow_headers echoes them)/-Max-Age; a request from an origin not allowed gets
 * 403 `{"success":false,"error":"origin not allowed by --cors-origin"}` and no
 * CORS headers; an OPTIONS without Origin (not a browser's CORS request) gets
 * 204 with Allow: POST, OPTIONS. Returns 0, or -1 when the 403 body could not
 * be allocated (then *resp holds the 500 fallback).
 */
int cors_preflight(const cors_t *c, const char *origin, const char *acr_headers, api_resp_t *resp);

/*
 * --cors-origin enforced on every request of an ingest route, not only on
 * preflights: a request whose Origin is present and not allowed gets 403
 * `{"success":false,"error":"origin not allowed by --cors-origin"}` with
 * Vary: Origin in *resp (overwritten) and returns 1; else *resp is untouched
 * and it returns 0. So a page of another site cannot send events even with a
 * request that needs no preflight (text/plain, key in the body); clients
 * without Origin (servers, curl, mobile SDKs) are not affected.
 */
int cors_refuse(const cors_t *c, const char *origin, api_resp_t *resp);

/* Appends h's headers to resp's, as far as they fit (API_MAX_HEADERS). */
void cors_apply(const cors_headers_t *h, api_resp_t *resp);

#endif
