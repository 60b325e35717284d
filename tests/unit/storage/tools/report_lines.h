/*
 * report_lines.h: a tool's report (storage/tools/report.h) collected into one string, for the
 * tools' tests to search.
 */
#ifndef INGESTD_TEST_REPORT_LINES_H
#define INGESTD_TEST_REPORT_LINES_H

#include <stddef.h>
#include <stdio.h>

/* The lines, one after another, each ended by a newline, problems marked "PROBLEM ". Lines
 * past the buffer's end are dropped. */
typedef struct {
    char text[8192];
    size_t len;
} lines_t;

/* A tools_report_fn; arg is the lines_t. */
static inline void collect_line(void *arg, int problem, const char *line)
{
    lines_t *l = arg;
    int n = snprintf(l->text + l->len, sizeof(l->text) - l->len, "%s%s\n",
                     problem ? "PROBLEM " : "", line);
    if (n > 0 && (size_t)n < sizeof(l->text) - l->len)
        l->len += (size_t)n;
}

/* Empties l, for the next run. */
static inline void lines_clear(lines_t *l)
{
    l->len = 0;
    l->text[0] = '\0';
}

#endif
