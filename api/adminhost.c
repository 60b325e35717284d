/* adminhost: the Host rule of the operator routes without an admin token (adminhost.h). */
#include "api/adminhost.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A Host header longer than this names nothing we allow. */
#define HOST_MAX 255

struct adminhost {
    bool any;    /* "*" */
    char *names; /* "listen-host,name,name" lower-case, without blanks; "" for none */
};

int adminhost_new(const char *listen_host, const char *names, adminhost_t **out)
{
    adminhost_t *a = calloc(1, sizeof(*a));
    size_t n1 = listen_host ? strlen(listen_host) : 0, n2 = names ? strlen(names) : 0;

    *out = NULL;
    if (!a)
        return -1;
    a->names = malloc(n1 + n2 + 3); /* both, a comma after each, the NUL */
    if (!a->names) {
        free(a);
        return -1;
    }
    size_t w = 0;
    const char *parts[2] = {listen_host, names};
    for (int k = 0; k < 2; k++) {
        for (const char *p = parts[k]; p && *p; p++) {
            if (isspace((unsigned char)*p))
                continue;
            a->names[w++] = (char)tolower((unsigned char)*p);
        }
        if (w > 0 && a->names[w - 1] != ',')
            a->names[w++] = ',';
    }
    a->names[w] = '\0';
    /* "*" as one of the names: any Host. */
    for (const char *p = a->names; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] ? 1 : 0))
        if (p[0] == '*' && (p[1] == ',' || p[1] == '\0'))
            a->any = true;
    *out = a;
    return 0;
}

void adminhost_free(adminhost_t *a)
{
    if (!a)
        return;
    free(a->names);
    free(a);
}

/* Whether name[0..n) is one of the comma-separated entries of list (already lower-case). */
static bool listed(const char *list, const char *name, size_t n)
{
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && strncasecmp(p, name, n) == 0)
            return true;
        p += len;
        if (*p == ',')
            p++;
    }
    return false;
}

bool adminhost_allowed(const adminhost_t *a, const char *host)
{
    char name[HOST_MAX + 1];
    size_t n;

    if (!host)
        return true; /* no Host: not a browser (HTTP/1.0) */
    if (a && a->any)
        return true;
    n = strlen(host);
    if (n == 0 || n > HOST_MAX)
        return false;
    if (host[0] == '[') {
        /* "[v6]" or "[v6]:port": an address, which a rebinding page cannot send. */
        const char *rb = strchr(host, ']');
        unsigned char a6[16];
        if (!rb || (size_t)(rb - host - 1) >= sizeof(name))
            return false;
        memcpy(name, host + 1, (size_t)(rb - host - 1));
        name[rb - host - 1] = '\0';
        return inet_pton(AF_INET6, name, a6) == 1;
    }
    memcpy(name, host, n + 1);
    char *colon = strrchr(name, ':');
    if (colon) {
        for (const char *d = colon + 1; *d; d++)
            if (!isdigit((unsigned char)*d))
                return false;
        *colon = '\0';
    }
    n = strlen(name);
    if (n > 0 && name[n - 1] == '.')
        name[--n] = '\0';
    if (n == 0)
        return false;
    unsigned char a4[4];
    if (inet_pton(AF_INET, name, a4) == 1)
        return true;
    /* Browsers resolve localhost and *.localhost to loopback themselves (RFC 6761), never
     * through DNS, so no page can rebind them. */
    if (strcasecmp(name, "localhost") == 0 ||
        (n > 10 && strcasecmp(name + n - 10, ".localhost") == 0))
        return true;
    return a && listed(a->names, name, n);
}
