/* cli_admin: the operator commands `ingestd check`, `ingestd rebuild` and `ingestd backup`. */
#ifndef INGESTD_CLI_ADMIN_H
#define INGESTD_CLI_ADMIN_H

/*
 * Runs one operator command; argv[0] is its name:
 *   check   --data DIR
 *   rebuild --data DIR [--window DURATION] [--max-keys N]
 *   backup  --data DIR --to DIR2
 * Flags win over the environment (INGESTD_DATA, INGESTD_WINDOW,
 * INGESTD_MAX_KEYS), which wins over the defaults of `serve` (./data, 24h,
 * 100000000). Every report line of storage/admin goes to stdout, findings
 * prefixed "PROBLEM: ", then one summary line; usage errors and the reason
 * of a failure go to stderr.
 * Returns the process exit code: 0 ok, 1 problems found or failure, 2 usage.
 */
int cli_admin_main(int argc, char **argv);

#endif
