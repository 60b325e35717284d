/* router: route table, method checks (404/405 with Allow) and dispatch. */
#include "api/internal.h"

#include <stdlib.h>
#include <string.h>

#include "api/adminhost.h"
#include "api/cors.h"
#include "api/lookup.h"
#include "api/reqhist.h"

enum kind { INGEST, STATS, METRICS, HEALTHZ, LOG, DASHBOARD, EVENTS };

struct route {
    const char *path;
    enum kind kind;
    const char *type; /* event type for single-event routes, NULL for batch/import */
};

/* analytics.js (analytics-next) posts to its apiHost + "/" + the type's first letter, and to
 * "/b" when batching, as Segment's API accepts: hence /v1/b, /v1/t, ... */
static const struct route ROUTES[] = {
    {"/v1/batch", INGEST, NULL},    {"/v1/import", INGEST, NULL},
    {"/v1/track", INGEST, "track"}, {"/v1/identify", INGEST, "identify"},
    {"/v1/page", INGEST, "page"},   {"/v1/screen", INGEST, "screen"},
    {"/v1/group", INGEST, "group"}, {"/v1/alias", INGEST, "alias"},
    {"/stats", STATS, NULL},        {"/metrics", METRICS, NULL},
    {"/healthz", HEALTHZ, NULL},    {"/v1/log", LOG, NULL},
    {"/v1/b", INGEST, NULL},        {"/v1/t", INGEST, "track"},
    {"/v1/i", INGEST, "identify"},  {"/v1/p", INGEST, "page"},
    {"/v1/s", INGEST, "screen"},    {"/v1/g", INGEST, "group"},
    {"/v1/a", INGEST, "alias"},     {"/dashboard", DASHBOARD, NULL},
    {"/v1/events/", EVENTS, NULL}, /* API_LOOKUP_PREFIX: the messageId follows (find_route) */
};
#define NROUTES (sizeof(ROUTES) / sizeof(ROUTES[0]))

size_t api_route_paths(const char **paths, size_t cap)
{
    for (size_t i = 0; i < NROUTES && i < cap; i++)
        paths[i] = ROUTES[i].path;
    return NROUTES;
}

void api_count_response(api_t *api, int status)
{
    if (!api)
        return;
    /* Out-of-range statuses are folded into slot 0 rather than dropped, so totals still add up. */
    size_t slot = status > 0 && status < API_STATUS_SLOTS ? (size_t)status : 0;
    atomic_fetch_add_explicit(&api->by_status[slot], 1, memory_order_relaxed);
}

/* Finds the route of `path`, ignoring a query string and one trailing slash. */
static const struct route *find_route(const char *path)
{
    if (!path)
        return NULL;
    size_t len = strcspn(path, "?");
    if (len > 1 && path[len - 1] == '/')
        len--;
    for (size_t i = 0; i < NROUTES; i++)
        if (strlen(ROUTES[i].path) == len && memcmp(ROUTES[i].path, path, len) == 0)
            return &ROUTES[i];
    /* GET /v1/events/{messageId}: the whole rest of the path is the id, slashes and all (an
     * empty one gets its 400 there). */
    if (strncmp(path, API_LOOKUP_PREFIX, strlen(API_LOOKUP_PREFIX)) == 0)
        return &ROUTES[NROUTES - 1];
    return NULL;
}

void api_count_duration(api_t *api, const char *path, int status, int64_t ns)
{
    if (!api)
        return;
    const struct route *r = find_route(path);
    reqhist_observe(api->reqhist, r ? (int)(r - ROUTES) : -1, status, (double)ns / 1e9);
}

/* Adds the CORS headers of an answer on an ingest route (cors.h) to *resp. */
static void add_cors(const api_t *api, const api_req_t *req, api_resp_t *resp)
{
    cors_headers_t h;
    cors_actual(api->cors, req->origin, &h);
    cors_apply(&h, resp);
}

/* An ingest request answered later by the group commit, whose answer gets CORS headers then. */
struct cors_pending {
    api_done_fn done;
    void *arg;
    cors_headers_t h; /* computed while the request (and its Origin) was at hand */
};

static void cors_done(api_resp_t *resp, void *arg)
{
    struct cors_pending *p = arg;
    cors_apply(&p->h, resp);
    p->done(resp, p->arg);
    free(p);
}

/* The ingest routes: an OPTIONS preflight is answered here, everything else by api_ingest. */
static int ingest(api_t *api, const api_req_t *req, const char *type, api_resp_t *resp,
                  api_done_fn done, void *arg)
{
    cors_headers_t h;

    if (strcmp(req->method, "OPTIONS") == 0) {
        cors_preflight(api->cors, req->origin, req->acr_headers, resp);
        return API_DONE;
    }
    if (cors_refuse(api->cors, req->origin, resp))
        return API_DONE;
    cors_actual(api->cors, req->origin, &h);
    if (h.n == 0)
        return api_ingest(api, req, type, resp, done, arg);
    struct cors_pending *p = malloc(sizeof(*p));
    if (!p) {
        api_error(resp, 503, "out of memory, retry later");
        cors_apply(&h, resp);
        return API_DONE;
    }
    p->done = done;
    p->arg = arg;
    p->h = h;
    int rc = api_ingest(api, req, type, resp, cors_done, p);
    if (rc == API_PENDING)
        return rc; /* p is cors_done's now, and may be gone already */
    cors_apply(&h, resp);
    free(p);
    return rc;
}

/* 404 / 405 for the request line; NULL route means *resp was filled. */
static const struct route *route_or_error(const api_t *api, const api_req_t *req, api_resp_t *resp)
{
    const struct route *r = find_route(req->path);
    const char *m = req->method ? req->method : "";
    /* Without an admin token the log route does not exist, so nothing tells a scanner it could;
     * nor without a local log (the edge role). */
    if (!r || ((r->kind == LOG || r->kind == EVENTS) && (!api->admin_token || !api->commit))) {
        api_error(resp, 404, "not found");
        return NULL;
    }
    if (r->kind == LOG || r->kind == EVENTS) {
        if (strcmp(m, "GET") != 0) {
            api_error(resp, 405, "method not allowed");
            resp->allow = "GET";
            return NULL;
        }
        return r;
    }
    if (r->kind == INGEST && strcmp(m, "POST") != 0 && strcmp(m, "OPTIONS") != 0) {
        api_error(resp, 405, "method not allowed");
        resp->allow = "POST, OPTIONS"; /* OPTIONS: the CORS preflight */
        add_cors(api, req, resp);
        return NULL;
    }
    if (r->kind != INGEST && strcmp(m, "GET") != 0 && strcmp(m, "HEAD") != 0) {
        api_error(resp, 405, "method not allowed");
        resp->allow = "GET, HEAD";
        return NULL;
    }
    return r;
}

/*
 * The operator routes without an admin token answer only a Host that no DNS-rebinding page can
 * send (api/adminhost.h). True: refused, *resp holds the 403.
 */
static bool host_refused(const api_t *api, const struct route *r, const api_req_t *req,
                         api_resp_t *resp)
{
    if (api->admin_token || (r->kind != STATS && r->kind != METRICS && r->kind != DASHBOARD))
        return false;
    if (adminhost_allowed(api->admin_hosts, req->host))
        return false;
    api_error(resp, 403,
              "this Host may not read the operator routes: use localhost or an IP address, list "
              "the name in --admin-hosts, or set --admin-token");
    return true;
}

int api_check_headers(api_t *api, const api_req_t *req, api_resp_t *resp)
{
    const struct route *r = route_or_error(api, req, resp);
    if (!r)
        return API_DONE;
    if (host_refused(api, r, req, resp))
        return API_DONE;
    /* With an admin token the operator routes need it too; /healthz stays open for probes. */
    if (r->kind == LOG || r->kind == EVENTS ||
        ((r->kind == STATS || r->kind == METRICS) && api->admin_token))
        return api_admin_auth(api, req->authorization, resp) == 0 ? API_CONTINUE : API_DONE;
    if (r->kind != INGEST)
        return API_CONTINUE;
    if (strcmp(req->method, "OPTIONS") == 0) /* a preflight has no body to wait for */
        return ingest(api, req, r->type, resp, NULL, NULL);
    /* Before the body is read: a page of another site gets nothing in, preflight or not. */
    if (cors_refuse(api->cors, req->origin, resp))
        return API_DONE;
    if (!api_content_type_ok(req->content_type)) {
        api_error(resp, 400, "unsupported Content-Type");
        add_cors(api, req, resp);
        return API_DONE;
    }
    /* A key in the header is checked now; without one the body's writeKey decides later. */
    if (api_header_auth(api, req->authorization, resp) != 0) {
        add_cors(api, req, resp);
        return API_DONE;
    }
    return API_CONTINUE;
}

int api_handle(api_t *api, const api_req_t *req, api_resp_t *resp, api_done_fn done, void *arg)
{
    const struct route *r = route_or_error(api, req, resp);
    if (!r || host_refused(api, r, req, resp))
        return API_DONE;
    switch (r->kind) {
    case INGEST:
        return ingest(api, req, r->type, resp, done, arg);
    case STATS:
        if (api->admin_token && api_admin_auth(api, req->authorization, resp) != 0)
            return API_DONE;
        if (api->has_sink)
            api_stats_sink(api, resp);
        else
            api_stats(api, req->now_ms, resp);
        return API_DONE;
    case METRICS:
        if (api->admin_token && api_admin_auth(api, req->authorization, resp) != 0)
            return API_DONE;
        if (api->has_sink)
            api_metrics_sink(api, resp);
        else
            api_metrics(api, req->now_ms, resp);
        return API_DONE;
    case LOG:
        return api_log_read(api, req, resp, done, arg);
    case EVENTS:
        return api_lookup_route(api, req, resp);
    case DASHBOARD:
        api_dashboard(resp); /* open even with an admin token: the page holds no data */
        return API_DONE;
    case HEALTHZ:
        api_healthz(api, resp);
        return API_DONE;
    }
    api_error(resp, 500, "internal error");
    return API_DONE;
}

void api_transport_headers(api_t *api, const api_req_t *req, api_resp_t *resp)
{
    const struct route *r = find_route(req->path);
    if (r && r->kind == INGEST)
        add_cors(api, req, resp);
}
