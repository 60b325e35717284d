/* main.c: the ingestd binary's entry: one table of subcommands (cmd/cmd.h), dispatched by name;
 * the top-level help is generated from it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd/cmd.h"
#include "server/config.h"

static int run_version(int argc, char **argv);
static int run_help(int argc, char **argv);

/* In the order of the help. */
static const cmd_entry_t COMMANDS[] = {
    {"serve", "[FLAGS]",
     "run the HTTP event intake in the foreground (see ingestd serve --help);\n"
     "--role edge produces accepted events to Kafka (docs/scale-out.md)",
     cmd_serve},
    {"log", "cat --data DIR [--from OFFSET] [--follow] [--group NAME]",
     "print acknowledged events as NDJSON, in log order; --group resumes\n"
     "after the group's committed offset and commits what it printed",
     cmd_log},
    {"log", "cat --data DIR --log rejected [--from OFFSET] [--follow]",
     "print the quarantine: refused events and requests with their reason", cmd_log},
    {"log", "groups --data DIR [--json]",
     "list consumer groups with their committed offsets and lag", cmd_log},
    {"check", "--data DIR",
     "verify log checksums and that the LMDB store agrees with the log\n"
     "(works while the server runs; exit 1 when problems are found)",
     cmd_check},
    {"lookup", "--data DIR [--source S] MESSAGEID...",
     "was this messageId seen inside the window, and where is its event\n"
     "(one JSON line per id; works while the server runs)",
     cmd_lookup},
    {"rebuild", "--data DIR [--window DURATION] [--max-keys N]",
     "rebuild the LMDB store from the retained log (server stopped)", cmd_rebuild},
    {"backup", "--data DIR --to DIR2",
     "write a consistent copy of the data dir (works while the server runs)", cmd_backup},
    {"worker", "--kafka-brokers LIST --raw-topic NAME --out-topic NAME --group NAME",
     "the Kafka worker role: exactly-once de-duplication between two topics\n"
     "(docs/scale-out.md)",
     cmd_worker},
    {"seed", "--data DIR --kafka-brokers LIST --raw-topic NAME [--from-offset N]",
     "carry a single node's retained log into the raw topic as seed records,\n"
     "so the workers that take over keep its window (docs/scale-out.md)",
     cmd_seed},
    {"filter-bench", "--filter SPEC --stream artificial:ALPHABET:LENGTH|file:PATH",
     "measure a bounded-memory duplicate filter (docs/filters.md)", cmd_filter_bench},
    {"version", "", "print the version", run_version},
    {"help", "", "show this help", run_help},
};
#define NCOMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

/* Each row as "  NAME ARGS", then its summary indented below. */
static void usage(FILE *out)
{
    fputs("Usage: ingestd COMMAND [ARGS]\n\nCommands:\n", out);
    for (size_t i = 0; i < NCOMMANDS; i++) {
        const cmd_entry_t *c = &COMMANDS[i];
        fprintf(out, "  %s%s%s\n", c->name, c->args[0] != '\0' ? " " : "", c->args);
        for (const char *line = c->summary; *line != '\0';) {
            size_t len = strcspn(line, "\n");
            fprintf(out, "      %.*s\n", (int)len, line);
            line += len + (line[len] == '\n');
        }
    }
    fputs("\nEach command takes --help.\n", out);
}

static int run_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("ingestd %s\n", INGESTD_VERSION);
    return 0;
}

static int run_help(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    usage(stdout);
    return 0;
}

/* The row named `name` (the first, for a command with several forms), or NULL. */
static const cmd_entry_t *find(const char *name)
{
    /* The spellings other tools taught people. */
    if (strcmp(name, "--version") == 0)
        name = "version";
    else if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0)
        name = "help";
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(COMMANDS[i].name, name) == 0)
            return &COMMANDS[i];
    return NULL;
}

int main(int argc, char **argv)
{
    /* Everything a command creates in a data dir (log segments, LMDB, consumer groups, backups)
     * is private to the service user unless INGESTD_DATA_MODE (serve: --data-mode) says group:
     * events are personal data, and the shell's usual umask 022 made them world-readable. */
    umask((mode_t)config_data_umask(config_data_mode_env(getenv("INGESTD_DATA_MODE"))));
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const cmd_entry_t *c = find(argv[1]);
    if (c == NULL) {
        fprintf(stderr, "ingestd: unknown command \"%s\"\n\n", argv[1]);
        usage(stderr);
        return 2;
    }
    return c->run(argc - 1, argv + 1);
}
