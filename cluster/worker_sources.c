/* worker_sources.c: the Kafka worker's windows by source (worker_sources.h). */
#include "cluster/worker_sources.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_BYTES 64

typedef struct tally {
    uint32_t tag;
    char name[NAME_MAX_BYTES]; /* "tag:XXXXXXXX" until a record names it */
    uint64_t keys, evicted_age, evicted_size;
    int64_t forgot_ms;
} tally_t;

struct worker_sources {
    tally_t *names; /* consuming thread: every source seen, named */
    size_t nnames, names_cap;
    tally_t *build; /* consuming thread: the tally being built */
    size_t nbuild, build_cap;
    pthread_mutex_t mu; /* the published tally */
    tally_t *pub;
    size_t npub;
};

worker_sources_t *worker_sources_new(void)
{
    worker_sources_t *s = calloc(1, sizeof(*s));
    if (s)
        pthread_mutex_init(&s->mu, NULL);
    return s;
}

void worker_sources_free(worker_sources_t *s)
{
    if (!s)
        return;
    pthread_mutex_destroy(&s->mu);
    free(s->names);
    free(s->build);
    free(s->pub);
    free(s);
}

/* The entry of `tag` in arr[0..*n), added (cap grown) when new; NULL when out of memory. */
static tally_t *entry(tally_t **arr, size_t *n, size_t *cap, uint32_t tag)
{
    for (size_t i = 0; i < *n; i++)
        if ((*arr)[i].tag == tag)
            return &(*arr)[i];
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 8;
        tally_t *p = realloc(*arr, c * sizeof(*p));
        if (!p)
            return NULL;
        *arr = p;
        *cap = c;
    }
    tally_t *t = &(*arr)[(*n)++];
    memset(t, 0, sizeof(*t));
    t->tag = tag;
    snprintf(t->name, sizeof(t->name), "tag:%08" PRIx32, tag);
    return t;
}

/* A name shown as is in JSON and labels: printable ASCII but quotes and backslashes. */
static bool plain(const char *name, size_t len)
{
    if (len == 0 || len >= NAME_MAX_BYTES)
        return false;
    for (size_t i = 0; i < len; i++)
        if (name[i] < 0x20 || name[i] > 0x7e || name[i] == '"' || name[i] == '\\')
            return false;
    return true;
}

void worker_sources_name(worker_sources_t *s, uint32_t tag, const char *name, size_t len)
{
    size_t had = s->nnames;
    tally_t *t = entry(&s->names, &s->nnames, &s->names_cap, tag);
    if (t && s->nnames > had && plain(name, len)) {
        memcpy(t->name, name, len);
        t->name[len] = '\0';
    }
}

void worker_sources_begin(worker_sources_t *s)
{
    s->nbuild = 0;
}

/* The tally's entry of the source whose keys carry `tag`, by name: each partition has its own
 * secret, so one source has another tag in each, and the tally adds them up by name. */
static tally_t *build_entry(worker_sources_t *s, uint32_t tag)
{
    char name[NAME_MAX_BYTES];
    snprintf(name, sizeof(name), "tag:%08" PRIx32, tag);
    for (size_t i = 0; i < s->nnames; i++)
        if (s->names[i].tag == tag)
            memcpy(name, s->names[i].name, sizeof(name));
    for (size_t i = 0; i < s->nbuild; i++)
        if (strcmp(s->build[i].name, name) == 0)
            return &s->build[i];
    tally_t *t = entry(&s->build, &s->nbuild, &s->build_cap, tag);
    if (t)
        memcpy(t->name, name, sizeof(t->name));
    return t;
}

void worker_sources_add(worker_sources_t *s, const window_source_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        tally_t *t = build_entry(s, src[i].tag);
        if (!t)
            return;
        t->keys += src[i].keys;
        t->evicted_age += src[i].evicted_age;
        t->evicted_size += src[i].evicted_size;
        if (src[i].forgot_ms > t->forgot_ms)
            t->forgot_ms = src[i].forgot_ms;
    }
}

void worker_sources_publish(worker_sources_t *s)
{
    tally_t *copy = s->nbuild ? malloc(s->nbuild * sizeof(*copy)) : NULL;
    if (s->nbuild && !copy)
        return; /* the readers keep the last one */
    if (copy)
        memcpy(copy, s->build, s->nbuild * sizeof(*copy));
    pthread_mutex_lock(&s->mu);
    free(s->pub);
    s->pub = copy;
    s->npub = s->nbuild;
    pthread_mutex_unlock(&s->mu);
}

/* The seconds since a source's newest forgotten key; -1: it forgot none. */
static int64_t window_s(const tally_t *t, int64_t now_ms)
{
    return t->forgot_ms > 0 ? (now_ms - t->forgot_ms) / 1000 : -1;
}

void worker_sources_json(worker_sources_t *s, FILE *f, int64_t now_ms)
{
    pthread_mutex_lock(&s->mu);
    fputc('[', f);
    for (size_t i = 0; i < s->npub; i++) {
        const tally_t *t = &s->pub[i];
        int64_t w = window_s(t, now_ms);
        fprintf(f,
                "%s{\"source\":\"%s\",\"keys\":%" PRIu64 ",\"evicted_age\":%" PRIu64
                ",\"evicted_size\":%" PRIu64 ",\"effective_window_seconds\":",
                i ? "," : "", t->name, t->keys, t->evicted_age, t->evicted_size);
        if (w >= 0)
            fprintf(f, "%" PRId64 "}", w);
        else
            fputs("null}", f);
    }
    fputc(']', f);
    pthread_mutex_unlock(&s->mu);
}

void worker_sources_prom(worker_sources_t *s, prom_t *p, int64_t now_ms)
{
    pthread_mutex_lock(&s->mu);
    prom_source_t *ps = s->npub ? calloc(s->npub, sizeof(*ps)) : NULL;
    for (size_t i = 0; ps && i < s->npub; i++)
        ps[i] = (prom_source_t){.name = s->pub[i].name,
                                .keys = s->pub[i].keys,
                                .evicted_age = s->pub[i].evicted_age,
                                .evicted_size = s->pub[i].evicted_size,
                                .window_s = window_s(&s->pub[i], now_ms)};
    prom_sources(p, ps, ps ? s->npub : 0);
    pthread_mutex_unlock(&s->mu);
    free(ps);
}
