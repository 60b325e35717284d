/*
 * secret: the data dir's hash secret file, DIR/secret (DATADIR_SECRET): its one reader and its
 * one writer. LMDB's meta holds the same secret.
 */
#ifndef INGESTD_SECRET_H
#define INGESTD_SECRET_H

#include <stdint.h>

#include "storage/window/keyhash.h"

/*
 * Reads DIR/secret into `out`. Returns 1 when it holds a secret, 0 when there
 * is none (errno ENOENT), -1 on error with errno set (EINVAL: the file is not
 * KEYHASH_SECRET_LEN bytes long; `out` is then unspecified).
 */
int secret_read(const char *data_dir, uint8_t out[KEYHASH_SECRET_LEN]);

/*
 * Writes `secret` to DIR/secret, mode 0600, atomically and durably
 * (fsutil_write_atomic: a temporary file fsynced, renamed over, the data dir
 * fsynced): a crash leaves the old file or the new, whole. DIR must exist.
 * Returns 0, or -1 with errno set.
 */
int secret_write(const char *data_dir, const uint8_t secret[KEYHASH_SECRET_LEN]);

#endif
