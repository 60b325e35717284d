/* gzip: bounded inflate of gzip/zlib request bodies (zlib does the work). */
#include "server/gzip.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* First output buffer size; grown by doubling up to the cap. */
#define FIRST_CHUNK (16 * 1024)

/* Output handed to one inflate() call at most, so the ratio is checked every this many bytes. */
#define STEP (64 * 1024)

/* zlib counts in uInt; feed it in pieces so huge inputs cannot overflow avail_in. */
static uInt clamp_uint(size_t n)
{
    return n > UINT_MAX ? UINT_MAX : (uInt)n;
}

/*
 * The first output buffer's size: FIRST_CHUNK, or the size a gzip member announces in its
 * trailer (RFC 1952, ISIZE: uncompressed size mod 2^32), so a typical body inflates without
 * regrowing and copying. Only a hint: a wrong or hostile value costs at most the cap, and growth
 * handles the rest. Never more than limit.
 */
static size_t first_size(const char *in, size_t len, size_t limit)
{
    size_t bufcap = limit < FIRST_CHUNK ? limit : FIRST_CHUNK;
    if (len >= 18 && (unsigned char)in[0] == 0x1f && (unsigned char)in[1] == 0x8b) {
        const unsigned char *t = (const unsigned char *)in + len - 4;
        size_t isize = (size_t)t[0] | (size_t)t[1] << 8 | (size_t)t[2] << 16 | (size_t)t[3] << 24;
        /* A bomb announces its size honestly: do not allocate for what the ratio will refuse. */
        if (isize > bufcap && isize / GZIP_MAX_RATIO <= len)
            bufcap = isize < limit ? isize : limit;
    }
    return bufcap;
}

/* Doubles *buf (room for *bufcap bytes and a NUL) up to limit. GZIP_OK or GZIP_NOMEM. */
static int grow(char **buf, size_t *bufcap, size_t limit)
{
    size_t ncap = *bufcap > limit / 2 ? limit : *bufcap * 2;
    char *nbuf = realloc(*buf, ncap + 1);
    if (nbuf == NULL)
        return GZIP_NOMEM;
    *buf = nbuf;
    *bufcap = ncap;
    return GZIP_OK;
}

/* Whether inflate()'s result zr means to go on inflating; if not, the final status is *status. */
static bool after_inflate(z_stream *zs, int zr, size_t in_left, int *status)
{
    *status = GZIP_CORRUPT;
    switch (zr) {
    case Z_OK:
        return true;
    case Z_STREAM_END:
        if (zs->avail_in == 0 && in_left == 0) {
            *status = GZIP_OK;
            return false;
        }
        /* RFC 1952 allows several gzip members back to back (what
         * `cat a.gz b.gz` makes); anything else after the end is garbage. */
        if (zs->avail_in >= 2 && zs->next_in[0] == 0x1f && zs->next_in[1] == 0x8b)
            return inflateReset(zs) == Z_OK;
        return false;
    case Z_BUF_ERROR:
        /* No progress was possible: either the output is full (grow and
         * go on) or the input ran out mid-stream (truncated). */
        return zs->avail_out == 0;
    case Z_MEM_ERROR:
        *status = GZIP_NOMEM;
        return false;
    default: /* Z_DATA_ERROR, Z_NEED_DICT, Z_STREAM_ERROR */
        return false;
    }
}

int gzip_inflate(const char *in, size_t len, size_t cap, char **out, size_t *out_len)
{
    z_stream zs;
    char *buf = NULL;
    size_t bufcap, used = 0, in_left = len;
    /* The buffer never exceeds cap + 1 bytes of output plus the NUL: the extra
     * byte is how "more than cap" is seen without inflating any further. */
    size_t limit;
    int status = GZIP_CORRUPT;
    bool zs_live = false;

    *out = NULL;
    *out_len = 0;
    if (in == NULL || len == 0 || cap >= SIZE_MAX - 2)
        return GZIP_CORRUPT; /* an empty body is not a gzip stream */
    limit = cap + 1;

    memset(&zs, 0, sizeof zs);
    /* 15 + 32: maximum window, and auto-detect a gzip or a zlib header. */
    int zr = inflateInit2(&zs, 15 + 32);
    if (zr != Z_OK) {
        status = zr == Z_MEM_ERROR ? GZIP_NOMEM : GZIP_CORRUPT;
        goto out;
    }
    zs_live = true;
    bufcap = first_size(in, len, limit);
    buf = malloc(bufcap + 1);
    if (buf == NULL) {
        status = GZIP_NOMEM;
        goto out;
    }
    zs.next_in = (Bytef *)(uintptr_t)in;
    zs.avail_in = clamp_uint(in_left);
    in_left -= zs.avail_in;

    for (bool more = true; more;) {
        if (used == bufcap && (status = grow(&buf, &bufcap, limit)) != GZIP_OK)
            goto out;
        if (zs.avail_in == 0 && in_left > 0) {
            zs.avail_in = clamp_uint(in_left);
            in_left -= zs.avail_in;
        }
        zs.next_out = (Bytef *)(buf + used);
        zs.avail_out = clamp_uint(bufcap - used < STEP ? bufcap - used : STEP);
        size_t before = zs.avail_out;

        zr = inflate(&zs, Z_NO_FLUSH);
        used += before - zs.avail_out;
        if (used > cap) {
            status = GZIP_TOO_LARGE; /* the byte past the cap arrived: stop here */
            goto out;
        }
        /* Input consumed so far, across members; the division cannot overflow. */
        size_t consumed = len - in_left - zs.avail_in;
        if (used > GZIP_RATIO_FLOOR && used / GZIP_MAX_RATIO > consumed) {
            status = GZIP_RATIO;
            goto out;
        }
        more = after_inflate(&zs, zr, in_left, &status);
    }

out:
    if (zs_live)
        inflateEnd(&zs);
    if (status == GZIP_OK) {
        buf[used] = '\0';
        *out = buf;
        *out_len = used;
    } else {
        free(buf);
    }
    return status;
}
