/* groups.c: consumer group offsets, one small file per group, replaced atomically. */
#include "storage/log/groups.h"

#include "storage/datadir.h"
#include "storage/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PATH_LEN 4096

int groups_valid_name(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > GROUPS_NAME_MAX || name[0] == '.')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '.' || ch == '_' || ch == '-';
        if (!ok)
            return 0;
    }
    return 1;
}

/* DATA/groups, or DATA/groups/NAME. */
static int path_of(char *out, const char *data_dir, const char *name)
{
    if (datadir_put(out, PATH_LEN, data_dir, DATADIR_GROUPS) != 0)
        return -1;
    size_t len = strlen(out);
    int n = name ? snprintf(out + len, PATH_LEN - len, "/%s", name) : 0;
    return n < 0 || (size_t)n >= PATH_LEN - len ? -1 : 0;
}

/* Parses "123\n": the whole file, one decimal number. */
static int parse(const char *buf, size_t len, uint64_t *offset)
{
    uint64_t v = 0;
    size_t i = 0;
    for (; i < len && buf[i] >= '0' && buf[i] <= '9'; i++) {
        uint64_t d = (uint64_t)(buf[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return GROUPS_CORRUPT;
        v = v * 10 + d;
    }
    if (i == 0 || (i < len && !(buf[i] == '\n' && i + 1 == len)))
        return GROUPS_CORRUPT;
    *offset = v;
    return GROUPS_OK;
}

int groups_get(const char *data_dir, const char *name, uint64_t *offset)
{
    char path[PATH_LEN], buf[32];
    if (!groups_valid_name(name))
        return GROUPS_INVALID;
    if (path_of(path, data_dir, name) != 0)
        return GROUPS_INVALID;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? GROUPS_NOTFOUND : GROUPS_EIO;
    ssize_t n = read(fd, buf, sizeof(buf));
    int saved = errno;
    close(fd);
    if (n < 0) {
        errno = saved;
        return GROUPS_EIO;
    }
    return parse(buf, (size_t)n, offset);
}

int groups_commit(const char *data_dir, const char *name, uint64_t offset)
{
    char dir[PATH_LEN], path[PATH_LEN], buf[32];
    if (!groups_valid_name(name))
        return GROUPS_INVALID;
    if (path_of(dir, data_dir, NULL) != 0 || path_of(path, data_dir, name) != 0)
        return GROUPS_INVALID;
    /* Durably: the first group's offset file must not vanish with a directory never synced. */
    if (fsutil_mkdirs(dir) != 0)
        return GROUPS_EIO;
    int len = snprintf(buf, sizeof(buf), "%" PRIu64 "\n", offset);
    /* The old offset or the new, never half of one, and durable before it returns. */
    return fsutil_write_atomic(path, buf, (size_t)len, 0644) == 0 ? GROUPS_OK : GROUPS_EIO;
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const groups_entry_t *)a)->name, ((const groups_entry_t *)b)->name);
}

int groups_list(const char *data_dir, groups_entry_t **out, size_t *n)
{
    char dir[PATH_LEN];
    groups_entry_t *v = NULL;
    size_t cnt = 0, cap = 0;
    struct dirent *e;

    *out = NULL;
    *n = 0;
    if (path_of(dir, data_dir, NULL) != 0)
        return GROUPS_INVALID;
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? GROUPS_OK : GROUPS_EIO;
    while ((e = readdir(d)) != NULL) {
        uint64_t off;
        /* fsutil's temporary files start with '.', which no group name does. */
        if (!groups_valid_name(e->d_name))
            continue;
        if (groups_get(data_dir, e->d_name, &off) != GROUPS_OK)
            continue;
        if (cnt == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            groups_entry_t *nv = realloc(v, ncap * sizeof(*nv));
            if (!nv) {
                free(v);
                closedir(d);
                return GROUPS_NOMEM;
            }
            v = nv;
            cap = ncap;
        }
        memcpy(v[cnt].name, e->d_name, strlen(e->d_name) + 1); /* valid names fit */
        v[cnt].offset = off;
        cnt++;
    }
    closedir(d);
    if (cnt > 1)
        qsort(v, cnt, sizeof(*v), cmp_entry);
    *out = v;
    *n = cnt;
    return GROUPS_OK;
}

const char *groups_strerror(int status)
{
    switch (status) {
    case GROUPS_OK:
        return "ok";
    case GROUPS_NOTFOUND:
        return "no such group";
    case GROUPS_INVALID:
        return "invalid group name (1..64 of A-Z a-z 0-9 . _ -, not starting with '.')";
    case GROUPS_EIO:
        return "I/O error";
    case GROUPS_CORRUPT:
        return "group file does not hold an offset";
    case GROUPS_NOMEM:
        return "out of memory";
    default:
        return "unknown groups error";
    }
}
