/* cli_lookup: `ingestd lookup`, thin argument handling over storage/lookup and api/lookup. */
#include "server/cli_lookup.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/lookup.h"
#include "storage/lookup.h"

#define DEFAULT_DATA   "./data"
#define DEFAULT_SOURCE "default"

struct args {
    const char *data;
    const char *source;
    int first_id; /* argv index of the first MESSAGEID; ids run to argc */
};

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: ingestd lookup [--data DIR] [--source S] MESSAGEID...\n"
            "\n"
            "Says for each messageId whether it is inside the de-duplication window, and\n"
            "where: one line of JSON per id, the body GET /v1/events/{messageId} answers:\n"
            "  {\"messageId\",\"source\",\"status\":\"seen\",\"offset\",\"receivedAt\",\"event\"}\n"
            "  {\"status\":\"unseen\",\"messageId\",\"source\",\"window_start\"}\n"
            "Works while the server runs: reads the LMDB store and the generations\n"
            "read-only, then the log past LMDB's last checkpoint. A key the server evicted\n"
            "less than a checkpoint ago (a few seconds) may still show as seen.\n"
            "Exit 0: every id seen; 1: any unseen; 2: usage or error (an invalid id prints\n"
            "a {\"success\":false,\"error\"} line, an unreadable data dir a reason on stderr).\n"
            "  --data DIR   data directory (env INGESTD_DATA; default " DEFAULT_DATA ")\n"
            "  --source S   the source the events came in on (default " DEFAULT_SOURCE ")\n"
            "  --           what follows is ids even when it starts with '-'\n");
}

static const char *env_or(const char *name, const char *def)
{
    const char *v = getenv(name);

    return v != NULL && v[0] != '\0' ? v : def;
}

/* Returns 0, 1 after --help, or 2 after a usage error (already printed). */
static int parse_args(int argc, char **argv, struct args *a)
{
    a->data = env_or("INGESTD_DATA", DEFAULT_DATA);
    a->source = DEFAULT_SOURCE;
    a->first_id = argc;

    int i = 1;
    for (; i < argc; i++) {
        const char *arg = argv[i];
        const char *eq = strchr(arg, '=');
        size_t nlen = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
        const char **dst = NULL;

        if (strcmp(arg, "--") == 0) {
            i++;
            break;
        }
        if (arg[0] != '-' || arg[1] == '\0')
            break; /* the first id */
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            usage(stdout);
            return 1;
        }
        if (nlen == 6 && strncmp(arg, "--data", 6) == 0)
            dst = &a->data;
        else if (nlen == 8 && strncmp(arg, "--source", 8) == 0)
            dst = &a->source;
        if (dst == NULL) {
            fprintf(stderr, "ingestd lookup: unknown argument %s (see ingestd lookup --help)\n",
                    arg);
            return 2;
        }
        if (eq != NULL) {
            *dst = eq + 1;
        } else if (i + 1 < argc) {
            *dst = argv[++i];
        } else {
            fprintf(stderr, "ingestd lookup: %.*s needs a value\n", (int)nlen, arg);
            return 2;
        }
    }
    a->first_id = i;
    if (a->data[0] == '\0') {
        fprintf(stderr, "ingestd lookup: --data needs a directory\n");
        return 2;
    }
    size_t slen = strlen(a->source);
    if (slen == 0 || slen > API_LOOKUP_SOURCE_MAX) {
        fprintf(stderr, "ingestd lookup: --source must be 1..%d bytes\n", API_LOOKUP_SOURCE_MAX);
        return 2;
    }
    if (a->first_id >= argc) {
        fprintf(stderr, "ingestd lookup: no MESSAGEID given (see ingestd lookup --help)\n");
        return 2;
    }
    return 0;
}

/* One id: prints its line. 0 seen, 1 unseen, 2 invalid id or error. */
static int lookup_one(lookup_t *lk, const char *source, const char *id)
{
    uint8_t key[KEYHASH_LEN];
    commit_lookup_t res;
    size_t id_len = strlen(id);
    char *line = NULL;
    int status = 0, rc = 2;

    const char *why = api_lookup_check_id(id, id_len);
    if (why) {
        line = api_lookup_error_body(id, id_len, why);
        goto out;
    }
    keyhash(lookup_secret(lk), source, strlen(source), id, id_len, key);
    int found = lookup_find(lk, key, &res);
    if (found != 0) {
        line = api_lookup_error_body(
            id, id_len,
            found < 0 ? "reading the data dir failed"
                      : "cannot tell: log retention deleted records not yet checkpointed into "
                        "LMDB, which may hold it; ask the server (GET /v1/events/{messageId})");
        goto out;
    }
    /* The log is read up to its end: every record the view names was acknowledged. */
    line = api_lookup_body(id, id_len, source, &res, lookup_log_dir(lk), UINT64_MAX, &status);
    rc = status == 200 ? 0 : 1;
out:
    if (!line) {
        fprintf(stderr, "ingestd lookup: out of memory\n");
        return 2;
    }
    printf("%s\n", line);
    free(line);
    return rc;
}

int cli_lookup_main(int argc, char **argv)
{
    struct args a;
    lookup_t *lk = NULL;
    char err[512];
    int rc = parse_args(argc, argv, &a);

    if (rc != 0)
        return rc == 1 ? 0 : rc;
    if (lookup_open(a.data, &lk, err, sizeof(err)) != 0) {
        fprintf(stderr, "ingestd lookup: %s\n", err);
        return 2;
    }
    for (int i = a.first_id; i < argc; i++) {
        int one = lookup_one(lk, a.source, argv[i]);
        if (one > rc)
            rc = one;
    }
    lookup_close(lk);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "ingestd lookup: writing stdout failed\n");
        return 2;
    }
    return rc;
}
