/* seal: the young store into generation files, and the generations to the window's rule. */
#include "storage/window/seal.h"

#include <stdlib.h>
#include <string.h>

/* A generation file's status as the store's, for callers that speak store.h. */
static int from_gen(int rc)
{
    switch (rc) {
    case GEN_OK:
        return STORE_OK;
    case GEN_EIO:
        return STORE_EIO;
    case GEN_NOMEM:
        return STORE_NOMEM;
    case GEN_CORRUPT:
    case GEN_VERSION:
        return STORE_CORRUPT;
    default:
        return STORE_ERROR;
    }
}

static int cmp_entry(const void *a, const void *b)
{
    return memcmp(((const gen_entry_t *)a)->key, ((const gen_entry_t *)b)->key, KEYHASH_LEN);
}

/* The young store's entries in key order: *out (malloc'ed) and *n. */
static int read_young(store_t *st, const store_info_t *si, gen_entry_t **out, size_t *n)
{
    store_entry_t *raw = malloc(si->keys * sizeof(*raw));
    gen_entry_t *e = malloc(si->keys * sizeof(*e));
    int rc = raw && e ? STORE_OK : STORE_NOMEM;
    if (rc == STORE_OK)
        rc = store_read_front(st, UINT64_MAX, raw, si->keys, n);
    /* Each key names its sequence entry and back; a count that differs means a checkpoint or
     * its evictions are half done (a replay after a crash is making them whole), and sealing
     * now would lose or resurrect keys: not now. */
    if (rc == STORE_OK && *n != si->keys)
        rc = STORE_BUSY;
    for (size_t i = 0; rc == STORE_OK && i < *n; i++) {
        memcpy(e[i].key, raw[i].key, KEYHASH_LEN);
        e[i].offset = raw[i].offset;
        e[i].received_ms = raw[i].received_ms;
    }
    free(raw);
    if (rc == STORE_OK)
        qsort(e, *n, sizeof(*e), cmp_entry);
    if (rc != STORE_OK) {
        free(e);
        e = NULL;
    }
    *out = e;
    return rc;
}

/* Writes entries[0..n) as generation `id` and adds it to the set. */
static int write_gen(genset_t *gs, gen_id_t id, const gen_entry_t *e, size_t n, unsigned bits)
{
    gen_writer_t *w = NULL;
    gen_t *g = NULL;
    int rc = gen_writer_open(genset_dir(gs), id, n, bits, &w);
    for (size_t i = 0; rc == GEN_OK && i < n; i++)
        rc = gen_writer_add(w, &e[i]);
    if (rc == GEN_OK) {
        rc = gen_writer_finish(w, &g);
        w = NULL;
    }
    gen_writer_abort(w);
    if (rc == GEN_OK && (rc = genset_add(gs, g)) != GEN_OK) {
        gen_close(g);
        gen_remove(genset_dir(gs), id);
    }
    return from_gen(rc);
}

/* The first sequence a new generation covers: the end of the newest one, or the sealed bound. */
static uint64_t next_first(genset_t *gs, const store_info_t *si)
{
    genset_view_t *v = genset_view(gs);
    genset_totals_t t;
    genset_view_totals(v, &t);
    genset_view_release(v);
    return t.end_seq > si->sealed_below ? t.end_seq : si->sealed_below;
}

int seal_young(store_t *st, genset_t *gs, unsigned bits_per_key, uint64_t *sealed)
{
    store_info_t si = {0};
    gen_entry_t *e = NULL;
    size_t n = 0;
    *sealed = 0;
    /* Store durable, then generation durable: the generation is named from the store's last
     * commit, which --store-sync meta leaves unsynced until the next one. A power loss after the
     * file but before that sync would keep a generation past the store's next sequence. */
    int rc = store_flush(st);
    if (rc == STORE_OK)
        rc = store_get_info(st, &si);
    if (rc != STORE_OK || si.keys == 0)
        return rc;
    gen_id_t id = {next_first(gs, &si), si.next_seq};
    if (id.first >= id.end)
        return STORE_CORRUPT;
    rc = read_young(st, &si, &e, &n);
    if (rc == STORE_OK)
        rc = write_gen(gs, id, e, n, bits_per_key);
    free(e);
    if (rc == STORE_OK)
        rc = store_txn_begin(st);
    if (rc == STORE_OK && (rc = store_seal(st, id.end)) != STORE_OK)
        store_txn_abort(st);
    if (rc == STORE_OK)
        rc = store_txn_commit(st);
    if (rc == STORE_OK)
        *sealed = n;
    return rc;
}

int seal_recover(store_t *st, genset_t *gs, seal_recovery_t *out)
{
    store_info_t si;
    memset(out, 0, sizeof(*out));
    int rc = store_get_info(st, &si);
    if (rc != STORE_OK)
        return rc;
    genset_view_t *v = genset_view(gs);
    genset_totals_t t;
    genset_view_totals(v, &t);
    genset_view_release(v);
    if (t.end_seq <= si.sealed_below)
        return STORE_OK;
    if ((rc = store_txn_begin(st)) != STORE_OK)
        return rc;
    /* Past the next sequence: the store's last commits were undone by a power loss after a
     * seal that wrote its file first (ingestd before the seal made the store durable first).
     * Every key those commits added is in the generation, and every young key they did not
     * evict too, so sealing up to its end keeps the window; the log replays the rest. */
    if (t.end_seq > si.next_seq) {
        out->rebased = true;
        out->lost_from = si.next_seq;
        rc = store_advance_seq(st, t.end_seq);
    }
    if (rc == STORE_OK)
        rc = store_seal(st, t.end_seq);
    if (rc != STORE_OK) {
        store_txn_abort(st);
        return rc;
    }
    rc = store_txn_commit(st);
    if (rc == STORE_OK)
        rc = store_flush(st); /* the young store's keys are about to be counted on as sealed */
    out->finished = rc == STORE_OK;
    out->end_seq = t.end_seq;
    return rc;
}

/* The keys of v's generations [from, to). */
static uint64_t keys_of(const genset_view_t *v, size_t from, size_t to)
{
    uint64_t keys = 0;
    for (size_t i = from; i < to && i < genset_view_count(v); i++) {
        gen_info_t info;
        gen_get_info(genset_view_gen(v, i), &info);
        keys += info.keys;
    }
    return keys;
}

/* Records, durably, that v's `drops` oldest generations are dropped (store_record_drop). */
static int record_drops(store_t *st, const genset_view_t *v, size_t drops)
{
    gen_info_t newest_dropped;
    gen_get_info(genset_view_gen(v, drops - 1), &newest_dropped);
    int rc = store_txn_begin(st);
    if (rc != STORE_OK)
        return rc;
    if ((rc = store_record_drop(st, newest_dropped.id.end)) != STORE_OK) {
        store_txn_abort(st);
        return rc;
    }
    rc = store_txn_commit(st);
    return rc == STORE_OK ? store_flush(st) : rc; /* durable before the first file goes */
}

int seal_maintain(store_t *st, genset_t *gs, const genset_policy_t *p, int64_t now_ms,
                  uint64_t young_keys, seal_result_t *out)
{
    memset(out, 0, sizeof(*out));
    genset_policy_t drops_only = *p;
    drops_only.fanin = 0;               /* rewrites are the merger's (storage/window/merger.h) */
    genset_view_t *v = genset_view(gs); /* the plan's, for its drops */
    genset_plan_t plan;
    genset_plan(v, &drops_only, now_ms, young_keys, &plan);
    size_t drops = plan.drop_age + plan.drop_size;
    int rc = drops > 0 ? record_drops(st, v, drops) : STORE_OK;
    if (rc != STORE_OK) {
        genset_view_release(v);
        return rc;
    }
    out->dropped_age = keys_of(v, 0, plan.drop_age);
    out->dropped_size = keys_of(v, plan.drop_age, drops);
    int grc = genset_drop_oldest(gs, v, drops);
    genset_view_release(v);
    return from_gen(grc);
}
