/* cmd: the subcommands of the ingestd binary, one file each in cmd/; main.c dispatches them. */
#ifndef INGESTD_CMD_H
#define INGESTD_CMD_H

/*
 * One row of main.c's command table: `ingestd NAME ARGS`, what it does (the top-level --help
 * prints ARGS and SUMMARY from the table), and the function that runs it. A command with
 * several forms (log cat, log groups) has one row per form, each with the same run.
 */
typedef struct cmd_entry {
    const char *name;    /* argv[1] */
    const char *args;    /* what follows the name in the help, e.g. "--data DIR"; "" for none */
    const char *summary; /* a sentence for the help, lines separated by '\n' */
    int (*run)(int argc, char **argv);
} cmd_entry_t;

/*
 * Every run function takes the command's own argv (argv[0] is its name, e.g. "check"), prints
 * its results to stdout and usage errors and failures to stderr, and returns the process exit
 * code: 0 ok (also after --help), 1 failure (or what the command says below), 2 usage.
 * Flags win over their INGESTD_* variables, which win over the defaults; --help lists them.
 */

/*
 * serve [FLAGS]: the HTTP event intake in the foreground (serve.c). --role edge produces the
 * accepted events to Kafka. Stops on SIGINT/SIGTERM after draining; SIGHUP reloads the write
 * keys file and the TLS pair. 1: it could not start (the reason logged).
 */
int cmd_serve(int argc, char **argv);

/*
 * log SUBCOMMAND (log.c):
 *   cat --data DIR [--from OFFSET] [--follow] [--group NAME]: prints the
 *     payload of every record the store has applied (offset < its applied
 *     offset, re-read on every poll), one per line on stdout, in log order;
 *     with no store yet, every valid record. --follow polls every 200 ms
 *     until SIGINT/SIGTERM, across segment rotation; records deleted by
 *     retention before they were read are skipped with a warning on stderr.
 *     --group NAME starts at the group's committed offset (storage/log/groups.h;
 *     a new group at --from or the oldest retained offset; --from wins over a
 *     committed one) and commits the offset after the last record written to
 *     stdout completely: every second while following and on every exit.
 *   groups --data DIR [--json]: the groups with offset and lag (applied
 *     offset minus the group's offset), a table with a header or JSON lines.
 * Installs its own SIGINT/SIGTERM handlers and ignores SIGPIPE (a closed
 * stdout ends `cat` quietly, exit 0).
 */
int cmd_log(int argc, char **argv);

/*
 * check|rebuild|backup (check.c, rebuild.c, backup.c; storage/tools/):
 *   check   --data DIR
 *   rebuild --data DIR [--window DURATION] [--max-keys N] [--young-keys N] [--allow-shrink]
 *   backup  --data DIR --to DIR2
 * The environment (INGESTD_DATA, INGESTD_WINDOW, INGESTD_MAX_KEYS, INGESTD_YOUNG_KEYS) wins over
 * the defaults of `serve` (./data, 24h, 100000000); rebuild's window settings default to the
 * server's (DIR/WINDOW). Every report line of the tool goes to stdout, findings prefixed
 * "PROBLEM: ", then one summary line; usage errors and the reason of a failure go to stderr.
 * 1: problems found (check), refused (rebuild) or failure.
 */
int cmd_check(int argc, char **argv);
int cmd_rebuild(int argc, char **argv);
int cmd_backup(int argc, char **argv);

/*
 * lookup [--data DIR] [--source S] MESSAGEID... (lookup.c): prints for each id one line of JSON,
 * the body GET /v1/events/{messageId} would answer (api/lookup.h). 0 every id seen, 1 any
 * unseen, 2 usage or error (an invalid id, an unreadable data dir).
 */
int cmd_lookup(int argc, char **argv);

/*
 * worker --kafka-brokers LIST --raw-topic NAME --out-topic NAME --group NAME --data DIR [...]
 * (worker.c): the Kafka worker role (cluster/worker.h) in the foreground. Serves GET /stats,
 * /metrics and /healthz on --listen (libmicrohttpd). SIGTERM/SIGINT: finishes or aborts the open
 * transaction, commits, leaves the group, closes the stores. 1: a runtime failure.
 */
int cmd_worker(int argc, char **argv);

/*
 * seed --data DIR --kafka-brokers LIST --raw-topic NAME [--from-offset N] [--kafka-opt NAME=VALUE
 * ...] (seed.c): reads DIR's event log read-only (also while `serve` runs, as `log cat` does)
 * from N (default: the oldest retained record) up to its acknowledged end, and produces one seed
 * record (cluster/cluster.h, CLUSTER_HEADER_SEED) per event to the partition an edge would
 * choose, with an idempotent producer, waiting for every delivery. Prints progress on a terminal
 * and, at the end, one JSON line on stdout with the next log offset to pass as --from-offset for
 * a later pass (docs/scale-out.md, "From one node to a cluster"). 1: failure (the reason and the
 * offset to resume from on stderr).
 */
int cmd_seed(int argc, char **argv);

/*
 * filter-bench --filter SPEC [--bits N] [--buckets B] [--fingerprint-bits F]
 *   --stream artificial:ALPHABET:LENGTH | file:PATH [--seed S] [--runs R] [--quiet] (filter.c):
 * feeds the stream to a fresh filter (one per run, seeds S..S+R-1), compares every answer with
 * an exact set and prints FPR, FNR, error rate and ns per operation to stdout, then one
 * machine-readable "RESULT key=value ..." line (the mean over the runs). Progress lines go to
 * stderr every few seconds unless --quiet. 1: failure (I/O, memory).
 */
int cmd_filter_bench(int argc, char **argv);

#endif
