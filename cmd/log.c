/* log.c: `ingestd log cat|groups`, acknowledged events as NDJSON and consumer group positions. */
#include "cmd/cmd.h"

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
#include <unistd.h>

#include "common/clock.h"
#include "cmd/internal.h"
#include "server/options.h"
#include "storage/commit/commit.h"
#include "storage/datadir.h"
#include "storage/log/groups.h"
#include "storage/log/log.h"
#include "storage/window/store.h"

#define POLL_MS       200
#define COMMIT_MS     1000              /* a following group commits at most this often */
#define FLUSH_BYTES   (64u * 1024)      /* write stdout once this much is buffered */
#define OPEN_ATTEMPTS 5                 /* a reader open can race retention deleting its segment */
#define STOP_MAX_MS   UINT64_C(3600000) /* --stop-timeout at most 1h */
#define REKICK_MS     100 /* after the stop timeout, how often a blocked write is interrupted */

/*
 * Stopping while the reader stalls: SIGINT/SIGTERM stops reading at the next
 * record, and arms `stop_timer` (timer_settime is async-signal-safe). While it
 * runs, a blocked write(2) may still drain; when it fires, SIGALRM sets
 * `abandon`, interrupts the write (no SA_RESTART), and out_flush gives up what
 * is left. The timer keeps firing every REKICK_MS after that: a SIGALRM that
 * lands between out_flush's check of `abandon` and its next write() would
 * otherwise leave that write blocked for good. A second SIGINT/SIGTERM abandons
 * at once.
 */
static volatile sig_atomic_t signals; /* SIGINT/SIGTERM received so far (at most 2) */
static volatile sig_atomic_t abandon; /* stop writing: the stop timeout passed */
static timer_t stop_timer;
static bool have_timer;
static int64_t stop_timeout_ms;

static void on_stop(int sig)
{
    (void)sig;
    if (signals < 2)
        signals = signals + 1;
    if (signals > 1 || stop_timeout_ms == 0 || !have_timer) {
        abandon = 1;
        return;
    }
    if (signals == 1) {
        struct itimerspec its = {
            .it_value = {(time_t)(stop_timeout_ms / 1000),
                         (long)(stop_timeout_ms % 1000) * 1000000L},
            .it_interval = {0, REKICK_MS * 1000000L},
        };
        timer_settime(stop_timer, 0, &its, NULL);
    }
}

static void on_alarm(int sig)
{
    (void)sig;
    abandon = 1;
}

/* Installs the handlers above; the timer is created here, armed by the first signal. */
static void install_stop(int64_t timeout_ms)
{
    struct sigaction sa;
    struct sigevent sev;

    stop_timeout_ms = timeout_ms;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm; /* no SA_RESTART: the poll nap and a blocked write must end */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_SIGNAL;
    sev.sigev_signo = SIGALRM;
    /* Without a timer (no resources) a stop abandons at once rather than block forever. */
    have_timer = timer_create(CLOCK_MONOTONIC, &sev, &stop_timer) == 0;
    sa.sa_handler = on_stop;
    sigaddset(&sa.sa_mask, SIGINT); /* the two stop signals never nest in on_stop */
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

enum { CAT_DATA, CAT_LOG, CAT_FROM, CAT_FOLLOW, CAT_GROUP, CAT_STOP, CAT_MAX };

static const opts_spec_t CAT_SPECS[] = {
    OPTS_SPEC_DATA,
    {"log", NULL, NULL, "events", OPTS_STRING, 1, 16, "events|rejected",
     "which log: the accepted events, or the quarantine DIR/rejected/: what the server "
     "refused, one JSON object a line with reason, error, requestId, source, receivedAt and "
     "the raw bytes (every record that reached the disk whole; no --group)"},
    {"from", NULL, NULL, NULL, OPTS_COUNT, 0, UINT64_MAX, "OFFSET",
     "start at this log offset (default: the oldest retained, or the group's committed "
     "offset)"},
    {"follow", "-f", NULL, NULL, OPTS_BOOL, 0, 0, "",
     "keep printing new events, across segment rotation and retention, until SIGINT/SIGTERM"},
    {"group", NULL, NULL, NULL, OPTS_STRING, 1, GROUPS_NAME_MAX, "NAME",
     "consumer group (1..64 of A-Z a-z 0-9 . _ -): start at its committed offset (a new group "
     "at the oldest retained one or --from; --from wins over a committed offset) and commit the "
     "offset after the last event written to stdout: every second while following and on exit "
     "(SIGINT/SIGTERM, end of log, closed stdout). Records deleted by retention before the "
     "group read them are skipped with a warning."},
    {"stop-timeout", NULL, NULL, "2s", OPTS_DURATION, 0, STOP_MAX_MS, "DURATION",
     "on SIGINT/SIGTERM, how long a write to a stalled reader (a full pipe) may still go on "
     "before it is abandoned: 0, 2s, 1m (up to 1h). Then the group commits the events that got "
     "out whole (a cut-off last line is read again by the next run) and the exit is 0. A second "
     "signal abandons at once."},
};

static const opts_cmd_t CAT_CMD = {
    "log cat",
    "Usage: ingestd log cat [--data DIR] [--from OFFSET] [--follow] [--group NAME]\n"
    "                       [--stop-timeout DURATION] [--log events|rejected]\n",
    "Prints every acknowledged event (applied to the store) as one JSON line on\n"
    "stdout, in log order; works while the server runs. Messages go to stderr.\n",
    "Exit 0: done (also when stdout was closed); 1: error; 2: usage.\n",
    CAT_SPECS,
    sizeof CAT_SPECS / sizeof CAT_SPECS[0],
    false,
};

enum { GROUPS_DATA, GROUPS_JSON, GROUPS_MAX };

static const opts_spec_t GROUPS_SPECS[] = {
    OPTS_SPEC_DATA,
    {"json", NULL, NULL, NULL, OPTS_BOOL, 0, 0, "",
     "one JSON object per group instead: {\"group\":...,\"offset\":...,\"lag\":...}"},
};

static const opts_cmd_t GROUPS_CMD = {
    "log groups",
    "Usage: ingestd log groups [--data DIR] [--json]\n",
    "Lists the consumer groups of `log cat --group` with the offset each reads next\n"
    "and its lag (acknowledged records it has not committed yet), one per line,\n"
    "sorted by name, after a header line; works while the server runs.\n",
    "Exit 0: listed; 1: error; 2: usage.\n",
    GROUPS_SPECS,
    sizeof GROUPS_SPECS / sizeof GROUPS_SPECS[0],
    false,
};

static void usage(FILE *out)
{
    fprintf(out, "Usage: ingestd log cat [--data DIR] [--from OFFSET] [--follow] [--group NAME]\n"
                 "                       [--stop-timeout DURATION] [--log events|rejected]\n"
                 "       ingestd log groups [--data DIR] [--json]\n"
                 "\n"
                 "  cat      print acknowledged events as NDJSON, in log order\n"
                 "  groups   list consumer groups with their offsets and lag\n"
                 "Each takes --help.\n");
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

/* ---- stdout: records buffered, written with write(2) so we know which ones got out whole ---- */

typedef struct out {
    char *buf;
    size_t len, cap;
    size_t *ends;   /* end of each buffered record (with its newline) in buf */
    uint64_t *next; /* offset after each buffered record */
    size_t n, ncap;
    uint64_t done;    /* offset after the last record written to stdout completely */
    size_t abandoned; /* bytes given up by a stop (see out_flush) */
} out_t;

static void out_free(out_t *o)
{
    free(o->buf);
    free(o->ends);
    free(o->next);
}

static int out_add(out_t *o, const log_record_t *rec)
{
    size_t need = o->len + rec->len + 1;

    if (need > o->cap) {
        size_t cap = o->cap ? o->cap : FLUSH_BYTES * 2;
        while (cap < need)
            cap *= 2;
        char *b = realloc(o->buf, cap);
        if (b == NULL)
            return -1;
        o->buf = b;
        o->cap = cap;
    }
    if (o->n == o->ncap) {
        size_t ncap = o->ncap ? o->ncap * 2 : 256;
        size_t *e = realloc(o->ends, ncap * sizeof *e);
        if (e == NULL)
            return -1;
        o->ends = e;
        uint64_t *x = realloc(o->next, ncap * sizeof *x);
        if (x == NULL)
            return -1;
        o->next = x;
        o->ncap = ncap;
    }
    memcpy(o->buf + o->len, rec->data, rec->len);
    o->buf[o->len + rec->len] = '\n';
    o->len = need;
    o->ends[o->n] = need;
    o->next[o->n] = rec->offset + 1;
    o->n++;
    return 0;
}

/*
 * Writes the buffer out. Returns 0 when all of it was written, 1 when the
 * reader went away (EPIPE) or a stop abandoned the write (the stop timeout
 * passed, or a second SIGINT/SIGTERM), -1 on another error (errno kept).
 * o->done advances record by record, so it names exactly what got out whole,
 * whatever happens; o->abandoned counts the bytes given up.
 */
static int out_flush(out_t *o)
{
    size_t w = 0, k = 0;
    int ret = 0;

    while (w < o->len) {
        /* A signal only stops reading: what is buffered still goes out, until the stop
         * timeout says a stalled reader has had its chance. */
        if (abandon) {
            o->abandoned += o->len - w;
            ret = 1;
            break;
        }
        ssize_t n = write(STDOUT_FILENO, o->buf + w, o->len - w);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            ret = errno == EPIPE ? 1 : -1;
            break;
        }
        w += (size_t)n;
        while (k < o->n && o->ends[k] <= w)
            o->done = o->next[k++];
    }
    o->len = 0;
    o->n = 0;
    return ret;
}

/* ---- log cat ---- */

typedef struct cat {
    const char *data;
    const char *group; /* NULL: no group */
    char storedir[4200], logdir[4200], mdb[4300];
    bool rejected;       /* --log rejected: the quarantine */
    bool follow;         /* --follow */
    int64_t stop_ms;     /* --stop-timeout */
    bool have_committed; /* the group file holds `committed` */
    uint64_t committed;
    int64_t committed_at;
    uint64_t pos;   /* where the reader opens */
    bool have_from; /* --from given */
    bool pos_known; /* pos set (else: the oldest retained, once a log exists) */
    bool may_skip;  /* only an explicit --from out of range is an error */
    store_t *st;    /* LMDB read-only, when the server left no acknowledged mark */
    log_reader_t *r;
    out_t out;
} cat_t;

/* Outcomes of cat_records beyond a flush's 0 / 1 / -1. */
#define CAT_FAIL   (-2) /* an error, reported: exit 1 without committing the group */
#define CAT_REOPEN 2    /* reopened past a retention gap: read on */

/* Commits the group's position when it moved (or the group is new). 0 or -1 (reported). */
static int commit_group(cat_t *c)
{
    if (c->group == NULL || (c->have_committed && c->committed == c->out.done))
        return 0;
    int rc = groups_commit(c->data, c->group, c->out.done);
    if (rc != GROUPS_OK) {
        fprintf(stderr, "ingestd log cat: cannot commit group %s at offset %" PRIu64 ": %s%s%s\n",
                c->group, c->out.done, groups_strerror(rc), rc == GROUPS_EIO ? ": " : "",
                rc == GROUPS_EIO ? strerror(errno) : "");
        return -1;
    }
    c->have_committed = true;
    c->committed = c->out.done;
    c->committed_at = clk_mono_ms();
    return 0;
}

/* Records [from, first) are gone: say so; the position moves to `first`. */
static void report_skip(const cat_t *c, uint64_t from, uint64_t first)
{
    fprintf(stderr,
            "ingestd log cat: warning: %s%s%s%" PRIu64 " records (offsets %" PRIu64 "..%" PRIu64
            ") were deleted by retention before they were read; continuing at offset %" PRIu64 "\n",
            c->group ? "group " : "", c->group ? c->group : "", c->group ? ": " : "", first - from,
            from, first - 1, first);
}

/*
 * Opens a reader at *pos. When *pos lies before the oldest retained record and
 * `may_skip`, warns and moves *pos there. Retries when retention deletes the
 * segment between listing and opening it. LOG_OK or an error (reported).
 */
static int open_reader(cat_t *c, uint64_t *pos, bool may_skip, log_reader_t **r)
{
    int rc = LOG_INVALID;

    for (int attempt = 0; attempt < OPEN_ATTEMPTS; attempt++) {
        uint64_t first = first_offset(c->logdir);
        if (*pos < first) {
            if (!may_skip) {
                fprintf(stderr,
                        "ingestd log cat: offset %" PRIu64
                        " is not in the log any more (oldest retained %" PRIu64 ")\n",
                        *pos, first);
                return LOG_INVALID;
            }
            report_skip(c, *pos, first);
            *pos = first;
        }
        rc = log_reader_open(c->logdir, *pos, r);
        if (rc != LOG_INVALID)
            break;
    }
    if (rc == LOG_INVALID)
        fprintf(stderr,
                "ingestd log cat: offset %" PRIu64 " is not in the log (oldest %" PRIu64 ")\n",
                *pos, first_offset(c->logdir));
    else if (rc != LOG_OK)
        fprintf(stderr, "ingestd log cat: cannot read %s: %s\n", c->logdir, log_strerror(rc));
    return rc;
}

/* Says what a stop gave up, so an operator can tell a stalled reader from a clean stop. */
static void report_abandon(const cat_t *c)
{
    if (c->out.abandoned == 0)
        return;
    if (c->group != NULL)
        fprintf(stderr,
                "ingestd log cat: stopped with the reader stalled: %zu bytes not written "
                "within --stop-timeout; group %s committed at offset %" PRIu64 "\n",
                c->out.abandoned, c->group, c->out.done);
    else
        fprintf(stderr,
                "ingestd log cat: stopped with the reader stalled: %zu bytes not written "
                "within --stop-timeout; the first event not written whole is at offset %" PRIu64
                "\n",
                c->out.abandoned, c->out.done);
}

/* Handles the end of a flush: 0 go on, 1 stop quietly (reader gone), -1 error (reported). */
static int flushed(int w)
{
    if (w < 0)
        fprintf(stderr, "ingestd log cat: write: %s\n", strerror(errno));
    return w;
}

/* Reads and checks cat's flags into *c. Returns -1 to go on, else the exit code. */
static int cat_args(int argc, char **argv, cat_t *c)
{
    opts_val_t v[CAT_MAX];
    int rc = opts_parse(&CAT_CMD, argc, argv, v, NULL);
    /* The strings stay valid after opts_free: they are argv's, the environment's or the table's. */
    const char *which = v[CAT_LOG].str;
    c->data = v[CAT_DATA].str;
    c->group = v[CAT_GROUP].str;
    c->have_from = v[CAT_FROM].set;
    c->pos = v[CAT_FROM].n;
    c->follow = v[CAT_FOLLOW].on;
    c->stop_ms = v[CAT_STOP].ms;
    opts_free(&CAT_CMD, v);
    if (rc != 0)
        return rc == 1 ? 0 : 2;
    /* The quarantine has no acknowledged mark (nobody was told it holds anything) and no
     * groups: its group files would share DIR/groups/ with the event log's. */
    c->rejected = strcmp(which, "rejected") == 0;
    if (!c->rejected && strcmp(which, "events") != 0) {
        fprintf(stderr, "ingestd log cat: --log takes events or rejected\n");
        return 2;
    }
    if (c->rejected && c->group != NULL) {
        fprintf(stderr, "ingestd log cat: --group reads the events log only, not --log rejected\n");
        return 2;
    }
    if (c->group != NULL && !groups_valid_name(c->group)) {
        fprintf(stderr,
                "ingestd log cat: bad group name \"%s\" (1..64 of A-Z a-z 0-9 . _ -, not "
                "starting with '.')\n",
                c->group);
        return 2;
    }
    if (!exists(c->data)) {
        fprintf(stderr, "ingestd log cat: no data directory %s\n", c->data);
        return 1;
    }
    (void)datadir_put(c->storedir, sizeof c->storedir, c->data, DATADIR_STORE);
    (void)datadir_put(c->mdb, sizeof c->mdb, c->storedir, DATADIR_LMDB_DATA);
    (void)datadir_put(c->logdir, sizeof c->logdir, c->data,
                      c->rejected ? DATADIR_REJECTED : DATADIR_LOG);
    c->pos_known = c->have_from;
    c->may_skip = !c->have_from;
    return -1;
}

/* --group: start at its committed offset, unless --from says otherwise. 0 or -1 (reported). */
static int cat_group_start(cat_t *c)
{
    uint64_t g = 0;

    if (c->group == NULL)
        return 0;
    int rc = groups_get(c->data, c->group, &g);
    if (rc == GROUPS_NOTFOUND)
        return 0;
    if (rc != GROUPS_OK) {
        fprintf(stderr, "ingestd log cat: cannot read group %s: %s%s%s\n", c->group,
                groups_strerror(rc), rc == GROUPS_EIO ? ": " : "",
                rc == GROUPS_EIO ? strerror(errno) : "");
        return -1;
    }
    c->have_committed = true;
    c->committed = g;
    if (c->have_from) {
        fprintf(stderr,
                "ingestd log cat: group %s is at offset %" PRIu64 "; starting at --from %" PRIu64
                " instead\n",
                c->group, g, c->pos);
    } else {
        c->pos = g;
        c->pos_known = true;
    }
    return 0;
}

/*
 * How far the log may be read, into *limit: only what was acknowledged goes out. The server
 * says how far in store/ACKED (never below LMDB's applied offset, which lags by up to a
 * checkpoint); that needs no LMDB reader slot, which matters in another container sharing the
 * volume, where LMDB's PID-based reader table cannot tell the two processes apart. Without it,
 * LMDB's applied offset; a log without a store (never started, or being rebuilt) has no such
 * mark, so all of it goes, as does all of the quarantine. 0, or -1 (reported).
 */
static int cat_limit(cat_t *c, uint64_t *limit)
{
    uint64_t acked;
    store_info_t info;

    *limit = UINT64_MAX;
    if (c->rejected)
        return 0;
    if (commit_read_acked(c->data, &acked) == 0) {
        *limit = acked;
        return 0;
    }
    if (c->st == NULL && exists(c->mdb)) {
        store_options_t so = {.map_size = 0, .read_only = true, .older_ok = true};
        int rc = store_open(c->storedir, &so, &c->st);
        if (rc != STORE_OK) {
            fprintf(stderr, "ingestd log cat: cannot open %s: %s\n", c->storedir,
                    store_strerror(rc));
            c->st = NULL;
            return -1;
        }
    }
    if (c->st == NULL)
        return 0;
    int rc = store_get_info(c->st, &info);
    if (rc != STORE_OK) {
        fprintf(stderr, "ingestd log cat: cannot read %s: %s (%s)\n", c->storedir,
                store_strerror(rc), store_detail(c->st));
        return -1;
    }
    *limit = info.applied;
    return 0;
}

/* Opens the reader once the log exists. 0, or -1 (reported). */
static int cat_open(cat_t *c)
{
    if (c->r != NULL || !exists(c->logdir))
        return 0;
    if (!c->pos_known)
        c->pos = first_offset(c->logdir);
    c->pos_known = true;
    if (open_reader(c, &c->pos, c->may_skip, &c->r) != LOG_OK)
        return -1;
    c->out.done = c->pos;
    return 0;
}

/* The reader ended short of the acknowledged end: retention may have deleted the segment it
 * was about to switch to. Then reopens past the gap (CAT_REOPEN). A flush outcome otherwise. */
static int cat_gap(cat_t *c)
{
    uint64_t at = log_reader_position(c->r);
    if (at >= first_offset(c->logdir))
        return 0;
    int w = flushed(out_flush(&c->out));
    if (w != 0)
        return w;
    log_reader_close(c->r);
    c->r = NULL;
    c->pos = at;
    if (open_reader(c, &c->pos, true, &c->r) != LOG_OK)
        return CAT_FAIL;
    c->out.done = c->pos;
    return CAT_REOPEN;
}

/* Copies the records up to `limit` to stdout (a signal stops reading). Returns a flush outcome
 * (0 go on, 1 reader gone or abandoned, -1 error), CAT_REOPEN or CAT_FAIL. */
static int cat_records(cat_t *c, uint64_t limit)
{
    log_record_t rec;
    int rc = LOG_END;

    while (signals == 0 && (rc = log_reader_next(c->r, limit, &rec)) == LOG_OK) {
        if (out_add(&c->out, &rec) != 0) {
            fprintf(stderr, "ingestd log cat: out of memory\n");
            return CAT_FAIL;
        }
        if (c->out.len < FLUSH_BYTES)
            continue;
        int w = flushed(out_flush(&c->out));
        if (w != 0)
            return w;
        if (c->follow && clk_mono_ms() - c->committed_at >= COMMIT_MS && commit_group(c))
            return CAT_FAIL;
    }
    if (signals != 0)
        return 0;
    if (rc != LOG_OK && rc != LOG_END) {
        fprintf(stderr, "ingestd log cat: reading %s at offset %" PRIu64 ": %s\n", c->logdir,
                log_reader_position(c->r), log_strerror(rc));
        int w = flushed(out_flush(&c->out));
        return w == 0 ? -1 : w;
    }
    if (rc == LOG_END && log_reader_position(c->r) < limit)
        return cat_gap(c);
    return 0;
}

/* Reads, writes and (with --follow) polls until the end, a signal or an error. The exit code. */
static int cat_loop(cat_t *c)
{
    for (;;) {
        uint64_t limit;
        int w = 0;

        if (cat_limit(c, &limit) != 0 || cat_open(c) != 0)
            return 1;
        if (c->r != NULL)
            w = cat_records(c, limit);
        if (w == CAT_FAIL)
            return 1;
        if (w == CAT_REOPEN)
            continue;
        if (w == 0)
            w = flushed(out_flush(&c->out));
        if (w != 0) {
            int ret = w > 0 ? 0 : 1;
            if (commit_group(c) != 0)
                ret = 1;
            report_abandon(c);
            return ret;
        }
        if (c->follow && clk_mono_ms() - c->committed_at >= COMMIT_MS && commit_group(c) != 0)
            return 1;
        if (!c->follow || signals > 0)
            break;
        sleep_poll();
        if (signals > 0)
            break;
    }
    return commit_group(c) == 0 ? 0 : 1;
}

static int cat(int argc, char **argv)
{
    cat_t c = {0};
    int ret = cat_args(argc, argv, &c);

    if (ret >= 0)
        return ret;
    if (cat_group_start(&c) != 0)
        return 1;
    install_stop(c.stop_ms);
    c.committed_at = clk_mono_ms();
    c.out.done = c.pos; /* a new group with no log yet commits 0 */
    ret = cat_loop(&c);
    if (have_timer)
        timer_delete(stop_timer);
    have_timer = false;
    log_reader_close(c.r);
    store_close(c.st);
    out_free(&c.out);
    return ret;
}

/* ---- log groups ---- */

static int groups_cmd(int argc, char **argv)
{
    opts_val_t v[GROUPS_MAX];
    const char *data;
    bool json;
    groups_entry_t *list = NULL;
    size_t n = 0, width = 5;
    uint64_t end = 0;
    int ret = 1, rc;
    rc = opts_parse(&GROUPS_CMD, argc, argv, v, NULL);
    data = v[GROUPS_DATA].str;
    json = v[GROUPS_JSON].on;
    opts_free(&GROUPS_CMD, v);
    if (rc != 0)
        return rc == 1 ? 0 : 2;
    if (!exists(data)) {
        fprintf(stderr, "ingestd log groups: no data directory %s\n", data);
        return 1;
    }
    rc = groups_list(data, &list, &n);
    if (rc != GROUPS_OK) {
        fprintf(stderr, "ingestd log groups: %s%s%s\n", groups_strerror(rc),
                rc == GROUPS_EIO ? ": " : "", rc == GROUPS_EIO ? strerror(errno) : "");
        goto out;
    }
    if (acked_end(data, "ingestd log groups", &end) != 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(list[i].name);
        width = l > width ? l : width;
    }
    if (!json)
        printf("%-*s  %12s  %12s\n", (int)width, "GROUP", "OFFSET", "LAG");
    for (size_t i = 0; i < n; i++) {
        uint64_t lag = end > list[i].offset ? end - list[i].offset : 0;
        if (json)
            printf("{\"group\":\"%s\",\"offset\":%" PRIu64 ",\"lag\":%" PRIu64 "}\n", list[i].name,
                   list[i].offset, lag);
        else
            printf("%-*s  %12" PRIu64 "  %12" PRIu64 "\n", (int)width, list[i].name, list[i].offset,
                   lag);
    }
    if (fflush(stdout) == EOF) {
        fprintf(stderr, "ingestd log groups: write: %s\n", strerror(errno));
        goto out;
    }
    ret = 0;
out:
    free(list);
    return ret;
}

int cmd_log(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "cat") == 0)
        return cat(argc - 1, argv + 1);
    if (strcmp(argv[1], "groups") == 0)
        return groups_cmd(argc - 1, argv + 1);
    fprintf(stderr, "ingestd log: unknown subcommand %s\n", argv[1]);
    usage(stderr);
    return 2;
}
