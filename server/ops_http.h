/* ops_http: a small operator HTTP server (/stats, /metrics, /healthz, /dashboard) for a role
 * that has no ingest server of its own: `ingestd worker`. */
#ifndef INGESTD_SERVER_OPS_HTTP_H
#define INGESTD_SERVER_OPS_HTTP_H

#include <stddef.h>

typedef struct ops_http ops_http_t;

/* One request, borrowed for the duration of a route callback. */
typedef struct ops_http_req ops_http_req_t;

/* The request's method, path (unescaped, without the query), Authorization header (NULL when
 * absent) and a query argument (NULL when absent). */
const char *ops_http_method(const ops_http_req_t *r);
const char *ops_http_path(const ops_http_req_t *r);
const char *ops_http_authorization(const ops_http_req_t *r);
const char *ops_http_query(const ops_http_req_t *r, const char *name);

/*
 * What the server answers with. Every callback runs on the connection's own thread (one per
 * connection), so a slow one holds up no other request; they must be thread-safe.
 *   stats_json: GET /stats, malloc'd JSON text (NULL: out of memory, answered 503).
 *   metrics:    GET /metrics, malloc'd Prometheus text (NULL: 503).
 *   unhealthy:  GET /healthz: NULL when healthy (200 {"status":"ok"}), else the reason of the
 *               503 (borrowed, static).
 *   route:      any other path, or NULL: returns its HTTP status and *json (malloc'd JSON body,
 *               NULL: 503 out of memory), or 0 when the path is not its (then 404).
 * /dashboard is serve's page (api/dashboard.h), which reads the /stats shape of either role.
 */
typedef struct {
    char *(*stats_json)(void *ctx);
    char *(*metrics)(void *ctx);
    const char *(*unhealthy)(void *ctx);
    unsigned (*route)(void *ctx, const ops_http_req_t *req, char **json);
    void *ctx;
    const char *not_found; /* the error sentence of a 404 */
} ops_http_handlers_t;

/*
 * Listens on `listen` ("HOST:PORT" or "[IPV6]:PORT", parsed as serve's --listen:
 * config_parse_hostport; port 0 picks one) and logs the address it got. `h` is copied.
 * Returns 0 and *out (stop with ops_http_stop), or -1 with the reason in err.
 */
int ops_http_start(const char *listen, const ops_http_handlers_t *h, ops_http_t **out, char *err,
                   size_t errlen);

/* Stops listening, waits for the requests in flight and frees. NULL is a no-op. */
void ops_http_stop(ops_http_t *s);

#endif
