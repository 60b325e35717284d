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
    /*
     * For tests and fault injection; NULL in production. Called once, with hook_arg, after the
     * first look at the source's generations (the set held open) and before LMDB is copied, while
     * backup_run holds no LMDB environment of the source open (the hook may open it, and must
     * close it again). What the hook seals, merges or drops there is what a server does between
     * the two looks at the generations that backup_run compares (a seal whose LMDB transaction
     * the copy holds is seen only by the second one).
     */
    void (*between_views)(void *hook_arg);
    void *hook_arg;
} backup_options_t;

/*
 * Writes a consistent copy of o->data_dir to o->to_dir, also while a server runs: a compacted
 * copy of LMDB first, with the generation files sealed below its bound (from the set as it was
 * before and after the copy; when the two leave a range below the bound in neither, or do not
 * reach it, "the window changed too much during the copy (a gap); run backup again" is reported
 * and TOOLS_ERROR returned), then the log cut at what was acknowledged by then (the later of
 * the copy's applied offset and the server's DIR/store/ACKED, read after the copy; later records
 * are cut off), ACKED for the copy, TAGGED_FROM and the secret; everything fsynced. Starting a
 * server on `to_dir` replays the log past the copy's applied offset, so it knows every event
 * the source acknowledged before the backup began, and none it had not acknowledged.
 * Returns TOOLS_OK or TOOLS_ERROR, the reason reported. A source without a secret (or no source
 * at all) is refused before `to_dir` is made; after a later failure what was written stays, for
 * the operator to look at or remove. Nothing to free.
 */
int backup_run(const backup_options_t *o);

#endif
