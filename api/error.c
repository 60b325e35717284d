/* error: JSON responses, error bodies and the one mapping from commit status to HTTP status. */
#include "api/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char JSON_TYPE[] = "application/json";

/* Used when even the error body cannot be allocated: a static copy that is strdup'ed if possible.
 */
static void fallback(api_resp_t *resp, int status)
{
    static const char body[] = "{\"success\":false,\"error\":\"internal error\"}";
    memset(resp, 0, sizeof(*resp));
    resp->status = status;
    resp->content_type = JSON_TYPE;
    resp->body = strdup(body);
    resp->body_len = resp->body ? strlen(body) : 0;
}

int api_resp_json(api_resp_t *resp, int status, json_t *json)
{
    /* 9 significant digits: enough for the few reals in responses (fsync ms, averages) without
     * the 17-digit noise of an exact double. */
    size_t flags = JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9);
    char *s = json ? json_dumps(json, flags) : NULL;
    json_decref(json);
    if (!s) {
        fallback(resp, 500);
        return -1;
    }
    memset(resp, 0, sizeof(*resp));
    resp->status = status;
    resp->content_type = JSON_TYPE;
    resp->body = s;
    resp->body_len = strlen(s);
    return 0;
}

void api_error(api_resp_t *resp, int status, const char *msg)
{
    json_t *j = json_pack("{s:b, s:s}", "success", 0, "error", msg ? msg : "error");
    if (api_resp_json(resp, status, j) != 0)
        return;
    /* Clients retry 429 and 503, and Retry-After tells them when. */
    if (status == 429 || status == 503)
        resp->retry_after = API_RETRY_AFTER_S;
}

int api_resp_add_request_id(api_resp_t *resp, const char *id)
{
    json_t *j;
    char *s;

    if (resp->status < 400 || resp->body == NULL || id == NULL || resp->content_type == NULL ||
        strcmp(resp->content_type, JSON_TYPE) != 0)
        return 0;
    /* Error bodies are a few dozen bytes and rare on the hot path: parsing them again is cheap
     * and keeps every error, wherever in the api it was made, in one shape. */
    j = json_loadb(resp->body, resp->body_len, 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        return 0;
    }
    if (json_object_set_new(j, "requestId", json_string(id)) != 0) {
        json_decref(j);
        return -1;
    }
    s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(j);
    if (s == NULL)
        return -1;
    free(resp->body);
    resp->body = s;
    resp->body_len = strlen(s);
    return 0;
}

int api_commit_http(int commit_status, const char **error)
{
    switch (commit_status) {
    case COMMIT_UNAVAILABLE:
        *error = "storage unavailable, retry later";
        return 503;
    case COMMIT_CLOSED:
        *error = "shutting down, retry later";
        return 503;
    case COMMIT_NOMEM:
        *error = "out of memory, retry later";
        return 503;
    default:
        *error = "internal error";
        return 500;
    }
}

void api_error_commit(api_resp_t *resp, int commit_status)
{
    const char *error = NULL;
    int status = api_commit_http(commit_status, &error);
    api_error(resp, status, error);
}

void api_resp_header(api_resp_t *resp, const char *name, const char *fmt, ...)
{
    va_list ap;

    if (resp->nheaders >= API_MAX_HEADERS)
        return;
    api_header_t *h = &resp->headers[resp->nheaders++];
    h->name = name;
    va_start(ap, fmt);
    vsnprintf(h->value, sizeof(h->value), fmt, ap);
    va_end(ap);
}
