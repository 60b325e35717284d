/* gen_bench: what sealed generations (storage/window/gen.h, genset.h) cost at 100M or 1B keys. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/clock.h"
#include "storage/window/genset.h"
#include "storage/window/keyhash.h"
#include "server/progress.h"

/*
 * Why it exists: the generational window (docs/window.md) stands or falls by
 * three costs that do not depend on HTTP or the log: sealing (sort + one
 * sequential write per generation), merging, and the lookup of a new key,
 * which passes every generation's filter. This builds a window of --keys keys
 * in generations of --gen-keys, merges them as genset_plan says, then looks up
 * keys never seen (the common case) and keys of the window (duplicates), and
 * prints the rates, the disk and memory bytes per key, and the RSS.
 */

typedef struct {
    const char *dir;
    uint64_t keys, gen_keys, lookups;
    unsigned bits, fanin, target_count;
    bool merge;
} opts_t;

static opts_t o = {.keys = 10000000,
                   .gen_keys = 1u << 20,
                   .lookups = 2000000,
                   .bits = 0,
                   .fanin = 4,
                   .target_count = 16,
                   .merge = true};
static const uint8_t SECRET[KEYHASH_SECRET_LEN] = "gen-bench-secret";

static void mkkey(uint64_t i, uint8_t key[KEYHASH_LEN])
{
    keyhash(SECRET, "default", 7, (const char *)&i, sizeof(i), key);
}

static int cmp_entry(const void *a, const void *b)
{
    return memcmp(((const gen_entry_t *)a)->key, ((const gen_entry_t *)b)->key, KEYHASH_LEN);
}

static void usage(FILE *f)
{
    fprintf(f, "Usage: ingestd-gen-bench --dir DIR [options]\n"
               "  --keys N          keys in the window (default 10000000)\n"
               "  --gen-keys N      keys per sealed generation (default 1048576)\n"
               "  --lookups N       lookups of each kind (default 2000000)\n"
               "  --bits N          filter bits per key (default 14)\n"
               "  --fanin N         generations merged at once (default 4)\n"
               "  --target-count N  the window in about this many generations (default 16)\n"
               "  --no-merge        keep every sealed generation as it is\n"
               "DIR must be empty or missing; the generations are left in it.\n");
}

static int parse(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(a, "--no-merge")) {
            o.merge = false;
            continue;
        }
        if (!v) {
            fprintf(stderr, "ingestd-gen-bench: %s needs a value (try --help)\n", a);
            return -1;
        }
        i++;
        if (!strcmp(a, "--dir"))
            o.dir = v;
        else if (!strcmp(a, "--keys"))
            o.keys = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--gen-keys"))
            o.gen_keys = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--lookups"))
            o.lookups = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--bits"))
            o.bits = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--fanin"))
            o.fanin = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--target-count"))
            o.target_count = (unsigned)strtoul(v, NULL, 10);
        else {
            fprintf(stderr, "ingestd-gen-bench: unknown option %s (try --help)\n", a);
            return -1;
        }
    }
    if (!o.dir || o.keys == 0 || o.gen_keys == 0) {
        fprintf(stderr, "ingestd-gen-bench: --dir is required; --keys, --gen-keys > 0\n");
        return -1;
    }
    return 0;
}

/* Seals keys [from, from + n) as one generation covering sequences of the same numbers. */
static int seal(genset_t *gs, gen_entry_t *buf, uint64_t from, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        mkkey(from + i, buf[i].key);
        buf[i].offset = from + i;
        buf[i].received_ms = 1700000000000 + (int64_t)(from + i);
    }
    qsort(buf, n, sizeof(*buf), cmp_entry);
    gen_writer_t *w = NULL;
    gen_t *g = NULL;
    int rc =
        gen_writer_open(genset_dir(gs), (gen_id_t){from, from + n}, n, genset_bits_per_key(gs), &w);
    for (uint64_t i = 0; rc == GEN_OK && i < n; i++)
        rc = gen_writer_add(w, &buf[i]);
    if (rc == GEN_OK) {
        rc = gen_writer_finish(w, &g);
        w = NULL;
    }
    gen_writer_abort(w);
    if (rc == GEN_OK && (rc = genset_add(gs, g)) != GEN_OK)
        gen_close(g);
    return rc;
}

/* Merges while the rule says so; adds the seconds spent to *merge_s. */
static int merge_as_planned(genset_t *gs, uint64_t young, double *merge_s, unsigned *merges)
{
    genset_policy_t p = {.window_ms = INT64_MAX / 2,
                         .merge_min_keys = o.gen_keys,
                         .target_count = o.target_count,
                         .fanin = o.fanin};
    for (;;) {
        genset_view_t *v = genset_view(gs);
        genset_plan_t plan;
        genset_plan(v, &p, 0, young, &plan);
        if (plan.merge_n == 0 || !o.merge) {
            genset_view_release(v);
            return GEN_OK;
        }
        double t0 = clk_mono_msf() / 1e3;
        int rc = genset_merge(gs, v, plan.merge_first, plan.merge_n, NULL);
        genset_view_release(v);
        *merge_s += clk_mono_msf() / 1e3 - t0;
        (*merges)++;
        if (rc != GEN_OK)
            return rc;
    }
}

static int fill(genset_t *gs)
{
    gen_entry_t *buf = malloc(o.gen_keys * sizeof(*buf));
    if (!buf)
        return GEN_NOMEM;
    progress_t *pg = progress_new(stderr); /* NULL, and silent, unless stderr is a terminal */
    double t0 = clk_mono_msf() / 1e3, merge_s = 0;
    unsigned merges = 0;
    int rc = GEN_OK;
    for (uint64_t done = 0; rc == GEN_OK && done < o.keys;) {
        uint64_t n = o.keys - done < o.gen_keys ? o.keys - done : o.gen_keys;
        rc = seal(gs, buf, done, n);
        done += n;
        if (rc == GEN_OK)
            rc = merge_as_planned(gs, 0, &merge_s, &merges);
        progress_update(pg, "fill", done, o.keys, "keys", NULL);
    }
    progress_free(pg);
    double el = clk_mono_msf() / 1e3 - t0;
    printf("fill: %" PRIu64 " keys in %.1f s: %.0f keys/s sealed and merged (%u merges, %.1f s)\n",
           o.keys, el, (double)o.keys / el, merges, merge_s);
    free(buf);
    return rc;
}

/* Looks up n keys from `from` in batches of 512, as a group commit would. */
static int lookups(genset_t *gs, uint64_t from, uint64_t n, const char *what, bool want)
{
    enum { BATCH = 512 };
    static uint8_t keys[BATCH][KEYHASH_LEN];
    static bool found[BATCH];
    genset_view_t *v = genset_view(gs);
    uint64_t wrong = 0;
    double t0 = clk_mono_msf() / 1e3;
    int rc = GEN_OK;
    for (uint64_t done = 0; rc == GEN_OK && done < n; done += BATCH) {
        size_t b = n - done < BATCH ? (size_t)(n - done) : BATCH;
        for (size_t i = 0; i < b; i++)
            mkkey(from + done + i, keys[i]);
        rc = genset_view_find_many(v, (const uint8_t(*)[KEYHASH_LEN])keys, b, found, NULL);
        for (size_t i = 0; i < b; i++)
            wrong += found[i] != want;
    }
    double el = clk_mono_msf() / 1e3 - t0;
    printf("lookups, %s: %.0f keys/s (%.2f us each), %" PRIu64 " answered wrong\n", what,
           (double)n / el, el * 1e6 / (double)n, wrong);
    genset_view_release(v);
    return rc != GEN_OK ? rc : wrong ? GEN_CORRUPT : GEN_OK;
}

int main(int argc, char **argv)
{
    if (parse(argc, argv) != 0)
        return 2;
    genset_t *gs = NULL;
    int rc = genset_open(o.dir, o.bits, &gs);
    if (rc == GEN_OK)
        rc = fill(gs);
    genset_totals_t t = {0};
    if (rc == GEN_OK) {
        genset_view_t *v = genset_view(gs);
        genset_view_totals(v, &t);
        printf("window: %" PRIu64 " keys in %zu generations; disk %.2f B/key; memory %.2f B/key\n",
               t.keys, genset_view_count(v), (double)t.file_bytes / (double)t.keys,
               (double)t.memory_bytes / (double)t.keys);
        genset_view_release(v);
    }
    uint64_t n = o.lookups < o.keys ? o.lookups : o.keys;
    if (rc == GEN_OK)
        rc = lookups(gs, o.keys + 1000000000000ull, o.lookups, "new keys", false);
    if (rc == GEN_OK)
        rc = lookups(gs, o.keys - n, n, "keys in the window (newest)", true);
    if (rc == GEN_OK)
        rc = lookups(gs, 0, n, "keys in the window (oldest)", true);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("max RSS: %ld MiB\n", ru.ru_maxrss / 1024);
    genset_close(gs);
    if (rc != GEN_OK) {
        fprintf(stderr, "ingestd-gen-bench: %s\n", gen_strerror(rc));
        return 1;
    }
    return 0;
}
