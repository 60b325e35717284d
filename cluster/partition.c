/* partition.c: murmur2 routing of (source, messageId) with a repartition cut-over. */
#include "cluster/partition.h"

#include <stdlib.h>

#include "cluster/cluster.h"

struct cluster_partitioner {
    cluster_partition_config_t cfg;
};

int cluster_partitioner_new(const cluster_partition_config_t *cfg, cluster_partitioner_t **out)
{
    *out = NULL;
    if (cfg == NULL || cfg->partitions < 1 || cfg->partitions_before < 0 ||
        cfg->partitions_before > cfg->partitions ||
        (cfg->partitions_before > 0 && cfg->repartition_at_ms <= 0))
        return CLUSTER_EINVAL;
    cluster_partitioner_t *p = calloc(1, sizeof *p);
    if (p == NULL)
        return CLUSTER_NOMEM;
    p->cfg = *cfg;
    *out = p;
    return CLUSTER_OK;
}

void cluster_partitioner_free(cluster_partitioner_t *p)
{
    free(p);
}

typedef struct {
    const unsigned char *p;
    size_t len;
} part_t;

/*
 * Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2): 32-bit
 * MurmurHash2 with seed 0x9747b28c, little-endian 4-byte blocks, the tail
 * mixed in the order the Java code does. Unsigned arithmetic throughout: the
 * Java ints wrap the same way. Takes the input as consecutive pieces so a key
 * never has to be copied together (no allocation, no size limit).
 */
static uint32_t murmur2_parts(const part_t *parts, size_t nparts)
{
    const uint32_t m = 0x5bd1e995u;
    size_t len = 0;
    for (size_t i = 0; i < nparts; i++)
        len += parts[i].len;
    uint32_t h = 0x9747b28cu ^ (uint32_t)len;
    unsigned char blk[4];
    size_t fill = 0;

    for (size_t i = 0; i < nparts; i++) {
        for (size_t j = 0; j < parts[i].len; j++) {
            blk[fill++] = parts[i].p[j];
            if (fill < 4)
                continue;
            fill = 0;
            uint32_t k = (uint32_t)blk[0] | (uint32_t)blk[1] << 8 | (uint32_t)blk[2] << 16 |
                         (uint32_t)blk[3] << 24;
            k *= m;
            k ^= k >> 24;
            k *= m;
            h *= m;
            h ^= k;
        }
    }
    switch (fill) {
    case 3:
        h ^= (uint32_t)blk[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)blk[1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)blk[0];
        h *= m;
        break;
    default:
        break;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

uint32_t cluster_murmur2(const void *data, size_t len)
{
    part_t one = {data, len};
    return murmur2_parts(&one, 1);
}

int32_t cluster_partition_of_key(const void *key, size_t key_len, int32_t count)
{
    if (count < 1)
        return 0;
    return (int32_t)((cluster_murmur2(key, key_len) & 0x7fffffffu) % (uint32_t)count);
}

int32_t cluster_partition_for(const cluster_partitioner_t *p, const char *source, size_t source_len,
                              const char *message_id, size_t message_id_len, int64_t timestamp_ms)
{
    int32_t count = p->cfg.partitions;
    if (p->cfg.partitions_before > 0 && timestamp_ms < p->cfg.repartition_at_ms)
        count = p->cfg.partitions_before;
    /* The raw-topic key, source NUL messageId, hashed in place. */
    part_t parts[3] = {{(const unsigned char *)source, source_len},
                       {(const unsigned char *)"", 1},
                       {(const unsigned char *)message_id, message_id_len}};
    return (int32_t)((murmur2_parts(parts, 3) & 0x7fffffffu) % (uint32_t)count);
}
