/* auth: HTTP Basic parsing, base64 decoding, constant-time write-key lookup, keys files, key sets.
 */
#include "api/auth.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/errbuf.h"

static int b64val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int auth_base64_decode(const char *in, size_t len, unsigned char *out, size_t *outlen)
{
    size_t pad = 0, o = 0;
    uint32_t acc = 0;
    int bits = 0;

    if (len % 4 == 0 && len > 0) {
        if (in[len - 1] == '=')
            pad++;
        if (len > 1 && in[len - 2] == '=')
            pad++;
    }
    len -= pad;
    /* One leftover character carries only 6 bits: no whole byte, so it cannot be valid. */
    if (len % 4 == 1)
        return -1;
    for (size_t i = 0; i < len; i++) {
        int v = b64val((unsigned char)in[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    /* Leftover bits must be zero, else two encodings would decode to the same bytes. */
    if (acc != 0)
        return -1;
    *outlen = o;
    return 0;
}

int auth_basic_key(const char *header, char **key, size_t *keylen)
{
    unsigned char *buf = NULL;
    size_t n = 0;
    int rc = AUTH_NONE;

    *key = NULL;
    *keylen = 0;
    if (!header)
        return AUTH_NONE;
    while (*header == ' ' || *header == '\t')
        header++;
    if (strncasecmp(header, "Basic", 5) != 0 || (header[5] != ' ' && header[5] != '\t'))
        return AUTH_NONE;
    const char *b64 = header + 5;
    while (*b64 == ' ' || *b64 == '\t')
        b64++;
    size_t len = strlen(b64);
    while (len > 0 && (b64[len - 1] == ' ' || b64[len - 1] == '\t'))
        len--;

    buf = malloc((len / 4 + 1) * 3 + 1);
    if (!buf)
        return AUTH_NOMEM;
    if (auth_base64_decode(b64, len, buf, &n) != 0 || memchr(buf, '\0', n)) {
        rc = AUTH_MALFORMED;
        goto out;
    }
    buf[n] = '\0';

    const char *user = (const char *)buf;
    size_t ulen = n;
    const char *colon = memchr(buf, ':', n);
    if (colon) {
        ulen = (size_t)(colon - user);
        if (ulen == 0) {
            user = colon + 1;
            ulen = n - 1;
        }
    }
    if (ulen == 0)
        goto out;
    char *k = malloc(ulen + 1);
    if (!k) {
        rc = AUTH_NOMEM;
        goto out;
    }
    memcpy(k, user, ulen);
    k[ulen] = '\0';
    *key = k;
    *keylen = ulen;
    rc = AUTH_OK;
out:
    free(buf);
    return rc;
}

int auth_bearer_token(const char *header, const char **tok, size_t *len)
{
    static const char scheme[] = "Bearer";
    const size_t n = sizeof(scheme) - 1;

    *tok = NULL;
    *len = 0;
    if (!header || strncasecmp(header, scheme, n) != 0 || (header[n] != ' ' && header[n] != '\t'))
        return AUTH_NONE;
    const char *t = header + n;
    while (*t == ' ' || *t == '\t')
        t++;
    size_t l = strlen(t);
    while (l > 0 && (t[l - 1] == ' ' || t[l - 1] == '\t'))
        l--;
    *tok = t;
    *len = l;
    return AUTH_OK;
}

int auth_equal(const char *a, size_t alen, const char *b, size_t blen)
{
    /* The loop runs over b (the secret side) whatever a is; a's length is the caller's own. */
    volatile unsigned char diff = (unsigned char)(alen != blen);
    for (size_t i = 0; i < blen; i++) {
        unsigned char ca = i < alen ? (unsigned char)a[i] : 0;
        diff |= ca ^ (unsigned char)b[i];
    }
    return diff == 0;
}

const api_write_key_t *auth_lookup(const api_write_key_t *keys, size_t n, const char *key,
                                   size_t keylen)
{
    const api_write_key_t *found = NULL;
    if (!key)
        return NULL;
    /* No early exit: every key is compared so the time does not say which one matched. */
    for (size_t i = 0; i < n; i++) {
        int eq = auth_equal(key, keylen, keys[i].key, strlen(keys[i].key));
        if (eq && !found)
            found = &keys[i];
    }
    return found;
}

/* ---- write keys files ---- */

void auth_keys_free(api_write_key_t *keys, size_t n)
{
    for (size_t i = 0; keys && i < n; i++) {
        free((char *)keys[i].key);
        free((char *)keys[i].source);
    }
    free(keys);
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static int is_blank(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* A key or source byte that --write-key would refuse (or split on). */
static int bad_byte(unsigned char c)
{
    return c <= 0x20 || c == 0x7f || c == ',';
}

/* One key of the merged list, for the duplicate check: line 0 means "from base". */
struct ref {
    const char *key;
    size_t line;
};

static int cmp_ref(const void *a, const void *b)
{
    const struct ref *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c != 0)
        return c;
    return x->line < y->line ? -1 : x->line > y->line;
}

/* Fails on a key given twice; `lines[i]` is the file line of out[i] (0: from base). */
static int check_unique(const api_write_key_t *keys, const size_t *lines, size_t n,
                        const char *name, char *errbuf, size_t errlen)
{
    struct ref *refs = malloc((n ? n : 1) * sizeof(*refs));
    int rc = 0;

    if (!refs) {
        errbuf_printf(errbuf, errlen, "%s: out of memory", name);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        refs[i] = (struct ref){keys[i].key, lines[i]};
    qsort(refs, n, sizeof(*refs), cmp_ref);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(refs[i - 1].key, refs[i].key) != 0)
            continue;
        /* Sorted by line within a key: refs[i] is the later one, so always a line of the file. */
        if (refs[i - 1].line == 0)
            errbuf_printf(errbuf, errlen,
                          "%s:%zu: write key also given by --write-key or INGESTD_WRITE_KEY", name,
                          refs[i].line);
        else
            errbuf_printf(errbuf, errlen, "%s:%zu: write key given twice (also on line %zu)", name,
                          refs[i].line, refs[i - 1].line);
        rc = -1;
        break;
    }
    free(refs);
    return rc;
}

/* The keys parsed so far, with the file line of each (0: from base). */
struct keylist {
    api_write_key_t *keys;
    size_t *lines;
    size_t n, cap;
};

/* Appends copies of key[0..klen) and src[0..slen), found on `line`. 0, or -1 (out of memory). */
static int keylist_add(struct keylist *l, const char *key, size_t klen, const char *src,
                       size_t slen, size_t line)
{
    if (l->n == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 16;
        api_write_key_t *k2 = realloc(l->keys, ncap * sizeof(*l->keys));
        if (!k2)
            return -1;
        l->keys = k2;
        size_t *l2 = realloc(l->lines, ncap * sizeof(*l->lines));
        if (!l2)
            return -1;
        l->lines = l2;
        l->cap = ncap;
    }
    l->keys[l->n].key = dup_n(key, klen);
    l->keys[l->n].source = dup_n(src, slen);
    l->lines[l->n] = line;
    l->n++;
    return l->keys[l->n - 1].key && l->keys[l->n - 1].source ? 0 : -1;
}

/* One line [b, e) of a keys file: KEY[:SOURCE], or a blank or '#' line (skipped). 0, or -1
 * with "NAME:LINE: reason" in errbuf. */
static int parse_line(struct keylist *l, const char *b, const char *e, const char *name,
                      size_t lineno, char *errbuf, size_t errlen)
{
    while (b < e && is_blank((unsigned char)*b))
        b++;
    while (e > b && is_blank((unsigned char)e[-1]))
        e--;
    if (b == e || *b == '#')
        return 0;
    const char *sep = memchr(b, ':', (size_t)(e - b));
    const char *src = sep ? sep + 1 : "default";
    size_t klen = (size_t)((sep ? sep : e) - b);
    size_t slen = sep ? (size_t)(e - src) : strlen("default");

    if (klen == 0) {
        errbuf_printf(errbuf, errlen, "%s:%zu: empty write key", name, lineno);
        return -1;
    }
    if (slen == 0) {
        errbuf_printf(errbuf, errlen, "%s:%zu: empty source after ':'", name, lineno);
        return -1;
    }
    for (const char *c = b; c < e; c++) {
        if (bad_byte((unsigned char)*c)) {
            errbuf_printf(errbuf, errlen,
                          "%s:%zu: blank, control character or ',' in a write key or source "
                          "(one KEY[:SOURCE] per line)",
                          name, lineno);
            return -1;
        }
    }
    if (klen + slen > AUTH_KEY_BYTES) {
        errbuf_printf(errbuf, errlen, "%s:%zu: write key or source too long (max %d bytes)", name,
                      lineno, AUTH_KEY_BYTES);
        return -1;
    }
    if (l->n == AUTH_MAX_KEYS) {
        errbuf_printf(errbuf, errlen, "%s:%zu: more than %d write keys in all", name, lineno,
                      AUTH_MAX_KEYS);
        return -1;
    }
    if (keylist_add(l, b, klen, src, slen, lineno) != 0) {
        errbuf_printf(errbuf, errlen, "%s: out of memory", name);
        return -1;
    }
    return 0;
}

int auth_keys_parse(const char *text, size_t len, const char *name, const api_write_key_t *base,
                    size_t nbase, api_write_key_t **out, size_t *n, char *errbuf, size_t errlen)
{
    struct keylist l = {0};
    const char *p = text, *end = text + len;
    size_t lineno = 0;

    *out = NULL;
    *n = 0;
    if (nbase > AUTH_MAX_KEYS) {
        errbuf_printf(errbuf, errlen, "%s: more than %d write keys in all", name, AUTH_MAX_KEYS);
        return -1;
    }
    for (size_t i = 0; i < nbase; i++) {
        const char *k = base[i].key ? base[i].key : "";
        const char *src = base[i].source && *base[i].source ? base[i].source : "default";
        if (keylist_add(&l, k, strlen(k), src, strlen(src), 0) != 0) {
            errbuf_printf(errbuf, errlen, "%s: out of memory", name);
            goto fail;
        }
    }
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        if (parse_line(&l, p, e, name, ++lineno, errbuf, errlen) != 0)
            goto fail;
        p = nl ? nl + 1 : end;
    }
    if (check_unique(l.keys, l.lines, l.n, name, errbuf, errlen) != 0)
        goto fail;
    free(l.lines);
    *out = l.keys;
    *n = l.n;
    return 0;
fail:
    auth_keys_free(l.keys, l.n);
    free(l.lines);
    return -1;
}

int auth_keys_load(const char *path, const api_write_key_t *base, size_t nbase,
                   api_write_key_t **out, size_t *n, char *errbuf, size_t errlen)
{
    char *buf = NULL;
    size_t len = 0;
    int rc = -1;

    *out = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        errbuf_printf(errbuf, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    /* One byte more than allowed tells a file that is too large from one that is just full. */
    buf = malloc((size_t)AUTH_MAX_FILE_SIZE + 1);
    if (!buf) {
        errbuf_printf(errbuf, errlen, "%s: out of memory", path);
        goto out;
    }
    len = fread(buf, 1, (size_t)AUTH_MAX_FILE_SIZE + 1, f);
    if (ferror(f)) {
        errbuf_printf(errbuf, errlen, "%s: read error", path);
        goto out;
    }
    if (len > (size_t)AUTH_MAX_FILE_SIZE) {
        errbuf_printf(errbuf, errlen, "%s: larger than %d bytes", path, AUTH_MAX_FILE_SIZE);
        goto out;
    }
    rc = auth_keys_parse(buf, len, path, base, nbase, out, n, errbuf, errlen);
out:
    free(buf);
    fclose(f);
    return rc;
}

/* ---- key sets ---- */

struct auth_keyset {
    atomic_size_t refs;
    size_t n;
    api_write_key_t *keys;
    ratelimit_t *limits; /* n buckets, or NULL: no rate limit */
    size_t nlimits;      /* buckets initialised (for a partial failure) */
};

static void keyset_free(auth_keyset_t *ks)
{
    for (size_t i = 0; i < ks->nlimits; i++)
        ratelimit_destroy(&ks->limits[i]);
    free(ks->limits);
    auth_keys_free(ks->keys, ks->n);
    free(ks);
}

int auth_keyset_new(const api_write_key_t *keys, size_t n, uint64_t rate_limit, auth_keyset_t *prev,
                    int64_t now_ms, auth_keyset_t **out)
{
    auth_keyset_t *ks = NULL;

    *out = NULL;
    if (n > 0 && !keys)
        return -1;
    ks = calloc(1, sizeof(*ks));
    if (!ks)
        return -1;
    atomic_init(&ks->refs, 1);
    ks->keys = calloc(n ? n : 1, sizeof(*ks->keys));
    if (!ks->keys)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        if (!keys[i].key || !*keys[i].key)
            goto fail;
        const char *src = keys[i].source && *keys[i].source ? keys[i].source : "default";
        ks->keys[i].key = strdup(keys[i].key);
        ks->keys[i].source = strdup(src);
        ks->n = i + 1;
        if (!ks->keys[i].key || !ks->keys[i].source)
            goto fail;
    }
    if (rate_limit > 0) {
        ks->limits = calloc(n ? n : 1, sizeof(*ks->limits));
        if (!ks->limits)
            goto fail;
        for (size_t i = 0; i < n; i++) {
            if (ratelimit_init(&ks->limits[i], rate_limit, now_ms) != RATELIMIT_OK)
                goto fail;
            ks->nlimits = i + 1;
        }
        /* A reload must not hand every key a fresh burst: carry the levels over (a plain
         * search: this runs on SIGHUP, not per request, and the keys are not attacker input). */
        for (size_t i = 0; prev && prev->limits && i < n; i++)
            for (size_t j = 0; j < prev->n; j++)
                if (strcmp(ks->keys[i].key, prev->keys[j].key) == 0) {
                    ratelimit_copy_state(&ks->limits[i], &prev->limits[j]);
                    break;
                }
    }
    *out = ks;
    return 0;
fail:
    keyset_free(ks);
    return -1;
}

void auth_keyset_retain(auth_keyset_t *ks)
{
    atomic_fetch_add_explicit(&ks->refs, 1, memory_order_relaxed);
}

void auth_keyset_release(auth_keyset_t *ks)
{
    if (!ks)
        return;
    /* acq_rel: everything done with the set happens before whoever frees it. */
    if (atomic_fetch_sub_explicit(&ks->refs, 1, memory_order_acq_rel) == 1)
        keyset_free(ks);
}

size_t auth_keyset_size(const auth_keyset_t *ks)
{
    return ks->n;
}

const api_write_key_t *auth_keyset_at(const auth_keyset_t *ks, size_t i)
{
    return &ks->keys[i];
}

const api_write_key_t *auth_keyset_find(auth_keyset_t *ks, const char *key, size_t keylen,
                                        ratelimit_t **limit)
{
    const api_write_key_t *k = auth_lookup(ks->keys, ks->n, key, keylen);
    if (limit)
        *limit = k && ks->limits ? &ks->limits[k - ks->keys] : NULL;
    return k;
}
