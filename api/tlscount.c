/* tlscount: TLS handshakes by negotiated version, for /stats and /metrics. */
#include "api/internal.h"

/* Labels of ingestd_tls_handshakes_total{version}, by enum api_tls_version. */
static const char *const VERSIONS[API_TLS_VERSIONS] = {"1.0", "1.1", "1.2", "1.3", "other"};

void api_count_tls_handshake(api_t *api, enum api_tls_version v)
{
    if (!api || (unsigned)v >= API_TLS_VERSIONS)
        return;
    atomic_fetch_add_explicit(&api->tls_handshakes[v], 1, memory_order_relaxed);
}

void api_tls_stats(const api_t *api, json_t *j)
{
    if (!api->tls_min_version)
        return;
    json_t *by = json_object();
    for (size_t i = 0; by && i < API_TLS_VERSIONS; i++)
        json_object_set_new(by, VERSIONS[i],
                            json_integer((json_int_t)atomic_load(&api->tls_handshakes[i])));
    json_object_set_new(
        j, "tls", json_pack("{s:s, s:o*}", "min_version", api->tls_min_version, "handshakes", by));
}

void api_tls_metrics(api_t *api, prom_t *p)
{
    char lb[32];

    if (!api->tls_min_version)
        return;
    /* Every version, zeros too: the series exist before the first handshake of each. */
    prom_head(p, "tls_handshakes_total", PROM_COUNTER,
              "TLS handshakes finished, by negotiated protocol version.");
    for (size_t i = 0; i < API_TLS_VERSIONS; i++) {
        lb[0] = '\0';
        prom_label(lb, sizeof(lb), "version", VERSIONS[i]);
        prom_sample_u64(p, "tls_handshakes_total", lb, atomic_load(&api->tls_handshakes[i]));
    }
}
