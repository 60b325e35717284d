/* retag: keys of log records written before keys carried their source's tag (store format 4). */
#ifndef INGESTD_RETAG_H
#define INGESTD_RETAG_H

#include <stddef.h>
#include <stdint.h>

#include "storage/window/keyhash.h"
#include "storage/log/log.h"

/*
 * Until store format 4, a record's key was keyhash without the source tag
 * (keyhash.h: KEYHASH_TAG_AT). DIR/TAGGED_FROM holds the log offset from
 * which every record's key carries its tag: written, and made durable (file
 * and directory fsynced), by the first open of a data dir by a binary that
 * tags, before it appends anything; a brand-new data dir gets 0. Without the
 * file no record is tagged. Whatever reads keys from the log (the replay,
 * memory mode's open, `ingestd lookup`, `ingestd check`) puts the tag into
 * the keys of records below that offset, from the "source" member the
 * record's event has (api/batch.c always sets it), so they match the keys
 * new events get.
 */

#define RETAG_NONE UINT64_MAX /* "no record is tagged": the offset without the file */

/*
 * Reads DIR/TAGGED_FROM into *from. 0: read; 1: there is none (*from =
 * RETAG_NONE); -1: unreadable or malformed (errno set; EINVAL: malformed).
 */
int retag_read_from(const char *data_dir, uint64_t *from);

/* Writes DIR/TAGGED_FROM holding `from`, durably (atomic replace, fsync of file and dir). 0 or
 * -1 with errno set. */
int retag_write_from(const char *data_dir, uint64_t from);

/*
 * The top-level "source" string of a JSON object, parsed with jansson
 * (retag_record scans for it first, and parses only when the scan cannot be
 * sure): *source gets a malloc'ed
 * copy (the caller frees it) of its `*len` bytes. 0, or -1 when `json` is
 * not an object with a string "source" (or no memory).
 */
int retag_source_of(const char *json, size_t json_len, char **source, size_t *len);

enum retag_result {
    RETAG_TAGGED = 0,   /* the record is at or past `from`: its key was tagged when written */
    RETAG_RETAGGED = 1, /* a legacy record: its key now carries its source's tag */
    RETAG_NOSOURCE = 2, /* a legacy record without a usable "source": its key is left as is */
};

/*
 * Gives `rec`'s key (in place) the tag of its event's source when the record
 * lies below `from` (a DIR/TAGGED_FROM offset, or RETAG_NONE). Idempotent.
 * Pure apart from `rec->key`; thread-safe.
 */
enum retag_result retag_record(const uint8_t secret[KEYHASH_SECRET_LEN], uint64_t from,
                               log_record_t *rec);

#endif
