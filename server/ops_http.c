/* ops_http: the worker's operator HTTP server on libmicrohttpd (see ops_http.h). */
#include "server/ops_http.h"

#include <microhttpd.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "api/dashboard.h"
#include "common/errbuf.h"
#include "server/config.h"
#include "server/logging.h"

struct ops_http {
    struct MHD_Daemon *d;
    ops_http_handlers_t h;
};

struct ops_http_req {
    struct MHD_Connection *conn;
    const char *method, *path;
};

static const char JSON[] = "application/json";

const char *ops_http_method(const ops_http_req_t *r)
{
    return r->method;
}

const char *ops_http_path(const ops_http_req_t *r)
{
    return r->path;
}

const char *ops_http_authorization(const ops_http_req_t *r)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
}

const char *ops_http_query(const ops_http_req_t *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

/* Queues `body` (freed by MHD when must_free) with its status and type. */
static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *type,
                             char *body, bool must_free)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), body, must_free ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (r == NULL) {
        if (must_free)
            free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    if (status == MHD_HTTP_SERVICE_UNAVAILABLE)
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result no_memory(struct MHD_Connection *conn)
{
    return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, JSON,
                 (char *)"{\"success\":false,\"error\":\"out of memory\"}", false);
}

/* {"success":false,"error":msg}, the sentence JSON-escaped. */
static enum MHD_Result reply_error(struct MHD_Connection *conn, unsigned status, const char *msg)
{
    size_t cap = strlen(msg) * 6 + 32;
    char *body = malloc(cap), *p = body;
    if (body == NULL)
        return no_memory(conn);
    p += sprintf(p, "{\"success\":false,\"error\":\"");
    for (const char *s = msg; *s; s++) {
        if (*s == '"' || *s == '\\')
            *p++ = '\\';
        if ((unsigned char)*s < 0x20)
            p += sprintf(p, "\\u%04x", (unsigned)(unsigned char)*s);
        else
            *p++ = *s;
    }
    strcpy(p, "\"}");
    return reply(conn, status, JSON, body, true);
}

/* /stats, /metrics, /healthz, /dashboard; any other path is the route callback's or a 404. */
static enum MHD_Result answer(const struct ops_http *s, struct MHD_Connection *conn,
                              const char *url, const char *method)
{
    const ops_http_handlers_t *h = &s->h;
    bool ops = strcmp(url, "/stats") == 0 || strcmp(url, "/metrics") == 0 ||
               strcmp(url, "/healthz") == 0 || strcmp(url, "/dashboard") == 0;
    if (!ops) {
        ops_http_req_t req = {.conn = conn, .method = method, .path = url};
        char *json = NULL;
        unsigned status = h->route ? h->route(h->ctx, &req, &json) : 0;
        if (status == 0)
            return reply_error(conn, MHD_HTTP_NOT_FOUND, h->not_found ? h->not_found : "not found");
        return json ? reply(conn, status, JSON, json, true) : no_memory(conn);
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply_error(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed");
    if (strcmp(url, "/dashboard") == 0)
        return reply(conn, MHD_HTTP_OK, "text/html; charset=utf-8", (char *)api_dashboard_page,
                     false);
    if (strcmp(url, "/healthz") == 0) {
        const char *why = h->unhealthy(h->ctx);
        if (why == NULL)
            return reply(conn, MHD_HTTP_OK, JSON, (char *)"{\"status\":\"ok\"}", false);
        return reply_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, why);
    }
    bool stats = strcmp(url, "/stats") == 0;
    char *body = stats ? h->stats_json(h->ctx) : h->metrics(h->ctx);
    if (body == NULL)
        return no_memory(conn);
    return reply(conn, MHD_HTTP_OK, stats ? JSON : "text/plain; version=0.0.4", body, true);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_len, void **state)
{
    (void)version;
    (void)upload;
    if (*state == NULL) {
        *state = (void *)1; /* headers only so far: answer once the (ignored) body is read */
        return MHD_YES;
    }
    if (*upload_len > 0) {
        *upload_len = 0;
        return MHD_YES;
    }
    return answer(cls, conn, url, method);
}

/* The daemon on host:port, resolved; NULL with the reason in err. */
static struct MHD_Daemon *listen_on(struct ops_http *s, const char *listen, const char *host,
                                    uint16_t port, char *err, size_t errlen)
{
    char port_s[8];
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;

    snprintf(port_s, sizeof port_s, "%u", (unsigned)port);
    if (getaddrinfo(host, port_s, &hints, &ai) != 0 || ai == NULL) {
        errbuf_printf(err, errlen, "--listen %s: cannot resolve %s", listen, host);
        return NULL;
    }
    /* A thread per connection: a slow route (the worker's lookup waits for the worker thread)
     * holds up neither /healthz nor /stats. */
    unsigned flags =
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d =
        MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_CONNECTION_LIMIT,
                         (unsigned)64, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (d == NULL)
        errbuf_printf(err, errlen, "--listen %s: cannot listen (address in use?)", listen);
    return d;
}

int ops_http_start(const char *listen, const ops_http_handlers_t *h, ops_http_t **out, char *err,
                   size_t errlen)
{
    char host[256];
    uint16_t port = 0;

    *out = NULL;
    if (config_parse_hostport(listen, "--listen", host, sizeof host, &port, err, errlen) != 0)
        return -1;
    struct ops_http *s = calloc(1, sizeof *s);
    if (s == NULL) {
        errbuf_printf(err, errlen, "out of memory");
        return -1;
    }
    s->h = *h;
    s->d = listen_on(s, listen, host, port, err, errlen);
    if (s->d == NULL) {
        free(s);
        return -1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    bool v6 = strchr(host, ':') != NULL;
    LOGGING_INFO("listening on http://%s%s%s:%u", v6 ? "[" : "", host, v6 ? "]" : "",
                 info ? (unsigned)info->port : (unsigned)port);
    *out = s;
    return 0;
}

void ops_http_stop(ops_http_t *s)
{
    if (s == NULL)
        return;
    MHD_stop_daemon(s->d);
    free(s);
}
