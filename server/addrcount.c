/* addrcount: an open-addressing table of per-address counts, keyed with a random seed. */
#include "server/addrcount.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

struct slot {
    uint8_t addr[16];
    unsigned n; /* 0: empty */
};

struct addrcount {
    struct slot *slots;
    size_t mask;   /* slots - 1; a power of two at least twice max_entries, so probes end */
    uint64_t seed; /* random: a client cannot pick addresses that collide in our table */
};

int addrcount_new(size_t max_entries, addrcount_t **out)
{
    addrcount_t *t = calloc(1, sizeof *t);
    size_t n = 16;

    *out = NULL;
    if (t == NULL)
        return -1;
    while (n < 2 * max_entries)
        n *= 2;
    t->slots = calloc(n, sizeof *t->slots);
    if (t->slots == NULL) {
        free(t);
        return -1;
    }
    t->mask = n - 1;
    if (getrandom(&t->seed, sizeof t->seed, GRND_NONBLOCK) != (ssize_t)sizeof t->seed)
        t->seed = (uint64_t)time(NULL) * UINT64_C(0x9e3779b97f4a7c15);
    *out = t;
    return 0;
}

void addrcount_free(addrcount_t *t)
{
    if (t == NULL)
        return;
    free(t->slots);
    free(t);
}

/* FNV-1a from the seed, then splitmix64's finaliser to spread it over the low bits. */
static size_t home(const addrcount_t *t, const uint8_t addr[16])
{
    uint64_t h = t->seed ^ UINT64_C(0xcbf29ce484222325);

    for (int i = 0; i < 16; i++) {
        h ^= addr[i];
        h *= UINT64_C(0x100000001b3);
    }
    h ^= h >> 31;
    h *= UINT64_C(0xbf58476d1ce4e5b9);
    h ^= h >> 29;
    return (size_t)h & t->mask;
}

/* The slot holding addr, or the empty one where it would go. */
static size_t find(const addrcount_t *t, const uint8_t addr[16])
{
    size_t i = home(t, addr);

    while (t->slots[i].n != 0 && memcmp(t->slots[i].addr, addr, 16) != 0)
        i = (i + 1) & t->mask;
    return i;
}

bool addrcount_take(addrcount_t *t, const uint8_t addr[16], unsigned cap)
{
    struct slot *s = &t->slots[find(t, addr)];

    if (s->n >= cap)
        return false;
    if (s->n == 0)
        memcpy(s->addr, addr, 16);
    s->n++;
    return true;
}

/* Linear probing without tombstones: an emptied slot pulls later entries of its run back. */
static void remove_at(addrcount_t *t, size_t hole)
{
    for (size_t j = (hole + 1) & t->mask; t->slots[j].n != 0; j = (j + 1) & t->mask) {
        size_t k = home(t, t->slots[j].addr);
        /* Move j into the hole unless its home lies cyclically in (hole, j]. */
        bool stays = hole <= j ? (hole < k && k <= j) : (hole < k || k <= j);
        if (stays)
            continue;
        t->slots[hole] = t->slots[j];
        t->slots[j].n = 0;
        hole = j;
    }
}

void addrcount_give(addrcount_t *t, const uint8_t addr[16])
{
    size_t i = find(t, addr);

    if (t->slots[i].n == 0)
        return; /* never counted: nothing to give back */
    if (--t->slots[i].n == 0)
        remove_at(t, i);
}

unsigned addrcount_get(const addrcount_t *t, const uint8_t addr[16])
{
    return t->slots[find(t, addr)].n;
}
