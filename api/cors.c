/* cors: the --cors-origin list, origin matching and the CORS headers of the ingest routes. */
#include "api/cors.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/internal.h"
#include "common/errbuf.h"

struct cors {
    bool any;       /* "*" */
    size_t n;       /* origins */
    char **origins; /* lower case, without a trailing "/" */
};

/* Headers a trusted proxy sets to say who the client is (server/http_headers.c reads them): a
 * page's script has no business sending them, so a preflight never allows them. */
static const char *const NEVER[] = {
    "forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-real-ip",
};

/* Quote at most 80 bytes of an offending entry: enough to find it, bounded for the log. */
#define QUOTED(len) ((int)((len) > 80 ? 80 : (len)))

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/*
 * Checks one entry as an Origin serialisation: scheme "://" host [":" port]. The host is
 * letters, digits, '-', '.', or a bracketed IPv6 literal; the port 1..65535 digits. Browsers
 * send exactly this (RFC 6454), so anything else could never match and is a typo worth failing
 * start-up for.
 */
static bool origin_ok(const char *s, size_t len)
{
    size_t i = 0;

    if (len == 0 || !isalpha((unsigned char)s[0]))
        return false;
    while (i < len && (isalnum((unsigned char)s[i]) || s[i] == '+' || s[i] == '-' || s[i] == '.'))
        i++;
    if (len - i < 3 || memcmp(s + i, "://", 3) != 0)
        return false;
    i += 3;
    size_t host = i;
    if (i < len && s[i] == '[') {
        while (i < len &&
               (isxdigit((unsigned char)s[i]) || s[i] == ':' || s[i] == '.' || s[i] == '['))
            i++;
        if (i >= len || s[i] != ']')
            return false;
        i++;
    } else {
        while (i < len && (isalnum((unsigned char)s[i]) || s[i] == '-' || s[i] == '.'))
            i++;
    }
    if (i == host)
        return false;
    if (i < len && s[i] == ':') {
        size_t digits = ++i;
        unsigned long port = 0;
        while (i < len && isdigit((unsigned char)s[i]) && i - digits < 5)
            port = port * 10 + (unsigned long)(s[i++] - '0');
        if (i == digits || port == 0 || port > 65535)
            return false;
    }
    return i == len;
}

/* Checks one entry s[0..len) of the list (blanks around it dropped) and adds it, lower-cased,
 * to c->origins. CORS_OK, CORS_INVALID (why in err) or CORS_NOMEM. */
static int add_origin(cors_t *c, const char *s, size_t len, char *err, size_t errlen)
{
    while (len > 0 && is_blank(*s)) {
        s++;
        len--;
    }
    while (len > 0 && is_blank(s[len - 1]))
        len--;
    if (len == 0) {
        errbuf_printf(err, errlen, "empty entry in the origin list");
        return CORS_INVALID;
    }
    if (len == 1 && s[0] == '*') {
        errbuf_printf(err, errlen, "\"*\" must stand alone, not in a list");
        return CORS_INVALID;
    }
    if (len > 1 && s[len - 1] == '/') /* a copied URL; Origin never has the slash */
        len--;
    if (len > CORS_ORIGIN_MAX) {
        errbuf_printf(err, errlen, "origin \"%.*s...\" is too long", QUOTED(len), s);
        return CORS_INVALID;
    }
    if (!origin_ok(s, len)) {
        errbuf_printf(err, errlen, "\"%.*s\" is not an origin (scheme://host[:port], no path)",
                      QUOTED(len), s);
        return CORS_INVALID;
    }
    char *o = strndup(s, len);
    if (!o)
        return CORS_NOMEM;
    for (char *q = o; *q; q++)
        *q = (char)tolower((unsigned char)*q);
    c->origins[c->n++] = o;
    return CORS_OK;
}

int cors_new(const char *spec, cors_t **out, char *err, size_t errlen)
{
    cors_t *c = NULL;
    int rc = CORS_NOMEM;

    *out = NULL;
    if (errlen > 0)
        err[0] = '\0';
    c = calloc(1, sizeof(*c));
    if (!c)
        return CORS_NOMEM;
    if (!spec)
        spec = "";
    while (is_blank(*spec))
        spec++;
    size_t total = strlen(spec);
    while (total > 0 && is_blank(spec[total - 1]))
        total--;
    if (total == 0 || (total == 1 && spec[0] == '*')) {
        c->any = true;
        *out = c;
        return CORS_OK;
    }
    /* At most one origin per comma, plus one. */
    size_t cap = 1;
    for (size_t i = 0; i < total; i++)
        cap += spec[i] == ',';
    c->origins = calloc(cap, sizeof(*c->origins));
    if (!c->origins)
        goto fail;
    /* Each pass takes the entry up to the next comma; an entry after the last comma (even an
     * empty one: "a,") is taken too. */
    for (const char *p = spec; p <= spec + total; p++) {
        const char *end = memchr(p, ',', (size_t)(spec + total - p));
        if (!end)
            end = spec + total;
        rc = add_origin(c, p, (size_t)(end - p), err, errlen);
        if (rc != CORS_OK)
            goto fail;
        p = end;
    }
    *out = c;
    return CORS_OK;
fail:
    cors_free(c);
    return rc;
}

void cors_free(cors_t *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++)
        free(c->origins[i]);
    free(c->origins);
    free(c);
}

bool cors_any(const cors_t *c)
{
    return c->any;
}

bool cors_allowed(const cors_t *c, const char *origin)
{
    if (!origin || !*origin)
        return false;
    if (c->any)
        return true;
    for (size_t i = 0; i < c->n; i++)
        if (strcasecmp(c->origins[i], origin) == 0)
            return true;
    return false;
}

/* RFC 9110 tchar: what a header field name is made of. */
static bool is_tchar(unsigned char c)
{
    return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool is_token(const char *s, size_t len)
{
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!is_tchar((unsigned char)s[i]))
            return false;
    return true;
}

/* Whether the name s[0..len) is already in the ", "-separated list out[0..used). */
static bool listed(const char *out, size_t used, const char *s, size_t len)
{
    const char *p = out, *end = out + used;
    while (p < end) {
        const char *q = memchr(p, ',', (size_t)(end - p));
        if (!q)
            q = end;
        if ((size_t)(q - p) == len && strncasecmp(p, s, len) == 0)
            return true;
        p = q + (q < end ? 2 : 0);
    }
    return false;
}

static bool never_allowed(const char *s, size_t len)
{
    for (size_t i = 0; i < sizeof(NEVER) / sizeof(NEVER[0]); i++)
        if (strlen(NEVER[i]) == len && strncasecmp(NEVER[i], s, len) == 0)
            return true;
    return false;
}

size_t cors_allow_headers(const char *requested, char *out, size_t outlen)
{
    size_t n = 0, used = 0;

    if (outlen > 0)
        out[0] = '\0';
    if (!requested || outlen == 0)
        return 0;
    const char *p = requested;
    while (*p && n < CORS_MAX_ALLOW_HEADERS) {
        size_t len = strcspn(p, ",");
        const char *s = p;
        p += len;
        if (*p == ',')
            p++;
        while (len > 0 && is_blank(*s)) {
            s++;
            len--;
        }
        while (len > 0 && is_blank(s[len - 1]))
            len--;
        /* Not a header name (the browser never asks for one), or one already written: skip. */
        if (!is_token(s, len) || never_allowed(s, len) || listed(out, used, s, len))
            continue;
        size_t sep = n ? 2 : 0;
        if (used + sep + len >= outlen)
            break; /* whole names only: the browser fails the preflight for the rest */
        memcpy(out + used, ", ", sep);
        for (size_t i = 0; i < len; i++)
            out[used + sep + i] = (char)tolower((unsigned char)s[i]);
        used += sep + len;
        out[used] = '\0';
        n++;
    }
    return n;
}

static void add(cors_headers_t *out, const char *name, const char *value)
{
    if (out->n >= sizeof(out->h) / sizeof(out->h[0]))
        return;
    api_header_t *h = &out->h[out->n++];
    h->name = name;
    snprintf(h->value, sizeof(h->value), "%s", value);
}

void cors_actual(const cors_t *c, const char *origin, cors_headers_t *out)
{
    memset(out, 0, sizeof(*out));
    if (!c->any)
        add(out, "Vary", "Origin");
    if (!cors_allowed(c, origin))
        return;
    add(out, "Access-Control-Allow-Origin", c->any ? "*" : origin);
    add(out, "Access-Control-Expose-Headers", CORS_EXPOSE_HEADERS);
}

void cors_apply(const cors_headers_t *h, api_resp_t *resp)
{
    for (size_t i = 0; i < h->n && resp->nheaders < API_MAX_HEADERS; i++)
        resp->headers[resp->nheaders++] = h->h[i];
}

int cors_refuse(const cors_t *c, const char *origin, api_resp_t *resp)
{
    cors_headers_t h;

    if (!origin || !*origin || cors_allowed(c, origin))
        return 0;
    /* A 403 rather than a bare 204 to a preflight: the browser fails either way, but a person
     * with curl or the network panel sees why. */
    memset(&h, 0, sizeof(h));
    api_error(resp, 403, "origin not allowed by --cors-origin");
    add(&h, "Vary", "Origin"); /* c is a list: "*" allows every origin */
    cors_apply(&h, resp);
    return 1;
}

int cors_preflight(const cors_t *c, const char *origin, const char *acr_headers, api_resp_t *resp)
{
    cors_headers_t h;
    char allow[CORS_ALLOW_HEADERS_LEN + 1];
    char age[16];

    memset(&h, 0, sizeof(h));
    if (cors_refuse(c, origin, resp))
        return resp->status == 403 ? 0 : -1;
    memset(resp, 0, sizeof(*resp));
    resp->status = 204;
    resp->content_type = "text/plain";
    if (!origin || !*origin) {
        resp->allow = "POST, OPTIONS";
        return 0;
    }
    add(&h, "Access-Control-Allow-Origin", c->any ? "*" : origin);
    add(&h, "Access-Control-Allow-Methods", "POST, OPTIONS");
    if (cors_allow_headers(acr_headers, allow, sizeof(allow)) > 0)
        add(&h, "Access-Control-Allow-Headers", allow);
    snprintf(age, sizeof(age), "%d", CORS_MAX_AGE_S);
    add(&h, "Access-Control-Max-Age", age);
    /* The allowed headers echo the request's, so a cache must key on them too. */
    add(&h, "Vary",
        c->any ? "Access-Control-Request-Headers" : "Origin, Access-Control-Request-Headers");
    cors_apply(&h, resp);
    return 0;
}
