/* backup: a consistent copy of a data dir (`ingestd backup`), also while a server runs. */
#ifndef INGESTD_TOOLS_BACKUP_H
#define INGESTD_TOOLS_BACKUP_H

#include "storage/tools/report.h"

typedef struct backup_options {
    const char *data_dir;       /* borrowed for the call */
    const char *to_dir;         /* borrowed; created; must not exist or be empty */
    tools_report_fn report;     /* may be NULL */
    tools_progress_fn progress; /* may be NULL */
    void *arg;                  /* passed to both */
} backup_options_t;

/*
 * Writes a consistent copy of o->data_dir to o->to_dir, also while a server runs: a compacted
 * copy of LMDB first, with the generation files sealed below its bound (from the set as it was
 * before and after the copy), then the log up to that copy's applied offset (later records are
 * cut off), and the secret; everything fsynced. Starting a server on `to_dir` gives the state of
 * the moment the LMDB copy was taken.
 * Returns TOOLS_OK or TOOLS_ERROR (the reason reported; what was written stays, for the operator
 * to look at or remove). Nothing to free.
 */
int backup_run(const backup_options_t *o);

#endif
