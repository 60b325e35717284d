/* config_values.c: the value syntax of the settings (durations, sizes, counts, HOST:PORT, the
 * list values of write keys and Kafka options), read and written; config.c's table says which
 * setting takes which. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/errbuf.h"
#include "server/config.h"

int config_parse_u64(const char *s, const char **end, uint64_t *v)
{
    uint64_t n = 0;
    const char *p = s;

    if (!isdigit((unsigned char)*p))
        return -1;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (n > (UINT64_MAX - d) / 10)
            return -1;
        n = n * 10 + d;
    }
    *end = p;
    *v = n;
    return 0;
}

int config_parse_duration(const char *s, int64_t *ms)
{
    static const struct {
        const char *suffix;
        int64_t ms;
    } units[] = {{"", CONFIG_MS_PER_S},
                 {"s", CONFIG_MS_PER_S},
                 {"m", 60 * CONFIG_MS_PER_S},
                 {"h", 3600 * CONFIG_MS_PER_S},
                 {"d", CONFIG_MS_PER_DAY}};
    const char *end;
    uint64_t n;

    if (s == NULL || config_parse_u64(s, &end, &n) != 0)
        return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].suffix) != 0)
            continue;
        if (n > (uint64_t)(INT64_MAX / units[i].ms))
            return -1;
        *ms = (int64_t)n * units[i].ms;
        return 0;
    }
    return -1;
}

int config_parse_count(const char *s, uint64_t *v)
{
    char *end;

    if (s == NULL || !isdigit((unsigned char)s[0]))
        return -1;
    errno = 0;
    unsigned long long n = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return -1;
    *v = n;
    return 0;
}

int config_parse_size(const char *s, uint64_t *bytes)
{
    static const struct {
        const char *suffix;
        uint64_t mult;
    } units[] = {{"", 1},
                 {"b", 1},
                 {"k", CONFIG_KIB},
                 {"kb", CONFIG_KIB},
                 {"kib", CONFIG_KIB},
                 {"m", CONFIG_MIB},
                 {"mb", CONFIG_MIB},
                 {"mib", CONFIG_MIB},
                 {"g", CONFIG_GIB},
                 {"gb", CONFIG_GIB},
                 {"gib", CONFIG_GIB},
                 {"t", CONFIG_TIB},
                 {"tb", CONFIG_TIB},
                 {"tib", CONFIG_TIB}};
    const char *end;
    uint64_t n;

    if (s == NULL || config_parse_u64(s, &end, &n) != 0)
        return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(end, units[i].suffix) != 0)
            continue;
        if (n > UINT64_MAX / units[i].mult)
            return -1;
        *bytes = n * units[i].mult;
        return 0;
    }
    return -1;
}

/* Renders ms in the largest unit that divides it: 2419200000 -> "28d", 5400000 -> "90m". */
void config_fmt_duration(char *buf, size_t len, int64_t ms)
{
    /* 24h stays "24h"; whole multiples of two days and more read better as days. */
    if (ms == 0)
        snprintf(buf, len, "0");
    else if (ms % CONFIG_MS_PER_DAY == 0 && ms / CONFIG_MS_PER_DAY >= 2)
        snprintf(buf, len, "%" PRId64 "d", ms / CONFIG_MS_PER_DAY);
    else if (ms % (3600 * CONFIG_MS_PER_S) == 0)
        snprintf(buf, len, "%" PRId64 "h", ms / (3600 * CONFIG_MS_PER_S));
    else if (ms % (60 * CONFIG_MS_PER_S) == 0)
        snprintf(buf, len, "%" PRId64 "m", ms / (60 * CONFIG_MS_PER_S));
    else if (ms % CONFIG_MS_PER_S == 0)
        snprintf(buf, len, "%" PRId64 "s", ms / CONFIG_MS_PER_S);
    else
        snprintf(buf, len, "%" PRId64 "ms", ms);
}

void config_fmt_size(char *buf, size_t len, uint64_t b)
{
    if (b != 0 && b % CONFIG_TIB == 0)
        snprintf(buf, len, "%" PRIu64 "TiB", b / CONFIG_TIB);
    else if (b != 0 && b % CONFIG_GIB == 0)
        snprintf(buf, len, "%" PRIu64 "GiB", b / CONFIG_GIB);
    else if (b != 0 && b % CONFIG_MIB == 0)
        snprintf(buf, len, "%" PRIu64 "MiB", b / CONFIG_MIB);
    else if (b != 0 && b % CONFIG_KIB == 0)
        snprintf(buf, len, "%" PRIu64 "KiB", b / CONFIG_KIB);
    else
        snprintf(buf, len, "%" PRIu64, b);
}

int config_parse_hostport(const char *v, const char *origin, char *host_out, size_t hostlen,
                          uint16_t *port_out, char *errbuf, size_t errlen)
{
    const char *host, *colon, *port_s, *end;
    size_t hlen;
    uint64_t port;

    if (v[0] == '[') {
        const char *rb = strchr(v, ']');
        if (rb == NULL || rb[1] != ':') {
            errbuf_printf(errbuf, errlen, "invalid %s \"%s\": expected [IPV6]:PORT", origin, v);
            return -1;
        }
        host = v + 1;
        hlen = (size_t)(rb - host);
        port_s = rb + 2;
    } else {
        colon = strrchr(v, ':');
        if (colon == NULL) {
            errbuf_printf(errbuf, errlen, "invalid %s \"%s\": expected HOST:PORT", origin, v);
            return -1;
        }
        if (memchr(v, ':', (size_t)(colon - v)) != NULL) {
            errbuf_printf(errbuf, errlen,
                          "invalid %s \"%s\": put an IPv6 address in brackets, e.g. [::1]:8080",
                          origin, v);
            return -1;
        }
        host = v;
        hlen = (size_t)(colon - v);
        port_s = colon + 1;
    }
    if (hlen == 0 || hlen >= hostlen) {
        errbuf_printf(errbuf, errlen, "invalid %s \"%s\": the host is empty or too long", origin,
                      v);
        return -1;
    }
    if (config_parse_u64(port_s, &end, &port) != 0 || *end != '\0' || port > 65535) {
        errbuf_printf(errbuf, errlen, "invalid %s \"%s\": the port must be a number 0..65535",
                      origin, v);
        return -1;
    }
    memcpy(host_out, host, hlen);
    host_out[hlen] = '\0';
    if (memchr(host, ':', hlen) != NULL) {
        unsigned char a6[16];
        if (inet_pton(AF_INET6, host_out, a6) != 1) {
            errbuf_printf(errbuf, errlen, "invalid %s \"%s\": not an IPv6 address", origin, v);
            return -1;
        }
    }
    for (size_t i = 0; i < hlen; i++) {
        if (isspace((unsigned char)host[i]) || iscntrl((unsigned char)host[i])) {
            errbuf_printf(errbuf, errlen, "invalid %s \"%s\": blank in the host", origin, v);
            return -1;
        }
    }
    *port_out = (uint16_t)port;
    return 0;
}

/* Adds the comma-separated KEY[:SOURCE] items of `v`. */
int config_add_keys(config_t *cfg, const char *v, const char *origin, char *errbuf, size_t errlen)
{
    const char *p = v;

    for (;;) {
        const char *comma = strchr(p, ',');
        const char *e = comma != NULL ? comma : p + strlen(p);
        const char *b = p;

        while (b < e && isspace((unsigned char)*b))
            b++;
        while (e > b && isspace((unsigned char)e[-1]))
            e--;
        if (b == e) {
            errbuf_printf(errbuf, errlen, "invalid %s \"%s\": empty write key", origin, v);
            return -1;
        }
        const char *sep = memchr(b, ':', (size_t)(e - b));
        size_t klen = (size_t)((sep != NULL ? sep : e) - b);
        const char *src = sep != NULL ? sep + 1 : "default";
        size_t slen = sep != NULL ? (size_t)(e - src) : strlen("default");

        if (klen == 0) {
            errbuf_printf(errbuf, errlen, "invalid %s \"%s\": empty write key", origin, v);
            return -1;
        }
        if (slen == 0) {
            errbuf_printf(errbuf, errlen, "invalid %s \"%s\": empty source after ':'", origin, v);
            return -1;
        }
        for (const char *c = b; c < e; c++) {
            if (isspace((unsigned char)*c) || iscntrl((unsigned char)*c)) {
                errbuf_printf(errbuf, errlen,
                              "invalid %s: blank or control character in a write key", origin);
                return -1;
            }
        }
        if (klen + slen + 2 > sizeof cfg->key_storage[0]) {
            errbuf_printf(errbuf, errlen,
                          "invalid %s: write key or source too long (max %zu bytes)", origin,
                          sizeof cfg->key_storage[0] - 2);
            return -1;
        }
        if (cfg->nwrite_keys == CONFIG_MAX_WRITE_KEYS) {
            errbuf_printf(errbuf, errlen, "invalid %s: more than %d write keys", origin,
                          CONFIG_MAX_WRITE_KEYS);
            return -1;
        }
        for (size_t i = 0; i < cfg->nwrite_keys; i++) {
            const char *k = cfg->write_keys[i].key;
            if (strlen(k) == klen && memcmp(k, b, klen) == 0) {
                /* Two sources for one key would make the source ambiguous. */
                errbuf_printf(errbuf, errlen, "invalid %s: the same write key is given twice",
                              origin);
                return -1;
            }
        }
        char *slot = cfg->key_storage[cfg->nwrite_keys];
        memcpy(slot, b, klen);
        slot[klen] = '\0';
        memcpy(slot + klen + 1, src, slen);
        slot[klen + 1 + slen] = '\0';
        cfg->write_keys[cfg->nwrite_keys].key = slot;
        cfg->write_keys[cfg->nwrite_keys].source = slot + klen + 1;
        cfg->nwrite_keys++;

        if (comma == NULL)
            return 0;
        p = comma + 1;
    }
}

/* Adds one NAME=VALUE librdkafka setting (librdkafka itself checks name and value later). */
int config_add_kafka_opt(config_t *cfg, const char *v, const char *origin, char *errbuf,
                         size_t errlen)
{
    const char *eq = strchr(v, '=');
    size_t n = strlen(v);

    if (eq == NULL || eq == v) {
        errbuf_printf(errbuf, errlen, "invalid %s: expected NAME=VALUE", origin);
        return -1;
    }
    if (n >= sizeof cfg->kafka_opt_storage[0]) {
        errbuf_printf(errbuf, errlen, "invalid %s: longer than %zu bytes", origin,
                      sizeof cfg->kafka_opt_storage[0] - 1);
        return -1;
    }
    if (cfg->nkafka_opts == CONFIG_MAX_KAFKA_OPTS) {
        errbuf_printf(errbuf, errlen, "invalid %s: more than %d settings", origin,
                      CONFIG_MAX_KAFKA_OPTS);
        return -1;
    }
    memcpy(cfg->kafka_opt_storage[cfg->nkafka_opts], v, n + 1);
    cfg->kafka_opts[cfg->nkafka_opts] = cfg->kafka_opt_storage[cfg->nkafka_opts];
    cfg->nkafka_opts++;
    return 0;
}

/* The variable's form of a K_LIST: one item a line (values may hold commas); blank lines
 * skipped. */
int config_add_kafka_opt_lines(config_t *cfg, const char *v, const char *origin, char *errbuf,
                               size_t errlen)
{
    char item[sizeof cfg->kafka_opt_storage[0]];
    for (const char *p = v; *p != '\0';) {
        size_t n = strcspn(p, "\n");
        size_t m = n;
        while (m > 0 && (p[m - 1] == '\r' || p[m - 1] == ' ' || p[m - 1] == '\t'))
            m--;
        if (m >= sizeof item) {
            errbuf_printf(errbuf, errlen, "invalid %s: a line longer than %zu bytes", origin,
                          sizeof item - 1);
            return -1;
        }
        memcpy(item, p, m);
        item[m] = '\0';
        if (m > 0 && config_add_kafka_opt(cfg, item, origin, errbuf, errlen) != 0)
            return -1;
        p += n;
        if (*p == '\n')
            p++;
    }
    return 0;
}
