/* dashboard: GET /dashboard, the operator's page (api/dashboard/, docs/operations.md). */
#include "api/dashboard.h"

#include "api/internal.h"

#include <stdlib.h>
#include <string.h>

void api_dashboard(api_resp_t *resp)
{
    /* api_resp_t owns a malloc'd body (the transport frees it): one copy of ~70 KB per page
     * load, which an operator's browser makes once, not once a second. */
    char *body = malloc(api_dashboard_page_len);
    if (!body) {
        api_error(resp, 503, "out of memory, retry later");
        return;
    }
    memcpy(body, api_dashboard_page, api_dashboard_page_len);
    memset(resp, 0, sizeof(*resp));
    resp->status = 200;
    resp->content_type = "text/html; charset=utf-8";
    resp->body = body;
    resp->body_len = api_dashboard_page_len;
    /* Revalidate on every load so an upgraded binary's page is never mixed with a cached one. */
    api_resp_header(resp, "Cache-Control", "no-cache");
    /* Everything the page needs is in it: forbid loading anything from elsewhere. */
    api_resp_header(resp, "Content-Security-Policy",
                    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                    "connect-src 'self'; img-src 'self' data:");
    api_resp_header(resp, "X-Content-Type-Options", "nosniff");
}
