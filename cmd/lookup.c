/* lookup.c: `ingestd lookup`, thin argument handling over storage/lookup and api/lookup. */
#include "cmd/cmd.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/lookup.h"
#include "server/options.h"
#include "storage/tools/lookup.h"

enum { O_DATA, O_SOURCE, O_MAX };

static const opts_spec_t SPECS[] = {
    OPTS_SPEC_DATA,
    {"source", NULL, NULL, "default", OPTS_STRING, 1, API_LOOKUP_SOURCE_MAX, "S",
     "the source the events came in on"},
};

static const opts_cmd_t CMD = {
    "lookup",
    "Usage: ingestd lookup [--data DIR] [--source S] [--] MESSAGEID...\n",
    "Says for each messageId whether it is inside the de-duplication window, and\n"
    "where: one line of JSON per id, the body GET /v1/events/{messageId} answers:\n"
    "  {\"messageId\",\"source\",\"status\":\"seen\",\"offset\",\"receivedAt\",\"event\"}\n"
    "  {\"status\":\"unseen\",\"messageId\",\"source\",\"window_start\"}\n"
    "Works while the server runs: reads the LMDB store and the generations\n"
    "read-only, then the log past LMDB's last checkpoint. A key the server evicted\n"
    "less than a checkpoint ago (a few seconds) may still show as seen.\n"
    "The ids follow the flags; after \"--\" they may start with '-'.\n",
    "Exit 0: every id seen; 1: any unseen; 2: usage or error (an invalid id prints\n"
    "a {\"success\":false,\"error\"} line, an unreadable data dir a reason on stderr).\n",
    SPECS,
    sizeof SPECS / sizeof SPECS[0],
    true,
};

struct args {
    const char *data;
    const char *source;
    int first_id; /* argv index of the first MESSAGEID; ids run to argc */
};

/* Returns 0, 1 after --help, or 2 after a usage error (already printed). */
static int parse_args(int argc, char **argv, struct args *a)
{
    opts_val_t v[O_MAX];
    int rc = opts_parse(&CMD, argc, argv, v, &a->first_id);

    a->data = v[O_DATA].str;
    a->source = v[O_SOURCE].str;
    opts_free(&CMD, v);
    if (rc == 0 && a->first_id >= argc) {
        fprintf(stderr, "ingestd lookup: no MESSAGEID given (see ingestd lookup --help)\n");
        return 2;
    }
    return rc;
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

int cmd_lookup(int argc, char **argv)
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
