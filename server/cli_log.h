/* cli_log: the `ingestd log ...` subcommands (reading the event log from the command line). */
#ifndef INGESTD_CLI_LOG_H
#define INGESTD_CLI_LOG_H

/*
 * Runs `ingestd log SUBCOMMAND ...`; argv[0] is "log". Today the only
 * subcommand is `cat --data DIR [--from OFFSET] [--follow]`: prints the
 * payload of every record LMDB has applied (offset < the store's applied
 * offset), one per line, in log order; with no store yet, every valid record.
 * --follow polls every 200 ms until SIGINT/SIGTERM. Installs its own
 * SIGINT/SIGTERM handlers and ignores SIGPIPE (a closed stdout ends it quietly).
 * Returns the process exit code: 0 ok, 1 error, 2 usage.
 */
int cli_log_main(int argc, char **argv);

#endif
