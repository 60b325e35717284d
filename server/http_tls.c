/* http_tls: the TLS set-up of the HTTP transport (--tls-cert, --tls-key, --tls-min-version). */
#include "server/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>

#include "common/errbuf.h"
#include "server/logging.h"

/*
 * DESIGN. libmicrohttpd (GnuTLS) could take the certificate and key as PEM text at start
 * (MHD_OPTION_HTTPS_MEM_CERT / _KEY), but then keeps them for the daemon's life. To reload them
 * on SIGHUP, the daemon gets a certificate callback instead (MHD_OPTION_HTTPS_CERT_CALLBACK,
 * GnuTLS' retrieve_function2), which hands each handshake the credentials `current` points to.
 * A reload reads and checks a new pair, then swaps the pointer; a bad pair leaves the old one.
 *
 * GnuTLS neither copies nor releases what the callback returns, and a handshake that began
 * with the old credentials may still use them after the swap. So old credentials are retired,
 * not freed: a later reload frees those retired longer ago than any handshake can last (the
 * head deadline and the idle timeout close a connection that stalls in its handshake), and
 * http_tls_free frees the rest once the daemon has stopped.
 *
 * The callback takes no closure, so `current` is file-static: one TLS daemon per process
 * (http_tls_load refuses a second). So is the api that counts finished handshakes by version
 * (a hook the callback puts on each session).
 *
 * The suites (--tls-min-version): a GnuTLS priority string built here from the setting, never
 * typed by the operator: TLS 1.3 (and 1.2 unless 1.3 is the minimum), key exchange by ECDHE or
 * DHE only (forward secrecy; no static RSA), AEAD ciphers only (AES-GCM, ChaCha20-Poly1305: no
 * CBC, hence no SHA-1 or other MAC), the server's order of preference.
 */

/* A PEM certificate chain or key larger than this is not a PEM file. */
#define TLS_FILE_MAX (1024 * 1024)

/* Certificates in a chain at most (leaf and intermediates). */
#define TLS_CHAIN_MAX 16

static const char PRIORITY_TLS12[] =
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA:+DHE-RSA:"
    "-CIPHER-ALL:+AES-256-GCM:+AES-128-GCM:+CHACHA20-POLY1305:-MAC-ALL:+AEAD:%SERVER_PRECEDENCE";
static const char PRIORITY_TLS13[] =
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA:+DHE-RSA:"
    "-CIPHER-ALL:+AES-256-GCM:+AES-128-GCM:+CHACHA20-POLY1305:-MAC-ALL:+AEAD:%SERVER_PRECEDENCE";

/* One certificate chain and its key, as the callback hands them to GnuTLS. */
struct tls_creds {
    gnutls_pcert_st pcerts[TLS_CHAIN_MAX];
    unsigned npcerts;
    gnutls_privkey_t key;
    int64_t retired_ms;     /* CLOCK_MONOTONIC when replaced; 0: in force */
    struct tls_creds *next; /* on the retired list */
};

static _Atomic(struct tls_creds *) current;
static _Atomic(api_t *) counting; /* where on_finished counts handshakes */

const char *http_tls_priority(enum config_tls_min min)
{
    return min == CONFIG_TLS_1_3 ? PRIORITY_TLS13 : PRIORITY_TLS12;
}

/* Reads a whole PEM file into a NUL-terminated string (caller frees). Returns 0 or -1. */
static int read_pem(const char *what, const char *path, char **out, size_t *len, char *errbuf,
                    size_t errlen)
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
        explicit_bzero(buf, n > TLS_FILE_MAX ? TLS_FILE_MAX + 1 : n);
        free(buf);
        return -1;
    }
    fclose(f);
    buf[n] = '\0';
    if (strstr(buf, "-----BEGIN ") == NULL) {
        errbuf_printf(errbuf, errlen, "TLS %s \"%s\" is not a PEM file", what, path);
        explicit_bzero(buf, n);
        free(buf);
        return -1;
    }
    *out = buf;
    *len = n;
    return 0;
}

static void creds_free(struct tls_creds *c)
{
    if (c == NULL)
        return;
    for (unsigned i = 0; i < c->npcerts; i++)
        gnutls_pcert_deinit(&c->pcerts[i]);
    gnutls_privkey_deinit(c->key);
    free(c);
}

/* Whether the key belongs to the chain's leaf (pcerts[0]): the same public key. */
static bool key_matches(const struct tls_creds *c)
{
    gnutls_pubkey_t pub = NULL;
    gnutls_datum_t mine = {NULL, 0}, leaf = {NULL, 0};
    bool same = false;

    if (c->npcerts == 0 || gnutls_pubkey_init(&pub) < 0)
        return false;
    if (gnutls_pubkey_import_privkey(pub, c->key, 0, 0) == 0 &&
        gnutls_pubkey_export2(pub, GNUTLS_X509_FMT_DER, &mine) == 0 &&
        gnutls_pubkey_export2(c->pcerts[0].pubkey, GNUTLS_X509_FMT_DER, &leaf) == 0)
        same = mine.size == leaf.size && memcmp(mine.data, leaf.data, mine.size) == 0;
    gnutls_free(mine.data);
    gnutls_free(leaf.data);
    gnutls_pubkey_deinit(pub);
    return same;
}

/* Reads and checks cfg's certificate and key into a new *out. Returns 0 or -1 (errbuf). */
static int creds_load(const char *cert_path, const char *key_path, struct tls_creds **out,
                      char *errbuf, size_t errlen)
{
    char *cert = NULL, *key = NULL;
    size_t cert_len = 0, key_len = 0;
    struct tls_creds *c = NULL;
    int rc = -1, g;

    *out = NULL;
    if (read_pem("certificate", cert_path, &cert, &cert_len, errbuf, errlen) != 0 ||
        read_pem("key", key_path, &key, &key_len, errbuf, errlen) != 0)
        goto out;
    gnutls_datum_t cd = {(unsigned char *)cert, (unsigned)cert_len};
    gnutls_datum_t kd = {(unsigned char *)key, (unsigned)key_len};
    c = calloc(1, sizeof *c);
    if (c == NULL || gnutls_privkey_init(&c->key) < 0) {
        errbuf_printf(errbuf, errlen, "out of memory");
        goto out;
    }
    c->npcerts = TLS_CHAIN_MAX;
    /* The leaf first, then its issuers, as GnuTLS' own loading of a PEM chain wants it. */
    g = gnutls_pcert_list_import_x509_raw(c->pcerts, &c->npcerts, &cd, GNUTLS_X509_FMT_PEM, 0);
    if (g < 0) {
        c->npcerts = 0;
        errbuf_printf(errbuf, errlen, "TLS certificate \"%s\": %s%s", cert_path, gnutls_strerror(g),
                      g == GNUTLS_E_SHORT_MEMORY_BUFFER ? " (more than 16 certificates)" : "");
        goto out;
    }
    g = gnutls_privkey_import_x509_raw(c->key, &kd, GNUTLS_X509_FMT_PEM, NULL, 0);
    if (g < 0) {
        errbuf_printf(errbuf, errlen, "TLS key \"%s\": %s", key_path, gnutls_strerror(g));
        goto out;
    }
    if (!key_matches(c)) {
        errbuf_printf(errbuf, errlen,
                      "TLS certificate and key not usable: %s (does --tls-key "
                      "belong to --tls-cert?)",
                      gnutls_strerror(GNUTLS_E_CERTIFICATE_KEY_MISMATCH));
        goto out;
    }
    *out = c;
    c = NULL;
    rc = 0;
out:
    creds_free(c);
    free(cert);
    if (key != NULL) {
        explicit_bzero(key, key_len); /* a secret: wiped before its memory goes back */
        free(key);
    }
    return rc;
}

/* The version words of ingestd_tls_handshakes_total, by GnuTLS' protocol number. */
static enum api_tls_version version_of(int protocol)
{
    switch (protocol) {
    case GNUTLS_TLS1_0:
        return API_TLS_1_0;
    case GNUTLS_TLS1_1:
        return API_TLS_1_1;
    case GNUTLS_TLS1_2:
        return API_TLS_1_2;
    case GNUTLS_TLS1_3:
        return API_TLS_1_3;
    default:
        return API_TLS_OTHER;
    }
}

/*
 * The client's Finished has arrived and checked out: the handshake is done (in TLS 1.2 the
 * server's Finished follows at once, in 1.3 the client's comes last). Counted here, not when a
 * request comes, so a connection that sends none counts too; libmicrohttpd tells nothing about
 * a finished handshake, and by the close GnuTLS has forgotten whether it finished.
 */
static int on_finished(gnutls_session_t session, unsigned int htype, unsigned when,
                       unsigned int incoming, const gnutls_datum_t *msg)
{
    (void)msg;
    if (htype == GNUTLS_HANDSHAKE_FINISHED && when == GNUTLS_HOOK_POST && incoming)
        api_count_tls_handshake(atomic_load_explicit(&counting, memory_order_relaxed),
                                version_of((int)gnutls_protocol_get_version(session)));
    return 0;
}

/* GnuTLS asks which certificate to present: the pair in force now. */
static int cert_callback(gnutls_session_t session, const gnutls_datum_t *req_ca_rdn, int nreqs,
                         const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length,
                         gnutls_pcert_st **pcert, unsigned int *pcert_length,
                         gnutls_privkey_t *privkey)
{
    struct tls_creds *c = atomic_load_explicit(&current, memory_order_acquire);

    (void)req_ca_rdn;
    (void)nreqs;
    (void)pk_algos;
    (void)pk_algos_length;
    if (c == NULL)
        return -1; /* the handshake fails; cannot happen while the daemon runs */
    /* Every full handshake asks for the certificate (libmicrohttpd resumes no sessions), so
     * this is where a session can be given the hook that counts its version. */
    gnutls_handshake_set_hook_function(session, GNUTLS_HANDSHAKE_FINISHED, GNUTLS_HOOK_POST,
                                       on_finished);
    *pcert = c->pcerts;
    *pcert_length = c->npcerts;
    *privkey = c->key;
    return 0;
}

int http_tls_load(http_t *h, const config_t *cfg, struct MHD_OptionItem opts[3], char *errbuf,
                  size_t errlen)
{
    struct tls_creds *c = NULL;

    opts[0] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    if (cfg->tls_cert[0] == '\0')
        return 0;
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES ||
        MHD_is_feature_supported(MHD_FEATURE_HTTPS_CERT_CALLBACK) != MHD_YES) {
        errbuf_printf(errbuf, errlen,
                      "--tls-cert: this libmicrohttpd was built without TLS support (GnuTLS)");
        return -1;
    }
    if (atomic_load(&current) != NULL) {
        errbuf_printf(errbuf, errlen, "--tls-cert: one TLS listener per process");
        return -1;
    }
    h->tls_cert_path = strdup(cfg->tls_cert);
    h->tls_key_path = strdup(cfg->tls_key);
    if (h->tls_cert_path == NULL || h->tls_key_path == NULL) {
        errbuf_printf(errbuf, errlen, "out of memory");
        return -1;
    }
    if (creds_load(cfg->tls_cert, cfg->tls_key, &c, errbuf, errlen) != 0)
        return -1;
    atomic_store(&counting, h->api);
    atomic_store_explicit(&current, c, memory_order_release);
    h->tls = true;
    h->tls_grace_ms = ((int64_t)cfg->request_timeout_s + (int64_t)cfg->timeout_s) * 1000;
    /* MHD_OPTION_ARRAY carries the callback as a void *, which ISO C cannot cast a function
     * pointer to; POSIX guarantees the two have one representation, so its bytes are copied. */
    gnutls_certificate_retrieve_function2 *cb = cert_callback;
    void *cb_ptr;
    _Static_assert(sizeof cb == sizeof cb_ptr, "function and object pointers differ in size");
    memcpy(&cb_ptr, &cb, sizeof cb_ptr);
    opts[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_CERT_CALLBACK, 0, cb_ptr};
    opts[1] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0,
                                      (void *)http_tls_priority(cfg->tls_min)};
    opts[2] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    return 0;
}

int http_reload_tls(http_t *h, char *errbuf, size_t errlen)
{
    struct tls_creds *c = NULL, *old, **pp;
    int64_t now = clk_mono_ms();

    if (h == NULL || !h->tls)
        return 1;
    if (creds_load(h->tls_cert_path, h->tls_key_path, &c, errbuf, errlen) != 0)
        return -1;
    old = atomic_exchange_explicit(&current, c, memory_order_acq_rel);
    /* Only the signal thread reloads, so the retired list needs no lock. */
    for (pp = &h->tls_retired; *pp != NULL;) {
        struct tls_creds *r = *pp;
        if (now - r->retired_ms > h->tls_grace_ms) {
            *pp = r->next;
            creds_free(r);
        } else {
            pp = &r->next;
        }
    }
    if (old != NULL) {
        old->retired_ms = now;
        old->next = h->tls_retired;
        h->tls_retired = old;
    }
    return 0;
}

void http_tls_free(http_t *h)
{
    struct tls_creds *c;

    if (h->tls) {
        /* The daemon is stopped (or never started): no handshake can reach the callback. */
        creds_free(atomic_exchange(&current, NULL));
        atomic_store(&counting, NULL);
        h->tls = false;
    }
    while ((c = h->tls_retired) != NULL) {
        h->tls_retired = c->next;
        creds_free(c);
    }
    free(h->tls_cert_path);
    free(h->tls_key_path);
    h->tls_cert_path = h->tls_key_path = NULL;
}
