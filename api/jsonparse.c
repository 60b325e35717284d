/* jsonparse: strict JSON to a jansson tree without jansson's per-byte lexer. */
#include "api/jsonparse.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/*
 * Why: json_loadb reads one byte at a time through a UTF-8 checking stream and copies every
 * string byte by byte into a growing buffer; that was half of the CPU an event costs. This
 * parser scans strings in place and hands jansson whole strings. It must agree with
 * json_loadb on jsonparse_repair's text exactly, so every rule below is jansson 2.14's
 * (load.c, utf.c) with JSON_ALLOW_NUL, plus the repair's U+FFFD for lone surrogate escapes;
 * anything it does not handle returns NULL and the repaired json_loadb decides instead.
 */

typedef struct parser {
    const unsigned char *s, *end;
    char *scratch; /* decoded strings with escapes; never longer than their text */
    size_t used;   /* scratch bytes held by the keys of the objects being parsed */
    size_t cap;
    int depth;
    jsonparse_spans_t *sp; /* NULL: no spans wanted */
    bool canon;            /* the container being parsed is still verbatim so far */
    bool dup;              /* a repeated key freed a value: its address may come back */
    bool nomem;            /* the span table could not grow */
} parser_t;

/* One verbatim container; the index is an open-addressing table of entry numbers + 1 keyed by
 * the node's address, built once the parse is done. */
typedef struct span {
    const json_t *v;
    const char *text;
    size_t len;
} span_t;

struct jsonparse_spans {
    span_t *e;
    size_t n, cap;
    uint32_t *idx;
    size_t mask;
};

static json_t *value(parser_t *p);

/* Word-at-a-time byte tests (bit hacks from Sean Anderson's collection): non-zero when some
 * byte of w is below n (n <= 128), or equals c. */
#define SWAR_ONES       0x0101010101010101ULL
#define SWAR_HIGHS      0x8080808080808080ULL
#define SWAR_LESS(w, n) (((w)-SWAR_ONES * (n)) & ~(w)&SWAR_HIGHS)
#define SWAR_HAS(w, c)  SWAR_LESS((w) ^ (SWAR_ONES * (unsigned char)(c)), 1)

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static void skip_ws(parser_t *p)
{
    const unsigned char *from = p->s;
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
        p->s++;
    if (p->s != from)
        p->canon = false; /* the serialiser writes no whitespace */
}

/* Length of the UTF-8 sequence at s (first byte >= 0x80), or 0 when jansson's utf8_check_first /
 * utf8_check_full would refuse it: overlong forms, surrogates, above U+10FFFF, truncated. */
static size_t utf8_len(const unsigned char *s, const unsigned char *end)
{
    unsigned c = s[0], v;
    size_t n;

    if (c < 0xC2)
        return 0;
    if (c <= 0xDF) {
        n = 2;
        v = c & 0x1F;
    } else if (c <= 0xEF) {
        n = 3;
        v = c & 0x0F;
    } else if (c <= 0xF4) {
        n = 4;
        v = c & 0x07;
    } else {
        return 0;
    }
    if ((size_t)(end - s) < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    if ((n == 2 && v < 0x80) || (n == 3 && v < 0x800) || (n == 4 && v < 0x10000))
        return 0;
    return n;
}

static int hex4(const unsigned char *s, const unsigned char *end, unsigned *out)
{
    unsigned v = 0;
    if (end - s < 4)
        return -1;
    for (int i = 0; i < 4; i++) {
        unsigned c = s[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

static size_t utf8_put(char *d, unsigned v)
{
    if (v < 0x80) {
        d[0] = (char)v;
        return 1;
    }
    if (v < 0x800) {
        d[0] = (char)(0xC0 | (v >> 6));
        d[1] = (char)(0x80 | (v & 0x3F));
        return 2;
    }
    if (v < 0x10000) {
        d[0] = (char)(0xE0 | (v >> 12));
        d[1] = (char)(0x80 | ((v >> 6) & 0x3F));
        d[2] = (char)(0x80 | (v & 0x3F));
        return 3;
    }
    d[0] = (char)(0xF0 | (v >> 18));
    d[1] = (char)(0x80 | ((v >> 12) & 0x3F));
    d[2] = (char)(0x80 | ((v >> 6) & 0x3F));
    d[3] = (char)(0x80 | (v & 0x3F));
    return 4;
}

/* Decodes the escape whose backslash *sp points at to *dp, advancing both. 0, or -1 for a bad
 * escape. A lone surrogate escape becomes U+FFFD and \u0000 a NUL byte (see string()). */
static int unescape(const unsigned char **sp, const unsigned char *end, char **dp)
{
    const unsigned char *s = *sp + 1;
    char *d = *dp;
    unsigned v, w;

    if (s >= end)
        return -1;
    switch (*s) {
    case '"':
    case '\\':
    case '/':
        *d++ = (char)*s++;
        break;
    case 'b':
        *d++ = '\b';
        s++;
        break;
    case 'f':
        *d++ = '\f';
        s++;
        break;
    case 'n':
        *d++ = '\n';
        s++;
        break;
    case 'r':
        *d++ = '\r';
        s++;
        break;
    case 't':
        *d++ = '\t';
        s++;
        break;
    case 'u':
        if (hex4(s + 1, end, &v) != 0)
            return -1;
        s += 5;
        if (v >= 0xD800 && v <= 0xDBFF && end - s >= 6 && s[0] == '\\' && s[1] == 'u' &&
            hex4(s + 2, end, &w) == 0 && w >= 0xDC00 && w <= 0xDFFF) {
            s += 6;
            v = ((v - 0xD800) << 10) + (w - 0xDC00) + 0x10000;
        } else if (v >= 0xD800 && v <= 0xDFFF) {
            /* A lone half, as JSON.stringify writes for a string cut inside a pair: U+FFFD,
             * as jsonparse_repair writes it (3 bytes for the 6 of the escape). */
            v = 0xFFFD;
        }
        d += utf8_put(d, v); /* \u0000 too: a NUL byte, kept (JSON_ALLOW_NUL) */
        break;
    default:
        return -1;
    }
    *sp = s;
    *dp = d;
    return 0;
}

/*
 * The rest of the string [start, ...) from its first escape at s, decoded into the scratch
 * buffer at p->used. Decoded text is never longer than the text, and the strings held at once
 * (keys on the current path) come from disjoint parts of the input, so one buffer the size of
 * the input always suffices.
 */
static int string_escaped(parser_t *p, const unsigned char *start, const unsigned char *s,
                          const char **out, size_t *out_len)
{
    const unsigned char *end = p->end;

    p->canon = false; /* escapes may be written otherwise (\/, \u00e9, lowercase hex) */
    if (!p->scratch) {
        p->cap = (size_t)(p->end - p->s);
        p->scratch = malloc(p->cap);
        if (!p->scratch)
            return -1;
    }
    char *d0 = p->scratch + p->used, *d = d0;
    memcpy(d, start, (size_t)(s - start));
    d += s - start;
    while (s < end) {
        unsigned char c = *s;
        if (c == '"') {
            *out = d0;
            *out_len = (size_t)(d - d0);
            p->s = s + 1;
            return 0;
        }
        if (c < 0x20)
            return -1;
        if (c >= 0x80) {
            size_t n = utf8_len(s, end);
            if (n == 0)
                return -1;
            memcpy(d, s, n);
            d += n;
            s += n;
        } else if (c == '\\') {
            if (unescape(&s, end, &d) != 0)
                return -1;
        } else {
            *d++ = (char)c;
            s++;
        }
    }
    return -1;
}

/*
 * The string whose opening quote p->s points at. *out is the text itself when it has no
 * escapes, else decoded into the scratch buffer at p->used (the caller keeps it by advancing
 * p->used). Refuses control characters, bad UTF-8 and bad escapes; a lone surrogate escape
 * becomes U+FFFD and \u0000 a NUL byte, as in json_loadb(jsonparse_repair(...), JSON_ALLOW_NUL).
 */
static int string(parser_t *p, const char **out, size_t *out_len)
{
    const unsigned char *s = p->s + 1, *start = s, *end = p->end;

    while (s < end) {
        /* Eight plain ASCII bytes at a time: no quote, backslash, control or non-ASCII byte. */
        while (end - s >= 8) {
            uint64_t w = (uint64_t)s[0] | (uint64_t)s[1] << 8 | (uint64_t)s[2] << 16 |
                         (uint64_t)s[3] << 24 | (uint64_t)s[4] << 32 | (uint64_t)s[5] << 40 |
                         (uint64_t)s[6] << 48 | (uint64_t)s[7] << 56;
            uint64_t m =
                (w & SWAR_HIGHS) | SWAR_LESS(w, 0x20) | SWAR_HAS(w, '"') | SWAR_HAS(w, '\\');
            if (m) {
                /* The first byte in the lowest lane (loaded little-endian whatever the CPU);
                 * a borrow only carries upwards, so the lowest bit set is a real match. */
                s += __builtin_ctzll(m) >> 3;
                break;
            }
            s += 8;
        }
        while (s < end && *s >= 0x20 && *s < 0x80 && *s != '"' && *s != '\\')
            s++;
        if (s >= end)
            break;
        unsigned char c = *s;
        if (c == '"') {
            *out = (const char *)start;
            *out_len = (size_t)(s - start);
            p->s = s + 1;
            return 0;
        }
        if (c == '\\')
            return string_escaped(p, start, s, out, out_len);
        if (c < 0x20)
            return -1;
        size_t n = utf8_len(s, end);
        if (n == 0)
            return -1;
        /* Raw C1 controls and U+2028/U+2029 go out escaped (batch.c, put_str). */
        if ((c == 0xC2 && s[1] <= 0x9F) || (c == 0xE2 && s[1] == 0x80 && (s[2] & 0xFE) == 0xA8))
            p->canon = false;
        s += n;
    }
    return -1;
}

/* jansson's number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?; an integer unless
 * it has a fraction or an exponent. */
static json_t *number(parser_t *p)
{
    const unsigned char *s = p->s, *t = s, *end = p->end;
    bool neg = false, real = false;

    if (*t == '-') {
        neg = true;
        t++;
    }
    if (t >= end || !is_digit(*t))
        return NULL;
    if (*t == '0') {
        t++;
        if (t < end && is_digit(*t))
            return NULL;
    } else {
        while (t < end && is_digit(*t))
            t++;
    }
    size_t int_digits = (size_t)(t - s) - neg;
    if (t < end && *t == '.') {
        real = true;
        t++;
        if (t >= end || !is_digit(*t))
            return NULL;
        while (t < end && is_digit(*t))
            t++;
    }
    if (t < end && (*t == 'e' || *t == 'E')) {
        real = true;
        t++;
        if (t < end && (*t == '+' || *t == '-'))
            t++;
        if (t >= end || !is_digit(*t))
            return NULL;
        while (t < end && is_digit(*t))
            t++;
    }
    p->s = t;
    /* The serialiser writes integers with put_int (so -0 as 0) and reals its own way. */
    if (real || int_digits > 18 || (neg && int_digits == 1 && s[1] == '0'))
        p->canon = false;

    if (!real && int_digits <= 18) {
        /* 18 digits always fit in json_int_t. */
        json_int_t v = 0;
        for (const unsigned char *c = s + neg; c < t; c++)
            v = v * 10 + (*c - '0');
        return json_integer(neg ? -v : v);
    }
    char buf[64], *e;
    size_t n = (size_t)(t - s);
    if (n >= sizeof(buf))
        return NULL;
    memcpy(buf, s, n);
    buf[n] = '\0';
    errno = 0;
    if (!real) {
        /* Past 64 bits an integer reads as a real, as jsonparse_repair makes jansson read it
         * (JSON.stringify(1e20) writes 100000000000000000000; JavaScript and Go read doubles). */
        long long v = strtoll(buf, &e, 10);
        if (errno != ERANGE)
            return json_integer((json_int_t)v);
        errno = 0;
    }
    double d = strtod(buf, &e);
    if (e != buf + n || ((d == HUGE_VAL || d == -HUGE_VAL) && errno == ERANGE))
        return NULL; /* jansson: "real number overflow" */
    return json_real(d);
}

static json_t *literal(parser_t *p, const char *word, size_t n, json_t *v)
{
    if ((size_t)(p->end - p->s) < n || memcmp(p->s, word, n) != 0)
        return NULL;
    p->s += n;
    return v;
}

/* A container parsed from open to p->s: recorded when verbatim; the enclosing one stays
 * verbatim only if this one is. */
static void container_done(parser_t *p, const json_t *v, const unsigned char *open, bool outer)
{
    jsonparse_spans_t *sp = p->sp;
    if (sp && p->canon && !p->nomem) {
        if (sp->n == sp->cap) {
            size_t ncap = sp->cap ? sp->cap * 2 : 64;
            span_t *ne = ncap < UINT32_MAX / 2 ? realloc(sp->e, ncap * sizeof(*ne)) : NULL;
            if (!ne) {
                p->nomem = true;
                goto out;
            }
            sp->e = ne;
            sp->cap = ncap;
        }
        sp->e[sp->n++] = (span_t){v, (const char *)open, (size_t)(p->s - open)};
    }
out:
    p->canon = outer && p->canon;
}

static json_t *object(parser_t *p)
{
    json_t *obj = json_object();
    if (!obj)
        return NULL;
    const unsigned char *open = p->s;
    bool outer = p->canon;
    p->canon = true;
    p->s++;
    skip_ws(p);
    if (p->s < p->end && *p->s == '}') {
        p->s++;
        container_done(p, obj, open, outer);
        return obj;
    }
    for (;;) {
        const char *k;
        size_t klen, mark = p->used;
        if (p->s >= p->end || *p->s != '"' || string(p, &k, &klen) != 0)
            goto fail;
        if (p->scratch && k == p->scratch + mark) {
            /* jansson refuses a NUL in a key even with JSON_ALLOW_NUL; jsonparse_repair turns
             * it into U+FFFD first, which is longer than the NUL: left to that path. */
            if (memchr(k, '\0', klen))
                goto fail;
            p->used += klen; /* keep the decoded key while its value is parsed */
        }
        skip_ws(p);
        if (p->s >= p->end || *p->s != ':')
            goto fail;
        p->s++;
        json_t *v = value(p);
        if (!v)
            goto fail;
        /* The call json_loadb makes: a repeated key keeps its first position, the last value. */
        size_t before = json_object_size(obj);
        if (json_object_setn_new_nocheck(obj, k, klen, v) != 0)
            goto fail;
        if (json_object_size(obj) == before)
            p->dup = true;
        p->used = mark;
        skip_ws(p);
        if (p->s >= p->end)
            goto fail;
        if (*p->s == '}') {
            p->s++;
            container_done(p, obj, open, outer);
            return obj;
        }
        if (*p->s != ',')
            goto fail;
        p->s++;
        skip_ws(p);
    }
fail:
    json_decref(obj);
    return NULL;
}

static json_t *array(parser_t *p)
{
    json_t *arr = json_array();
    if (!arr)
        return NULL;
    const unsigned char *open = p->s;
    bool outer = p->canon;
    p->canon = true;
    p->s++;
    skip_ws(p);
    if (p->s < p->end && *p->s == ']') {
        p->s++;
        container_done(p, arr, open, outer);
        return arr;
    }
    for (;;) {
        json_t *v = value(p);
        if (!v || json_array_append_new(arr, v) != 0)
            goto fail;
        skip_ws(p);
        if (p->s >= p->end)
            goto fail;
        if (*p->s == ']') {
            p->s++;
            container_done(p, arr, open, outer);
            return arr;
        }
        if (*p->s != ',')
            goto fail;
        p->s++;
    }
fail:
    json_decref(arr);
    return NULL;
}

static json_t *value(parser_t *p)
{
    json_t *v = NULL;
    skip_ws(p);
    if (p->s >= p->end)
        return NULL;
    switch (*p->s) {
    case '{':
    case '[':
        if (p->depth >= JSONPARSE_MAX_DEPTH)
            return NULL;
        p->depth++;
        v = *p->s == '{' ? object(p) : array(p);
        p->depth--;
        return v;
    case '"': {
        const char *str;
        size_t n;
        if (string(p, &str, &n) != 0)
            return NULL;
        return json_stringn_nocheck(str, n);
    }
    case 't':
        return literal(p, "true", 4, json_true());
    case 'f':
        return literal(p, "false", 5, json_false());
    case 'n':
        return literal(p, "null", 4, json_null());
    default:
        if (*p->s == '-' || is_digit(*p->s))
            return number(p);
        return NULL;
    }
}

static size_t slot(const jsonparse_spans_t *sp, const json_t *v)
{
    return (size_t)(((uint64_t)(uintptr_t)v * 0x9E3779B97F4A7C15ULL) >> 32) & sp->mask;
}

/* The address index over sp->e; -1 when out of memory. */
static int index_spans(jsonparse_spans_t *sp)
{
    size_t size = 16;
    while (size < 2 * sp->n)
        size *= 2;
    sp->idx = calloc(size, sizeof(*sp->idx));
    if (!sp->idx)
        return -1;
    sp->mask = size - 1;
    for (size_t i = 0; i < sp->n; i++) {
        size_t h = slot(sp, sp->e[i].v);
        while (sp->idx[h])
            h = (h + 1) & sp->mask;
        sp->idx[h] = (uint32_t)(i + 1);
    }
    return 0;
}

bool jsonparse_span(const jsonparse_spans_t *sp, const json_t *v, const char **text, size_t *len)
{
    if (!sp)
        return false;
    for (size_t h = slot(sp, v); sp->idx[h]; h = (h + 1) & sp->mask) {
        const span_t *e = &sp->e[sp->idx[h] - 1];
        if (e->v == v) {
            *text = e->text;
            *len = e->len;
            return true;
        }
    }
    return false;
}

void jsonparse_spans_free(jsonparse_spans_t *sp)
{
    if (!sp)
        return;
    free(sp->e);
    free(sp->idx);
    free(sp);
}

json_t *jsonparse_spans(const char *s, size_t len, jsonparse_spans_t **spans)
{
    parser_t p = {
        .s = (const unsigned char *)s,
        .end = (const unsigned char *)s + len,
    };
    if (spans)
        *spans = NULL;
    if (!s || len == 0)
        return NULL;
    /* No table is no loss: the serialiser then writes every container itself. */
    if (spans)
        p.sp = calloc(1, sizeof(*p.sp));
    json_t *v = value(&p);
    if (v) {
        skip_ws(&p);
        if (p.s != p.end) {
            json_decref(v);
            v = NULL;
        }
    }
    free(p.scratch);
    if (p.sp && v && !p.dup && !p.nomem && index_spans(p.sp) == 0) {
        *spans = p.sp;
        p.sp = NULL;
    }
    jsonparse_spans_free(p.sp);
    return v;
}

/*
 * Arenas. jansson allocates every node, string and hash bucket on its own and json_decref walks
 * the tree to free them one by one: a fifth of the instructions of an event. While
 * jsonparse_tree fills an arena, this thread's jansson allocations come from it and its frees
 * (a repeated key's old value, a hash table's old buckets) do nothing; the tree goes with the
 * arena. Any other jansson call, on any thread, is malloc and free as before.
 */
typedef struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    max_align_t data[];
} arena_block_t;

struct jsonparse_arena {
    arena_block_t *head;
};

static _Thread_local jsonparse_arena_t *filling; /* the arena jansson allocates from, if any */
static bool arenas_on;
static pthread_once_t arenas_once = PTHREAD_ONCE_INIT;

static void *arena_malloc(size_t n)
{
    jsonparse_arena_t *a = filling;
    if (!a)
        return malloc(n);
    n = (n + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
    arena_block_t *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = b ? b->cap * 2 : 16384;
        if (cap > (size_t)4 << 20)
            cap = (size_t)4 << 20;
        if (cap < n)
            cap = n;
        arena_block_t *nb = malloc(sizeof(*nb) + cap);
        if (!nb)
            return NULL;
        nb->next = b;
        nb->used = 0;
        nb->cap = cap;
        a->head = b = nb;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    return p;
}

static void arena_free(void *p)
{
    if (!filling)
        free(p);
}

static void install_arenas(void)
{
    json_set_alloc_funcs(arena_malloc, arena_free);
    arenas_on = true;
}

void jsonparse_use_arenas(void)
{
    pthread_once(&arenas_once, install_arenas);
}

void jsonparse_arena_free(jsonparse_arena_t *a)
{
    if (!a)
        return;
    for (arena_block_t *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(a);
}

json_t *jsonparse_tree(const char *s, size_t len, jsonparse_spans_t **spans,
                       jsonparse_arena_t **arena)
{
    *arena = NULL;
    jsonparse_arena_t *a = arenas_on ? calloc(1, sizeof(*a)) : NULL;
    filling = a;
    json_t *v = jsonparse_spans(s, len, spans);
    filling = NULL;
    if (a && v)
        *arena = a;
    else
        jsonparse_arena_free(a); /* a failed parse already "freed" its nodes into it */
    return v;
}

json_t *jsonparse(const char *s, size_t len)
{
    return jsonparse_spans(s, len, NULL);
}

/* Whether the string whose opening quote is at s is an object key: followed by ':' after its
 * closing quote and blanks. Only the repair path asks, so the second scan costs nothing. */
static bool is_key(const unsigned char *s, const unsigned char *end)
{
    for (s++; s < end && *s != '"'; s++)
        if (*s == '\\')
            s++;
    if (s >= end)
        return false;
    for (s++; s < end && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r'); s++)
        ;
    return s < end && *s == ':';
}

/* Length of the number-ish token at s: the bytes a JSON number may hold. */
static size_t number_len(const unsigned char *s, const unsigned char *end)
{
    size_t n = 0;
    while (s + n < end && (is_digit(s[n]) || s[n] == '-' || s[n] == '+' || s[n] == '.' ||
                           s[n] == 'e' || s[n] == 'E'))
        n++;
    return n;
}

/* Whether s[0..len) is an integer literal (-?digits) outside jansson's 64-bit range. */
static bool int_overflows(const unsigned char *s, size_t len)
{
    static const char MAX[] = "9223372036854775807", MIN[] = "9223372036854775808";
    bool neg = len > 0 && s[0] == '-';
    size_t d = neg ? 1 : 0;
    if (len == d)
        return false;
    for (size_t i = d; i < len; i++)
        if (!is_digit(s[i]))
            return false;
    while (d + 1 < len && s[d] == '0') /* leading zeros: invalid JSON anyway, but no bigger */
        d++;
    size_t digits = len - d;
    if (digits != sizeof(MAX) - 1)
        return digits > sizeof(MAX) - 1;
    return memcmp(s + d, neg ? MIN : MAX, digits) > 0;
}

/* One pass of jsonparse_repair: writes into d when it is not NULL; returns the output length
 * and counts the changes in *changes. */
static size_t repair(const unsigned char *s, const unsigned char *end, char *d, size_t *changes)
{
    static const char FFFD_ESC[] = "\\ufffd", FFFD_UTF8[] = "\xEF\xBF\xBD";
    size_t n = 0;
    bool in_string = false, key = false;

#define EMIT(src, len)                                                                             \
    do {                                                                                           \
        if (d)                                                                                     \
            memcpy(d + n, (src), (len));                                                           \
        n += (len);                                                                                \
    } while (0)
    while (s < end) {
        unsigned c = *s, v, w;
        if (c >= 0x80) {
            size_t len = utf8_len(s, end);
            if (len == 0) { /* Go's utf8.DecodeRune: one U+FFFD per byte that starts nothing */
                EMIT(FFFD_UTF8, 3);
                (*changes)++;
                len = 1;
            } else {
                EMIT(s, len);
            }
            s += len;
            continue;
        }
        if (!in_string && (c == '-' || (c >= '0' && c <= '9'))) {
            size_t len = number_len(s, end);
            EMIT(s, len);
            if (int_overflows(s, len)) { /* a real, as Go's encoding/json and JavaScript read it */
                EMIT(".0", 2);
                (*changes)++;
            }
            s += len;
            continue;
        }
        if (c == '"') {
            in_string = !in_string;
            key = in_string && is_key(s, end);
        }
        if (c != '\\' || end - s < 2) {
            EMIT(s, 1);
            s++;
            continue;
        }
        if (s[1] != 'u' || hex4(s + 2, end, &v) != 0) {
            EMIT(s, 2); /* a two-byte escape (or a bad one, left for the parser to refuse) */
            s += 2;
            continue;
        }
        if (v >= 0xD800 && v <= 0xDBFF && end - s >= 12 && s[6] == '\\' && s[7] == 'u' &&
            hex4(s + 8, end, &w) == 0 && w >= 0xDC00 && w <= 0xDFFF) {
            EMIT(s, 12); /* a proper pair */
            s += 12;
            continue;
        }
        if ((v >= 0xD800 && v <= 0xDFFF) || (v == 0 && key && in_string)) {
            EMIT(FFFD_ESC, 6);
            (*changes)++;
        } else {
            EMIT(s, 6);
        }
        s += 6;
    }
#undef EMIT
    return n;
}

int jsonparse_repair(const char *s, size_t len, char **out, size_t *out_len)
{
    const unsigned char *b = (const unsigned char *)s;
    size_t changes = 0;

    *out = NULL;
    *out_len = len;
    if (!s || len == 0)
        return 0;
    size_t n = repair(b, b + len, NULL, &changes);
    if (changes == 0)
        return 0;
    char *d = malloc(n + 1);
    if (!d)
        return -1;
    changes = 0;
    repair(b, b + len, d, &changes);
    d[n] = '\0';
    *out = d;
    *out_len = n;
    return 0;
}

bool jsonparse_too_deep(const char *s, size_t len)
{
    size_t depth = 0;
    bool in_str = false;

    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{') {
            if (++depth > JSONPARSE_MAX_DEPTH)
                return true;
        } else if ((c == ']' || c == '}') && depth > 0) {
            depth--;
        }
    }
    return false;
}
