/* keyhash: the 16-byte keyed dedupe key of (source, messageId). */
#ifndef INGESTD_KEYHASH_H
#define INGESTD_KEYHASH_H

#include <stddef.h>
#include <stdint.h>

#define KEYHASH_LEN        16 /* bytes of a dedupe key */
#define KEYHASH_SECRET_LEN 16 /* bytes of the per-data-dir secret */

/* Where a key carries its source's tag (keyhash_source_tag): bytes 4..7, big-endian. Not the
 * first bytes, which the filters' block choice, pending's slots and the checkpointer's key order
 * take as the key's uniform hash; not the last 8, which the Bloom bits are drawn from. */
#define KEYHASH_TAG_AT 4

/*
 * SipHash-2-4 with 128-bit output, keyed by `secret`, over an unambiguous
 * encoding of (source, message_id): the 4-byte little-endian length of
 * source, source, then message_id; then bytes KEYHASH_TAG_AT..+3 replaced
 * by the source's tag, so that storage knows every key's source (the
 * per-source budgets of docs/window.md) from the key alone. 96 bits stay
 * the hash: two messageIds of one source meet by chance after about 2^48
 * of them. Keying means no client can steer two messageIds onto one key
 * without knowing the secret.
 * Pure function; thread-safe.
 */
void keyhash(const uint8_t secret[KEYHASH_SECRET_LEN], const char *source, size_t source_len,
             const char *message_id, size_t message_id_len, uint8_t out[KEYHASH_LEN]);

/* keyhash with the source's tag computed already (keyhash_source_tag of the same secret and
 * source): a request's events share one source, so the tag's SipHash is paid once. */
void keyhash_tagged(const uint8_t secret[KEYHASH_SECRET_LEN], uint32_t tag, const char *source,
                    size_t source_len, const char *message_id, size_t message_id_len,
                    uint8_t out[KEYHASH_LEN]);

/* A source's 32-bit tag: SipHash-2-4 of (0xffffffff, source), a length no source has, so it is
 * no key's hash. Two sources share a tag (and so a budget) with odds of about 1 in 2^32 per
 * pair. Pure function; thread-safe. */
uint32_t keyhash_source_tag(const uint8_t secret[KEYHASH_SECRET_LEN], const char *source,
                            size_t source_len);

/* The source tag a key carries. */
uint32_t keyhash_source(const uint8_t key[KEYHASH_LEN]);

/* Puts `tag` into a key, in place (how keyhash ends; also for keys of logs written before
 * keys carried tags). */
void keyhash_set_source(uint8_t key[KEYHASH_LEN], uint32_t tag);

/* SipHash-2-4, 128-bit output, of an arbitrary buffer (exposed for the test vectors). */
void keyhash_siphash128(const uint8_t key[16], const void *data, size_t len, uint8_t out[16]);

/* Fills `out` with `len` bytes from the kernel's CSPRNG. Returns 0, or -1 with errno set. */
int keyhash_random(void *out, size_t len);

#endif
