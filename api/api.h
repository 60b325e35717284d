/* api: HTTP-free request handling: routing, auth, validation, normalisation, responses. */
#ifndef INGESTD_API_H
#define INGESTD_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/commit.h"

/* Limits of the contract (DESIGN.md). */
#define API_MAX_EVENT_BYTES   (32 * 1024)  /* one event, as serialised JSON */
#define API_MAX_REQUEST_BYTES (500 * 1024) /* one request body, after decompression */
#define API_MAX_BATCH_EVENTS  2500
#define API_MAX_MESSAGE_ID    256 /* bytes of a client messageId */
#define API_RETRY_AFTER_S     1   /* Retry-After on 503 */

typedef struct api api_t;

typedef struct api_write_key {
    const char *key;    /* the write key, as the SDK sends it */
    const char *source; /* source name stamped on its events ("default" if none given) */
} api_write_key_t;

typedef struct api_options {
    const api_write_key_t *keys; /* copied by api_new */
    size_t nkeys;
    commit_t *commit;  /* borrowed; must outlive the api */
    int64_t window_ms; /* configured window, reported in /stats */
    uint64_t max_keys; /* configured size bound, reported in /stats */
} api_options_t;

/* A request, transport-free. All pointers borrowed for the duration of api_handle(). */
typedef struct api_req {
    const char *method;        /* "GET", "POST", ... */
    const char *path;          /* without query string */
    const char *authorization; /* Authorization header or NULL */
    const char *content_type;  /* Content-Type header or NULL */
    const char *body;          /* decompressed body (may be NULL when body_len is 0) */
    size_t body_len;
    int64_t now_ms; /* receivedAt: when the request arrived (ms since epoch) */
} api_req_t;

/* A response. `body` is malloc'ed and owned by whoever holds the struct (free()). */
typedef struct api_resp {
    int status;               /* HTTP status */
    const char *content_type; /* static string */
    char *body;
    size_t body_len;
    int retry_after;   /* seconds for a Retry-After header; 0: none */
    const char *allow; /* static string for an Allow header (405); NULL: none */
} api_resp_t;

enum api_outcome {
    API_DONE = 0,     /* *resp is filled now */
    API_PENDING = 1,  /* done(resp, arg) will be called once, from another thread */
    API_CONTINUE = 2, /* api_check_headers: go on and read the body */
};

/*
 * Called once when a pending request is answered. `resp` is valid only
 * during the call; take its body (set resp->body = NULL) to keep it.
 */
typedef void (*api_done_fn)(api_resp_t *resp, void *arg);

/* *out is freed with api_free(). Returns 0 or -1 (allocation failed / bad options). */
int api_new(const api_options_t *opts, api_t **out);
void api_free(api_t *api);

/*
 * Early checks on method, path and Basic auth before any body is read, so
 * 404/405/401 cost nothing. Returns API_DONE with *resp filled, or
 * API_CONTINUE. Thread-safe.
 */
int api_check_headers(api_t *api, const api_req_t *req, api_resp_t *resp);

/*
 * Handles a complete request. Returns API_DONE (*resp filled) or API_PENDING
 * (events went to the group commit; `done` answers later). Thread-safe.
 */
int api_handle(api_t *api, const api_req_t *req, api_resp_t *resp, api_done_fn done, void *arg);

/* Fills *resp with `{"success":false,"error":msg}` and `status` (503/429 get Retry-After). */
void api_error(api_resp_t *resp, int status, const char *msg);

/* Counts a response by status for /stats and /metrics; the transport calls it once per response. */
void api_count_response(api_t *api, int status);

#endif
