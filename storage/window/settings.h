/* winsettings: the window settings a server ran with, kept in the data dir for the offline tools.
 */
#ifndef INGESTD_WINSETTINGS_H
#define INGESTD_WINSETTINGS_H

#include <stdint.h>

/*
 * DIR/WINDOW, a small text file, one "name value" a line:
 *   window_ms 86400000
 *   max_keys 100000000
 *   young_keys 1048576
 * `serve` writes it (durably, atomically) at every start whose settings differ from the
 * file's; `rebuild`, `check` and `lookup` read it, so they shape the window as the server
 * that owns the data dir does, not by their own defaults (docs/operations.md). Lines of
 * unknown names are passed over (a later release may add some).
 */

typedef struct winsettings {
    int64_t window_ms;   /* --window */
    uint64_t max_keys;   /* --max-keys (per source; 0: no size bound) */
    uint64_t young_keys; /* --young-keys */
} winsettings_t;

/*
 * Reads DIR/WINDOW into *out. Returns 0; 1 when there is none (*out untouched: a data dir no
 * server of this release started on); -1 with errno set on a read error, or EINVAL when the
 * file lacks one of the three settings or holds a malformed value.
 */
int winsettings_read(const char *data_dir, winsettings_t *out);

/*
 * Writes `s` to DIR/WINDOW (fsutil_write_atomic) unless the file holds exactly these values
 * already. Returns 0 (written or unchanged) or -1 with errno set.
 */
int winsettings_write(const char *data_dir, const winsettings_t *s);

#endif
