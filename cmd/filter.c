/* filter.c: `ingestd filter-bench`, a filter against an exact set over a synthetic or file
 * stream. */
#include "cmd/cmd.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/errbuf.h"
#include "server/options.h"
#include "storage/memfilter/filter.h"
#include "storage/window/keyhash.h"

#define CHUNK          4096 /* keys generated, then timed through the filter, per step */
#define PROGRESS_NS    5000000000LL
#define MAX_ALPHABET   (UINT64_C(1) << 34) /* ground truth is a bitmap: 2 GiB at most */
#define MAX_STREAM_LEN (UINT64_C(1) << 40)

__extension__ typedef unsigned __int128 u128;

enum { O_FILTER, O_BITS, O_BUCKETS, O_FPBITS, O_STREAM, O_SEED, O_RUNS, O_QUIET, O_MAX };

static const opts_spec_t SPECS[] = {
    [O_FILTER] =
        {"filter", NULL, NULL, NULL, OPTS_STRING, 1, 255, "SPEC",
         "nsq|bloom|sbf|sqf|qht|qqhtd[:SIZE][,key=value...], e.g. qht:8Mbit,buckets=1,fp=3 "
         "(keys: bits buckets fp hashes cellbits remainder reduced p target); required"},
    [O_BITS] = {"bits", NULL, NULL, NULL, OPTS_STRING, 1, 64, "N",
                "memory budget (adds bits=N to SPEC; 8Mbit, 2^20, 1MiB ok)"},
    [O_BUCKETS] = {"buckets", NULL, NULL, NULL, OPTS_STRING, 1, 64, "B",
                   "buckets per row (sqf, qht, qqhtd)"},
    [O_FPBITS] = {"fingerprint-bits", NULL, NULL, NULL, OPTS_STRING, 1, 64, "F",
                  "fingerprint bits (qht, qqhtd; digest bits for nsq)"},
    [O_STREAM] = {"stream", NULL, NULL, NULL, OPTS_STRING, 1, OPTS_PATH_MAX,
                  "artificial:ALPHABET:LENGTH|file:PATH",
                  "artificial: LENGTH symbols drawn uniformly from ALPHABET symbols (2^24 or a "
                  "number; LENGTH may be 150000000, 1.5e8, 2^27); file: one element per line "
                  "(empty lines skipped); required"},
    [O_SEED] = {"seed", NULL, NULL, "1", OPTS_COUNT, 0, UINT64_MAX, "S",
                "first seed: stream, filter secret, evictions"},
    [O_RUNS] = {"runs", NULL, NULL, "1", OPTS_STRING, 1, 32, "R",
                "independent runs with seeds S..S+R-1 (1..1000000, also 2^N or 1e6); the summary "
                "is the mean"},
    [O_QUIET] = {"quiet", NULL, NULL, NULL, OPTS_BOOL, 0, 0, "", "no progress lines on stderr"},
};

static const opts_cmd_t CMD = {
    "filter-bench",
    "Usage: ingestd filter-bench --filter SPEC [--bits N] [--buckets B]\n"
    "                            [--fingerprint-bits F]\n"
    "                            --stream artificial:ALPHABET:LENGTH | file:PATH\n"
    "                            [--seed S] [--runs R] [--quiet]\n",
    "Measures a bounded-memory duplicate filter against an exact set: false positive\n"
    "rate (unique elements answered DUPLICATE / unique elements), false negative rate\n"
    "(duplicates answered UNSEEN / duplicates), error rate (FPR + FNR) and nanoseconds\n"
    "per insert-if-absent (the keyed mix included). See docs/filters.md.\n",
    "Exit 0: done; 1: failure; 2: usage.\n",
    SPECS,
    O_MAX,
    false,
};

/* A count: "150000000", "1.5e8", "2^24". */
static int parse_count(const char *s, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    if (s[0] == '2' && s[1] == '^') {
        unsigned long e = strtoul(s + 2, &end, 10);
        if (end == s + 2 || *end != '\0' || e > 62 || (UINT64_C(1) << e) > max)
            return -1;
        *out = UINT64_C(1) << e;
        return 0;
    }
    if (!(s[0] >= '0' && s[0] <= '9'))
        return -1;
    double v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || v < 1 || v > (double)max || v != floor(v))
        return -1;
    *out = (uint64_t)v;
    return 0;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static void fill_secret(uint64_t seed, uint64_t salt, uint8_t out[16])
{
    uint64_t s = seed * UINT64_C(0x2545f4914f6cdd1d) ^ salt;
    uint64_t a = splitmix(&s), b = splitmix(&s);
    memcpy(out, &a, 8);
    memcpy(out + 8, &b, 8);
}

/* ---- the streams ---- */

typedef struct {
    bool artificial;
    uint64_t alphabet, length; /* artificial */
    const char *path;          /* file */
    char *data;                /* file contents (mmap) */
    size_t size;
    uint64_t lines;
} stream_t;

/* The exact set behind the ground truth: a bitmap over the alphabet, or a hash set of keys. */
typedef struct {
    uint64_t *bitmap;
    uint8_t (*slots)[16];
    uint64_t mask;
    bool has_zero;
} truth_t;

/* Inserts; returns true when it was already there. */
static bool truth_insert_key(truth_t *t, const uint8_t key[16])
{
    static const uint8_t zero[16];
    if (memcmp(key, zero, 16) == 0) {
        bool was = t->has_zero;
        t->has_zero = true;
        return was;
    }
    uint64_t h;
    memcpy(&h, key, 8);
    for (uint64_t i = h & t->mask;; i = (i + 1) & t->mask) {
        if (memcmp(t->slots[i], key, 16) == 0)
            return true;
        if (memcmp(t->slots[i], zero, 16) == 0) {
            memcpy(t->slots[i], key, 16);
            return false;
        }
    }
}

static bool truth_insert_symbol(truth_t *t, uint64_t sym)
{
    uint64_t bit = UINT64_C(1) << (sym & 63);
    bool was = (t->bitmap[sym >> 6] & bit) != 0;
    t->bitmap[sym >> 6] |= bit;
    return was;
}

static int truth_init(truth_t *t, const stream_t *st)
{
    memset(t, 0, sizeof *t);
    if (st->artificial) {
        t->bitmap = calloc((size_t)((st->alphabet + 63) / 64), sizeof *t->bitmap);
        return t->bitmap != NULL ? 0 : -1;
    }
    uint64_t cap = 16;
    while (cap < 2 * st->lines)
        cap <<= 1;
    t->slots = calloc((size_t)cap, sizeof *t->slots);
    t->mask = cap - 1;
    return t->slots != NULL ? 0 : -1;
}

static void truth_free(truth_t *t)
{
    free(t->bitmap);
    free(t->slots);
}

static int stream_open(const char *arg, stream_t *st, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    if (strncmp(arg, "artificial:", 11) == 0) {
        char buf[128];
        snprintf(buf, sizeof buf, "%s", arg + 11);
        char *colon = strchr(buf, ':');
        if (colon == NULL) {
            errbuf_printf(err, errlen, "--stream %s: want artificial:ALPHABET:LENGTH", arg);
            return 2;
        }
        *colon = '\0';
        st->artificial = true;
        if (parse_count(buf, MAX_ALPHABET, &st->alphabet) != 0 ||
            parse_count(colon + 1, MAX_STREAM_LEN, &st->length) != 0) {
            errbuf_printf(err, errlen,
                          "--stream %s: ALPHABET (2^N or a number, at most 2^34) and LENGTH must "
                          "be positive whole numbers",
                          arg);
            return 2;
        }
        return 0;
    }
    if (strncmp(arg, "file:", 5) == 0 && arg[5] != '\0') {
        st->path = arg + 5;
        int fd = open(st->path, O_RDONLY | O_CLOEXEC);
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb) != 0) {
            errbuf_printf(err, errlen, "%s: %s", st->path, strerror(errno));
            if (fd >= 0)
                close(fd);
            return 1;
        }
        st->size = (size_t)sb.st_size;
        if (st->size > 0) {
            st->data = mmap(NULL, st->size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (st->data == MAP_FAILED) {
                st->data = NULL;
                errbuf_printf(err, errlen, "%s: %s", st->path, strerror(errno));
                close(fd);
                return 1;
            }
        }
        close(fd);
        for (size_t i = 0; i < st->size;) {
            const char *nl = memchr(st->data + i, '\n', st->size - i);
            size_t end = nl != NULL ? (size_t)(nl - st->data) : st->size;
            if (end > i && !(end == i + 1 && st->data[i] == '\r'))
                st->lines++;
            i = end + 1;
        }
        if (st->lines == 0) {
            errbuf_printf(err, errlen, "%s: no elements (one per line)", st->path);
            return 1;
        }
        st->length = st->lines;
        return 0;
    }
    errbuf_printf(err, errlen, "--stream %s: want artificial:ALPHABET:LENGTH or file:PATH", arg);
    return 2;
}

static void stream_close(stream_t *st)
{
    if (st->data != NULL)
        munmap(st->data, st->size);
}

/* ---- one run ---- */

typedef struct {
    uint64_t n, dups, fp, fn;
    int64_t filter_ns;
} counts_t;

/* The next line of a file stream (without its \r\n), skipping empty ones: [*b, *e) of st->data. */
static void next_line(const stream_t *st, size_t *pos, size_t *b, size_t *e)
{
    for (;;) {
        const char *nl = memchr(st->data + *pos, '\n', st->size - *pos);
        *b = *pos;
        *e = nl != NULL ? (size_t)(nl - st->data) : st->size;
        *pos = *e + 1;
        if (*e > *b && st->data[*e - 1] == '\r')
            (*e)--;
        if (*e > *b)
            return;
    }
}

/* The next n keys of the stream into keys, and whether each was seen before into dup. */
static void next_keys(const stream_t *st, const uint8_t skey[16], uint64_t *rng, size_t *pos,
                      truth_t *truth, size_t n, uint8_t (*keys)[16], bool *dup)
{
    for (size_t i = 0; i < n; i++) {
        if (st->artificial) {
            uint64_t sym = (uint64_t)(((u128)splitmix(rng) * st->alphabet) >> 64);
            keyhash_siphash128(skey, &sym, sizeof sym, keys[i]);
            dup[i] = truth_insert_symbol(truth, sym);
        } else {
            size_t b, e;
            next_line(st, pos, &b, &e);
            keyhash_siphash128(skey, st->data + b, e - b, keys[i]);
            dup[i] = truth_insert_key(truth, keys[i]);
        }
    }
}

/* Times the filter over keys[0..n) and counts its mistakes against dup into c. */
static void filter_chunk(filter_t *f, size_t n, const uint8_t (*keys)[16], const bool *dup,
                         int *answer, counts_t *c)
{
    int64_t t0 = clk_mono_ns();
    for (size_t i = 0; i < n; i++)
        answer[i] = filter_insert_if_absent(f, keys[i]);
    c->filter_ns += clk_mono_ns() - t0;
    for (size_t i = 0; i < n; i++) {
        if (dup[i]) {
            c->dups++;
            c->fn += answer[i] == FILTER_UNSEEN;
        } else {
            c->fp += answer[i] == FILTER_DUPLICATE;
        }
    }
}

static int run_once(const filter_spec_t *spec, const stream_t *st, uint64_t seed, int run, int runs,
                    bool quiet, counts_t *c)
{
    uint8_t fsecret[16], skey[16];
    fill_secret(seed, UINT64_C(0xf11e7), fsecret);
    fill_secret(seed, UINT64_C(0x57ea3), skey);
    filter_t *f = NULL;
    truth_t truth;
    uint8_t(*keys)[16] = malloc(CHUNK * sizeof *keys);
    bool *dup = malloc(CHUNK * sizeof *dup);
    int *answer = malloc(CHUNK * sizeof *answer);
    int ret = 1;

    memset(c, 0, sizeof *c);
    if (keys == NULL || dup == NULL || answer == NULL || truth_init(&truth, st) != 0) {
        fprintf(stderr, "ingestd filter-bench: out of memory for the exact set\n");
        free(keys);
        free(dup);
        free(answer);
        return 1;
    }
    int rc = filter_new(spec, fsecret, &f);
    if (rc != 0) {
        fprintf(stderr, "ingestd filter-bench: %s\n", filter_strerror(rc));
        goto out;
    }

    uint64_t rng = seed ^ UINT64_C(0x6a09e667f3bcc908);
    size_t pos = 0; /* file offset */
    int64_t start = clk_mono_ns(), last = start;
    for (uint64_t done = 0; done < st->length;) {
        size_t n = st->length - done < CHUNK ? (size_t)(st->length - done) : CHUNK;
        next_keys(st, skey, &rng, &pos, &truth, n, keys, dup);
        filter_chunk(f, n, (const uint8_t(*)[16])keys, dup, answer, c);
        done += n;
        c->n = done;
        int64_t now = clk_mono_ns();
        if (!quiet && now - last >= PROGRESS_NS && done < st->length) {
            double el = (double)(now - start) / 1e9;
            fprintf(stderr,
                    "filter-bench: run %d/%d %5.1f%% (%" PRIu64 "/%" PRIu64
                    ") %.0f s elapsed, ~%.0f s left\n",
                    run, runs, 100.0 * (double)done / (double)st->length, done, st->length, el,
                    el * (double)(st->length - done) / (double)done);
            last = now;
        }
    }
    ret = 0;
out:
    filter_free(f);
    truth_free(&truth);
    free(keys);
    free(dup);
    free(answer);
    return ret;
}

static double rate(uint64_t num, uint64_t den)
{
    return den == 0 ? 0.0 : (double)num / (double)den;
}

/* filter-bench's flags as given. */
struct args {
    const char *filter, *bits, *buckets, *fpbits, *stream;
    uint64_t seed, runs;
    bool quiet;
};

/* Reads argv into a. Returns -1 to go on, else the exit status (0 after --help, 2 bad flags). */
static int parse_args(int argc, char **argv, struct args *a)
{
    opts_val_t v[O_MAX];
    int rc = opts_parse(&CMD, argc, argv, v, NULL);

    *a = (struct args){.filter = v[O_FILTER].str,
                       .bits = v[O_BITS].str,
                       .buckets = v[O_BUCKETS].str,
                       .fpbits = v[O_FPBITS].str,
                       .stream = v[O_STREAM].str,
                       .seed = v[O_SEED].n,
                       .quiet = v[O_QUIET].on};
    const char *runs = v[O_RUNS].str;
    opts_free(&CMD, v);
    if (rc != 0)
        return rc == 1 ? 0 : 2;
    if (parse_count(runs, 1000000, &a->runs) != 0) {
        fprintf(stderr, "ingestd filter-bench: --runs %s: want 1..1000000\n", runs);
        return 2;
    }
    if (a->filter == NULL || a->stream == NULL) {
        fprintf(stderr, "ingestd filter-bench: --filter and --stream are required (see ingestd "
                        "filter-bench --help)\n");
        return 2;
    }
    return -1;
}

/* The filter spec: --filter with the other flags appended as spec items (later items win). */
static int build_spec(const struct args *a, filter_spec_t *spec)
{
    char text[512], err[256];
    int len = snprintf(text, sizeof text, "%s", a->filter);
    const char *extra[][2] = {{"bits", a->bits}, {"buckets", a->buckets}, {"fp", a->fpbits}};
    for (size_t i = 0; i < 3; i++)
        if (extra[i][1] != NULL && len > 0 && (size_t)len < sizeof text)
            len += snprintf(text + len, sizeof text - (size_t)len, "%s%s=%s",
                            strchr(text, ':') != NULL ? "," : ":", extra[i][0], extra[i][1]);
    if (len < 0 || (size_t)len >= sizeof text) {
        fprintf(stderr, "ingestd filter-bench: filter spec too long\n");
        return -1;
    }
    if (filter_parse_spec(text, spec, err, sizeof err) != 0) {
        fprintf(stderr, "ingestd filter-bench: --filter: %s\n", err);
        return -1;
    }
    return 0;
}

/* The filter's size and asymptotic FPR (from an empty one), into *mem and *afpr. */
static int probe_filter(const filter_spec_t *spec, uint64_t *mem, double *afpr)
{
    filter_t *probe = NULL;
    uint8_t zero[16] = {0};
    if (filter_new(spec, zero, &probe) != 0) {
        fprintf(stderr, "ingestd filter-bench: out of memory\n");
        return -1;
    }
    *mem = filter_memory_bits(probe);
    *afpr = filter_asymptotic_fpr(probe);
    filter_free(probe);
    return 0;
}

/* Means over the runs (sum_* / runs), and the last run's counts. */
struct totals {
    double sum_fpr, sum_fnr, sum_dup, sum_ns;
    counts_t last;
};

/* Every run, with a line per run when there are several. 0, or 1 (out of memory). */
static int run_all(const struct args *a, const filter_spec_t *spec, const stream_t *st,
                   struct totals *t)
{
    for (uint64_t r = 0; r < a->runs; r++) {
        counts_t *c = &t->last;
        if (run_once(spec, st, a->seed + r, (int)r + 1, (int)a->runs, a->quiet, c) != 0)
            return 1;
        double fpr = rate(c->fp, c->n - c->dups), fnr = rate(c->fn, c->dups);
        double ns = (double)c->filter_ns / (double)c->n;
        t->sum_fpr += fpr;
        t->sum_fnr += fnr;
        t->sum_dup += rate(c->dups, c->n);
        t->sum_ns += ns;
        if (a->runs > 1)
            printf("run %-7" PRIu64 " seed %" PRIu64 ": FPR %.2f%% FNR %.2f%% error %.2f%% "
                   "(dups %.2f%%) %.1f ns/op\n",
                   r + 1, a->seed + r, 100 * fpr, 100 * fnr, 100 * (fpr + fnr),
                   100 * rate(c->dups, c->n), ns);
    }
    return 0;
}

static void print_summary(const struct args *a, const char *canon, uint64_t mem,
                          const struct totals *t)
{
    double k = (double)a->runs;
    printf("elements    %" PRIu64 " per run, %.2f%% duplicates%s\n", t->last.n,
           100 * t->sum_dup / k, a->runs > 1 ? " (mean)" : "");
    printf("FPR         %.2f%%  (unique elements answered DUPLICATE / unique elements)\n",
           100 * t->sum_fpr / k);
    printf("FNR         %.2f%%  (duplicates answered UNSEEN / duplicates)\n", 100 * t->sum_fnr / k);
    printf("error       %.2f%%  (FPR + FNR)\n", 100 * (t->sum_fpr + t->sum_fnr) / k);
    printf("ns/op       %.1f  (insert-if-absent with the keyed mix)\n", t->sum_ns / k);
    printf("RESULT filter=%s stream=%s n=%" PRIu64 " runs=%" PRIu64 " seed=%" PRIu64
           " mem_bits=%" PRIu64 " dup_pct=%.2f fpr_pct=%.2f fnr_pct=%.2f err_pct=%.2f "
           "ns_per_op=%.1f\n",
           canon, a->stream, t->last.n, a->runs, a->seed, mem, 100 * t->sum_dup / k,
           100 * t->sum_fpr / k, 100 * t->sum_fnr / k, 100 * (t->sum_fpr + t->sum_fnr) / k,
           t->sum_ns / k);
}

int cmd_filter_bench(int argc, char **argv)
{
    struct args a;
    filter_spec_t spec;
    stream_t st;
    struct totals t = {0};
    char err[256], canon[256];
    uint64_t mem;
    double afpr;

    int rc = parse_args(argc, argv, &a);
    if (rc >= 0)
        return rc;
    if (build_spec(&a, &spec) != 0)
        return 2;
    rc = stream_open(a.stream, &st, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "ingestd filter-bench: %s\n", err);
        stream_close(&st);
        return rc;
    }
    filter_spec_format(&spec, canon, sizeof canon);
    if (probe_filter(&spec, &mem, &afpr) != 0) {
        stream_close(&st);
        return 1;
    }
    printf("filter      %s (table %" PRIu64 " bits, asymptotic FPR %.2f%%)\n", canon, mem,
           100 * afpr);
    printf("stream      %s, %" PRIu64 " elements, seed %" PRIu64 ", %" PRIu64 " run%s\n", a.stream,
           st.length, a.seed, a.runs, a.runs == 1 ? "" : "s");
    rc = run_all(&a, &spec, &st, &t);
    if (rc == 0)
        print_summary(&a, canon, mem, &t);
    stream_close(&st);
    return rc;
}
