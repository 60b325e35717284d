/* lookup: GET /v1/events/{messageId} and `ingestd lookup`: one messageId's verdict, as JSON. */
#ifndef INGESTD_API_LOOKUP_H
#define INGESTD_API_LOOKUP_H

#include <stddef.h>
#include <stdint.h>

#include "storage/commit/commit.h"

#define API_LOOKUP_PREFIX     "/v1/events/" /* the route; the messageId is the rest of the path */
#define API_LOOKUP_SOURCE_MAX 256           /* bytes of a `source` (a write key's source is less) */

/*
 * Whether `id` (id_len bytes, already percent-decoded) can be a messageId:
 * NULL when it can, else a static sentence for the 400 (empty, over
 * API_MAX_MESSAGE_ID bytes, a NUL byte, not UTF-8). Pure; thread-safe.
 */
const char *api_lookup_check_id(const char *id, size_t id_len);

/*
 * The answer to one lookup, as the route sends it and the CLI prints it:
 *   found: 200 {"messageId","source","status":"seen","offset","receivedAt","event"}, the event
 *          read from the log in `log_dir` at res->offset (records below `limit` only), or
 *          "event": null and a "reason" when the log no longer holds it;
 *   not found: 404 {"status":"unseen","messageId","source","window_start"} (null when the
 *          window is empty).
 * Returns a malloc'd compact JSON object (the caller frees) and its status in *status, or
 * NULL when out of memory. Thread-safe.
 */
char *api_lookup_body(const char *id, size_t id_len, const char *source, const commit_lookup_t *res,
                      const char *log_dir, uint64_t limit, int *status);

/* A `{"success":false,"error":msg,"messageId":id}` body (malloc'd, the caller frees; NULL
 * without memory), for the CLI's lines that fail. */
char *api_lookup_error_body(const char *id, size_t id_len, const char *msg);

#endif
