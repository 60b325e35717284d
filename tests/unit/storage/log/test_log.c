/* test_log.c: the segmented log: framing, offsets, rotation, torn-tail recovery, rollback, reader.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/log/log.h"
#include "testutil.h"

/* fx->base: the mkdtemp dir, removed in teardown; fx->dir: base/log, the log directory. */
typedef tu_fixture_t fx_t;

static int setup(void **state)
{
    return tu_fixture_setup(state, "log", "log");
}

static int teardown(void **state)
{
    return tu_fixture_teardown(state);
}

static void seg_path(const fx_t *fx, uint64_t base, char *out, size_t len)
{
    snprintf(out, len, "%s/%020llu.seg", fx->dir, (unsigned long long)base);
}

static uint64_t file_size(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (uint64_t)st.st_size;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Sum of the sizes of every *.seg file, and their number. */
static uint64_t dir_bytes(const fx_t *fx, uint64_t *nseg)
{
    DIR *d = opendir(fx->dir);
    struct dirent *e;
    uint64_t total = 0, n = 0;
    char path[512];
    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l < 4 || strcmp(e->d_name + l - 4, ".seg") != 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", fx->dir, e->d_name);
        total += file_size(path);
        n++;
    }
    closedir(d);
    if (nseg)
        *nseg = n;
    return total;
}

/* Deterministic payload of record i: "event-<i>" padded with a byte pattern to `len`. */
static void payload(uint64_t i, char *buf, uint32_t len)
{
    char head[32];
    int n = snprintf(head, sizeof(head), "event-%llu;", (unsigned long long)i);
    for (uint32_t j = 0; j < len; j++)
        buf[j] = (char)('A' + (i + j) % 26);
    memcpy(buf, head, (size_t)n < len ? (size_t)n : len);
}

static void fill_rec(log_record_t *r, uint64_t i, char *buf, uint32_t len)
{
    memset(r, 0, sizeof(*r));
    payload(i, buf, len);
    r->data = buf;
    r->len = len;
    r->received_ms = 1700000000000 + (int64_t)i;
    for (int k = 0; k < 16; k++)
        r->key[k] = (uint8_t)(i * 31 + (uint64_t)k);
}

/* Appends records first..first+n-1 of `len` payload bytes, one append call; checks offsets. */
static void append_n(log_t *log, uint64_t first, size_t n, uint32_t len)
{
    log_record_t *recs = calloc(n, sizeof(*recs));
    char *bufs = malloc(n * (len ? len : 1));
    assert_non_null(recs);
    assert_non_null(bufs);
    for (size_t i = 0; i < n; i++)
        fill_rec(&recs[i], first + i, bufs + i * len, len);
    assert_int_equal(log_append(log, recs, n), LOG_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(recs[i].offset, first + i);
    free(recs);
    free(bufs);
}

/* Appends and syncs one record per call, so the log may roll between them. */
static void append_synced(log_t *log, uint64_t first, size_t n, uint32_t len)
{
    for (size_t i = 0; i < n; i++) {
        append_n(log, first + i, 1, len);
        assert_int_equal(log_sync(log), LOG_OK);
    }
}

/* Reads records from..to-1 with the given payload size and checks every field. */
static void expect_records(log_reader_t *r, uint64_t from, uint64_t to, uint32_t len)
{
    char *want = malloc(len ? len : 1);
    assert_non_null(want);
    for (uint64_t i = from; i < to; i++) {
        log_record_t rec, ref;
        memset(&rec, 0, sizeof(rec));
        assert_int_equal(log_reader_position(r), i);
        assert_int_equal(log_reader_next(r, UINT64_MAX, &rec), LOG_OK);
        fill_rec(&ref, i, want, len);
        assert_int_equal(rec.offset, i);
        assert_int_equal(rec.len, len);
        assert_int_equal(rec.received_ms, ref.received_ms);
        assert_memory_equal(rec.key, ref.key, 16);
        if (len > 0)
            assert_memory_equal(rec.data, want, len);
    }
    free(want);
}

/* expect_records(), after which the reader is at the end. */
static void expect_records_end(log_reader_t *r, uint64_t from, uint64_t to, uint32_t len)
{
    log_record_t rec;
    expect_records(r, from, to, len);
    assert_int_equal(log_reader_next(r, UINT64_MAX, &rec), LOG_END);
}

static void read_all(const fx_t *fx, uint64_t from, uint64_t to, uint32_t len)
{
    log_reader_t *r = NULL;
    assert_int_equal(log_reader_open(fx->dir, from, &r), LOG_OK);
    expect_records_end(r, from, to, len);
    log_reader_close(r);
}

static log_t *open_log(const fx_t *fx, uint64_t segment_bytes)
{
    log_options_t o = {.segment_bytes = segment_bytes};
    log_t *log = NULL;
    assert_int_equal(log_open(fx->dir, &o, &log), LOG_OK);
    assert_non_null(log);
    return log;
}

/* open_log(), then its info into *li. */
static log_t *open_log_info(const fx_t *fx, uint64_t segment_bytes, log_info_t *li)
{
    log_t *log = open_log(fx, segment_bytes);
    log_get_info(log, li);
    return log;
}

/* Reopens the log, whose recovery must cut `truncated` tail bytes and leave next_offset `next`. */
static log_t *reopen_recovered(const fx_t *fx, uint64_t segment_bytes, uint64_t truncated,
                               uint64_t next)
{
    log_info_t li;
    log_t *log = open_log_info(fx, segment_bytes, &li);
    assert_int_equal(li.truncated_bytes, truncated);
    assert_int_equal(li.next_offset, next);
    return log;
}

/* A log of records 0..n-1 (len payload bytes) in one synced, closed segment; its path to seg. */
static void write_closed_log(const fx_t *fx, size_t n, uint32_t len, char *seg, size_t seg_len)
{
    log_t *log = open_log(fx, 1 << 20);
    append_n(log, 0, n, len);
    assert_int_equal(log_sync(log), LOG_OK);
    log_close(log);
    seg_path(fx, 0, seg, seg_len);
}

#define REC_BYTES(len) ((uint64_t)LOG_RECORD_HEADER + (len))

static void test_append_sync_reopen(void **state)
{
    fx_t *fx = *state;
    log_info_t li;
    char path[512];
    log_t *log = open_log(fx, 1 << 20);

    log_get_info(log, &li);
    assert_int_equal(li.next_offset, 0);
    assert_int_equal(li.first_offset, 0);
    assert_int_equal(li.segments, 1);
    assert_int_equal(li.bytes, LOG_SEGMENT_HEADER);

    append_n(log, 0, 3, 100);
    append_n(log, 3, 2, 100);
    assert_int_equal(log_sync(log), LOG_OK);
    log_get_info(log, &li);
    assert_int_equal(li.next_offset, 5);
    assert_int_equal(li.bytes, LOG_SEGMENT_HEADER + 5 * REC_BYTES(100));
    log_close(log);

    seg_path(fx, 0, path, sizeof(path));
    assert_int_equal(file_size(path), LOG_SEGMENT_HEADER + 5 * REC_BYTES(100));

    log = open_log_info(fx, 1 << 20, &li);
    assert_int_equal(li.next_offset, 5);
    assert_int_equal(li.segments, 1);
    assert_int_equal(li.truncated_bytes, 0);
    assert_int_equal(li.bytes, LOG_SEGMENT_HEADER + 5 * REC_BYTES(100));
    /* Appends continue the numbering. */
    append_n(log, 5, 1, 100);
    assert_int_equal(log_sync(log), LOG_OK);
    log_close(log);
    read_all(fx, 0, 6, 100);
}

static void test_empty_and_large_payloads(void **state)
{
    fx_t *fx = *state;
    log_t *log = open_log(fx, 1 << 20);
    log_record_t big = {.len = LOG_MAX_PAYLOAD + 1, .data = ""};
    log_info_t li;

    append_n(log, 0, 2, 0);
    /* Too large: refused, nothing appended. */
    assert_int_equal(log_append(log, &big, 1), LOG_INVALID);
    log_get_info(log, &li);
    assert_int_equal(li.next_offset, 2);
    assert_int_equal(log_sync(log), LOG_OK);
    assert_int_equal(log_append(log, NULL, 0), LOG_OK);
    log_close(log);
    read_all(fx, 0, 2, 0);
}

static void test_reader_from_middle(void **state)
{
    fx_t *fx = *state;
    log_t *log = open_log(fx, 1 << 20);
    append_n(log, 0, 10, 50);
    assert_int_equal(log_sync(log), LOG_OK);
    read_all(fx, 4, 10, 50);
    read_all(fx, 9, 10, 50);
    /* At the very end: valid, nothing to read. */
    read_all(fx, 10, 10, 50);
    log_close(log);
}

static void test_reader_offset_beyond_end(void **state)
{
    fx_t *fx = *state;
    log_reader_t *r = NULL;
    log_t *log = open_log(fx, 1 << 20);
    append_n(log, 0, 3, 20);
    assert_int_equal(log_sync(log), LOG_OK);
    assert_int_equal(log_reader_open(fx->dir, 4, &r), LOG_INVALID);
    assert_null(r);
    assert_int_equal(log_reader_open(fx->dir, 1000, &r), LOG_INVALID);
    assert_null(r);
    log_close(log);
}

static void test_rotation(void **state)
{
    fx_t *fx = *state;
    log_info_t li;
    uint64_t nseg = 0;
    char path[512];
    const uint32_t len = 1000;
    log_t *log = open_log(fx, 4096); /* the smallest segment size log_open accepts */

    append_synced(log, 0, 20, len);
    log_get_info(log, &li);
    assert_int_equal(li.next_offset, 20);
    assert_true(li.segments >= 4);
    assert_int_equal(li.bytes, dir_bytes(fx, &nseg));
    assert_int_equal(li.segments, nseg);
    assert_int_equal(li.bytes, li.segments * LOG_SEGMENT_HEADER + 20 * REC_BYTES(len));
    /* A 1040-byte record rolls the segment once it reaches 4096: four records per segment. */
    seg_path(fx, 0, path, sizeof(path));
    assert_int_equal(file_size(path), LOG_SEGMENT_HEADER + 4 * REC_BYTES(len));
    seg_path(fx, 4, path, sizeof(path));
    assert_true(exists(path));
    log_close(log);

    read_all(fx, 0, 20, len);
    /* From the first record of a later segment, and from inside one. */
    read_all(fx, 8, 20, len);
    read_all(fx, 13, 20, len);

    log = open_log_info(fx, 4096, &li);
    assert_int_equal(li.next_offset, 20);
    assert_int_equal(li.segments, nseg);
    assert_int_equal(li.truncated_bytes, 0);
    log_close(log);
}

/* Writes `n` bytes of `byte` at the end of `path`. */
static void append_garbage(const char *path, size_t n, int byte)
{
    char buf[256];
    assert_true(n <= sizeof(buf));
    memset(buf, byte, n);
    assert_int_equal(tu_append_file(path, buf, n), 0);
}

static void test_torn_tail_garbage(void **state)
{
    fx_t *fx = *state;
    char path[512];
    log_t *log;
    write_closed_log(fx, 3, 64, path, sizeof(path));

    uint64_t good = file_size(path);
    append_garbage(path, 7, 0xab);
    log = reopen_recovered(fx, 1 << 20, 7, 3);
    assert_int_equal(file_size(path), good);
    /* A full header's worth of garbage too (a bad length or offset, not a short read). */
    append_n(log, 3, 1, 64);
    assert_int_equal(log_sync(log), LOG_OK);
    log_close(log);
    good = file_size(path);
    append_garbage(path, 100, 0x5a);
    log = reopen_recovered(fx, 1 << 20, 100, 4);
    assert_int_equal(file_size(path), good);
    log_close(log);
    read_all(fx, 0, 4, 64);
}

static void test_torn_tail_truncated_record(void **state)
{
    fx_t *fx = *state;
    char path[512];
    log_t *log;
    write_closed_log(fx, 3, 64, path, sizeof(path));

    uint64_t size = file_size(path);
    /* Cut the last record inside its payload. */
    assert_int_equal(truncate(path, (off_t)(size - 5)), 0);
    log = reopen_recovered(fx, 1 << 20, REC_BYTES(64) - 5, 2);
    assert_int_equal(file_size(path), size - REC_BYTES(64));
    /* The next append takes the lost record's offset. */
    append_n(log, 2, 1, 64);
    assert_int_equal(log_sync(log), LOG_OK);
    log_close(log);
    read_all(fx, 0, 3, 64);

    /* Cut inside the header of the last record. */
    size = file_size(path);
    assert_int_equal(truncate(path, (off_t)(size - REC_BYTES(64) + 10)), 0);
    log = reopen_recovered(fx, 1 << 20, 10, 2);
    log_close(log);
    read_all(fx, 0, 2, 64);
}

static void test_torn_tail_flipped_byte(void **state)
{
    fx_t *fx = *state;
    char path[512];
    log_t *log;
    write_closed_log(fx, 3, 64, path, sizeof(path));

    uint64_t size = file_size(path);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    char c;
    off_t at = (off_t)(size - 10); /* inside the payload of the last record */
    assert_int_equal(pread(fd, &c, 1, at), 1);
    c ^= 0x20;
    assert_int_equal(pwrite(fd, &c, 1, at), 1);
    close(fd);

    /* Before recovery a follower treats the bad record as the (not yet written) end. */
    log_reader_t *r = NULL;
    log_record_t rec;
    assert_int_equal(log_reader_open(fx->dir, 0, &r), LOG_OK);
    expect_records_end(r, 0, 2, 64);
    /* Below a durable limit the same record is corruption. */
    log_reader_close(r);
    assert_int_equal(log_reader_open(fx->dir, 2, &r), LOG_OK);
    assert_int_equal(log_reader_next(r, 3, &rec), LOG_CORRUPT);
    log_reader_close(r);

    log = reopen_recovered(fx, 1 << 20, REC_BYTES(64), 2);
    assert_int_equal(file_size(path), size - REC_BYTES(64));
    log_close(log);
    read_all(fx, 0, 2, 64);
}

static void test_torn_tail_last_segment_only(void **state)
{
    fx_t *fx = *state;
    log_info_t li;
    char path[512];
    uint64_t nseg;
    log_t *log = open_log(fx, 4096);
    append_synced(log, 0, 10, 1000);
    log_get_info(log, &li);
    uint64_t last_base = (li.segments - 1) * 4;
    log_close(log);

    seg_path(fx, last_base, path, sizeof(path));
    assert_true(exists(path));
    append_garbage(path, 33, 0xff);
    log = reopen_recovered(fx, 4096, 33, 10);
    log_get_info(log, &li);
    assert_int_equal(li.bytes, dir_bytes(fx, &nseg));
    log_close(log);
    read_all(fx, 0, 10, 1000);
}

static void test_corrupt_segment_header(void **state)
{
    fx_t *fx = *state;
    char path[512];
    log_t *log = NULL;
    log_reader_t *r = NULL;
    write_closed_log(fx, 2, 10, path, sizeof(path));

    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "XNGDLOG1", 8, 0), 8);
    close(fd);

    log_options_t o = {.segment_bytes = 1 << 20};
    assert_int_equal(log_open(fx->dir, &o, &log), LOG_CORRUPT);
    assert_null(log);
    /* Not "repaired" by the failed open: the records are still on disk. */
    assert_int_equal(file_size(path), LOG_SEGMENT_HEADER + 2 * REC_BYTES(10));
    assert_int_equal(log_reader_open(fx->dir, 0, &r), LOG_CORRUPT);
    assert_null(r);
}

static void test_rollback(void **state)
{
    fx_t *fx = *state;
    log_info_t li;
    char path[512];
    log_t *log = open_log(fx, 1 << 20);
    append_n(log, 0, 2, 80);
    assert_int_equal(log_sync(log), LOG_OK);
    append_n(log, 2, 3, 80);
    append_n(log, 5, 1, 80);
    assert_int_equal(log_rollback(log), LOG_OK);
    log_get_info(log, &li);
    assert_int_equal(li.next_offset, 2);
    assert_int_equal(li.bytes, LOG_SEGMENT_HEADER + 2 * REC_BYTES(80));
    seg_path(fx, 0, path, sizeof(path));
    assert_int_equal(file_size(path), LOG_SEGMENT_HEADER + 2 * REC_BYTES(80));
    read_all(fx, 0, 2, 80);

    /* A rollback with nothing pending is a no-op; appends reuse the offsets. */
    assert_int_equal(log_rollback(log), LOG_OK);
    append_n(log, 2, 1, 80);
    assert_int_equal(log_sync(log), LOG_OK);
    log_close(log);

    log_close(reopen_recovered(fx, 1 << 20, 0, 3));
    read_all(fx, 0, 3, 80);
}

static void test_rollback_across_roll(void **state)
{
    fx_t *fx = *state;
    log_info_t li, before;
    char path[512];
    uint64_t nseg;
    log_t *log = open_log(fx, 4096);
    /* Four 1040-byte records fill segment 0 past 4096 bytes: the next append rolls. */
    append_synced(log, 0, 4, 1000);
    log_get_info(log, &before);
    assert_int_equal(before.segments, 1);

    append_n(log, 4, 2, 1000);
    log_get_info(log, &li);
    assert_int_equal(li.segments, 2);
    assert_int_equal(li.next_offset, 6);
    seg_path(fx, 4, path, sizeof(path));
    assert_true(exists(path));

    assert_int_equal(log_rollback(log), LOG_OK);
    log_get_info(log, &li);
    assert_int_equal(li.segments, 1);
    assert_int_equal(li.next_offset, 4);
    assert_int_equal(li.bytes, before.bytes);
    assert_false(exists(path));
    assert_int_equal(dir_bytes(fx, &nseg), before.bytes);
    assert_int_equal(nseg, 1);
    read_all(fx, 0, 4, 1000);

    /* The writer still works: the next append rolls again, at the same offset. */
    append_n(log, 4, 1, 1000);
    assert_int_equal(log_sync(log), LOG_OK);
    assert_true(exists(path));
    log_close(log);

    log = open_log_info(fx, 4096, &li);
    assert_int_equal(li.next_offset, 5);
    assert_int_equal(li.segments, 2);
    assert_int_equal(li.truncated_bytes, 0);
    assert_int_equal(li.bytes, dir_bytes(fx, &nseg));
    log_close(log);
    read_all(fx, 0, 5, 1000);
}

static void test_reader_limit(void **state)
{
    fx_t *fx = *state;
    log_reader_t *r = NULL;
    log_record_t rec;
    log_t *log = open_log(fx, 1 << 20);
    append_n(log, 0, 6, 30);
    assert_int_equal(log_sync(log), LOG_OK);

    assert_int_equal(log_reader_open(fx->dir, 1, &r), LOG_OK);
    for (uint64_t i = 1; i < 3; i++) {
        assert_int_equal(log_reader_next(r, 3, &rec), LOG_OK);
        assert_int_equal(rec.offset, i);
    }
    assert_int_equal(log_reader_next(r, 3, &rec), LOG_END);
    assert_int_equal(log_reader_next(r, 3, &rec), LOG_END);
    assert_int_equal(log_reader_position(r), 3);
    /* A limit of 0 or below the position stops at once too. */
    assert_int_equal(log_reader_next(r, 0, &rec), LOG_END);
    /* Raising the limit continues where it stopped. */
    expect_records_end(r, 3, 6, 30);
    log_reader_close(r);
    log_close(log);
}

static void test_reader_follows(void **state)
{
    fx_t *fx = *state;
    log_reader_t *r = NULL;
    log_t *log = open_log(fx, 4096);
    append_synced(log, 0, 2, 1000);

    assert_int_equal(log_reader_open(fx->dir, 0, &r), LOG_OK);
    expect_records_end(r, 0, 2, 1000);

    /* More in the same segment. */
    append_synced(log, 2, 2, 1000);
    expect_records_end(r, 2, 4, 1000);

    /* The writer rolls to new segments while the reader waits at the end. */
    append_synced(log, 4, 9, 1000);
    log_info_t li;
    log_get_info(log, &li);
    assert_true(li.segments >= 3);
    expect_records_end(r, 4, 13, 1000);
    log_reader_close(r);
    log_close(log);
}

static void test_reader_empty_dir(void **state)
{
    fx_t *fx = *state;
    log_reader_t *r = NULL, *r1 = NULL;
    log_record_t rec;
    char missing[320];

    /* A directory that does not exist cannot be followed. */
    snprintf(missing, sizeof(missing), "%s/nope", fx->base);
    assert_int_not_equal(log_reader_open(missing, 0, &r), LOG_OK);
    assert_null(r);

    /* An existing empty directory: positioned at 0, nothing yet. */
    assert_int_equal(mkdir(fx->dir, 0755), 0);
    assert_int_equal(log_reader_open(fx->dir, 0, &r), LOG_OK);
    assert_non_null(r);
    assert_int_equal(log_reader_position(r), 0);
    assert_int_equal(log_reader_next(r, UINT64_MAX, &rec), LOG_END);
    assert_int_equal(log_reader_open(fx->dir, 1, &r1), LOG_INVALID);

    /* A new log: just the segment header, still nothing to read. */
    log_t *log = open_log(fx, 1 << 20);
    assert_int_equal(log_reader_next(r, UINT64_MAX, &rec), LOG_END);
    assert_int_equal(log_reader_open(fx->dir, 0, &r1), LOG_OK);
    assert_int_equal(log_reader_next(r1, UINT64_MAX, &rec), LOG_END);

    /* The first records show up in both readers. */
    append_n(log, 0, 2, 16);
    assert_int_equal(log_sync(log), LOG_OK);
    expect_records(r, 0, 2, 16);
    expect_records(r1, 0, 2, 16);
    assert_int_equal(log_reader_next(r, UINT64_MAX, &rec), LOG_END);
    log_reader_close(r);
    log_reader_close(r1);
    log_close(log);
}

static void test_strerror(void **state)
{
    (void)state;
    const int codes[] = {LOG_OK,      LOG_END,   LOG_EIO,     LOG_ENOSPC,
                         LOG_CORRUPT, LOG_NOMEM, LOG_INVALID, LOG_FAILED};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        const char *s = log_strerror(codes[i]);
        assert_non_null(s);
        assert_true(strlen(s) > 0);
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(s, log_strerror(codes[j]));
    }
    /* NULL is a no-op. */
    log_close(NULL);
    log_reader_close(NULL);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

static void idx_path(const fx_t *fx, uint64_t base, char *out, size_t len)
{
    snprintf(out, len, "%s/%020llu.idx", fx->dir, (unsigned long long)base);
}

/* Reads a few records from offsets spread over a large segment. */
static void expect_seeks(const fx_t *fx, uint64_t n, uint32_t len)
{
    const uint64_t at[] = {0, 1, n / 3, n / 2, n - 2};
    for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
        log_reader_t *r = NULL;
        assert_int_equal(log_reader_open(fx->dir, at[i], &r), LOG_OK);
        expect_records(r, at[i], at[i] + 2, len);
        log_reader_close(r);
    }
}

/*
 * A segment of ~1 MiB gets an index entry per LOG_INDEX_INTERVAL bytes; readers seek with it,
 * and seek correctly without it or with a garbage one (it is never trusted blindly).
 */
static void test_index_seek(void **state)
{
    fx_t *fx = *state;
    const uint64_t n = 2000;
    const uint32_t len = 500;
    char idx[512];
    log_t *log = open_log(fx, 64ull << 20);
    append_n(log, 0, (size_t)n, len);
    assert_int_equal(log_sync(log), LOG_OK);
    log_close(log);

    idx_path(fx, 0, idx, sizeof(idx));
    uint64_t bytes = (uint64_t)n * (LOG_RECORD_HEADER + len);
    assert_int_equal(file_size(idx), 16 * (bytes / LOG_INDEX_INTERVAL));
    expect_seeks(fx, n, len);

    /* Garbage entries: every one points at a non-record or disagrees with its header. */
    uint8_t junk[16 * 8];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (uint8_t)(i * 37 + 11);
    assert_int_equal(tu_write_file(idx, junk, sizeof(junk)), 0);
    expect_seeks(fx, n, len);

    assert_int_equal(unlink(idx), 0);
    expect_seeks(fx, n, len);

    /* Reopening the writer rebuilds the active segment's index from its scan. */
    log = open_log(fx, 64ull << 20);
    log_close(log);
    assert_int_equal(file_size(idx), 16 * (bytes / LOG_INDEX_INTERVAL));
    expect_seeks(fx, n, len);
}

/* A rollback cuts the index back with the records, so no entry points past the end. */
static void test_index_rollback(void **state)
{
    fx_t *fx = *state;
    char idx[512];
    log_t *log = open_log(fx, 64ull << 20);
    append_n(log, 0, 300, 500);
    assert_int_equal(log_sync(log), LOG_OK);
    idx_path(fx, 0, idx, sizeof(idx));
    uint64_t synced = file_size(idx);
    append_n(log, 300, 600, 500);
    assert_true(file_size(idx) > synced);
    assert_int_equal(log_rollback(log), LOG_OK);
    assert_int_equal(file_size(idx), synced);
    append_n(log, 300, 10, 500);
    assert_int_equal(log_sync(log), LOG_OK);
    log_close(log);
    read_all(fx, 250, 310, 500);
}

/* Size-bound retention deletes whole closed segments, oldest first, never the active one. */
static void test_retain_by_size(void **state)
{
    fx_t *fx = *state;
    log_info_t li;
    log_retain_result_t plan, res;
    log_t *log = open_log(fx, 4096);
    append_synced(log, 0, 300, 200); /* ~18 segments of 4 KiB */
    log_get_info(log, &li);
    assert_true(li.segments > 10);
    uint64_t before = li.segments;

    assert_int_equal(log_retain_plan(log, 0, 0, li.bytes / 2, LOG_RETAIN_UNBOUNDED, &plan), LOG_OK);
    assert_true(plan.segments > 0);
    log_get_info(log, &li);
    assert_int_equal(li.segments, before); /* a plan deletes nothing */

    assert_int_equal(log_retain(log, 0, 0, li.bytes / 2, LOG_RETAIN_UNBOUNDED, &res), LOG_OK);
    assert_int_equal(res.segments, plan.segments);
    assert_int_equal(res.first_offset, plan.first_offset);
    log_get_info(log, &li);
    assert_int_equal(li.first_offset, res.first_offset);
    assert_int_equal(li.segments, before - res.segments);
    uint64_t nseg;
    assert_int_equal(dir_bytes(fx, &nseg), li.bytes);
    assert_int_equal(nseg, li.segments);
    assert_true(li.bytes <= (li.bytes + res.bytes) / 2 + 4096);

    /* Readers: before the first retained offset is invalid; from it, everything is there. */
    log_reader_t *r = NULL;
    assert_int_equal(log_reader_open(fx->dir, res.first_offset - 1, &r), LOG_INVALID);
    read_all(fx, res.first_offset, 300, 200);

    /* A one-byte bound keeps only the active segment, which is never deleted. */
    assert_int_equal(log_retain(log, 0, 0, 1, LOG_RETAIN_UNBOUNDED, &res), LOG_OK);
    log_get_info(log, &li);
    assert_int_equal(li.segments, 1);
    append_synced(log, 300, 3, 200);
    log_close(log);
    log = open_log_info(fx, 4096, &li);
    assert_int_equal(li.next_offset, 303);
    log_close(log);
    read_all(fx, li.first_offset, 303, 200);
}

/* Age-bound retention: by the segment files' last write. */
static void test_retain_by_age(void **state)
{
    fx_t *fx = *state;
    log_info_t li;
    log_retain_result_t res;
    log_t *log = open_log(fx, 4096);
    append_synced(log, 0, 60, 200);
    log_get_info(log, &li);
    int64_t now = tu_now_ms();

    assert_int_equal(log_retain(log, now, 3600 * 1000, 0, LOG_RETAIN_UNBOUNDED, &res), LOG_OK);
    assert_int_equal(res.segments, 0); /* nothing is an hour old */
    assert_int_equal(log_retain(log, now + 7200 * 1000, 3600 * 1000, 0, LOG_RETAIN_UNBOUNDED, &res),
                     LOG_OK);
    assert_int_equal(res.segments, li.segments - 1); /* all but the active one */
    log_get_info(log, &li);
    assert_int_equal(li.segments, 1);
    log_close(log);
}

/*
 * keep_from bounds retention: a segment goes only when all its records are below it, however far
 * the log is over its bounds, and what the bounds would delete but keep_from keeps is counted.
 */
static void test_retain_keep_from(void **state)
{
    fx_t *fx = *state;
    log_info_t li;
    log_retain_result_t res;
    uint64_t *bases = NULL;
    log_t *log = open_log(fx, 4096);
    append_synced(log, 0, 300, 200); /* ~18 segments of 4 KiB */
    log_get_info(log, &li);
    assert_int_equal(log_describe(fx->dir, &li, &bases), LOG_OK);
    assert_true(li.segments > 10);
    uint64_t before = li.segments, bytes = li.bytes;
    /* A bound inside the fourth segment: the first three may go, no later one. */
    uint64_t keep_from = bases[3] + 1;

    assert_int_equal(log_retain(log, 0, 0, 1, 0, &res), LOG_OK);
    assert_int_equal(res.segments, 0); /* nothing is below offset 0 */
    assert_int_equal(res.held_segments, before - 1);
    log_get_info(log, &li);
    assert_int_equal(res.held_bytes, li.bytes - li.active_bytes);
    assert_int_equal(li.first_offset, 0);
    assert_int_equal(li.bytes, bytes);

    assert_int_equal(log_retain(log, 0, 0, 1, keep_from, &res), LOG_OK);
    assert_int_equal(res.segments, 3);
    assert_int_equal(res.first_offset, bases[3]);
    assert_int_equal(res.held_segments, before - 1 - 3);
    log_get_info(log, &li);
    assert_int_equal(li.first_offset, bases[3]);
    assert_int_equal(li.segments, before - 3);
    assert_int_equal(res.held_bytes + li.active_bytes, li.bytes); /* all but the active one */
    read_all(fx, bases[3], 300, 200);

    /* Age-bound retention obeys it too. */
    int64_t later = tu_now_ms() + 7200 * 1000;
    assert_int_equal(log_retain(log, later, 3600 * 1000, 0, bases[5], &res), LOG_OK);
    assert_int_equal(res.segments, 2);
    assert_int_equal(res.first_offset, bases[5]);

    /* A bound at a segment's end (its last record plus one) lets that segment go. */
    assert_int_equal(log_retain(log, 0, 0, 1, bases[7], &res), LOG_OK);
    assert_int_equal(res.first_offset, bases[7]);
    free(bases);
    log_close(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_append_sync_reopen),
        T(test_empty_and_large_payloads),
        T(test_reader_from_middle),
        T(test_reader_offset_beyond_end),
        T(test_rotation),
        T(test_torn_tail_garbage),
        T(test_torn_tail_truncated_record),
        T(test_torn_tail_flipped_byte),
        T(test_torn_tail_last_segment_only),
        T(test_corrupt_segment_header),
        T(test_rollback),
        T(test_rollback_across_roll),
        T(test_reader_limit),
        T(test_reader_follows),
        T(test_reader_empty_dir),
        T(test_strerror),
        T(test_index_seek),
        T(test_index_rollback),
        T(test_retain_by_size),
        T(test_retain_by_age),
        T(test_retain_keep_from),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
