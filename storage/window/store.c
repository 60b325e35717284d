/*
 * store.c: the LMDB de-duplication store (storage/window/store.h): open, the meta database,
 * transactions, info, copy. Its puts and look-ups are storekeys.c, its eviction storeevict.c,
 * its scans and readers storeread.c (private header storage/window/internal.h).
 */
#include "storage/window/store.h"

#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "storage/datadir.h"
#include "storage/fsutil.h"
#include "storage/window/internal.h"

#define DEFAULT_MAP_SIZE (1ull << 30)

int store_xlate(store_t *st, int rc)
{
    if (rc == 0)
        return STORE_OK;
    if (st)
        st->last_mdb = rc;
    switch (rc) {
    case MDB_MAP_FULL:
        return STORE_FULL;
    case MDB_TXN_FULL:
        return STORE_TXN_FULL;
    case MDB_NOTFOUND:
        return STORE_NOTFOUND;
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_INVALID:
        return STORE_CORRUPT;
    case MDB_VERSION_MISMATCH:
        return STORE_VERSION;
    case MDB_READERS_FULL:
    case EAGAIN:
    case EBUSY:
        return STORE_BUSY;
    case ENOMEM:
        return STORE_NOMEM;
    case ENOENT:
        return STORE_NOTFOUND;
    case EIO:
    case ENOSPC:
    case EDQUOT:
        return STORE_EIO;
    default:
        return STORE_ERROR;
    }
}

int store_seq_decode(const store_t *st, const MDB_val *k, const MDB_val *v, store_entry_t *r)
{
    uint64_t bucket;
    if (k->mv_size != sizeof(bucket) || v->mv_size != SEQ_VALUE_LEN)
        return STORE_CORRUPT;
    const uint8_t *p = v->mv_data;
    memcpy(&bucket, k->mv_data, sizeof(bucket));
    r->seq = bucket * st->bucket + p[0];
    memcpy(r->key, p + 1, KEYHASH_LEN);
    memcpy(&r->received_ms, p + 17, 8);
    memcpy(&r->offset, p + 25, 8);
    return STORE_OK;
}

/* Positions `cur` (on `seq`) at the entry of `seq`; *found says whether there is one. */
int store_seq_find(store_t *st, MDB_cursor *cur, uint64_t seq, bool *found)
{
    uint64_t bucket = seq / st->bucket;
    uint8_t probe[SEQ_VALUE_LEN] = {(uint8_t)(seq % st->bucket)};
    MDB_val k = store_val(&bucket, sizeof(bucket)), v = store_val(probe, sizeof(probe));
    int rc = mdb_cursor_get(cur, &k, &v, MDB_GET_BOTH_RANGE);
    *found = false;
    if (rc == MDB_NOTFOUND)
        return STORE_OK;
    if (rc)
        return store_xlate(st, rc);
    *found = v.mv_size == SEQ_VALUE_LEN && ((const uint8_t *)v.mv_data)[0] == probe[0];
    return STORE_OK;
}

int store_meta_get_u64(store_t *st, MDB_txn *txn, const char *name, uint64_t *out, bool *found)
{
    MDB_val k = store_val(name, strlen(name)), v;
    int rc = mdb_get(txn, st->meta, &k, &v);
    *found = false;
    if (rc == MDB_NOTFOUND)
        return STORE_OK;
    if (rc != 0)
        return store_xlate(st, rc);
    if (v.mv_size != sizeof(uint64_t))
        return STORE_CORRUPT;
    *out = store_get_u64(&v);
    *found = true;
    return STORE_OK;
}

int store_meta_put(store_t *st, MDB_txn *txn, const char *name, const void *data, size_t n)
{
    MDB_val k = store_val(name, strlen(name)), v = store_val(data, n);
    return store_xlate(st, mdb_put(txn, st->meta, &k, &v, 0));
}

/* A read transaction; adopts a map size another process grew in the meantime. */
int store_txn_begin_read(store_t *st, MDB_txn **txn)
{
    int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, txn);
    if (rc == MDB_MAP_RESIZED) {
        mdb_env_set_mapsize(st->env, 0);
        rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, txn);
    }
    return store_xlate(st, rc);
}

/* Opens (or creates) the three databases and checks the format version. */
static int open_dbs(store_t *st)
{
    MDB_txn *txn = NULL;
    unsigned create = st->read_only ? 0 : MDB_CREATE;
    int rc = store_xlate(st, mdb_txn_begin(st->env, NULL, st->read_only ? MDB_RDONLY : 0, &txn));
    if (rc)
        return rc;
    if ((rc = store_xlate(st, mdb_dbi_open(txn, "meta", create, &st->meta))))
        goto out;
    /* The format first: an older store's databases may have other flags. */
    MDB_val k = store_val("format", 6), v;
    int mrc = mdb_get(txn, st->meta, &k, &v);
    if (mrc == 0) {
        uint32_t fmt = 0;
        if (v.mv_size != sizeof(fmt)) {
            rc = STORE_CORRUPT;
            goto out;
        }
        memcpy(&fmt, v.mv_data, sizeof(fmt));
        /* Formats 2 and 3 hold keys without their source's tag: only a rebuild can add it. */
        if (fmt != STORE_FORMAT_VERSION && !(st->older_ok && (fmt == 2 || fmt == 3))) {
            rc = STORE_VERSION;
            goto out;
        }
    } else if (mrc == MDB_NOTFOUND && !st->read_only) {
        uint32_t fmt = STORE_FORMAT_VERSION;
        /* A new store: every generation it seals is kept until a drop records otherwise. */
        uint64_t none_dropped = 0;
        if ((rc = store_meta_put(st, txn, "format", &fmt, sizeof(fmt))) ||
            (rc = store_meta_put(st, txn, "dropped", &none_dropped, sizeof(none_dropped))))
            goto out;
    } else if (mrc != MDB_NOTFOUND) {
        rc = store_xlate(st, mrc);
        goto out;
    }
    if ((rc = store_xlate(
             st, mdb_dbi_open(txn, "keys", create | MDB_DUPSORT | MDB_DUPFIXED, &st->keys))) ||
        (rc = store_xlate(st, mdb_dbi_open(txn, "seq",
                                           create | MDB_INTEGERKEY | MDB_DUPSORT | MDB_DUPFIXED,
                                           &st->seq))))
        goto out;
    bool found;
    st->next_seq = 0;
    if ((rc = store_meta_get_u64(st, txn, "next_seq", &st->next_seq, &found)))
        goto out;
    /* Commit even a read-only txn: aborting it would close the dbi handles just opened. */
    rc = store_xlate(st, mdb_txn_commit(txn));
    return rc;
out:
    mdb_txn_abort(txn);
    return rc;
}

int store_open(const char *dir, const store_options_t *opts, store_t **out)
{
    store_t *st = calloc(1, sizeof(*st));
    int rc;

    *out = NULL;
    if (!st)
        return STORE_NOMEM;
    st->read_only = opts && opts->read_only;
    st->older_ok = st->read_only && opts->older_ok;
    if ((rc = store_xlate(st, mdb_env_create(&st->env))))
        goto fail;
    uint64_t map = opts && opts->map_size ? opts->map_size : DEFAULT_MAP_SIZE;
    if ((rc = store_xlate(st, mdb_env_set_maxdbs(st->env, 4))) ||
        (rc = store_xlate(st, mdb_env_set_mapsize(st->env, (size_t)map))))
        goto fail;
    /* MDB_NORDAHEAD: lookups of random keys gain nothing from read-ahead. MDB_NOTLS: a read
     * transaction belongs to its store_reader_t, not its thread, so the commit writer can hold
     * one while the checkpointer thread writes. */
    unsigned flags = MDB_NORDAHEAD | MDB_NOTLS;
    if (st->read_only)
        flags |= MDB_RDONLY;
    else if (opts && opts->sync == STORE_SYNC_META)
        flags |= MDB_NOMETASYNC;
    else if (opts && opts->sync == STORE_SYNC_NONE)
        flags |= MDB_NOSYNC;
    if ((rc = store_xlate(st, mdb_env_open(st->env, dir, flags, 0644))))
        goto fail;
    MDB_envinfo ei;
    if ((rc = store_xlate(st, mdb_env_info(st->env, &ei))))
        goto fail;
    st->created = ei.me_last_txnid == 0; /* nothing ever committed: a new environment */
    MDB_stat ms;
    if ((rc = store_xlate(st, mdb_env_stat(st->env, &ms))))
        goto fail;
    /* The page size is the file's: a store's buckets always have the same size. */
    st->bucket = (ms.ms_psize - PAGE_HEADER) / SEQ_VALUE_LEN;
    if (st->bucket > 255)
        st->bucket = 255; /* the position in a bucket is one byte */
    if ((rc = open_dbs(st)))
        goto fail;
    int dead = 0;
    mdb_reader_check(st->env, &dead);
    *out = st;
    return STORE_OK;
fail:
    store_close(st);
    return rc;
}

bool store_created(const store_t *st)
{
    return st->created;
}

void store_close(store_t *st)
{
    if (!st)
        return;
    if (st->txn)
        mdb_txn_abort(st->txn);
    if (st->env)
        mdb_env_close(st->env);
    free(st->order);
    free(st->gone);
    free(st->gone_carry);
    free(st);
}

int store_secret(store_t *st, const uint8_t *secret_in, uint8_t secret_out[KEYHASH_SECRET_LEN])
{
    MDB_txn *txn = NULL;
    MDB_val k = store_val("secret", 6), v;
    int rc = store_txn_begin_read(st, &txn);
    if (rc)
        return rc;
    int mrc = mdb_get(txn, st->meta, &k, &v);
    if (mrc == 0) {
        rc = v.mv_size == KEYHASH_SECRET_LEN ? STORE_OK : STORE_CORRUPT;
        if (rc == STORE_OK)
            memcpy(secret_out, v.mv_data, KEYHASH_SECRET_LEN);
        mdb_txn_abort(txn);
        return rc;
    }
    mdb_txn_abort(txn);
    if (mrc != MDB_NOTFOUND)
        return store_xlate(st, mrc);
    if (st->read_only)
        return STORE_NOTFOUND;

    uint8_t secret[KEYHASH_SECRET_LEN];
    if (secret_in)
        memcpy(secret, secret_in, sizeof(secret));
    else if (keyhash_random(secret, sizeof(secret)) != 0)
        return STORE_ERROR;
    if ((rc = store_xlate(st, mdb_txn_begin(st->env, NULL, 0, &txn))))
        return rc;
    if ((rc = store_meta_put(st, txn, "secret", secret, sizeof(secret)))) {
        mdb_txn_abort(txn);
        return rc;
    }
    if ((rc = store_xlate(st, mdb_txn_commit(txn))))
        return rc;
    memcpy(secret_out, secret, sizeof(secret));
    return STORE_OK;
}

/* The counters of store_info_t as `txn` sees them. */
int store_read_info(store_t *st, MDB_txn *txn, store_info_t *info)
{
    MDB_cursor *cur = NULL;
    MDB_stat ms;
    MDB_envinfo ei;
    MDB_val k, v;
    bool found;
    int rc;

    memset(info, 0, sizeof(*info));
    if ((rc = store_xlate(st, mdb_stat(txn, st->keys, &ms))))
        return rc;
    info->keys = ms.ms_entries;
    if ((rc = store_meta_get_u64(st, txn, "applied", &info->applied, &found)) ||
        (rc = store_meta_get_u64(st, txn, "next_seq", &info->next_seq, &found)) ||
        (rc = store_meta_get_u64(st, txn, "evicting", &info->evicting_below, &found)) ||
        (rc = store_meta_get_u64(st, txn, "sealed", &info->sealed_below, &found)) ||
        (rc = store_meta_get_u64(st, txn, "dropped", &info->dropped_below, &found)))
        return rc;
    if (!found)
        info->dropped_below = STORE_DROPS_UNKNOWN;
    if ((rc = store_xlate(st, mdb_cursor_open(txn, st->seq, &cur))))
        return rc;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    info->oldest_offset = info->applied;
    store_entry_t r;
    if (mrc == 0 && store_seq_decode(st, &k, &v, &r) == STORE_OK) {
        info->oldest_received_ms = r.received_ms;
        info->oldest_offset = r.offset;
    } else if (mrc != 0 && mrc != MDB_NOTFOUND) {
        rc = store_xlate(st, mrc);
    }
    mdb_cursor_close(cur);
    if (rc)
        return rc;
    if (mdb_env_info(st->env, &ei) == 0 && mdb_env_stat(st->env, &ms) == 0) {
        info->map_size = ei.me_mapsize;
        info->used_bytes = (uint64_t)(ei.me_last_pgno + 1) * ms.ms_psize;
    }
    return STORE_OK;
}

int store_get_info(store_t *st, store_info_t *info)
{
    MDB_txn *txn = st->txn;
    int rc;

    if (!txn && (rc = store_txn_begin_read(st, &txn))) {
        memset(info, 0, sizeof(*info));
        return rc;
    }
    rc = store_read_info(st, txn, info);
    if (txn == st->txn)
        info->next_seq = st->txn_seq; /* inside the open write transaction */
    else
        mdb_txn_abort(txn);
    return rc;
}

int store_txn_begin(store_t *st)
{
    if (st->txn || st->read_only)
        return STORE_ERROR;
    int rc = store_xlate(st, mdb_txn_begin(st->env, NULL, 0, &st->txn));
    if (rc) {
        st->txn = NULL;
        return rc;
    }
    st->txn_seq = st->next_seq;
    return STORE_OK;
}
int store_seal(store_t *st, uint64_t sealed_below)
{
    if (!st->txn || sealed_below > st->txn_seq)
        return STORE_ERROR;
    int rc = store_xlate(st, mdb_drop(st->txn, st->keys, 0));
    if (rc == STORE_OK)
        rc = store_xlate(st, mdb_drop(st->txn, st->seq, 0));
    if (rc == STORE_OK)
        rc = store_meta_put(st, st->txn, "sealed", &sealed_below, sizeof(sealed_below));
    return rc;
}

int store_record_drop(store_t *st, uint64_t dropped_below)
{
    if (!st->txn)
        return STORE_ERROR;
    return store_meta_put(st, st->txn, "dropped", &dropped_below, sizeof(dropped_below));
}

int store_advance_seq(store_t *st, uint64_t next_seq)
{
    if (!st->txn || next_seq < st->txn_seq)
        return STORE_ERROR;
    st->txn_seq = next_seq;
    return STORE_OK;
}

int store_set_applied(store_t *st, uint64_t next_offset)
{
    return store_meta_put(st, st->txn, "applied", &next_offset, sizeof(next_offset));
}

int store_txn_commit(store_t *st)
{
    int rc = store_meta_put(st, st->txn, "next_seq", &st->txn_seq, sizeof(st->txn_seq));
    if (rc) {
        store_txn_abort(st);
        return rc;
    }
    rc = mdb_txn_commit(st->txn);
    st->txn = NULL; /* committed or, on error, freed by LMDB, with its cursors */
    st->kcur = NULL;
    st->acur = NULL;
    if (rc)
        return store_xlate(st, rc);
    st->next_seq = st->txn_seq;
    return STORE_OK;
}

void store_txn_abort(store_t *st)
{
    if (st->txn)
        mdb_txn_abort(st->txn); /* closes kcur and acur too */
    st->txn = NULL;
    st->kcur = NULL;
    st->acur = NULL;
    st->txn_seq = st->next_seq;
}

int store_flush(store_t *st)
{
    return store_xlate(st, mdb_env_sync(st->env, 1));
}

int store_grow(store_t *st)
{
    MDB_envinfo ei;
    if (st->txn)
        return STORE_ERROR;
    int rc = store_xlate(st, mdb_env_info(st->env, &ei));
    if (rc)
        return rc;
    return store_xlate(st, mdb_env_set_mapsize(st->env, ei.me_mapsize * 2));
}

int store_copy(store_t *st, const char *dir)
{
    int rc = store_xlate(st, mdb_env_copy2(st->env, dir, MDB_CP_COMPACT));
    if (rc != STORE_OK)
        return rc;
    /* mdb_env_copy2 writes the file without syncing it, nor its name: a backup that says it
     * is durable must be. */
    char *path = datadir_in(dir, DATADIR_LMDB_DATA);
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0 || fsync(fd) != 0 || fsutil_sync_dir(dir) != 0)
        rc = path ? STORE_EIO : STORE_NOMEM;
    if (fd >= 0)
        close(fd);
    free(path);
    return rc;
}

int store_reader_check(store_t *st, int *cleared)
{
    *cleared = 0;
    return store_xlate(st, mdb_reader_check(st->env, cleared));
}

const char *store_detail(const store_t *st)
{
    return st && st->last_mdb ? mdb_strerror(st->last_mdb) : "no error";
}

const char *store_strerror(int status)
{
    switch (status) {
    case STORE_OK:
        return "ok";
    case STORE_FULL:
        return "LMDB map full";
    case STORE_EIO:
        return "LMDB I/O error";
    case STORE_CORRUPT:
        return "LMDB store corrupt";
    case STORE_NOMEM:
        return "out of memory";
    case STORE_VERSION:
        return "LMDB store has an incompatible format version";
    case STORE_BUSY:
        return "LMDB store busy (locked or reader table full)";
    case STORE_NOTFOUND:
        return "not found";
    case STORE_TXN_FULL:
        return "LMDB write transaction full (too many dirty pages)";
    default:
        return "LMDB error";
    }
}
