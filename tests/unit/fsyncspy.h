/*
 * fsyncspy.h: records which files and directories the code under test fsyncs,
 * by defining fsync() in the test binary (the executable's definition wins
 * over libc's, also for the storage library linked into it) and passing each
 * call on to libc's. Include it in exactly one file of a test binary.
 *
 * fsyncspy_reset() forgets what was recorded; fsyncspy_synced(path) says
 * whether the file or directory at `path` (by device and inode) was fsynced
 * since. Not thread-safe: for single-threaded tests.
 */
#ifndef INGESTD_FSYNCSPY_H
#define INGESTD_FSYNCSPY_H

#include <dlfcn.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#define FSYNCSPY_MAX 256

static struct {
    dev_t dev[FSYNCSPY_MAX];
    ino_t ino[FSYNCSPY_MAX];
    int n;
} fsyncspy;

int fsync(int fd)
{
    static int (*real)(int);
    struct stat st;
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "fsync");
    int rc = real(fd);
    if (rc == 0 && fstat(fd, &st) == 0 && fsyncspy.n < FSYNCSPY_MAX) {
        fsyncspy.dev[fsyncspy.n] = st.st_dev;
        fsyncspy.ino[fsyncspy.n++] = st.st_ino;
    }
    return rc;
}

static inline void fsyncspy_reset(void)
{
    fsyncspy.n = 0;
}

static inline bool fsyncspy_synced(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return false;
    for (int i = 0; i < fsyncspy.n; i++)
        if (fsyncspy.dev[i] == st.st_dev && fsyncspy.ino[i] == st.st_ino)
            return true;
    return false;
}

#endif
