/* admin: offline and online operator tools over a data dir: check, rebuild, backup. */
#ifndef INGESTD_ADMIN_H
#define INGESTD_ADMIN_H

#include <stdbool.h>
#include <stdint.h>

#include "storage/window/settings.h"

/*
 * Every tool reports progress and findings through `report` (one line per
 * call, no trailing newline; may be NULL), so the CLI decides where they go.
 * `problem` is 1 for a finding that makes the data dir inconsistent, 0 for
 * information and progress.
 */
typedef void (*admin_report_fn)(void *arg, int problem, const char *line);

/*
 * Progress of a long step (may be NULL): `what` names the step ("checking the log", ...),
 * `done` of `total` `unit`s so far (total 0: unknown; done may pass an estimated total). Called
 * every few thousand items with the same `arg` as `report`; the callee throttles its output.
 */
typedef void (*admin_progress_fn)(void *arg, const char *what, const char *unit, uint64_t done,
                                  uint64_t total);

enum admin_status {
    ADMIN_OK = 0,
    ADMIN_PROBLEMS = 1, /* check: the data dir has problems (see the report) */
    ADMIN_ERROR = -1,   /* the tool could not run (I/O error, bad arguments, ...) */
    ADMIN_BUSY = -2,    /* rebuild: a server holds the data dir lock */
    ADMIN_SHRINK = -3,  /* rebuild: refused, it would shrink the window (allow_shrink not set) */
};

typedef struct admin_check_result {
    uint64_t segments, records, log_bytes;
    uint64_t first_offset, next_offset; /* extent of the log */
    uint64_t applied;                   /* LMDB's applied offset */
    uint64_t keys;                      /* keys in the window: LMDB's and the generations' */
    uint64_t problems;
} admin_check_result_t;

/*
 * Verifies a data dir, also while a server runs on it (LMDB is read in one
 * read-only snapshot, the log up to that snapshot's applied offset):
 * every segment header, every record's length, offset sequence and CRC;
 * LMDB's applied offset within the log; the sequence index covering one run
 * of offsets up to the applied one (keys carried by per-source budgets keep
 * older offsets below it; DIR/WINDOW says whether budgets are on) with each
 * entry's key and receivedAt equal to its log record's; `keys` and `seq`
 * agreeing one to one; the secret file matching LMDB's; each sealed
 * generation file whole, after the one before it and within the store's
 * sequence numbering, each of its keys equal to its log record's. A key
 * whose record retention deleted is in the window, not a problem. A leftover
 * DIR/store.rebuild-* of a rebuild cut short is reported as information.
 * Returns ADMIN_OK, ADMIN_PROBLEMS or ADMIN_ERROR.
 */
int admin_check(const char *data_dir, admin_report_fn report, admin_progress_fn progress, void *arg,
                admin_check_result_t *out);

typedef struct admin_rebuild_options {
    winsettings_t window; /* the window's settings: the server's (DIR/WINDOW) unless overridden */
    bool allow_shrink;    /* rebuild even when the window then holds fewer keys than before */
} admin_rebuild_options_t;

/*
 * Rebuilds DIR/store's young LMDB store from the retained log, keeping the data dir's secret
 * and the sealed generations (DIR/store/gens), and applying the window's settings as it goes.
 * Requires the server to be stopped (ADMIN_BUSY otherwise).
 * When the old young store can be read and every generation is whole, the generations are
 * kept as they are; the new young store gets the keys the old one carried for per-source
 * budgets (read back from their log records) and the log's records after the generations'
 * newest. Otherwise the whole retained log is replayed, generations included.
 * Refuses with ADMIN_SHRINK, changing nothing, when the window would lose keys: keys of the old
 * young store whose records log retention deleted, or, when the old window cannot be read
 * whole, any record retention deleted. `o->allow_shrink` rebuilds anyway, and the report says
 * how many keys the window had and has.
 * The new store is built in a sibling, DIR/store.rebuild-<unix time>-<pid>
 * (storage/window/storeswap.h), made wholly durable (LMDB flushed, its directory and gens/
 * fsynced), then swapped with DIR/store in one renameat2(RENAME_EXCHANGE) and the data dir fsynced;
 * the old store, then under the sibling's name, is removed. So at every instant, power loss
 * included, DIR/store is the whole old store or the whole new one; a sibling a crash leaves is
 * never the store (the next rebuild, or `ingestd serve`'s start, removes it; admin_check mentions
 * it). Leftover siblings are removed first. A rebuild that fails before the swap removes its
 * sibling and leaves DIR/store untouched; so does a file system that cannot exchange two names
 * (EINVAL, ENOSYS: reported, with what to do). Returns ADMIN_OK or an error.
 */
int admin_rebuild(const char *data_dir, const admin_rebuild_options_t *o, admin_report_fn report,
                  admin_progress_fn progress, void *arg);

/*
 * Writes a consistent copy of a data dir to `to_dir` (created; must not
 * exist or be empty), also while a server runs: a compacted copy of LMDB
 * first, with the generation files sealed below its bound (from the set as
 * it was before and after the copy), then the log up to that copy's applied
 * offset (later records are cut off), and the secret; everything fsynced. Starting a server on
 * `to_dir` gives the state of the moment the LMDB copy was taken.
 */
int admin_backup(const char *data_dir, const char *to_dir, admin_report_fn report,
                 admin_progress_fn progress, void *arg);

#endif
