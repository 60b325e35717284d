/* secret.c: DIR/secret, the data dir's hash secret, read and written in one place. */
#include "storage/secret.h"

#include <errno.h>
#include <stdlib.h>

#include "storage/datadir.h"
#include "storage/fsutil.h"

int secret_read(const char *data_dir, uint8_t out[KEYHASH_SECRET_LEN])
{
    char *path = datadir_path(data_dir, DATADIR_SECRET);
    size_t n = 0;
    int rc = -1, saved;
    if (!path)
        return -1;
    if (fsutil_read_small(path, out, KEYHASH_SECRET_LEN, &n) == 0) {
        rc = n == KEYHASH_SECRET_LEN ? 1 : -1;
        saved = rc == 1 ? 0 : EINVAL;
    } else {
        rc = errno == ENOENT ? 0 : -1;
        saved = errno == EFBIG ? EINVAL : errno; /* longer than a secret */
    }
    free(path);
    errno = saved;
    return rc;
}

int secret_write(const char *data_dir, const uint8_t secret[KEYHASH_SECRET_LEN])
{
    char *path = datadir_path(data_dir, DATADIR_SECRET);
    if (!path)
        return -1;
    int rc = fsutil_write_atomic(path, secret, KEYHASH_SECRET_LEN, 0600);
    int saved = errno;
    free(path);
    errno = saved;
    return rc;
}
