/* prom: Prometheus text into a growable buffer (see prom.h for the contract). */
#include "common/prom.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct prom {
    char *buf;
    size_t len, cap;
    bool failed; /* a write ran out of memory: the text is incomplete */
    char *prefix;
};

static const char *const TYPES[] = {
    [PROM_COUNTER] = "counter",
    [PROM_GAUGE] = "gauge",
    [PROM_HISTOGRAM] = "histogram",
};

static bool grow(prom_t *p, size_t need)
{
    if (p->len + need < p->cap)
        return true;
    size_t cap = p->cap ? p->cap : 4096;
    while (cap <= p->len + need)
        cap *= 2;
    char *b = realloc(p->buf, cap);
    if (b == NULL) {
        p->failed = true;
        return false;
    }
    p->buf = b;
    p->cap = cap;
    return true;
}

static void put(prom_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(prom_t *p, const char *fmt, ...)
{
    va_list ap;
    if (p == NULL || p->failed)
        return;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !grow(p, (size_t)n + 1)) {
        p->failed = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(p->buf + p->len, p->cap - p->len, fmt, ap);
    va_end(ap);
    p->len += (size_t)n;
}

/*
 * The shortest of %.15g..%.17g that reads back as v, as Prometheus' own clients write floats:
 * "0.1" rather than %.17g's "0.10000000000000001", and every integer below 2^53 exactly.
 */
static void fmt_double(char *out, size_t len, double v)
{
    if (isnan(v)) {
        snprintf(out, len, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(out, len, "%s", v > 0 ? "+Inf" : "-Inf");
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, len, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

/*
 * A bucket bound for le="...", spelt as Prometheus' Go client spells it (strconv 'g', -1): the
 * fewest digits that read back as b, in exponent form when its exponent is below -4 or 6 and
 * above: "0.005", "86400", "2.4192e+06". A bound is a label value that scrapers match as text,
 * so it keeps the spelling it always had.
 */
static void fmt_bound(char *out, size_t len, double b)
{
    char e[32]; /* "-1.2345678901234567e+308" at most */
    int prec = 1;

    if (!isfinite(b)) {
        fmt_double(out, len, b);
        return;
    }
    for (; prec < 17; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec - 1, b);
        if (strtod(e, NULL) == b)
            break;
    }
    snprintf(e, sizeof(e), "%.*e", prec - 1, b);
    int exp = atoi(strchr(e, 'e') + 1);
    if (exp < -4 || exp >= 6)
        snprintf(out, len, "%s", e);
    else
        snprintf(out, len, "%.*f", prec - 1 - exp > 0 ? prec - 1 - exp : 0, b);
}

/* `{labels}`, `{labels,extra}`, `{extra}` or nothing. */
static void put_name(prom_t *p, const char *name, const char *suffix, const char *labels,
                     const char *extra)
{
    bool has_l = labels != NULL && *labels != '\0';
    bool has_e = extra != NULL && *extra != '\0';
    put(p, "%s%s%s", p->prefix, name, suffix);
    if (has_l || has_e)
        put(p, "{%s%s%s}", has_l ? labels : "", has_l && has_e ? "," : "", has_e ? extra : "");
}

prom_t *prom_new(const char *prefix)
{
    prom_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    p->prefix = strdup(prefix != NULL ? prefix : "");
    if (p->prefix == NULL || !grow(p, 1)) {
        prom_free(p);
        return NULL;
    }
    p->buf[0] = '\0';
    return p;
}

void prom_free(prom_t *p)
{
    if (p == NULL)
        return;
    free(p->buf);
    free(p->prefix);
    free(p);
}

char *prom_take(prom_t *p, size_t *len)
{
    char *text = NULL;
    if (p != NULL && !p->failed) {
        text = p->buf;
        p->buf = NULL;
        if (len != NULL)
            *len = p->len;
    }
    prom_free(p);
    return text;
}

void prom_head(prom_t *p, const char *name, prom_type_t type, const char *help)
{
    if (p == NULL)
        return;
    put(p, "# HELP %s%s ", p->prefix, name);
    for (const char *s = help ? help : ""; *s;) {
        size_t plain = strcspn(s, "\\\n");
        put(p, "%.*s", (int)plain, s);
        s += plain;
        if (*s != '\0')
            put(p, "%s", *s++ == '\\' ? "\\\\" : "\\n");
    }
    put(p, "\n# TYPE %s%s %s\n", p->prefix, name, TYPES[type]);
}

void prom_text(prom_t *p, const char *text)
{
    if (p == NULL || text == NULL)
        return;
    put(p, "%s", text);
}

void prom_sample(prom_t *p, const char *name, const char *labels, double v)
{
    char num[32];
    if (p == NULL)
        return;
    fmt_double(num, sizeof(num), v);
    put_name(p, name, "", labels, NULL);
    put(p, " %s\n", num);
}

void prom_sample_u64(prom_t *p, const char *name, const char *labels, uint64_t v)
{
    if (p == NULL)
        return;
    put_name(p, name, "", labels, NULL);
    put(p, " %" PRIu64 "\n", v);
}

void prom_sample_i64(prom_t *p, const char *name, const char *labels, int64_t v)
{
    if (p == NULL)
        return;
    put_name(p, name, "", labels, NULL);
    put(p, " %" PRId64 "\n", v);
}

void prom_counter(prom_t *p, const char *name, const char *help, double v)
{
    prom_head(p, name, PROM_COUNTER, help);
    prom_sample(p, name, NULL, v);
}

void prom_gauge(prom_t *p, const char *name, const char *help, double v)
{
    prom_head(p, name, PROM_GAUGE, help);
    prom_sample(p, name, NULL, v);
}

void prom_histogram(prom_t *p, const char *name, const char *labels, const double *bounds,
                    const uint64_t *counts, size_t n, double sum)
{
    char le[40], num[32];
    uint64_t cum = 0;
    if (p == NULL)
        return;
    for (size_t i = 0; i <= n; i++) {
        cum += counts[i];
        if (i < n) {
            fmt_bound(num, sizeof(num), bounds[i]);
            snprintf(le, sizeof(le), "le=\"%s\"", num);
        } else {
            snprintf(le, sizeof(le), "le=\"+Inf\"");
        }
        put_name(p, name, "_bucket", labels, le);
        put(p, " %" PRIu64 "\n", cum);
    }
    fmt_double(num, sizeof(num), sum);
    put_name(p, name, "_sum", labels, NULL);
    put(p, " %s\n", num);
    put_name(p, name, "_count", labels, NULL);
    put(p, " %" PRIu64 "\n", cum);
}

int prom_label(char *buf, size_t len, const char *key, const char *value)
{
    size_t n = strnlen(buf, len);
    size_t start = n;
    if (n == len)
        return -1;
    /* Written in place, then undone when it does not fit: the list stays whole either way. */
    int w = snprintf(buf + n, len - n, "%s%s=\"", n ? "," : "", key);
    if (w < 0 || (size_t)w >= len - n)
        goto full;
    n += (size_t)w;
    for (const char *s = value ? value : ""; *s; s++) {
        const char *esc = *s == '\\' ? "\\\\" : *s == '"' ? "\\\"" : *s == '\n' ? "\\n" : NULL;
        size_t k = esc ? 2 : 1;
        if (n + k >= len)
            goto full;
        if (esc)
            memcpy(buf + n, esc, 2);
        else
            buf[n] = *s;
        n += k;
    }
    if (n + 2 > len)
        goto full;
    buf[n++] = '"';
    buf[n] = '\0';
    return 0;
full:
    buf[start] = '\0';
    return -1;
}

void prom_sources(prom_t *p, const prom_source_t *src, size_t n)
{
    char lb[256], lb2[300];
    prom_head(p, "dedupe_source_keys", PROM_GAUGE,
              "Keys of a source in the window (--max-keys bounds each source's).");
    for (size_t i = 0; i < n; i++) {
        lb[0] = '\0';
        if (prom_label(lb, sizeof(lb), "source", src[i].name) == 0)
            prom_sample_u64(p, "dedupe_source_keys", lb, src[i].keys);
    }
    prom_head(p, "dedupe_source_evicted_total", PROM_COUNTER,
              "Keys of a source evicted from the window key by key, by reason.");
    for (size_t i = 0; i < n; i++) {
        lb[0] = '\0';
        if (prom_label(lb, sizeof(lb), "source", src[i].name) != 0)
            continue;
        snprintf(lb2, sizeof(lb2), "%s,reason=\"age\"", lb);
        prom_sample_u64(p, "dedupe_source_evicted_total", lb2, src[i].evicted_age);
        snprintf(lb2, sizeof(lb2), "%s,reason=\"size\"", lb);
        prom_sample_u64(p, "dedupe_source_evicted_total", lb2, src[i].evicted_size);
    }
    prom_head(p, "dedupe_source_effective_window_seconds", PROM_GAUGE,
              "Seconds since a source's newest evicted key was received: every later key of it "
              "is in the window (absent while it has forgotten none).");
    for (size_t i = 0; i < n; i++) {
        lb[0] = '\0';
        if (src[i].window_s >= 0 && prom_label(lb, sizeof(lb), "source", src[i].name) == 0)
            prom_sample_i64(p, "dedupe_source_effective_window_seconds", lb, src[i].window_s);
    }
}
