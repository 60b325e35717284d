/* check.c: `ingestd check`, thin argument handling over storage/tools/check.h. */
#include <inttypes.h>
#include <stdio.h>

#include "cmd/cmd.h"
#include "cmd/internal.h"
#include "server/options.h"
#include "storage/tools/check.h"

enum { O_DATA, O_MAX };

static const opts_spec_t SPECS[] = {OPTS_SPEC_DATA};

static const opts_cmd_t CMD = {
    "check",
    "Usage: ingestd check [--data DIR]\n",
    "Verifies a data dir, also while a server runs on it: every log segment\n"
    "header and record (length, offset, CRC), LMDB's applied offset, the\n"
    "sequence index against the log, keys against the sequence index, each\n"
    "sealed generation (whole, its sequence range, its keys against the log,\n"
    "none missing from where drops ended to the store's sealed bound), and\n"
    "the secret file against LMDB, with the server's window settings\n"
    "(DIR/WINDOW). Prints one line per finding (\"PROBLEM: ...\") and a summary.\n",
    "Exit 0: consistent; 1: problems found or check failed; 2: usage.\n",
    SPECS,
    sizeof SPECS / sizeof SPECS[0],
    false};

/* The summary line after the report; the exit code. */
static int summarize(const char *data, int rc, const check_result_t *res)
{
    switch (rc) {
    case TOOLS_OK:
        printf("check: OK: %" PRIu64 " segments, %" PRIu64 " records (offsets %" PRIu64 "..%" PRIu64
               ", %" PRIu64 " bytes), applied %" PRIu64 ", %" PRIu64 " keys\n",
               res->segments, res->records, res->first_offset, res->next_offset, res->log_bytes,
               res->applied, res->keys);
        return 0;
    case TOOLS_PROBLEMS:
        printf("check: %" PRIu64 " problem%s found in %s (%" PRIu64 " segments, %" PRIu64
               " records, applied %" PRIu64 ", %" PRIu64 " keys)\n",
               res->problems, res->problems == 1 ? "" : "s", data, res->segments, res->records,
               res->applied, res->keys);
        return 1;
    default:
        printf("check: FAILED: could not check %s (see the lines above)\n", data);
        fprintf(stderr, "ingestd check: could not check %s\n", data);
        return 1;
    }
}

int cmd_check(int argc, char **argv)
{
    opts_val_t v[O_MAX];
    progress_t *p = NULL;
    check_result_t res = {0};

    int rc = opts_parse(&CMD, argc, argv, v, NULL);
    const char *data = rc == 0 ? v[O_DATA].str : NULL; /* borrowed: outlives opts_free */
    opts_free(&CMD, v);
    if (rc != 0)
        return rc == 1 ? 0 : 2; /* --help, or a usage error (printed) */
    if (cmd_tool_start("check", data, &p) != 0)
        return 1;
    check_options_t o = {
        .data_dir = data, .report = cmd_tool_report, .progress = cmd_tool_progress, .arg = p};
    rc = check_run(&o, &res);
    progress_clear(p);
    rc = summarize(data, rc, &res);
    progress_free(p);
    return rc;
}
