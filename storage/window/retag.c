/* retag.c: tagging the keys of records from before keys carried tags (storage/window/retag.h). */
#include "storage/window/retag.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/datadir.h"
#include "storage/fsutil.h"

/* Fixed width, like DIR/store/ACKED: 20 digits and a newline. */
#define FROM_LEN 21

int retag_read_from(const char *data_dir, uint64_t *from)
{
    char buf[FROM_LEN + 1], *path = datadir_path(data_dir, DATADIR_TAGGED_FROM);
    size_t n = 0;
    int rc = -1;

    *from = RETAG_NONE;
    if (!path)
        return -1;
    if (fsutil_read_small(path, buf, FROM_LEN, &n) != 0) {
        if (errno == ENOENT)
            rc = 1;
        goto out;
    }
    uint64_t v = 0;
    size_t i = 0;
    /* Only the n bytes read: a short file leaves the rest of buf unset. */
    for (; n == FROM_LEN && i < 20 && buf[i] >= '0' && buf[i] <= '9'; i++)
        v = v * 10 + (uint64_t)(buf[i] - '0');
    if (n != FROM_LEN || i != 20 || buf[20] != '\n') {
        errno = EINVAL; /* not what retag_write_from writes: never guess an offset */
        goto out;
    }
    *from = v;
    rc = 0;
out:
    free(path);
    return rc;
}

int retag_write_from(const char *data_dir, uint64_t from)
{
    char buf[FROM_LEN + 1], *path = datadir_path(data_dir, DATADIR_TAGGED_FROM);
    if (!path)
        return -1;
    snprintf(buf, sizeof(buf), "%020llu\n", (unsigned long long)from);
    int rc = fsutil_write_atomic(path, buf, FROM_LEN, 0644);
    int saved = errno;
    free(path);
    errno = saved;
    return rc;
}

int retag_source_of(const char *json, size_t json_len, char **source, size_t *len)
{
    int rc = -1;
    *source = NULL;
    *len = 0;
    /* JSON_ALLOW_NUL as api/batch.c parses events: a "\u0000" anywhere must not lose the
     * source. */
    json_t *root = json_loadb(json, json_len, JSON_ALLOW_NUL, NULL);
    json_t *s = root ? json_object_get(root, "source") : NULL;
    if (json_is_string(s)) {
        *len = json_string_length(s);
        *source = malloc(*len + 1);
        if (*source) {
            memcpy(*source, json_string_value(s), *len + 1);
            rc = 0;
        }
    }
    json_decref(root);
    return rc;
}

/* ---- the fast path: a scan of the top level, for the events ingestd writes ---- */

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* `p` at a '"': just past the closing quote, or NULL; *esc: the string holds a backslash. */
static const char *skip_string(const char *p, const char *end, bool *esc)
{
    *esc = false;
    for (p++; p < end; p++) {
        if (*p == '\\') {
            *esc = true;
            if (++p == end)
                return NULL;
        } else if (*p == '"') {
            return p + 1;
        }
    }
    return NULL;
}

/* One value: a string, an object or array (by depth, its strings skipped whole), or a scalar
 * up to what ends it. NULL when it is cut short. */
static const char *skip_value(const char *p, const char *end)
{
    bool esc;
    if (p < end && *p == '"')
        return skip_string(p, end, &esc);
    if (p < end && (*p == '{' || *p == '[')) {
        size_t depth = 0;
        while (p < end) {
            if (*p == '"') {
                if (!(p = skip_string(p, end, &esc)))
                    return NULL;
                continue;
            }
            if (*p == '{' || *p == '[')
                depth++;
            else if ((*p == '}' || *p == ']') && --depth == 0)
                return p + 1;
            p++;
        }
        return NULL;
    }
    const char *v = p;
    while (p < end && !strchr(",}] \t\n\r", *p))
        p++;
    return p > v ? p : NULL;
}

/*
 * The top-level "source" of an object, found by a scan instead of a parse
 * (a replay reads millions): 1 with *src and *len naming it in `json`; 0 when
 * the scan cannot be sure (no object, an escape in a member name or in the
 * source, "source" twice, no source), and jansson decides.
 */
static int source_scan(const char *json, size_t n, const char **src, size_t *len)
{
    const char *p = skip_ws(json, json + n), *end = json + n;
    bool esc, found = false;
    if (p >= end || *p != '{')
        return 0;
    p = skip_ws(p + 1, end);
    while (p < end && *p == '"') {
        const char *k = p;
        if (!(p = skip_string(p, end, &esc)) || esc)
            return 0;
        bool is_source = p - k == 8 && memcmp(k, "\"source\"", 8) == 0;
        p = skip_ws(p, end);
        if (p >= end || *p != ':')
            return 0;
        p = skip_ws(p + 1, end);
        if (is_source) {
            const char *v = p;
            if (found || p >= end || *p != '"' || !(p = skip_string(p, end, &esc)) || esc)
                return 0;
            *src = v + 1;
            *len = (size_t)(p - v - 2);
            found = true;
        } else if (!(p = skip_value(p, end))) {
            return 0;
        }
        p = skip_ws(p, end);
        if (p < end && *p == '}')
            return found && skip_ws(p + 1, end) == end;
        if (p >= end || *p != ',')
            return 0;
        p = skip_ws(p + 1, end);
    }
    return 0;
}

enum retag_result retag_record(const uint8_t secret[KEYHASH_SECRET_LEN], uint64_t from,
                               log_record_t *rec)
{
    const char *src = NULL;
    char *copy = NULL;
    size_t len = 0;
    if (rec->offset >= from)
        return RETAG_TAGGED;
    if (source_scan(rec->data, rec->len, &src, &len) != 1) {
        if (retag_source_of(rec->data, rec->len, &copy, &len) != 0)
            return RETAG_NOSOURCE;
        src = copy;
    }
    keyhash_set_source(rec->key, keyhash_source_tag(secret, src, len));
    free(copy);
    return RETAG_RETAGGED;
}
