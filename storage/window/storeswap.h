/*
 * storeswap: where `ingestd rebuild` builds the new store (a sibling of DIR/store) and how it
 * takes DIR/store's place: one atomic exchange of the two names, so that at every instant,
 * power loss included, DIR/store is either the whole old store or the whole new one.
 */
#ifndef INGESTD_STORESWAP_H
#define INGESTD_STORESWAP_H

#include <stddef.h>
#include <stdint.h>

/* DIR/store.rebuild-<unix time>-<pid> (DATADIR_REBUILD_PREFIX, storage/datadir.h) into `out` (`cap`
 * bytes). 0, or -1 (ENAMETOOLONG). */
int storeswap_sibling(const char *data_dir, char *out, size_t cap);

/*
 * Counts the DIR/store.rebuild-* a rebuild left behind (cut short by a crash, or failed):
 * never DIR/store, so nothing of the window. With `remove` each is removed as well and the
 * data dir then fsynced. Returns the count (with `remove`: of those removed), or -1 with errno
 * set (listing the data dir, or removing one: the count of those removed before is lost).
 * A missing data dir has none.
 */
int64_t storeswap_leftovers(const char *data_dir, int remove);

/*
 * Makes the sibling store's own names durable: fsyncs `sibling`/gens (when there) and
 * `sibling`. Its files must be durable already (LMDB flushed, generation files synced).
 * 0, or -1 with errno set.
 */
int storeswap_sync_sibling(const char *sibling);

/*
 * Puts the sibling in DIR/store's place: renameat2(RENAME_EXCHANGE) of the two names (or, when
 * there is no DIR/store, a plain rename: the caller holds DIR/LOCK), then fsyncs the data dir. On
 * success `sibling` names the old store (nothing when there was none). Returns 0, or -1 with errno
 * set and nothing changed: EINVAL or ENOSYS when the file system (or kernel) cannot exchange two
 * names atomically; the fsync's errno when that failed after the exchange (DIR/store may then
 * be either store after a power loss, both whole).
 * `*exchanged` (may be NULL) says whether the names were swapped.
 */
int storeswap_exchange(const char *data_dir, const char *sibling, int *exchanged);

#endif
