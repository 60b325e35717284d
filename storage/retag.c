/* retag.c: tagging the keys of records from before keys carried tags (storage/retag.h). */
#include "storage/retag.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/fsutil.h"

/* Fixed width, like DIR/store/ACKED: 20 digits and a newline. */
#define FROM_LEN 21

int retag_read_from(const char *data_dir, uint64_t *from)
{
    char buf[FROM_LEN + 1], *path = fsutil_join(data_dir, RETAG_FILE);
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
    for (; i < 20 && buf[i] >= '0' && buf[i] <= '9'; i++)
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
    char buf[FROM_LEN + 1], *path = fsutil_join(data_dir, RETAG_FILE);
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

enum retag_result retag_record(const uint8_t secret[KEYHASH_SECRET_LEN], uint64_t from,
                               log_record_t *rec)
{
    char *source = NULL;
    size_t len = 0;
    if (rec->offset >= from)
        return RETAG_TAGGED;
    if (retag_source_of(rec->data, rec->len, &source, &len) != 0)
        return RETAG_NOSOURCE;
    keyhash_set_source(rec->key, keyhash_source_tag(secret, source, len));
    free(source);
    return RETAG_RETAGGED;
}
