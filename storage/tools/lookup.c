/* lookup.c: `ingestd lookup`'s read-only view of a data dir (storage/tools/lookup.h has the
 * design). */
#include "storage/tools/lookup.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "storage/datadir.h"
#include "storage/fsutil.h"
#include "storage/window/genset.h"
#include "storage/log/log.h"
#include "storage/window/pending.h"
#include "storage/window/retag.h"
#include "storage/secret.h"
#include "storage/window/store.h"
#include "storage/window/settings.h"

struct lookup {
    char *store_dir, *gens_dir, *log_dir;
    uint8_t secret[KEYHASH_SECRET_LEN];
    store_t *store;
    store_reader_t *reader;
    store_info_t si;
    genset_t *gens;
    genset_view_t *gview;
    genset_totals_t gt;
    pending_t *tail;  /* the acknowledged records past si.applied, by key (the newest wins) */
    uint64_t gap_end; /* > si.applied: retention deleted [applied, gap_end) before a checkpoint */
};

static int read_secret(lookup_t *lk, const char *data_dir, char *errbuf, size_t errlen)
{
    int rc = secret_read(data_dir, lk->secret);
    if (rc != 1) {
        errbuf_printf(errbuf, errlen, "%s/%s: %s", data_dir, datadir_name(DATADIR_SECRET),
                      rc == 0           ? "missing (no data dir here?)"
                      : errno == EINVAL ? "not a 16-byte secret"
                                        : strerror(errno));
        return -1;
    }
    return 0;
}

/* Reads the acknowledged records past the snapshot's applied offset into lk->tail. */
static int read_tail(lookup_t *lk, const char *data_dir, char *errbuf, size_t errlen)
{
    uint64_t acked = 0, seq, from = lk->si.applied;
    log_reader_t *r = NULL;
    log_record_t rec;
    log_info_t li;
    int rc = LOG_OK;

    lk->tail = pending_new(0);
    if (!lk->tail) {
        errbuf_printf(errbuf, errlen, "out of memory");
        return -1;
    }
    if (commit_read_acked(data_dir, &acked) != 0 || acked <= from)
        return 0; /* nothing acknowledged past the checkpoint (or a server that never wrote it) */
    /* Retention never deletes the active segment, so this only matters for a restored copy. */
    if (log_describe(lk->log_dir, &li, NULL) == LOG_OK && li.first_offset > from)
        from = lk->gap_end = li.first_offset;
    /* A replay cut short by a crash may leave records from before tags past the checkpoint. */
    uint64_t tagged_from;
    if (retag_read_from(data_dir, &tagged_from) < 0) {
        errbuf_printf(errbuf, errlen, "reading %s/%s: %s", data_dir,
                      datadir_name(DATADIR_TAGGED_FROM),
                      errno == EINVAL ? "malformed" : strerror(errno));
        return -1;
    }
    rc = log_reader_open(lk->log_dir, from, &r);
    while (rc == LOG_OK && (rc = log_reader_next(r, acked, &rec)) == LOG_OK) {
        retag_record(lk->secret, tagged_from, &rec);
        if (pending_add(lk->tail, rec.key, rec.received_ms, rec.offset, &seq) != 0) {
            rc = LOG_NOMEM;
            break;
        }
    }
    log_reader_close(r);
    if (rc != LOG_END) {
        errbuf_printf(errbuf, errlen, "reading %s from offset %llu: %s", lk->log_dir,
                      (unsigned long long)from, log_strerror(rc));
        return -1;
    }
    return 0;
}

int lookup_open(const char *data_dir, lookup_t **out, char *errbuf, size_t errlen)
{
    store_options_t so = {.read_only = true};
    int rc;

    *out = NULL;
    lookup_t *lk = calloc(1, sizeof(*lk));
    if (!lk)
        goto nomem;
    lk->store_dir = datadir_in(data_dir, DATADIR_STORE);
    lk->log_dir = datadir_in(data_dir, DATADIR_LOG);
    lk->gens_dir = lk->store_dir ? datadir_in(lk->store_dir, DATADIR_GENS) : NULL;
    if (!lk->store_dir || !lk->log_dir || !lk->gens_dir)
        goto nomem;
    if (read_secret(lk, data_dir, errbuf, errlen) != 0)
        goto fail;
    /* The snapshot before the generations: see lookup.h. */
    if ((rc = store_open(lk->store_dir, &so, &lk->store)) != STORE_OK ||
        (rc = store_reader_open(lk->store, &lk->reader)) != STORE_OK ||
        (rc = store_reader_info(lk->reader, &lk->si)) != STORE_OK) {
        errbuf_printf(errbuf, errlen, "reading the LMDB store %s: %s (%s)", lk->store_dir,
                      store_strerror(rc),
                      rc == STORE_VERSION ? "written by an older release: start `ingestd serve` "
                                            "once, or run `ingestd rebuild`, to migrate it"
                      : lk->store         ? store_detail(lk->store)
                                          : "");
        goto fail;
    }
    if (genset_open_read_only(lk->gens_dir, &lk->gens) != GEN_OK) {
        errbuf_printf(errbuf, errlen, "reading the generations in %s", lk->gens_dir);
        goto fail;
    }
    /* The server's per-source budget cuts generations as its own lookups do (DIR/WINDOW). */
    winsettings_t ws;
    if (winsettings_read(data_dir, &ws) == 0 &&
        genset_set_budget(lk->gens, ws.max_keys) != GEN_OK) {
        errbuf_printf(errbuf, errlen, "out of memory");
        goto fail;
    }
    lk->gview = genset_view(lk->gens);
    genset_view_totals(lk->gview, &lk->gt);
    if (read_tail(lk, data_dir, errbuf, errlen) != 0)
        goto fail;
    *out = lk;
    return 0;
nomem:
    errbuf_printf(errbuf, errlen, "out of memory");
fail:
    lookup_close(lk);
    return -1;
}

void lookup_close(lookup_t *lk)
{
    if (!lk)
        return;
    pending_free(lk->tail);
    genset_view_release(lk->gview);
    genset_close(lk->gens);
    store_reader_close(lk->reader);
    store_close(lk->store);
    free(lk->store_dir);
    free(lk->gens_dir);
    free(lk->log_dir);
    free(lk);
}

const uint8_t *lookup_secret(const lookup_t *lk)
{
    return lk->secret;
}

const char *lookup_log_dir(const lookup_t *lk)
{
    return lk->log_dir;
}

/* The oldest key's receivedAt: the generations hold the oldest keys, then LMDB, then the tail. */
static int64_t window_start(const lookup_t *lk)
{
    if (lk->gt.keys > 0)
        return lk->gt.oldest_received_ms;
    if (lk->si.keys > 0)
        return lk->si.oldest_received_ms;
    if (pending_count(lk->tail) > 0)
        return pending_items(lk->tail)[0].received_ms;
    return 0;
}

int lookup_find(lookup_t *lk, const uint8_t key[KEYHASH_LEN], commit_lookup_t *out)
{
    store_entry_t e;
    bool present = false;

    memset(out, 0, sizeof(*out));
    out->window_start_ms = window_start(lk);
    /* The newest decides, as in the server's view: the tail, the young store, the generations. */
    const store_entry_t *it = pending_find(lk->tail, key);
    if (it) {
        out->found = true;
        out->offset = it->offset;
        out->received_ms = it->received_ms;
        return 0;
    }
    if (store_reader_entry(lk->reader, key, &present, &e) != STORE_OK)
        return -1;
    if (present) {
        out->found = true;
        out->offset = e.offset;
        out->received_ms = e.received_ms;
        return 0;
    }
    gen_entry_t ge;
    if (genset_view_find(lk->gview, key, &out->found, &ge) != GEN_OK)
        return -1;
    if (out->found) {
        out->offset = ge.offset;
        out->received_ms = ge.received_ms;
    }
    return !out->found && lk->gap_end > lk->si.applied ? 1 : 0;
}
