/* adminhost: which Host may read the operator routes when no admin token guards them. */
#ifndef INGESTD_API_ADMINHOST_H
#define INGESTD_API_ADMINHOST_H

#include <stdbool.h>

/*
 * Without --admin-token, /stats, /metrics and /dashboard answer anyone who reaches the port. A
 * web page can still not read them from a browser unless it rebinds its own name to this
 * server's address (DNS rebinding): the browser then sends the page's name as Host. So those
 * routes answer only a Host that no rebinding page can send: localhost (and *.localhost), an IP
 * address, the --listen host, or a name of --admin-hosts. A request without Host (HTTP/1.0) does
 * not come from a browser and is answered.
 */
typedef struct adminhost adminhost_t;

/*
 * listen_host: --listen's host (NULL or "": none); names: comma-separated Host names, "*" for
 * any Host (NULL or "": none). Both copied. Returns 0 with *out (adminhost_free), or -1 when
 * out of memory.
 */
int adminhost_new(const char *listen_host, const char *names, adminhost_t **out);

/* NULL is a no-op. */
void adminhost_free(adminhost_t *a);

/* Whether a request with this Host header (NULL: none; a port and one trailing dot of the name
 * are ignored, names compare case-insensitively) may read the operator routes. Thread-safe. */
bool adminhost_allowed(const adminhost_t *a, const char *host);

#endif
