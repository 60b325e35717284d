/* worker_lost: raw records deleted before the worker read them: what was lost, counts, stops. */
#ifndef INGESTD_WORKER_LOST_H
#define INGESTD_WORKER_LOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/prom.h"

/*
 * The worker's consumer runs with auto.offset.reset=error, so a position
 * that is out of range (retention or DeleteRecords removed records it has
 * not read, or the log is shorter than the position) is reported instead of
 * silently moved to the log start (docs/scale-out.md, "Records deleted
 * before they were processed"). This module decides what such a position
 * means and keeps the tallies; the worker does the Kafka calls.
 *
 * Threading: the consuming thread records (worker_lost_found, _skipped,
 * _unassigned); the operator server's threads read (_stopped*, _json*,
 * _prom) at any time. An internal mutex orders them.
 */

/* What an out-of-range position means (worker_lost_classify). Empty ranges have from == to. */
typedef struct lost_range {
    int64_t position;                 /* the offset the worker wanted to read */
    int64_t lo, hi;                   /* the partition's watermarks when it was found */
    int64_t keys_from, keys_to;       /* under repair, below the group's committed offset: */
                                      /* produced already, their keys cannot be re-read */
    int64_t records_from, records_to; /* never processed: their events are lost */
    int64_t resume_at;                /* where reading can go on: lo, or hi past the end */
    bool past_end;                    /* position > hi: the log was truncated or recreated */
} lost_range_t;

/*
 * The meaning of `position` being out of range when the partition's log
 * holds [lo, hi) and records below `repair_until` (the group's committed
 * offset while a repair runs, else -1) were produced already. A position
 * below lo loses [position, lo): the part below repair_until is keys only,
 * the rest records. A position past hi loses nothing that was read, but the
 * offsets [hi, position) are gone: reported as a stop, no range of records.
 */
void worker_lost_classify(int64_t position, int64_t repair_until, int64_t lo, int64_t hi,
                          lost_range_t *r);

/* True when r must stop the partition (unless the operator chose to continue). */
bool worker_lost_stops(const lost_range_t *r);

typedef struct worker_lost worker_lost_t;

/* NULL when out of memory; freed with worker_lost_free (NULL: no-op). `stop_policy`: true for
 * --on-records-lost stop (shown in /stats). */
worker_lost_t *worker_lost_new(bool stop_policy);
void worker_lost_free(worker_lost_t *l);

/*
 * One out-of-range position of `partition` found, as classified in r: counts
 * it and the offsets of its keys range; with `stop`, the partition is stopped
 * here from now (at wall time now_ms) until _skipped or _unassigned. 0, or -1
 * when out of memory (nothing recorded).
 */
int worker_lost_found(worker_lost_t *l, int32_t partition, const lost_range_t *r, bool stop,
                      int64_t now_ms);

/* The worker moved past offsets [from, to) of `partition` (continue, or the operator's resume):
 * counts them as lost records and ends a stop of the partition. */
void worker_lost_skipped(worker_lost_t *l, int32_t partition, int64_t from, int64_t to);

/* The partition left this worker (revoked): it is no longer stopped here; its counts stay. */
void worker_lost_unassigned(worker_lost_t *l, int32_t partition);

/* Whether `partition` is stopped here; its range in *r when it is (r may be NULL). */
bool worker_lost_stopped(worker_lost_t *l, int32_t partition, lost_range_t *r);

/* How many partitions are stopped here. */
size_t worker_lost_stopped_count(worker_lost_t *l);

/* `"stopped":null` or `"stopped":{"reason","from","to","since"}` for partition's /stats entry. */
void worker_lost_json_partition(worker_lost_t *l, int32_t partition, FILE *f);

/* /stats `"records_lost":{...}`: the policy, out_of_range, offsets (records and keys) and the
 * stopped partitions. */
void worker_lost_json(worker_lost_t *l, FILE *f);

/* The ingestd_worker_out_of_range_total, ingestd_worker_offsets_lost_total{partition,kind} and
 * ingestd_worker_partitions_stopped series. */
void worker_lost_prom(worker_lost_t *l, prom_t *p);

#endif
