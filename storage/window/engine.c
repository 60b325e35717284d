/* engine.c: one de-duplication window: the young store, its generations, the seal, the merger
 * hand-off, per-source counts and the window's stats (engine.h). */
#include "storage/window/engine.h"

#include <stdlib.h>
#include <string.h>

#include "storage/datadir.h"

struct window_engine {
    window_engine_options_t o;
    store_t *st;             /* the young store */
    genset_t *gs;            /* the sealed generations (DIR/gens) */
    genset_view_t *gv;       /* their view, taken again after every change */
    merger_set_t *mp;        /* its handle with the merger, which rewrites gs off this thread */
    srcmap_t *sources;       /* the young store's keys by source: --max-keys is per source */
    bool own_sources;        /* sources is the engine's, not the caller's (o.sources) */
    window_counts_t *counts; /* o.counts, or own_counts */
    window_counts_t own_counts;
    int64_t maintained; /* when the generations were last kept to the rule */
    /* evictions of the open batch, counted when it commits */
    uint64_t batch_age, batch_size;
};

/* The counts are read by the stats on another thread than the one that seals (engine.h). */
static void count(uint64_t *n, uint64_t by)
{
    if (by > 0)
        __atomic_fetch_add(n, by, __ATOMIC_RELAXED);
}

static uint64_t counted(const uint64_t *n)
{
    return __atomic_load_n(n, __ATOMIC_RELAXED);
}

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
    opened->files_cleaned = genset_cleaned(e->gs);
    count(&e->counts->files_cleaned, opened->files_cleaned);
    if (src == STORE_OK && opened->recovery.finished) {
        count(&e->counts->seals_finished, 1);
        count(&e->counts->seals_rebased, opened->recovery.rebased ? 1 : 0);
    }
    if (src == STORE_OK && merger_add(e->o.merger, e->o.merger_id, e->gs, &e->mp) != 0)
        src = STORE_NOMEM;
    store_info_t si;
    if (src == STORE_OK && (src = store_get_info(e->st, &si)) == STORE_OK) {
        e->gv = genset_view(e->gs);
        opened->gens_missing =
            genset_view_missing(e->gv, si.dropped_below, si.sealed_below, &opened->missing);
    }
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
    e->counts = o->counts ? o->counts : &e->own_counts;
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
    count(&e->counts->merges, merger_merges(e->mp)); /* the counts outlive the set */
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
        count(&e->counts->evicted_age, e->batch_age);
        count(&e->counts->evicted_size, e->batch_size);
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

int window_engine_maintain(window_engine_t *e, const window_maintain_t *m, window_maintained_t *out)
{
    window_maintained_t none = {0};
    store_info_t info;
    uint64_t young = young_keys(e), seal_at = m->seal_at ? m->seal_at : young;
    out = out ? out : &none;
    memset(out, 0, sizeof *out);
    int src = store_get_info(e->st, &info);
    if (src == STORE_OK && genset_seals(e->o.max_keys, young) && info.keys >= seal_at) {
        src = seal_young(e->st, e->gs, 0, &out->sealed);
        if (src == STORE_BUSY)
            src = STORE_OK; /* the young store is being made whole: seal later */
        else if (src == STORE_OK && out->sealed > 0)
            info.keys = 0; /* the seal emptied it */
        count(&e->counts->seals, out->sealed > 0);
        if (src == STORE_OK && out->sealed > 0 && !m->caller_keeps_view)
            src = store_count_sources(e->st, e->sources);
    }
    if (src == STORE_OK && (out->sealed > 0 || m->now_ms - e->maintained >= m->every_ms)) {
        genset_policy_t gp = genset_policy_for(e->o.window_ms, e->o.max_keys, young);
        seal_result_t sr; /* seal_maintain drops only: rewrites are the merger's */
        e->maintained = m->now_ms;
        src = seal_maintain(e->st, e->gs, &gp, m->now_ms, info.keys, &sr);
        if (src == STORE_OK) {
            out->dropped_age = sr.dropped_age;
            out->dropped_size = sr.dropped_size;
            count(&e->counts->evicted_age, sr.dropped_age);
            count(&e->counts->evicted_size, sr.dropped_size);
        }
    }
    if (out->sealed + out->dropped_age + out->dropped_size > 0)
        merger_kick(e->mp);
    if (!m->caller_keeps_view)
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

size_t window_engine_sources_room(const window_engine_t *e)
{
    const genset_source_t *g;
    return srcmap_count(e->sources) + genset_view_sources(e->gv, &g);
}

/* out[0..*n)'s entry of `tag`, added when new (the caller made room). */
static window_source_t *tally_entry(window_source_t *out, size_t *n, uint32_t tag)
{
    for (size_t i = 0; i < *n; i++)
        if (out[i].tag == tag)
            return &out[i];
    out[*n] = (window_source_t){.tag = tag};
    return &out[(*n)++];
}

size_t window_engine_tally_sources(window_engine_t *e, window_source_t *out)
{
    const genset_source_t *g;
    const srcmap_entry_t *y = srcmap_entries(e->sources);
    size_t ny = srcmap_count(e->sources), ng = genset_view_sources(e->gv, &g), n = 0;
    for (size_t i = 0; i < ny; i++)
        out[n++] = (window_source_t){.tag = y[i].tag,
                                     .keys = y[i].keys,
                                     .evicted_age = y[i].evicted_age,
                                     .evicted_size = y[i].evicted_size,
                                     .forgot_ms = y[i].forgot_ms};
    for (size_t i = 0; i < ng; i++) {
        window_source_t *s = tally_entry(out, &n, g[i].tag);
        s->keys += g[i].keys;
        if (g[i].forgot_ms > s->forgot_ms)
            s->forgot_ms = g[i].forgot_ms;
        /* Kept in the young part's map too: it outlives the set (a re-open of the window). */
        srcmap_entry_t *m = g[i].forgot_ms ? srcmap_get(e->sources, g[i].tag) : NULL;
        if (m && g[i].forgot_ms > m->forgot_ms)
            m->forgot_ms = g[i].forgot_ms;
    }
    return n;
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
    return counted(&e->counts->merges) + merger_merges(e->mp);
}

void window_engine_stats(const window_engine_t *e, bool skip_young, window_stats_t *out)
{
    store_info_t info;
    genset_totals_t gt;
    const window_counts_t *n = e->counts;
    memset(&info, 0, sizeof info);
    if (!skip_young)
        store_get_info(e->st, &info);
    genset_view_totals(e->gv, &gt);
    *out =
        (window_stats_t){.window_ms = e->o.window_ms,
                         .max_keys = e->o.max_keys,
                         .keys = info.keys + gt.keys,
                         .oldest_received_ms = gt.keys ? gt.oldest_received_ms
                                                       : (info.keys ? info.oldest_received_ms : 0),
                         .evicted_age = counted(&n->evicted_age),
                         .evicted_size = counted(&n->evicted_size),
                         .generations = genset_view_count(e->gv),
                         .generation_keys = gt.keys,
                         .generation_bytes = gt.file_bytes,
                         .generation_memory_bytes = gt.memory_bytes,
                         .seals = counted(&n->seals),
                         .merges = window_engine_merges(e),
                         .seals_finished = counted(&n->seals_finished),
                         .seals_rebased = counted(&n->seals_rebased),
                         .generation_files_cleaned = counted(&n->files_cleaned)};
}
