/* view.c: what the operator tools read of a data dir: its paths, and one log record as the
 * replay sees it. */
#include <stdio.h>

#include "storage/tools/internal.h"
#include "storage/window/retag.h"

void tools_path(char *out, const char *dir, const char *name)
{
    if (snprintf(out, TOOLS_PATH_LEN, "%s/%s", dir, name) >= TOOLS_PATH_LEN)
        out[TOOLS_PATH_LEN - 1] = '\0';
}

void tools_entry(char *out, const char *dir, datadir_entry_t e)
{
    if (datadir_put(out, TOOLS_PATH_LEN, dir, e) != 0)
        out[0] = '\0'; /* too long: found nowhere */
}

int tools_read_record(const char *logdir, const uint8_t *secret, uint64_t tagged_from,
                      uint64_t offset, log_record_t *rec, log_reader_t **r)
{
    /* A short way forward is read through; a longer one, or back, opens the reader there. */
    log_record_t skip;
    while (*r && log_reader_position(*r) < offset && offset - log_reader_position(*r) <= 64 &&
           log_reader_next(*r, offset, &skip) == LOG_OK)
        ;
    if (!*r || log_reader_position(*r) != offset) {
        log_reader_close(*r);
        *r = NULL;
        int lrc = log_reader_open(logdir, offset, r);
        if (lrc != LOG_OK)
            return lrc;
    }
    int lrc = log_reader_next(*r, offset + 1, rec);
    if (lrc == LOG_OK)
        retag_record(secret, tagged_from, rec);
    return lrc;
}
