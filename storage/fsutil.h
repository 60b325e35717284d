/* fsutil: file-system helpers of the storage layer: paths, directories, durable small files. */
#ifndef INGESTD_FSUTIL_H
#define INGESTD_FSUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* "dir/name", malloc'ed (caller frees); NULL when out of memory. */
char *fsutil_join(const char *dir, const char *name);

/*
 * Creates one directory, mode 0755, durably: after the mkdir its parent is
 * fsynced (a directory entry survives a power loss only once its parent is
 * synced) and so is the new directory. Returns 0, or -1 with errno set:
 * EEXIST when it exists (then nothing is synced), or the failing mkdir or
 * fsync's (the directory may then exist, not yet durable).
 */
int fsutil_mkdir(const char *path);

/*
 * mkdir -p with mode 0755, durably: every directory it creates is made
 * durable as by fsutil_mkdir before it returns, so nothing placed in it can
 * be lost with it. Directories that exist are taken as they are (whoever
 * created them made them durable). Returns 0, or -1 with errno set.
 */
int fsutil_mkdirs(const char *path);

/* fsyncs a directory, so the names created, renamed or removed in it are durable. 0 or -1. */
int fsutil_sync_dir(const char *dir);

/* rm -rf. A missing path is success. Returns 0, or -1 with errno set. */
int fsutil_rm_tree(const char *path);

/*
 * Replaces `path` with `len` bytes durably and atomically: a temporary
 * ".NAME.tmp" beside it, written and fsynced, renamed over it, and the
 * directory fsynced. Readers see the old content or the new, never a mix.
 * Returns 0, or -1 with errno set (the temporary file is removed).
 */
int fsutil_write_atomic(const char *path, const void *data, size_t len, mode_t mode);

/*
 * Writes all `len` bytes to fd at its file offset, retrying short writes and
 * EINTR. Returns 0, or -1 with errno set (some bytes may have been written).
 */
int fsutil_write_all(int fd, const void *buf, size_t len);

/* As fsutil_write_all, at offset `at` (pwrite: the file offset is unchanged). */
int fsutil_pwrite_all(int fd, const void *buf, size_t len, uint64_t at);

/*
 * Reads `len` bytes at offset `at`, retrying short reads and EINTR. Returns
 * the bytes read, fewer than len only at the end of the file, or -1 with
 * errno set.
 */
ssize_t fsutil_pread_full(int fd, void *buf, size_t len, uint64_t at);

/*
 * Reads a whole small file into buf (at most cap bytes; a longer file is an
 * error, EFBIG). *len gets the size. Returns 0, or -1 with errno set
 * (ENOENT when it does not exist).
 */
int fsutil_read_small(const char *path, void *buf, size_t cap, size_t *len);

#endif
