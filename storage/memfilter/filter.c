/* filter: spec parsing, the keyed mix, dispatch to the kinds, and the serialized format. */
#include "storage/memfilter/filter.h"

#include "common/bytes.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/errbuf.h"
#include "storage/memfilter/internal.h"
#include "storage/window/keyhash.h"

#define MAGIC          "IDFL"
#define FORMAT_VERSION 1
#define HEADER_LEN     80
#define TRAILER_LEN    4

static const struct filter_ops *const kinds[] = {
    &filter_nsq_ops, &filter_bloom_ops, &filter_sbf_ops,
    &filter_sqf_ops, &filter_qht_ops,   &filter_qqhtd_ops,
};
#define NKINDS (sizeof kinds / sizeof kinds[0])

static const struct filter_ops *ops_of(filter_kind_t kind)
{
    for (size_t i = 0; i < NKINDS; i++)
        if (kinds[i]->kind == kind)
            return kinds[i];
    return NULL;
}

int filter_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errbuf_vprintf(err, errlen, fmt, ap);
    va_end(ap);
    return FILTER_EINVAL;
}

const char *filter_kind_name(filter_kind_t kind)
{
    const struct filter_ops *ops = ops_of(kind);
    return ops != NULL ? ops->name : NULL;
}

void filter_spec_default(filter_kind_t kind, uint64_t bits, filter_spec_t *out)
{
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->bits = bits;
    const struct filter_ops *ops = ops_of(kind);
    if (ops != NULL)
        ops->defaults(out);
}

static int check_spec(const filter_spec_t *spec, char *err, size_t errlen)
{
    const struct filter_ops *ops = ops_of(spec->kind);
    if (ops == NULL)
        return filter_fail(err, errlen, "unknown filter kind %d", (int)spec->kind);
    if (spec->bits == 0)
        return filter_fail(err, errlen, "%s: no size given (for example %s:8Mbit)", ops->name,
                           ops->name);
    if (spec->bits > FILTER_MAX_BITS)
        return filter_fail(err, errlen, "%s: %llu bits is more than the maximum %llu (8 GiB)",
                           ops->name, (unsigned long long)spec->bits,
                           (unsigned long long)FILTER_MAX_BITS);
    return ops->check(spec, err, errlen);
}

/* ---- spec text ---- */

static const struct {
    const char *name;
    double mult;
} units[] = {
    {"", 1},
    {"bit", 1},
    {"bits", 1},
    {"kbit", 1e3},
    {"Kbit", 1e3},
    {"Mbit", 1e6},
    {"Gbit", 1e9},
    {"Kibit", 1024.0},
    {"Mibit", 1048576.0},
    {"Gibit", 1073741824.0},
    {"B", 8},
    {"kB", 8e3},
    {"KB", 8e3},
    {"MB", 8e6},
    {"GB", 8e9},
    {"KiB", 8 * 1024.0},
    {"MiB", 8 * 1048576.0},
    {"GiB", 8 * 1073741824.0},
};

/* A size: "65536", "8e6", "2^20", "1.5Mbit", "1MiB". */
static int parse_size(const char *s, size_t n, uint64_t *out, char *err, size_t errlen)
{
    char buf[64];
    if (n == 0 || n >= sizeof buf)
        return filter_fail(err, errlen, "bad size \"%.*s\"", (int)n, s);
    memcpy(buf, s, n);
    buf[n] = '\0';

    double v;
    char *end;
    errno = 0;
    if (buf[0] == '2' && buf[1] == '^') {
        unsigned long e = strtoul(buf + 2, &end, 10);
        if (end == buf + 2 || e > 62)
            return filter_fail(err, errlen, "bad size \"%s\": 2^N needs N in 0..62", buf);
        v = ldexp(1.0, (int)e);
    } else {
        if (!(buf[0] >= '0' && buf[0] <= '9'))
            return filter_fail(err, errlen, "bad size \"%s\": expected a number", buf);
        v = strtod(buf, &end);
        if (errno != 0)
            return filter_fail(err, errlen, "bad size \"%s\"", buf);
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].name) == 0) {
            double bits = v * units[i].mult;
            if (!(bits >= 1) || bits > (double)FILTER_MAX_BITS || bits != floor(bits))
                return filter_fail(err, errlen,
                                   "bad size \"%s\": need a whole number of bits, 1..%llu", buf,
                                   (unsigned long long)FILTER_MAX_BITS);
            *out = (uint64_t)bits;
            return 0;
        }
    }
    return filter_fail(err, errlen,
                       "bad size \"%s\": unknown unit \"%s\" (bit, kbit, Mbit, Gbit, Kibit, "
                       "Mibit, Gibit, B, kB, MB, GB, KiB, MiB, GiB)",
                       buf, end);
}

static int parse_uint(const char *key, const char *v, uint64_t max, uint64_t *out, char *err,
                      size_t errlen)
{
    char *end;
    if (!(v[0] >= '0' && v[0] <= '9'))
        return filter_fail(err, errlen, "%s=%s: expected a whole number", key, v);
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno != 0 || *end != '\0' || x > max)
        return filter_fail(err, errlen, "%s=%s: expected a whole number, at most %llu", key, v,
                           (unsigned long long)max);
    *out = x;
    return 0;
}

/* Does `kind` take this key? Keeps unused fields 0 and the errors precise. */
static bool takes(filter_kind_t kind, const char *key)
{
    if (strcmp(key, "bits") == 0)
        return true;
    if (strcmp(key, "buckets") == 0)
        return kind == FILTER_SQF || kind == FILTER_QHT || kind == FILTER_QQHTD;
    if (strcmp(key, "fp") == 0)
        return kind == FILTER_NSQ || kind == FILTER_QHT || kind == FILTER_QQHTD;
    if (strcmp(key, "hashes") == 0)
        return kind == FILTER_BLOOM || kind == FILTER_SBF;
    if (strcmp(key, "cellbits") == 0 || strcmp(key, "p") == 0 || strcmp(key, "target") == 0)
        return kind == FILTER_SBF;
    if (strcmp(key, "remainder") == 0 || strcmp(key, "reduced") == 0)
        return kind == FILTER_SQF;
    return false;
}

static const char *canonical_key(const char *key)
{
    static const char *const alias[][2] = {
        {"b", "buckets"},  {"f", "fp"},           {"k", "hashes"},
        {"d", "cellbits"}, {"r", "remainder"},    {"P", "p"},
        {"size", "bits"},  {"fingerprint", "fp"}, {"fingerprint_bits", "fp"},
    };
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
        if (strcmp(key, alias[i][0]) == 0)
            return alias[i][1];
    return key;
}

static int parse_item(filter_spec_t *spec, const char *name, const char *item, size_t n, char *err,
                      size_t errlen)
{
    const char *eq = memchr(item, '=', n);
    if (eq == NULL)
        return parse_size(item, n, &spec->bits, err, errlen);

    char key[32], val[64];
    size_t kn = (size_t)(eq - item), vn = n - kn - 1;
    if (kn == 0 || kn >= sizeof key || vn == 0 || vn >= sizeof val)
        return filter_fail(err, errlen, "%s: bad item \"%.*s\" (want key=value or a size)", name,
                           (int)n, item);
    memcpy(key, item, kn);
    key[kn] = '\0';
    memcpy(val, eq + 1, vn);
    val[vn] = '\0';
    const char *k = canonical_key(key);
    if (!takes(spec->kind, k))
        return filter_fail(err, errlen, "%s does not take \"%s=\"", name, key);

    uint64_t x = 0;
    int rc;
    if (strcmp(k, "bits") == 0)
        return parse_size(val, vn, &spec->bits, err, errlen);
    if (strcmp(k, "target") == 0) {
        char *end;
        errno = 0;
        double t = strtod(val, &end);
        if (errno != 0 || *end != '\0' || !(t > 0 && t < 1))
            return filter_fail(err, errlen, "target=%s: expected a rate strictly between 0 and 1",
                               val);
        spec->target_fpr = t;
        return 0;
    }
    if (strcmp(k, "p") == 0) {
        rc = parse_uint(key, val, FILTER_MAX_BITS, &x, err, errlen);
        spec->decrement = x;
        return rc;
    }
    rc = parse_uint(key, val, 1000000, &x, err, errlen);
    if (rc != 0)
        return rc;
    if (strcmp(k, "buckets") == 0)
        spec->buckets = (uint32_t)x;
    else if (strcmp(k, "fp") == 0)
        spec->fp_bits = (uint32_t)x;
    else if (strcmp(k, "hashes") == 0)
        spec->hashes = (uint32_t)x;
    else if (strcmp(k, "cellbits") == 0)
        spec->cell_bits = (uint32_t)x;
    else if (strcmp(k, "remainder") == 0)
        spec->remainder_bits = (uint32_t)x;
    else
        spec->reduced_bits = (uint32_t)x;
    return 0;
}

int filter_parse_spec(const char *text, filter_spec_t *out, char *err, size_t errlen)
{
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (text == NULL || text[0] == '\0')
        return filter_fail(err, errlen, "empty filter spec (want NAME[:SIZE][,key=value...])");

    const char *colon = strchr(text, ':');
    size_t nlen = colon != NULL ? (size_t)(colon - text) : strlen(text);
    const struct filter_ops *ops = NULL;
    for (size_t i = 0; i < NKINDS; i++)
        if (strlen(kinds[i]->name) == nlen && strncmp(kinds[i]->name, text, nlen) == 0)
            ops = kinds[i];
    if (ops == NULL)
        return filter_fail(err, errlen,
                           "unknown filter \"%.*s\" (nsq, bloom, sbf, sqf, qht, qqhtd)", (int)nlen,
                           text);

    filter_spec_t spec;
    filter_spec_default(ops->kind, 0, &spec);
    if (colon != NULL) {
        const char *p = colon + 1;
        for (;;) {
            const char *comma = strchr(p, ',');
            size_t n = comma != NULL ? (size_t)(comma - p) : strlen(p);
            if (n == 0)
                return filter_fail(err, errlen, "%s: empty item in \"%s\"", ops->name, text);
            int rc = parse_item(&spec, ops->name, p, n, err, errlen);
            if (rc != 0)
                return rc;
            if (comma == NULL)
                break;
            p = comma + 1;
        }
    }
    int rc = check_spec(&spec, err, errlen);
    if (rc != 0)
        return rc;
    *out = spec;
    return 0;
}

int filter_spec_format(const filter_spec_t *s, char *buf, size_t len)
{
    const char *name = filter_kind_name(s->kind);
    unsigned long long bits = (unsigned long long)s->bits;
    switch (s->kind) {
    case FILTER_NSQ:
        return snprintf(buf, len, "nsq:bits=%llu,fp=%u", bits, s->fp_bits);
    case FILTER_BLOOM:
        return snprintf(buf, len, "bloom:bits=%llu,hashes=%u", bits, s->hashes);
    case FILTER_SBF:
        if (s->decrement != 0)
            return snprintf(buf, len, "sbf:bits=%llu,cellbits=%u,hashes=%u,p=%llu", bits,
                            s->cell_bits, s->hashes, (unsigned long long)s->decrement);
        {
            /* The shortest form that parses back to the same double. */
            char t[32];
            snprintf(t, sizeof t, "%.15g", s->target_fpr);
            if (strtod(t, NULL) != s->target_fpr)
                snprintf(t, sizeof t, "%.17g", s->target_fpr);
            return snprintf(buf, len, "sbf:bits=%llu,cellbits=%u,hashes=%u,target=%s", bits,
                            s->cell_bits, s->hashes, t);
        }
    case FILTER_SQF:
        return snprintf(buf, len, "sqf:bits=%llu,buckets=%u,remainder=%u,reduced=%u", bits,
                        s->buckets, s->remainder_bits, s->reduced_bits);
    case FILTER_QHT:
    case FILTER_QQHTD:
        return snprintf(buf, len, "%s:bits=%llu,buckets=%u,fp=%u", name, bits, s->buckets,
                        s->fp_bits);
    }
    return snprintf(buf, len, "unknown");
}

/* ---- life cycle ---- */

/* A value derived from the secret for one purpose (label), never the secret itself. */
static uint64_t derive(const uint8_t secret[FILTER_SECRET_LEN], const char *label)
{
    uint8_t out[16];
    keyhash_siphash128(secret, label, strlen(label), out);
    return bytes_get_le64(out);
}

/* The filter without its table: geometry derived, nothing big allocated yet. */
static filter_t *alloc_filter(const filter_spec_t *spec, const uint8_t secret[FILTER_SECRET_LEN])
{
    const struct filter_ops *ops = ops_of(spec->kind);
    filter_t *f = calloc(1, ops->size);
    if (f == NULL)
        return NULL;
    f->ops = ops;
    f->spec = *spec;
    memcpy(f->secret, secret, FILTER_SECRET_LEN);
    f->rng = f->rng0 = derive(secret, "ingestd filter rng");
    ops->setup(f);
    return f;
}

static int alloc_table(filter_t *f)
{
    f->words = calloc(f->nwords > 0 ? f->nwords : 1, sizeof *f->words);
    return f->words != NULL ? FILTER_OK : FILTER_ENOMEM;
}

int filter_new(const filter_spec_t *spec, const uint8_t secret[FILTER_SECRET_LEN], filter_t **out)
{
    *out = NULL;
    if (spec == NULL || secret == NULL || check_spec(spec, NULL, 0) != 0)
        return FILTER_EINVAL;
    filter_t *f = alloc_filter(spec, secret);
    if (f == NULL || alloc_table(f) != FILTER_OK) {
        filter_free(f);
        return FILTER_ENOMEM;
    }
    *out = f;
    return FILTER_OK;
}

int filter_insert_if_absent(filter_t *f, const uint8_t key[FILTER_KEY_LEN])
{
    uint8_t mix[16];
    uint64_t h[2];
    keyhash_siphash128(f->secret, key, FILTER_KEY_LEN, mix);
    h[0] = bytes_get_le64(mix);
    h[1] = bytes_get_le64(mix + 8);
    return f->ops->insert(f, h);
}

uint64_t filter_memory_bits(const filter_t *f)
{
    return f->memory_bits;
}

double filter_asymptotic_fpr(const filter_t *f)
{
    return f->ops->asymptotic_fpr(f);
}

const filter_spec_t *filter_spec(const filter_t *f)
{
    return &f->spec;
}

void filter_reset(filter_t *f)
{
    memset(f->words, 0, f->nwords * sizeof *f->words);
    f->rng = f->rng0;
}

void filter_free(filter_t *f)
{
    if (f == NULL)
        return;
    free(f->words);
    free(f);
}

int filter_rows_insert_if_absent(filter_t *f, const filter_rows_t *g, uint64_t row, uint64_t fp)
{
    uint32_t empty = g->buckets;
    for (uint32_t i = 0; i < g->buckets; i++) {
        uint64_t v = filter_row_get(f, g, row, i);
        if (v == fp)
            return FILTER_DUPLICATE;
        if (v == 0 && empty == g->buckets)
            empty = i;
    }
    if (empty == g->buckets)
        empty = g->buckets == 1 ? 0 : (uint32_t)filter_reduce(filter_rand(&f->rng), g->buckets);
    filter_row_set(f, g, row, empty, fp);
    return FILTER_UNSEEN;
}

/* ---- serialized form ---- */

int filter_serialize(const filter_t *f, uint8_t **out, size_t *len)
{
    size_t n = HEADER_LEN + f->nwords * 8 + TRAILER_LEN;
    uint8_t *b = malloc(n);
    *out = NULL;
    *len = 0;
    if (b == NULL)
        return FILTER_ENOMEM;
    const filter_spec_t *s = &f->spec;
    uint64_t target;
    memcpy(&target, &s->target_fpr, sizeof target);

    memcpy(b, MAGIC, 4);
    b[4] = FORMAT_VERSION & 0xff;
    b[5] = FORMAT_VERSION >> 8;
    b[6] = (uint8_t)s->kind;
    b[7] = 0;
    bytes_put_le64(b + 8, s->bits);
    bytes_put_le32(b + 16, s->buckets);
    bytes_put_le32(b + 20, s->fp_bits);
    bytes_put_le32(b + 24, s->hashes);
    bytes_put_le32(b + 28, s->cell_bits);
    bytes_put_le32(b + 32, s->remainder_bits);
    bytes_put_le32(b + 36, s->reduced_bits);
    bytes_put_le64(b + 40, s->decrement);
    bytes_put_le64(b + 48, target);
    bytes_put_le64(b + 56, derive(f->secret, "ingestd filter check"));
    bytes_put_le64(b + 64, f->rng);
    bytes_put_le64(b + 72, (uint64_t)f->nwords);
    for (size_t i = 0; i < f->nwords; i++)
        bytes_put_le64(b + HEADER_LEN + 8 * i, f->words[i]);
    bytes_put_le32(b + n - TRAILER_LEN,
                   (uint32_t)crc32(crc32(0L, Z_NULL, 0), b, (uInt)(n - TRAILER_LEN)));
    *out = b;
    *len = n;
    return FILTER_OK;
}

int filter_deserialize(const uint8_t *b, size_t len, const uint8_t secret[FILTER_SECRET_LEN],
                       filter_t **out)
{
    *out = NULL;
    if (b == NULL || len < HEADER_LEN + TRAILER_LEN || memcmp(b, MAGIC, 4) != 0)
        return FILTER_ECORRUPT;
    /* The checksum first: a flipped bit anywhere is "corrupt", not a confusing other error. */
    uLong crc = crc32(0L, Z_NULL, 0);
    size_t body = len - TRAILER_LEN;
    for (size_t off = 0; off < body;) { /* crc32 takes uInt lengths */
        size_t step = body - off > (1u << 30) ? (1u << 30) : body - off;
        crc = crc32(crc, b + off, (uInt)step);
        off += step;
    }
    if ((uint32_t)crc != bytes_get_le32(b + body))
        return FILTER_ECORRUPT;
    if ((b[4] | b[5] << 8) != FORMAT_VERSION || b[7] != 0 || ops_of((filter_kind_t)b[6]) == NULL)
        return FILTER_EVERSION;

    filter_spec_t s;
    memset(&s, 0, sizeof s);
    s.kind = (filter_kind_t)b[6];
    s.bits = bytes_get_le64(b + 8);
    s.buckets = bytes_get_le32(b + 16);
    s.fp_bits = bytes_get_le32(b + 20);
    s.hashes = bytes_get_le32(b + 24);
    s.cell_bits = bytes_get_le32(b + 28);
    s.remainder_bits = bytes_get_le32(b + 32);
    s.reduced_bits = bytes_get_le32(b + 36);
    s.decrement = bytes_get_le64(b + 40);
    uint64_t target = bytes_get_le64(b + 48);
    memcpy(&s.target_fpr, &target, sizeof target);
    if (check_spec(&s, NULL, 0) != 0)
        return FILTER_ECORRUPT;
    if (bytes_get_le64(b + 56) != derive(secret, "ingestd filter check"))
        return FILTER_ESECRET;

    /* The payload must be the table these parameters make, before anything big is allocated. */
    filter_t *f = alloc_filter(&s, secret);
    if (f == NULL)
        return FILTER_ENOMEM;
    uint64_t nwords = bytes_get_le64(b + 72);
    if (nwords != f->nwords || body - HEADER_LEN != nwords * 8) {
        filter_free(f);
        return FILTER_ECORRUPT;
    }
    if (alloc_table(f) != FILTER_OK) {
        filter_free(f);
        return FILTER_ENOMEM;
    }
    f->rng = bytes_get_le64(b + 64);
    for (size_t i = 0; i < f->nwords; i++)
        f->words[i] = bytes_get_le64(b + HEADER_LEN + 8 * i);
    *out = f;
    return FILTER_OK;
}

const char *filter_strerror(int rc)
{
    switch (rc) {
    case FILTER_OK:
        return "ok";
    case FILTER_EINVAL:
        return "invalid filter spec or argument";
    case FILTER_ENOMEM:
        return "out of memory";
    case FILTER_ECORRUPT:
        return "serialized filter is corrupt (length, parameters or checksum)";
    case FILTER_EVERSION:
        return "serialized filter has an unknown format version or kind";
    case FILTER_ESECRET:
        return "serialized filter was made with another secret";
    }
    return "unknown filter error";
}
