/* pending: the keys accepted since an LMDB checkpoint, in order, with a hash index. */
#ifndef INGESTD_PENDING_H
#define INGESTD_PENDING_H

#include <stddef.h>
#include <stdint.h>

#include "storage/window/keyhash.h"
#include "storage/window/store.h"

/*
 * The commit writer acknowledges a batch once the log is synced; its keys
 * reach LMDB later, on the checkpointer thread. Until that checkpoint is
 * visible to the writer's read snapshot, the keys live here: an append-only
 * array in sequence order (what the checkpointer writes, in that order) plus
 * an open-addressing index by key (what de-duplication asks first).
 *
 * Not thread-safe. The writer appends; once handed to the checkpointer a
 * generation is frozen, and both threads only read it until the writer clears
 * it. Sequence numbers of one generation are consecutive from its base.
 */

typedef struct pending pending_t;

/* An empty generation whose first item will get sequence `base`. NULL when out of memory.
 * Freed with pending_free(). */
pending_t *pending_new(uint64_t base);
void pending_free(pending_t *p);

/* Empties it for reuse (memory kept), the next item getting sequence `base`. */
void pending_reset(pending_t *p, uint64_t base);

/*
 * Appends an item with the next sequence (returned in *seq). A key already in
 * the generation is re-pointed at the new item (the newest wins). Returns 0,
 * or -1 when out of memory (nothing changed).
 */
int pending_add(pending_t *p, const uint8_t key[KEYHASH_LEN], int64_t received_ms, uint64_t offset,
                uint64_t *seq);

/* The newest item with `key`, or NULL. The pointer is valid until the next add or reset. */
const store_entry_t *pending_find(const pending_t *p, const uint8_t key[KEYHASH_LEN]);

/* The item with sequence `seq`, or NULL when it is not in this generation. */
const store_entry_t *pending_at_seq(const pending_t *p, uint64_t seq);

size_t pending_count(const pending_t *p);
uint64_t pending_base(const pending_t *p);
/* The sequence after the last item (base + count). */
uint64_t pending_end(const pending_t *p);
/* The items, in sequence order (pending_count of them). */
const store_entry_t *pending_items(const pending_t *p);

#endif
