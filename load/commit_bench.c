/* commit_bench: drives the group commit (LMDB + log + fsync) directly, without HTTP or JSON. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "server/progress.h"
#include "storage/commit/commit.h"
#include "storage/datadir.h"
#include "storage/window/genset.h"
#include "storage/window/keyhash.h"
#include "storage/window/store.h"

/*
 * Why it exists: on a 2-core machine an HTTP load generator, JSON parsing and
 * the writer thread share the CPUs, and their noise hides what a storage
 * choice (LMDB sync flags, batch sizes, window size) costs. This measures the
 * storage path alone: C client threads each keep one request of B events in
 * flight, as C HTTP connections would.
 */

typedef struct {
    const char *data_dir;
    uint64_t events;
    unsigned clients, batch, payload;
    double dup_ratio;
    int sync;
    uint64_t preload;
    bool preload_sealed;
    bool prepare;
    uint64_t max_keys;
} opts_t;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
} waiter_t;

static opts_t o = {
    .events = 1000000, .clients = 64, .batch = 50, .payload = 400, .sync = 0, .prepare = true};
static commit_t *commit;
static atomic_uint_fast64_t next_id; /* events handed out */
static uint64_t id_base;             /* the run's ids are m-<id_base + n> */
static atomic_uint_fast64_t requests_done;
static uint64_t *lat_us; /* per request latency, indexed by request number */
static atomic_uint_fast64_t lat_n;
static uint64_t lat_cap;

static void on_done(commit_req_t *req, void *arg)
{
    waiter_t *w = arg;
    (void)req;
    pthread_mutex_lock(&w->mu);
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void *client(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u;
    const uint8_t *secret = commit_secret(commit);
    uint32_t tag = keyhash_source_tag(secret, "bench", 5); /* once, as the api does per request */
    commit_event_t *ev = calloc(o.batch, sizeof(*ev));
    char *payloads = malloc((size_t)o.batch * o.payload);
    waiter_t w = {.done = false};
    commit_req_t req = {0};
    char id[32];

    if (!ev || !payloads) {
        free(ev);
        free(payloads);
        return NULL;
    }
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    memset(payloads, 'x', (size_t)o.batch * o.payload);
    for (;;) {
        uint64_t first = atomic_fetch_add(&next_id, o.batch);
        if (first >= o.events)
            break;
        size_t n = o.events - first < o.batch ? (size_t)(o.events - first) : o.batch;
        int64_t now = clk_wall_ms();
        for (size_t i = 0; i < n; i++) {
            uint64_t idn = id_base + first + i;
            /* A re-send of an earlier id, at the requested ratio. */
            if (idn > 0 && (double)rand_r(&seed) / RAND_MAX < o.dup_ratio)
                idn = (uint64_t)rand_r(&seed) % idn;
            int len = snprintf(id, sizeof(id), "m-%" PRIu64, idn);
            keyhash_tagged(secret, tag, "bench", 5, id, (size_t)len, ev[i].key);
            ev[i].received_ms = now;
            ev[i].data = payloads + i * o.payload;
            ev[i].len = o.payload;
        }
        if (o.prepare)
            commit_prepare(commit, ev, n); /* the request threads' part, as the server's */
        req.events = ev;
        req.n = n;
        req.done = on_done;
        req.arg = &w;
        w.done = false;
        double t0 = clk_mono_msf() / 1e3;
        if (commit_submit(commit, &req) != COMMIT_OK)
            break;
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        uint64_t k = atomic_fetch_add(&lat_n, 1);
        if (k < lat_cap)
            lat_us[k] = (uint64_t)((clk_mono_msf() / 1e3 - t0) * 1e6);
        atomic_fetch_add(&requests_done, 1);
        if (req.status != COMMIT_OK) {
            fprintf(stderr, "commit failed: %s\n", commit_strerror(req.status));
            break;
        }
    }
    free(ev);
    free(payloads);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* What the window takes: LMDB's file, and the sealed generations' files and memory. */
typedef struct {
    uint64_t lmdb_file, gen_keys, gen_file, gen_memory;
    size_t gens;
} window_disk_t;

static window_disk_t window_disk(const char *data_dir, const store_info_t *si)
{
    window_disk_t wd = {0};
    char *path = NULL;
    struct stat sb;
    if ((path = datadir_path(data_dir, DATADIR_LMDB_DATA)) != NULL && stat(path, &sb) == 0)
        wd.lmdb_file = (uint64_t)sb.st_size;
    free(path);
    genset_t *gs = NULL;
    if ((path = datadir_path(data_dir, DATADIR_GENS)) != NULL &&
        genset_open_read_only(path, &gs) == GEN_OK) {
        genset_view_t *v = genset_view(gs);
        genset_totals_t t;
        genset_view_totals(v, &t);
        wd.gens = genset_view_count(v);
        /* A seal whose LMDB transaction did not come: its keys are counted in LMDB. */
        wd.gen_keys = t.end_seq > si->sealed_below ? 0 : t.keys;
        wd.gen_file = t.file_bytes;
        wd.gen_memory = t.memory_bytes;
        genset_view_release(v);
        genset_close(gs);
    }
    free(path);
    return wd;
}

static int cmp_gen_entry(const void *a, const void *b)
{
    return memcmp(((const gen_entry_t *)a)->key, ((const gen_entry_t *)b)->key, KEYHASH_LEN);
}

/*
 * --preload-sealed: writes ids [0, n) straight into sealed generations, as
 * the checkpointer's seals and merges would leave them (16 of n/16 keys, the
 * policy's target), then records them in the young store as sealed. Their
 * records are not in the log (offset 0): a 1B-key window of 400-byte events
 * would need 440 GB of log, and a window's cost to the storage path is its
 * lookups, seals, merges and drops, which this keeps. The store must be
 * new; commit_open created it.
 */
static int preload_sealed(const uint8_t *secret, uint64_t n)
{
    uint32_t tag = keyhash_source_tag(secret, "bench", 5);
    char *storedir = NULL, *gensdir = NULL;
    store_t *st = NULL;
    genset_t *gs = NULL;
    gen_entry_t *es = NULL;
    uint64_t per = (n + 15) / 16;
    int64_t now = (int64_t)time(NULL) * 1000;
    int rc = -1;
    progress_t *p = progress_new(stderr);
    store_options_t so = {0};

    if (per < (1u << 20))
        per = 1u << 20;
    if (!(storedir = datadir_path(o.data_dir, DATADIR_STORE)) ||
        !(gensdir = datadir_path(o.data_dir, DATADIR_GENS)))
        goto out;
    es = malloc((per < n ? per : n) * sizeof(*es));
    if (!es || store_open(storedir, &so, &st) != STORE_OK || genset_open(gensdir, 0, &gs) != GEN_OK)
        goto out;
    for (uint64_t first = 0; first < n; first += per) {
        uint64_t end = n - first < per ? n : first + per;
        gen_writer_t *w = NULL;
        gen_t *g = NULL;
        char id[32];
        for (uint64_t i = first; i < end; i++) {
            int len = snprintf(id, sizeof(id), "m-%" PRIu64, i);
            keyhash_tagged(secret, tag, "bench", 5, id, (size_t)len, es[i - first].key);
            es[i - first].offset = 0;
            es[i - first].received_ms = now;
        }
        qsort(es, end - first, sizeof(*es), cmp_gen_entry);
        if (gen_writer_open(gensdir, (gen_id_t){first, end}, end - first, 0, &w) != GEN_OK)
            goto out;
        for (uint64_t i = 0; i < end - first; i++) {
            if (gen_writer_add(w, &es[i]) != GEN_OK) {
                gen_writer_abort(w);
                goto out;
            }
        }
        if (gen_writer_finish(w, &g) != GEN_OK)
            goto out;
        if (genset_add(gs, g) != GEN_OK) {
            gen_close(g);
            goto out;
        }
        progress_update(p, "fill (sealed)", end, n, "keys", NULL);
    }
    if (store_txn_begin(st) != STORE_OK)
        goto out;
    if (store_advance_seq(st, n) != STORE_OK || store_seal(st, n) != STORE_OK) {
        store_txn_abort(st);
        goto out;
    }
    rc = store_txn_commit(st) == STORE_OK ? 0 : -1;
out:
    progress_free(p);
    genset_close(gs);
    store_close(st);
    free(es);
    free(gensdir);
    free(storedir);
    return rc;
}

/*
 * DIR/bench-next-id: the first id no run has used yet. A DIR filled once can
 * then be measured again (builds alternating) without filling it again, and
 * every run's ids are new keys.
 */
static bool read_next_id(uint64_t *id)
{
    char *path = NULL;
    unsigned long long v = 0;
    bool ok = false;
    if (asprintf(&path, "%s/bench-next-id", o.data_dir) < 0)
        return false;
    FILE *f = fopen(path, "r");
    if (f) {
        ok = fscanf(f, "%llu", &v) == 1;
        fclose(f);
    }
    free(path);
    *id = v;
    return ok;
}

static void write_next_id(uint64_t id)
{
    char *path = NULL;
    if (asprintf(&path, "%s/bench-next-id", o.data_dir) < 0)
        return;
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%" PRIu64 "\n", id);
        fclose(f);
    }
    free(path);
}

static void usage(FILE *f)
{
    fprintf(f, "Usage: ingestd-commit-bench --data DIR [options]\n"
               "  --events N        events to commit (default 1000000)\n"
               "  --clients N       concurrent requests in flight (default 64)\n"
               "  --batch N         events per request (default 50)\n"
               "  --payload N       bytes per event (default 400)\n"
               "  --dup-ratio R     share of re-sent earlier ids, 0..1 (default 0)\n"
               "  --sync MODE       LMDB sync: meta (server default), full, none (unsafe)\n"
               "  --preload N       ids already in the window before the run (fill first)\n"
               "  --preload-sealed  fill them straight into sealed generations, not through\n"
               "                    the log (for windows whose log would not fit the disk)\n"
               "  --max-keys N      window size bound (default 0: none)\n"
               "  --no-prepare      the writer asks every generation (no commit_prepare on the\n"
               "                    client threads, which the server's request threads call)\n"
               "Prints a progress line (on a terminal) and a summary. DIR is new, or one that\n"
               "an earlier run filled: then the fill is skipped and the ids go on from\n"
               "DIR/bench-next-id.\n");
}

/* Commits `events` with `clients` threads; `what` names the run on the progress line. */
static int run(const char *what, uint64_t events, unsigned clients)
{
    pthread_t *th = calloc(clients, sizeof(*th));
    if (!th)
        return -1;
    progress_t *p = progress_new(stderr); /* NULL, and silent, unless stderr is a terminal */
    atomic_store(&next_id, 0);
    atomic_store(&requests_done, 0);
    atomic_store(&lat_n, 0);
    o.events = events;
    for (unsigned i = 0; i < clients; i++)
        pthread_create(&th[i], NULL, client, (void *)(uintptr_t)(i + 1));
    while (atomic_load(&next_id) < events || atomic_load(&requests_done) * o.batch < events) {
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, NULL); /* a progress ticker, not synchronisation: join below waits */
        uint64_t d = atomic_load(&requests_done) * o.batch;
        progress_update(p, what, d > events ? events : d, events, "events", NULL);
        if (d >= events)
            break;
    }
    for (unsigned i = 0; i < clients; i++)
        pthread_join(th[i], NULL);
    progress_free(p);
    free(th);
    return 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--preload-sealed")) {
            o.preload_sealed = true;
            continue;
        }
        if (!strcmp(a, "--no-prepare")) {
            o.prepare = false;
            continue;
        }
        if (!v) {
            fprintf(stderr, "ingestd-commit-bench: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--data"))
            o.data_dir = v;
        else if (!strcmp(a, "--events"))
            o.events = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--clients"))
            o.clients = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--batch"))
            o.batch = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--payload"))
            o.payload = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--dup-ratio"))
            o.dup_ratio = strtod(v, NULL);
        else if (!strcmp(a, "--preload"))
            o.preload = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--max-keys"))
            o.max_keys = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--sync"))
            o.sync = !strcmp(v, "full")   ? STORE_SYNC_FULL
                     : !strcmp(v, "none") ? STORE_SYNC_NONE
                     : !strcmp(v, "meta") ? STORE_SYNC_META
                                          : -1;
        else {
            fprintf(stderr, "ingestd-commit-bench: unknown option %s\n", a);
            return 2;
        }
    }
    if (!o.data_dir || o.sync < 0 || o.clients == 0 || o.batch == 0 || o.events == 0 ||
        o.dup_ratio < 0 || o.dup_ratio > 1) {
        usage(stderr);
        return 2;
    }
    char err[512];
    commit_options_t co = {.data_dir = o.data_dir,
                           .window_ms = 24LL * 3600 * 1000,
                           .max_keys = o.max_keys,
                           .segment_bytes = 64ull << 20,
                           .store_sync = o.sync};
    if (commit_open(&co, &commit, err, sizeof(err)) != COMMIT_OK) {
        fprintf(stderr, "ingestd-commit-bench: %s\n", err);
        return 1;
    }
    double fill_s = 0;
    bool reuse = read_next_id(&id_base);
    if (reuse) {
        commit_stats_t s;
        commit_get_stats(commit, &s);
        fprintf(stderr, "reusing the window of %" PRIu64 " keys in %s; ids from %" PRIu64 "\n",
                s.window.keys, o.data_dir, id_base);
    } else if (o.preload_sealed && o.preload > 0) {
        uint8_t secret[KEYHASH_SECRET_LEN];
        memcpy(secret, commit_secret(commit), sizeof(secret));
        commit_close(commit);
        commit = NULL;
        fprintf(stderr, "preloading %" PRIu64 " keys into sealed generations\n", o.preload);
        double f0 = clk_mono_msf() / 1e3;
        if (preload_sealed(secret, o.preload) != 0) {
            fprintf(stderr, "ingestd-commit-bench: the sealed preload failed (is DIR new?)\n");
            return 1;
        }
        if (commit_open(&co, &commit, err, sizeof(err)) != COMMIT_OK) {
            fprintf(stderr, "ingestd-commit-bench: %s\n", err);
            return 1;
        }
        fill_s = clk_mono_msf() / 1e3 - f0;
    }
    lat_cap = o.events / o.batch + o.clients + 1;
    lat_us = calloc(lat_cap, sizeof(*lat_us));
    if (!lat_us)
        return 1;
    uint64_t events = o.events; /* run() overwrites o.events */
    if (!reuse && o.preload > 0 && !o.preload_sealed) {
        /* Fill the window with distinct ids at the largest batches the writer takes. */
        fprintf(stderr, "preloading %" PRIu64 " keys\n", o.preload);
        double f0 = clk_mono_msf() / 1e3;
        uint64_t keep = o.preload;
        unsigned b = o.batch;
        o.batch = 2500;
        run("fill", keep, o.clients);
        o.batch = b;
        fill_s = clk_mono_msf() / 1e3 - f0;
    }
    if (!reuse)
        id_base = o.preload;
    commit_stats_t s0, s1;
    commit_get_stats(commit, &s0);
    double t0 = clk_mono_msf() / 1e3;
    run("run", events, o.clients);
    double secs = clk_mono_msf() / 1e3 - t0;
    commit_get_stats(commit, &s1);
    /* Acknowledged is not the end of the work: the keys still pending reach LMDB in the
     * background. Closing checkpoints them; the throughput counts that too. */
    commit_close(commit);
    commit = NULL;
    double drained = clk_mono_msf() / 1e3 - t0;
    store_info_t si = {0};
    char *dir = NULL;
    store_t *st = NULL;
    store_options_t so = {.read_only = true};
    if (!(dir = datadir_path(o.data_dir, DATADIR_STORE)) || store_open(dir, &so, &st) != STORE_OK ||
        store_get_info(st, &si) != STORE_OK)
        fprintf(stderr, "ingestd-commit-bench: cannot read the store after the run\n");
    store_close(st);
    window_disk_t wd = window_disk(o.data_dir, &si);
    free(dir);

    uint64_t n = atomic_load(&lat_n);
    if (n > lat_cap)
        n = lat_cap;
    qsort(lat_us, n, sizeof(*lat_us), cmp_u64);
    uint64_t batches = s1.batches - s0.batches, fs = s1.fsyncs - s0.fsyncs;
    printf("events %" PRIu64 " in %.2f s: %.0f events/s; accepted %" PRIu64 ", duplicates %" PRIu64
           "\n",
           events, drained, (double)events / drained, s1.accepted - s0.accepted,
           s1.duplicates - s0.duplicates);
    printf("acknowledged in %.2f s (%.0f events/s), the last keys in LMDB %.2f s later\n", secs,
           (double)events / secs, drained - secs);
    printf("group commits %" PRIu64 " (avg %.0f events), log fsync avg %.2f ms\n", batches,
           batches ? (double)(s1.batch_events - s0.batch_events) / (double)batches : 0.0,
           fs ? (s1.fsync_ms_total - s0.fsync_ms_total) / (double)fs : 0.0);
    printf("request latency p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
           n ? (double)lat_us[n / 2] / 1e3 : 0.0, n ? (double)lat_us[n * 99 / 100] / 1e3 : 0.0,
           n ? (double)lat_us[n - 1] / 1e3 : 0.0);
    double keys = (double)(si.keys + wd.gen_keys);
    printf("keys %" PRIu64 " (%" PRIu64 " in LMDB, %" PRIu64 " in %zu generations)\n",
           si.keys + wd.gen_keys, si.keys, wd.gen_keys, wd.gens);
    printf("disk %.1f bytes per key (LMDB file %" PRIu64 " bytes, %" PRIu64
           " in use; generations %" PRIu64 "); memory %.2f bytes per key (filters and fences)\n",
           keys > 0 ? (double)(wd.lmdb_file + wd.gen_file) / keys : 0.0, wd.lmdb_file,
           si.used_bytes, wd.gen_file, keys > 0 ? (double)wd.gen_memory / keys : 0.0);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    write_next_id(id_base + events);
    if (o.preload > 0 && !reuse)
        printf("fill of %" PRIu64 " keys%s took %.1f s\n", o.preload,
               o.preload_sealed ? " (sealed)" : "", fill_s);
    printf("max RSS %.0f MiB\n", (double)ru.ru_maxrss / 1024.0);
    printf("SUMMARY events_per_s=%.0f p50_ms=%.2f p99_ms=%.2f max_ms=%.1f avg_batch=%.0f "
           "bytes_per_key=%.1f memory_bytes_per_key=%.2f sync=%d\n",
           (double)events / drained, n ? (double)lat_us[n / 2] / 1e3 : 0.0,
           n ? (double)lat_us[n * 99 / 100] / 1e3 : 0.0, n ? (double)lat_us[n - 1] / 1e3 : 0.0,
           batches ? (double)(s1.batch_events - s0.batch_events) / (double)batches : 0.0,
           keys > 0 ? (double)(wd.lmdb_file + wd.gen_file) / keys : 0.0,
           keys > 0 ? (double)wd.gen_memory / keys : 0.0, o.sync);
    free(lat_us);
    return 0;
}
