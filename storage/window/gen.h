/* gen: a sealed generation of the de-duplication window: an immutable file of keys in key order,
 * with a blocked Bloom filter and a fence index kept in memory. */
#ifndef INGESTD_GEN_H
#define INGESTD_GEN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/window/genbloom.h" /* GEN_BLOOM_BITS: the writer's bits per key */
#include "storage/window/keyhash.h"
#include "storage/window/srcmap.h"

/*
 * Why: a window of 100M or 1B keys in one B-tree costs a random leaf write
 * per insert and per eviction. A generation is written once, in key order,
 * sequentially, and dropped whole when it ages out (an unlink), so neither
 * inserts nor evictions touch it. docs/window.md gives the whole design.
 *
 * A generation holds the keys the young store numbered with sequences
 * [first, end): its id, and its file name DIR/FFFFFFFFFFFFFFFFFFFF-EEEEEEEEEEEEEEEEEEEE.gen
 * (20 decimal digits each). A merge of adjacent generations covers the union
 * of their ranges, so a file whose range lies inside another's is a merge
 * input left by a crash. On disk, little-endian:
 *   records: pages of GEN_PAGE_BYTES, each holding GEN_PAGE_RECORDS records of
 *            GEN_RECORD_BYTES (16-byte key | u48 log offset | u48 receivedAt
 *            ms) in strictly ascending key order, the page's tail zeroed
 *   filter : blocked Bloom filter, 64-byte blocks (one cache line); a key's
 *            block is chosen by its first 8 bytes, its k bits in the block by
 *            double hashing on its last 8 (keys are keyed hashes already:
 *            uniform, and no client can aim them); storage/window/genbloom.h
 *   fences : u64 per page: the first 8 key bytes (big-endian) of its first record
 *   sources: per source tag its keys carry (keyhash_source), ascending: u32 tag,
 *            u32 zero, u64 keys, u64 newest receivedAt (per-source budgets)
 *   footer : GEN_FOOTER_BYTES: magic, version, counts, extents, the ranges of
 *            receivedAt and offsets, CRC-32s of records, filter, fences and
 *            of the footer itself
 * At the default 14 filter bits per key: about 30 bytes per key on disk,
 * 1.8 in memory (filter and fences). Written to ".NNN.gen.tmp", fsynced,
 * renamed, and the directory fsynced: a generation file exists whole or not
 * at all.
 *
 * Threading: a gen_t is immutable once open; any number of threads may look
 * up in it at once. A writer belongs to one thread.
 */

#define GEN_RECORD_BYTES 28
#define GEN_PAGE_BYTES   4096
#define GEN_PAGE_RECORDS (GEN_PAGE_BYTES / GEN_RECORD_BYTES) /* 146 */
#define GEN_FOOTER_BYTES 128
#define GEN_MAX_VALUE    ((UINT64_C(1) << 48) - 1) /* largest offset or receivedAt it holds */

enum gen_status {
    GEN_OK = 0,
    GEN_EIO = -1, /* a system call failed (gen_errno() of the writer, errno otherwise) */
    GEN_NOMEM = -2,
    GEN_CORRUPT = -3,  /* bad magic, size, checksum or key order */
    GEN_VERSION = -4,  /* written by an unknown format version */
    GEN_INVALID = -5,  /* bad argument: keys out of order, more keys than announced, a value
                          past GEN_MAX_VALUE */
    GEN_NOTFOUND = -6, /* no such generation file */
    GEN_CHANGED = -7,  /* genset_merge: an input left the set meanwhile; nothing changed */
    GEN_CANCELLED = -8 /* gen_merge: stopped by its cancel flag; nothing written */
};

typedef struct gen gen_t;
typedef struct gen_writer gen_writer_t;
typedef struct gen_iter gen_iter_t;

/* What a generation keeps of one key. */
typedef struct gen_entry {
    uint8_t key[KEYHASH_LEN];
    uint64_t offset;     /* the log offset of the key's record */
    int64_t received_ms; /* its receivedAt */
} gen_entry_t;

/* One source's share of a generation (its per-source table). */
typedef struct gen_source {
    uint32_t tag;      /* keyhash_source of its keys */
    uint64_t keys;     /* how many keys of it the generation holds (> 0) */
    int64_t newest_ms; /* the newest receivedAt among them */
} gen_source_t;

/* The sequence range [first, end) a generation covers; first < end, or both 0 for none. */
typedef struct gen_id {
    uint64_t first, end;
} gen_id_t;

typedef struct gen_info {
    gen_id_t id;
    uint64_t keys;
    int64_t min_received_ms, max_received_ms; /* 0, 0 when empty */
    uint64_t min_offset, max_offset;          /* 0, 0 when empty */
    uint64_t file_bytes;
    uint64_t memory_bytes; /* filter + fences held in memory */
} gen_info_t;

/*
 * Starts generation `id` (first < end) in the existing directory `dir`, for at most
 * `max_keys` keys (the filter is sized for that many: give the exact count
 * or an upper bound) with `bits_per_key` filter bits each (0: GEN_BLOOM_BITS;
 * at most GEN_BLOOM_MAX_BITS). *out is freed by gen_writer_finish or
 * gen_writer_abort. Returns GEN_OK, or GEN_INVALID (bits_per_key too large,
 * first >= end), GEN_NOMEM, GEN_EIO (creating the file); *out is then NULL.
 */
int gen_writer_open(const char *dir, gen_id_t id, uint64_t max_keys, unsigned bits_per_key,
                    gen_writer_t **out);

/*
 * Appends one key. Keys must come in strictly ascending order (memcmp);
 * GEN_INVALID otherwise, and for one key past max_keys or a value past
 * GEN_MAX_VALUE (negative receivedAt included); GEN_EIO when a full page's
 * write failed; GEN_NOMEM. After an error the writer can only be aborted.
 */
int gen_writer_add(gen_writer_t *w, const gen_entry_t *e);

/*
 * Writes filter, fences and footer, fsyncs, renames the file into place and
 * fsyncs the directory. When `out` is not NULL the generation is opened into
 * *out (freed with gen_close). Frees the writer whatever it returns; on an
 * error nothing of it is left on disk. GEN_OK, or GEN_EIO (a write, fsync or
 * rename), GEN_NOMEM, GEN_INVALID (the writer failed before), or gen_open's
 * errors for *out.
 */
int gen_writer_finish(gen_writer_t *w, gen_t **out);

/* Removes the unfinished file and frees the writer. NULL is a no-op. */
void gen_writer_abort(gen_writer_t *w);

/*
 * Opens generation `id` in `dir`: reads the footer, the filter and the fences into memory
 * and checks their checksums (not the records': gen_verify does). *out freed
 * with gen_close(). Returns GEN_OK, or GEN_NOTFOUND (no such file), GEN_CORRUPT
 * (size, footer or checksum), GEN_VERSION, GEN_EIO, GEN_NOMEM; *out is then NULL.
 */
int gen_open(const char *dir, gen_id_t id, gen_t **out);
void gen_close(gen_t *g);

void gen_get_info(const gen_t *g, gen_info_t *out);

/* The per-source table, by tag ascending (valid while g is open); returns its length. */
size_t gen_sources(const gen_t *g, const gen_source_t **out);

/* The filter alone: false means the key is certainly not in the generation. */
bool gen_may_contain(const gen_t *g, const uint8_t key[KEYHASH_LEN]);

/* Hints the CPU to load the key's filter block now, for a lookup soon after. */
void gen_prefetch(const gen_t *g, const uint8_t key[KEYHASH_LEN]);

/*
 * Looks `key` up: the filter, then the one page the fences point at (one
 * pread). *found, and *e (may be NULL) when found. GEN_OK, or GEN_EIO,
 * GEN_CORRUPT (the page is shorter than the footer says).
 */
int gen_find(const gen_t *g, const uint8_t key[KEYHASH_LEN], bool *found, gen_entry_t *e);

/*
 * Reads the whole file and checks the records' checksum and key order, and
 * that the filter answers "may contain" for every key. For `ingestd check`.
 * GEN_OK, or GEN_CORRUPT, GEN_EIO, GEN_NOMEM.
 */
int gen_verify(const gen_t *g);

/* Every key in key order, read sequentially. *out freed with gen_iter_close(). GEN_OK or GEN_NOMEM.
 */
int gen_iter_open(const gen_t *g, gen_iter_t **out);
/* GEN_OK and *e, or 1 at the end, or GEN_EIO / GEN_CORRUPT. */
int gen_iter_next(gen_iter_t *it, gen_entry_t *e);
void gen_iter_close(gen_iter_t *it);

/*
 * Merges generations ins[0..n) into a new generation `id` in `dir`, in one
 * sequential pass, with `bits_per_key` as in gen_writer_open. A key in more than one keeps its
 * newest entry (the later receivedAt; then the higher offset). With `filter` (may be NULL: every
 * key) only the keys it keeps are written (how genset leaves out the keys a source's budget cut,
 * docs/window.md). The inputs are left as they are: remove them once the new one is in use.
 * `cancel` (may be NULL) is read now and then: once true, the merge stops with GEN_CANCELLED
 * and leaves nothing on disk (a long merge must not hold up a shutdown).
 * Other errors: as gen_writer_open/add/finish, and the inputs' reads (GEN_EIO,
 * GEN_CORRUPT); *out is then NULL and nothing is left on disk.
 *
 * *out (required) is *staged*: whole, fsynced and open, but under a temporary
 * name that no open of the directory takes (genset_open removes it), so a merge
 * that turns out to be stale harms nothing. gen_publish gives it its name (over
 * an input's, for a merge of one); gen_close of a generation still staged removes
 * its file. So the caller decides, under its own lock, whether the output goes in.
 */
typedef struct gen_merge_filter {
    /* Whether the merge keeps `e`, the newest entry of its key, which came from ins[input]. */
    bool (*keep)(void *arg, size_t input, const gen_entry_t *e);
    void *arg;
    uint64_t max_keys; /* at least the keys kept (sizes the new filter) */
} gen_merge_filter_t;

int gen_merge(const char *dir, gen_id_t id, gen_t *const *ins, size_t n, unsigned bits_per_key,
              const gen_merge_filter_t *filter, const atomic_bool *cancel, gen_t **out);

/*
 * Renames a staged generation (gen_merge) to its own name, replacing a file of
 * the same range, and fsyncs the directory. GEN_OK (also for one already
 * published); GEN_EIO when the rename failed (still staged) or when the
 * directory's fsync did (published, but the name may not survive a power
 * loss: the file it replaced, or the inputs it covers, then come back, which
 * holds every key as well). Not concurrently with gen_close of the same g.
 */
int gen_publish(gen_t *g);
/* Whether g is staged: written by gen_merge, not yet published. */
bool gen_is_staged(const gen_t *g);
/*
 * Writes a copy of the generation's file into the existing directory `dir`
 * (under its own name, durably, as gen_writer_finish does), read from the
 * open generation: it works after the original was removed. For backups.
 * GEN_OK, or GEN_EIO (errno set), GEN_NOMEM, GEN_CORRUPT (shorter than it was).
 */
int gen_copy(const gen_t *g, const char *dir);

/* Removes generation `id`'s file and fsyncs the directory; a missing file is success.
 * GEN_OK, or GEN_EIO (errno set), GEN_NOMEM. */
int gen_remove(const char *dir, gen_id_t id);

#define GEN_NAME_MAX 48 /* bytes of a file name, NUL included */

/* File name of generation `id`; buf of at least GEN_NAME_MAX bytes. */
void gen_file_name(gen_id_t id, char *buf, size_t len);

/*
 * qsort order of gen_id_t: by first sequence, the wider range first, so that a
 * range another covers comes right after it (how a set tells merge leftovers).
 */
int gen_id_cmp(const void *a, const void *b);

/* Parses such a file name; 0 and *id, or -1 when `name` is not one (first >= end included). */
int gen_parse_name(const char *name, gen_id_t *id);

const char *gen_strerror(int status);

#endif
