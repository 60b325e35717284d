/*
 * bytes: the byte order of every on-disk format (log records, generation files, serialized
 * filters) in one place. Little-endian throughout, except big-endian where a byte string's
 * numeric order must equal its sort order (a key's leading 8 bytes, the source tags inside
 * keys). Each helper reads or writes exactly the bytes it names and needs no alignment.
 */
#ifndef INGESTD_BYTES_H
#define INGESTD_BYTES_H

#include <stdint.h>

/* The low `n` bytes (1..8) of v into p[0..n), least significant first. */
static inline void bytes_put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* p[0..n) (n in 1..8), least significant first. */
static inline uint64_t bytes_get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static inline void bytes_put_le32(uint8_t *p, uint32_t v)
{
    bytes_put_le(p, v, 4);
}

static inline void bytes_put_le64(uint8_t *p, uint64_t v)
{
    bytes_put_le(p, v, 8);
}

static inline uint32_t bytes_get_le32(const uint8_t *p)
{
    return (uint32_t)bytes_get_le(p, 4);
}

static inline uint64_t bytes_get_le64(const uint8_t *p)
{
    return bytes_get_le(p, 8);
}

/* Big-endian: most significant first, so that memcmp order is numeric order. */
static inline void bytes_put_be32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * (3 - i)));
}

static inline uint32_t bytes_get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t bytes_get_be64(const uint8_t *p)
{
    return (uint64_t)bytes_get_be32(p) << 32 | bytes_get_be32(p + 4);
}

#endif
