/* gzip: inflate a request body with a hard cap on the inflated size. */
#ifndef INGESTD_GZIP_H
#define INGESTD_GZIP_H

#include <stddef.h>

enum gzip_status { GZIP_OK = 0, GZIP_TOO_LARGE = -1, GZIP_CORRUPT = -2, GZIP_NOMEM = -3 };

/*
 * Inflates a gzip (or zlib) stream of `len` bytes into a new buffer of at
 * most `cap` bytes. On GZIP_OK, *out (malloc'ed, caller frees) holds
 * *out_len bytes plus a NUL terminator. Stops as soon as the cap is passed.
 */
int gzip_inflate(const char *in, size_t len, size_t cap, char **out, size_t *out_len);

#endif
