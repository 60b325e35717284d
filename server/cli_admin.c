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

#include "server/config.h"
#include "server/progress.h"
#include "storage/admin.h"

/* Same defaults and bounds as `serve` (server/config.c), so a rebuilt store
 * ages keys out exactly as the server that will run on it. */
#define DEFAULT_DATA     "./data"
#define DEFAULT_WINDOW   "24h"
#define DEFAULT_MAX_KEYS "100000000"
#define WINDOW_MIN_MS    INT64_C(1000)
#define WINDOW_MAX_MS    (INT64_C(365) * 86400 * 1000)
#define MAX_KEYS_MAX     UINT64_C(1000000000000)

enum cmd { CMD_CHECK, CMD_REBUILD, CMD_BACKUP };

struct args {
    const char *data;
    const char *to;
    const char *window;
    const char *max_keys;
};

static void usage(enum cmd cmd, FILE *out)
{
    switch (cmd) {
    case CMD_CHECK:
        fprintf(out,
                "Usage: ingestd check [--data DIR]\n"
                "\n"
                "Verifies a data dir, also while a server runs on it: every log segment\n"
                "header and record (length, offset, CRC), LMDB's applied offset, the\n"
                "sequence index against the log, keys against the sequence index, and the\n"
                "secret file against LMDB. Prints one line per finding (\"PROBLEM: ...\")\n"
                "and a summary. Exit 0: consistent; 1: problems found or check failed;\n"
                "2: usage.\n"
                "  --data DIR   data directory (env INGESTD_DATA; default " DEFAULT_DATA ")\n");
        break;
    case CMD_REBUILD:
        fprintf(out,
                "Usage: ingestd rebuild [--data DIR] [--window DURATION] [--max-keys N]\n"
                "\n"
                "Rebuilds DIR/store (LMDB) from the retained log, keeping the data dir's\n"
                "secret and applying the de-duplication window. The server must be\n"
                "stopped. The old store is kept as DIR/store.old-<unix time> until the\n"
                "rebuild succeeded. Exit 0: rebuilt; 1: failed (or a server runs); 2: usage.\n"
                "  --data DIR           data directory (env INGESTD_DATA; default " DEFAULT_DATA
                ")\n"
                "  --window DURATION    window by age, as for serve: 90s, 15m, 24h, 28d\n"
                "                       (env INGESTD_WINDOW; default " DEFAULT_WINDOW ")\n"
                "  --max-keys N         window by size, 0: none (env INGESTD_MAX_KEYS;\n"
                "                       default " DEFAULT_MAX_KEYS ")\n");
        break;
    case CMD_BACKUP:
        fprintf(out, "Usage: ingestd backup [--data DIR] --to DIR2\n"
                     "\n"
                     "Writes a consistent copy of a data dir to DIR2, also while a server runs:\n"
                     "a compacted LMDB copy, the log up to that copy's applied offset, and the\n"
                     "secret, all fsynced. A server started on DIR2 has every event\n"
                     "acknowledged before the copy was taken. DIR2 must not exist or be empty.\n"
                     "Exit 0: done; 1: failed; 2: usage.\n"
                     "  --data DIR   data directory (env INGESTD_DATA; default " DEFAULT_DATA ")\n"
                     "  --to DIR2    where to write the copy\n");
        break;
    }
}

static const char *cmd_name(enum cmd cmd)
{
    return cmd == CMD_CHECK ? "check" : cmd == CMD_REBUILD ? "rebuild" : "backup";
}

static const char *env_or(const char *name, const char *def)
{
    const char *v = getenv(name);

    return v != NULL && v[0] != '\0' ? v : def;
}

/* Returns 0, 1 after --help, or 2 after a usage error (already printed). */
static int parse_args(enum cmd cmd, int argc, char **argv, struct args *a)
{
    const char *name = cmd_name(cmd);

    a->data = env_or("INGESTD_DATA", DEFAULT_DATA);
    a->to = NULL;
    a->window = env_or("INGESTD_WINDOW", DEFAULT_WINDOW);
    a->max_keys = env_or("INGESTD_MAX_KEYS", DEFAULT_MAX_KEYS);

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *eq = strchr(arg, '=');
        size_t nlen = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
        const char **dst = NULL;

        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            usage(cmd, stdout);
            return 1;
        }
        if (nlen == 6 && strncmp(arg, "--data", 6) == 0)
            dst = &a->data;
        else if (cmd == CMD_BACKUP && nlen == 4 && strncmp(arg, "--to", 4) == 0)
            dst = &a->to;
        else if (cmd == CMD_REBUILD && nlen == 8 && strncmp(arg, "--window", 8) == 0)
            dst = &a->window;
        else if (cmd == CMD_REBUILD && nlen == 10 && strncmp(arg, "--max-keys", 10) == 0)
            dst = &a->max_keys;
        if (dst == NULL) {
            fprintf(stderr, "ingestd %s: unknown argument %s (see ingestd %s --help)\n", name, arg,
                    name);
            return 2;
        }
        if (eq != NULL) {
            *dst = eq + 1;
        } else if (i + 1 < argc) {
            *dst = argv[++i];
        } else {
            fprintf(stderr, "ingestd %s: %.*s needs a value\n", name, (int)nlen, arg);
            return 2;
        }
    }
    if (a->data[0] == '\0') {
        fprintf(stderr, "ingestd %s: --data needs a directory\n", name);
        return 2;
    }
    if (cmd == CMD_BACKUP && (a->to == NULL || a->to[0] == '\0')) {
        fprintf(stderr, "ingestd backup: --to DIR2 is required (see ingestd backup --help)\n");
        return 2;
    }
    return 0;
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

/* Window settings of rebuild; returns 0 or 2 after printing why. */
static int parse_window(const struct args *a, int64_t *window_ms, uint64_t *max_keys)
{
    if (config_parse_duration(a->window, window_ms) != 0 || *window_ms < WINDOW_MIN_MS ||
        *window_ms > WINDOW_MAX_MS) {
        fprintf(stderr,
                "ingestd rebuild: bad window \"%s\": a duration like 90s, 15m, 24h, 28d "
                "(1s..365d)\n",
                a->window);
        return 2;
    }
    if (config_parse_count(a->max_keys, max_keys) != 0 || *max_keys > MAX_KEYS_MAX) {
        fprintf(stderr, "ingestd rebuild: bad max-keys \"%s\": a number 0..%" PRIu64 "\n",
                a->max_keys, MAX_KEYS_MAX);
        return 2;
    }
    return 0;
}

static int run_rebuild(const struct args *a, int64_t window_ms, uint64_t max_keys, progress_t *p)
{
    int rc = admin_rebuild(a->data, window_ms, max_keys, report, on_progress, p);
    progress_clear(p);
    switch (rc) {
    case ADMIN_OK:
        printf("rebuild: OK: %s/store rebuilt from the log (window %s, max keys %" PRIu64 ")\n",
               a->data, a->window, max_keys);
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
    int64_t window_ms = 0;
    uint64_t max_keys = 0;

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
    if (cmd == CMD_REBUILD && parse_window(&a, &window_ms, &max_keys) != 0)
        return 2;
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
        rc = run_rebuild(&a, window_ms, max_keys, p);
        break;
    case CMD_BACKUP:
        rc = run_backup(&a, p);
        break;
    }
    progress_free(p);
    return rc;
}
