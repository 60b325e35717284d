/* reqhist: request durations by route and status class, for ingestd_request_duration_seconds. */
#ifndef INGESTD_API_REQHIST_H
#define INGESTD_API_REQHIST_H

#include <stddef.h>

#include "common/prom.h"

typedef struct reqhist reqhist_t;

/*
 * One histogram (common/histogram.h, HISTOGRAM_SECONDS) per route id 0..nroutes-1, one for
 * paths that are no route ("other"), each by status class 1xx..5xx. `paths[i]` names route i
 * in the `route` label: the array is copied, its strings are borrowed and must outlive the
 * reqhist (the router's static paths). Returns 0 and
 * *out (free with reqhist_free), or -1 when out of memory.
 */
int reqhist_new(const char *const *paths, size_t nroutes, reqhist_t **out);

/* NULL is a no-op. */
void reqhist_free(reqhist_t *rh);

/*
 * Counts one answered request: `route` a route id, or -1 for a path that is no route;
 * `status` its HTTP status (outside 100..599: not counted); `seconds` from its arrival to its
 * answer. Lock-free, thread-safe.
 */
void reqhist_observe(reqhist_t *rh, int route, int status, double seconds);

/* Writes the head and every (route, status class) seen so far to `p`, whose prefix must be
 * "ingestd_". Thread-safe. */
void reqhist_write(const reqhist_t *rh, prom_t *p);

#endif
