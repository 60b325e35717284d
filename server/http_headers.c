/* http_headers: what a request head's headers say, read from libmicrohttpd's parsed values. */
#include "server/internal.h"

#include <stdbool.h>
#include <string.h>
#include <strings.h>

/*
 * Pure functions of the connection's headers (no request state): its size against
 * --max-header-bytes, the framing checks against request smuggling (RFC 9112), and the client a
 * trusted proxy forwarded. Each walks MHD_get_connection_values with an iterator.
 *
 * Functions: add_header_bytes, http_header_bytes, scan_content_length,
 * http_content_lengths_disagree, join_header, http_transfer_encoding, count_lines,
 * http_header_lines, http_forwarded_client, unfolded, find_bad_name, http_headers_malformed.
 */

/* The header values joined for the client address (X-Forwarded-For may repeat); longer ones keep
 * their right end, the hops our own proxies added. */
#define FORWARDED_MAX 2048

/* MHD_get_connection_values iterator: adds up the bytes of a request's headers. */
static enum MHD_Result add_header_bytes(void *cls, enum MHD_ValueKind kind, const char *key,
                                        const char *value)
{
    size_t *n = cls;

    (void)kind;
    *n += strlen(key) + (value != NULL ? strlen(value) : 0) + 4; /* ": " and CRLF */
    return MHD_YES;
}

size_t http_header_bytes(struct MHD_Connection *conn, const char *method, const char *url)
{
    size_t n = strlen(method) + strlen(url) + sizeof " HTTP/1.1\r\n";

    MHD_get_connection_values(conn, MHD_HEADER_KIND, add_header_bytes, &n);
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, add_header_bytes, &n);
    return n;
}

struct cl_scan {
    const char *first;
    bool disagree;
};

static enum MHD_Result scan_content_length(void *cls, enum MHD_ValueKind kind, const char *key,
                                           const char *value)
{
    struct cl_scan *sc = cls;
    (void)kind;
    if (key == NULL || strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) != 0)
        return MHD_YES;
    if (sc->first == NULL)
        sc->first = value != NULL ? value : "";
    else if (value == NULL || strcmp(sc->first, value) != 0)
        sc->disagree = true;
    return MHD_YES;
}

/* Why it matters: a proxy in front may have taken the other value, and the bytes between are
 * another request to one of them (request smuggling). */
bool http_content_lengths_disagree(struct MHD_Connection *conn)
{
    struct cl_scan sc = {NULL, false};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, scan_content_length, &sc);
    return sc.disagree;
}

/* MHD_get_connection_values iterator: joins every value of one header with ", " (RFC 9110 5.3),
 * keeping the right end when they are too long. */
struct join {
    const char *name;
    char buf[FORWARDED_MAX];
    size_t len;
};

static enum MHD_Result join_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    struct join *j = cls;
    (void)kind;
    if (key == NULL || value == NULL || strcasecmp(key, j->name) != 0)
        return MHD_YES;
    size_t sep = j->len > 0 ? 2 : 0;
    size_t n = strlen(value);
    if (n + sep >= sizeof j->buf) {
        value += n - (sizeof j->buf - 1); /* this value alone fills it: its right end */
        n = sizeof j->buf - 1;
        j->len = sep = 0;
    } else if (j->len + sep + n >= sizeof j->buf) {
        size_t drop = j->len + sep + n - (sizeof j->buf - 1);
        memmove(j->buf, j->buf + drop, j->len - drop);
        j->len -= drop;
    }
    memcpy(j->buf + j->len, ", ", sep);
    memcpy(j->buf + j->len + sep, value, n);
    j->len += sep + n;
    j->buf[j->len] = '\0';
    return MHD_YES;
}

struct count {
    const char *name;
    unsigned n;
};

/* MHD_get_connection_values iterator: counts the lines of one header. */
static enum MHD_Result count_lines(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    struct count *cn = cls;
    (void)kind;
    (void)value;
    if (key != NULL && strcasecmp(key, cn->name) == 0)
        cn->n++;
    return MHD_YES;
}

unsigned http_header_lines(struct MHD_Connection *conn, const char *name)
{
    struct count cn = {name, 0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, count_lines, &cn);
    return cn.n;
}

/* libmicrohttpd 0.9.75 reads only the first Transfer-Encoding line, so `chunked` then `identity`
 * would be read as chunked while a proxy that joins them (as RFC 9110 5.3 says) reads identity:
 * judged joined, as one line with the same values is. */
enum http_te http_transfer_encoding(struct MHD_Connection *conn)
{
    struct join te = {MHD_HTTP_HEADER_TRANSFER_ENCODING, "", 0};

    if (http_header_lines(conn, te.name) == 0)
        return HTTP_TE_NONE;
    MHD_get_connection_values(conn, MHD_HEADER_KIND, join_header, &te);
    return strcasecmp(te.buf, "chunked") == 0 ? HTTP_TE_CHUNKED : HTTP_TE_OTHER;
}

bool http_forwarded_client(const proxy_list_t *proxies, struct MHD_Connection *conn,
                           char client[PROXY_ADDR_LEN])
{
    struct join fwd = {"Forwarded", "", 0}, xff = {"X-Forwarded-For", "", 0};

    MHD_get_connection_values(conn, MHD_HEADER_KIND, join_header, &fwd);
    MHD_get_connection_values(conn, MHD_HEADER_KIND, join_header, &xff);
    return proxy_client(proxies, fwd.len > 0 ? fwd.buf : NULL, xff.len > 0 ? xff.buf : NULL,
                        client) == 0;
}

/*
 * Whether libmicrohttpd 0.9.75 unfolded this header from obs-folded lines. It parses headers in
 * place in its read buffer: the colon becomes a NUL and the value follows the name after blanks.
 * A continuation line (one starting with a blank) it appends to the *name*, which it copies to a
 * fresh block of its memory pool for that, so the name no longer sits right before its value.
 * Only checked on the version it was read in (0.9.75, Debian 12's): 1.0 handles obs-fold itself
 * (refuses it, or replaces it with a blank), and another layout would make every header look
 * unfolded, hence the guard.
 */
static bool unfolded(const char *key, const char *value)
{
#if MHD_VERSION == 0x00097500
    size_t klen = strlen(key);
    const char *p = key + klen + 1;

    if (value == NULL || value < p)
        return true;
    while (p < value && (*p == ' ' || *p == '\t'))
        p++;
    return p != value;
#else
    (void)key;
    (void)value;
    return false;
#endif
}

/* MHD_get_connection_values iterator: a header line we refuse (RFC 9112 5.1, 5.2): a name that is
 * not a token (libmicrohttpd 0.9.75 keeps a blank before the colon in the name), or a folded one.
 */
static enum MHD_Result find_bad_name(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    bool *bad = cls;
    (void)kind;
    if (key == NULL || key[0] == '\0' || unfolded(key, value)) {
        *bad = true;
        return MHD_NO;
    }
    for (const char *p = key; *p != '\0'; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch <= ' ' || ch >= 0x7f || strchr("\"(),/:;<=>?@[\\]{}", ch) != NULL) {
            *bad = true;
            return MHD_NO;
        }
    }
    return MHD_YES;
}

bool http_headers_malformed(struct MHD_Connection *conn)
{
    bool bad = false;
    MHD_get_connection_values(conn, MHD_HEADER_KIND, find_bad_name, &bad);
    return bad;
}
