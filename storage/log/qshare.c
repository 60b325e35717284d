/* qshare: the quarantine's bytes per source, so each source keeps its share of the bound. */
#include "storage/log/qshare.h"

#include <stdlib.h>
#include <string.h>

/* A linear table: a deployment has a handful of sources, and only the writer thread looks. */
struct entry {
    char *src;
    size_t n;
    uint64_t bytes;
};

struct qshare {
    struct entry *e;
    size_t count, cap;
};

/* The record's fields before "source" are strings whose quotes are escaped (\"), so the first
 * `,"source":` is the field itself, and "receivedAt" always follows it (quarantine.c, format). */
static const char FIELD[] = ",\"source\":";
static const char NEXT[] = ",\"receivedAt\":";

qshare_t *qshare_new(void)
{
    return calloc(1, sizeof(qshare_t));
}

void qshare_free(qshare_t *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->count; i++)
        free(t->e[i].src);
    free(t->e);
    free(t);
}

static const char *find(const char *s, size_t len, const char *what)
{
    size_t n = strlen(what);
    for (size_t i = 0; i + n <= len; i++)
        if (s[i] == what[0] && memcmp(s + i, what, n) == 0)
            return s + i;
    return NULL;
}

void qshare_source(const char *data, size_t len, const char **src, size_t *n)
{
    const char *f = find(data, len, FIELD);
    const char *end = f ? find(f, len - (size_t)(f - data), NEXT) : NULL;

    *src = "";
    *n = 0;
    if (f && end) {
        *src = f + strlen(FIELD);
        *n = (size_t)(end - *src);
    }
}

static struct entry *lookup(const qshare_t *t, const char *data, size_t len)
{
    const char *src;
    size_t n;

    qshare_source(data, len, &src, &n);
    for (size_t i = 0; i < t->count; i++)
        if (t->e[i].n == n && memcmp(t->e[i].src, src, n) == 0)
            return &t->e[i];
    return NULL;
}

int qshare_add(qshare_t *t, const char *data, size_t len, uint64_t bytes)
{
    struct entry *e = lookup(t, data, len);
    const char *src;
    size_t n;

    if (e) {
        e->bytes += bytes;
        return 0;
    }
    if (t->count == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 8;
        struct entry *grown = realloc(t->e, cap * sizeof(*grown));
        if (!grown)
            return -1;
        t->e = grown;
        t->cap = cap;
    }
    qshare_source(data, len, &src, &n);
    char *copy = malloc(n + 1);
    if (!copy)
        return -1;
    memcpy(copy, src, n);
    struct entry *e_new = &t->e[t->count++];
    e_new->src = copy;
    e_new->n = n;
    e_new->bytes = bytes;
    return 0;
}

void qshare_sub(qshare_t *t, const char *data, size_t len, uint64_t bytes)
{
    struct entry *e = lookup(t, data, len);

    if (!e)
        return;
    e->bytes = e->bytes > bytes ? e->bytes - bytes : 0;
    if (e->bytes == 0) {
        free(e->src);
        *e = t->e[--t->count];
    }
}

bool qshare_over(const qshare_t *t, const char *data, size_t len, uint64_t max_bytes)
{
    const struct entry *e = lookup(t, data, len);
    /* A source the table lost (out of memory) counts as over: its records go first. */
    return !e || t->count == 0 || e->bytes > max_bytes / t->count;
}

size_t qshare_sources(const qshare_t *t)
{
    return t->count;
}
