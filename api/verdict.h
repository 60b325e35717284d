/* verdict: ?verbose=true on the ingest routes: one result per input event, in order. */
#ifndef INGESTD_API_VERDICT_H
#define INGESTD_API_VERDICT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "api/api.h"
#include "api/batch.h"

/* A rejected event's messageId as the client sent it (a string of at most API_MAX_MESSAGE_ID
 * bytes), or none (s NULL): the results say null then. */
typedef struct verdict_id {
    char *s; /* malloc'ed, NUL-terminated (may hold NULs: len counts) */
    size_t len;
} verdict_id_t;

/*
 * What a verbose answer needs beyond the batch and the commit's verdicts: the rejected events'
 * messageIds, copied while the parsed body lives (the body is dropped before the commit).
 * Zero-initialise it; release with verdict_clear. Owned by the request's pending state.
 */
typedef struct verdict {
    bool on;           /* ?verbose=true */
    bool detail;       /* log offsets and first copies too: the request bore the admin token */
    verdict_id_t *ids; /* [nrejected], parallel to batch_t.rejected */
    size_t nrejected;
} verdict_t;

/*
 * Reads the `verbose` query parameter: absent, "false" or "0": off; "true" or "1": on.
 * Returns 0 with v->on, or -1 for any other value, with *error the sentence of its 400 (static).
 */
int verdict_param(const api_req_t *req, verdict_t *v, const char **error);

/*
 * When v->on: copies the messageIds of b's rejected events out of `root` (the parsed body
 * batch_build read; single: the body is the event). Returns 0, or -1 when out of memory.
 */
int verdict_collect(verdict_t *v, const json_t *root, bool single, const batch_t *b);

/* Frees what verdict_collect copied and zeroes *v; NULL is a no-op. */
void verdict_clear(verdict_t *v);

/*
 * When v->on and *resp is a 200 whose body is a JSON object: appends
 * "results":[{"index","messageId","status",...}, ...], one entry per event of the request in
 * request order: b->events with their commit verdicts evs[i] (parallel to b->events), and
 * b->rejected. Log offsets ("offset") and a duplicate's first copy ("offset", "receivedAt" or
 * "firstCopy") only when v->detail: the offset measures every source's volume, and a first copy
 * tells a prober whether and when someone else sent an id, while write keys are public in
 * browsers. evs NULL (the edge role, which neither de-duplicates nor logs): every valid event
 * is "accepted" without an offset. Otherwise leaves *resp alone. Returns 0, or -1 when
 * out of memory (then *resp is a 503 and the previous body freed).
 */
int verdict_append(api_resp_t *resp, const verdict_t *v, const batch_t *b,
                   const commit_event_t *evs);

/*
 * Writes s[0..len) as a JSON string, quotes included, escaping '"', '\\' and control bytes
 * (at most 6 bytes per input byte + 2). Returns the end of what was written.
 */
char *verdict_put_json_str(char *p, const char *s, size_t len);

#endif
