/* logging: timestamped, level-tagged lines on stderr, one write(2) each. */
#include "server/logging.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"

enum logging_severity logging_level = LOGGING_LEVEL_INFO;

static const char *const level_names[] = {"ERROR", "WARN", "INFO", "DEBUG"};

/* The request this thread is working on; "" when none. Thread-local, so no locking. */
static _Thread_local char current_request_id[LOGGING_REQUEST_ID_MAX + 1];

void logging_set_request_id(const char *id)
{
    if (id == NULL) {
        current_request_id[0] = '\0';
        return;
    }
    snprintf(current_request_id, sizeof current_request_id, "%s", id);
}

int logging_parse_level(const char *name)
{
    if (name == NULL)
        return -1;
    for (int i = 0; i < (int)(sizeof level_names / sizeof level_names[0]); i++) {
        if (strcasecmp(name, level_names[i]) == 0)
            return i;
    }
    if (strcasecmp(name, "warning") == 0)
        return LOGGING_LEVEL_WARN;
    return -1;
}

void logging_write(int level, const char *fmt, ...)
{
    /* Lines longer than this are cut: a log line must stay one atomic write, and
     * a pipe only guarantees atomicity up to PIPE_BUF anyway. */
    char line[4096];
    int64_t now_ms = clk_wall_ms();
    time_t now_s = (time_t)(now_ms / 1000);
    struct tm tm;
    int saved_errno = errno; /* callers often log and then inspect errno */
    size_t n;
    va_list ap;

    if (level < LOGGING_LEVEL_ERROR)
        level = LOGGING_LEVEL_ERROR;
    if (level > LOGGING_LEVEL_DEBUG)
        level = LOGGING_LEVEL_DEBUG;

    gmtime_r(&now_s, &tm);
    n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof line - n, ".%03dZ %s ", (int)(now_ms % 1000),
                          level_names[level]);
    if (current_request_id[0] != '\0')
        n += (size_t)snprintf(line + n, sizeof line - n, "req=%s ", current_request_id);

    va_start(ap, fmt);
    int w = vsnprintf(line + n, sizeof line - n - 1, fmt, ap);
    va_end(ap);
    if (w < 0)
        w = 0;
    size_t end = n + (size_t)w;
    if (end > sizeof line - 2)
        end = sizeof line - 2; /* truncated; keep room for the newline */

    /* One message is one line, whatever the caller formatted into it (e.g. a
     * client-supplied string or an MHD message with its own newline). */
    while (end > n && (line[end - 1] == '\n' || line[end - 1] == '\r'))
        end--;
    for (size_t i = n; i < end; i++) {
        unsigned char c = (unsigned char)line[i];
        if (c < 0x20 || c == 0x7f)
            line[i] = ' ';
    }
    line[end++] = '\n';

    ssize_t r;
    do {
        r = write(STDERR_FILENO, line, end);
    } while (r < 0 && errno == EINTR);
    errno = saved_errno;
}

void logging_syslog(int severity, const char *facility, const char *msg)
{
    int level = severity <= 3   ? LOGGING_LEVEL_ERROR
                : severity == 4 ? LOGGING_LEVEL_WARN
                : severity <= 6 ? LOGGING_LEVEL_INFO
                                : LOGGING_LEVEL_DEBUG;
    LOGGING_AT(level, "%s: %s", facility ? facility : "-", msg ? msg : "");
}
