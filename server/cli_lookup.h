/* cli_lookup: `ingestd lookup`, one messageId's verdict from a data dir, also while a server runs.
 */
#ifndef INGESTD_CLI_LOOKUP_H
#define INGESTD_CLI_LOOKUP_H

/*
 * `ingestd lookup [--data DIR] [--source S] MESSAGEID...`; argv[0] is "lookup".
 * Prints for each id one line of JSON, the body GET /v1/events/{messageId}
 * would answer (api/lookup.h), to stdout; the reason of a failure to stderr.
 * Returns the process exit code: 0 every id seen, 1 any unseen, 2 usage or
 * error (an invalid id, an unreadable data dir).
 */
int cli_lookup_main(int argc, char **argv);

#endif
