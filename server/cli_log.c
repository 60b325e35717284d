/* cli_log: `ingestd log cat`, acknowledged events as NDJSON, optionally following the log. */
#include "server/cli_log.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "server/config.h"
#include "storage/log.h"
#include "storage/store.h"

#define POLL_MS 200

static volatile sig_atomic_t stop_requested;

static void on_stop(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static void usage(FILE *out)
{
    fprintf(out, "Usage: ingestd log cat [--data DIR] [--from OFFSET] [--follow]\n"
                 "\n"
                 "Prints every acknowledged event (applied to the store) as one JSON line,\n"
                 "in log order; works while the server runs.\n"
                 "  --data DIR       data directory (env INGESTD_DATA; default ./data)\n"
                 "  --from OFFSET    start at this log offset (default: the oldest retained)\n"
                 "  --follow         keep printing new events until SIGINT/SIGTERM\n");
}

static bool exists(const char *path)
{
    struct stat sb;

    return stat(path, &sb) == 0;
}

/* Offset of the oldest retained record (0 with no log yet). */
static uint64_t first_offset(const char *logdir)
{
    log_info_t li;

    return log_describe(logdir, &li, NULL) == LOG_OK ? li.first_offset : 0;
}

static void sleep_poll(void)
{
    struct timespec ts = {0, POLL_MS * 1000000L};

    /* EINTR ends the nap early: that is how a signal gets noticed promptly. */
    nanosleep(&ts, NULL);
}

/* Outcome of writing to stdout: 0 ok, 1 reader gone (EPIPE: stop quietly), -1 error. */
static int put_record(const log_record_t *rec)
{
    if (fwrite(rec->data, 1, rec->len, stdout) != rec->len || putchar('\n') == EOF)
        return errno == EPIPE ? 1 : -1;
    return 0;
}

static int cat(int argc, char **argv)
{
    const char *data = getenv("INGESTD_DATA");
    const char *from_s = NULL;
    bool follow = false, have_from;
    char storedir[4200], logdir[4200], mdb[4300];
    store_t *st = NULL;
    log_reader_t *r = NULL;
    uint64_t from = 0;
    int ret = 1;

    if (data == NULL || data[0] == '\0')
        data = "./data";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *eq = strchr(a, '=');
        size_t nlen = eq != NULL ? (size_t)(eq - a) : strlen(a);
        const char **dst = NULL;

        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--follow") == 0 || strcmp(a, "-f") == 0) {
            follow = true;
            continue;
        }
        if (nlen == 6 && strncmp(a, "--data", 6) == 0)
            dst = &data;
        else if (nlen == 6 && strncmp(a, "--from", 6) == 0)
            dst = &from_s;
        if (dst == NULL) {
            fprintf(stderr, "ingestd log cat: unknown argument %s\n", a);
            usage(stderr);
            return 2;
        }
        if (eq != NULL) {
            *dst = eq + 1;
        } else if (i + 1 < argc) {
            *dst = argv[++i];
        } else {
            fprintf(stderr, "ingestd log cat: %s needs a value\n", a);
            return 2;
        }
    }
    have_from = from_s != NULL;
    if (have_from && config_parse_count(from_s, &from) != 0) {
        fprintf(stderr, "ingestd log cat: --from needs a record offset (0, 1, 2, ...)\n");
        return 2;
    }
    if (!exists(data)) {
        fprintf(stderr, "ingestd log cat: no data directory %s\n", data);
        return 1;
    }
    snprintf(storedir, sizeof storedir, "%s/store", data);
    snprintf(mdb, sizeof mdb, "%s/data.mdb", storedir);
    snprintf(logdir, sizeof logdir, "%s/log", data);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop; /* no SA_RESTART: the poll nap must be interrupted */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    for (;;) {
        uint64_t limit = UINT64_MAX;
        log_record_t rec;
        int rc;

        /* Only what the store has applied is acknowledged; a log without a store
         * (never started, or being rebuilt) has no such mark, so all of it goes. */
        if (st == NULL && exists(mdb)) {
            store_options_t so = {.map_size = 0, .read_only = true};
            rc = store_open(storedir, &so, &st);
            if (rc != STORE_OK) {
                fprintf(stderr, "ingestd log cat: cannot open %s: %s\n", storedir,
                        store_strerror(rc));
                st = NULL;
                goto out;
            }
        }
        if (st != NULL) {
            store_info_t info;
            rc = store_get_info(st, &info);
            if (rc != STORE_OK) {
                fprintf(stderr, "ingestd log cat: cannot read %s: %s (%s)\n", storedir,
                        store_strerror(rc), store_detail(st));
                goto out;
            }
            limit = info.applied;
        }

        if (r == NULL && exists(logdir)) {
            if (!have_from)
                from = first_offset(logdir);
            rc = log_reader_open(logdir, from, &r);
            if (rc == LOG_INVALID) {
                fprintf(stderr,
                        "ingestd log cat: offset %" PRIu64 " is not in the log (oldest %" PRIu64
                        ")\n",
                        from, first_offset(logdir));
                goto out;
            }
            if (rc != LOG_OK) {
                fprintf(stderr, "ingestd log cat: cannot read %s: %s\n", logdir, log_strerror(rc));
                goto out;
            }
        }

        if (r != NULL) {
            while ((rc = log_reader_next(r, limit, &rec)) == LOG_OK && !stop_requested) {
                int w = put_record(&rec);
                if (w != 0) {
                    ret = w > 0 ? 0 : 1;
                    if (w < 0)
                        fprintf(stderr, "ingestd log cat: write: %s\n", strerror(errno));
                    goto out;
                }
            }
            if (rc != LOG_OK && rc != LOG_END) {
                fprintf(stderr, "ingestd log cat: reading %s at offset %" PRIu64 ": %s\n", logdir,
                        log_reader_position(r), log_strerror(rc));
                goto out;
            }
        }
        if (fflush(stdout) == EOF) {
            ret = errno == EPIPE ? 0 : 1;
            if (ret != 0)
                fprintf(stderr, "ingestd log cat: write: %s\n", strerror(errno));
            goto out;
        }
        if (!follow || stop_requested)
            break;
        sleep_poll();
        if (stop_requested)
            break;
    }
    ret = 0;

out:
    log_reader_close(r);
    store_close(st);
    return ret;
}

int cli_log_main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "cat") == 0)
        return cat(argc - 1, argv + 1);
    fprintf(stderr, "ingestd log: unknown subcommand %s\n", argv[1]);
    usage(stderr);
    return 2;
}
