/* options: the one table-driven parser of the subcommands' flags, variables and defaults. */
#ifndef INGESTD_SERVER_OPTIONS_H
#define INGESTD_SERVER_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/*
 * Each subcommand (worker, check, rebuild, backup, log cat, log groups, lookup, filter-bench)
 * declares a table of opts_spec_t and a parallel array of opts_val_t; opts_parse fills the
 * values from the flags, else the variables, else the defaults, checks kinds and bounds, and
 * answers --help from the same table. `serve` has the richer table of server/config.c (its
 * kinds write straight into config_t and its start-up log walks the table); the defaults and
 * bounds the two share are the OPTS_* constants below, so no subcommand copies them.
 */

/* Shared by serve (config.c) and the subcommands that open the same data dir. */
#define OPTS_DEFAULT_DATA       "./data"
#define OPTS_DEFAULT_WINDOW     "24h"
#define OPTS_WINDOW_MIN_MS      UINT64_C(1000)                 /* 1s */
#define OPTS_WINDOW_MAX_MS      (UINT64_C(365) * 86400 * 1000) /* 365d */
#define OPTS_DEFAULT_MAX_KEYS   "100000000"
#define OPTS_MAX_KEYS_MAX       UINT64_C(1000000000000)
#define OPTS_DEFAULT_YOUNG_KEYS "1048576"
#define OPTS_YOUNG_KEYS_MAX     (UINT64_C(1) << 32)
#define OPTS_PATH_MAX           4095 /* bytes of a path flag (PATH_MAX less its NUL) */

typedef enum {
    OPTS_STRING,   /* text whose length in bytes is within min..max */
    OPTS_COUNT,    /* a plain whole number within min..max */
    OPTS_DURATION, /* 90s, 15m, 24h, 28d (plain numbers are seconds) into ms within min..max */
    OPTS_BOOL,     /* a switch: the flag alone (no value); the variable 1/true/yes or 0/false/no */
    OPTS_REPEAT,   /* a string flag that may repeat, at most max times; the variable holds one
                      item a line, and the flags replace it as a whole */
} opts_kind_t;

typedef struct {
    const char *name;  /* the flag without its "--" */
    const char *alias; /* another spelling as typed ("-f"), or NULL */
    const char *env;   /* its environment variable, or NULL */
    const char *def;   /* default as the user would type it; NULL: not set */
    opts_kind_t kind;
    uint64_t min, max;   /* bounds (see the kinds) */
    const char *metavar; /* e.g. "DIR" (unused for OPTS_BOOL) */
    const char *help;    /* for --help: one sentence, wrapped there */
} opts_spec_t;

/* The --data flag every subcommand on a data dir has (serve's is in config.c's table). */
#define OPTS_SPEC_DATA                                                                             \
    {                                                                                              \
        "data", NULL, "INGESTD_DATA", OPTS_DEFAULT_DATA, OPTS_STRING, 1, OPTS_PATH_MAX, "DIR",     \
            "data directory"                                                                       \
    }

/* One parsed setting. Strings are borrowed from argv, the environment or the table. */
typedef struct {
    bool set;           /* from a flag, a variable or a default */
    const char *str;    /* the text as given (every kind but OPTS_REPEAT) */
    uint64_t n;         /* OPTS_COUNT */
    int64_t ms;         /* OPTS_DURATION */
    bool on;            /* OPTS_BOOL */
    const char **items; /* OPTS_REPEAT: nitems of them (opts_free frees the array) */
    size_t nitems;
    char *env_copy; /* OPTS_REPEAT: the variable, split in place into items */
} opts_val_t;

typedef struct {
    const char *cmd;      /* as in "ingestd CMD: ..." messages, e.g. "log cat" */
    const char *synopsis; /* the "Usage: ..." line(s), each ending in '\n' */
    const char *about;    /* paragraph(s) between the synopsis and the flags, or NULL */
    const char *footer;   /* after the flags (exit codes), or NULL */
    const opts_spec_t *specs;
    size_t nspecs;
    /* Words after the flags (lookup's ids): the first argument not starting with '-', or
     * everything after "--", ends the flags. Else every argument must be a flag. */
    bool operands;
} opts_cmd_t;

/*
 * Parses argv[1..argc) (argv[0] is the subcommand) into vals[0..c->nspecs), which it zeroes
 * first. A flag is "--name VALUE", "--name=VALUE" or, for a switch, "--name"; a flag given twice
 * keeps the last value (OPTS_REPEAT keeps all). An empty variable counts as unset.
 * Returns 0 (and *first_operand, the index in argv of the first operand, argc when none; may be
 * NULL when c->operands is false), 1 after printing --help to stdout, or 2 after printing one
 * line "ingestd CMD: reason" to stderr (unknown flag, missing value, bad value or bound).
 * Free vals with opts_free whatever it returns.
 */
int opts_parse(const opts_cmd_t *c, int argc, char **argv, opts_val_t *vals, int *first_operand);

/* Frees what opts_parse allocated in vals[0..c->nspecs); the values are zeroed. */
void opts_free(const opts_cmd_t *c, opts_val_t *vals);

/* The --help text: synopsis, about, every flag with its variable and default, footer. */
void opts_usage(const opts_cmd_t *c, FILE *out);

#endif
