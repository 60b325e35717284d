/* test_gzip: bounded inflate of request bodies (server/gzip.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <zlib.h>

#include "server/gzip.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

enum wrap { WRAP_GZIP = 16, WRAP_ZLIB = 0 };

/* Compresses `len` bytes of `in` (or `len` zero bytes when in is NULL) into a new buffer. */
static unsigned char *compress_buf(const void *in, size_t len, enum wrap wrap, size_t *out_len)
{
    z_stream zs;
    size_t cap = len / 100 + 4096, used = 0;
    unsigned char *out = malloc(cap);
    static unsigned char zeros[64 * 1024];
    size_t fed = 0;

    assert_non_null(out);
    memset(&zs, 0, sizeof zs);
    assert_int_equal(deflateInit2(&zs, 9, Z_DEFLATED, 15 + (int)wrap, 9, Z_DEFAULT_STRATEGY), Z_OK);
    for (;;) {
        if (zs.avail_in == 0 && fed < len) {
            size_t n = len - fed;
            if (in == NULL) {
                if (n > sizeof zeros)
                    n = sizeof zeros;
                zs.next_in = zeros;
            } else {
                if (n > (1u << 30))
                    n = 1u << 30;
                zs.next_in = (unsigned char *)in + fed;
            }
            zs.avail_in = (uInt)n;
            fed += n;
        }
        if (used == cap) {
            cap *= 2;
            out = realloc(out, cap);
            assert_non_null(out);
        }
        zs.next_out = out + used;
        zs.avail_out = (uInt)(cap - used);
        int flush = fed == len && zs.avail_in == 0 ? Z_FINISH : Z_NO_FLUSH;
        int rc = deflate(&zs, flush);
        used = cap - zs.avail_out;
        if (rc == Z_STREAM_END)
            break;
        assert_true(rc == Z_OK || rc == Z_BUF_ERROR);
    }
    deflateEnd(&zs);
    *out_len = used;
    return out;
}

static char *text(size_t len)
{
    char *t = malloc(len + 1);
    assert_non_null(t);
    /* Not too compressible, so the stream has real structure to corrupt. */
    uint32_t x = 12345;
    for (size_t i = 0; i < len; i++) {
        x = x * 1103515245u + 12345u;
        t[i] = (char)('a' + (x >> 16) % 26);
    }
    t[len] = '\0';
    return t;
}

static void round_trip_wrap(enum wrap wrap)
{
    const char *json = "{\"batch\":[{\"type\":\"track\",\"event\":\"x\",\"userId\":\"u\"}]}";
    size_t zlen, olen = 99;
    char *out = NULL;
    unsigned char *z = compress_buf(json, strlen(json), wrap, &zlen);

    assert_int_equal(gzip_inflate((const char *)z, zlen, 500 * 1024, &out, &olen), GZIP_OK);
    assert_int_equal(olen, strlen(json));
    assert_memory_equal(out, json, olen);
    assert_int_equal(out[olen], '\0'); /* NUL-terminated for the JSON parser */
    free(out);
    free(z);
}

static void test_round_trip_gzip(void **state)
{
    (void)state;
    round_trip_wrap(WRAP_GZIP);
}

static void test_round_trip_zlib(void **state)
{
    (void)state;
    round_trip_wrap(WRAP_ZLIB); /* Content-Encoding: deflate is the zlib format */
}

static void test_round_trip_large(void **state)
{
    (void)state;
    size_t n = 400 * 1024, zlen, olen;
    char *t = text(n), *out = NULL;
    unsigned char *z = compress_buf(t, n, WRAP_GZIP, &zlen);

    assert_int_equal(gzip_inflate((const char *)z, zlen, 500 * 1024, &out, &olen), GZIP_OK);
    assert_int_equal(olen, n);
    assert_memory_equal(out, t, n);
    free(out);
    free(z);
    free(t);
}

static void test_cap_exact_and_over(void **state)
{
    (void)state;
    /* Sizes around the buffer's growth steps too, where off-by-ones hide. */
    const size_t sizes[] = {1, 100, 16 * 1024, 32 * 1024, 500 * 1024};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i], zlen, olen = 7;
        char *t = text(n), *out = NULL;
        unsigned char *z = compress_buf(t, n, WRAP_GZIP, &zlen);

        assert_int_equal(gzip_inflate((const char *)z, zlen, n, &out, &olen), GZIP_OK);
        assert_int_equal(olen, n);
        assert_memory_equal(out, t, n);
        free(out);

        out = (char *)0x1;
        olen = 7;
        assert_int_equal(gzip_inflate((const char *)z, zlen, n - 1, &out, &olen), GZIP_TOO_LARGE);
        assert_null(out);
        assert_int_equal(olen, 0);
        free(z);
        free(t);
    }
}

static void test_bomb_stops_early(void **state)
{
    (void)state;
    /* 256 MiB of zeros compress to ~256 KB: a classic bomb against a 500 KB cap. */
    size_t zlen, olen;
    char *out = NULL;
    unsigned char *z = compress_buf(NULL, (size_t)256 << 20, WRAP_GZIP, &zlen);
    assert_true(zlen < 1024 * 1024);

    /* Refused by its ratio (~1000:1) long before the cap. */
    assert_int_equal(gzip_inflate((const char *)z, zlen, 500 * 1024, &out, &olen), GZIP_RATIO);
    assert_null(out);

#ifndef UNDER_ASAN
    /*
     * Bounded memory: in a child whose address space may grow by only 24 MiB,
     * the same bomb must still come back TOO_LARGE. An inflater that buffers
     * the whole output (or grows past the cap) fails here with NOMEM or dies.
     */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        long pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (f == NULL || fscanf(f, "%ld", &pages) != 1)
            _exit(3);
        fclose(f);
        struct rlimit rl;
        rl.rlim_cur = rl.rlim_max = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (24u << 20);
        if (setrlimit(RLIMIT_AS, &rl) != 0)
            _exit(4);
        char *o = NULL;
        size_t ol;
        int rc = gzip_inflate((const char *)z, zlen, 500 * 1024, &o, &ol);
        if (rc != GZIP_RATIO)
            _exit(10 - rc);
        /* With a cap far above the address space left, only the ratio can stop it. */
        rc = gzip_inflate((const char *)z, zlen, (size_t)1 << 30, &o, &ol);
        free(z); /* the child's copy: valgrind checks the child's exit for leaks too */
        _exit(rc == GZIP_RATIO ? 0 : 20 - rc);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
#endif
    free(z);
}

/* A batch of identical tiny events: the most compressible request a real client sends (~270x). */
static void test_ratio_legit_batch_passes(void **state)
{
    (void)state;
    const char *ev = "{\"type\":\"track\",\"event\":\"x\",\"userId\":\"u\"},";
    size_t evlen = strlen(ev), n = 2500 * evlen + 16, zlen, olen;
    char *body = malloc(n), *out = NULL;
    size_t used = 0;

    assert_non_null(body);
    used += (size_t)sprintf(body, "{\"batch\":[");
    for (int i = 0; i < 2500; i++) {
        memcpy(body + used, ev, evlen);
        used += evlen;
    }
    memcpy(body + used - 1, "]}", 3);
    used += 1;
    unsigned char *z = compress_buf(body, used, WRAP_GZIP, &zlen);
    assert_true(used / zlen > 100); /* it really is highly compressed */
    assert_true(used / zlen < GZIP_MAX_RATIO);

    assert_int_equal(gzip_inflate((const char *)z, zlen, 500 * 1024, &out, &olen), GZIP_OK);
    assert_int_equal(olen, used);
    assert_memory_equal(out, body, used);
    free(out);
    free(z);
    free(body);
}

/* Below the floor the ratio does not matter: a small body of one repeated byte is fine. */
static void test_ratio_below_floor(void **state)
{
    (void)state;
    size_t n = GZIP_RATIO_FLOOR, zlen, olen;
    char *out = NULL;
    unsigned char *z = compress_buf(NULL, n, WRAP_GZIP, &zlen);

    assert_true(n / zlen > GZIP_MAX_RATIO);
    assert_int_equal(gzip_inflate((const char *)z, zlen, 500 * 1024, &out, &olen), GZIP_OK);
    assert_int_equal(olen, n);
    free(out);

    /* Just past the floor the same kind of stream is refused, whatever the cap. */
    free(z);
    n = GZIP_RATIO_FLOOR + 64 * 1024 + 1;
    z = compress_buf(NULL, n, WRAP_ZLIB, &zlen);
    assert_int_equal(gzip_inflate((const char *)z, zlen, (size_t)1 << 30, &out, &olen), GZIP_RATIO);
    assert_null(out);
    free(z);
}

/* A bomb split into many gzip members is measured on all the input, not per member. */
static void test_ratio_multi_member(void **state)
{
    (void)state;
    size_t zlen, olen;
    char *out = NULL;
    unsigned char *z = compress_buf(NULL, 48 * 1024, WRAP_GZIP, &zlen);
    unsigned char *many = malloc(zlen * 20);

    assert_non_null(many);
    for (int i = 0; i < 20; i++)
        memcpy(many + (size_t)i * zlen, z, zlen);
    assert_int_equal(gzip_inflate((const char *)many, zlen * 20, (size_t)1 << 30, &out, &olen),
                     GZIP_RATIO);
    assert_null(out);
    free(many);
    free(z);
}

static void test_corrupt(void **state)
{
    (void)state;
    size_t n = 20000, zlen, olen;
    char *t = text(n), *out = NULL;
    unsigned char *z = compress_buf(t, n, WRAP_GZIP, &zlen);

    /* Not compressed at all: what a client mislabelling JSON as gzip sends. */
    const char *plain = "{\"userId\":\"u\",\"event\":\"x\"}";
    assert_int_equal(gzip_inflate(plain, strlen(plain), 1 << 20, &out, &olen), GZIP_CORRUPT);
    assert_null(out);

    /* A damaged byte inside the deflate data. */
    unsigned char *bad = malloc(zlen);
    assert_non_null(bad);
    memcpy(bad, z, zlen);
    bad[zlen / 2] ^= 0xff;
    bad[zlen / 2 + 1] ^= 0x55;
    assert_int_equal(gzip_inflate((const char *)bad, zlen, 1 << 20, &out, &olen), GZIP_CORRUPT);
    assert_null(out);

    /* A wrong CRC-32 in the trailer: the data inflates but must not be trusted. */
    memcpy(bad, z, zlen);
    bad[zlen - 8] ^= 0x01;
    assert_int_equal(gzip_inflate((const char *)bad, zlen, 1 << 20, &out, &olen), GZIP_CORRUPT);
    /* And a wrong length (ISIZE) in the trailer. */
    memcpy(bad, z, zlen);
    bad[zlen - 1] ^= 0x01;
    assert_int_equal(gzip_inflate((const char *)bad, zlen, 1 << 20, &out, &olen), GZIP_CORRUPT);

    free(bad);
    free(z);
    free(t);
}

static void test_truncated(void **state)
{
    (void)state;
    size_t n = 20000, zlen, olen;
    char *t = text(n), *out = NULL;
    unsigned char *z = compress_buf(t, n, WRAP_GZIP, &zlen);
    const size_t cuts[] = {1, 2, 9, 10, zlen / 2, zlen - 8, zlen - 1};

    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        assert_int_equal(gzip_inflate((const char *)z, cuts[i], 1 << 20, &out, &olen),
                         GZIP_CORRUPT);
        assert_null(out);
    }
    free(z);
    free(t);
}

static void test_trailing_garbage(void **state)
{
    (void)state;
    const char *json = "{\"a\":1}";
    size_t zlen, olen;
    char *out = NULL;
    unsigned char *z = compress_buf(json, strlen(json), WRAP_GZIP, &zlen);
    unsigned char *buf = malloc(zlen + 16);

    assert_non_null(buf);
    memcpy(buf, z, zlen);
    memcpy(buf + zlen, "garbage", 7);
    assert_int_equal(gzip_inflate((const char *)buf, zlen + 7, 1 << 20, &out, &olen), GZIP_CORRUPT);
    assert_null(out);
    buf[zlen] = '\0'; /* even a single stray byte */
    assert_int_equal(gzip_inflate((const char *)buf, zlen + 1, 1 << 20, &out, &olen), GZIP_CORRUPT);

    /* Two gzip members back to back are a valid gzip file (RFC 1952 2.2). */
    memcpy(buf, z, zlen);
    unsigned char *two = malloc(2 * zlen);
    assert_non_null(two);
    memcpy(two, z, zlen);
    memcpy(two + zlen, z, zlen);
    assert_int_equal(gzip_inflate((const char *)two, 2 * zlen, 1 << 20, &out, &olen), GZIP_OK);
    assert_int_equal(olen, 2 * strlen(json));
    assert_memory_equal(out, "{\"a\":1}{\"a\":1}", olen);
    free(out);
    /* ... and count against one cap together. */
    out = NULL;
    assert_int_equal(gzip_inflate((const char *)two, 2 * zlen, 2 * strlen(json) - 1, &out, &olen),
                     GZIP_TOO_LARGE);
    assert_null(out);
    free(two);
    free(buf);
    free(z);
}

static void test_empty(void **state)
{
    (void)state;
    size_t zlen, olen = 5;
    char *out = (char *)0x1;

    /* No bytes at all is not a gzip stream. */
    assert_int_equal(gzip_inflate("", 0, 1024, &out, &olen), GZIP_CORRUPT);
    assert_null(out);
    assert_int_equal(olen, 0);
    assert_int_equal(gzip_inflate(NULL, 0, 1024, &out, &olen), GZIP_CORRUPT);

    /* A gzip stream of nothing is fine and yields an empty, NUL-terminated buffer. */
    unsigned char *z = compress_buf("", 0, WRAP_GZIP, &zlen);
    assert_int_equal(gzip_inflate((const char *)z, zlen, 1024, &out, &olen), GZIP_OK);
    assert_non_null(out);
    assert_int_equal(olen, 0);
    assert_int_equal(out[0], '\0');
    free(out);
    /* Even with a cap of zero. */
    assert_int_equal(gzip_inflate((const char *)z, zlen, 0, &out, &olen), GZIP_OK);
    free(out);
    free(z);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_gzip),   cmocka_unit_test(test_round_trip_zlib),
        cmocka_unit_test(test_round_trip_large),  cmocka_unit_test(test_cap_exact_and_over),
        cmocka_unit_test(test_bomb_stops_early),  cmocka_unit_test(test_ratio_legit_batch_passes),
        cmocka_unit_test(test_ratio_below_floor), cmocka_unit_test(test_ratio_multi_member),
        cmocka_unit_test(test_corrupt),           cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_trailing_garbage),  cmocka_unit_test(test_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
