/* fuzz_log: log segment decoding, recovery and reading (storage/log) under libFuzzer. */
#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "fuzz.h"
#include "storage/log/log.h"

/*
 * The input becomes a log directory, then goes through the public API as the server and
 * `ingestd log cat` would: describe, read everything, open a reader in the middle, recover
 * with log_open, append a record and read it back.
 *
 * Input layout (every part optional in the sense that a short input just ends early):
 *   byte 0      flags: bit 0 an index file follows; bit 1 open with discard; bits 2-4
 *               durable_offset (and discard_from) 0..7; bit 5 a second segment follows
 *   if bit 0:   u16 LE length L, then L bytes: DIR/00000000000000000000.idx
 *   if bit 5:   u8 base B of the second segment, u16 LE length S of the first segment
 *   the rest:   the first segment DIR/00000000000000000000.seg (S bytes when bit 5, and the
 *               bytes after it the second segment, named by B); all of it otherwise
 * So a real segment file with one 0x00 byte in front is a valid input (corpus/log/).
 *
 * Properties: no crash, leak or sanitizer report; records come back with consecutive
 * offsets and NUL-terminated data; a reader opened at offset k returns the same records as
 * the full read from k on; log_open either refuses (LOG_CORRUPT) or recovers exactly the
 * records a reader sees in a single segment; after recovery an appended record reads back.
 * Every file is deleted after each input; the directory when the process exits.
 */

#define MAX_RECORDS 4096

static char dir[4096];

static void clear_dir(void)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d)
        return;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
}

static void remove_dir(void)
{
    clear_dir();
    rmdir(dir);
}

static void make_dir(void)
{
    const char *tmp = getenv("TMPDIR");
    if (dir[0])
        return;
    snprintf(dir, sizeof(dir), "%s/ingestd-fuzz-log-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    FUZZ_CHECK(mkdtemp(dir) != NULL);
    atexit(remove_dir);
}

static void write_file(const char *name, const uint8_t *p, size_t n)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FUZZ_CHECK(fd >= 0);
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        FUZZ_CHECK(w > 0);
        p += w;
        n -= (size_t)w;
    }
    close(fd);
}

static uint32_t crc_of(const char *p, uint32_t n)
{
    return (uint32_t)crc32(0L, (const Bytef *)p, n);
}

/* Reads records from `from` on; fills lens/crcs when given; returns how many. */
static size_t read_all(uint64_t from, uint32_t *lens, uint32_t *crcs, int *end_rc)
{
    log_reader_t *r = NULL;
    log_record_t rec;
    size_t n = 0;
    int rc = log_reader_open(dir, from, &r);

    *end_rc = rc;
    if (rc != LOG_OK)
        return 0;
    while (n < MAX_RECORDS) {
        rc = log_reader_next(r, UINT64_MAX, &rec);
        if (rc != LOG_OK)
            break;
        FUZZ_CHECK(rec.offset == from + n);
        FUZZ_CHECK(rec.len <= LOG_MAX_PAYLOAD);
        FUZZ_CHECK(rec.data != NULL && rec.data[rec.len] == '\0');
        FUZZ_CHECK(log_reader_position(r) == rec.offset + 1);
        if (lens) {
            lens[n] = rec.len;
            crcs[n] = crc_of(rec.data, rec.len);
        }
        n++;
    }
    FUZZ_CHECK(n == MAX_RECORDS || rc == LOG_END || rc == LOG_CORRUPT);
    *end_rc = rc;
    log_reader_close(r);
    return n;
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint32_t lens[MAX_RECORDS], crcs[MAX_RECORDS];
    const uint8_t *p = data, *end = data + size;
    uint8_t flags;
    int rc;

    if (size < 1)
        return 0;
    make_dir();
    clear_dir();
    flags = *p++;

    if (flags & 1) {
        if (end - p < 2)
            return 0;
        size_t l = get16(p);
        p += 2;
        if ((size_t)(end - p) < l)
            return 0;
        write_file("00000000000000000000.idx", p, l);
        p += l;
    }
    uint64_t base2 = 0;
    size_t seg0 = (size_t)(end - p);
    int two = (flags & 32) != 0;
    if (two) {
        if (end - p < 3)
            return 0;
        base2 = p[0];
        seg0 = get16(p + 1);
        p += 3;
        if ((size_t)(end - p) < seg0 || base2 == 0)
            goto out;
    }
    write_file("00000000000000000000.seg", p, seg0);
    if (two) {
        char name[64];
        snprintf(name, sizeof(name), "%020llu.seg", (unsigned long long)base2);
        write_file(name, p + seg0, (size_t)(end - p) - seg0);
    }

    log_info_t info;
    uint64_t *bases = NULL;
    FUZZ_CHECK(log_describe(dir, &info, &bases) == LOG_OK);
    FUZZ_CHECK(info.segments == (two ? 2u : 1u) && bases && bases[0] == 0);
    free(bases);

    /* Everything a consumer sees, then the same from the middle on. */
    int end_rc;
    size_t count = read_all(0, lens, crcs, &end_rc);
    if (count > 1) {
        static uint32_t l2[MAX_RECORDS], c2[MAX_RECORDS];
        uint64_t mid = count / 2;
        int end2;
        size_t rest = read_all(mid, l2, c2, &end2);
        /* Only for a sound directory layout: an index entry is trusted once the record header
         * it points at carries the right offset (a header cannot hide inside a JSON payload,
         * which never holds NUL bytes, but can inside fuzz bytes), and overlapping segments
         * make a reader from the middle start in the later one. */
        if (!two && !(flags & 1) && count < MAX_RECORDS) {
            FUZZ_CHECK(rest == count - mid && end2 == end_rc);
            for (size_t i = 0; i < rest; i++)
                FUZZ_CHECK(l2[i] == lens[mid + i] && c2[i] == crcs[mid + i]);
        }
    }

    /* Recovery as at server start. */
    uint64_t durable = (flags >> 2) & 7;
    log_options_t opts = {
        .segment_bytes = 1u << 20,
        .durable_offset = durable,
        .discard = (flags & 2) != 0,
        .discard_from = durable,
    };
    log_t *log = NULL;
    rc = log_open(dir, &opts, &log);
    FUZZ_CHECK(rc == LOG_OK || rc == LOG_CORRUPT);
    if (rc != LOG_OK)
        goto out;
    log_get_info(log, &info);
    if (!two && count < MAX_RECORDS) /* the writer keeps what a reader sees, up to discard */
        FUZZ_CHECK(info.next_offset == (opts.discard && durable < count ? durable : count));
    FUZZ_CHECK(info.next_offset >= info.first_offset);

    /* The recovered log takes an append, durably, and a reader finds it where it belongs. */
    static const char payload[] = "{\"fuzz\":true}";
    log_record_t rec = {.received_ms = 1, .data = payload, .len = sizeof(payload) - 1};
    uint64_t at = info.next_offset;
    FUZZ_CHECK(log_append(log, &rec, 1) == LOG_OK);
    FUZZ_CHECK(rec.offset == at);
    FUZZ_CHECK(log_sync(log) == LOG_OK);
    log_close(log);

    log_reader_t *r = NULL;
    log_record_t got;
    FUZZ_CHECK(log_reader_open(dir, at, &r) == LOG_OK);
    FUZZ_CHECK(log_reader_next(r, UINT64_MAX, &got) == LOG_OK);
    FUZZ_CHECK(got.offset == at && got.len == rec.len && memcmp(got.data, payload, rec.len) == 0);
    FUZZ_CHECK(log_reader_next(r, UINT64_MAX, &got) == LOG_END);
    log_reader_close(r);
out:
    clear_dir();
    return 0;
}
