/* datadir.c: the data dir's layout as one table: each entry's name and the folder that holds it. */
#include "storage/datadir.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOP (-1) /* held by the data dir itself */

static const struct {
    const char *name;
    int parent; /* a datadir_entry_t, or TOP */
} layout[DATADIR_ENTRIES] = {
    [DATADIR_LOCK] = {"LOCK", TOP},
    [DATADIR_SECRET] = {"secret", TOP},
    [DATADIR_WINDOW] = {"WINDOW", TOP},
    [DATADIR_TAGGED_FROM] = {"TAGGED_FROM", TOP},
    [DATADIR_LOG] = {"log", TOP},
    [DATADIR_LOG_PROBE] = {"probe.tmp", DATADIR_LOG},
    [DATADIR_REJECTED] = {"rejected", TOP},
    [DATADIR_GROUPS] = {"groups", TOP},
    [DATADIR_STORE] = {"store", TOP},
    [DATADIR_LMDB_DATA] = {"data.mdb", DATADIR_STORE},
    [DATADIR_GENS] = {"gens", DATADIR_STORE},
    [DATADIR_ACKED] = {"ACKED", DATADIR_STORE},
    [DATADIR_UNSYNCED] = {"UNSYNCED", DATADIR_STORE},
    [DATADIR_WORKER_ID] = {"worker-id", TOP},
    [DATADIR_PARTITIONS] = {"partitions", TOP},
};

static int valid(datadir_entry_t e)
{
    return (int)e >= 0 && e < DATADIR_ENTRIES;
}

const char *datadir_name(datadir_entry_t e)
{
    return valid(e) ? layout[e].name : NULL;
}

/* Writes the entry's path from `dir` (its parents first when `nested`) into out; the length. */
static size_t render(char *out, size_t cap, const char *dir, datadir_entry_t e, int nested)
{
    size_t n;
    if (nested && layout[e].parent != TOP)
        n = render(out, cap, dir, (datadir_entry_t)layout[e].parent, nested);
    else
        n = (size_t)snprintf(out, cap, "%s", dir);
    return n + (size_t)snprintf(out ? out + (n < cap ? n : cap) : NULL, n < cap ? cap - n : 0,
                                "/%s", layout[e].name);
}

static char *build(const char *dir, datadir_entry_t e, int nested)
{
    if (!valid(e) || !dir) {
        errno = EINVAL;
        return NULL;
    }
    size_t n = render(NULL, 0, dir, e, nested) + 1;
    char *p = malloc(n);
    if (!p) {
        errno = ENOMEM;
        return NULL;
    }
    render(p, n, dir, e, nested);
    return p;
}

char *datadir_path(const char *data_dir, datadir_entry_t e)
{
    return build(data_dir, e, 1);
}

char *datadir_in(const char *dir, datadir_entry_t e)
{
    return build(dir, e, 0);
}

int datadir_put(char *out, size_t cap, const char *dir, datadir_entry_t e)
{
    if (!valid(e) || !dir) {
        errno = EINVAL;
        return -1;
    }
    if (render(out, cap, dir, e, 0) >= cap) {
        if (cap > 0)
            out[0] = '\0';
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

int datadir_partition(char *out, size_t cap, const char *data_dir, const char *topic,
                      int32_t partition)
{
    int n = snprintf(out, cap, "%s/%s/%s-%" PRId32, data_dir, layout[DATADIR_PARTITIONS].name,
                     topic, partition);
    if (n < 0 || (size_t)n >= cap) {
        if (cap > 0)
            out[0] = '\0';
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}
