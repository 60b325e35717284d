/* logging: one line per message to stderr, level-checked before arguments are evaluated.
 * Named LOGGING_* so that LOG_* means one thing in the code: the event log (storage/log/). */
#ifndef INGESTD_LOGGING_H
#define INGESTD_LOGGING_H

enum logging_severity {
    LOGGING_LEVEL_ERROR = 0,
    LOGGING_LEVEL_WARN,
    LOGGING_LEVEL_INFO,
    LOGGING_LEVEL_DEBUG
};

extern enum logging_severity logging_level; /* current level; set once at start-up */

/* Parses "error|warn|info|debug"; returns the level or -1. */
int logging_parse_level(const char *name);

/*
 * Sets the request id stamped on this thread's log lines (copied; at most LOGGING_REQUEST_ID_MAX
 * bytes kept), or clears it with NULL or "". The HTTP front end sets it while it handles a request
 * and clears it before returning to libmicrohttpd, so every line about a request carries its id.
 */
#define LOGGING_REQUEST_ID_MAX 64
void logging_set_request_id(const char *id);

/*
 * Writes "2026-11-22T07:32:02.123Z LEVEL [req=ID ]message\n" atomically (one write); control
 * characters in the message become spaces, so a client-supplied string cannot forge a line.
 * Thread-safe.
 */
void logging_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * A library's own log line with a syslog severity (0 emergency .. 7 debug) and its facility,
 * written as "LEVEL FACILITY: msg" at the matching level (<= 3 error, 4 warn, 5-6 info, 7 debug).
 * Its signature fits cluster_log_fn, so librdkafka's lines share our log. Thread-safe.
 */
void logging_syslog(int severity, const char *facility, const char *msg);

#define LOGGING_AT(level, ...)                                                                     \
    do {                                                                                           \
        if ((int)(level) <= (int)logging_level)                                                    \
            logging_write((level), __VA_ARGS__);                                                   \
    } while (0)
#define LOGGING_ERROR(...) LOGGING_AT(LOGGING_LEVEL_ERROR, __VA_ARGS__)
#define LOGGING_WARN(...)  LOGGING_AT(LOGGING_LEVEL_WARN, __VA_ARGS__)
#define LOGGING_INFO(...)  LOGGING_AT(LOGGING_LEVEL_INFO, __VA_ARGS__)
#define LOGGING_DEBUG(...) LOGGING_AT(LOGGING_LEVEL_DEBUG, __VA_ARGS__)

#endif
