/* cli_admin: `ingestd check|rebuild|backup`, thin argument handling over storage/admin. */
#include "server/cli_admin.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "server/options.h"
#include "server/progress.h"
#include "storage/admin.h"

enum cmd { CMD_CHECK, CMD_REBUILD, CMD_BACKUP };

/* Positions in the tables below. */
enum { O_DATA, O_TO = 1, O_WINDOW = 1, O_MAX_KEYS = 2, O_MAX = 3 };

/* Same defaults and bounds as `serve` (options.h), so a rebuilt store ages keys out exactly as
 * the server that will run on it. */
static const opts_spec_t CHECK[] = {OPTS_SPEC_DATA};
static const opts_spec_t REBUILD[] = {
    OPTS_SPEC_DATA,
    {"window", NULL, "INGESTD_WINDOW", OPTS_DEFAULT_WINDOW, OPTS_DURATION, OPTS_WINDOW_MIN_MS,
     OPTS_WINDOW_MAX_MS, "DURATION", "window by age, as for serve: 90s, 15m, 24h, 28d (1s..365d)"},
    {"max-keys", NULL, "INGESTD_MAX_KEYS", OPTS_DEFAULT_MAX_KEYS, OPTS_COUNT, 0, OPTS_MAX_KEYS_MAX,
     "N", "window by size, as for serve; 0: none"},
};
static const opts_spec_t BACKUP[] = {
    OPTS_SPEC_DATA,
    {"to", NULL, NULL, NULL, OPTS_STRING, 1, OPTS_PATH_MAX, "DIR2",
     "where to write the copy (required)"},
};

static const opts_cmd_t CMDS[] = {
    [CMD_CHECK] = {"check", "Usage: ingestd check [--data DIR]\n",
                   "Verifies a data dir, also while a server runs on it: every log segment\n"
                   "header and record (length, offset, CRC), LMDB's applied offset, the\n"
                   "sequence index against the log, keys against the sequence index, and the\n"
                   "secret file against LMDB. Prints one line per finding (\"PROBLEM: ...\")\n"
                   "and a summary.\n",
                   "Exit 0: consistent; 1: problems found or check failed; 2: usage.\n", CHECK,
                   sizeof CHECK / sizeof CHECK[0], false},
    [CMD_REBUILD] = {"rebuild",
                     "Usage: ingestd rebuild [--data DIR] [--window DURATION] [--max-keys N]\n",
                     "Rebuilds DIR/store (LMDB) from the retained log, keeping the data dir's\n"
                     "secret and applying the de-duplication window. The server must be\n"
                     "stopped. The old store is kept as DIR/store.old-<unix time> until the\n"
                     "rebuild succeeded.\n",
                     "Exit 0: rebuilt; 1: failed (or a server runs); 2: usage.\n", REBUILD,
                     sizeof REBUILD / sizeof REBUILD[0], false},
    [CMD_BACKUP] = {"backup", "Usage: ingestd backup [--data DIR] --to DIR2\n",
                    "Writes a consistent copy of a data dir to DIR2, also while a server runs:\n"
                    "a compacted LMDB copy, the log up to that copy's applied offset, and the\n"
                    "secret, all fsynced. A server started on DIR2 has every event\n"
                    "acknowledged before the copy was taken. DIR2 must not exist or be empty.\n",
                    "Exit 0: done; 1: failed; 2: usage.\n", BACKUP,
                    sizeof BACKUP / sizeof BACKUP[0], false},
};

struct args {
    const char *data;
    const char *to;
    const char *window;
    int64_t window_ms;
    uint64_t max_keys;
};

static const char *cmd_name(enum cmd cmd)
{
    return CMDS[cmd].cmd;
}

/* Returns 0, 1 after --help, or 2 after a usage error (already printed). */
static int parse_args(enum cmd cmd, int argc, char **argv, struct args *a)
{
    opts_val_t v[O_MAX];
    int rc = opts_parse(&CMDS[cmd], argc, argv, v, NULL);

    if (rc == 0) {
        a->data = v[O_DATA].str;
        a->to = cmd == CMD_BACKUP ? v[O_TO].str : NULL;
        a->window = cmd == CMD_REBUILD ? v[O_WINDOW].str : NULL;
        a->window_ms = cmd == CMD_REBUILD ? v[O_WINDOW].ms : 0;
        a->max_keys = cmd == CMD_REBUILD ? v[O_MAX_KEYS].n : 0;
    }
    opts_free(&CMDS[cmd], v);
    if (rc == 0 && cmd == CMD_BACKUP && a->to == NULL) {
        fprintf(stderr, "ingestd backup: --to DIR2 is required (see ingestd backup --help)\n");
        return 2;
    }
    return rc;
}

/* `arg` is the progress line (NULL when stdout is no terminal): a report line replaces it. */
static void report(void *arg, int problem, const char *line)
{
    progress_clear(arg);
    if (problem)
        printf("PROBLEM: %s\n", line);
    else
        printf("%s\n", line);
    /* Progress of a long rebuild or backup should show up as it happens, even in a pipe. */
    fflush(stdout);
}

/* storage/admin.h's progress, onto the terminal's progress line (server/progress.h). */
static void on_progress(void *arg, const char *what, const char *unit, uint64_t done,
                        uint64_t total)
{
    progress_update(arg, what, done, total, unit, NULL);
}

static bool is_dir(const char *path)
{
    struct stat sb;

    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int run_check(const struct args *a, progress_t *p)
{
    admin_check_result_t res;

    memset(&res, 0, sizeof res);
    int rc = admin_check(a->data, report, on_progress, p, &res);
    progress_clear(p);
    switch (rc) {
    case ADMIN_OK:
        printf("check: OK: %" PRIu64 " segments, %" PRIu64 " records (offsets %" PRIu64 "..%" PRIu64
               ", %" PRIu64 " bytes), applied %" PRIu64 ", %" PRIu64 " keys\n",
               res.segments, res.records, res.first_offset, res.next_offset, res.log_bytes,
               res.applied, res.keys);
        return 0;
    case ADMIN_PROBLEMS:
        printf("check: %" PRIu64 " problem%s found in %s (%" PRIu64 " segments, %" PRIu64
               " records, applied %" PRIu64 ", %" PRIu64 " keys)\n",
               res.problems, res.problems == 1 ? "" : "s", a->data, res.segments, res.records,
               res.applied, res.keys);
        return 1;
    default:
        printf("check: FAILED: could not check %s (see the lines above)\n", a->data);
        fprintf(stderr, "ingestd check: could not check %s\n", a->data);
        return 1;
    }
}

static int run_rebuild(const struct args *a, progress_t *p)
{
    int rc = admin_rebuild(a->data, a->window_ms, a->max_keys, report, on_progress, p);
    progress_clear(p);
    switch (rc) {
    case ADMIN_OK:
        printf("rebuild: OK: %s/store rebuilt from the log (window %s, max keys %" PRIu64 ")\n",
               a->data, a->window, a->max_keys);
        return 0;
    case ADMIN_BUSY:
        printf("rebuild: FAILED: a server is running on %s (it holds %s/LOCK); stop it first\n",
               a->data, a->data);
        fprintf(stderr,
                "ingestd rebuild: a server is running on %s (it holds %s/LOCK); stop it first\n",
                a->data, a->data);
        return 1;
    default:
        printf("rebuild: FAILED: %s/store was not rebuilt (see the lines above)\n", a->data);
        fprintf(stderr, "ingestd rebuild: %s/store was not rebuilt\n", a->data);
        return 1;
    }
}

static int run_backup(const struct args *a, progress_t *p)
{
    int rc = admin_backup(a->data, a->to, report, on_progress, p);
    progress_clear(p);

    if (rc == ADMIN_OK) {
        printf("backup: OK: %s copied to %s\n", a->data, a->to);
        return 0;
    }
    printf("backup: FAILED: %s was not copied to %s (see the lines above)\n", a->data, a->to);
    fprintf(stderr, "ingestd backup: %s was not copied to %s\n", a->data, a->to);
    return 1;
}

int cli_admin_main(int argc, char **argv)
{
    enum cmd cmd;
    struct args a;

    if (argc < 1)
        return 2;
    if (strcmp(argv[0], "check") == 0) {
        cmd = CMD_CHECK;
    } else if (strcmp(argv[0], "rebuild") == 0) {
        cmd = CMD_REBUILD;
    } else if (strcmp(argv[0], "backup") == 0) {
        cmd = CMD_BACKUP;
    } else {
        fprintf(stderr, "ingestd: unknown operator command %s\n", argv[0]);
        return 2;
    }

    switch (parse_args(cmd, argc, argv, &a)) {
    case 0:
        break;
    case 1:
        return 0;
    default:
        return 2;
    }
    /* A typo in --data must not look like an empty, consistent data dir (or
     * make rebuild create one). */
    if (!is_dir(a.data)) {
        fprintf(stderr, "ingestd %s: no data directory %s\n", cmd_name(cmd), a.data);
        printf("%s: FAILED: no data directory %s\n", cmd_name(cmd), a.data);
        return 1;
    }

    /* A reader that goes away (`ingestd rebuild | head -1`) must not kill a
     * rebuild or backup halfway: report lines are then just not shown. */
    signal(SIGPIPE, SIG_IGN);

    /* Percent, rate and ETA on a terminal; nothing extra in a pipe or a file. */
    progress_t *p = progress_new(stdout);
    int rc = 2;
    switch (cmd) {
    case CMD_CHECK:
        rc = run_check(&a, p);
        break;
    case CMD_REBUILD:
        rc = run_rebuild(&a, p);
        break;
    case CMD_BACKUP:
        rc = run_backup(&a, p);
        break;
    }
    progress_free(p);
    return rc;
}
