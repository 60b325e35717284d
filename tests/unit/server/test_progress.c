/* test_progress.c: the progress line: its text, a terminal gets it, a pipe gets nothing. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/progress.h"

static void test_format(void **state)
{
    (void)state;
    char buf[256];
    progress_format(buf, sizeof(buf), "replaying the log", 250000, 1000000, 125000, "records",
                    NULL);
    assert_string_equal(buf, "replaying the log:  25.0% 250.0k/1.00M records, 125.0k records/s, "
                             "ETA 0:06");
    progress_format(buf, sizeof(buf), "copying", 7200, 7200, 2400, "bytes", "x");
    assert_string_equal(buf, "copying: 100.0% 7200/7200 bytes, 2400 bytes/s  x");
    /* Past an estimated total: 100%, no ETA. */
    progress_format(buf, sizeof(buf), "c", 12, 10, 12, NULL, NULL);
    assert_string_equal(buf, "c: 100.0% 12/10, 12/s");
    /* No rate yet (a phase's first line): neither rate nor ETA. */
    progress_format(buf, sizeof(buf), "c", 4, 10, 0, "keys", NULL);
    assert_string_equal(buf, "c:  40.0% 4/10 keys");
    /* Unknown total: no percent, no ETA; ETA over an hour in h:mm:ss. */
    progress_format(buf, sizeof(buf), "load", 5000, 0, 5000, "events", NULL);
    assert_string_equal(buf, "load: 5000 events, 5000 events/s");
    progress_format(buf, sizeof(buf), "fill", 1, 3602, 1, NULL, NULL);
    assert_string_equal(buf, "fill:   0.0% 1/3602, 1/s, ETA 1:00:01");
}

/* A pipe is no terminal: no progress object, and every call is a no-op. */
static void test_pipe_gets_nothing(void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    FILE *f = fdopen(fds[1], "w");
    assert_non_null(f);
    progress_t *p = progress_new(f);
    assert_null(p);
    progress_update(p, "x", 1, 2, NULL, NULL);
    progress_clear(p);
    progress_free(p);
    fclose(f);
    char c;
    assert_int_equal(read(fds[0], &c, 1), 0); /* nothing was written */
    close(fds[0]);
}

/* A pseudo-terminal is one: \r, the text, the erase; and the line is erased by clear. */
static void test_terminal_gets_the_line(void **state)
{
    (void)state;
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0) {
        /* A container without /dev/pts: say so rather than pass or fail for the wrong reason. */
        print_message("no pseudo-terminal here (posix_openpt: %s)\n", strerror(errno));
        skip();
    }
    assert_int_equal(grantpt(master), 0);
    assert_int_equal(unlockpt(master), 0);
    FILE *f = fopen(ptsname(master), "w");
    assert_non_null(f);
    progress_t *p = progress_new(f);
    assert_non_null(p);
    progress_update(p, "check", 5, 10, "records", NULL);
    progress_update(p, "check", 6, 10, "records", NULL);  /* within 200 ms: not drawn */
    progress_update(p, "check", 10, 10, "records", NULL); /* the end is always drawn */
    progress_free(p);
    fclose(f);
    char buf[1024];
    ssize_t n = read(master, buf, sizeof(buf) - 1);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_non_null(strstr(buf, "\rcheck:  50.0% 5/10 records"));
    assert_null(strstr(buf, " 6/10"));
    assert_non_null(strstr(buf, "\rcheck: 100.0% 10/10 records"));
    assert_non_null(strstr(buf, "\033[K"));
    assert_string_equal(buf + strlen(buf) - 4, "\r\033[K"); /* erased at the end */
    close(master);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_pipe_gets_nothing),
        cmocka_unit_test(test_terminal_gets_the_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
