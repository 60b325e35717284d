/* progress: one self-rewriting progress line (percent, rate, ETA) for long commands, on a terminal
 * only. */
#ifndef INGESTD_PROGRESS_H
#define INGESTD_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

typedef struct progress progress_t;

/*
 * A progress line on `f` when `f` is a terminal (isatty), else NULL: every function below
 * takes NULL as a no-op, so callers write the same code for a pipe, where progress would only
 * be noise in a file or a script's output. Free with progress_free. One thread at a time.
 */
progress_t *progress_new(FILE *f);

/*
 * Redraws the line as `what: PCT% DONE/TOTAL UNIT, RATE UNIT/s, ETA M:SS  EXTRA` (TOTAL 0:
 * unknown, no percent or ETA), at most five times a second (and always when done reaches
 * total), so callers may call it per item. The rate is the phase's average since its first
 * update (a new `what` is a new phase), so the first line of a phase has none. `unit` and `extra`
 * may be NULL. Strings are copied as needed; none is kept.
 */
void progress_update(progress_t *p, const char *what, uint64_t done, uint64_t total,
                     const char *unit, const char *extra);

/* Erases the line (if one is shown), before other output goes to the same terminal. */
void progress_clear(progress_t *p);

/* Erases the line and frees; NULL is a no-op. */
void progress_free(progress_t *p);

/*
 * Formats the line's text (no \r, no erase) into buf, for tests and for callers that print
 * it themselves. `rate` is units per second; 0 or less: not known yet (no rate, no ETA).
 */
void progress_format(char *buf, size_t len, const char *what, uint64_t done, uint64_t total,
                     double rate, const char *unit, const char *extra);

#endif
