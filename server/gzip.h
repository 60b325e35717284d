/* gzip: inflate a request body with a hard cap on the inflated size. */
#ifndef INGESTD_GZIP_H
#define INGESTD_GZIP_H

#include <stddef.h>

enum gzip_status {
    GZIP_OK = 0,
    GZIP_TOO_LARGE = -1, /* inflates to more than the cap */
    GZIP_CORRUPT = -2,   /* not gzip/zlib, damaged, truncated, or trailing garbage */
    GZIP_NOMEM = -3,
    GZIP_RATIO = -4, /* expands more than GZIP_MAX_RATIO to 1: a decompression bomb */
};

/*
 * Real event batches compress 5-20x; a batch of 2,500 identical tiny events about 270x. Deflate
 * cannot do better than about 1030x, which is what bombs (runs of one byte) reach. Past
 * GZIP_RATIO_FLOOR bytes of output, a stream that has expanded more than this is refused at once
 * rather than inflated up to the cap.
 */
#define GZIP_MAX_RATIO   500
#define GZIP_RATIO_FLOOR (64 * 1024)

/*
 * Inflates a gzip (or zlib) stream of `len` bytes into a new buffer of at
 * most `cap` bytes. On GZIP_OK, *out (malloc'ed, caller frees) holds
 * *out_len bytes plus a NUL terminator. Stops as soon as the cap is passed
 * (GZIP_TOO_LARGE) or, once GZIP_RATIO_FLOOR bytes came out, as soon as the
 * output exceeds GZIP_MAX_RATIO times the input consumed so far (GZIP_RATIO),
 * so a bomb costs at most a few dozen KiB of inflating. Thread-safe.
 */
int gzip_inflate(const char *in, size_t len, size_t cap, char **out, size_t *out_len);

#endif
