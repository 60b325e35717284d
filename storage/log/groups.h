/* groups: committed read positions of named log consumers (`log cat --group`), one file each. */
#ifndef INGESTD_GROUPS_H
#define INGESTD_GROUPS_H

#include <stddef.h>
#include <stdint.h>

/*
 * DATA/groups/NAME holds one line: the decimal offset of the next record the
 * group will read (Kafka's convention: committed = next to consume). Written
 * atomically and durably (temporary file, fsync, rename, directory fsync), so
 * a group resumes exactly after the last offset it committed, whatever
 * crashed. Works from any process; one writer per group at a time is the
 * consumer's responsibility.
 */

#define GROUPS_NAME_MAX 64

enum groups_status {
    GROUPS_OK = 0,
    GROUPS_NOTFOUND = 1, /* no such group (never committed) */
    GROUPS_INVALID = -1, /* bad name: 1..64 of [A-Za-z0-9._-], not starting with '.' */
    GROUPS_EIO = -2,     /* errno says why */
    GROUPS_CORRUPT = -3, /* the file does not hold an offset */
    GROUPS_NOMEM = -4,
};

typedef struct groups_entry {
    char name[GROUPS_NAME_MAX + 1];
    uint64_t offset; /* next offset the group reads */
} groups_entry_t;

/* 1 when `name` is a valid group name, else 0. */
int groups_valid_name(const char *name);

/* The committed offset of `name`: GROUPS_OK, GROUPS_NOTFOUND, or GROUPS_INVALID (bad name),
 * GROUPS_EIO (errno), GROUPS_CORRUPT (the file holds no offset). */
int groups_get(const char *data_dir, const char *name, uint64_t *offset);

/* Durably records that `name` continues at `offset`. GROUPS_OK, or GROUPS_INVALID (bad name),
 * GROUPS_EIO (errno: creating DATA/groups or writing the file). */
int groups_commit(const char *data_dir, const char *name, uint64_t offset);

/* Every group, sorted by name. *out is malloc'ed (caller frees; NULL when none). GROUPS_OK
 * (no DATA/groups: none), or GROUPS_INVALID (path too long), GROUPS_EIO, GROUPS_NOMEM;
 * files that are not groups are passed over. */
int groups_list(const char *data_dir, groups_entry_t **out, size_t *n);

const char *groups_strerror(int status);

#endif
