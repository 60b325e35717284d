/* http_answer: queues an api_resp_t on a request's connection (headers, counts, the log line), and
 * the transport's own error answers. */
#include "server/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/logging.h"

_Static_assert(API_MAX_REQUEST_BYTES == 512000, "TOO_LARGE_MSG names the limit");

/*
 * Queues `resp` (taking its body) on r's connection and counts it. Must run
 * in the access handler. Returns what the handler should return.
 */
enum MHD_Result http_answer(struct req *r, api_resp_t *resp)
{
    http_t *h = r->h;
    struct MHD_Response *mr;
    enum MHD_Result ret;
    char retry[16];

    if (!http_conn_disarm(r->c)) {
        /* The watchdog answered 408 and closed the connection already. */
        free(resp->body);
        resp->body = NULL;
        return MHD_NO;
    }
    /* Out of memory here leaves the error without its requestId; the header still has it. */
    (void)api_resp_add_request_id(resp, r->rid);
    if (resp->body != NULL) {
        /* MUST_FREE: MHD free()s the body once sent, which is how api_resp_t says it was made. */
        mr = MHD_create_response_from_buffer(resp->body_len, resp->body, MHD_RESPMEM_MUST_FREE);
        if (mr == NULL) {
            free(resp->body);
            resp->body = NULL;
            return MHD_NO;
        }
        resp->body = NULL;
    } else {
        mr = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (mr == NULL)
            return MHD_NO;
    }
    MHD_add_response_header(mr, MHD_HTTP_HEADER_CONTENT_TYPE,
                            resp->content_type != NULL ? resp->content_type : "application/json");
    if (resp->retry_after > 0) {
        snprintf(retry, sizeof retry, "%d", resp->retry_after);
        MHD_add_response_header(mr, MHD_HTTP_HEADER_RETRY_AFTER, retry);
    }
    if (resp->allow != NULL)
        MHD_add_response_header(mr, MHD_HTTP_HEADER_ALLOW, resp->allow);
    MHD_add_response_header(mr, "X-Request-Id", r->rid);
    if (r->must_close) {
        /* RFC 9112 6.1: whatever followed a request framed two ways is not read as another. */
        MHD_add_response_header(mr, MHD_HTTP_HEADER_CONNECTION, "close");
    }
    for (size_t i = 0; i < resp->nheaders && i < API_MAX_HEADERS; i++)
        MHD_add_response_header(mr, resp->headers[i].name, resp->headers[i].value);
    if (atomic_load(&h->quiesced) && !r->must_close) {
        /* Shutting down: tell keep-alive clients to take their next request elsewhere. */
        MHD_add_response_header(mr, MHD_HTTP_HEADER_CONNECTION, "close");
    }
    ret = MHD_queue_response(r->conn, (unsigned)resp->status, mr);
    MHD_destroy_response(mr);
    if (ret == MHD_YES) {
        api_count_response(h->api, resp->status);
        api_count_duration(h->api, r->path, resp->status, clk_mono_ns() - r->start_ns);
        r->phase = PH_ANSWERED;
        /* The path, never the body: event data stays out of the logs. */
        LOGGING_DEBUG("http: %s %.200s -> %d (from %s)", r->method, r->path, resp->status,
                      r->client_ip[0] ? r->client_ip : "?");
    }
    return ret;
}

/* An answer the transport made itself: the api adds its per-route headers (CORS on the ingest
 * routes, so a page's script can read why it was refused), then it is queued. */
void http_answer_headers(struct req *r, api_resp_t *resp)
{
    api_req_t areq;

    memset(&areq, 0, sizeof areq);
    areq.path = r->path;
    areq.origin = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");
    api_transport_headers(r->h->api, &areq, resp);
}

static enum MHD_Result answer_transport(struct req *r, api_resp_t *resp)
{
    http_answer_headers(r, resp);
    return http_answer(r, resp);
}

enum MHD_Result http_answer_error(struct req *r, int status, const char *msg)
{
    api_resp_t resp;

    memset(&resp, 0, sizeof resp);
    api_error(&resp, status, msg);
    return answer_transport(r, &resp);
}

enum MHD_Result http_answer_too_large(struct req *r)
{
    return http_answer_error(r, 400, TOO_LARGE_MSG);
}
