/* cli_filter: `ingestd filter-bench`, error rates and speed of the bounded-memory filters. */
#ifndef INGESTD_CLI_FILTER_H
#define INGESTD_CLI_FILTER_H

/*
 * Runs `filter-bench`; argv[0] is "filter-bench":
 *   --filter SPEC [--bits N] [--buckets B] [--fingerprint-bits F]
 *   --stream artificial:ALPHABET:LENGTH | file:PATH  [--seed S] [--runs R] [--quiet]
 * Feeds the stream to a fresh filter (one per run, seeds S..S+R-1), compares every answer
 * with an exact set and prints FPR, FNR, error rate and ns per operation to stdout, then one
 * machine-readable "RESULT key=value ..." line (the mean over the runs). Progress lines go
 * to stderr every few seconds unless --quiet.
 * Returns the process exit code: 0 ok, 1 failure (I/O, memory), 2 usage.
 */
int cli_filter_main(int argc, char **argv);

#endif
