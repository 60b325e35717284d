/* report.c: the operator tools' lines and progress, to their caller's callbacks. */
#include <stdarg.h>
#include <stdio.h>

#include "storage/tools/internal.h"

#define PROGRESS_EVERY 16384 /* items between progress calls: cheap, yet several a second */

void tools_say(tools_report_fn report, void *arg, int problem, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    if (!report)
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    report(arg, problem, line);
}

void tools_step(tools_progress_fn fn, void *arg, const char *what, const char *unit, uint64_t done,
                uint64_t total)
{
    if (fn && (done % PROGRESS_EVERY == 0 || done == total))
        fn(arg, what, unit, done, total);
}
