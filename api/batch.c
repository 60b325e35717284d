/* batch: per-event validation and Segment-style normalisation of a request body. */
#include "api/batch.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uuid/uuid.h>

#include "api/api.h"
#include "api/jsonparse.h"
#include "api/timestamp.h"

static const char *const TYPES[] = {"track", "identify", "page", "screen", "group", "alias"};

static void seterr(batch_error_t *err, const char *msg)
{
    if (err)
        snprintf(err->text, sizeof(err->text), "%s", msg);
}

void batch_uuid_v4(char out[BATCH_UUID_LEN + 1], void *arg)
{
    uuid_t u;
    (void)arg;
    uuid_generate_random(u);
    uuid_unparse_lower(u, out);
}

int batch_parse(const char *body, size_t len, json_t **root, batch_error_t *err)
{
    return batch_parse_spans(body, len, root, NULL, NULL, err);
}

int batch_parse_spans(const char *body, size_t len, json_t **root, jsonparse_spans_t **spans,
                      jsonparse_arena_t **arena, batch_error_t *err)
{
    json_error_t jerr;
    jsonparse_arena_t *a = NULL;
    *root = NULL;
    if (spans)
        *spans = NULL;
    if (arena)
        *arena = NULL;
    if (!body || len == 0) {
        seterr(err, "body is empty");
        return BATCH_BAD_REQUEST;
    }
    /* JSON_DECODE_ANY only so a bare string or number gets the clearer "must be a JSON object".
     * No JSON_DISABLE_EOF_CHECK: trailing bytes after the value are an error. JSON_ALLOW_NUL:
     * JSON.stringify writes "\u0000" for a NUL and Segment takes it; the log writes it escaped
     * again (put_str), so no consumer ever sees a raw NUL (docs/log-format.md). */
    jsonparse_spans_t *sp = NULL;
    json_t *j = arena ? jsonparse_tree(body, len, spans ? &sp : NULL, &a)
                      : jsonparse_spans(body, len, spans ? &sp : NULL);
    /* jsonparse builds the same tree for the bodies it takes (nearly all); json_loadb decides the
     * rest, on the repaired text (lone surrogates, bytes that are not UTF-8: U+FFFD), so that
     * one cut emoji does not cost every event of the batch, and words the error when there is
     * one. */
    if (!j && jsonparse_too_deep(body, len)) {
        if (err)
            snprintf(err->text, sizeof(err->text), "invalid JSON: nested deeper than %d levels",
                     JSONPARSE_MAX_DEPTH);
        return BATCH_BAD_REQUEST;
    }
    if (!j) {
        char *fixed = NULL;
        size_t flen = len;
        if (jsonparse_repair(body, len, &fixed, &flen) != 0) {
            seterr(err, "out of memory");
            return BATCH_NOMEM;
        }
        j = json_loadb(fixed ? fixed : body, flen, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
        free(fixed);
    }
    if (!j) {
        /* jansson's text ends with " near '<input>'": the client's bytes, maybe not even UTF-8,
         * so cut them off instead of echoing them into the response. */
        char *near = strstr(jerr.text, " near ");
        if (near)
            *near = '\0';
        for (char *c = jerr.text; *c; c++)
            if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
                *c = '?';
        if (err)
            snprintf(err->text, sizeof(err->text), "invalid JSON: %.120s (line %d, column %d)",
                     jerr.text, jerr.line, jerr.column);
        return BATCH_BAD_REQUEST;
    }
    if (!json_is_object(j)) {
        if (a)
            jsonparse_arena_free(a);
        else
            json_decref(j);
        jsonparse_spans_free(sp);
        seterr(err, "body must be a JSON object");
        return BATCH_BAD_REQUEST;
    }
    *root = j;
    if (spans)
        *spans = sp;
    if (arena)
        *arena = a;
    return BATCH_OK;
}

const char *batch_write_key(const json_t *root, size_t *len)
{
    json_t *k = json_object_get(root, "writeKey");
    if (!json_is_string(k))
        return NULL;
    *len = json_string_length(k);
    return json_string_value(k);
}

void batch_clear(batch_t *b)
{
    if (!b)
        return;
    free(b->arena);
    free(b->events);
    free(b->rejected);
    memset(b, 0, sizeof(*b));
}

/* 1: a usable id (non-empty string or number); 0: absent; -1: present with a wrong type. */
static int id_state(const json_t *v, bool null_is_absent)
{
    if (!v || (null_is_absent && json_is_null(v)))
        return 0;
    if (json_is_string(v))
        return json_string_length(v) > 0 ? 1 : 0;
    if (json_is_number(v))
        return 1;
    return -1;
}

static bool iso_ok(const json_t *v, int64_t *ms)
{
    return json_is_string(v) &&
           timestamp_parse(json_string_value(v), json_string_length(v), ms) == 0;
}

/* Checks one event without touching it; returns the reason it is rejected, or NULL. */
static const char *check_event(const json_t *ev, const char *single_type)
{
    if (!json_is_object(ev))
        return "event must be a JSON object";

    const json_t *t = json_object_get(ev, "type");
    const char *type = NULL;
    if (single_type) {
        if (t && !(json_is_string(t) && json_string_length(t) == strlen(single_type) &&
                   strcmp(json_string_value(t), single_type) == 0))
            return "type does not match the endpoint";
        type = single_type;
    } else {
        if (!t)
            return "type is required";
        /* Lengths compared too: a string may hold a NUL ("track\u0000x" is no track). */
        for (size_t i = 0; json_is_string(t) && i < sizeof(TYPES) / sizeof(TYPES[0]); i++)
            if (json_string_length(t) == strlen(TYPES[i]) &&
                strcmp(json_string_value(t), TYPES[i]) == 0)
                type = TYPES[i];
        if (!type)
            return "type must be one of track, identify, page, screen, group, alias";
    }

    /* analytics.js sends "userId": null for anonymous users, so null means absent here. */
    int uid = id_state(json_object_get(ev, "userId"), true);
    int aid = id_state(json_object_get(ev, "anonymousId"), true);
    if (uid < 0)
        return "userId must be a string or number";
    if (aid < 0)
        return "anonymousId must be a string or number";
    if (uid == 0 && aid == 0)
        return "userId or anonymousId is required";

    if (strcmp(type, "track") == 0) {
        const json_t *e = json_object_get(ev, "event");
        if (!json_is_string(e) || json_string_length(e) == 0)
            return "event must be a non-empty string for track";
    } else if (strcmp(type, "group") == 0) {
        if (id_state(json_object_get(ev, "groupId"), false) != 1)
            return "groupId is required for group";
    } else if (strcmp(type, "alias") == 0) {
        if (uid != 1)
            return "userId is required for alias";
        if (id_state(json_object_get(ev, "previousId"), false) != 1)
            return "previousId is required for alias";
    }

    const json_t *mid = json_object_get(ev, "messageId");
    if (mid) {
        if (!json_is_string(mid) || json_string_length(mid) == 0)
            return "messageId must be a non-empty string";
        if (json_string_length(mid) > API_MAX_MESSAGE_ID)
            return "messageId is longer than 256 bytes";
        /* A NUL (\u0000) is refused: no path can carry it (%00 is 400 everywhere), so an event
         * accepted with one could never be looked up. */
        if (memchr(json_string_value(mid), '\0', json_string_length(mid)))
            return "messageId must not contain a NUL (\\u0000)";
    }

    int64_t ms;
    const json_t *v;
    if ((v = json_object_get(ev, "timestamp")) && !iso_ok(v, &ms))
        return "timestamp must be an ISO-8601 string";
    if ((v = json_object_get(ev, "sentAt")) && !iso_ok(v, &ms))
        return "sentAt must be an ISO-8601 string";
    if ((v = json_object_get(ev, "originalTimestamp")) && !iso_ok(v, &ms))
        return "originalTimestamp must be an ISO-8601 string";
    if ((v = json_object_get(ev, "context")) && !json_is_object(v))
        return "context must be an object";
    if ((v = json_object_get(ev, "integrations")) && !json_is_object(v))
        return "integrations must be an object";
    return NULL;
}

/*
 * Serialisation. Events used to be normalised by editing the parsed tree (json_object_set,
 * json_copy of the batch context) and then written with json_dumps, one malloc'ed string each.
 * That was a third of the CPU per event. Now the tree stays as parsed and the normalised event is
 * written straight from it into one buffer per request, with the server's fields laid over the
 * client's as the edits would have left them. The bytes are exactly json_dumps' with
 * JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(p) of the edited tree, except that
 * C1 controls and U+2028/U+2029 are escaped too (put_str) (the data cases in tests/data/batch/
 * pin the normalised events).
 */
typedef struct out {
    char *p;
    size_t len, cap;
    int prec; /* %g precision of reals in this pass */
    int need; /* highest precision (15..17) a real written so far needs to read back exactly */
    const jsonparse_spans_t *spans; /* containers whose input bytes are what we would write */
} out_t;

static int reserve(out_t *o, size_t n)
{
    if (o->cap - o->len > n)
        return 0;
    size_t ncap = o->cap ? o->cap : 4096;
    while (ncap - o->len <= n) {
        if (ncap > SIZE_MAX / 2)
            return -1;
        ncap *= 2;
    }
    char *np = realloc(o->p, ncap);
    if (!np)
        return -1;
    o->p = np;
    o->cap = ncap;
    return 0;
}

static int put(out_t *o, const char *s, size_t n)
{
    if (reserve(o, n) != 0)
        return -1;
    memcpy(o->p + o->len, s, n);
    o->len += n;
    return 0;
}

static int put_ch(out_t *o, char c)
{
    if (reserve(o, 1) != 0)
        return -1;
    o->p[o->len++] = c;
    return 0;
}

/* Word-at-a-time byte tests (bit hacks from Sean Anderson's collection): non-zero when some
 * byte of w is below n (n <= 128), or equals c. */
#define SWAR_ONES       0x0101010101010101ULL
#define SWAR_HIGHS      0x8080808080808080ULL
#define SWAR_LESS(w, n) (((w)-SWAR_ONES * (n)) & ~(w)&SWAR_HIGHS)
#define SWAR_HAS(w, c)  SWAR_LESS((w) ^ (SWAR_ONES * (unsigned char)(c)), 1)

/*
 * How many bytes at s[0..n) (n >= 1) put_str writes escaped, and the code point they are;
 * 0 when s[0] goes out as it is. jansson's dump_string without JSON_ENSURE_ASCII escapes '"',
 * '\\' and control characters; the log also escapes U+0085, the other C1 controls
 * (U+0080..U+009F) and U+2028/U+2029, which line splitters (Python's str.splitlines, Unicode
 * readers) take as line ends and would cut an NDJSON record at (docs/log-format.md).
 */
static size_t escaped(const unsigned char *s, size_t n, unsigned *cp)
{
    if (s[0] < 0x20 || s[0] == '"' || s[0] == '\\') {
        *cp = s[0];
        return 1;
    }
    if (s[0] == 0xC2 && n >= 2 && s[1] >= 0x80 && s[1] <= 0x9F) {
        *cp = s[1];
        return 2;
    }
    if (s[0] == 0xE2 && n >= 3 && s[1] == 0x80 && (s[2] == 0xA8 || s[2] == 0xA9)) {
        *cp = 0x2000u | (s[2] - 0x80u);
        return 3;
    }
    return 0;
}

/* The bytes put_str must look at: those `escaped` may take (controls, '"', '\\', and the lead
 * bytes 0xC2 and 0xE2 of C1 controls and U+2028/U+2029). */
static const unsigned char LOOK[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

static int put_str(out_t *o, const char *str, size_t n)
{
    static const char HEX[] = "0123456789ABCDEF";
    const unsigned char *s = (const unsigned char *)str;
    size_t from = 0, i = 0;

    if (reserve(o, n + 2) != 0)
        return -1;
    o->p[o->len++] = '"';
    while (i < n) {
        /* Eight bytes at a time while none of them can need an escape (the common case), then
         * byte by byte up to the one that may. */
        while (n - i >= 8) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (SWAR_LESS(w, 0x20) | SWAR_HAS(w, '"') | SWAR_HAS(w, '\\'))
                break;
            /* 0xC2 and 0xE2 have the high bit set: an ASCII word needs no test for them. */
            if ((w & SWAR_HIGHS) && (SWAR_HAS(w, 0xC2) | SWAR_HAS(w, 0xE2)))
                break;
            i += 8;
        }
        while (i < n && !LOOK[s[i]])
            i++;
        if (i >= n)
            break;
        unsigned cp;
        size_t taken = escaped(s + i, n - i, &cp);
        if (taken == 0) {
            i++;
            continue;
        }
        char esc[6] = {'\\',        'u', HEX[cp >> 12], HEX[(cp >> 8) & 15], HEX[(cp >> 4) & 15],
                       HEX[cp & 15]};
        size_t elen = 6;
        switch (cp) {
        case '"':
        case '\\':
            esc[1] = (char)cp;
            elen = 2;
            break;
        case '\b':
            esc[1] = 'b';
            elen = 2;
            break;
        case '\f':
            esc[1] = 'f';
            elen = 2;
            break;
        case '\n':
            esc[1] = 'n';
            elen = 2;
            break;
        case '\r':
            esc[1] = 'r';
            elen = 2;
            break;
        case '\t':
            esc[1] = 't';
            elen = 2;
            break;
        default:
            break;
        }
        if (put(o, str + from, i - from) != 0 || put(o, esc, elen) != 0)
            return -1;
        i += taken;
        from = i;
    }
    if (put(o, str + from, n - from) != 0)
        return -1;
    return put_ch(o, '"');
}

static int put_int(out_t *o, json_int_t v)
{
    char b[24], *e = b + sizeof(b), *p = e;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    return put(o, p, (size_t)(e - p));
}

/* The lowest %g precision from `best` (15..17) on at which d reads back to the same double.
 * Taken over the reals in the order they are written, as the old tree walk did. */
static int precision_from(int best, double d)
{
    char buf[40];
    for (int p = best; p < 17; p++) {
        snprintf(buf, sizeof(buf), "%.*g", p, d);
        if (strtod(buf, NULL) == d)
            return p;
    }
    return 17;
}

/* Reals are rare in events: jansson formats them itself, so its rules (".0", exponent) hold. */
static int put_real(out_t *o, const json_t *v)
{
    char buf[64];
    o->need = precision_from(o->need, json_real_value(v));
    size_t n = json_dumpb(v, buf, sizeof(buf),
                          JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(o->prec));
    if (n == 0 || n > sizeof(buf))
        return -1;
    return put(o, buf, n);
}

static int put_object(out_t *o, const json_t *obj, const json_t *extra);

static int put_value(out_t *o, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return put_object(o, v, NULL);
    case JSON_ARRAY: {
        size_t n = json_array_size(v);
        const char *text;
        size_t tlen;
        if (jsonparse_span(o->spans, v, &text, &tlen))
            return put(o, text, tlen);
        if (put_ch(o, '[') != 0)
            return -1;
        for (size_t i = 0; i < n; i++)
            if ((i > 0 && put_ch(o, ',') != 0) || put_value(o, json_array_get(v, i)) != 0)
                return -1;
        return put_ch(o, ']');
    }
    case JSON_STRING:
        return put_str(o, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
        return put_int(o, json_integer_value(v));
    case JSON_REAL:
        return put_real(o, v);
    case JSON_TRUE:
        return put(o, "true", 4);
    case JSON_FALSE:
        return put(o, "false", 5);
    case JSON_NULL:
        return put(o, "null", 4);
    }
    return -1;
}

/* `"key":` with the separator before it unless it is the first member. */
static int put_key(out_t *o, bool *first, const char *k, size_t klen)
{
    if (!*first && put_ch(o, ',') != 0)
        return -1;
    *first = false;
    if (put_str(o, k, klen) != 0)
        return -1;
    return put_ch(o, ':');
}

/* obj's members in order, then those of `extra` that obj lacks, in extra's order: what
 * json_object_update_missing(obj, extra) would have made of obj. */
static int put_object(out_t *o, const json_t *obj, const json_t *extra)
{
    bool first = true;
    const char *text;
    size_t tlen;
    /* Nearly every nested object arrives compact and plain: its bytes are the output. */
    if (!extra && jsonparse_span(o->spans, obj, &text, &tlen))
        return put(o, text, tlen);
    if (put_ch(o, '{') != 0)
        return -1;
    for (void *it = json_object_iter((json_t *)obj); it;
         it = json_object_iter_next((json_t *)obj, it))
        if (put_key(o, &first, json_object_iter_key(it), json_object_iter_key_len(it)) != 0 ||
            put_value(o, json_object_iter_value(it)) != 0)
            return -1;
    if (extra) {
        for (void *it = json_object_iter((json_t *)extra); it;
             it = json_object_iter_next((json_t *)extra, it)) {
            const char *k = json_object_iter_key(it);
            size_t klen = json_object_iter_key_len(it);
            if (json_object_getn(obj, k, klen))
                continue;
            if (put_key(o, &first, k, klen) != 0 || put_value(o, json_object_iter_value(it)) != 0)
                return -1;
        }
    }
    return put_ch(o, '}');
}

/* The top-level members normalisation replaces or merges. */
enum member {
    M_OTHER,
    M_WRITE_KEY,
    M_TYPE,
    M_CONTEXT,
    M_INTEGRATIONS,
    M_MESSAGE_ID,
    M_RECEIVED_AT,
    M_SOURCE,
    M_SENT_AT,
    M_TIMESTAMP,
    M_ORIGINAL_TIMESTAMP,
    M_COUNT
};

static enum member classify(const char *k, size_t n)
{
#define IS(lit) (n == sizeof(lit) - 1 && memcmp(k, lit, n) == 0)
    switch (n) {
    case 4:
        return IS("type") ? M_TYPE : M_OTHER;
    case 6:
        return IS("source") ? M_SOURCE : IS("sentAt") ? M_SENT_AT : M_OTHER;
    case 7:
        return IS("context") ? M_CONTEXT : M_OTHER;
    case 8:
        return IS("writeKey") ? M_WRITE_KEY : M_OTHER;
    case 9:
        return IS("messageId") ? M_MESSAGE_ID : IS("timestamp") ? M_TIMESTAMP : M_OTHER;
    case 10:
        return IS("receivedAt") ? M_RECEIVED_AT : M_OTHER;
    case 12:
        return IS("integrations") ? M_INTEGRATIONS : M_OTHER;
    case 17:
        return IS("originalTimestamp") ? M_ORIGINAL_TIMESTAMP : M_OTHER;
    default:
        return M_OTHER;
    }
#undef IS
}

/* What one request's events share. */
typedef struct build {
    const batch_options_t *o;
    size_t source_len;
    uint32_t source_tag;               /* keyhash_source_tag of o->source, once per request */
    const json_t *bsent, *bctx, *bint; /* batch-level values, NULL when absent */
    char now[TIMESTAMP_BUF_LEN];       /* receivedAt, formatted once per request */
    bool now_ok;
    bool source_ok; /* json_string() takes the source (valid UTF-8) */
    bool hsent_ok;  /* o->sent_at_header parsed, into hsent_ms */
    int64_t hsent_ms;
    out_t out; /* every accepted event, each followed by a NUL */
} build_t;

/* The value of one client member `m` (its key already written): the server's where it sets
 * the member, the batch's merged in for context and integrations, else the client's as is. */
static int put_member(build_t *b, enum member m, const json_t *v, const json_t *tsv, const char *ts)
{
    const batch_options_t *o = b->o;
    out_t *w = &b->out;

    switch (m) {
    case M_TYPE:
        return o->single_type ? put_str(w, o->single_type, strlen(o->single_type))
                              : put_value(w, v);
    case M_CONTEXT:
        return b->bctx ? put_object(w, v, b->bctx) : put_value(w, v);
    case M_INTEGRATIONS:
        return b->bint ? put_object(w, v, b->bint) : put_value(w, v);
    case M_RECEIVED_AT:
        return put_str(w, b->now, TIMESTAMP_BUF_LEN - 1);
    case M_SOURCE:
        return put_str(w, o->source, b->source_len);
    case M_TIMESTAMP:
        return put_str(w, ts, TIMESTAMP_BUF_LEN - 1);
    case M_ORIGINAL_TIMESTAMP:
        return put_value(w, tsv ? tsv : v);
    default:
        return put_value(w, v);
    }
}

/* The members the server adds when the client did not send them (`seen`), in the order the
 * old edits appended them. */
static int put_added(build_t *b, const bool *seen, bool *first, const char *mid, size_t mid_len,
                     const json_t *tsv)
{
    const batch_options_t *o = b->o;
    out_t *w = &b->out;

    if (o->single_type && !seen[M_TYPE] &&
        (put_key(w, first, "type", 4) != 0 ||
         put_str(w, o->single_type, strlen(o->single_type)) != 0))
        return -1;
    if (b->bctx && !seen[M_CONTEXT] &&
        (put_key(w, first, "context", 7) != 0 || put_object(w, b->bctx, NULL) != 0))
        return -1;
    if (b->bint && !seen[M_INTEGRATIONS] &&
        (put_key(w, first, "integrations", 12) != 0 || put_object(w, b->bint, NULL) != 0))
        return -1;
    if (!seen[M_MESSAGE_ID] &&
        (put_key(w, first, "messageId", 9) != 0 || put_str(w, mid, mid_len) != 0))
        return -1;
    if (!seen[M_RECEIVED_AT] && (put_key(w, first, "receivedAt", 10) != 0 ||
                                 put_str(w, b->now, TIMESTAMP_BUF_LEN - 1) != 0))
        return -1;
    if (!seen[M_SOURCE] &&
        (put_key(w, first, "source", 6) != 0 || put_str(w, o->source, b->source_len) != 0))
        return -1;
    if (!seen[M_SENT_AT] && b->bsent &&
        (put_key(w, first, "sentAt", 6) != 0 || put_value(w, b->bsent) != 0))
        return -1;
    if (tsv)
        return !seen[M_ORIGINAL_TIMESTAMP] &&
                       (put_key(w, first, "originalTimestamp", 17) != 0 || put_value(w, tsv) != 0)
                   ? -1
                   : 0;
    return put_key(w, first, "timestamp", 9) != 0 || put_str(w, b->now, TIMESTAMP_BUF_LEN - 1) != 0
               ? -1
               : 0;
}

/*
 * Writes the normalised event: the client's members in order, with writeKey dropped and the
 * server's values in place of the members it sets (type on single routes, receivedAt, source,
 * timestamp, originalTimestamp when there is a timestamp) and the batch context/integrations
 * merged in; then the members it adds, in the order the old edits appended them.
 */
static int put_event(build_t *b, const json_t *ev, const char *mid, size_t mid_len,
                     const json_t *tsv, const char *ts)
{
    bool seen[M_COUNT] = {false};
    bool first = true;

    if (put_ch(&b->out, '{') != 0)
        return -1;
    for (void *it = json_object_iter((json_t *)ev); it;
         it = json_object_iter_next((json_t *)ev, it)) {
        const char *k = json_object_iter_key(it);
        size_t klen = json_object_iter_key_len(it);
        enum member m = classify(k, klen);

        seen[m] = true;
        if (m == M_WRITE_KEY)
            continue;
        if (put_key(&b->out, &first, k, klen) != 0 ||
            put_member(b, m, json_object_iter_value(it), tsv, ts) != 0)
            return -1;
    }
    if (put_added(b, seen, &first, mid, mid_len, tsv) != 0)
        return -1;
    return put_ch(&b->out, '}');
}

static bool sane(int64_t t, int64_t now_ms)
{
    return t >= BATCH_TIMESTAMP_MIN_MS && t <= now_ms + BATCH_TIMESTAMP_AHEAD_MS;
}

/*
 * The logged `timestamp` of an event whose client `timestamp` is `orig`. Segment's clock-skew
 * correction: the client's clock is off by (sentAt - receivedAt), so its timestamp is shifted by
 * that; sentAt is the event's, else the batch's, else the request's SentAt header. A result
 * outside BATCH_TIMESTAMP_MIN_MS..receivedAt + BATCH_TIMESTAMP_AHEAD_MS (a client clock or
 * sentAt gone wild: year 0000 breaks ordinary consumers) falls back to the client's own
 * timestamp when that is in the range, else to receivedAt. originalTimestamp keeps the
 * client's value either way.
 */
static int64_t corrected(const build_t *b, const json_t *ev, int64_t orig)
{
    const batch_options_t *o = b->o;
    const json_t *sent = json_object_get(ev, "sentAt");
    int64_t sent_ms = b->hsent_ms;

    if (!sent)
        sent = b->bsent;
    if (sent)
        timestamp_parse(json_string_value(sent), json_string_length(sent), &sent_ms);
    if (sent || b->hsent_ok) {
        /* Both parsed within years 0000..9999: no overflow. */
        int64_t t = o->now_ms - (sent_ms - orig);
        if (sane(t, o->now_ms))
            return t;
    }
    return sane(orig, o->now_ms) ? orig : o->now_ms;
}

/*
 * Normalises an event that passed check_event into b->out (followed by a NUL) and sets
 * out->len and out->key; a rejection sets *why instead and leaves b->out as it was.
 * Returns -1 only when memory ran out.
 */
static int normalise(build_t *b, const json_t *ev, batch_event_t *out, const char **why)
{
    const batch_options_t *o = b->o;
    char ts[TIMESTAMP_BUF_LEN], id[BATCH_UUID_LEN + 1];
    const char *mid;
    size_t mid_len;
    *why = NULL;

    if (!b->now_ok) {
        *why = "receivedAt out of range";
        return 0;
    }
    const json_t *midv = json_object_get(ev, "messageId");
    if (midv) {
        mid = json_string_value(midv);
        mid_len = json_string_length(midv);
    } else {
        (o->uuid ? o->uuid : batch_uuid_v4)(id, o->uuid_arg);
        id[BATCH_UUID_LEN] = '\0';
        mid = id;
        mid_len = strlen(id);
    }
    /* The tree edits this replaces failed here, as out of memory, on a source json_string()
     * refuses (not UTF-8); the log must never hold such bytes, so that stays as it was. */
    if (!b->source_ok)
        return -1;

    const json_t *tsv = json_object_get(ev, "timestamp");
    out->timestamp_ms = INT64_MAX;
    if (tsv) {
        int64_t orig = 0;
        timestamp_parse(json_string_value(tsv), json_string_length(tsv), &orig);
        out->timestamp_ms = orig;
        if (timestamp_format(corrected(b, ev, orig), ts) != 0) {
            *why = "timestamp out of range"; /* only in the last day of year 9999 */
            return 0;
        }
    }

    /* Reals are written with the lowest precision (15..17) at which every real of the event
     * reads back exactly; it is known only once they have all been seen, so an event with a
     * real that needs more than 15 digits is written a second time. */
    out_t *w = &b->out;
    size_t start = w->len;
    w->prec = 15;
    w->need = 15;
    if (put_event(b, ev, mid, mid_len, tsv, ts) != 0)
        return -1;
    if (w->need != w->prec) {
        w->len = start;
        w->prec = w->need;
        if (put_event(b, ev, mid, mid_len, tsv, ts) != 0)
            return -1;
    }
    size_t len = w->len - start;
    if (len > API_MAX_EVENT_BYTES) {
        w->len = start;
        *why = "event too large";
        return 0;
    }
    /* The messageId follows the event's NUL (batch_event_t.message_id). */
    if (put_ch(w, '\0') != 0 || put(w, mid, mid_len) != 0 || put_ch(w, '\0') != 0)
        return -1;
    out->message_id_len = mid_len;
    if (o->secret != NULL)
        keyhash_tagged(o->secret, b->source_tag, o->source, b->source_len, mid, mid_len, out->key);
    else
        memset(out->key, 0, sizeof(out->key));
    out->len = len;
    return 0;
}

static int batch_level(json_t *root, json_t **bsent, json_t **bctx, json_t **bint,
                       batch_error_t *err)
{
    int64_t ms;
    *bsent = json_object_get(root, "sentAt");
    *bctx = json_object_get(root, "context");
    *bint = json_object_get(root, "integrations");
    if (*bsent && !iso_ok(*bsent, &ms)) {
        seterr(err, "sentAt must be an ISO-8601 string");
        return BATCH_BAD_REQUEST;
    }
    if (*bctx && !json_is_object(*bctx)) {
        seterr(err, "context must be an object");
        return BATCH_BAD_REQUEST;
    }
    if (*bint && !json_is_object(*bint)) {
        seterr(err, "integrations must be an object");
        return BATCH_BAD_REQUEST;
    }
    return BATCH_OK;
}

/* The events of root: *list (NULL for a single-event route) and *n, with the batch-level
 * sentAt, context and integrations. BATCH_OK or BATCH_BAD_REQUEST (err set). */
static int batch_events(json_t *root, const batch_options_t *o, json_t **list, size_t *n,
                        json_t **bsent, json_t **bctx, json_t **bint, batch_error_t *err)
{
    *list = NULL;
    *n = 1;
    if (!json_is_object(root)) {
        seterr(err, "body must be a JSON object");
        return BATCH_BAD_REQUEST;
    }
    if (o->single_type)
        return BATCH_OK;
    *list = json_object_get(root, "batch");
    if (!json_is_array(*list)) {
        seterr(err, "batch must be an array");
        return BATCH_BAD_REQUEST;
    }
    *n = json_array_size(*list);
    if (*n == 0) {
        seterr(err, "batch is empty");
        return BATCH_BAD_REQUEST;
    }
    if (*n > API_MAX_BATCH_EVENTS) {
        seterr(err, "too many events in batch (max 2500)");
        return BATCH_BAD_REQUEST;
    }
    return batch_level(root, bsent, bctx, bint, err);
}

/* The client address goes in as one more batch-level context member, so an event's own
 * context.ip, then the batch's, win over it, as in Segment's API: *ipctx (a new context, which
 * the caller releases; NULL when none is needed) replaces *bctx. 0, or -1 out of memory. */
static int ip_context(const batch_options_t *o, json_t **bctx, json_t **ipctx)
{
    *ipctx = NULL;
    if (!o->client_ip || (*bctx && json_object_get(*bctx, "ip")))
        return 0;
    *ipctx = *bctx ? json_copy(*bctx) : json_object();
    if (!*ipctx || json_object_set_new(*ipctx, "ip", json_string(o->client_ip)) != 0) {
        json_decref(*ipctx);
        *ipctx = NULL;
        return -1;
    }
    *bctx = *ipctx;
    return 0;
}

/* Each event checked and normalised into b->out, or rejected with its reason. 0, or -1 out of
 * memory. */
static int build_events(build_t *b, json_t *root, json_t *list, size_t n, batch_t *out)
{
    out->events = calloc(n, sizeof(*out->events));
    out->rejected = calloc(n, sizeof(*out->rejected));
    if (!out->events || !out->rejected)
        return -1;
    for (size_t i = 0; i < n; i++) {
        json_t *ev = list ? json_array_get(list, i) : root;
        const char *why = check_event(ev, b->o->single_type);
        batch_event_t *be = &out->events[out->nevents];
        if (!why && normalise(b, ev, be, &why) != 0)
            return -1;
        if (why) {
            out->rejected[out->nrejected].index = i;
            out->rejected[out->nrejected].error = why;
            out->nrejected++;
        } else {
            be->index = i;
            out->nevents++;
        }
    }
    /* The buffer no longer moves: the events lie in it back to back, each followed by a NUL,
     * its messageId and another NUL. */
    out->arena = b->out.p;
    for (size_t i = 0, off = 0; i < out->nevents; i++) {
        out->events[i].data = out->arena + off;
        off += out->events[i].len + 1;
        out->events[i].message_id = out->arena + off;
        off += out->events[i].message_id_len + 1;
    }
    return 0;
}

int batch_build(json_t *root, const batch_options_t *o, batch_t *out, batch_error_t *err)
{
    json_t *list = NULL, *bsent = NULL, *bctx = NULL, *bint = NULL, *ipctx = NULL;
    size_t n = 1;

    memset(out, 0, sizeof(*out));
    int rc = batch_events(root, o, &list, &n, &bsent, &bctx, &bint, err);
    if (rc != BATCH_OK)
        return rc;
    if (ip_context(o, &bctx, &ipctx) != 0) {
        seterr(err, "out of memory");
        return BATCH_NOMEM;
    }
    build_t b = {
        .o = o,
        .source_len = strlen(o->source),
        .bsent = bsent,
        .bctx = bctx,
        .bint = bint,
        .out = {.spans = o->spans},
    };
    if (o->secret != NULL)
        b.source_tag = keyhash_source_tag(o->secret, o->source, b.source_len);
    b.now_ok = timestamp_format(o->now_ms, b.now) == 0;
    b.hsent_ok = o->sent_at_header &&
                 timestamp_parse(o->sent_at_header, strlen(o->sent_at_header), &b.hsent_ms) == 0;
    json_t *src = json_string(o->source);
    b.source_ok = src != NULL;
    json_decref(src);
    /* The events come out about as long as they came in plus the server's fields: one
     * allocation up front instead of a string per event. */
    if (reserve(&b.out, o->size_hint + n * 128) != 0 || build_events(&b, root, list, n, out) != 0)
        goto nomem;
    json_decref(ipctx);
    return BATCH_OK;
nomem:
    json_decref(ipctx);
    free(b.out.p);
    out->arena = NULL; /* b.out.p, freed just above */
    batch_clear(out);
    seterr(err, "out of memory");
    return BATCH_NOMEM;
}
