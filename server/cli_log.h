/* cli_log: the `ingestd log ...` subcommands (reading the event log from the command line). */
#ifndef INGESTD_CLI_LOG_H
#define INGESTD_CLI_LOG_H

/*
 * Runs `ingestd log SUBCOMMAND ...`; argv[0] is "log". Subcommands:
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
 * stdout ends `cat` quietly, exit 0). Returns the process exit code: 0 ok,
 * 1 error, 2 usage.
 */
int cli_log_main(int argc, char **argv);

#endif
