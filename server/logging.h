/* logging: one line per message to stderr, level-checked before arguments are evaluated. */
#ifndef INGESTD_LOGGING_H
#define INGESTD_LOGGING_H

enum log_level { LOG_LEVEL_ERROR = 0, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };

extern int logging_level; /* current level; set once at start-up */

/* Parses "error|warn|info|debug"; returns the level or -1. */
int logging_parse_level(const char *name);

/* Writes "2026-11-22T07:32:02.123Z LEVEL message\n" atomically (one write). Thread-safe. */
void logging_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define LOGF(level, ...)                                                                           \
    do {                                                                                           \
        if ((level) <= logging_level)                                                              \
            logging_write((level), __VA_ARGS__);                                                   \
    } while (0)
#define LOG_ERROR(...) LOGF(LOG_LEVEL_ERROR, __VA_ARGS__)
#define LOG_WARN(...)  LOGF(LOG_LEVEL_WARN, __VA_ARGS__)
#define LOG_INFO(...)  LOGF(LOG_LEVEL_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) LOGF(LOG_LEVEL_DEBUG, __VA_ARGS__)

#endif
