/*
 * tools/internal.h: the private header of the operator tools (storage/tools/check.c, rebuild.c,
 * backup.c): the pieces they share, one section per file. Nothing outside storage/tools/
 * includes it; check.h, rebuild.h and backup.h are the contracts.
 */
#ifndef INGESTD_TOOLS_INTERNAL_H
#define INGESTD_TOOLS_INTERNAL_H

#include <stdint.h>

#include "storage/datadir.h"
#include "storage/log/log.h"
#include "storage/tools/report.h"

#define TOOLS_PATH_LEN 4096

/* ---- report.c: lines and progress to the caller's callbacks ---- */

/* One formatted line to `report` (nothing when NULL); a longer line than 1 KiB is cut. */
void tools_say(tools_report_fn report, void *arg, int problem, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Progress to `fn` every few thousand items (and at done == total), when anyone listens. */
void tools_step(tools_progress_fn fn, void *arg, const char *what, const char *unit, uint64_t done,
                uint64_t total);

/* ---- view.c: the data dir, read-only ---- */

/* dir/name into out (TOOLS_PATH_LEN bytes); an over-long path is cut, and then simply not found. */
void tools_path(char *out, const char *dir, const char *name);

/* A data-dir entry inside `dir` (storage/datadir.h) into out, as tools_path. */
void tools_entry(char *out, const char *dir, datadir_entry_t e);

/*
 * Reads the log record at `offset` of `logdir` into *rec, its key tagged as the replay tags it
 * (storage/window/retag.h: with `secret` before `tagged_from`). *r is the caller's reader, kept
 * between calls (NULL at first; opened, moved or reopened here; the caller closes it with
 * log_reader_close). Returns LOG_OK or the reader's error.
 */
int tools_read_record(const char *logdir, const uint8_t *secret, uint64_t tagged_from,
                      uint64_t offset, log_record_t *rec, log_reader_t **r);

#endif
