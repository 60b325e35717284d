/* gen: a sealed generation file (storage/window/gen.h): writer, reader, lookups, merges; its
 * Bloom filter is storage/window/genbloom.h. */
#include "storage/window/gen.h"

#include "common/bytes.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "storage/fsutil.h"
#include "storage/window/genbloom.h"

/*
 * Contents:
 *   encoding     records (byte order: common/bytes.h)
 *   writer       gen_writer_open/add/finish/abort, flush_page, write_tail
 *   reader       gen_open, read_footer, read_exact, gen_find, find_in_page
 *   iteration    gen_iter_*, gen_verify, gen_merge
 */

#define MAGIC         "INGDGEN1"
#define VERSION       2u /* 2: the per-source table */
#define SOURCE_BYTES  24 /* u32 tag, u32 zero, u64 keys, u64 newest receivedAt */
#define ITER_PAGES    64 /* pages read at once by an iterator: 256 KiB */
#define FOOTER_CRC_AT (GEN_FOOTER_BYTES - 4)

struct gen {
    char *path;
    char *dir;
    char *staged; /* the temporary file's path while a merge's output is not published */
    int fd;
    gen_info_t info;
    uint64_t pages;
    uint64_t blocks; /* filter blocks */
    unsigned k;      /* bits set per key */
    uint8_t *filter; /* blocks * GENBLOOM_BLOCK_BYTES */
    uint64_t *fences;
    uint32_t crc_records;
    gen_source_t *sources; /* by tag, ascending */
    size_t nsources;
};

struct gen_writer {
    char *dir, *path, *tmp;
    int fd;
    gen_id_t id;
    uint64_t max_keys, keys, blocks;
    unsigned k;
    uint8_t page[GEN_PAGE_BYTES];
    size_t in_page; /* records in `page` */
    uint8_t *filter;
    uint64_t *fences;
    uint64_t pages;
    uLong crc_records;
    uint8_t last[KEYHASH_LEN];
    int64_t min_rx, max_rx;
    uint64_t min_off, max_off;
    srcmap_t *sources; /* the keys by source: the file's per-source table */
    bool failed;
};

struct gen_iter {
    const gen_t *g;
    uint8_t *buf;
    uint64_t next_page; /* first page not yet read into buf */
    size_t have, pos;   /* records in buf, the next one */
    uint64_t left;      /* records not yet returned */
};

static int open_path(const char *dir, gen_id_t id, const char *path, gen_t **out);

/* ---- encoding ---- */

static void encode_record(uint8_t *p, const gen_entry_t *e)
{
    memcpy(p, e->key, KEYHASH_LEN);
    bytes_put_le(p + 16, e->offset, 6);
    bytes_put_le(p + 22, (uint64_t)e->received_ms, 6);
}

static void decode_record(const uint8_t *p, gen_entry_t *e)
{
    memcpy(e->key, p, KEYHASH_LEN);
    e->offset = bytes_get_le(p + 16, 6);
    e->received_ms = (int64_t)bytes_get_le(p + 22, 6);
}

/* ---- names ---- */

void gen_file_name(gen_id_t id, char *buf, size_t len)
{
    snprintf(buf, len, "%020" PRIu64 "-%020" PRIu64 ".gen", id.first, id.end);
}

/* 20 decimal digits; 0 and *v, or -1. */
static int parse_digits(const char *p, uint64_t *v)
{
    uint64_t x = 0;
    for (int i = 0; i < 20; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        uint64_t d = (uint64_t)(p[i] - '0');
        if (x > (UINT64_MAX - d) / 10)
            return -1;
        x = x * 10 + d;
    }
    *v = x;
    return 0;
}

int gen_id_cmp(const void *a, const void *b)
{
    const gen_id_t *x = a, *y = b;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    return x->end > y->end ? -1 : x->end < y->end ? 1 : 0;
}

int gen_parse_name(const char *name, gen_id_t *id)
{
    gen_id_t v;
    if (strlen(name) != 45 || parse_digits(name, &v.first) != 0 || name[20] != '-' ||
        parse_digits(name + 21, &v.end) != 0 || strcmp(name + 41, ".gen") != 0 || v.first >= v.end)
        return -1;
    *id = v;
    return 0;
}

static char *gen_path(const char *dir, gen_id_t id, bool tmp)
{
    char name[GEN_NAME_MAX + 8];
    name[0] = '.';
    gen_file_name(id, name + 1, GEN_NAME_MAX);
    if (tmp)
        strcat(name, ".tmp");
    return fsutil_join(dir, tmp ? name : name + 1);
}

/* ---- writer ---- */

static int write_out(int fd, const void *buf, size_t len)
{
    return fsutil_write_all(fd, buf, len) == 0 ? GEN_OK : GEN_EIO;
}

int gen_writer_open(const char *dir, gen_id_t id, uint64_t max_keys, unsigned bits_per_key,
                    gen_writer_t **out)
{
    *out = NULL;
    if (bits_per_key == 0)
        bits_per_key = GEN_BLOOM_BITS;
    if (bits_per_key > GEN_BLOOM_MAX_BITS || id.first >= id.end)
        return GEN_INVALID;
    gen_writer_t *w = calloc(1, sizeof(*w));
    if (!w)
        return GEN_NOMEM;
    w->fd = -1;
    w->id = id;
    w->max_keys = max_keys;
    w->blocks = genbloom_blocks(max_keys, bits_per_key);
    w->k = genbloom_hashes(bits_per_key);
    w->dir = strdup(dir);
    w->path = gen_path(dir, id, false);
    w->tmp = gen_path(dir, id, true);
    w->filter = calloc(w->blocks, GENBLOOM_BLOCK_BYTES);
    w->fences = malloc(((max_keys + GEN_PAGE_RECORDS - 1) / GEN_PAGE_RECORDS + 1) * 8);
    w->crc_records = crc32(0L, Z_NULL, 0);
    w->sources = srcmap_new(0);
    if (!w->dir || !w->path || !w->tmp || !w->filter || !w->fences || !w->sources) {
        gen_writer_abort(w);
        return GEN_NOMEM;
    }
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (w->fd < 0) {
        gen_writer_abort(w);
        return GEN_EIO;
    }
    *out = w;
    return GEN_OK;
}

static int flush_page(gen_writer_t *w)
{
    if (w->in_page == 0)
        return GEN_OK;
    memset(w->page + w->in_page * GEN_RECORD_BYTES, 0,
           GEN_PAGE_BYTES - w->in_page * GEN_RECORD_BYTES);
    w->crc_records = crc32(w->crc_records, w->page, GEN_PAGE_BYTES);
    w->fences[w->pages++] = bytes_get_be64(w->page);
    w->in_page = 0;
    return write_out(w->fd, w->page, GEN_PAGE_BYTES);
}

static void track_extents(gen_writer_t *w, const gen_entry_t *e)
{
    if (w->keys == 0 || e->received_ms < w->min_rx)
        w->min_rx = e->received_ms;
    if (w->keys == 0 || e->received_ms > w->max_rx)
        w->max_rx = e->received_ms;
    if (w->keys == 0 || e->offset < w->min_off)
        w->min_off = e->offset;
    if (w->keys == 0 || e->offset > w->max_off)
        w->max_off = e->offset;
}

int gen_writer_add(gen_writer_t *w, const gen_entry_t *e)
{
    if (w->failed)
        return GEN_INVALID;
    if (w->keys >= w->max_keys || e->offset > GEN_MAX_VALUE || e->received_ms < 0 ||
        (uint64_t)e->received_ms > GEN_MAX_VALUE ||
        (w->keys > 0 && memcmp(e->key, w->last, KEYHASH_LEN) <= 0)) {
        w->failed = true;
        return GEN_INVALID;
    }
    if (srcmap_add_received(w->sources, e->key, e->received_ms) != 0) {
        w->failed = true;
        return GEN_NOMEM;
    }
    track_extents(w, e);
    encode_record(w->page + w->in_page * GEN_RECORD_BYTES, e);
    genbloom_add(w->filter, w->blocks, w->k, e->key);
    memcpy(w->last, e->key, KEYHASH_LEN);
    w->keys++;
    if (++w->in_page == GEN_PAGE_RECORDS) {
        int rc = flush_page(w);
        if (rc != GEN_OK) {
            w->failed = true;
            return rc;
        }
    }
    return GEN_OK;
}

static void encode_footer(const gen_writer_t *w, uint8_t *f, uint32_t crc_filter,
                          uint32_t crc_fences, uint32_t crc_sources)
{
    memset(f, 0, GEN_FOOTER_BYTES);
    memcpy(f, MAGIC, 8);
    bytes_put_le(f + 8, VERSION, 4);
    bytes_put_le(f + 12, GEN_RECORD_BYTES, 4);
    bytes_put_le(f + 16, w->id.first, 8);
    bytes_put_le(f + 24, w->keys, 8);
    bytes_put_le(f + 32, w->pages, 8);
    bytes_put_le(f + 40, w->blocks, 8);
    bytes_put_le(f + 48, (uint64_t)w->min_rx, 8);
    bytes_put_le(f + 56, (uint64_t)w->max_rx, 8);
    bytes_put_le(f + 64, w->min_off, 8);
    bytes_put_le(f + 72, w->max_off, 8);
    bytes_put_le(f + 80, (uint32_t)w->crc_records, 4);
    bytes_put_le(f + 84, crc_filter, 4);
    bytes_put_le(f + 88, crc_fences, 4);
    bytes_put_le(f + 92, w->k, 4);
    bytes_put_le(f + 96, w->id.end, 8);
    bytes_put_le(f + 104, srcmap_count(w->sources), 8);
    bytes_put_le(f + 112, crc_sources, 4);
    bytes_put_le(f + FOOTER_CRC_AT, crc32(0L, f, FOOTER_CRC_AT), 4);
}

static int tag_cmp(const void *a, const void *b)
{
    uint32_t x = ((const gen_source_t *)a)->tag, y = ((const gen_source_t *)b)->tag;
    return x < y ? -1 : x > y;
}

/* The per-source table, by tag: n SOURCE_BYTES records (malloc'ed; caller frees). */
static uint8_t *encode_sources(const srcmap_t *m, size_t *len)
{
    size_t n = srcmap_count(m);
    const srcmap_entry_t *e = srcmap_entries(m);
    gen_source_t *t = calloc(n ? n : 1, sizeof(*t));
    uint8_t *out = calloc(n ? n : 1, SOURCE_BYTES);
    if (!t || !out) {
        free(t);
        free(out);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        t[i] = (gen_source_t){.tag = e[i].tag, .keys = e[i].keys, .newest_ms = e[i].newest_ms};
    qsort(t, n, sizeof(*t), tag_cmp);
    for (size_t i = 0; i < n; i++) {
        bytes_put_le(out + i * SOURCE_BYTES, t[i].tag, 4);
        bytes_put_le(out + i * SOURCE_BYTES + 8, t[i].keys, 8);
        bytes_put_le(out + i * SOURCE_BYTES + 16, (uint64_t)t[i].newest_ms, 8);
    }
    free(t);
    *len = n * SOURCE_BYTES;
    return out;
}

/* Filter, fences (little-endian), the per-source table and footer after the records. */
static int write_tail(gen_writer_t *w)
{
    size_t fence_bytes = w->pages * 8, source_bytes = 0;
    uint8_t *fences = malloc(fence_bytes ? fence_bytes : 1);
    uint8_t *sources = encode_sources(w->sources, &source_bytes);
    if (!fences || !sources) {
        free(fences);
        free(sources);
        return GEN_NOMEM;
    }
    for (uint64_t i = 0; i < w->pages; i++)
        bytes_put_le(fences + i * 8, w->fences[i], 8);
    uint32_t crc_filter = (uint32_t)crc32(0L, w->filter, (uInt)(w->blocks * GENBLOOM_BLOCK_BYTES));
    uint32_t crc_fences = (uint32_t)crc32(0L, fences, (uInt)fence_bytes);
    uint32_t crc_sources = (uint32_t)crc32(0L, sources, (uInt)source_bytes);
    uint8_t footer[GEN_FOOTER_BYTES];
    encode_footer(w, footer, crc_filter, crc_fences, crc_sources);
    int rc = write_out(w->fd, w->filter, w->blocks * GENBLOOM_BLOCK_BYTES);
    if (rc == GEN_OK)
        rc = write_out(w->fd, fences, fence_bytes);
    if (rc == GEN_OK)
        rc = write_out(w->fd, sources, source_bytes);
    if (rc == GEN_OK)
        rc = write_out(w->fd, footer, sizeof(footer));
    free(fences);
    free(sources);
    return rc;
}

/* Writes what is left, fsyncs and closes the temporary file. */
static int writer_complete(gen_writer_t *w)
{
    int rc = w->failed ? GEN_INVALID : flush_page(w);
    if (rc == GEN_OK)
        rc = write_tail(w);
    if (rc == GEN_OK && fsync(w->fd) != 0)
        rc = GEN_EIO;
    if (rc == GEN_OK && close(w->fd) != 0)
        rc = GEN_EIO;
    w->fd = -1;
    return rc;
}

int gen_writer_finish(gen_writer_t *w, gen_t **out)
{
    if (out)
        *out = NULL;
    int rc = writer_complete(w);
    if (rc == GEN_OK && rename(w->tmp, w->path) != 0)
        rc = GEN_EIO;
    /* The name is new (a seal's range follows every other one): taking it back harms nothing. */
    if (rc == GEN_OK && fsutil_sync_dir(w->dir) != 0) {
        unlink(w->path);
        rc = GEN_EIO;
    }
    if (rc == GEN_OK && out && (rc = gen_open(w->dir, w->id, out)) != GEN_OK)
        unlink(w->path);
    if (rc != GEN_OK) {
        gen_writer_abort(w);
        return rc;
    }
    free(w->tmp);
    w->tmp = NULL;
    gen_writer_abort(w);
    return GEN_OK;
}

/* Finishes w into a staged generation: whole and durable under its temporary name (gen_publish). */
static int writer_stage(gen_writer_t *w, gen_t **out)
{
    *out = NULL;
    int rc = writer_complete(w);
    if (rc == GEN_OK)
        rc = open_path(w->dir, w->id, w->tmp, out);
    if (rc != GEN_OK) {
        gen_writer_abort(w);
        return rc;
    }
    (*out)->staged =
        w->tmp; /* the generation's now: gen_publish renames it, gen_close removes it */
    w->tmp = NULL;
    gen_writer_abort(w);
    return GEN_OK;
}

int gen_publish(gen_t *g)
{
    if (!g->staged)
        return GEN_OK;
    if (rename(g->staged, g->path) != 0)
        return GEN_EIO; /* still staged */
    free(g->staged);
    g->staged = NULL;
    return fsutil_sync_dir(g->dir) == 0 ? GEN_OK : GEN_EIO;
}

bool gen_is_staged(const gen_t *g)
{
    return g->staged != NULL;
}

void gen_writer_abort(gen_writer_t *w)
{
    if (!w)
        return;
    if (w->fd >= 0)
        close(w->fd);
    if (w->tmp)
        unlink(w->tmp);
    free(w->dir);
    free(w->path);
    free(w->tmp);
    free(w->filter);
    free(w->fences);
    srcmap_free(w->sources);
    free(w);
}

/* ---- reader ---- */

/* GEN_CORRUPT when the file is shorter than its footer says. */
static int read_exact(int fd, void *buf, size_t len, uint64_t at)
{
    ssize_t n = fsutil_pread_full(fd, buf, len, at);
    return n < 0 ? GEN_EIO : (size_t)n < len ? GEN_CORRUPT : GEN_OK;
}

/* Checks the footer and fills the sizes; `file_bytes` must match what it describes. */
static int decode_footer(gen_t *g, const uint8_t *f, uint64_t file_bytes, uint32_t *crc_filter,
                         uint32_t *crc_fences, uint32_t *crc_sources)
{
    if (memcmp(f, MAGIC, 8) != 0 ||
        bytes_get_le(f + FOOTER_CRC_AT, 4) != (uint32_t)crc32(0L, f, FOOTER_CRC_AT))
        return GEN_CORRUPT;
    if (bytes_get_le(f + 8, 4) != VERSION)
        return GEN_VERSION;
    g->info.id.first = bytes_get_le(f + 16, 8);
    g->info.id.end = bytes_get_le(f + 96, 8);
    g->info.keys = bytes_get_le(f + 24, 8);
    g->pages = bytes_get_le(f + 32, 8);
    g->blocks = bytes_get_le(f + 40, 8);
    g->info.min_received_ms = (int64_t)bytes_get_le(f + 48, 8);
    g->info.max_received_ms = (int64_t)bytes_get_le(f + 56, 8);
    g->info.min_offset = bytes_get_le(f + 64, 8);
    g->info.max_offset = bytes_get_le(f + 72, 8);
    g->crc_records = (uint32_t)bytes_get_le(f + 80, 4);
    *crc_filter = (uint32_t)bytes_get_le(f + 84, 4);
    *crc_fences = (uint32_t)bytes_get_le(f + 88, 4);
    g->k = (unsigned)bytes_get_le(f + 92, 4);
    uint64_t nsources = bytes_get_le(f + 104, 8);
    *crc_sources = (uint32_t)bytes_get_le(f + 112, 4);
    if (nsources > g->info.keys)
        return GEN_CORRUPT;
    g->nsources = (size_t)nsources;
    uint64_t want = g->pages * GEN_PAGE_BYTES + g->blocks * GENBLOOM_BLOCK_BYTES + g->pages * 8 +
                    nsources * SOURCE_BYTES + GEN_FOOTER_BYTES;
    if (bytes_get_le(f + 12, 4) != GEN_RECORD_BYTES || g->k < 1 || g->k > GEN_BLOOM_MAX_K ||
        g->blocks == 0 || g->info.keys > g->pages * GEN_PAGE_RECORDS ||
        g->info.keys + GEN_PAGE_RECORDS <= g->pages * GEN_PAGE_RECORDS || want != file_bytes)
        return GEN_CORRUPT;
    g->info.file_bytes = file_bytes;
    g->info.memory_bytes = g->blocks * GENBLOOM_BLOCK_BYTES + g->pages * 8;
    return GEN_OK;
}

/* Reads the per-source table into memory and checks it: by tag, its counts adding up. */
static int load_sources(gen_t *g, uint32_t crc_sources)
{
    uint64_t at = g->pages * GEN_PAGE_BYTES + g->blocks * GENBLOOM_BLOCK_BYTES + g->pages * 8;
    size_t len = g->nsources * SOURCE_BYTES;
    uint8_t *raw = malloc(len ? len : 1);
    g->sources = calloc(g->nsources ? g->nsources : 1, sizeof(*g->sources));
    int rc = raw && g->sources ? GEN_OK : GEN_NOMEM;
    if (rc == GEN_OK)
        rc = read_exact(g->fd, raw, len, at);
    if (rc == GEN_OK && (uint32_t)crc32(0L, raw, (uInt)len) != crc_sources)
        rc = GEN_CORRUPT;
    uint64_t sum = 0;
    for (size_t i = 0; rc == GEN_OK && i < g->nsources; i++) {
        gen_source_t *t = &g->sources[i];
        t->tag = (uint32_t)bytes_get_le(raw + i * SOURCE_BYTES, 4);
        t->keys = bytes_get_le(raw + i * SOURCE_BYTES + 8, 8);
        t->newest_ms = (int64_t)bytes_get_le(raw + i * SOURCE_BYTES + 16, 8);
        sum += t->keys;
        if (t->keys == 0 || (i > 0 && t->tag <= g->sources[i - 1].tag))
            rc = GEN_CORRUPT;
    }
    if (rc == GEN_OK && sum != g->info.keys)
        rc = GEN_CORRUPT;
    free(raw);
    return rc;
}

size_t gen_sources(const gen_t *g, const gen_source_t **out)
{
    *out = g->sources;
    return g->nsources;
}

/* Reads filter and fences into memory and checks them. */
static int load_index(gen_t *g, uint32_t crc_filter, uint32_t crc_fences)
{
    uint64_t filter_at = g->pages * GEN_PAGE_BYTES;
    uint64_t fence_at = filter_at + g->blocks * GENBLOOM_BLOCK_BYTES;
    size_t fence_bytes = g->pages * 8;
    g->filter = malloc(g->blocks * GENBLOOM_BLOCK_BYTES);
    uint8_t *raw = malloc(fence_bytes ? fence_bytes : 1);
    g->fences = malloc(fence_bytes ? fence_bytes : 1);
    int rc = (g->filter && raw && g->fences) ? GEN_OK : GEN_NOMEM;
    if (rc == GEN_OK)
        rc = read_exact(g->fd, g->filter, g->blocks * GENBLOOM_BLOCK_BYTES, filter_at);
    if (rc == GEN_OK)
        rc = read_exact(g->fd, raw, fence_bytes, fence_at);
    if (rc == GEN_OK &&
        ((uint32_t)crc32(0L, g->filter, (uInt)(g->blocks * GENBLOOM_BLOCK_BYTES)) != crc_filter ||
         (uint32_t)crc32(0L, raw, (uInt)fence_bytes) != crc_fences))
        rc = GEN_CORRUPT;
    for (uint64_t i = 0; rc == GEN_OK && i < g->pages; i++) {
        g->fences[i] = bytes_get_le(raw + i * 8, 8);
        if (i > 0 && g->fences[i] < g->fences[i - 1])
            rc = GEN_CORRUPT;
    }
    free(raw);
    return rc;
}

/* Opens the file at `path` (NULL: generation id's own name in dir) as generation `id`. */
static int open_path(const char *dir, gen_id_t id, const char *path, gen_t **out)
{
    *out = NULL;
    gen_t *g = calloc(1, sizeof(*g));
    if (!g)
        return GEN_NOMEM;
    g->fd = -1;
    g->path = gen_path(dir, id, false);
    g->dir = strdup(dir);
    int rc = g->path && g->dir ? GEN_OK : GEN_NOMEM;
    if (rc == GEN_OK) {
        g->fd = open(path ? path : g->path, O_RDONLY | O_CLOEXEC);
        if (g->fd < 0)
            rc = errno == ENOENT ? GEN_NOTFOUND : GEN_EIO;
    }
    struct stat st;
    if (rc == GEN_OK && fstat(g->fd, &st) != 0)
        rc = GEN_EIO;
    if (rc == GEN_OK && (uint64_t)st.st_size < GEN_FOOTER_BYTES)
        rc = GEN_CORRUPT;
    uint8_t f[GEN_FOOTER_BYTES];
    uint32_t crc_filter = 0, crc_fences = 0, crc_sources = 0;
    if (rc == GEN_OK)
        rc = read_exact(g->fd, f, sizeof(f), (uint64_t)st.st_size - GEN_FOOTER_BYTES);
    if (rc == GEN_OK)
        rc = decode_footer(g, f, (uint64_t)st.st_size, &crc_filter, &crc_fences, &crc_sources);
    if (rc == GEN_OK && (g->info.id.first != id.first || g->info.id.end != id.end))
        rc = GEN_CORRUPT;
    if (rc == GEN_OK)
        rc = load_index(g, crc_filter, crc_fences);
    if (rc == GEN_OK)
        rc = load_sources(g, crc_sources);
    if (rc != GEN_OK) {
        gen_close(g);
        return rc;
    }
    *out = g;
    return GEN_OK;
}

int gen_open(const char *dir, gen_id_t id, gen_t **out)
{
    return open_path(dir, id, NULL, out);
}

void gen_close(gen_t *g)
{
    if (!g)
        return;
    if (g->fd >= 0)
        close(g->fd);
    if (g->staged)
        unlink(g->staged); /* never published: a merge that lost, or failed */
    free(g->staged);
    free(g->dir);
    free(g->path);
    free(g->filter);
    free(g->fences);
    free(g->sources);
    free(g);
}

void gen_get_info(const gen_t *g, gen_info_t *out)
{
    *out = g->info;
}

bool gen_may_contain(const gen_t *g, const uint8_t key[KEYHASH_LEN])
{
    return genbloom_test(g->filter, g->blocks, g->k, key);
}

void gen_prefetch(const gen_t *g, const uint8_t key[KEYHASH_LEN])
{
    __builtin_prefetch(genbloom_block(g->filter, g->blocks, key));
}

/* Binary search in one page of `n` records. */
static bool find_in_page(const uint8_t *page, size_t n, const uint8_t key[KEYHASH_LEN],
                         gen_entry_t *e)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = memcmp(page + mid * GEN_RECORD_BYTES, key, KEYHASH_LEN);
        if (c == 0) {
            if (e)
                decode_record(page + mid * GEN_RECORD_BYTES, e);
            return true;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

/* The first page whose fence is >= v (pages when none). */
static uint64_t first_fence_at_least(const gen_t *g, uint64_t v)
{
    uint64_t lo = 0, hi = g->pages;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (g->fences[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static size_t records_in_page(const gen_t *g, uint64_t page)
{
    uint64_t before = page * GEN_PAGE_RECORDS;
    uint64_t left = g->info.keys - before;
    return left < GEN_PAGE_RECORDS ? (size_t)left : GEN_PAGE_RECORDS;
}

int gen_find(const gen_t *g, const uint8_t key[KEYHASH_LEN], bool *found, gen_entry_t *e)
{
    *found = false;
    if (g->info.keys == 0 || !genbloom_test(g->filter, g->blocks, g->k, key))
        return GEN_OK;
    /* The key lies in the last page whose fence is below its prefix, or in a page whose fence
     * equals it (several only when 146 keys share 8 bytes: never, for hashes, but exact). */
    uint64_t v = bytes_get_be64(key);
    uint64_t first = first_fence_at_least(g, v);
    uint64_t p = first > 0 ? first - 1 : 0;
    uint8_t page[GEN_PAGE_BYTES];
    for (; p < g->pages && (p < first || g->fences[p] == v); p++) {
        int rc = read_exact(g->fd, page, GEN_PAGE_BYTES, p * GEN_PAGE_BYTES);
        if (rc != GEN_OK)
            return rc;
        if (find_in_page(page, records_in_page(g, p), key, e)) {
            *found = true;
            return GEN_OK;
        }
    }
    return GEN_OK;
}

/* ---- iteration ---- */

int gen_iter_open(const gen_t *g, gen_iter_t **out)
{
    *out = NULL;
    gen_iter_t *it = calloc(1, sizeof(*it));
    if (!it)
        return GEN_NOMEM;
    it->buf = malloc((size_t)ITER_PAGES * GEN_PAGE_BYTES);
    if (!it->buf) {
        free(it);
        return GEN_NOMEM;
    }
    it->g = g;
    it->left = g->info.keys;
    *out = it;
    return GEN_OK;
}

/* Reads the next run of pages; `have` counts the records they hold. */
static int iter_fill(gen_iter_t *it)
{
    const gen_t *g = it->g;
    uint64_t n = g->pages - it->next_page;
    if (n > ITER_PAGES)
        n = ITER_PAGES;
    int rc = read_exact(g->fd, it->buf, n * GEN_PAGE_BYTES, it->next_page * GEN_PAGE_BYTES);
    if (rc != GEN_OK)
        return rc;
    /* Records are addressed page by page: compact each page's records to the front. */
    size_t have = 0;
    for (uint64_t i = 0; i < n; i++) {
        size_t r = records_in_page(g, it->next_page + i);
        memmove(it->buf + have * GEN_RECORD_BYTES, it->buf + i * GEN_PAGE_BYTES,
                r * GEN_RECORD_BYTES);
        have += r;
    }
    it->next_page += n;
    it->have = have;
    it->pos = 0;
    return GEN_OK;
}

int gen_iter_next(gen_iter_t *it, gen_entry_t *e)
{
    if (it->left == 0)
        return 1;
    if (it->pos == it->have) {
        int rc = iter_fill(it);
        if (rc != GEN_OK)
            return rc;
        if (it->have == 0)
            return GEN_CORRUPT;
    }
    decode_record(it->buf + it->pos++ * GEN_RECORD_BYTES, e);
    it->left--;
    return GEN_OK;
}

void gen_iter_close(gen_iter_t *it)
{
    if (!it)
        return;
    free(it->buf);
    free(it);
}

/* The records' CRC over whole pages, as the writer computed it. */
static int records_crc(const gen_t *g, uint32_t *crc_out)
{
    uint8_t *buf = malloc((size_t)ITER_PAGES * GEN_PAGE_BYTES);
    if (!buf)
        return GEN_NOMEM;
    uLong crc = crc32(0L, Z_NULL, 0);
    int rc = GEN_OK;
    for (uint64_t p = 0; rc == GEN_OK && p < g->pages; p += ITER_PAGES) {
        uint64_t n = g->pages - p < ITER_PAGES ? g->pages - p : ITER_PAGES;
        rc = read_exact(g->fd, buf, n * GEN_PAGE_BYTES, p * GEN_PAGE_BYTES);
        if (rc == GEN_OK)
            crc = crc32(crc, buf, (uInt)(n * GEN_PAGE_BYTES));
    }
    free(buf);
    *crc_out = (uint32_t)crc;
    return rc;
}

int gen_verify(const gen_t *g)
{
    uint32_t crc;
    int rc = records_crc(g, &crc);
    if (rc != GEN_OK)
        return rc;
    if (crc != g->crc_records)
        return GEN_CORRUPT;
    gen_iter_t *it = NULL;
    rc = gen_iter_open(g, &it);
    gen_entry_t e, prev;
    uint64_t n = 0;
    while (rc == GEN_OK && (rc = gen_iter_next(it, &e)) == GEN_OK) {
        if ((n > 0 && memcmp(prev.key, e.key, KEYHASH_LEN) >= 0) || !gen_may_contain(g, e.key))
            rc = GEN_CORRUPT;
        prev = e;
        n++;
    }
    gen_iter_close(it);
    if (rc == 1)
        rc = n == g->info.keys ? GEN_OK : GEN_CORRUPT;
    return rc;
}

/* Of two entries of one key, whether `a` is the newer. */
static bool newer(const gen_entry_t *a, const gen_entry_t *b)
{
    if (a->received_ms != b->received_ms)
        return a->received_ms > b->received_ms;
    return a->offset > b->offset;
}

/* One merge step: the smallest key among the heads, its newest entry; advances past it. */
static int merge_step(gen_iter_t **its, gen_entry_t *heads, bool *live, size_t n, gen_entry_t *out,
                      size_t *from)
{
    size_t best = n;
    for (size_t i = 0; i < n; i++) {
        if (!live[i])
            continue;
        int c = best == n ? -1 : memcmp(heads[i].key, heads[best].key, KEYHASH_LEN);
        if (c < 0 || (c == 0 && newer(&heads[i], &heads[best])))
            best = i;
    }
    if (best == n)
        return 1;
    *out = heads[best];
    *from = best;
    for (size_t i = 0; i < n; i++) {
        while (live[i] && memcmp(heads[i].key, out->key, KEYHASH_LEN) == 0) {
            int rc = gen_iter_next(its[i], &heads[i]);
            if (rc < 0)
                return rc;
            live[i] = rc == GEN_OK;
        }
    }
    return GEN_OK;
}

#define MERGE_CANCEL_EVERY 65536 /* keys between two looks at the cancel flag */

int gen_merge(const char *dir, gen_id_t id, gen_t *const *ins, size_t n, unsigned bits_per_key,
              const gen_merge_filter_t *filter, const atomic_bool *cancel, gen_t **out)
{
    *out = NULL;
    gen_iter_t **its = calloc(n ? n : 1, sizeof(*its));
    gen_entry_t *heads = calloc(n ? n : 1, sizeof(*heads));
    bool *live = calloc(n ? n : 1, sizeof(*live));
    gen_writer_t *w = NULL;
    uint64_t total = 0;
    int rc = (its && heads && live) ? GEN_OK : GEN_NOMEM;
    for (size_t i = 0; rc == GEN_OK && i < n; i++) {
        total += ins[i]->info.keys;
        rc = gen_iter_open(ins[i], &its[i]);
        if (rc == GEN_OK) {
            rc = gen_iter_next(its[i], &heads[i]);
            live[i] = rc == GEN_OK;
            rc = rc < 0 ? rc : GEN_OK;
        }
    }
    if (rc == GEN_OK && filter && filter->max_keys < total)
        total = filter->max_keys;
    if (rc == GEN_OK)
        rc = gen_writer_open(dir, id, total, bits_per_key, &w);
    gen_entry_t e;
    size_t from = 0;
    for (uint64_t k = 1;
         rc == GEN_OK && (rc = merge_step(its, heads, live, n, &e, &from)) == GEN_OK; k++) {
        if (!filter || filter->keep(filter->arg, from, &e))
            rc = gen_writer_add(w, &e);
        if (rc == GEN_OK && cancel && k % MERGE_CANCEL_EVERY == 0 && atomic_load(cancel))
            rc = GEN_CANCELLED;
    }
    if (rc == 1) {
        rc = writer_stage(w, out);
        w = NULL;
    }
    gen_writer_abort(w);
    for (size_t i = 0; its && i < n; i++)
        gen_iter_close(its[i]);
    free(its);
    free(heads);
    free(live);
    return rc;
}

int gen_copy(const gen_t *g, const char *dir)
{
    char *tmp = gen_path(dir, g->info.id, true), *path = gen_path(dir, g->info.id, false);
    uint8_t *buf = malloc((size_t)ITER_PAGES * GEN_PAGE_BYTES);
    int out = -1, rc = tmp && path && buf ? GEN_OK : GEN_NOMEM;
    if (rc == GEN_OK && (out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
        rc = GEN_EIO;
    for (uint64_t at = 0; rc == GEN_OK && at < g->info.file_bytes;) {
        uint64_t n = g->info.file_bytes - at;
        if (n > (uint64_t)ITER_PAGES * GEN_PAGE_BYTES)
            n = (uint64_t)ITER_PAGES * GEN_PAGE_BYTES;
        rc = read_exact(g->fd, buf, n, at);
        if (rc == GEN_OK)
            rc = write_out(out, buf, n);
        at += n;
    }
    if (rc == GEN_OK && fsync(out) != 0)
        rc = GEN_EIO;
    if (out >= 0 && close(out) != 0 && rc == GEN_OK)
        rc = GEN_EIO;
    if (rc == GEN_OK && (rename(tmp, path) != 0 || fsutil_sync_dir(dir) != 0))
        rc = GEN_EIO;
    if (rc != GEN_OK && tmp)
        unlink(tmp);
    free(buf);
    free(tmp);
    free(path);
    return rc;
}

int gen_remove(const char *dir, gen_id_t id)
{
    char *path = gen_path(dir, id, false);
    if (!path)
        return GEN_NOMEM;
    int rc = (unlink(path) == 0 || errno == ENOENT) ? GEN_OK : GEN_EIO;
    free(path);
    if (rc == GEN_OK && fsutil_sync_dir(dir) != 0)
        rc = GEN_EIO;
    return rc;
}

const char *gen_strerror(int status)
{
    switch (status) {
    case GEN_OK:
        return "ok";
    case GEN_EIO:
        return "I/O error on a generation file";
    case GEN_NOMEM:
        return "out of memory";
    case GEN_CORRUPT:
        return "generation file is corrupt";
    case GEN_VERSION:
        return "generation file has an unknown format version";
    case GEN_INVALID:
        return "invalid argument (keys out of order, too many, or a value out of range)";
    case GEN_NOTFOUND:
        return "no such generation file";
    case GEN_CHANGED:
        return "the generation set changed during the merge";
    case GEN_CANCELLED:
        return "the merge was cancelled";
    }
    return "unknown generation status";
}
