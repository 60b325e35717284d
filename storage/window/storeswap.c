/*
 * storeswap.c: the rebuilt store's sibling directory and its exchange with DIR/store.
 *
 * DESIGN. The old rebuild renamed DIR/store aside and built the new store in its place: a crash
 * in the middle left a partial DIR/store that the next start accepted, with the old store (and
 * keys only it held) ignored beside it. Building in a sibling, making it wholly durable, and
 * exchanging the two names in one renameat2(RENAME_EXCHANGE) leaves no such instant: both
 * names live in the data dir, so one fsync of it makes the exchange durable, and before that
 * fsync a power loss leaves the exchange done or not, never half (a journalled file system
 * commits one rename as one transaction). What a crash leaves under the sibling's name, before
 * or after the exchange, is never DIR/store: the next rebuild or start removes it.
 */
#include "storage/window/storeswap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "storage/datadir.h"
#include "storage/fsutil.h"

int storeswap_sibling(const char *data_dir, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/" DATADIR_REBUILD_PREFIX "%lld-%ld", data_dir,
                     (long long)time(NULL), (long)getpid());
    if (n < 0 || (size_t)n >= cap) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

int64_t storeswap_leftovers(const char *data_dir, int remove)
{
    DIR *d = opendir(data_dir);
    int64_t n = 0;
    int rc = 0, saved = 0;
    if (!d)
        return errno == ENOENT ? 0 : -1;
    struct dirent *e;
    while (rc == 0 && (errno = 0, e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, DATADIR_REBUILD_PREFIX, strlen(DATADIR_REBUILD_PREFIX)) != 0)
            continue;
        if (remove) {
            char *path = fsutil_join(data_dir, e->d_name);
            if (!path || fsutil_rm_tree(path) != 0) {
                saved = path ? errno : ENOMEM;
                rc = -1;
            }
            free(path);
        }
        if (rc == 0)
            n++;
    }
    if (rc == 0 && errno != 0) {
        saved = errno;
        rc = -1;
    }
    closedir(d);
    if (rc == 0 && remove && n > 0 && fsutil_sync_dir(data_dir) != 0)
        return -1;
    errno = saved;
    return rc == 0 ? n : -1;
}

int storeswap_sync_sibling(const char *sibling)
{
    char *gens = datadir_in(sibling, DATADIR_GENS);
    struct stat sb;
    int rc = gens ? 0 : -1;
    if (rc == 0 && stat(gens, &sb) == 0)
        rc = fsutil_sync_dir(gens);
    int saved = gens ? errno : ENOMEM;
    free(gens);
    if (rc == 0 && fsutil_sync_dir(sibling) != 0)
        return -1;
    errno = saved;
    return rc;
}

int storeswap_exchange(const char *data_dir, const char *sibling, int *exchanged)
{
    char *store = datadir_in(data_dir, DATADIR_STORE);
    int rc = -1, swapped = 0;
    if (!store) {
        errno = ENOMEM;
        goto out;
    }
    struct stat sb;
    if (stat(store, &sb) == 0) {
        if (renameat2(AT_FDCWD, sibling, AT_FDCWD, store, RENAME_EXCHANGE) != 0)
            goto out;
        swapped = 1;
    } else if (errno != ENOENT || rename(sibling, store) != 0) {
        goto out; /* no DIR/store: a plain rename (the lock keeps anyone from making one) */
    }
    /* Both names live in the data dir: its fsync makes the exchange durable, whole. */
    rc = fsutil_sync_dir(data_dir);
out:
    if (exchanged)
        *exchanged = swapped;
    free(store);
    return rc;
}
