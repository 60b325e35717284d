/* batch: per-event validation and Segment-style normalisation of a request body. */
#include "api/batch.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uuid/uuid.h>

#include "api/api.h"
#include "api/timestamp.h"

static const char *const TYPES[] = {"track", "identify", "page", "screen", "group", "alias"};

static void seterr(batch_error_t *err, const char *msg)
{
    if (err)
        snprintf(err->text, sizeof(err->text), "%s", msg);
}

void batch_uuid_v4(char out[BATCH_UUID_LEN + 1], void *arg)
{
    uuid_t u;
    (void)arg;
    uuid_generate_random(u);
    uuid_unparse_lower(u, out);
}

int batch_parse(const char *body, size_t len, json_t **root, batch_error_t *err)
{
    json_error_t jerr;
    *root = NULL;
    if (!body || len == 0) {
        seterr(err, "body is empty");
        return BATCH_BAD_REQUEST;
    }
    /* JSON_DECODE_ANY only so a bare string or number gets the clearer "must be a JSON object".
     * No JSON_DISABLE_EOF_CHECK: trailing bytes after the value are an error. No
     * JSON_ALLOW_NUL: a NUL inside a string could truncate it for C consumers of the log. */
    json_t *j = json_loadb(body, len, JSON_DECODE_ANY, &jerr);
    if (!j) {
        /* jansson's text ends with " near '<input>'": the client's bytes, maybe not even UTF-8,
         * so cut them off instead of echoing them into the response. */
        char *near = strstr(jerr.text, " near ");
        if (near)
            *near = '\0';
        for (char *c = jerr.text; *c; c++)
            if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
                *c = '?';
        if (err)
            snprintf(err->text, sizeof(err->text), "invalid JSON: %.120s (line %d, column %d)",
                     jerr.text, jerr.line, jerr.column);
        return BATCH_BAD_REQUEST;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        seterr(err, "body must be a JSON object");
        return BATCH_BAD_REQUEST;
    }
    *root = j;
    return BATCH_OK;
}

const char *batch_write_key(const json_t *root, size_t *len)
{
    json_t *k = json_object_get(root, "writeKey");
    if (!json_is_string(k))
        return NULL;
    *len = json_string_length(k);
    return json_string_value(k);
}

void batch_clear(batch_t *b)
{
    if (!b)
        return;
    for (size_t i = 0; i < b->nevents; i++)
        free(b->events[i].data);
    free(b->events);
    free(b->rejected);
    memset(b, 0, sizeof(*b));
}

/* 1: a usable id (non-empty string or number); 0: absent; -1: present with a wrong type. */
static int id_state(const json_t *v, bool null_is_absent)
{
    if (!v || (null_is_absent && json_is_null(v)))
        return 0;
    if (json_is_string(v))
        return json_string_length(v) > 0 ? 1 : 0;
    if (json_is_number(v))
        return 1;
    return -1;
}

static bool iso_ok(const json_t *v, int64_t *ms)
{
    return json_is_string(v) &&
           timestamp_parse(json_string_value(v), json_string_length(v), ms) == 0;
}

/* Checks one event without touching it; returns the reason it is rejected, or NULL. */
static const char *check_event(const json_t *ev, const char *single_type)
{
    if (!json_is_object(ev))
        return "event must be a JSON object";

    const json_t *t = json_object_get(ev, "type");
    const char *type = NULL;
    if (single_type) {
        if (t && !(json_is_string(t) && strcmp(json_string_value(t), single_type) == 0))
            return "type does not match the endpoint";
        type = single_type;
    } else {
        if (!t)
            return "type is required";
        for (size_t i = 0; json_is_string(t) && i < sizeof(TYPES) / sizeof(TYPES[0]); i++)
            if (strcmp(json_string_value(t), TYPES[i]) == 0)
                type = TYPES[i];
        if (!type)
            return "type must be one of track, identify, page, screen, group, alias";
    }

    /* analytics.js sends "userId": null for anonymous users, so null means absent here. */
    int uid = id_state(json_object_get(ev, "userId"), true);
    int aid = id_state(json_object_get(ev, "anonymousId"), true);
    if (uid < 0)
        return "userId must be a string or number";
    if (aid < 0)
        return "anonymousId must be a string or number";
    if (uid == 0 && aid == 0)
        return "userId or anonymousId is required";

    if (strcmp(type, "track") == 0) {
        const json_t *e = json_object_get(ev, "event");
        if (!json_is_string(e) || json_string_length(e) == 0)
            return "event must be a non-empty string for track";
    } else if (strcmp(type, "group") == 0) {
        if (id_state(json_object_get(ev, "groupId"), false) != 1)
            return "groupId is required for group";
    } else if (strcmp(type, "alias") == 0) {
        if (uid != 1)
            return "userId is required for alias";
        if (id_state(json_object_get(ev, "previousId"), false) != 1)
            return "previousId is required for alias";
    }

    const json_t *mid = json_object_get(ev, "messageId");
    if (mid) {
        if (!json_is_string(mid) || json_string_length(mid) == 0)
            return "messageId must be a non-empty string";
        if (json_string_length(mid) > API_MAX_MESSAGE_ID)
            return "messageId is longer than 256 bytes";
    }

    int64_t ms;
    const json_t *v;
    if ((v = json_object_get(ev, "timestamp")) && !iso_ok(v, &ms))
        return "timestamp must be an ISO-8601 string";
    if ((v = json_object_get(ev, "sentAt")) && !iso_ok(v, &ms))
        return "sentAt must be an ISO-8601 string";
    if ((v = json_object_get(ev, "originalTimestamp")) && !iso_ok(v, &ms))
        return "originalTimestamp must be an ISO-8601 string";
    if ((v = json_object_get(ev, "context")) && !json_is_object(v))
        return "context must be an object";
    if ((v = json_object_get(ev, "integrations")) && !json_is_object(v))
        return "integrations must be an object";
    return NULL;
}

/* Lowest %g precision (15..17) at which every real in v reads back to the same double. */
static int real_precision(const json_t *v, int best)
{
    if (best >= 17)
        return 17;
    if (json_is_real(v)) {
        double d = json_real_value(v);
        char buf[40];
        for (int p = best; p < 17; p++) {
            snprintf(buf, sizeof(buf), "%.*g", p, d);
            if (strtod(buf, NULL) == d)
                return p;
        }
        return 17;
    }
    if (json_is_object(v)) {
        const char *k;
        json_t *c;
        json_object_foreach((json_t *)v, k, c)
        {
            best = real_precision(c, best);
        }
    } else if (json_is_array(v)) {
        size_t i;
        json_t *c;
        json_array_foreach(v, i, c)
        {
            best = real_precision(c, best);
        }
    }
    return best;
}

/* Merges batch-level object `bval` into ev[name] where the event lacks keys. */
static int merge_missing(json_t *ev, const char *name, json_t *bval)
{
    if (!bval)
        return 0;
    json_t *cur = json_object_get(ev, name);
    if (!cur)
        return json_object_set_new(ev, name, json_copy(bval));
    return json_object_update_missing(cur, bval);
}

/*
 * Normalises an event that passed check_event. On success *data is the
 * compact JSON (malloc'ed) and *why NULL; a rejection sets *why instead.
 * Returns -1 only when memory ran out.
 */
static int normalise(json_t *ev, const batch_options_t *o, json_t *bsent, json_t *bctx,
                     json_t *bint, batch_event_t *out, const char **why)
{
    char now[TIMESTAMP_BUF_LEN], ts[TIMESTAMP_BUF_LEN], id[BATCH_UUID_LEN + 1];
    *why = NULL;

    if (timestamp_format(o->now_ms, now) != 0) {
        *why = "receivedAt out of range";
        return 0;
    }
    json_object_del(ev, "writeKey");
    if (o->single_type && json_object_set_new(ev, "type", json_string(o->single_type)) != 0)
        return -1;
    if (merge_missing(ev, "context", bctx) != 0 || merge_missing(ev, "integrations", bint) != 0)
        return -1;

    json_t *mid = json_object_get(ev, "messageId");
    if (!mid) {
        (o->uuid ? o->uuid : batch_uuid_v4)(id, o->uuid_arg);
        if (json_object_set_new(ev, "messageId", json_string(id)) != 0)
            return -1;
        mid = json_object_get(ev, "messageId");
    }
    if (json_object_set_new(ev, "receivedAt", json_string(now)) != 0 ||
        json_object_set_new(ev, "source", json_string(o->source)) != 0)
        return -1;

    json_t *sent = json_object_get(ev, "sentAt");
    if (!sent && bsent) {
        if (json_object_set(ev, "sentAt", bsent) != 0)
            return -1;
        sent = bsent;
    }

    json_t *tsv = json_object_get(ev, "timestamp");
    if (tsv) {
        int64_t orig = 0, sent_ms = 0, t;
        timestamp_parse(json_string_value(tsv), json_string_length(tsv), &orig);
        /* Segment's clock-skew correction: the client's clock is off by (sentAt - now), so
         * shift its timestamp by that; without sentAt the client's clock is taken as is. */
        if (sent) {
            timestamp_parse(json_string_value(sent), json_string_length(sent), &sent_ms);
            t = o->now_ms - (sent_ms - orig);
        } else {
            t = orig;
        }
        if (timestamp_format(t, ts) != 0) {
            *why = "timestamp out of range";
            return 0;
        }
        if (json_object_set(ev, "originalTimestamp", tsv) != 0 ||
            json_object_set_new(ev, "timestamp", json_string(ts)) != 0)
            return -1;
    } else if (json_object_set_new(ev, "timestamp", json_string(now)) != 0) {
        return -1;
    }

    size_t flags = JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(real_precision(ev, 15));
    char *data = json_dumps(ev, flags);
    if (!data)
        return -1;
    size_t len = strlen(data);
    if (len > API_MAX_EVENT_BYTES) {
        free(data);
        *why = "event too large";
        return 0;
    }
    keyhash(o->secret, o->source, strlen(o->source), json_string_value(mid),
            json_string_length(mid), out->key);
    out->data = data;
    out->len = len;
    return 0;
}

static int batch_level(json_t *root, json_t **bsent, json_t **bctx, json_t **bint,
                       batch_error_t *err)
{
    int64_t ms;
    *bsent = json_object_get(root, "sentAt");
    *bctx = json_object_get(root, "context");
    *bint = json_object_get(root, "integrations");
    if (*bsent && !iso_ok(*bsent, &ms)) {
        seterr(err, "sentAt must be an ISO-8601 string");
        return BATCH_BAD_REQUEST;
    }
    if (*bctx && !json_is_object(*bctx)) {
        seterr(err, "context must be an object");
        return BATCH_BAD_REQUEST;
    }
    if (*bint && !json_is_object(*bint)) {
        seterr(err, "integrations must be an object");
        return BATCH_BAD_REQUEST;
    }
    return BATCH_OK;
}

int batch_build(json_t *root, const batch_options_t *o, batch_t *out, batch_error_t *err)
{
    json_t *list = NULL, *bsent = NULL, *bctx = NULL, *bint = NULL;
    size_t n = 1;
    int rc;

    memset(out, 0, sizeof(*out));
    if (!json_is_object(root)) {
        seterr(err, "body must be a JSON object");
        return BATCH_BAD_REQUEST;
    }
    if (!o->single_type) {
        list = json_object_get(root, "batch");
        if (!json_is_array(list)) {
            seterr(err, "batch must be an array");
            return BATCH_BAD_REQUEST;
        }
        n = json_array_size(list);
        if (n == 0) {
            seterr(err, "batch is empty");
            return BATCH_BAD_REQUEST;
        }
        if (n > API_MAX_BATCH_EVENTS) {
            seterr(err, "too many events in batch (max 2500)");
            return BATCH_BAD_REQUEST;
        }
        if ((rc = batch_level(root, &bsent, &bctx, &bint, err)) != BATCH_OK)
            return rc;
    }

    out->events = calloc(n, sizeof(*out->events));
    out->rejected = calloc(n, sizeof(*out->rejected));
    if (!out->events || !out->rejected)
        goto nomem;
    for (size_t i = 0; i < n; i++) {
        json_t *ev = list ? json_array_get(list, i) : root;
        const char *why = check_event(ev, o->single_type);
        batch_event_t *be = &out->events[out->nevents];
        if (!why && normalise(ev, o, bsent, bctx, bint, be, &why) != 0)
            goto nomem;
        if (why) {
            out->rejected[out->nrejected].index = i;
            out->rejected[out->nrejected].error = why;
            out->nrejected++;
        } else {
            be->index = i;
            out->nevents++;
        }
    }
    return BATCH_OK;
nomem:
    batch_clear(out);
    seterr(err, "out of memory");
    return BATCH_NOMEM;
}
