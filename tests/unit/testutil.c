/* testutil.c: helpers shared by the unit tests (see testutil.h). */
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"

int tu_tempdir(char *buf, size_t len, const char *tag)
{
    const char *base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    int n = snprintf(buf, len, "%s/ingestd-test-%s-XXXXXX", base, tag);
    if (n < 0 || (size_t)n >= len || !mkdtemp(buf)) {
        if (len > 0)
            buf[0] = '\0';
        if (n >= 0 && (size_t)n >= len)
            errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int tu_rm_rf(const char *path)
{
    /* FTW_DEPTH: a directory's entries go before the directory; FTW_PHYS: links are removed,
     * not followed out of the tree. */
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

int tu_fixture_setup(void **state, const char *tag, const char *sub)
{
    tu_fixture_t *fx = calloc(1, sizeof(*fx));
    if (!fx || tu_tempdir(fx->base, sizeof(fx->base), tag) != 0) {
        free(fx);
        return -1;
    }
    int n = snprintf(fx->dir, sizeof(fx->dir), "%s%s%s", fx->base, sub ? "/" : "", sub ? sub : "");
    if (n < 0 || (size_t)n >= sizeof(fx->dir)) {
        rmdir(fx->base);
        free(fx);
        return -1;
    }
    *state = fx;
    return 0;
}

int tu_fixture_teardown(void **state)
{
    tu_fixture_t *fx = *state;
    int rc = tu_rm_rf(fx->base);
    free(fx);
    *state = NULL;
    return rc;
}

int tu_read_file(const char *path, char **out, size_t *len)
{
    char *buf = NULL;
    size_t n = 0, cap = 0;
    ssize_t got;
    int rc = -1;
    int fd = open(path, O_RDONLY);

    *out = NULL;
    if (fd < 0)
        return -1;
    for (;;) {
        if (cap - n < 4096 + 1) {
            char *p = realloc(buf, cap * 2 + 8192);
            if (!p)
                goto out;
            buf = p;
            cap = cap * 2 + 8192;
        }
        got = read(fd, buf + n, cap - n - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            goto out;
        if (got == 0)
            break;
        n += (size_t)got;
    }
    buf[n] = '\0';
    *out = buf;
    buf = NULL;
    if (len)
        *len = n;
    rc = 0;
out:
    free(buf);
    close(fd);
    return rc;
}

/* Writes all n bytes, resuming after short writes; closes fd either way. */
static int write_all_close(int fd, const void *data, size_t n)
{
    const char *p = data;
    int rc = 0;
    if (fd < 0)
        return -1;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            rc = -1;
            break;
        }
        p += w;
        n -= (size_t)w;
    }
    if (close(fd) != 0)
        rc = -1;
    return rc;
}

int tu_write_file(const char *path, const void *data, size_t n)
{
    return write_all_close(open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644), data, n);
}

int tu_append_file(const char *path, const void *data, size_t n)
{
    return write_all_close(open(path, O_WRONLY | O_APPEND), data, n);
}

int tu_copy_file(const char *from, const char *to)
{
    char *buf = NULL;
    size_t n = 0;
    if (tu_read_file(from, &buf, &n) != 0)
        return -1;
    int rc = tu_write_file(to, buf, n);
    free(buf);
    return rc;
}

int64_t tu_now_ms(void)
{
    return clk_wall_ms();
}

int64_t tu_monotonic_ms(void)
{
    return clk_mono_ms();
}

void tu_waiter_init(tu_waiter_t *w)
{
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->pending = 0;
    w->calls = 0;
}

void tu_waiter_destroy(tu_waiter_t *w)
{
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

void tu_waiter_add(tu_waiter_t *w, size_t n)
{
    pthread_mutex_lock(&w->mu);
    w->pending += n;
    pthread_mutex_unlock(&w->mu);
}

void tu_waiter_done(tu_waiter_t *w)
{
    pthread_mutex_lock(&w->mu);
    w->pending--;
    w->calls++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void tu_waiter_wait(tu_waiter_t *w)
{
    pthread_mutex_lock(&w->mu);
    while (w->pending > 0)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}
