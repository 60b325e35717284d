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
#include "storage/datadir.h"
#include "storage/tools/admin.h"
#include "storage/window/settings.h"

enum cmd { CMD_CHECK, CMD_REBUILD, CMD_BACKUP };

/* Positions in the tables below. */
enum {
    O_DATA,
    O_TO = 1,
    O_WINDOW = 1,
    O_MAX_KEYS = 2,
    O_YOUNG_KEYS = 3,
    O_ALLOW_SHRINK = 4,
    O_MAX = 5
};

/* Same bounds as `serve` (options.h). The window's settings default to the ones the server
 * recorded in the data dir (storage/window/settings.h), so a rebuilt store ages keys out exactly as
 * the server that runs on it; the table's defaults apply only where it recorded none. */
static const opts_spec_t CHECK[] = {OPTS_SPEC_DATA};
static const opts_spec_t REBUILD[] = {
    OPTS_SPEC_DATA,
    {"window", NULL, "INGESTD_WINDOW", OPTS_DEFAULT_WINDOW, OPTS_DURATION, OPTS_WINDOW_MIN_MS,
     OPTS_WINDOW_MAX_MS, "DURATION",
     "window by age, as for serve: 90s, 15m, 24h, 28d (1s..365d); default: the server's, as "
     "recorded in DIR/WINDOW, else 24h"},
    {"max-keys", NULL, "INGESTD_MAX_KEYS", OPTS_DEFAULT_MAX_KEYS, OPTS_COUNT, 0, OPTS_MAX_KEYS_MAX,
     "N", "window by size per source, as for serve; 0: none; default: the server's (DIR/WINDOW)"},
    {"young-keys", NULL, "INGESTD_YOUNG_KEYS", OPTS_DEFAULT_YOUNG_KEYS, OPTS_COUNT, 1,
     OPTS_YOUNG_KEYS_MAX, "N",
     "keys the young store holds before a seal, as for serve; default: the server's "
     "(DIR/WINDOW)"},
    {"allow-shrink", NULL, NULL, NULL, OPTS_BOOL, 0, 0, NULL,
     "rebuild even when the window loses keys (records log retention deleted); without it "
     "rebuild refuses and changes nothing"},
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
                   "sequence index against the log, keys against the sequence index, each\n"
                   "sealed generation (whole, its sequence range, its keys against the log),\n"
                   "and the secret file against LMDB, with the server's window settings\n"
                   "(DIR/WINDOW). Prints one line per finding (\"PROBLEM: ...\") and a summary.\n",
                   "Exit 0: consistent; 1: problems found or check failed; 2: usage.\n", CHECK,
                   sizeof CHECK / sizeof CHECK[0], false},
    [CMD_REBUILD] = {"rebuild",
                     "Usage: ingestd rebuild [--data DIR] [--window DURATION] [--max-keys N]\n"
                     "                       [--young-keys N] [--allow-shrink]\n",
                     "Rebuilds DIR/store's young LMDB store from the retained log, keeping the\n"
                     "data dir's secret and its sealed generations, and applying the\n"
                     "de-duplication window with the server's settings (DIR/WINDOW; a flag\n"
                     "given wins). Refuses, changing nothing, when the window would lose keys\n"
                     "whose records log retention deleted, unless --allow-shrink. The server\n"
                     "must be stopped. The new store is built in DIR/store.rebuild-<time>-<pid>\n"
                     "and swapped with DIR/store atomically once durable: a crash leaves the old\n"
                     "store or the new one, whole.\n",
                     "Exit 0: rebuilt; 1: failed, refused (the window would shrink) or a server\n"
                     "runs; 2: usage.\n",
                     REBUILD, sizeof REBUILD / sizeof REBUILD[0], false},
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
    winsettings_t window;
    bool allow_shrink;
    /* Which of window's settings came from a flag or a variable (1), not a default (0) */
    bool given[3];
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
    }
    if (rc == 0 && cmd == CMD_REBUILD) {
        a->window = (winsettings_t){v[O_WINDOW].ms, v[O_MAX_KEYS].n, v[O_YOUNG_KEYS].n};
        a->allow_shrink = v[O_ALLOW_SHRINK].on;
        /* A default's text is the table's own string (options.h: strings are borrowed). */
        for (int i = 0; i < 3; i++)
            a->given[i] = v[O_WINDOW + i].str != REBUILD[O_WINDOW + i].def;
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

/* storage/tools/admin.h's progress, onto the terminal's progress line (server/progress.h). */
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

/*
 * The window's settings for rebuild: each given flag (or variable), else the server's from
 * DIR/WINDOW, else the default; says which it used. 0, or -1 when DIR/WINDOW is unreadable.
 */
static int resolve_window(const struct args *a, winsettings_t *w)
{
    winsettings_t rec;
    int have = winsettings_read(a->data, &rec);
    if (have < 0) {
        fprintf(stderr, "ingestd rebuild: %s/%s: %s (give --window, --max-keys and --young-keys)\n",
                a->data, datadir_name(DATADIR_WINDOW), strerror(errno));
        printf("rebuild: FAILED: %s/%s is unreadable\n", a->data, datadir_name(DATADIR_WINDOW));
        return -1;
    }
    const char *from[3];
    *w = a->window;
    for (int i = 0; i < 3; i++)
        from[i] = a->given[i] ? "flag" : have == 0 ? "server's" : "default";
    if (have == 0 && !a->given[0])
        w->window_ms = rec.window_ms;
    if (have == 0 && !a->given[1])
        w->max_keys = rec.max_keys;
    if (have == 0 && !a->given[2])
        w->young_keys = rec.young_keys;
    printf("window settings: window %" PRId64 "s (%s), max keys %" PRIu64
           " (%s), young keys %" PRIu64 " (%s)\n",
           w->window_ms / 1000, from[0], w->max_keys, from[1], w->young_keys, from[2]);
    return 0;
}

static int run_rebuild(const struct args *a, progress_t *p)
{
    admin_rebuild_options_t o = {.allow_shrink = a->allow_shrink};
    if (resolve_window(a, &o.window) != 0)
        return 1;
    int rc = admin_rebuild(a->data, &o, report, on_progress, p);
    progress_clear(p);
    switch (rc) {
    case ADMIN_OK:
        printf("rebuild: OK: %s/store rebuilt from the log (window %" PRId64 "s, max keys %" PRIu64
               ", young keys %" PRIu64 ")\n",
               a->data, o.window.window_ms / 1000, o.window.max_keys, o.window.young_keys);
        return 0;
    case ADMIN_SHRINK:
        printf("rebuild: REFUSED: the window would lose keys (see the lines above); nothing was "
               "changed\n");
        fprintf(stderr,
                "ingestd rebuild: refused: the window of %s would shrink (--allow-shrink "
                "accepts that)\n",
                a->data);
        return 1;
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
    struct args a = {0};

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
