/* verdict: ?verbose=true on the ingest routes: one result per input event, in order. */
#include "api/verdict.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "api/timestamp.h"

int verdict_param(const api_req_t *req, verdict_t *v, const char **error)
{
    const char *s = req->param ? req->param(req->transport, "verbose") : NULL;
    v->on = false;
    if (!s || strcmp(s, "false") == 0 || strcmp(s, "0") == 0)
        return 0;
    if (strcmp(s, "true") == 0 || strcmp(s, "1") == 0) {
        v->on = true;
        return 0;
    }
    *error = "verbose must be true or false";
    return -1;
}

int verdict_collect(verdict_t *v, const json_t *root, bool single, const batch_t *b)
{
    if (!v->on || b->nrejected == 0)
        return 0;
    v->ids = calloc(b->nrejected, sizeof(*v->ids));
    if (!v->ids)
        return -1;
    v->nrejected = b->nrejected;
    const json_t *list = single ? NULL : json_object_get(root, "batch");
    for (size_t i = 0; i < b->nrejected; i++) {
        const json_t *ev = single ? root : json_array_get(list, b->rejected[i].index);
        const json_t *mid = json_object_get(ev, "messageId");
        /* Only what could have been a messageId is echoed: not a 32 KB string. */
        if (!json_is_string(mid) || json_string_length(mid) > API_MAX_MESSAGE_ID)
            continue;
        size_t len = json_string_length(mid);
        if (!(v->ids[i].s = malloc(len + 1)))
            return -1;
        memcpy(v->ids[i].s, json_string_value(mid), len + 1);
        v->ids[i].len = len;
    }
    return 0;
}

void verdict_clear(verdict_t *v)
{
    if (!v)
        return;
    for (size_t i = 0; v->ids && i < v->nrejected; i++)
        free(v->ids[i].s);
    free(v->ids);
    memset(v, 0, sizeof(*v));
}

char *verdict_put_json_str(char *p, const char *s, size_t len)
{
    static const char HEX[] = "0123456789ABCDEF";
    *p++ = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            *p++ = '\\';
            *p++ = (char)c;
        } else if (c < 0x20) {
            memcpy(p, "\\u00", 4);
            p[4] = HEX[c >> 4];
            p[5] = HEX[c & 15];
            p += 6;
        } else {
            *p++ = (char)c;
        }
    }
    *p++ = '"';
    return p;
}

/* One accepted or duplicate entry: the verdict of a valid event. */
static char *put_event(char *p, const batch_event_t *e, const commit_event_t *ev, bool detail)
{
    p += sprintf(p, "{\"index\":%zu,\"messageId\":", e->index);
    p = verdict_put_json_str(p, e->message_id, e->message_id_len);
    if (!ev) /* the edge: handed on, de-duplicated downstream, no offset here */
        return p + sprintf(p, ",\"status\":\"accepted\"}");
    if (!detail)
        return p + sprintf(p, ",\"status\":\"%s\"}",
                           ev->result == COMMIT_DUPLICATE ? "duplicate" : "accepted");
    if (ev->result != COMMIT_DUPLICATE)
        return p + sprintf(p, ",\"status\":\"accepted\",\"offset\":%" PRIu64 "}", ev->offset);
    char when[TIMESTAMP_BUF_LEN];
    if (ev->first_received_ms == 0 || timestamp_format(ev->first_received_ms, when) != 0)
        /* Memory-filter mode: a filter knows the key was seen, not where or when. */
        return p + sprintf(p, ",\"status\":\"duplicate\",\"firstCopy\":\"unknown\"}");
    return p + sprintf(p, ",\"status\":\"duplicate\",\"offset\":%" PRIu64 ",\"receivedAt\":\"%s\"}",
                       ev->offset, when);
}

static char *put_rejected(char *p, const batch_reject_t *r, const verdict_id_t *id)
{
    p += sprintf(p, "{\"index\":%zu,\"messageId\":", r->index);
    if (id && id->s)
        p = verdict_put_json_str(p, id->s, id->len);
    else
        p += sprintf(p, "null");
    p += sprintf(p, ",\"status\":\"rejected\",\"error\":");
    p = verdict_put_json_str(p, r->error, strlen(r->error));
    *p++ = '}';
    return p;
}

/* An upper bound on the bytes of the results (each entry's fixed text is under 160 bytes). */
static size_t results_cap(const verdict_t *v, const batch_t *b)
{
    size_t cap = 32;
    for (size_t i = 0; i < b->nevents; i++)
        cap += 160 + 6 * b->events[i].message_id_len;
    for (size_t i = 0; i < b->nrejected; i++)
        cap += 160 + 6 * strlen(b->rejected[i].error) +
               (v->ids && v->ids[i].s ? 6 * v->ids[i].len : 0);
    return cap;
}

int verdict_append(api_resp_t *resp, const verdict_t *v, const batch_t *b,
                   const commit_event_t *evs)
{
    if (!v->on || resp->status != 200 || !resp->body || resp->body_len < 2 ||
        resp->body[resp->body_len - 1] != '}')
        return 0;
    /* Written directly, as the summary is: this runs on the storage writer thread. */
    size_t cap = resp->body_len + results_cap(v, b);
    char *body = malloc(cap);
    if (!body) {
        free(resp->body);
        resp->body = NULL;
        api_error(resp, 503, "out of memory, retry later");
        return -1;
    }
    memcpy(body, resp->body, resp->body_len - 1); /* the summary without its closing brace */
    char *p = body + resp->body_len - 1;
    p += sprintf(p, ",\"results\":[");
    /* Both lists are in request order: merge them by index. */
    for (size_t i = 0, j = 0; i < b->nevents || j < b->nrejected;) {
        if (i + j > 0)
            *p++ = ',';
        if (j == b->nrejected || (i < b->nevents && b->events[i].index < b->rejected[j].index)) {
            p = put_event(p, &b->events[i], evs ? &evs[i] : NULL, v->detail);
            i++;
        } else {
            p = put_rejected(p, &b->rejected[j], v->ids ? &v->ids[j] : NULL);
            j++;
        }
    }
    memcpy(p, "]}", 3);
    p += 2;
    free(resp->body);
    resp->body = body;
    resp->body_len = (size_t)(p - body);
    return 0;
}
