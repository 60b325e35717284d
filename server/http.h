/* http: the libmicrohttpd front end; bodies in, api_handle, suspended until the commit answers. */
#ifndef INGESTD_HTTP_H
#define INGESTD_HTTP_H

#include "api/api.h"
#include "server/config.h"

typedef struct http http_t;

/* Starts listening. Returns 0 or -1 with a reason in errbuf. *out freed by http_stop(). */
int http_start(const config_t *cfg, api_t *api, http_t **out, char *errbuf, size_t errlen);

/* Stops accepting new connections; requests on open connections get 503 + Retry-After +
 * Connection: close; in-flight requests go on; long-polls answer now. */
void http_quiesce(http_t *h);

/*
 * Waits up to timeout_ms for every in-flight request to be answered; returns how many remain.
 * On return no api_handle() call is running and none will start (later ones get 503), so
 * storage may be closed next. Requests that reach the server after http_quiesce get 503.
 */
unsigned http_drain(http_t *h, int timeout_ms);

/*
 * SIGHUP: reads --tls-cert and --tls-key again; handshakes from now on present the new pair,
 * those under way finish with the old one. Returns 0 (reloaded), 1 (no TLS: nothing to do), or
 * -1 with the reason in errbuf (unreadable, not PEM, not matching: the old pair stays in force).
 * Not thread-safe against itself: one thread (the signal loop) calls it.
 */
int http_reload_tls(http_t *h, char *errbuf, size_t errlen);

/* Stops the daemon and frees; NULL is a no-op. */
void http_stop(http_t *h);

#endif
