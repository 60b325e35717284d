/* fsutil.c: file-system helpers of the storage layer. */
#include "storage/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *fsutil_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* The directory that holds `path` (malloc'ed, caller frees): "." or "/" at the top. */
static char *parent_of(const char *path)
{
    char *p = strdup(path);
    if (!p)
        return NULL;
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        p[--n] = '\0';
    char *slash = strrchr(p, '/');
    if (!slash)
        strcpy(p, ".");
    else if (slash == p)
        p[1] = '\0';
    else
        *slash = '\0';
    return p;
}

/* A directory just created: its name durable in its parent, and itself synced. 0 or -1. */
static int sync_created(const char *path, bool itself)
{
    char *parent = parent_of(path);
    int rc = parent ? fsutil_sync_dir(parent) : -1;
    int saved = errno;
    if (rc == 0 && itself) {
        rc = fsutil_sync_dir(path);
        saved = errno;
    }
    free(parent);
    errno = saved;
    return rc;
}

int fsutil_mkdir(const char *path)
{
    if (mkdir(path, 0755) != 0)
        return -1;
    return sync_created(path, true);
}

int fsutil_mkdirs(const char *path)
{
    char *buf = strdup(path);
    int rc = 0;
    bool created = false; /* the last directory tried was new: the leaf, at the end */
    if (!buf)
        return -1;
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0'; /* "a/b/" is "a/b": its last mkdir must be the one that creates b */
    if (n == 0) {
        free(buf);
        errno = ENOENT;
        return -1;
    }
    /* Each new directory's parent is synced right after its mkdir: that parent is the one
     * created just before (synced as a parent in turn), so the whole new chain is durable. */
    for (char *p = buf + 1; rc == 0; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        created = mkdir(buf, 0755) == 0;
        if (created)
            rc = sync_created(buf, false);
        else if (errno != EEXIST)
            rc = -1;
        *p = c;
        if (c == '\0')
            break;
    }
    if (rc == 0 && created)
        rc = fsutil_sync_dir(buf);
    int saved = errno;
    free(buf);
    errno = saved;
    return rc;
}

int fsutil_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

int fsutil_rm_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode))
        return unlink(path);
    DIR *d = opendir(path);
    struct dirent *e;
    int rc = 0;
    if (!d)
        return -1;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char *child = fsutil_join(path, e->d_name);
        rc = child ? fsutil_rm_tree(child) : -1;
        free(child);
    }
    closedir(d);
    return rc == 0 ? rmdir(path) : rc;
}

int fsutil_write_atomic(const char *path, const void *data, size_t len, mode_t mode)
{
    char *dir = strdup(path), *tmp = NULL;
    const char *base = strrchr(path, '/');
    int fd = -1, rc = -1, saved = 0;

    if (!dir)
        return -1;
    if (base) {
        dir[base - path] = '\0';
        base++;
    } else {
        strcpy(dir, ".");
        base = path;
    }
    size_t n = strlen(dir) + strlen(base) + 8;
    tmp = malloc(n);
    if (!tmp)
        goto out;
    snprintf(tmp, n, "%s/.%s.tmp", dir, base);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        goto out;
    if (fsutil_write_all(fd, data, len) != 0 || fsync(fd) != 0)
        goto out;
    close(fd);
    fd = -1;
    if (rename(tmp, path) != 0 || fsutil_sync_dir(dir) != 0)
        goto out;
    rc = 0;
out:
    saved = errno;
    if (fd >= 0)
        close(fd);
    if (rc != 0 && tmp)
        unlink(tmp);
    free(tmp);
    free(dir);
    errno = saved;
    return rc;
}

int fsutil_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0) { /* no progress and no error: say so rather than spin */
            errno = EIO;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int fsutil_pwrite_all(int fd, const void *buf, size_t len, uint64_t at)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = pwrite(fd, p, len, (off_t)at);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0) {
            errno = EIO;
            return -1;
        }
        p += n;
        len -= (size_t)n;
        at += (uint64_t)n;
    }
    return 0;
}

ssize_t fsutil_pread_full(int fd, void *buf, size_t len, uint64_t at)
{
    char *p = buf;
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, p + got, len - got, (off_t)(at + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

int fsutil_read_small(const char *path, void *buf, size_t cap, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t got = 0;
    char *p = buf;
    for (;;) {
        ssize_t r = read(fd, p + got, cap - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int saved = errno;
            close(fd);
            errno = saved;
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
        if (got == cap) {
            char extra;
            if (read(fd, &extra, 1) > 0) {
                close(fd);
                errno = EFBIG;
                return -1;
            }
            break;
        }
    }
    close(fd);
    *len = got;
    return 0;
}
