/* addrcount: how many connections or requests each client address holds, for a per-address cap. */
#ifndef INGESTD_ADDRCOUNT_H
#define INGESTD_ADDRCOUNT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct addrcount addrcount_t;

/*
 * A table for at most `max_entries` distinct addresses at once (the caller guarantees it: one
 * entry per open connection at most). Returns 0 with *out (freed by addrcount_free), or -1 when
 * out of memory. Addresses are 16 bytes, IPv4 as IPv4-mapped IPv6 (server/proxy.h).
 * Not thread-safe: the caller locks.
 */
int addrcount_new(size_t max_entries, addrcount_t **out);

/* NULL is a no-op. */
void addrcount_free(addrcount_t *t);

/* Counts one more for `addr` when it holds fewer than `cap`; returns whether it did. */
bool addrcount_take(addrcount_t *t, const uint8_t addr[16], unsigned cap);

/* Counts one less for `addr` (one that addrcount_take counted). */
void addrcount_give(addrcount_t *t, const uint8_t addr[16]);

/* What `addr` holds now (for tests). */
unsigned addrcount_get(const addrcount_t *t, const uint8_t addr[16]);

#endif
