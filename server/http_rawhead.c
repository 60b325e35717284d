/* http_rawhead: bytes of a request head that libmicrohttpd's parsed strings would hide. */
#include "server/internal.h"

#include <stdbool.h>
#include <string.h>

/*
 * DESIGN. libmicrohttpd hands the application C strings, so a raw NUL inside the request line or
 * a header line cuts what the application sees there: `Content-Length: 26\0 99` reads as 26,
 * `/v1/track\0/../stats` as /v1/track, while a proxy in front may have read the whole line. Its
 * length-aware accessor (MHD_get_connection_values_n) would show such a NUL where the library
 * counts a value's bytes, but 0.9.75 (Debian 12's) counts them with strlen, so it shows nothing.
 *
 * What 0.9.75 does keep is the layout: it parses the head in place in its read buffer (which does
 * not move while a head is read: it grows in place at the end of the connection's pool), turning
 * the blank after the method and the one before the version, each colon, and each CR and LF into
 * NULs, and it reports the head's raw size (MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE, from the
 * method's first byte to past the empty line). So walking the head from the method's first byte,
 * each parsed string must start exactly where the previous one ended plus its separator, and the
 * walk must end exactly at the reported size. Any NUL inside a line leaves bytes the walk cannot
 * account for. The one NUL it cannot see is one right before a bare LF (`a\0\n` reads like
 * `a\r\n`), which hides no byte of the value. Other versions get the length comparison instead.
 *
 * Control bytes (RFC 9110 5.5: a field value is visible characters, blanks and obs-text) are
 * read from the values as parsed; header names are checked by http_headers_malformed.
 *
 * Functions: line_next, walk_header, head_whole, count_hidden, http_head_hides_bytes, ctl_byte,
 * find_ctl, http_header_ctl.
 */

#if MHD_VERSION == 0x00097500

/* *p is the NUL that ended a line (its CR, or a bare LF): the next line starts one byte on (bare
 * LF) or two (CRLF, whose LF is a NUL too). */
static bool line_next(const char *p, const char *start)
{
    return start == p + 1 || (start == p + 2 && p[1] == '\0');
}

struct walk {
    const char *p; /* the NUL that ended the previous line */
    bool ok;
};

/* MHD_get_connection_values_n iterator: each header line is where the previous one ended, as
 * "name" NUL (the colon) blanks "value". */
static enum MHD_Result walk_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   size_t key_size, const char *value, size_t value_size)
{
    struct walk *w = cls;
    (void)kind;
    (void)key_size;
    (void)value_size;
    if (key == NULL || value == NULL || !line_next(w->p, key)) {
        w->ok = false;
        return MHD_NO;
    }
    const char *v = key + strlen(key) + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    if (v != value) {
        w->ok = false;
        return MHD_NO;
    }
    w->p = value + strlen(value);
    return MHD_YES;
}

/* The walk of the whole head (see DESIGN); false when a byte is not accounted for. */
static bool head_whole(struct MHD_Connection *conn, const char *method, const char *version,
                       const struct conn *c)
{
    const union MHD_ConnectionInfo *hi =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    if (hi == NULL || c->raw_target == NULL)
        return false;
    const char *end = method + hi->header_size;
    const char *p = method + strlen(method); /* the blank after the method */
    if (p >= end)
        return false;
    for (p++; p < end && *p == ' '; p++) /* libmicrohttpd skips more blanks there */
        ;
    /* The target ends at the blank before the version (raw_target_len was taken before
     * libmicrohttpd cut the query off and unescaped it). */
    if (p != c->raw_target || version != c->raw_target + c->raw_target_len + 1)
        return false;
    struct walk w = {version + strlen(version), true};
    MHD_get_connection_values_n(conn, MHD_HEADER_KIND, walk_header, &w);
    if (!w.ok || w.p >= end)
        return false;
    /* Past the last line: its end and the empty line, 2 (LF LF) to 4 (CRLF CRLF) NULs. */
    size_t tail = (size_t)(end - w.p);
    if (tail < 2 || tail > 4)
        return false;
    for (; w.p < end; w.p++)
        if (*w.p != '\0')
            return false;
    return true;
}

#endif /* MHD_VERSION == 0x00097500 */

/* MHD_get_connection_values_n iterator: a header whose name or value is shorter as a C string
 * than libmicrohttpd counted it. */
static enum MHD_Result count_hidden(void *cls, enum MHD_ValueKind kind, const char *key,
                                    size_t key_size, const char *value, size_t value_size)
{
    bool *hidden = cls;
    (void)kind;
    if ((key != NULL && strlen(key) != key_size) ||
        (value != NULL && strlen(value) != value_size)) {
        *hidden = true;
        return MHD_NO;
    }
    return MHD_YES;
}

bool http_head_hides_bytes(struct MHD_Connection *conn, const char *method, const char *version,
                           const struct conn *c)
{
    bool hidden = false;

    MHD_get_connection_values_n(conn, MHD_HEADER_KIND, count_hidden, &hidden);
    if (hidden)
        return true;
#if MHD_VERSION == 0x00097500
    if (c != NULL && method != NULL && version != NULL)
        return !head_whole(conn, method, version, c);
#else
    (void)method;
    (void)version;
    (void)c;
#endif
    return false;
}

/* A control byte a field value may not hold (RFC 9110 5.5): 0x00-0x1f but HTAB, and DEL. */
static bool ctl_byte(unsigned char ch)
{
    return (ch < 0x20 && ch != '\t') || ch == 0x7f;
}

struct ctl_scan {
    const char *name; /* the first header holding one; NULL: none */
};

static enum MHD_Result find_ctl(void *cls, enum MHD_ValueKind kind, const char *key,
                                size_t key_size, const char *value, size_t value_size)
{
    struct ctl_scan *sc = cls;
    (void)kind;
    (void)key_size;
    for (size_t i = 0; value != NULL && i < value_size; i++) {
        if (ctl_byte((unsigned char)value[i])) {
            sc->name = key;
            return MHD_NO;
        }
    }
    return MHD_YES;
}

const char *http_header_ctl(struct MHD_Connection *conn)
{
    struct ctl_scan sc = {NULL};

    MHD_get_connection_values_n(conn, MHD_HEADER_KIND, find_ctl, &sc);
    return sc.name;
}
