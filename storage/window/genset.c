/* genset: the sealed generations of one window, as reference-counted views
 * (storage/window/genset.h). */
#include "storage/window/genset.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "storage/fsutil.h"

/*
 * DESIGN. A view is an array of slots, oldest first; a slot holds one open
 * generation and counts the views that hold it. A change builds a new array,
 * publishes it as the current view and drops the set's reference to the old
 * one: readers that still hold the old view keep using it, and a generation
 * is closed with the last view that held it. Every count is under one mutex:
 * views are taken once per group commit, not per key, so it is never hot.
 * Changes come from more than one thread (seals and drops from the
 * checkpointer, merges from the merger), so each is made under a second
 * mutex, `change_mu`, from the current view as it is then; a merge writes
 * its file first, without it, and publishes only if its inputs are all still
 * in the set.
 *
 * Contents:
 *   slots and views   slot_new, view_new, view_unref, publish
 *   open              scan_dir, keep_ranges, open_all, open_set, genset_open,
 *                     genset_open_read_only, genset_close
 *   lookups           genset_view_find, genset_view_find_many, genset_view_totals
 *   changes           genset_add, genset_drop_oldest, genset_merge
 *   the rule          genset_plan
 */

#define PREFETCH_AHEAD 8 /* keys whose filter blocks are loaded ahead of the one tested */

typedef struct slot {
    gen_t *g;
    gen_info_t info;
    unsigned refs; /* views holding it */
} slot_t;

struct genset_view {
    genset_t *gs;
    unsigned refs;
    size_t n;
    slot_t **slots; /* oldest first */
    /* Per-source budgets (view_cut_sources): every source of the view by tag, ascending; the
     * sequence at or before which a generation's keys of it are out of the window (0: none);
     * and per slot, how many of its keys are out so. */
    genset_source_t *src;
    uint64_t *src_cut;
    size_t nsrc;
    uint64_t *cut_in;
};

struct genset {
    char *dir;
    unsigned bits;
    uint64_t cleaned; /* files genset_open removed: unfinished ones, covered merge inputs */
    uint64_t budget;  /* keys per source (0: none); under change_mu, read under mu */
    /* Under mu: per source, the newest receivedAt any view cut (since the open), so a source's
     * forgetting outlives the merge that sheds the keys. */
    genset_source_t *forgot;
    size_t nforgot, forgot_cap;
    pthread_mutex_t mu;        /* the counts, and cur's pointer */
    pthread_mutex_t change_mu; /* one change at a time (before mu) */
    genset_view_t *cur;
};

/* ---- slots and views ---- */

static slot_t *slot_new(gen_t *g)
{
    slot_t *s = calloc(1, sizeof(*s));
    if (s) {
        s->g = g;
        gen_get_info(g, &s->info);
    }
    return s;
}

static int src_cmp(const void *a, const void *b)
{
    uint32_t x = ((const genset_source_t *)a)->tag, y = ((const genset_source_t *)b)->tag;
    return x < y ? -1 : x > y;
}

/* The index of `tag` in v->src, or SIZE_MAX. */
static size_t src_find(const genset_view_t *v, uint32_t tag)
{
    size_t lo = 0, hi = v->nsrc;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v->src[mid].tag < tag)
            lo = mid + 1;
        else if (v->src[mid].tag > tag)
            hi = mid;
        else
            return mid;
    }
    return SIZE_MAX;
}

/* The sequence at or before which generations hold no key of `key`'s source in the window. */
static uint64_t view_cut(const genset_view_t *v, const uint8_t key[KEYHASH_LEN])
{
    if (v->nsrc == 0)
        return 0;
    size_t i = src_find(v, keyhash_source(key));
    return i == SIZE_MAX ? 0 : v->src_cut[i];
}

/*
 * Per-source budgets (docs/window.md): for each source, newest generation
 * first, its keys count towards `budget`; the generation that reaches it is
 * kept whole, and every older one is cut for that source: its keys of it
 * are out of the window (lookups pass them over, merges leave them out, and
 * a generation cut for all its sources is dropped). So each source keeps at
 * least `budget` keys, plus at most one generation's worth of its own, and
 * no other source's keys move its cut. A pure function of the slots.
 */
static int view_cut_sources(genset_view_t *v, uint64_t budget)
{
    size_t total = 0;
    for (size_t i = 0; i < v->n; i++) {
        const gen_source_t *t;
        total += gen_sources(v->slots[i]->g, &t);
    }
    v->src = calloc(total ? total : 1, sizeof(*v->src));
    v->src_cut = calloc(total ? total : 1, sizeof(*v->src_cut));
    v->cut_in = calloc(v->n ? v->n : 1, sizeof(*v->cut_in));
    if (!v->src || !v->src_cut || !v->cut_in)
        return GEN_NOMEM;
    for (size_t i = 0; i < v->n; i++) {
        const gen_source_t *t;
        for (size_t k = 0, m = gen_sources(v->slots[i]->g, &t); k < m; k++)
            v->src[v->nsrc++].tag = t[k].tag;
    }
    qsort(v->src, v->nsrc, sizeof(*v->src), src_cmp);
    size_t u = 0;
    for (size_t i = 0; i < v->nsrc; i++)
        if (u == 0 || v->src[u - 1].tag != v->src[i].tag)
            v->src[u++].tag = v->src[i].tag;
    v->nsrc = u;
    for (size_t i = v->n; i-- > 0;) {
        const gen_source_t *t;
        for (size_t k = 0, m = gen_sources(v->slots[i]->g, &t); k < m; k++) {
            size_t j = src_find(v, t[k].tag);
            genset_source_t *s = &v->src[j];
            if (budget == 0 || s->keys < budget) {
                s->keys += t[k].keys;
                continue;
            }
            if (v->src_cut[j] == 0)
                v->src_cut[j] = v->slots[i]->info.id.end;
            s->cut_keys += t[k].keys;
            if (t[k].newest_ms > s->forgot_ms)
                s->forgot_ms = t[k].newest_ms;
            v->cut_in[i] += t[k].keys;
        }
    }
    return GEN_OK;
}

/* Under mu: folds s's cut keys into gs->forgot, and s's forgot_ms becomes the newest ever. */
static void remember_forgot(genset_t *gs, genset_source_t *s)
{
    size_t i = 0;
    while (i < gs->nforgot && gs->forgot[i].tag != s->tag)
        i++;
    if (i == gs->nforgot) {
        if (s->forgot_ms == 0)
            return;
        if (gs->nforgot == gs->forgot_cap) {
            size_t cap = gs->forgot_cap ? gs->forgot_cap * 2 : 8;
            genset_source_t *p = realloc(gs->forgot, cap * sizeof(*p));
            if (!p)
                return; /* the figure only: it stays as the view has it */
            gs->forgot = p;
            gs->forgot_cap = cap;
        }
        gs->forgot[gs->nforgot++] = (genset_source_t){.tag = s->tag};
    }
    if (s->forgot_ms > gs->forgot[i].forgot_ms)
        gs->forgot[i].forgot_ms = s->forgot_ms;
    s->forgot_ms = gs->forgot[i].forgot_ms;
}

static void view_free(genset_view_t *v)
{
    free(v->slots);
    free(v->src);
    free(v->src_cut);
    free(v->cut_in);
    free(v);
}

/* A view of slots[0..n) (copied), holding each; refs 1. Under gs->mu or before sharing. */
static genset_view_t *view_new(genset_t *gs, slot_t *const *slots, size_t n)
{
    genset_view_t *v = calloc(1, sizeof(*v));
    if (!v)
        return NULL;
    v->slots = calloc(n ? n : 1, sizeof(*v->slots));
    v->n = n;
    if (!v->slots) {
        view_free(v);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        v->slots[i] = slots[i];
    if (view_cut_sources(v, gs->budget) != GEN_OK) {
        view_free(v);
        return NULL;
    }
    for (size_t i = 0; i < v->nsrc; i++)
        remember_forgot(gs, &v->src[i]);
    v->gs = gs;
    v->refs = 1;
    for (size_t i = 0; i < n; i++)
        slots[i]->refs++;
    return v;
}

/* Drops one reference to v; closes what nothing holds any more. Under gs->mu. */
static void view_unref(genset_view_t *v)
{
    if (!v || --v->refs > 0)
        return;
    for (size_t i = 0; i < v->n; i++) {
        if (--v->slots[i]->refs == 0) {
            gen_close(v->slots[i]->g);
            free(v->slots[i]);
        }
    }
    view_free(v);
}

/* Makes slots[0..n) the current view. A slot no view takes (refs 0 after) is the caller's. */
static int publish(genset_t *gs, slot_t *const *slots, size_t n)
{
    pthread_mutex_lock(&gs->mu);
    genset_view_t *v = view_new(gs, slots, n);
    if (v) {
        view_unref(gs->cur);
        gs->cur = v;
    }
    pthread_mutex_unlock(&gs->mu);
    return v ? GEN_OK : GEN_NOMEM;
}

genset_view_t *genset_view(genset_t *gs)
{
    pthread_mutex_lock(&gs->mu);
    genset_view_t *v = gs->cur;
    v->refs++;
    pthread_mutex_unlock(&gs->mu);
    return v;
}

void genset_view_release(genset_view_t *v)
{
    if (!v)
        return;
    genset_t *gs = v->gs;
    pthread_mutex_lock(&gs->mu);
    view_unref(v);
    pthread_mutex_unlock(&gs->mu);
}

size_t genset_view_count(const genset_view_t *v)
{
    return v->n;
}

const gen_t *genset_view_gen(const genset_view_t *v, size_t i)
{
    return i < v->n ? v->slots[i]->g : NULL;
}

/* ---- open ---- */

/* The generation ids in `dir` into *ids (malloc'ed), removing unfinished ".tmp" files unless
 * `read_only`. */
static int scan_dir(const char *dir, bool read_only, gen_id_t **ids, size_t *n, uint64_t *cleaned)
{
    *ids = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return GEN_EIO;
    size_t cap = 0;
    int rc = GEN_OK;
    struct dirent *de;
    while (rc == GEN_OK && (de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        gen_id_t id;
        if (!read_only && de->d_name[0] == '.' && len > 8 &&
            strcmp(de->d_name + len - 8, ".gen.tmp") == 0) {
            if (unlinkat(dirfd(d), de->d_name, 0) != 0 && errno != ENOENT)
                rc = GEN_EIO;
            (*cleaned)++;
            continue;
        }
        if (gen_parse_name(de->d_name, &id) != 0)
            continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            gen_id_t *more = realloc(*ids, cap * sizeof(**ids));
            if (!more) {
                rc = GEN_NOMEM;
                break;
            }
            *ids = more;
        }
        (*ids)[(*n)++] = id;
    }
    closedir(d);
    if (rc == GEN_OK && *n > 1)
        qsort(*ids, *n, sizeof(**ids), gen_id_cmp);
    return rc;
}

/*
 * Keeps, of ids sorted by gen_id_cmp, those no other range covers, removing the
 * covered files (merge inputs a crash left behind) unless `read_only`; *n
 * becomes the kept count.
 */
static int keep_ranges(const char *dir, bool read_only, gen_id_t *ids, size_t *n, uint64_t *cleaned)
{
    size_t kept = 0;
    for (size_t i = 0; i < *n; i++) {
        if (kept > 0 && ids[i].end <= ids[kept - 1].end) {
            int rc = read_only ? GEN_OK : gen_remove(dir, ids[i]);
            if (rc != GEN_OK)
                return rc;
            *cleaned += !read_only;
            continue;
        }
        if (kept > 0 && ids[i].first < ids[kept - 1].end)
            return GEN_CORRUPT; /* overlapping, and neither covers the other */
        ids[kept++] = ids[i];
    }
    *n = kept;
    return GEN_OK;
}

/* Opens ids[0..n) into slots (allocated; *slots freed by the caller with their gens). */
static int open_all(const char *dir, const gen_id_t *ids, size_t n, slot_t ***slots)
{
    *slots = calloc(n ? n : 1, sizeof(**slots));
    if (!*slots)
        return GEN_NOMEM;
    for (size_t i = 0; i < n; i++) {
        gen_t *g = NULL;
        int rc = gen_open(dir, ids[i], &g);
        if (rc == GEN_OK && !((*slots)[i] = slot_new(g))) {
            gen_close(g);
            rc = GEN_NOMEM;
        }
        if (rc != GEN_OK)
            return rc;
    }
    return GEN_OK;
}

/* genset_open and genset_open_read_only. */
static int open_set(const char *dir, unsigned bits_per_key, bool read_only, genset_t **out)
{
    *out = NULL;
    genset_t *gs = calloc(1, sizeof(*gs));
    if (!gs)
        return GEN_NOMEM;
    pthread_mutex_init(&gs->mu, NULL);
    pthread_mutex_init(&gs->change_mu, NULL);
    gs->bits = bits_per_key;
    gs->dir = strdup(dir);
    gen_id_t *ids = NULL;
    size_t n = 0;
    slot_t **slots = NULL;
    int rc = gs->dir ? GEN_OK : GEN_NOMEM;
    if (rc == GEN_OK && !read_only && fsutil_mkdirs(dir) != 0)
        rc = GEN_EIO;
    if (rc == GEN_OK && !(read_only && access(dir, F_OK) != 0 && errno == ENOENT))
        rc = scan_dir(dir, read_only, &ids, &n, &gs->cleaned);
    if (rc == GEN_OK)
        rc = keep_ranges(dir, read_only, ids, &n, &gs->cleaned);
    if (rc == GEN_OK)
        rc = open_all(dir, ids, n, &slots);
    if (rc == GEN_OK && !(gs->cur = view_new(gs, slots, n)))
        rc = GEN_NOMEM;
    for (size_t i = 0; slots && i < n; i++) {
        if (slots[i] && slots[i]->refs == 0) { /* not taken by a view: failed part way */
            gen_close(slots[i]->g);
            free(slots[i]);
        }
    }
    free(slots);
    free(ids);
    if (rc != GEN_OK) {
        genset_close(gs);
        return rc;
    }
    *out = gs;
    return GEN_OK;
}

int genset_open(const char *dir, unsigned bits_per_key, genset_t **out)
{
    return open_set(dir, bits_per_key, false, out);
}

int genset_open_read_only(const char *dir, genset_t **out)
{
    /* A merge or drop of the server's may remove a file between the listing and its open: the
     * set has changed under us, so look again (it settles within one merge). */
    int rc = GEN_NOTFOUND;
    for (int tries = 0; tries < 5 && rc == GEN_NOTFOUND; tries++)
        rc = open_set(dir, 0, true, out);
    return rc;
}

void genset_close(genset_t *gs)
{
    if (!gs)
        return;
    pthread_mutex_lock(&gs->mu);
    view_unref(gs->cur);
    pthread_mutex_unlock(&gs->mu);
    pthread_mutex_destroy(&gs->mu);
    pthread_mutex_destroy(&gs->change_mu);
    free(gs->forgot);
    free(gs->dir);
    free(gs);
}

uint64_t genset_cleaned(const genset_t *gs)
{
    return gs->cleaned;
}

const char *genset_dir(const genset_t *gs)
{
    return gs->dir;
}

unsigned genset_bits_per_key(const genset_t *gs)
{
    return gs->bits;
}

/* ---- lookups ---- */

void genset_view_totals(const genset_view_t *v, genset_totals_t *out)
{
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < v->n; i++) {
        const gen_info_t *in = &v->slots[i]->info;
        out->keys += in->keys - v->cut_in[i];
        out->cut_keys += v->cut_in[i];
        out->file_bytes += in->file_bytes;
        out->memory_bytes += in->memory_bytes;
    }
    if (v->n > 0) {
        out->oldest_received_ms = v->slots[0]->info.min_received_ms;
        out->oldest_offset = v->slots[0]->info.min_offset;
        out->end_seq = v->slots[v->n - 1]->info.id.end;
    }
}

bool genset_view_missing(const genset_view_t *v, uint64_t dropped_below, uint64_t sealed_below,
                         gen_id_t *missing)
{
    /* The oldest kept generation begins at the drop bound (or below it: a drop whose files a
     * crash left), and with none kept, the drops reached the sealed bound. */
    uint64_t kept_from = v->n > 0 ? v->slots[0]->info.id.first : sealed_below;
    if (dropped_below != UINT64_MAX && kept_from > dropped_below) {
        *missing = (gen_id_t){dropped_below, kept_from};
        return true;
    }
    for (size_t i = 1; i < v->n; i++) {
        const gen_id_t *prev = &v->slots[i - 1]->info.id, *id = &v->slots[i]->info.id;
        if (id->first > prev->end) {
            *missing = (gen_id_t){prev->end, id->first};
            return true;
        }
    }
    if (v->n > 0 && v->slots[v->n - 1]->info.id.end < sealed_below) {
        *missing = (gen_id_t){v->slots[v->n - 1]->info.id.end, sealed_below};
        return true;
    }
    return false;
}

int genset_view_find(const genset_view_t *v, const uint8_t key[KEYHASH_LEN], bool *found,
                     gen_entry_t *e)
{
    uint64_t cut = view_cut(v, key);
    *found = false;
    for (size_t i = v->n; i-- > 0 && v->slots[i]->info.id.end > cut;) {
        int rc = gen_find(v->slots[i]->g, key, found, e);
        if (rc != GEN_OK || *found)
            return rc;
    }
    return GEN_OK;
}

/*
 * Before keys[i] is tested: the filter blocks, in every generation of v, of the key
 * PREFETCH_AHEAD further on (and at i = 0 of the first ones), so the cache misses of the keys
 * ahead overlap the tests of the current one.
 */
static void prefetch_ahead(const genset_view_t *v, const uint8_t (*keys)[KEYHASH_LEN], size_t n,
                           size_t i)
{
    for (size_t k = i == 0 ? 0 : i + PREFETCH_AHEAD; k < n && k <= i + PREFETCH_AHEAD; k++)
        for (size_t j = 0; j < v->n; j++)
            gen_prefetch(v->slots[j]->g, keys[k]);
}

int genset_view_find_after(const genset_view_t *v, const uint8_t key[KEYHASH_LEN], uint64_t after,
                           bool *found, gen_entry_t *e)
{
    uint64_t cut = view_cut(v, key);
    if (cut > after)
        after = cut;
    *found = false;
    for (size_t i = v->n; i-- > 0 && v->slots[i]->info.id.end > after;) {
        int rc = gen_find(v->slots[i]->g, key, found, e);
        if (rc != GEN_OK || *found)
            return rc;
    }
    return GEN_OK;
}

uint64_t genset_view_probe_many(const genset_view_t *v, const uint8_t (*keys)[KEYHASH_LEN],
                                size_t n, bool *maybe)
{
    for (size_t i = 0; i < n; i++) {
        prefetch_ahead(v, keys, n, i);
        maybe[i] = false;
        uint64_t cut = view_cut(v, keys[i]);
        for (size_t j = v->n; j-- > 0 && !maybe[i] && v->slots[j]->info.id.end > cut;)
            maybe[i] = gen_may_contain(v->slots[j]->g, keys[i]);
    }
    return v->n > 0 ? v->slots[v->n - 1]->info.id.end : 0;
}

int genset_view_find_many(const genset_view_t *v, const uint8_t (*keys)[KEYHASH_LEN], size_t n,
                          bool *found, gen_entry_t *e)
{
    for (size_t i = 0; i < n; i++) {
        prefetch_ahead(v, keys, n, i);
        int rc = genset_view_find(v, keys[i], &found[i], e ? &e[i] : NULL);
        if (rc != GEN_OK)
            return rc;
    }
    return GEN_OK;
}

size_t genset_view_sources(const genset_view_t *v, const genset_source_t **out)
{
    *out = v->src;
    return v->nsrc;
}

/* ---- changes ---- */

int genset_set_budget(genset_t *gs, uint64_t budget)
{
    pthread_mutex_lock(&gs->change_mu);
    genset_view_t *v = gs->cur; /* changes only under change_mu */
    pthread_mutex_lock(&gs->mu);
    gs->budget = budget;
    pthread_mutex_unlock(&gs->mu);
    int rc = publish(gs, v->slots, v->n);
    pthread_mutex_unlock(&gs->change_mu);
    return rc;
}

int genset_add(genset_t *gs, gen_t *g)
{
    gen_info_t info;
    gen_get_info(g, &info);
    pthread_mutex_lock(&gs->change_mu);
    genset_view_t *v = gs->cur; /* changes only under change_mu */
    int rc = v->n > 0 && info.id.first < v->slots[v->n - 1]->info.id.end ? GEN_INVALID : GEN_OK;
    slot_t **slots = rc == GEN_OK ? calloc(v->n + 1, sizeof(*slots)) : NULL;
    slot_t *s = rc == GEN_OK ? slot_new(g) : NULL;
    if (rc == GEN_OK && (!slots || !s))
        rc = GEN_NOMEM;
    if (rc == GEN_OK) {
        memcpy(slots, v->slots, v->n * sizeof(*slots));
        slots[v->n] = s;
        rc = publish(gs, slots, v->n + 1);
    }
    pthread_mutex_unlock(&gs->change_mu);
    if (rc != GEN_OK)
        free(s); /* g stays the caller's */
    free(slots);
    return rc;
}

/* Removes the files of slots[0..n) from the directory; views holding them keep reading. */
static int remove_files(genset_t *gs, slot_t *const *slots, size_t n)
{
    int rc = GEN_OK;
    for (size_t i = 0; i < n; i++) {
        int r = gen_remove(gs->dir, slots[i]->info.id);
        if (rc == GEN_OK)
            rc = r;
    }
    return rc;
}

int genset_drop_oldest(genset_t *gs, const genset_view_t *v, size_t n)
{
    if (n > v->n)
        return GEN_INVALID;
    if (n == 0)
        return GEN_OK;
    /* What the set still holds of v's n oldest: those ending by the n-th's end. A merge that
     * took one of them in (with younger ones) stays, whole, until the rule drops it. */
    uint64_t end = v->slots[n - 1]->info.id.end;
    pthread_mutex_lock(&gs->change_mu);
    genset_view_t *cur = genset_view(gs); /* keeps the slots alive until their files are gone */
    size_t k = 0;
    while (k < cur->n && cur->slots[k]->info.id.end <= end)
        k++;
    int rc = k > 0 ? publish(gs, cur->slots + k, cur->n - k) : GEN_OK;
    pthread_mutex_unlock(&gs->change_mu);
    if (rc == GEN_OK)
        rc = remove_files(gs, cur->slots, k);
    genset_view_release(cur);
    return rc;
}

/* Where v's slots[first..first+n) stand in the current set, in order: their index, or SIZE_MAX
 * when any of them left it. Under change_mu. */
static size_t find_run(const genset_t *gs, const genset_view_t *v, size_t first, size_t n)
{
    const genset_view_t *cur = gs->cur;
    for (size_t k = 0; k + n <= cur->n; k++) {
        if (cur->slots[k] != v->slots[first])
            continue;
        for (size_t i = 1; i < n; i++)
            if (cur->slots[k + i] != v->slots[first + i])
                return SIZE_MAX;
        return k;
    }
    return SIZE_MAX;
}

/* Publishes `s` in place of the current set's slots[k..k+n). Under change_mu. */
static int replace_run(genset_t *gs, size_t k, size_t n, slot_t *s)
{
    const genset_view_t *cur = gs->cur;
    slot_t **slots = calloc(cur->n - n + 1, sizeof(*slots));
    if (!slots)
        return GEN_NOMEM;
    memcpy(slots, cur->slots, k * sizeof(*slots));
    slots[k] = s;
    memcpy(slots + k + 1, cur->slots + k + n, (cur->n - k - n) * sizeof(*slots));
    int rc = publish(gs, slots, cur->n - n + 1);
    free(slots);
    return rc;
}

/* genset_merge's filter: a key stays unless its input generation is cut for its source. */
typedef struct {
    const genset_view_t *v;
    size_t first;
} merge_cut_t;

static bool keep_uncut(void *arg, size_t input, const gen_entry_t *e)
{
    const merge_cut_t *m = arg;
    return m->v->slots[m->first + input]->info.id.end > view_cut(m->v, e->key);
}

int genset_merge(genset_t *gs, const genset_view_t *v, size_t first, size_t n,
                 const atomic_bool *cancel)
{
    if (n == 0 || first + n > v->n || (n == 1 && v->cut_in[first] == 0))
        return GEN_INVALID;
    merge_cut_t mc = {.v = v, .first = first};
    gen_merge_filter_t filter = {.keep = keep_uncut, .arg = &mc};
    for (size_t i = 0; i < n; i++)
        filter.max_keys += v->slots[first + i]->info.keys - v->cut_in[first + i];
    gen_t **ins = calloc(n, sizeof(*ins));
    gen_t *merged = NULL;
    slot_t *s = NULL;
    int rc = ins ? GEN_OK : GEN_NOMEM;
    for (size_t i = 0; rc == GEN_OK && i < n; i++)
        ins[i] = v->slots[first + i]->g; /* v holds them open, even once removed */
    gen_id_t id = {v->slots[first]->info.id.first, v->slots[first + n - 1]->info.id.end};
    if (rc == GEN_OK)
        rc = gen_merge(gs->dir, id, ins, n, gs->bits, &filter, cancel, &merged); /* the long part */
    if (rc == GEN_OK && !(s = slot_new(merged)))
        rc = GEN_NOMEM;
    bool published = false, taken = false;
    if (rc == GEN_OK) {
        /* The output goes in only if every input is still in the set, and its name is given
         * under the same lock: a merge that lost to a drop (or to another rewrite) never
         * touches a published file, least of all the live one a merge of one replaces. */
        pthread_mutex_lock(&gs->change_mu);
        size_t k = find_run(gs, v, first, n);
        rc = k == SIZE_MAX ? GEN_CHANGED : gen_publish(merged);
        published = !gen_is_staged(merged);
        if (published) {
            int prc = replace_run(gs, k, n, s);
            taken = prc == GEN_OK;
            rc = rc == GEN_OK ? prc : rc;
        }
        pthread_mutex_unlock(&gs->change_mu);
    }
    /* Published: the inputs' files go (a merge of one's input was its name, replaced). After a
     * failed directory fsync they stay: a covering file makes the next open remove them. */
    if (published && rc == GEN_OK && n > 1)
        rc = remove_files(gs, v->slots + first, n);
    if (!taken) {
        gen_close(merged); /* removes the file if it is still staged */
        free(s);
    }
    free(ins);
    return rc;
}

/* ---- the rule ---- */

void genset_plan(const genset_view_t *v, const genset_policy_t *p, int64_t now_ms,
                 uint64_t young_keys, genset_plan_t *out)
{
    memset(out, 0, sizeof(*out));
    uint64_t left = young_keys;
    for (size_t i = 0; i < v->n; i++)
        left += v->slots[i]->info.keys - v->cut_in[i];
    size_t i = 0;
    for (; i < v->n && v->slots[i]->info.max_received_ms < now_ms - p->window_ms; i++)
        left -= v->slots[i]->info.keys - v->cut_in[i];
    out->drop_age = i;
    /* By size, per source: the oldest generations every source has cut. */
    for (; p->max_keys > 0 && !p->unsealed && i < v->n && v->cut_in[i] == v->slots[i]->info.keys;
         i++)
        ;
    for (; p->max_keys > 0 && p->unsealed && i < v->n &&
           left - (v->slots[i]->info.keys - v->cut_in[i]) >= p->max_keys;
         i++)
        left -= v->slots[i]->info.keys - v->cut_in[i];
    out->drop_size = i - out->drop_age;
    /* Rewrites (merges, a merge of one included) have one owner, the merger
     * (storage/window/merger.h), which plans with a fan-in; a caller that plans drops only passes
     * fanin 0. */
    if (p->fanin == 0)
        return;
    /* A generation mostly cut is rewritten without those keys (a merge of one): its disk and
     * its filter's memory go to the window again. */
    for (size_t j = i; j < v->n; j++) {
        if (v->cut_in[j] > 0 && v->cut_in[j] * 2 >= v->slots[j]->info.keys) {
            out->merge_first = j - i;
            out->merge_n = 1;
            return;
        }
    }
    uint64_t target = p->target_count ? left / p->target_count : 0;
    if (target < p->merge_min_keys)
        target = p->merge_min_keys;
    /* Small is under 3/4 of the target: a window that grows a little past a multiple of the
     * target must not merge every generation it already has (at 1B keys, 2 GB each). */
    uint64_t small = target - target / 4;
    size_t run = 0;
    for (size_t j = i; p->fanin >= 2 && j < v->n; j++) {
        run = v->slots[j]->info.keys < small ? run + 1 : 0;
        if (run == p->fanin) {
            out->merge_first = j + 1 - run - i;
            out->merge_n = run;
            return;
        }
    }
}

genset_policy_t genset_policy_for(int64_t window_ms, uint64_t max_keys, uint64_t young_keys)
{
    return (genset_policy_t){.window_ms = window_ms,
                             .max_keys = max_keys,
                             .unsealed = !genset_seals(max_keys, young_keys),
                             .merge_min_keys = young_keys,
                             .target_count = 16,
                             .fanin = 4};
}

bool genset_seals(uint64_t max_keys, uint64_t young_keys)
{
    return max_keys == 0 || max_keys > young_keys;
}
