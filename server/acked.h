/* acked: how far a data dir's event log is acknowledged, for readers in other processes. */
#ifndef INGESTD_ACKED_H
#define INGESTD_ACKED_H

#include <stdint.h>

/*
 * The acknowledged end of DATA's event log into *end (the offset after the
 * last record a client was told is durable): DATA/store/ACKED, which the
 * server rewrites after every group commit (no LMDB reader slot needed);
 * without it LMDB's applied offset; without a store (never started, or being
 * rebuilt) every valid record of the log. Works while the server runs.
 * Returns 0, or -1 with the reason printed to stderr after "WHO: ".
 */
int acked_end(const char *data, const char *who, uint64_t *end);

#endif
