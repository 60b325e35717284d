/* backup.c: `ingestd backup`, thin argument handling over storage/tools/backup.h. */
#include <stdio.h>

#include "cmd/cmd.h"
#include "cmd/internal.h"
#include "server/options.h"
#include "storage/tools/backup.h"

enum { O_DATA, O_TO, O_MAX };

static const opts_spec_t SPECS[] = {
    OPTS_SPEC_DATA,
    {"to", NULL, NULL, NULL, OPTS_STRING, 1, OPTS_PATH_MAX, "DIR2",
     "where to write the copy (required)"},
};

static const opts_cmd_t CMD = {
    "backup",
    "Usage: ingestd backup [--data DIR] --to DIR2\n",
    "Writes a consistent copy of a data dir to DIR2, also while a server runs:\n"
    "a compacted LMDB copy and the sealed generations it names, then the log\n"
    "up to what was acknowledged by then (the copy's applied offset, or the\n"
    "server's later DIR/store/ACKED), the secret and TAGGED_FROM, all fsynced.\n"
    "A server started on DIR2 has every event acknowledged before the backup\n"
    "began, and none that was not acknowledged. DIR2 must not exist or be empty.\n"
    "If the generations changed too much during the copy, it fails: run it again.\n",
    "Exit 0: done; 1: failed; 2: usage.\n",
    SPECS,
    sizeof SPECS / sizeof SPECS[0],
    false};

int cmd_backup(int argc, char **argv)
{
    opts_val_t v[O_MAX];
    progress_t *p = NULL;
    const char *data = NULL, *to = NULL; /* borrowed: outlive opts_free */

    int rc = opts_parse(&CMD, argc, argv, v, NULL);
    if (rc == 0) {
        data = v[O_DATA].str;
        to = v[O_TO].str;
    }
    opts_free(&CMD, v);
    if (rc != 0)
        return rc == 1 ? 0 : 2; /* --help, or a usage error (printed) */
    if (to == NULL) {
        fprintf(stderr, "ingestd backup: --to DIR2 is required (see ingestd backup --help)\n");
        return 2;
    }
    if (cmd_tool_start("backup", data, &p) != 0)
        return 1;
    backup_options_t o = {.data_dir = data,
                          .to_dir = to,
                          .report = cmd_tool_report,
                          .progress = cmd_tool_progress,
                          .arg = p};
    rc = backup_run(&o);
    progress_clear(p);
    progress_free(p);
    if (rc == TOOLS_OK) {
        printf("backup: OK: %s copied to %s\n", data, to);
        return 0;
    }
    printf("backup: FAILED: %s was not copied to %s (see the lines above)\n", data, to);
    fprintf(stderr, "ingestd backup: %s was not copied to %s\n", data, to);
    return 1;
}
