/* settings.c: DIR/WINDOW, the window settings of the server that owns a data dir. */
#include "storage/window/settings.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/datadir.h"
#include "storage/fsutil.h"

#define WINSETTINGS_MAX 1024 /* bytes of the file: a few short lines */

static int format(char *buf, size_t len, const winsettings_t *s)
{
    return snprintf(buf, len,
                    "window_ms %" PRId64 "\nmax_keys %" PRIu64 "\nyoung_keys %" PRIu64 "\n",
                    s->window_ms, s->max_keys, s->young_keys);
}

/* One line's value into *v: 0, or -1 when it is not a whole number. */
static int parse_u64(const char *text, uint64_t *v)
{
    char *end = NULL;
    if (*text < '0' || *text > '9')
        return -1;
    errno = 0;
    unsigned long long n = strtoull(text, &end, 10);
    if (errno != 0 || (*end != '\n' && *end != '\0'))
        return -1;
    *v = n;
    return 0;
}

int winsettings_read(const char *data_dir, winsettings_t *out)
{
    char buf[WINSETTINGS_MAX + 1];
    size_t len = 0;
    char *path = datadir_path(data_dir, DATADIR_WINDOW);
    if (!path)
        return -1;
    int rc = fsutil_read_small(path, buf, WINSETTINGS_MAX, &len);
    free(path);
    if (rc != 0)
        return errno == ENOENT ? 1 : -1;
    buf[len] = '\0';
    winsettings_t s = {0};
    uint64_t v;
    unsigned seen = 0; /* a bit per setting */
    for (char *line = buf, *nl; line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        char *sp = strchr(line, ' ');
        if (!sp || (nl && sp > nl))
            continue;
        size_t n = (size_t)(sp - line);
        bool window = n == 9 && strncmp(line, "window_ms", n) == 0;
        bool max = n == 8 && strncmp(line, "max_keys", n) == 0;
        bool young = n == 10 && strncmp(line, "young_keys", n) == 0;
        if (!window && !max && !young)
            continue;
        if (parse_u64(sp + 1, &v) != 0 || (window && v > INT64_MAX))
            goto invalid;
        if (window)
            s.window_ms = (int64_t)v;
        else if (max)
            s.max_keys = v;
        else
            s.young_keys = v;
        seen |= window ? 1u : max ? 2u : 4u;
    }
    if (seen != 7u || s.window_ms <= 0 || s.young_keys == 0)
        goto invalid;
    *out = s;
    return 0;
invalid:
    errno = EINVAL;
    return -1;
}

int winsettings_write(const char *data_dir, const winsettings_t *s)
{
    winsettings_t old;
    char buf[WINSETTINGS_MAX];
    if (winsettings_read(data_dir, &old) == 0 && old.window_ms == s->window_ms &&
        old.max_keys == s->max_keys && old.young_keys == s->young_keys)
        return 0;
    int n = format(buf, sizeof(buf), s);
    char *path = datadir_path(data_dir, DATADIR_WINDOW);
    if (!path)
        return -1;
    int rc = fsutil_write_atomic(path, buf, (size_t)n, 0644);
    free(path);
    return rc;
}
