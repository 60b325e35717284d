/* options: flags, variables and defaults of a subcommand from its table (see options.h). */
#include "server/options.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/config.h"

/* A usage error: one line on stderr. Returns 2, the exit code of a usage error. */
static int usage_error(const opts_cmd_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int usage_error(const opts_cmd_t *c, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "ingestd %s: ", c->cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 2;
}

static const char *env_get(const char *name)
{
    const char *v = name ? getenv(name) : NULL;
    return v && v[0] != '\0' ? v : NULL;
}

/* The spec a flag names ("--name", "--name=value" or its alias), or NULL. */
static const opts_spec_t *find(const opts_cmd_t *c, const char *arg, const char **eq)
{
    *eq = NULL;
    if (strncmp(arg, "--", 2) == 0 && arg[2] != '\0') {
        const char *name = arg + 2;
        const char *e = strchr(name, '=');
        size_t len = e ? (size_t)(e - name) : strlen(name);
        for (size_t i = 0; i < c->nspecs; i++) {
            if (strlen(c->specs[i].name) == len && strncmp(c->specs[i].name, name, len) == 0) {
                *eq = e;
                return &c->specs[i];
            }
        }
    }
    for (size_t i = 0; i < c->nspecs; i++)
        if (c->specs[i].alias && strcmp(c->specs[i].alias, arg) == 0)
            return &c->specs[i];
    return NULL;
}

/* Checks and converts the text `v` of setting s (from `origin`: "--name" or a variable). */
static int convert(const opts_cmd_t *c, const opts_spec_t *s, const char *v, const char *origin,
                   opts_val_t *out)
{
    char lo[32], hi[32];
    size_t len = strlen(v);

    switch (s->kind) {
    case OPTS_STRING:
    case OPTS_REPEAT:
        /* An OPTS_REPEAT's bounds count its items: each is 1..OPTS_PATH_MAX bytes. */
        if (s->kind == OPTS_REPEAT ? len < 1 || len > OPTS_PATH_MAX : len < s->min || len > s->max)
            return usage_error(c, "invalid %s \"%s\": empty or too long", origin, v);
        break;
    case OPTS_COUNT:
        if (config_parse_count(v, &out->n) != 0)
            return usage_error(c, "invalid %s \"%s\": expected a whole number", origin, v);
        if (out->n < s->min || out->n > s->max)
            return usage_error(c, "invalid %s \"%s\": must be between %" PRIu64 " and %" PRIu64,
                               origin, v, s->min, s->max);
        break;
    case OPTS_DURATION:
        if (config_parse_duration(v, &out->ms) != 0)
            return usage_error(c,
                               "invalid %s \"%s\": expected a duration such as 90s, 15m, 24h or "
                               "28d",
                               origin, v);
        if ((uint64_t)out->ms < s->min || (uint64_t)out->ms > s->max) {
            config_fmt_duration(lo, sizeof lo, (int64_t)s->min);
            config_fmt_duration(hi, sizeof hi, (int64_t)s->max);
            return usage_error(c, "invalid %s \"%s\": must be between %s and %s", origin, v, lo,
                               hi);
        }
        break;
    case OPTS_BOOL:
        out->on = strcasecmp(v, "true") == 0 || strcasecmp(v, "yes") == 0 || strcmp(v, "1") == 0;
        if (!out->on && strcasecmp(v, "false") != 0 && strcasecmp(v, "no") != 0 &&
            strcmp(v, "0") != 0)
            return usage_error(c, "invalid %s \"%s\": expected true or false", origin, v);
        break;
    }
    out->str = v;
    out->set = true;
    return 0;
}

/* Appends one item of an OPTS_REPEAT setting. */
static int add_item(const opts_cmd_t *c, const opts_spec_t *s, const char *v, const char *origin,
                    opts_val_t *out)
{
    if (out->nitems == s->max)
        return usage_error(c, "more than %" PRIu64 " %s", s->max, origin);
    if (convert(c, s, v, origin, out) != 0)
        return 2;
    out->items[out->nitems++] = v;
    return 0;
}

/* The variable of an OPTS_REPEAT setting: one item a line, blank lines skipped. */
static int repeat_from_env(const opts_cmd_t *c, const opts_spec_t *s, opts_val_t *out)
{
    const char *v = env_get(s->env);
    if (!v)
        return 0;
    out->env_copy = strdup(v);
    if (!out->env_copy)
        return usage_error(c, "out of memory");
    for (char *save = NULL, *t = strtok_r(out->env_copy, "\n", &save); t != NULL;
         t = strtok_r(NULL, "\n", &save))
        if (add_item(c, s, t, s->env, out) != 0)
            return 2;
    return 0;
}

/* What no flag set: the variable, else the default. */
static int fill_unset(const opts_cmd_t *c, const opts_spec_t *s, opts_val_t *out)
{
    if (s->kind == OPTS_REPEAT)
        return out->nitems == 0 ? repeat_from_env(c, s, out) : 0;
    if (out->set)
        return 0;
    const char *v = env_get(s->env);
    if (v)
        return convert(c, s, v, s->env, out);
    if (s->def)
        return convert(c, s, s->def, "default", out); /* a bad one is a bug the tests catch */
    return 0;
}

static bool wants_help(const opts_cmd_t *c, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0 || (c->operands && argv[i][0] != '-'))
            return false;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return true;
    }
    return false;
}

/* One flag at argv[*i] (which may take argv[*i + 1] as its value). */
static int one_flag(const opts_cmd_t *c, int argc, char **argv, int *i, opts_val_t *vals)
{
    const char *arg = argv[*i], *eq = NULL, *v;
    const opts_spec_t *s = find(c, arg, &eq);
    char origin[64];

    if (!s)
        return usage_error(c, "unknown argument %s (see ingestd %s --help)", arg, c->cmd);
    snprintf(origin, sizeof origin, "--%s", s->name);
    opts_val_t *out = &vals[s - c->specs];
    if (s->kind == OPTS_BOOL) {
        if (eq)
            return usage_error(c, "%s takes no value", origin);
        out->on = true;
        out->set = true;
        out->str = "true";
        return 0;
    }
    if (eq)
        v = eq + 1;
    else if (*i + 1 < argc)
        v = argv[++*i];
    else
        return usage_error(c, "%s needs a value (%s)", origin, s->metavar);
    return s->kind == OPTS_REPEAT ? add_item(c, s, v, origin, out) : convert(c, s, v, origin, out);
}

int opts_parse(const opts_cmd_t *c, int argc, char **argv, opts_val_t *vals, int *first_operand)
{
    int i = 1;

    memset(vals, 0, c->nspecs * sizeof(*vals));
    if (first_operand)
        *first_operand = argc;
    if (wants_help(c, argc, argv)) {
        opts_usage(c, stdout);
        return 1;
    }
    for (size_t k = 0; k < c->nspecs; k++) {
        if (c->specs[k].kind != OPTS_REPEAT)
            continue;
        vals[k].items = calloc(c->specs[k].max ? c->specs[k].max : 1, sizeof(*vals[k].items));
        if (!vals[k].items)
            return usage_error(c, "out of memory");
    }
    for (; i < argc; i++) {
        if (c->operands && strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        if (c->operands && (argv[i][0] != '-' || argv[i][1] == '\0'))
            break;
        if (one_flag(c, argc, argv, &i, vals) != 0)
            return 2;
    }
    for (size_t k = 0; k < c->nspecs; k++)
        if (fill_unset(c, &c->specs[k], &vals[k]) != 0)
            return 2;
    if (first_operand)
        *first_operand = i;
    return 0;
}

void opts_free(const opts_cmd_t *c, opts_val_t *vals)
{
    for (size_t k = 0; k < c->nspecs; k++) {
        free(vals[k].items);
        free(vals[k].env_copy);
    }
    memset(vals, 0, c->nspecs * sizeof(*vals));
}

void opts_usage(const opts_cmd_t *c, FILE *out)
{
    char head[96], more[160];

    fputs(c->synopsis, out);
    if (c->about)
        fprintf(out, "\n%s", c->about);
    fputs("\nFlags:\n", out);
    for (size_t i = 0; i < c->nspecs; i++) {
        const opts_spec_t *s = &c->specs[i];
        snprintf(head, sizeof head, "--%s%s%s%s%s", s->name, s->kind == OPTS_BOOL ? "" : " ",
                 s->kind == OPTS_BOOL ? "" : s->metavar, s->alias ? ", " : "",
                 s->alias ? s->alias : "");
        fprintf(out, "  %s\n", head);
        config_wrap(out, s->help, 6, 78);
        int n =
            snprintf(more, sizeof more, "%s%s%s%s%s", s->env ? "env " : "", s->env ? s->env : "",
                     s->env && s->def ? "; " : "", s->def ? "default " : "", s->def ? s->def : "");
        if (s->kind == OPTS_REPEAT)
            snprintf(more + n, sizeof more - (size_t)n, "%srepeatable%s", n ? "; " : "",
                     s->env ? " (the variable: one a line)" : "");
        if (more[0])
            fprintf(out, "      %s\n", more);
    }
    fprintf(out, "  -h, --help\n      show this help and exit\n");
    if (c->footer)
        fprintf(out, "\n%s", c->footer);
}
