/* keyhash.c: SipHash-2-4 (128-bit output) as the keyed dedupe hash. */
#include "storage/window/keyhash.h"

#include "common/bytes.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

/* Incremental SipHash state, so keyhash() needs no buffer for the concatenation. */
typedef struct {
    uint64_t v0, v1, v2, v3;
    uint8_t tail[8];
    size_t ntail;
    uint64_t total;
} sip_t;

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static void round2(sip_t *s, int rounds)
{
    for (int i = 0; i < rounds; i++) {
        s->v0 += s->v1;
        s->v1 = ROTL(s->v1, 13);
        s->v1 ^= s->v0;
        s->v0 = ROTL(s->v0, 32);
        s->v2 += s->v3;
        s->v3 = ROTL(s->v3, 16);
        s->v3 ^= s->v2;
        s->v0 += s->v3;
        s->v3 = ROTL(s->v3, 21);
        s->v3 ^= s->v0;
        s->v2 += s->v1;
        s->v1 = ROTL(s->v1, 17);
        s->v1 ^= s->v2;
        s->v2 = ROTL(s->v2, 32);
    }
}

static void sip_init(sip_t *s, const uint8_t key[16])
{
    uint64_t k0 = bytes_get_le64(key), k1 = bytes_get_le64(key + 8);
    s->v0 = k0 ^ 0x736f6d6570736575ULL;
    s->v1 = k1 ^ 0x646f72616e646f6dULL ^ 0xee; /* 0xee: the 128-bit output variant */
    s->v2 = k0 ^ 0x6c7967656e657261ULL;
    s->v3 = k1 ^ 0x7465646279746573ULL;
    s->ntail = 0;
    s->total = 0;
}

static void sip_block(sip_t *s, uint64_t m)
{
    s->v3 ^= m;
    round2(s, 2);
    s->v0 ^= m;
}

static void sip_update(sip_t *s, const void *data, size_t len)
{
    const uint8_t *p = data;
    s->total += len;
    while (len > 0 && s->ntail > 0) {
        s->tail[s->ntail++] = *p++;
        len--;
        if (s->ntail == 8) {
            sip_block(s, bytes_get_le64(s->tail));
            s->ntail = 0;
        }
    }
    for (; len >= 8; p += 8, len -= 8)
        sip_block(s, bytes_get_le64(p));
    memcpy(s->tail + s->ntail, p, len);
    s->ntail += len;
}

static void sip_final(sip_t *s, uint8_t out[16])
{
    uint64_t b = (s->total & 0xff) << 56;
    for (size_t i = 0; i < s->ntail; i++)
        b |= (uint64_t)s->tail[i] << (8 * i);
    sip_block(s, b);
    s->v2 ^= 0xee;
    round2(s, 4);
    bytes_put_le64(out, s->v0 ^ s->v1 ^ s->v2 ^ s->v3);
    s->v1 ^= 0xdd;
    round2(s, 4);
    bytes_put_le64(out + 8, s->v0 ^ s->v1 ^ s->v2 ^ s->v3);
}

void keyhash_siphash128(const uint8_t key[16], const void *data, size_t len, uint8_t out[16])
{
    sip_t s;
    sip_init(&s, key);
    sip_update(&s, data, len);
    sip_final(&s, out);
}

void keyhash_tagged(const uint8_t secret[KEYHASH_SECRET_LEN], uint32_t tag, const char *source,
                    size_t source_len, const char *message_id, size_t message_id_len,
                    uint8_t out[KEYHASH_LEN])
{
    /* The length prefix keeps ("ab","c") and ("a","bc") apart. */
    uint8_t prefix[4];
    bytes_put_le32(prefix, (uint32_t)source_len);
    sip_t s;
    sip_init(&s, secret);
    sip_update(&s, prefix, sizeof(prefix));
    sip_update(&s, source, source_len);
    sip_update(&s, message_id, message_id_len);
    sip_final(&s, out);
    keyhash_set_source(out, tag);
}

void keyhash(const uint8_t secret[KEYHASH_SECRET_LEN], const char *source, size_t source_len,
             const char *message_id, size_t message_id_len, uint8_t out[KEYHASH_LEN])
{
    keyhash_tagged(secret, keyhash_source_tag(secret, source, source_len), source, source_len,
                   message_id, message_id_len, out);
}

uint32_t keyhash_source_tag(const uint8_t secret[KEYHASH_SECRET_LEN], const char *source,
                            size_t source_len)
{
    static const uint8_t domain[4] = {0xff, 0xff, 0xff, 0xff};
    uint8_t h[16];
    sip_t s;
    sip_init(&s, secret);
    sip_update(&s, domain, sizeof(domain));
    sip_update(&s, source, source_len);
    sip_final(&s, h);
    return bytes_get_be32(h);
}

uint32_t keyhash_source(const uint8_t key[KEYHASH_LEN])
{
    return bytes_get_be32(key + KEYHASH_TAG_AT);
}

void keyhash_set_source(uint8_t key[KEYHASH_LEN], uint32_t tag)
{
    bytes_put_be32(key + KEYHASH_TAG_AT, tag);
}

int keyhash_random(void *out, size_t len)
{
    uint8_t *p = out;
    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}
