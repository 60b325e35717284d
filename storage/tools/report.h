/* report: what the operator tools (check.h, rebuild.h, backup.h) share with their caller: the
 * report and progress callbacks and the status codes. */
#ifndef INGESTD_TOOLS_REPORT_H
#define INGESTD_TOOLS_REPORT_H

#include <stdint.h>

/*
 * Every tool reports progress and findings through `report` (one line per
 * call, no trailing newline; may be NULL), so the CLI decides where they go.
 * `problem` is 1 for a finding that makes the data dir inconsistent, 0 for
 * information and progress. The line is the tool's: copy it to keep it.
 */
typedef void (*tools_report_fn)(void *arg, int problem, const char *line);

/*
 * Progress of a long step (may be NULL): `what` names the step ("checking the log", ...),
 * `done` of `total` `unit`s so far (total 0: unknown; done may pass an estimated total). Called
 * every few thousand items with the same `arg` as `report`; the callee throttles its output.
 */
typedef void (*tools_progress_fn)(void *arg, const char *what, const char *unit, uint64_t done,
                                  uint64_t total);

/* What check_run, rebuild_run and backup_run return; each header says which of these. */
enum tools_status {
    TOOLS_OK = 0,
    TOOLS_PROBLEMS = 1, /* check: the data dir has problems (see the report) */
    TOOLS_ERROR = -1,   /* the tool could not run (I/O error, bad arguments, ...) */
    TOOLS_BUSY = -2,    /* rebuild: a server holds the data dir lock */
    TOOLS_SHRINK = -3,  /* rebuild: refused, it would shrink the window (allow_shrink not set) */
};

#endif
