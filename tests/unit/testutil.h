/* testutil.h: helpers shared by the unit tests: temp dirs, whole-file I/O, a done-callback waiter.
 */
#ifndef INGESTD_TESTUTIL_H
#define INGESTD_TESTUTIL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/*
 * None of these functions asserts: each returns 0 on success and -1 on failure (errno set by
 * the failing call), so a test wraps it in assert_int_equal(..., 0) and a cmocka setup or
 * teardown can return the failure. Nothing here is tied to cmocka.
 */

/*
 * Creates a fresh directory "<base>/ingestd-test-<tag>-XXXXXX" with mkdtemp, where <base> is
 * $TMPDIR when it is set and not empty, else "/tmp". The path is written NUL-terminated to
 * buf (len bytes, caller-owned). Returns -1, leaving buf an empty string, when the path does
 * not fit or mkdtemp fails. The caller removes the directory, e.g. with tu_rm_rf().
 */
int tu_tempdir(char *buf, size_t len, const char *tag);

/*
 * Removes path and, when it is a directory, everything below it (depth first, symlinks not
 * followed). Returns 0 when everything was removed, -1 on the first failure.
 */
int tu_rm_rf(const char *path);

/*
 * The fixture of the tests that work in a temporary directory: base is a fresh tu_tempdir()
 * and dir the directory under test inside it, "<base>/<sub>" (not created: the module under
 * test creates it), or base itself when sub is NULL.
 */
typedef struct {
    char base[256];
    char dir[272];
} tu_fixture_t;

/*
 * For cmocka's setup: allocates a tu_fixture_t, creates its base dir (tag as in tu_tempdir())
 * and stores it in *state. Returns 0, or -1 with nothing allocated or created.
 * tu_fixture_teardown() removes base with everything below it and frees the fixture; it
 * returns tu_rm_rf()'s result.
 */
int tu_fixture_setup(void **state, const char *tag, const char *sub);
int tu_fixture_teardown(void **state);

/*
 * Reads the whole of path into a malloc'ed buffer with one extra NUL byte after the data
 * (so text can be used as a string). On success *out is the buffer, which the caller frees,
 * and *len (when len is not NULL) the number of bytes read, NUL not counted. On failure
 * *out is NULL.
 */
int tu_read_file(const char *path, char **out, size_t *len);

/* Creates or truncates path (mode 0644 when created) and writes the n bytes of data to it. */
int tu_write_file(const char *path, const void *data, size_t n);

/* Appends the n bytes of data at the end of path, which must exist. */
int tu_append_file(const char *path, const void *data, size_t n);

/* Copies the contents of from to to (created or truncated, mode 0644 when created). */
int tu_copy_file(const char *from, const char *to);

/* Wall-clock time (CLOCK_REALTIME) in milliseconds since the epoch. */
int64_t tu_now_ms(void);

/* CLOCK_MONOTONIC in milliseconds (the clock of commit_watch deadlines). */
int64_t tu_monotonic_ms(void);

/*
 * Awaits done callbacks without sleeping: a count of pending callbacks under a mutex.
 * The test calls tu_waiter_add() before handing work to another thread, that thread's
 * callback calls tu_waiter_done(), and tu_waiter_wait() blocks until nothing is pending.
 * Whatever the callback writes before tu_waiter_done() is visible to the thread once
 * tu_waiter_wait() returns. The fields may be read directly once no callback can run
 * any more; the struct is caller-owned and holds no heap memory.
 */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t pending; /* added minus done */
    size_t calls;   /* tu_waiter_done() calls so far */
} tu_waiter_t;

/* Initialises w with nothing pending; pair with tu_waiter_destroy(). */
void tu_waiter_init(tu_waiter_t *w);
void tu_waiter_destroy(tu_waiter_t *w);
/* Expects n more callbacks. */
void tu_waiter_add(tu_waiter_t *w, size_t n);
/* One callback has finished: callable from any thread. */
void tu_waiter_done(tu_waiter_t *w);
/* Blocks until every added callback is done. */
void tu_waiter_wait(tu_waiter_t *w);

#endif
