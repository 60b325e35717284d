/* tool.c: what `ingestd check`, `rebuild` and `backup` share: report lines and progress on
 * stdout, and the checks before a tool runs. */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/stat.h>

#include "cmd/internal.h"

void cmd_tool_report(void *arg, int problem, const char *line)
{
    progress_clear(arg);
    if (problem)
        printf("PROBLEM: %s\n", line);
    else
        printf("%s\n", line);
    /* Progress of a long rebuild or backup should show up as it happens, even in a pipe. */
    fflush(stdout);
}

void cmd_tool_progress(void *arg, const char *what, const char *unit, uint64_t done, uint64_t total)
{
    progress_update(arg, what, done, total, unit, NULL);
}

static bool is_dir(const char *path)
{
    struct stat sb;

    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int cmd_tool_start(const char *name, const char *data, progress_t **p)
{
    *p = NULL;
    if (!is_dir(data)) {
        fprintf(stderr, "ingestd %s: no data directory %s\n", name, data);
        printf("%s: FAILED: no data directory %s\n", name, data);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    /* Percent, rate and ETA on a terminal; nothing extra in a pipe or a file. */
    *p = progress_new(stdout);
    return 0;
}
