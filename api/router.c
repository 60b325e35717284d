/* router: route table, method checks (404/405 with Allow) and dispatch. */
#include "api/internal.h"

#include <stdlib.h>
#include <string.h>

#include "api/adminhost.h"
#include "api/cors.h"
#include "api/lookup.h"
#include "api/reqhist.h"

/* analytics.js (analytics-next) posts to its apiHost + "/" + the type's first letter, and to
 * "/b" when batching, as Segment's API accepts: hence /v1/b, /v1/t, ... The order is free:
 * api_route_find matches exact paths first and prefix routes by their flag, never by position. */
static const api_route_t ROUTES[] = {
    {"/v1/batch", API_ROUTE_INGEST, NULL, false},
    {"/v1/import", API_ROUTE_INGEST, NULL, false},
    {"/v1/track", API_ROUTE_INGEST, "track", false},
    {"/v1/identify", API_ROUTE_INGEST, "identify", false},
    {"/v1/page", API_ROUTE_INGEST, "page", false},
    {"/v1/screen", API_ROUTE_INGEST, "screen", false},
    {"/v1/group", API_ROUTE_INGEST, "group", false},
    {"/v1/alias", API_ROUTE_INGEST, "alias", false},
    {"/stats", API_ROUTE_STATS, NULL, false},
    {"/metrics", API_ROUTE_METRICS, NULL, false},
    {"/healthz", API_ROUTE_HEALTHZ, NULL, false},
    {"/v1/log", API_ROUTE_LOG, NULL, false},
    {"/v1/b", API_ROUTE_INGEST, NULL, false},
    {"/v1/t", API_ROUTE_INGEST, "track", false},
    {"/v1/i", API_ROUTE_INGEST, "identify", false},
    {"/v1/p", API_ROUTE_INGEST, "page", false},
    {"/v1/s", API_ROUTE_INGEST, "screen", false},
    {"/v1/g", API_ROUTE_INGEST, "group", false},
    {"/v1/a", API_ROUTE_INGEST, "alias", false},
    {"/dashboard", API_ROUTE_DASHBOARD, NULL, false},
    {API_LOOKUP_PREFIX, API_ROUTE_EVENTS, NULL, true}, /* the messageId is the rest of the path */
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

const api_route_t *api_route_find(const api_route_t *routes, size_t n, const char *path)
{
    if (!path)
        return NULL;
    size_t len = strcspn(path, "?");
    if (len > 1 && path[len - 1] == '/')
        len--;
    for (size_t i = 0; i < n; i++)
        if (!routes[i].prefix && strlen(routes[i].path) == len &&
            memcmp(routes[i].path, path, len) == 0)
            return &routes[i];
    /* A prefix route: the whole rest of the path is its argument, slashes and all (an empty one
     * gets its 400 from the handler). */
    for (size_t i = 0; i < n; i++)
        if (routes[i].prefix && strncmp(path, routes[i].path, strlen(routes[i].path)) == 0)
            return &routes[i];
    return NULL;
}

/* The route of `path` in ROUTES, ignoring a query string and one trailing slash. */
static const api_route_t *find_route(const char *path)
{
    return api_route_find(ROUTES, NROUTES, path);
}

void api_count_duration(api_t *api, const char *path, int status, int64_t ns)
{
    if (!api)
        return;
    const api_route_t *r = find_route(path);
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
static const api_route_t *route_or_error(const api_t *api, const api_req_t *req, api_resp_t *resp)
{
    const api_route_t *r = find_route(req->path);
    const char *m = req->method ? req->method : "";
    /* Without an admin token the log route does not exist, so nothing tells a scanner it could;
     * nor without a local log (the edge role). */
    if (!r || ((r->kind == API_ROUTE_LOG || r->kind == API_ROUTE_EVENTS) &&
               (!api->admin_token || !api->commit))) {
        api_error(resp, 404, "not found");
        return NULL;
    }
    if (r->kind == API_ROUTE_LOG || r->kind == API_ROUTE_EVENTS) {
        if (strcmp(m, "GET") != 0) {
            api_error(resp, 405, "method not allowed");
            resp->allow = "GET";
            return NULL;
        }
        return r;
    }
    if (r->kind == API_ROUTE_INGEST && strcmp(m, "POST") != 0 && strcmp(m, "OPTIONS") != 0) {
        api_error(resp, 405, "method not allowed");
        resp->allow = "POST, OPTIONS"; /* OPTIONS: the CORS preflight */
        add_cors(api, req, resp);
        return NULL;
    }
    if (r->kind != API_ROUTE_INGEST && strcmp(m, "GET") != 0 && strcmp(m, "HEAD") != 0) {
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
static bool host_refused(const api_t *api, const api_route_t *r, const api_req_t *req,
                         api_resp_t *resp)
{
    if (api->admin_token || (r->kind != API_ROUTE_STATS && r->kind != API_ROUTE_METRICS &&
                             r->kind != API_ROUTE_DASHBOARD))
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
    const api_route_t *r = route_or_error(api, req, resp);
    if (!r)
        return API_DONE;
    if (host_refused(api, r, req, resp))
        return API_DONE;
    /* With an admin token the operator routes need it too; /healthz stays open for probes. */
    if (r->kind == API_ROUTE_LOG || r->kind == API_ROUTE_EVENTS ||
        ((r->kind == API_ROUTE_STATS || r->kind == API_ROUTE_METRICS) && api->admin_token))
        return api_admin_auth(api, req->authorization, resp) == 0 ? API_CONTINUE : API_DONE;
    if (r->kind != API_ROUTE_INGEST)
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
    const api_route_t *r = route_or_error(api, req, resp);
    if (!r || host_refused(api, r, req, resp))
        return API_DONE;
    switch (r->kind) {
    case API_ROUTE_INGEST:
        return ingest(api, req, r->type, resp, done, arg);
    case API_ROUTE_STATS:
        if (api->admin_token && api_admin_auth(api, req->authorization, resp) != 0)
            return API_DONE;
        if (api->has_sink)
            api_stats_sink(api, resp);
        else
            api_stats(api, req->now_ms, resp);
        return API_DONE;
    case API_ROUTE_METRICS:
        if (api->admin_token && api_admin_auth(api, req->authorization, resp) != 0)
            return API_DONE;
        if (api->has_sink)
            api_metrics_sink(api, resp);
        else
            api_metrics(api, req->now_ms, resp);
        return API_DONE;
    case API_ROUTE_LOG:
        return api_log_read(api, req, resp, done, arg);
    case API_ROUTE_EVENTS:
        return api_lookup_route(api, req, resp);
    case API_ROUTE_DASHBOARD:
        api_dashboard(resp); /* open even with an admin token: the page holds no data */
        return API_DONE;
    case API_ROUTE_HEALTHZ:
        api_healthz(api, resp);
        return API_DONE;
    }
    api_error(resp, 500, "internal error");
    return API_DONE;
}

void api_transport_headers(api_t *api, const api_req_t *req, api_resp_t *resp)
{
    const api_route_t *r = find_route(req->path);
    if (r && r->kind == API_ROUTE_INGEST)
        add_cors(api, req, resp);
}
