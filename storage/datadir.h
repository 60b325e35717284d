/*
 * datadir: the layout of a data dir, the one place that names its files and folders.
 *
 *   DIR/LOCK                 flock'ed by the one process that writes DIR (serve, rebuild, ...)
 *   DIR/secret               the 16-byte hash secret (storage/secret.h reads and writes it)
 *   DIR/WINDOW               the window settings the server last ran with (window/settings.h)
 *   DIR/TAGGED_FROM          the log offset from which keys carry their source tag (retag.h)
 *   DIR/log/                 the event log, the source of truth: *.seg segments (log/log.h)
 *   DIR/log/probe.tmp        written and removed at start to prove the log's file system works
 *   DIR/rejected/            the quarantine log of refused input (log/quarantine.h)
 *   DIR/groups/NAME          consumer group offsets, one file per group (log/groups.h)
 *   DIR/store/               the young LMDB store (window/store.h)
 *   DIR/store/data.mdb       LMDB's own name for its environment's file
 *   DIR/store/gens/          sealed generations, *.gen (window/gen.h)
 *   DIR/store/ACKED          the acknowledged end of the log, for readers
 *   DIR/store/UNSYNCED       the boot id while LMDB has unsynced commits (docs/durability.md)
 *   DIR/store.rebuild-*      a rebuild's sibling store before it takes DIR/store's place
 *                            (window/storeswap.h)
 *   DIR/worker-id            a cluster worker's id, kept across restarts (cluster/worker.h)
 *   DIR/partitions/TOPIC-P/  a cluster worker's store dir for raw partition P of TOPIC
 *
 * The entries under store/ are in any store dir: DIR/store, a rebuild's sibling, a cluster
 * worker's partition dir. The names of the files inside log/, rejected/ and gens/ belong to
 * the modules that write them. Nothing here touches the file system.
 */
#ifndef INGESTD_DATADIR_H
#define INGESTD_DATADIR_H

#include <stddef.h>
#include <stdint.h>

typedef enum datadir_entry {
    DATADIR_LOCK,
    DATADIR_SECRET,
    DATADIR_WINDOW,
    DATADIR_TAGGED_FROM,
    DATADIR_LOG,
    DATADIR_LOG_PROBE, /* in log/ */
    DATADIR_REJECTED,
    DATADIR_GROUPS,
    DATADIR_STORE,
    DATADIR_LMDB_DATA, /* in a store dir */
    DATADIR_GENS,      /* in a store dir */
    DATADIR_ACKED,     /* in a store dir */
    DATADIR_UNSYNCED,  /* in a store dir */
    DATADIR_WORKER_ID,
    DATADIR_PARTITIONS,
    DATADIR_ENTRIES
} datadir_entry_t;

/* The prefix of a rebuild's sibling store in the data dir; "<unix time>-<pid>" follows. */
#define DATADIR_REBUILD_PREFIX "store.rebuild-"

/* The entry's name inside the folder that holds it ("gens"): static, never NULL for a valid entry.
 */
const char *datadir_name(datadir_entry_t e);

/*
 * The entry's path from the data dir: "DIR/store/gens" for DATADIR_GENS. Malloc'ed, the caller
 * frees it; NULL when out of memory (errno ENOMEM) or `e` is not an entry (EINVAL).
 */
char *datadir_path(const char *data_dir, datadir_entry_t e);

/*
 * The entry inside `dir`, the folder that holds it (the data dir for the top-level entries, a
 * store dir for those of a store): "dir/gens". Malloc'ed, the caller frees it; NULL as for
 * datadir_path.
 */
char *datadir_in(const char *dir, datadir_entry_t e);

/*
 * datadir_in into a caller's buffer of `cap` bytes. Returns 0, or -1 with errno set:
 * ENAMETOOLONG (then `out` holds an empty string), EINVAL (not an entry).
 */
int datadir_put(char *out, size_t cap, const char *dir, datadir_entry_t e);

/*
 * A cluster worker's store dir for one raw partition, DIR/partitions/TOPIC-P, into `out` (`cap`
 * bytes). Returns 0, or -1 with errno ENAMETOOLONG (then `out` holds an empty string).
 */
int datadir_partition(char *out, size_t cap, const char *data_dir, const char *topic,
                      int32_t partition);

#endif
