/* api: api_t's lifetime (api_new, api_free): the one file that sets up what the others use. */
#include "api/internal.h"

#include <stdlib.h>
#include <string.h>

#include "api/adminhost.h"
#include "api/cors.h"
#include "api/jsonparse.h"
#include "api/reqhist.h"
#include "common/clock.h"

/* ingestd_request_duration_seconds, one row per route of the table (reqhist.h). */
static int new_reqhist(api_t *api)
{
    size_t n = api_route_paths(NULL, 0);
    const char **paths = calloc(n, sizeof(*paths));
    if (!paths)
        return -1;
    api_route_paths(paths, n);
    int rc = reqhist_new(paths, n, &api->reqhist); /* copies the pointers */
    free(paths);
    return rc;
}

int api_new(const api_options_t *opts, api_t **out)
{
    api_t *api = NULL;

    *out = NULL;
    if (!opts || (!opts->commit && !opts->sink) || (opts->nkeys > 0 && !opts->keys))
        return -1;
    if (opts->sink && !(opts->sink->submit && opts->sink->stats_json && opts->sink->metrics &&
                        opts->sink->unhealthy))
        return -1;
    /* Request trees in arenas (api_ingest); jansson elsewhere is unchanged. */
    jsonparse_use_arenas();
    api = calloc(1, sizeof(*api));
    if (!api)
        return -1;
    atomic_init(&api->quiescing, false);
    if (pthread_mutex_init(&api->polls_mu, NULL) != 0) {
        free(api);
        return -1;
    }
    if (api_keys_init(api, opts) != 0)
        goto fail;
    if (opts->admin_token && *opts->admin_token) {
        api->admin_token = strdup(opts->admin_token);
        if (!api->admin_token)
            goto fail;
    }
    if (opts->data_dir) {
        api->data_dir = strdup(opts->data_dir);
        if (!api->data_dir)
            goto fail;
    }
    if (cors_new(opts->cors_origin, &api->cors, NULL, 0) != CORS_OK)
        goto fail;
    if (new_reqhist(api) != 0)
        goto fail;
    if (adminhost_new(opts->listen_host, opts->admin_hosts, &api->admin_hosts) != 0)
        goto fail;
    api->tls_min_version = opts->tls_min_version;
    for (size_t i = 0; i < API_TLS_VERSIONS; i++)
        atomic_init(&api->tls_handshakes[i], 0);
    api_reject_init(api, opts); /* reject.c */
    api->fsync_seconds = opts->fsync_seconds;
    api->batch_events = opts->batch_events;
    api->duplicate_ages = opts->duplicate_age_seconds;
    api->commit = opts->commit;
    if (opts->sink) {
        api->has_sink = true;
        api->sink = *opts->sink;
    }
    atomic_init(&api->sink_accepted, 0);
    api->started_ms = clk_mono_ms();
    atomic_init(&api->rejected, 0);
    for (size_t i = 0; i < API_STATUS_SLOTS; i++)
        atomic_init(&api->by_status[i], 0);
    *out = api;
    return 0;
fail:
    api_free(api);
    return -1;
}

void api_free(api_t *api)
{
    if (!api)
        return;
    api_keys_destroy(api);
    free(api->admin_token);
    free(api->data_dir);
    cors_free(api->cors);
    adminhost_free(api->admin_hosts);
    reqhist_free(api->reqhist);
    pthread_mutex_destroy(&api->polls_mu);
    free(api);
}
