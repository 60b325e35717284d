/* rebuild: a data dir's young LMDB store rebuilt from its retained log (`ingestd rebuild`). */
#ifndef INGESTD_TOOLS_REBUILD_H
#define INGESTD_TOOLS_REBUILD_H

#include <stdbool.h>

#include "storage/tools/report.h"
#include "storage/window/settings.h"

typedef struct rebuild_options {
    const char *data_dir;   /* borrowed for the call */
    winsettings_t window;   /* the window's settings: the server's (DIR/WINDOW) unless overridden */
    bool allow_shrink;      /* rebuild even when the window then holds fewer keys than before */
    tools_report_fn report; /* may be NULL */
    tools_progress_fn progress; /* may be NULL */
    void *arg;                  /* passed to both */
} rebuild_options_t;

/*
 * Rebuilds DIR/store's young LMDB store from the retained log, keeping the data dir's secret
 * and the sealed generations (DIR/store/gens), and applying the window's settings as it goes.
 * Requires the server to be stopped (TOOLS_BUSY otherwise).
 * When the old young store can be read and every generation is whole, none missing
 * (genset_view_missing), the generations are kept as they are; the new young store gets the
 * keys the old one carried for per-source budgets (read back from their log records) and the
 * log's records after the generations' newest. Otherwise the whole retained log is replayed,
 * generations included.
 * Refuses with TOOLS_SHRINK, changing nothing, when the window would lose keys: keys of the old
 * young store whose records log retention deleted, or, when the old window cannot be read
 * whole, any record retention deleted. `o->allow_shrink` rebuilds anyway, and the report says
 * how many keys the window had and has.
 * The new store is built in a sibling, DIR/store.rebuild-<unix time>-<pid>
 * (storage/window/storeswap.h), made wholly durable (LMDB flushed, its directory and gens/
 * fsynced), then swapped with DIR/store in one renameat2(RENAME_EXCHANGE) and the data dir fsynced;
 * the old store, then under the sibling's name, is removed. So at every instant, power loss
 * included, DIR/store is the whole old store or the whole new one; a sibling a crash leaves is
 * never the store (the next rebuild, or `ingestd serve`'s start, removes it; check_run mentions
 * it). Leftover siblings are removed first. A rebuild that fails before the swap removes its
 * sibling and leaves DIR/store untouched; so does a file system that cannot exchange two names
 * (EINVAL, ENOSYS: reported, with what to do).
 * Returns TOOLS_OK, TOOLS_BUSY, TOOLS_SHRINK or TOOLS_ERROR (the reason reported). Nothing to
 * free.
 */
int rebuild_run(const rebuild_options_t *o);

#endif
