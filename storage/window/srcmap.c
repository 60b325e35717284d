/* srcmap.c: per-source key counts of the window (srcmap.h). */
#include "storage/window/srcmap.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "storage/window/rule.h"

/* A dense array of entries plus an open-addressing index of their positions (+1, 0: empty). */
struct srcmap {
    uint64_t budget;
    size_t over;
    srcmap_entry_t *e;
    size_t n, cap;
    uint32_t *slot;
    size_t nslots; /* a power of two, at least twice cap */
};

srcmap_t *srcmap_new(uint64_t budget)
{
    srcmap_t *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->budget = budget;
    return m;
}

void srcmap_free(srcmap_t *m)
{
    if (!m)
        return;
    free(m->e);
    free(m->slot);
    free(m);
}

void srcmap_zero_keys(srcmap_t *m)
{
    for (size_t i = 0; i < m->n; i++)
        m->e[i].keys = 0;
    m->over = 0;
}

/* Tags are keyed hashes already: their low bits spread evenly. */
static size_t slot_of(const srcmap_t *m, uint32_t tag)
{
    return (size_t)tag & (m->nslots - 1);
}

static srcmap_entry_t *find(const srcmap_t *m, uint32_t tag)
{
    if (m->nslots == 0)
        return NULL;
    for (size_t s = slot_of(m, tag);; s = (s + 1) & (m->nslots - 1)) {
        if (m->slot[s] == 0)
            return NULL;
        if (m->e[m->slot[s] - 1].tag == tag)
            return &m->e[m->slot[s] - 1];
    }
}

static void index_put(srcmap_t *m, size_t pos)
{
    size_t s = slot_of(m, m->e[pos].tag);
    while (m->slot[s] != 0)
        s = (s + 1) & (m->nslots - 1);
    m->slot[s] = (uint32_t)(pos + 1);
}

static int grow(srcmap_t *m)
{
    size_t cap = m->cap ? m->cap * 2 : 16, nslots = cap * 2;
    srcmap_entry_t *e = realloc(m->e, cap * sizeof(*e));
    if (!e)
        return -1;
    m->e = e;
    uint32_t *slot = calloc(nslots, sizeof(*slot));
    if (!slot)
        return -1;
    free(m->slot);
    m->slot = slot;
    m->nslots = nslots;
    m->cap = cap;
    for (size_t i = 0; i < m->n; i++)
        index_put(m, i);
    return 0;
}

srcmap_entry_t *srcmap_get(srcmap_t *m, uint32_t tag)
{
    srcmap_entry_t *e = find(m, tag);
    if (e)
        return e;
    if (m->n == m->cap && grow(m) != 0)
        return NULL;
    e = &m->e[m->n];
    memset(e, 0, sizeof(*e));
    e->tag = tag;
    index_put(m, m->n++);
    return e;
}

int srcmap_add(srcmap_t *m, const uint8_t key[KEYHASH_LEN])
{
    srcmap_entry_t *e = srcmap_get(m, keyhash_source(key));
    if (!e)
        return -1;
    if (++e->keys == m->budget + 1 && m->budget > 0)
        m->over++;
    return 0;
}

int srcmap_add_received(srcmap_t *m, const uint8_t key[KEYHASH_LEN], int64_t received_ms)
{
    if (srcmap_add(m, key) != 0)
        return -1;
    srcmap_entry_t *e = find(m, keyhash_source(key));
    if (received_ms > e->newest_ms)
        e->newest_ms = received_ms;
    return 0;
}

void srcmap_evicted(srcmap_t *m, const uint8_t key[KEYHASH_LEN], int64_t received_ms, int why)
{
    srcmap_entry_t *e = find(m, keyhash_source(key));
    if (!e || e->keys == 0)
        return;
    if (e->keys-- == m->budget + 1 && m->budget > 0)
        m->over--;
    if (why == WINDOW_AGE)
        e->evicted_age++;
    else
        e->evicted_size++;
    if (received_ms > e->forgot_ms)
        e->forgot_ms = received_ms;
}

uint64_t srcmap_keys_of(const srcmap_t *m, const uint8_t key[KEYHASH_LEN])
{
    const srcmap_entry_t *e = find(m, keyhash_source(key));
    return e ? e->keys : 0;
}

size_t srcmap_over(const srcmap_t *m)
{
    return m->over;
}

size_t srcmap_count(const srcmap_t *m)
{
    return m->n;
}

const srcmap_entry_t *srcmap_entries(const srcmap_t *m)
{
    return m->e;
}
