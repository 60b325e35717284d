/* lookup: where a key is in a data dir, read from another process while a server runs on it. */
#ifndef INGESTD_LOOKUP_H
#define INGESTD_LOOKUP_H

#include <stddef.h>
#include <stdint.h>

#include "storage/commit/commit.h"
#include "storage/window/keyhash.h"

/*
 * One consistent read-only view of DIR, for `ingestd lookup`: the young LMDB
 * store's snapshot first, then the sealed generations (a seal publishes its
 * file before it empties the young store, so a key leaving one is always in
 * the other), then the log records past the snapshot's applied offset up to
 * the acknowledged end (DIR/store/ACKED): the keys the server acknowledged
 * but its checkpointer has not yet written into LMDB. Nothing on disk
 * changes. Unlike commit_lookup, evictions the server made in memory since its
 * last checkpoint (a few seconds) are not seen: such a key still answers
 * found. The generations are cut by the per-source budget the server recorded
 * (storage/window/settings.h), so a key its budget cut is unseen here too. Not
 * thread-safe; one thread uses a lookup_t.
 */
typedef struct lookup lookup_t;

/* Opens the view; *out freed with lookup_close(). 0, or -1 with a reason in errbuf. */
int lookup_open(const char *data_dir, lookup_t **out, char *errbuf, size_t errlen);
void lookup_close(lookup_t *lk);

/* The data dir's hash secret (DIR/secret), for keyhash(); valid until lookup_close(). */
const uint8_t *lookup_secret(const lookup_t *lk);

/* The log directory (DIR/log); valid until lookup_close(). */
const char *lookup_log_dir(const lookup_t *lk);

/*
 * Where `key` is (commit_lookup_t as commit_lookup fills it). Returns 0, -1 on
 * a read error, or 1 when it is not found but cannot be called unseen: log
 * retention deleted records the server had not checkpointed into LMDB yet
 * (only the server's own view, GET /v1/events, still has their keys).
 */
int lookup_find(lookup_t *lk, const uint8_t key[KEYHASH_LEN], commit_lookup_t *out);

#endif
