/* qshare: the quarantine's bytes per source, so each source keeps its share of the bound. */
#ifndef INGESTD_QSHARE_H
#define INGESTD_QSHARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * A table of the bytes each source holds in the quarantine log (storage/log/quarantine.h). A source
 * is named by the bytes of its "source" field as the record writes it (the JSON string with its
 * quotes, or null for records of older versions), so the table needs no JSON parser and a
 * record read back lands where it was counted. A source whose bytes drop to 0 leaves the
 * table: it holds only the sources with records retained, at most one entry per write key's
 * source (and one for null). Not thread-safe: the quarantine's writer thread owns it.
 */
typedef struct qshare qshare_t;

/* A new, empty table (NULL when out of memory); freed with qshare_free (NULL: no-op). */
qshare_t *qshare_new(void);
void qshare_free(qshare_t *t);

/*
 * The source of a quarantine record's payload: *src borrowed from data (valid as long as it),
 * *n bytes. A payload without the field (not written by quarantine_add) names the empty source.
 */
void qshare_source(const char *data, size_t len, const char **src, size_t *n);

/* Adds `bytes` to the source of the payload data[0..len). Returns 0, or -1 when out of memory
 * (the table then undercounts that source until its records are read again). */
int qshare_add(qshare_t *t, const char *data, size_t len, uint64_t bytes);

/* Takes `bytes` from the source of data[0..len) (not below 0). */
void qshare_sub(qshare_t *t, const char *data, size_t len, uint64_t bytes);

/*
 * Whether the source of data[0..len) holds more than its share of max_bytes: max_bytes divided
 * by the number of sources with records. When the log holds more than max_bytes, at least one
 * source is over its share (the largest one always is).
 */
bool qshare_over(const qshare_t *t, const char *data, size_t len, uint64_t max_bytes);

/* Number of sources with records. */
size_t qshare_sources(const qshare_t *t);

#endif
