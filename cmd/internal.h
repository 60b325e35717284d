/*
 * cmd/internal.h: the private header of the subcommands (the .c files of cmd/): what more than one
 * of them uses, one section per file. Nothing outside cmd/ includes it; cmd.h is the contract.
 */
#ifndef INGESTD_CMD_INTERNAL_H
#define INGESTD_CMD_INTERNAL_H

#include <stdint.h>

#include "server/progress.h"

/* ---- acked.c: how far a data dir's event log is acknowledged (log groups, seed) ---- */

/*
 * The acknowledged end of DATA's event log into *end (the offset after the
 * last record a client was told is durable): DATA/store/ACKED, which the
 * server rewrites after every group commit (no LMDB reader slot needed);
 * without it LMDB's applied offset; without a store (never started, or being
 * rebuilt) every valid record of the log. Works while the server runs.
 * Returns 0, or -1 with the reason printed to stderr after "WHO: ".
 */
int acked_end(const char *data, const char *who, uint64_t *end);

/* ---- tool.c: what check, rebuild and backup share (storage/tools/report.h's callbacks) ---- */

/* A report line to stdout ("PROBLEM: " before a finding), flushed; `arg` is the progress line
 * (or NULL), which the line replaces. */
void cmd_tool_report(void *arg, int problem, const char *line);

/* A tool's progress onto the terminal's progress line `arg` (server/progress.h; NULL: none). */
void cmd_tool_progress(void *arg, const char *what, const char *unit, uint64_t done,
                       uint64_t total);

/*
 * Before a tool runs on `data`: it must be a directory (a typo in --data must not look like an
 * empty, consistent data dir, or make rebuild create one; else 1, after the reason on stderr
 * and "NAME: FAILED: ..." on stdout); SIGPIPE is ignored (a reader that goes away must not kill
 * a rebuild or backup halfway). Returns 0 with *p the progress line (NULL when stdout is no
 * terminal; the caller frees it with progress_free), or 1.
 */
int cmd_tool_start(const char *name, const char *data, progress_t **p);

#endif
