/* acked.c: the acknowledged end of a data dir's event log, read from outside the server. */
#include "cmd/internal.h"

#include <stdio.h>
#include <sys/stat.h>

#include "storage/commit/commit.h"
#include "storage/datadir.h"
#include "storage/log/log.h"
#include "storage/window/store.h"

static int log_end(const char *logdir, const char *who, uint64_t *end)
{
    struct stat sb;
    log_info_t li;
    log_reader_t *r = NULL;
    log_record_t rec;

    *end = 0;
    if (stat(logdir, &sb) != 0)
        return 0;
    int rc = log_describe(logdir, &li, NULL);
    if (rc == LOG_OK)
        rc = log_reader_open(logdir, li.first_offset, &r);
    while (rc == LOG_OK && (rc = log_reader_next(r, UINT64_MAX, &rec)) == LOG_OK)
        ;
    if (rc != LOG_END) {
        fprintf(stderr, "%s: cannot read %s: %s\n", who, logdir, log_strerror(rc));
        log_reader_close(r);
        return -1;
    }
    *end = log_reader_position(r);
    log_reader_close(r);
    return 0;
}

int acked_end(const char *data, const char *who, uint64_t *end)
{
    char storedir[4200], logdir[4200], mdb[4300];
    struct stat sb;
    int rc;

    (void)datadir_put(storedir, sizeof storedir, data, DATADIR_STORE);
    (void)datadir_put(mdb, sizeof mdb, storedir, DATADIR_LMDB_DATA);
    (void)datadir_put(logdir, sizeof logdir, data, DATADIR_LOG);
    *end = 0;
    /* As in `log cat`: the server's ACKED first, needing no LMDB reader slot. */
    if (commit_read_acked(data, end) == 0)
        return 0;
    if (stat(mdb, &sb) != 0)
        return log_end(logdir, who, end);
    store_options_t so = {.map_size = 0, .read_only = true, .older_ok = true};
    store_info_t info;
    store_t *st = NULL;
    rc = store_open(storedir, &so, &st);
    if (rc == STORE_OK)
        rc = store_get_info(st, &info);
    store_close(st);
    if (rc != STORE_OK) {
        fprintf(stderr, "%s: cannot read %s: %s\n", who, storedir, store_strerror(rc));
        return -1;
    }
    *end = info.applied;
    return 0;
}
