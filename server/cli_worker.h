/* cli_worker: `ingestd worker`, the Kafka worker role (cluster/worker.h, docs/scale-out.md). */
#ifndef INGESTD_CLI_WORKER_H
#define INGESTD_CLI_WORKER_H

/*
 * Runs `ingestd worker --kafka-brokers LIST --raw-topic NAME --out-topic NAME
 * --group NAME --data DIR [...]` in the foreground; argv[0] is "worker". Every
 * flag has an INGESTD_* environment variable (flags win); --help lists them.
 * Serves GET /stats, /metrics and /healthz on --listen (libmicrohttpd).
 * SIGTERM/SIGINT: finishes or aborts the open transaction, commits, leaves
 * the group, closes the stores. Returns the process exit code: 0 after a clean
 * stop (or --help), 1 on a runtime failure, 2 on a usage error.
 */
int cli_worker_main(int argc, char **argv);

#endif
