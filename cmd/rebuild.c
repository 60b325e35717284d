/* rebuild.c: `ingestd rebuild`, thin argument handling over storage/tools/rebuild.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"
#include "cmd/internal.h"
#include "storage/datadir.h"
#include "server/options.h"
#include "storage/tools/rebuild.h"
#include "storage/window/settings.h"

/* In the order of --help; the window's three settings in winsettings_t's order (struct args'
 * given[] counts on it). */
enum { O_DATA, O_WINDOW, O_MAX_KEYS, O_YOUNG_KEYS, O_ALLOW_SHRINK, O_MAX };

/* Same bounds as `serve` (options.h). The window's settings default to the ones the server
 * recorded in the data dir (storage/window/settings.h), so a rebuilt store ages keys out exactly as
 * the server that runs on it; the table's defaults apply only where it recorded none. */
static const opts_spec_t SPECS[] = {
    [O_DATA] = OPTS_SPEC_DATA,
    [O_WINDOW] = {"window", NULL, "INGESTD_WINDOW", OPTS_DEFAULT_WINDOW, OPTS_DURATION,
                  OPTS_WINDOW_MIN_MS, OPTS_WINDOW_MAX_MS, "DURATION",
                  "window by age, as for serve: 90s, 15m, 24h, 28d (1s..365d); default: the "
                  "server's, as recorded in DIR/WINDOW, else 24h"},
    [O_MAX_KEYS] = {"max-keys", NULL, "INGESTD_MAX_KEYS", OPTS_DEFAULT_MAX_KEYS, OPTS_COUNT, 0,
                    OPTS_MAX_KEYS_MAX, "N",
                    "window by size per source, as for serve; 0: none; default: the server's "
                    "(DIR/WINDOW)"},
    [O_YOUNG_KEYS] = {"young-keys", NULL, "INGESTD_YOUNG_KEYS", OPTS_DEFAULT_YOUNG_KEYS, OPTS_COUNT,
                      1, OPTS_YOUNG_KEYS_MAX, "N",
                      "keys the young store holds before a seal, as for serve; default: the "
                      "server's (DIR/WINDOW)"},
    [O_ALLOW_SHRINK] = {"allow-shrink", NULL, NULL, NULL, OPTS_BOOL, 0, 0, NULL,
                        "rebuild even when the window loses keys (records log retention "
                        "deleted); without it rebuild refuses and changes nothing"},
};

static const opts_cmd_t CMD = {
    "rebuild",
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
    SPECS,
    sizeof SPECS / sizeof SPECS[0],
    false};

struct args {
    const char *data;
    winsettings_t window;
    bool allow_shrink;
    /* Which of window's settings came from a flag or a variable (1), not a default (0) */
    bool given[3];
};

/* Returns 0, 1 after --help, or 2 after a usage error (already printed). */
static int parse_args(int argc, char **argv, struct args *a)
{
    opts_val_t v[O_MAX];
    int rc = opts_parse(&CMD, argc, argv, v, NULL);

    if (rc == 0) {
        a->data = v[O_DATA].str;
        a->window = (winsettings_t){v[O_WINDOW].ms, v[O_MAX_KEYS].n, v[O_YOUNG_KEYS].n};
        a->allow_shrink = v[O_ALLOW_SHRINK].on;
        /* A default's text is the table's own string (options.h: strings are borrowed). */
        for (int i = 0; i < 3; i++)
            a->given[i] = v[O_WINDOW + i].str != SPECS[O_WINDOW + i].def;
    }
    opts_free(&CMD, v);
    return rc;
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

static int run(const struct args *a, progress_t *p)
{
    rebuild_options_t o = {.data_dir = a->data,
                           .allow_shrink = a->allow_shrink,
                           .report = cmd_tool_report,
                           .progress = cmd_tool_progress,
                           .arg = p};
    if (resolve_window(a, &o.window) != 0)
        return 1;
    int rc = rebuild_run(&o);
    progress_clear(p);
    switch (rc) {
    case TOOLS_OK:
        printf("rebuild: OK: %s/store rebuilt from the log (window %" PRId64 "s, max keys %" PRIu64
               ", young keys %" PRIu64 ")\n",
               a->data, o.window.window_ms / 1000, o.window.max_keys, o.window.young_keys);
        return 0;
    case TOOLS_SHRINK:
        printf("rebuild: REFUSED: the window would lose keys (see the lines above); nothing was "
               "changed\n");
        fprintf(stderr,
                "ingestd rebuild: refused: the window of %s would shrink (--allow-shrink "
                "accepts that)\n",
                a->data);
        return 1;
    case TOOLS_BUSY:
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

int cmd_rebuild(int argc, char **argv)
{
    struct args a = {0};
    progress_t *p = NULL;

    switch (parse_args(argc, argv, &a)) {
    case 0:
        break;
    case 1:
        return 0;
    default:
        return 2;
    }
    if (cmd_tool_start("rebuild", a.data, &p) != 0)
        return 1;
    int rc = run(&a, p);
    progress_free(p);
    return rc;
}
