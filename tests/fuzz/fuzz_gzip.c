/* fuzz_gzip: bounded inflate of request bodies (server/gzip) under libFuzzer. */
#include <string.h>

#include "api/api.h"
#include "fuzz.h"
#include "server/gzip.h"

/*
 * Properties checked on every input, inflated with the server's cap (API_MAX_REQUEST_BYTES):
 * - the status is one of OK, TOO_LARGE, RATIO, CORRUPT (nothing here runs out of memory);
 *   anything but OK hands no output back;
 * - OK: at most cap bytes, NUL-terminated; the same input with the cap set to exactly that
 *   length inflates to the same bytes, and with one byte less is TOO_LARGE (either may also
 *   be RATIO: the ratio is checked where each inflate step ends, and the steps depend on the
 *   cap); a cap below GZIP_RATIO_FLOOR gives the same bytes when the output fits it, and
 *   TOO_LARGE when it does not;
 * - TOO_LARGE or RATIO: TOO_LARGE under a small cap (more than it came out before any error).
 */

#define SMALL_CAP 1024

static int inflate_cap(const uint8_t *data, size_t size, size_t cap, char **out, size_t *len)
{
    int rc = gzip_inflate((const char *)data, size, cap, out, len);
    FUZZ_CHECK(rc == GZIP_OK || rc == GZIP_TOO_LARGE || rc == GZIP_RATIO || rc == GZIP_CORRUPT);
    if (rc == GZIP_OK) {
        FUZZ_CHECK(*out != NULL && *len <= cap && (*out)[*len] == '\0');
    } else {
        FUZZ_CHECK(*out == NULL && *len == 0);
    }
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *out = NULL, *again = NULL;
    size_t len = 0, len2 = 0;
    int rc2;

    int rc = inflate_cap(data, size, API_MAX_REQUEST_BYTES, &out, &len);
    if (rc == GZIP_OK) {
        rc2 = inflate_cap(data, size, len, &again, &len2);
        FUZZ_CHECK(rc2 == GZIP_OK || rc2 == GZIP_RATIO);
        if (rc2 == GZIP_OK)
            FUZZ_CHECK(len2 == len && memcmp(again, out, len) == 0);
        free(again);
        again = NULL;
        if (len > 0) {
            rc2 = inflate_cap(data, size, len - 1, &again, &len2);
            FUZZ_CHECK(rc2 == GZIP_TOO_LARGE || rc2 == GZIP_RATIO);
        }
        rc2 = inflate_cap(data, size, SMALL_CAP, &again, &len2);
        if (len <= SMALL_CAP)
            FUZZ_CHECK(rc2 == GZIP_OK && len2 == len && memcmp(again, out, len) == 0);
        else
            FUZZ_CHECK(rc2 == GZIP_TOO_LARGE);
        free(again);
    } else if (rc == GZIP_TOO_LARGE || rc == GZIP_RATIO) {
        FUZZ_CHECK(inflate_cap(data, size, SMALL_CAP, &again, &len2) == GZIP_TOO_LARGE);
    }
    free(out);
    return 0;
}
