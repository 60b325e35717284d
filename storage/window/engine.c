/* engine.c: one de-duplication window: the young store, its generations, the seal, the merger
 * hand-off, per-source counts and the window's stats (engine.h). */
#include "storage/window/engine.h"

#include <stdlib.h>
#include <string.h>

#include "storage/datadir.h"

struct window_engine {
    window_engine_options_t o;
    store_t *st;        /* the young store */
    genset_t *gs;       /* the sealed generations (DIR/gens) */
    genset_view_t *gv;  /* their view, taken again after every change */
    merger_set_t *mp;   /* its handle with the merger, which rewrites gs off this thread */
    srcmap_t *sources;  /* the young store's keys by source: --max-keys is per source */
    bool own_sources;   /* sources is the engine's, not the caller's (o.sources) */
    int64_t maintained; /* when the generations were last kept to the rule */
    /* evictions of the open batch, counted when it commits */
    uint64_t batch_age, batch_size;
    /* since it was opened */
    uint64_t evicted_age, evicted_size, seals, seals_finished, seals_rebased, files_cleaned;
};

static uint64_t young_keys(const window_engine_t *e)
{
    return e->o.young_keys ? e->o.young_keys : GENSET_YOUNG_KEYS;
}

static int gen_status(int grc)
{
    return grc == GEN_OK ? STORE_OK : grc == GEN_NOMEM ? STORE_NOMEM : STORE_EIO;
}

/* The generations in DIR/gens, and a seal a crash cut short between its file and its LMDB
 * transaction finished (seal.h: store durable, then generation durable). */
static int open_gens(window_engine_t *e, const char *dir, window_engine_opened_t *opened)
{
    char *gdir = datadir_in(dir, DATADIR_GENS);
    int grc = gdir ? genset_open(gdir, 0, &e->gs) : GEN_NOMEM;
    free(gdir);
    if (grc == GEN_OK)
        grc = genset_set_budget(e->gs, e->o.max_keys);
    if (grc != GEN_OK) {
        opened->gen_rc = grc;
        return grc == GEN_NOMEM ? STORE_NOMEM : STORE_CORRUPT;
    }
    int src = seal_recover(e->st, e->gs, &opened->recovery);
    e->files_cleaned = opened->files_cleaned = genset_cleaned(e->gs);
    if (src == STORE_OK && opened->recovery.finished) {
        e->seals_finished = 1;
        e->seals_rebased = opened->recovery.rebased;
    }
    if (src == STORE_OK && merger_add(e->o.merger, e->o.merger_id, e->gs, &e->mp) != 0)
        src = STORE_NOMEM;
    if (src == STORE_OK)
        e->gv = genset_view(e->gs);
    return src;
}

int window_engine_open(store_t *st, const char *dir, const window_engine_options_t *o,
                       window_engine_t **out, window_engine_opened_t *opened)
{
    *out = NULL;
    memset(opened, 0, sizeof *opened);
    window_engine_t *e = calloc(1, sizeof *e);
    if (e == NULL) {
        store_close(st);
        return STORE_NOMEM;
    }
    e->o = *o;
    e->st = st;
    int src = open_gens(e, dir, opened);
    e->own_sources = o->sources == NULL;
    e->sources = o->sources ? o->sources : srcmap_new(o->max_keys);
    if (src == STORE_OK)
        src = e->sources ? store_count_sources(st, e->sources) : STORE_NOMEM;
    if (src != STORE_OK) {
        window_engine_close(e);
        return src;
    }
    *out = e;
    return STORE_OK;
}

void window_engine_close(window_engine_t *e)
{
    if (e == NULL)
        return;
    merger_remove(e->mp); /* cancels its merge: a close must not wait seconds for it */
    store_close(e->st);   /* aborts an open txn, if any */
    genset_view_release(e->gv);
    genset_close(e->gs);
    if (e->own_sources)
        srcmap_free(e->sources);
    free(e);
}

store_t *window_engine_store(window_engine_t *e)
{
    return e->st;
}

int window_engine_find_sealed(const window_engine_t *e, const uint8_t key[KEYHASH_LEN], bool *found,
                              uint64_t *owner)
{
    gen_entry_t ge;
    int grc = genset_view_find(e->gv, key, found, &ge);
    if (grc != GEN_OK)
        return gen_status(grc);
    *owner = *found ? ge.offset : 0;
    return STORE_OK;
}

int window_engine_added(window_engine_t *e, const uint8_t key[KEYHASH_LEN])
{
    return srcmap_add(e->sources, key) != 0 ? STORE_NOMEM : STORE_OK;
}

int window_engine_evict(window_engine_t *e, window_pass_t pass)
{
    return store_evict_sources(e->st, pass, e->sources, &e->batch_age, &e->batch_size);
}

int window_engine_commit(window_engine_t *e)
{
    int src = store_txn_commit(e->st);
    if (src == STORE_OK) {
        e->evicted_age += e->batch_age;
        e->evicted_size += e->batch_size;
    }
    e->batch_age = e->batch_size = 0;
    return src;
}

void window_engine_abort(window_engine_t *e)
{
    store_txn_abort(e->st);
    /* The batch's keys went with it: count the store again (a failure leaves the old counts,
     * which only bend the budget until the next seal). */
    store_count_sources(e->st, e->sources);
    e->batch_age = e->batch_size = 0;
}

int window_engine_maintain(window_engine_t *e, int64_t now_ms, int64_t every_ms)
{
    store_info_t info;
    uint64_t sealed = 0, young = young_keys(e);
    int src = store_get_info(e->st, &info);
    if (src == STORE_OK && genset_seals(e->o.max_keys, young) && info.keys >= young) {
        src = seal_young(e->st, e->gs, 0, &sealed);
        if (src == STORE_BUSY)
            src = STORE_OK; /* the young store is being made whole: seal later */
        e->seals += sealed > 0;
        if (src == STORE_OK && sealed > 0)
            src = store_get_info(e->st, &info);
        if (src == STORE_OK && sealed > 0)
            src = store_count_sources(e->st, e->sources); /* the young store is emptied */
    }
    if (src == STORE_OK && (sealed > 0 || now_ms - e->maintained >= every_ms)) {
        genset_policy_t gp = genset_policy_for(e->o.window_ms, e->o.max_keys, young);
        seal_result_t sr; /* seal_maintain drops only: rewrites are the merger's */
        e->maintained = now_ms;
        src = seal_maintain(e->gs, &gp, now_ms, info.keys, &sr);
        if (src == STORE_OK && (sealed > 0 || sr.dropped_age + sr.dropped_size > 0))
            merger_kick(e->mp);
    }
    window_engine_take_view(e);
    return src;
}

int64_t window_engine_maintained(const window_engine_t *e)
{
    return e->maintained;
}

int window_engine_lookup(const window_engine_t *e, const uint8_t key[KEYHASH_LEN], bool *found,
                         store_entry_t *entry, int64_t *oldest_ms)
{
    store_reader_t *r = NULL;
    store_info_t info;
    genset_totals_t gt;
    *found = false;
    int rc = store_reader_open(e->st, &r);
    if (rc == STORE_OK)
        rc = store_reader_info(r, &info);
    if (rc == STORE_OK)
        rc = store_reader_entry(r, key, found, entry);
    store_reader_close(r);
    if (rc != STORE_OK)
        return rc;
    genset_view_totals(e->gv, &gt);
    *oldest_ms = gt.keys ? gt.oldest_received_ms : (info.keys ? info.oldest_received_ms : 0);
    if (*found)
        return STORE_OK;
    gen_entry_t ge;
    int grc = genset_view_find(e->gv, key, found, &ge);
    if (grc != GEN_OK)
        return gen_status(grc);
    if (*found) {
        entry->offset = ge.offset;
        entry->received_ms = ge.received_ms;
    }
    return STORE_OK;
}

const srcmap_t *window_engine_sources(const window_engine_t *e)
{
    return e->sources;
}

const genset_view_t *window_engine_view(const window_engine_t *e)
{
    return e->gv;
}

genset_t *window_engine_gens(window_engine_t *e)
{
    return e->gs;
}

void window_engine_take_view(window_engine_t *e)
{
    genset_view_release(e->gv);
    e->gv = genset_view(e->gs);
}

void window_engine_kick(window_engine_t *e)
{
    merger_kick(e->mp);
}

uint64_t window_engine_merges(const window_engine_t *e)
{
    return merger_merges(e->mp);
}

void window_engine_stats(const window_engine_t *e, bool txn_open, window_stats_t *out)
{
    store_info_t info;
    genset_totals_t gt;
    memset(&info, 0, sizeof info);
    if (!txn_open)
        store_get_info(e->st, &info);
    genset_view_totals(e->gv, &gt);
    *out =
        (window_stats_t){.window_ms = e->o.window_ms,
                         .max_keys = e->o.max_keys,
                         .keys = info.keys + gt.keys,
                         .oldest_received_ms = gt.keys ? gt.oldest_received_ms
                                                       : (info.keys ? info.oldest_received_ms : 0),
                         .evicted_age = e->evicted_age,
                         .evicted_size = e->evicted_size,
                         .generations = genset_view_count(e->gv),
                         .generation_keys = gt.keys,
                         .generation_bytes = gt.file_bytes,
                         .generation_memory_bytes = gt.memory_bytes,
                         .seals = e->seals,
                         .merges = merger_merges(e->mp),
                         .seals_finished = e->seals_finished,
                         .seals_rebased = e->seals_rebased,
                         .generation_files_cleaned = e->files_cleaned};
}
