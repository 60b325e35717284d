/* check: verifies a data dir (`ingestd check`), also while a server runs on it. */
#ifndef INGESTD_TOOLS_CHECK_H
#define INGESTD_TOOLS_CHECK_H

#include <stdint.h>

#include "storage/tools/report.h"

typedef struct check_options {
    const char *data_dir;       /* borrowed for the call */
    tools_report_fn report;     /* may be NULL */
    tools_progress_fn progress; /* may be NULL */
    void *arg;                  /* passed to both */
} check_options_t;

typedef struct check_result {
    uint64_t segments, records, log_bytes;
    uint64_t first_offset, next_offset; /* extent of the log */
    uint64_t applied;                   /* LMDB's applied offset */
    uint64_t keys;                      /* keys in the window: LMDB's and the generations' */
    uint64_t problems;
} check_result_t;

/*
 * Verifies o->data_dir, also while a server runs on it (LMDB is read in one
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
 * The first 100 problems are reported one by one, then their number.
 * Fills *out (may be NULL; nothing to free) and returns TOOLS_OK, TOOLS_PROBLEMS or TOOLS_ERROR
 * (the reason reported).
 */
int check_run(const check_options_t *o, check_result_t *out);

#endif
