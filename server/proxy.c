/* proxy: trusted-proxy networks and the client address behind them. */
#include "server/proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/errbuf.h"

#define MAX_HOPS 64 /* hops of one header looked at; a longer chain is cut at its left end */

/* A hop as read from a header: its address (IPv4-mapped when v4), or unusable. */
struct hop {
    uint8_t addr[16];
    bool ok;
};

static void map_v4(const struct in_addr *a, uint8_t out[16])
{
    memset(out, 0, 10);
    out[10] = out[11] = 0xff;
    memcpy(out + 12, &a->s_addr, 4);
}

/* Parses a bare address (no port, no brackets) of n bytes. Returns 0 and *v4, or -1. */
static int parse_addr(const char *s, size_t n, uint8_t out[16], bool *v4)
{
    char buf[PROXY_ADDR_LEN];
    struct in_addr a4;

    if (n == 0 || n >= sizeof buf)
        return -1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (inet_pton(AF_INET, buf, &a4) == 1) {
        map_v4(&a4, out);
        *v4 = true;
        return 0;
    }
    *v4 = false;
    return inet_pton(AF_INET6, buf, out) == 1 ? 0 : -1;
}

static void trim(const char **s, size_t *n)
{
    while (*n > 0 && (**s == ' ' || **s == '\t')) {
        (*s)++;
        (*n)--;
    }
    while (*n > 0 && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t'))
        (*n)--;
}

int proxy_parse(const char *spec, proxy_list_t *out, char *errbuf, size_t errlen)
{
    memset(out, 0, sizeof *out);
    for (const char *p = spec; p != NULL && *p != '\0';) {
        size_t len = strcspn(p, ",");
        const char *e = p;
        size_t n = len;
        const char *next = p[len] == ',' ? p + len + 1 : NULL;

        trim(&e, &n);
        p = next;
        if (n == 0)
            continue;
        const char *slash = memchr(e, '/', n);
        size_t alen = slash != NULL ? (size_t)(slash - e) : n;
        proxy_net_t net;
        bool v4;
        if (parse_addr(e, alen, net.addr, &v4) != 0)
            goto bad;
        unsigned max = v4 ? 32 : 128;
        net.prefix = max;
        if (slash != NULL) {
            char *end;
            char num[8];
            size_t dn = n - alen - 1;
            if (dn == 0 || dn >= sizeof num)
                goto bad;
            memcpy(num, slash + 1, dn);
            num[dn] = '\0';
            unsigned long v = strtoul(num, &end, 10);
            if (*end != '\0' || num[0] < '0' || num[0] > '9' || v > max)
                goto bad;
            net.prefix = (unsigned)v;
        }
        if (v4)
            net.prefix += 96;
        if (out->n == PROXY_MAX_NETS) {
            errbuf_printf(errbuf, errlen, "more than %d networks in --trusted-proxies",
                          PROXY_MAX_NETS);
            return -1;
        }
        out->nets[out->n++] = net;
        continue;
    bad:
        errbuf_printf(errbuf, errlen,
                      "invalid network \"%.*s\" in --trusted-proxies (expected CIDR "
                      "such as 10.0.0.0/8 or fd00::/8, or an address)",
                      (int)(n > 64 ? 64 : n), e);
        return -1;
    }
    return 0;
}

static bool in_net(const proxy_net_t *net, const uint8_t a[16])
{
    unsigned bits = net->prefix;
    size_t whole = bits / 8;

    if (memcmp(net->addr, a, whole) != 0)
        return false;
    if (bits % 8 == 0)
        return true;
    uint8_t mask = (uint8_t)(0xff << (8 - bits % 8));
    return (net->addr[whole] & mask) == (a[whole] & mask);
}

static bool trusted(const proxy_list_t *l, const uint8_t a[16])
{
    for (size_t i = 0; i < l->n; i++)
        if (in_net(&l->nets[i], a))
            return true;
    return false;
}

int proxy_key_sa(const struct sockaddr *sa, uint8_t out[16])
{
    if (sa != NULL && sa->sa_family == AF_INET)
        map_v4(&((const struct sockaddr_in *)sa)->sin_addr, out);
    else if (sa != NULL && sa->sa_family == AF_INET6)
        memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    else
        return -1;
    return 0;
}

int proxy_key_text(const char *text, uint8_t out[16])
{
    bool v4;

    return text != NULL ? parse_addr(text, strlen(text), out, &v4) : -1;
}

bool proxy_trusted_sa(const proxy_list_t *l, const struct sockaddr *sa)
{
    uint8_t a[16];

    return proxy_key_sa(sa, a) == 0 && trusted(l, a);
}

/* One hop's text: "1.2.3.4", "1.2.3.4:80", "[::1]", "[::1]:80", "::1", maybe quoted. */
static struct hop parse_hop(const char *s, size_t n)
{
    struct hop h = {{0}, false};
    bool v4;

    trim(&s, &n);
    if (n >= 2 && s[0] == '"' && s[n - 1] == '"') {
        s++;
        n -= 2;
    }
    if (n > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (close == NULL)
            return h;
        h.ok = parse_addr(s + 1, (size_t)(close - s - 1), h.addr, &v4) == 0;
        return h;
    }
    const char *colon = memchr(s, ':', n);
    if (colon != NULL && memchr(colon + 1, ':', n - (size_t)(colon - s) - 1) == NULL)
        n = (size_t)(colon - s); /* one colon: IPv4 with a port */
    h.ok = parse_addr(s, n, h.addr, &v4) == 0;
    return h;
}

/* The `for=` parameter of one Forwarded element ("for=1.2.3.4;proto=https"), as a hop. */
static struct hop forwarded_for(const char *s, size_t n)
{
    struct hop none = {{0}, false};

    while (n > 0) {
        const char *semi = memchr(s, ';', n);
        size_t len = semi != NULL ? (size_t)(semi - s) : n;
        const char *p = s;
        size_t pn = len;
        trim(&p, &pn);
        if (pn > 4 && strncasecmp(p, "for=", 4) == 0)
            return parse_hop(p + 4, pn - 4);
        if (semi == NULL)
            break;
        s += len + 1;
        n -= len + 1;
    }
    return none;
}

/* Splits a comma-separated header into hops (the last MAX_HOPS of them). */
static size_t split_hops(const char *v, bool forwarded, struct hop hops[MAX_HOPS])
{
    size_t n = 0;

    for (const char *p = v; p != NULL;) {
        size_t len = strcspn(p, ",");
        if (n == MAX_HOPS) {
            memmove(hops, hops + 1, (MAX_HOPS - 1) * sizeof *hops);
            n--;
        }
        hops[n++] = forwarded ? forwarded_for(p, len) : parse_hop(p, len);
        p = p[len] == ',' ? p + len + 1 : NULL;
    }
    return n;
}

int proxy_client(const proxy_list_t *l, const char *forwarded, const char *xff,
                 char out[PROXY_ADDR_LEN])
{
    struct hop hops[MAX_HOPS];
    const char *v = forwarded != NULL ? forwarded : xff;
    const struct hop *client = NULL;

    if (v == NULL)
        return -1;
    size_t n = split_hops(v, forwarded != NULL, hops);
    for (size_t i = n; i-- > 0;) {
        if (!hops[i].ok)
            break;
        client = &hops[i];
        if (!trusted(l, hops[i].addr))
            break;
    }
    if (client == NULL)
        return -1;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(client->addr, mapped, 12) == 0)
        return inet_ntop(AF_INET, client->addr + 12, out, PROXY_ADDR_LEN) ? 0 : -1;
    return inet_ntop(AF_INET6, client->addr, out, PROXY_ADDR_LEN) ? 0 : -1;
}
