/* http_tls: the TLS set-up of the HTTP transport (--tls-cert, --tls-key). */
#include "server/http_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"

/*
 * DESIGN. libmicrohttpd (GnuTLS) takes the certificate chain and the key as PEM text in memory
 * (MHD_OPTION_HTTPS_MEM_CERT / _KEY) and keeps pointers to them, so both are read whole here,
 * checked for a PEM header (a useful message beats GnuTLS' at start), and kept on the http_t
 * until the daemon stops. The key is a secret: wiped before its memory is freed.
 */

/* A PEM certificate chain or key larger than this is not a PEM file. */
#define TLS_FILE_MAX (1024 * 1024)

/* Reads a whole PEM file into a NUL-terminated string (caller frees). Returns 0 or -1. */
static int read_pem(const char *what, const char *path, char **out, char *errbuf, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t n;

    *out = NULL;
    if (f == NULL) {
        errbuf_printf(errbuf, errlen, "cannot read TLS %s \"%s\": %s", what, path, strerror(errno));
        return -1;
    }
    buf = malloc(TLS_FILE_MAX + 1);
    if (buf == NULL) {
        fclose(f);
        errbuf_printf(errbuf, errlen, "out of memory");
        return -1;
    }
    n = fread(buf, 1, TLS_FILE_MAX + 1, f);
    if (ferror(f) || n == 0 || n > TLS_FILE_MAX) {
        errbuf_printf(errbuf, errlen, "cannot read TLS %s \"%s\": %s", what, path,
                      ferror(f) ? strerror(errno)
                      : n == 0  ? "empty file"
                                : "larger than 1 MiB");
        fclose(f);
        free(buf);
        return -1;
    }
    fclose(f);
    buf[n] = '\0';
    if (strstr(buf, "-----BEGIN ") == NULL) {
        errbuf_printf(errbuf, errlen, "TLS %s \"%s\" is not a PEM file", what, path);
        free(buf);
        return -1;
    }
    *out = buf;
    return 0;
}

int http_tls_load(http_t *h, const config_t *cfg, struct MHD_OptionItem opts[3], char *errbuf,
                  size_t errlen)
{
    opts[0] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    if (cfg->tls_cert[0] == '\0')
        return 0;
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        errbuf_printf(errbuf, errlen,
                      "--tls-cert: this libmicrohttpd was built without TLS support (GnuTLS)");
        return -1;
    }
    if (read_pem("certificate", cfg->tls_cert, &h->tls_cert, errbuf, errlen) != 0 ||
        read_pem("key", cfg->tls_key, &h->tls_key, errbuf, errlen) != 0)
        return -1;
    h->tls = true;
    opts[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, h->tls_cert};
    opts[1] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, h->tls_key};
    opts[2] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    return 0;
}

void http_tls_free(http_t *h)
{
    if (h->tls_key != NULL) {
        explicit_bzero(h->tls_key, strlen(h->tls_key));
        free(h->tls_key);
        h->tls_key = NULL;
    }
    free(h->tls_cert);
    h->tls_cert = NULL;
}
