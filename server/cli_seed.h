/* cli_seed: `ingestd seed`, a single node's retained log into a Kafka raw topic as seed records. */
#ifndef INGESTD_CLI_SEED_H
#define INGESTD_CLI_SEED_H

/*
 * `ingestd seed --data DIR --kafka-brokers LIST --raw-topic NAME [--from-offset N]
 * [--kafka-opt NAME=VALUE ...]`; argv[0] is "seed". Reads DIR's event log
 * read-only (also while `serve` runs, as `log cat` does) from N (default: the
 * oldest retained record) up to its acknowledged end, and produces one seed
 * record (cluster/cluster.h, CLUSTER_HEADER_SEED) per event to the partition
 * an edge would choose, with an idempotent producer, waiting for every
 * delivery. Prints progress on a terminal and, at the end, one JSON line on
 * stdout with the next log offset to pass as --from-offset for a later pass
 * (docs/scale-out.md, "From one node to a cluster"). Returns the process exit
 * code: 0 seeded (or --help), 1 failure (the reason and the offset to resume
 * from on stderr), 2 usage.
 */
int cli_seed_main(int argc, char **argv);

#endif
