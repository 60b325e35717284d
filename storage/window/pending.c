/* pending.c: an append-only array of accepted keys with an open-addressing index. */
#include "storage/window/pending.h"

#include <stdlib.h>
#include <string.h>

#define MIN_ITEMS 1024

struct pending {
    store_entry_t *items;
    size_t n, cap;
    uint32_t *slots; /* 0: empty, else index + 1; a power of two, at most half full */
    size_t nslots;
    uint64_t base;
};

/* Keys are keyed SipHash outputs: any 8 of their bytes are already a uniform hash. */
static size_t slot_of(const pending_t *p, const uint8_t key[KEYHASH_LEN])
{
    uint64_t h;
    memcpy(&h, key, sizeof(h));
    return (size_t)h & (p->nslots - 1);
}

static uint32_t *probe(const pending_t *p, const uint8_t key[KEYHASH_LEN])
{
    size_t i = slot_of(p, key);
    for (;;) {
        uint32_t s = p->slots[i];
        if (s == 0 || memcmp(p->items[s - 1].key, key, KEYHASH_LEN) == 0)
            return &p->slots[i];
        i = (i + 1) & (p->nslots - 1);
    }
}

static int grow(pending_t *p)
{
    size_t cap = p->cap ? p->cap * 2 : MIN_ITEMS;
    if (cap > UINT32_MAX - 1)
        return -1;
    store_entry_t *items = realloc(p->items, cap * sizeof(*items));
    if (!items)
        return -1;
    p->items = items;
    uint32_t *slots = calloc(cap * 2, sizeof(*slots));
    if (!slots)
        return -1; /* the bigger array is kept; the index still fits the old capacity */
    free(p->slots);
    p->slots = slots;
    p->nslots = cap * 2;
    p->cap = cap;
    for (size_t i = 0; i < p->n; i++)
        *probe(p, p->items[i].key) = (uint32_t)(i + 1);
    return 0;
}

pending_t *pending_new(uint64_t base)
{
    pending_t *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->base = base;
    if (grow(p) != 0) {
        pending_free(p);
        return NULL;
    }
    return p;
}

void pending_free(pending_t *p)
{
    if (!p)
        return;
    free(p->items);
    free(p->slots);
    free(p);
}

void pending_reset(pending_t *p, uint64_t base)
{
    if (p->n > 0)
        memset(p->slots, 0, p->nslots * sizeof(*p->slots));
    p->n = 0;
    p->base = base;
}

int pending_add(pending_t *p, const uint8_t key[KEYHASH_LEN], int64_t received_ms, uint64_t offset,
                uint64_t *seq)
{
    if (p->n == p->cap && grow(p) != 0)
        return -1;
    store_entry_t *it = &p->items[p->n];
    memcpy(it->key, key, KEYHASH_LEN);
    it->seq = p->base + p->n;
    it->received_ms = received_ms;
    it->offset = offset;
    *probe(p, key) = (uint32_t)(p->n + 1); /* a key already here now names its newest item */
    p->n++;
    *seq = it->seq;
    return 0;
}

const store_entry_t *pending_find(const pending_t *p, const uint8_t key[KEYHASH_LEN])
{
    uint32_t s = *probe(p, key);
    return s ? &p->items[s - 1] : NULL;
}

const store_entry_t *pending_at_seq(const pending_t *p, uint64_t seq)
{
    return seq >= p->base && seq - p->base < p->n ? &p->items[seq - p->base] : NULL;
}

size_t pending_count(const pending_t *p)
{
    return p->n;
}

uint64_t pending_base(const pending_t *p)
{
    return p->base;
}

uint64_t pending_end(const pending_t *p)
{
    return p->base + p->n;
}

const store_entry_t *pending_items(const pending_t *p)
{
    return p->items;
}
