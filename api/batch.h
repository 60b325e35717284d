/* batch: parse, validate and normalise a body into log-ready events and per-event rejections. */
#ifndef INGESTD_API_BATCH_H
#define INGESTD_API_BATCH_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "api/jsonparse.h"
#include "storage/window/keyhash.h"

#define BATCH_UUID_LEN 36 /* "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx" */
#define BATCH_ERR_LEN  160

enum batch_status {
    BATCH_OK = 0,
    BATCH_BAD_REQUEST = -1, /* the whole request is malformed: answer 400 with err->text */
    BATCH_NOMEM = -2,
};

/* Writes a fresh messageId (BATCH_UUID_LEN chars and a NUL) into out. Must be thread-safe. */
typedef void (*batch_uuid_fn)(char out[BATCH_UUID_LEN + 1], void *arg);

/* The default: a random lowercase UUID v4 from libuuid. Thread-safe. */
void batch_uuid_v4(char out[BATCH_UUID_LEN + 1], void *arg);

/* The range a logged `timestamp` is kept in: from 2000-01-01T00:00:00Z to one day past
 * receivedAt (batch_build says what happens outside it). */
#define BATCH_TIMESTAMP_MIN_MS   946684800000LL
#define BATCH_TIMESTAMP_AHEAD_MS (24LL * 3600 * 1000)

typedef struct batch_options {
    const char *single_type; /* NULL for /v1/batch and /v1/import; else the route's event type */
    const char *source;      /* the write key's source, stamped on every event */
    const uint8_t *secret;   /* KEYHASH_SECRET_LEN bytes for the dedupe key; NULL: no key is
                                computed (left zero), as for the edge role, whose workers
                                de-duplicate downstream */
    int64_t now_ms;          /* receivedAt */
    /* The client clock a request header carries (RudderStack's JS SDK sends `SentAt`, an
     * ISO-8601 time), used as sentAt for the timestamp correction of events with none in the
     * body; NULL: none. One that does not parse is ignored (it is only a hint). */
    const char *sent_at_header;
    batch_uuid_fn uuid; /* NULL: batch_uuid_v4 */
    void *uuid_arg;
    size_t size_hint;      /* the body's length, to size the events' buffer once; 0: unknown */
    const char *client_ip; /* context.ip for events without one (event and batch context win);
                              NULL: none is added */
    /* batch_parse_spans' spans for root: its verbatim arrays and objects are copied as they
     * came instead of written member by member (the same bytes, fewer instructions); NULL:
     * every one is written. */
    const jsonparse_spans_t *spans;
} batch_options_t;

typedef struct batch_event {
    char *data; /* normalised compact JSON, no newline, followed by a NUL (not counted in len);
                 * points into the batch's arena, valid until batch_clear */
    size_t len;
    uint8_t key[KEYHASH_LEN]; /* keyhash(secret, source, messageId) */
    size_t index;             /* position in the request's batch array (0 for single routes) */
    /* What the Kafka edge routes by (cluster/partition.h): the messageId as logged (the string's
     * bytes, NUL-terminated, in the arena after data) and the client's `timestamp` as sent, in
     * ms since the epoch (INT64_MAX when the event has none). */
    const char *message_id;
    size_t message_id_len;
    int64_t timestamp_ms;
} batch_event_t;

typedef struct batch_reject {
    size_t index;      /* position in the request's batch array */
    const char *error; /* static string: a short lowercase sentence */
} batch_reject_t;

/* The outcome of one request; zero-initialise it, release it with batch_clear(). */
typedef struct batch {
    char *arena;           /* one block holding every event's data, back to back */
    batch_event_t *events; /* valid events, in request order */
    size_t nevents;
    batch_reject_t *rejected; /* rejected events, in request order */
    size_t nrejected;
} batch_t;

/* Why a whole request failed; first error kept. */
typedef struct batch_error {
    char text[BATCH_ERR_LEN];
} batch_error_t;

/*
 * Parses body[0..len) as one JSON value (no trailing garbage) that must be an
 * object. Lone surrogate escapes and bytes that are not UTF-8 read as U+FFFD,
 * \u0000 as a NUL in a string value and as U+FFFD in a key (jsonparse_repair).
 * Returns BATCH_OK with *root (caller owns, json_decref), BATCH_BAD_REQUEST
 * with err->text, or BATCH_NOMEM.
 */
int batch_parse(const char *body, size_t len, json_t **root, batch_error_t *err);

/* batch_parse, and *spans for batch_options_t.spans (caller frees with jsonparse_spans_free;
 * NULL when there are none, e.g. when json_loadb decided). They point into body: keep body and
 * *root alive and unchanged while they are used. arena NULL: *root is an ordinary tree; else
 * *arena is set when the tree is in one (jsonparse_tree: free it with jsonparse_arena_free,
 * never json_decref it) and NULL when *root is an ordinary tree (or there is none). */
int batch_parse_spans(const char *body, size_t len, json_t **root, jsonparse_spans_t **spans,
                      jsonparse_arena_t **arena, batch_error_t *err);

/*
 * The top-level "writeKey" of a parsed body (batch routes: the batch
 * object; single routes: the event) when it is a string, else NULL.
 * The pointer is borrowed from root (valid while root lives).
 */
const char *batch_write_key(const json_t *root, size_t *len);

/*
 * Validates and normalises every event of `root` (docs/design.md, "The
 * interface contract", and README "HTTP API": types, ids, messageId
 * assignment, receivedAt, source, sentAt, timestamp correction,
 * context/integrations merge, writeKey stripped, 32 KB cap). The corrected
 * timestamp is receivedAt - (sentAt - timestamp); when that falls outside
 * BATCH_TIMESTAMP_MIN_MS..now_ms + BATCH_TIMESTAMP_AHEAD_MS, the client's
 * timestamp is logged instead if it is inside, else receivedAt; the client's
 * value always stays in originalTimestamp. Leaves `root`
 * as it is: the events are written from it directly into out->arena.
 * Per-event problems land in out->rejected; whole-request problems (batch
 * not an array, empty, more than API_MAX_BATCH_EVENTS, bad batch-level
 * sentAt/context/integrations) return BATCH_BAD_REQUEST with err->text and
 * an empty *out. BATCH_NOMEM leaves *out empty. Thread-safe for distinct roots.
 */
int batch_build(json_t *root, const batch_options_t *opts, batch_t *out, batch_error_t *err);

/* Frees everything batch_build put in *b and zeroes it; NULL is a no-op. */
void batch_clear(batch_t *b);

#endif
