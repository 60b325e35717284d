/* keyhash: the 16-byte keyed dedupe key of (source, messageId). */
#ifndef INGESTD_KEYHASH_H
#define INGESTD_KEYHASH_H

#include <stddef.h>
#include <stdint.h>

#define KEYHASH_LEN        16 /* bytes of a dedupe key */
#define KEYHASH_SECRET_LEN 16 /* bytes of the per-data-dir secret */

/*
 * SipHash-2-4 with 128-bit output, keyed by `secret`, over an unambiguous
 * encoding of (source, message_id): the 4-byte little-endian length of
 * source, source, then message_id. Keying means no client can steer two
 * messageIds onto one key without knowing the secret.
 * Pure function; thread-safe.
 */
void keyhash(const uint8_t secret[KEYHASH_SECRET_LEN], const char *source, size_t source_len,
             const char *message_id, size_t message_id_len, uint8_t out[KEYHASH_LEN]);

/* SipHash-2-4, 128-bit output, of an arbitrary buffer (exposed for the test vectors). */
void keyhash_siphash128(const uint8_t key[16], const void *data, size_t len, uint8_t out[16]);

/* Fills `out` with `len` bytes from the kernel's CSPRNG. Returns 0, or -1 with errno set. */
int keyhash_random(void *out, size_t len);

#endif
