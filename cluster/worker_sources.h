/* worker_sources: the Kafka worker's windows by source, for its /stats and /metrics. */
#ifndef INGESTD_WORKER_SOURCES_H
#define INGESTD_WORKER_SOURCES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/prom.h"
#include "storage/window/stats.h"

/*
 * --max-keys is a budget per source in each partition (docs/window.md,
 * "Per-source budgets"). This tallies, over every partition a worker holds,
 * each source's keys, its keys evicted key by key, and the newest receivedAt
 * it forgot. It names each source from the records it has seen, by the tag
 * its keys carry in each partition (a partition's secret is its own, so the
 * tags differ), and adds a source up by name.
 *
 * Threading: the consuming thread names sources and builds a tally
 * (worker_sources_begin, _add, _publish); the operator server's thread
 * reads the last published tally (worker_sources_json, _prom) at any time.
 */
typedef struct worker_sources worker_sources_t;

/* NULL when out of memory; freed with worker_sources_free (NULL: no-op). */
worker_sources_t *worker_sources_new(void);
void worker_sources_free(worker_sources_t *s);

/* The name of the source whose keys carry `tag`; the first seen is kept. Consuming thread. */
void worker_sources_name(worker_sources_t *s, uint32_t tag, const char *name, size_t len);

/* A new tally, each partition's sources (window_engine_tally_sources) added to it by name,
 * then made the one the readers see. Consuming thread. A source the tally has no room for is
 * left out of it. */
void worker_sources_begin(worker_sources_t *s);
void worker_sources_add(worker_sources_t *s, const window_source_t *src, size_t n);
void worker_sources_publish(worker_sources_t *s);

/* The published tally: a JSON array of {source, keys, evicted_age, evicted_size,
 * effective_window_seconds (null: it forgot none)} into f, and the
 * ingestd_dedupe_source_* series into p (prom_sources, as the single-node server's). Any
 * thread. */
void worker_sources_json(worker_sources_t *s, FILE *f, int64_t now_ms);
void worker_sources_prom(worker_sources_t *s, prom_t *p, int64_t now_ms);

#endif
