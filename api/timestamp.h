/* timestamp: ISO-8601 parsing to epoch milliseconds and formatting back, locale- and TZ-free. */
#ifndef INGESTD_API_TIMESTAMP_H
#define INGESTD_API_TIMESTAMP_H

#include <stddef.h>
#include <stdint.h>

/* "YYYY-MM-DDTHH:MM:SS.mmmZ" plus the NUL. */
#define TIMESTAMP_BUF_LEN 25

/*
 * Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM|+HHMM|-HHMM)` (the T
 * and Z may be lowercase; the fraction has any number of digits and is
 * truncated to milliseconds) into milliseconds since the Unix epoch, UTC.
 * Every field is range-checked (day against the month, leap years); a leap
 * second (:60) counts as the first second of the next minute. The whole of
 * s[0..len) must match. Returns 0, or -1 (nothing written) on anything else.
 * Pure function; thread-safe.
 */
int timestamp_parse(const char *s, size_t len, int64_t *ms);

/*
 * Writes `ms` (epoch milliseconds) as "YYYY-MM-DDTHH:MM:SS.mmmZ" and a NUL
 * into out. Returns 0, or -1 when the year falls outside 0000..9999.
 */
int timestamp_format(int64_t ms, char out[TIMESTAMP_BUF_LEN]);

#endif
