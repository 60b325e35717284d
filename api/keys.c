/* keys: the write keys (swapped on SIGHUP) and the admin token that requests must show. */
#include "api/internal.h"

#include <string.h>

#include "api/auth.h"
#include "common/clock.h"

int api_keys_init(api_t *api, const api_options_t *opts)
{
    if (pthread_rwlock_init(&api->keys_mu, NULL) != 0)
        return -1;
    api->keys_mu_ok = true;
    api->rate_limit = opts->rate_limit;
    atomic_init(&api->rate_limited_requests, 0);
    atomic_init(&api->rate_limited_events, 0);
    atomic_init(&api->queue_full_requests, 0);
    atomic_init(&api->queue_full_events, 0);
    return auth_keyset_new(opts->keys, opts->nkeys, opts->rate_limit, NULL, clk_mono_ms(),
                           &api->keys);
}

void api_keys_destroy(api_t *api)
{
    auth_keyset_release(api->keys);
    api->keys = NULL;
    if (api->keys_mu_ok)
        pthread_rwlock_destroy(&api->keys_mu);
    api->keys_mu_ok = false;
}

struct auth_keyset *api_keys_get(api_t *api)
{
    /* The lock only spans the pointer read and the reference: a reload swapping the pointer
     * (write lock) then cannot free the set between the two. */
    pthread_rwlock_rdlock(&api->keys_mu);
    auth_keyset_t *ks = api->keys;
    auth_keyset_retain(ks);
    pthread_rwlock_unlock(&api->keys_mu);
    return ks;
}

int api_set_keys(api_t *api, const api_write_key_t *keys, size_t n)
{
    auth_keyset_t *cur = api_keys_get(api);
    auth_keyset_t *ks = NULL;
    int rc = auth_keyset_new(keys, n, api->rate_limit, cur, clk_mono_ms(), &ks);
    auth_keyset_release(cur);
    if (rc != 0)
        return -1;
    pthread_rwlock_wrlock(&api->keys_mu);
    auth_keyset_t *old = api->keys;
    api->keys = ks;
    pthread_rwlock_unlock(&api->keys_mu);
    auth_keyset_release(old); /* freed here, or by the last request still using it */
    return 0;
}

bool api_admin_ok(const api_t *api, const char *authorization)
{
    const char *tok = NULL;
    size_t len = 0;

    auth_bearer_token(authorization, &tok, &len);
    /* The token is the secret side: the comparison takes as long whatever the client sent. */
    return tok && len > 0 && api->admin_token &&
           auth_equal(tok, len, api->admin_token, strlen(api->admin_token));
}

int api_admin_auth(const api_t *api, const char *authorization, api_resp_t *resp)
{
    const char *tok = NULL;
    size_t len = 0;

    if (api_admin_ok(api, authorization))
        return 0;
    auth_bearer_token(authorization, &tok, &len);
    api_error(resp, 401,
              tok ? "invalid admin token" : "missing admin token (Authorization: Bearer TOKEN)");
    api_resp_header(resp, "WWW-Authenticate", "Bearer realm=\"ingestd\"");
    return -1;
}
