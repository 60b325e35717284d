/* srcmap: each source's share of the window's young part, by the tag its keys carry. */
#ifndef INGESTD_SRCMAP_H
#define INGESTD_SRCMAP_H

#include <stddef.h>
#include <stdint.h>

#include "storage/window/keyhash.h"

/*
 * Per-source budgets (docs/window.md): every key carries its source's tag
 * (keyhash_source), and the window's size bound holds per source, so one
 * source's flood ages out only its own keys. The map counts, per tag, the
 * keys of the young part of the window (pending and the young LMDB store:
 * the part evicted key by key) and what left it, and knows how many sources
 * are over the budget, so an eviction pass can tell in O(1) whether it has
 * work left.
 *
 * Not thread-safe: one owner (the commit writer, or a replay).
 */
typedef struct srcmap srcmap_t;

typedef struct srcmap_entry {
    uint32_t tag;
    uint64_t keys;                      /* its keys in the young part of the window */
    uint64_t evicted_age, evicted_size; /* its keys that left it, by reason */
    int64_t forgot_ms;                  /* the newest receivedAt among those (0: none yet) */
    int64_t newest_ms;                  /* srcmap_add_received's: the newest receivedAt added */
} srcmap_entry_t;

/* An empty map with `budget` keys per source (0: no size bound). NULL when out of memory.
 * Freed with srcmap_free(). */
srcmap_t *srcmap_new(uint64_t budget);
void srcmap_free(srcmap_t *m);

/* Sets every source's keys to 0 (for a recount); the evictions and forgot_ms stay. */
void srcmap_zero_keys(srcmap_t *m);

/* The entry of `tag`, added with nothing counted when new. NULL: out of memory. The pointer is
 * valid until the next srcmap_get of a new tag. */
srcmap_entry_t *srcmap_get(srcmap_t *m, uint32_t tag);

/* One more key of the source of `key`. -1: out of memory (nothing counted). */
int srcmap_add(srcmap_t *m, const uint8_t key[KEYHASH_LEN]);

/* srcmap_add, also keeping the newest receivedAt added (a generation's table, gen.c). */
int srcmap_add_received(srcmap_t *m, const uint8_t key[KEYHASH_LEN], int64_t received_ms);

/* A key of `key`'s source received at `received_ms` left the window (why: enum
 * window_verdict, WINDOW_AGE or WINDOW_SIZE). A key the map never counted is ignored. */
void srcmap_evicted(srcmap_t *m, const uint8_t key[KEYHASH_LEN], int64_t received_ms, int why);

/* The keys counted for `key`'s source (0: none). */
uint64_t srcmap_keys_of(const srcmap_t *m, const uint8_t key[KEYHASH_LEN]);

/* How many sources hold more keys than the budget. */
size_t srcmap_over(const srcmap_t *m);

/* The entries, in the order their sources were first seen: srcmap_count(m) of them, valid until
 * the next srcmap_get of a new tag. */
size_t srcmap_count(const srcmap_t *m);
const srcmap_entry_t *srcmap_entries(const srcmap_t *m);

#endif
