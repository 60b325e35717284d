/* lookup: GET /v1/events/{messageId}: was this messageId seen inside the window, and where is it.
 */
#include "api/lookup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "api/timestamp.h"
#include "storage/log/log.h"

#define JSON_FLAGS (JSON_COMPACT | JSON_PRESERVE_ORDER)

const char *api_lookup_check_id(const char *id, size_t id_len)
{
    if (id_len == 0)
        return "empty messageId (GET /v1/events/{messageId})";
    if (id_len > API_MAX_MESSAGE_ID)
        return "messageId longer than 256 bytes: no event can have it";
    if (memchr(id, '\0', id_len))
        return "NUL byte in the messageId: no event can have it";
    json_t *s = json_stringn(id, id_len); /* NULL: not UTF-8, which no logged messageId is */
    if (!s)
        return "messageId is not valid UTF-8";
    json_decref(s);
    return NULL;
}

/* `ms` as an ISO time string, or JSON null when 0 or unformattable. */
static json_t *iso_or_null(int64_t ms)
{
    char buf[TIMESTAMP_BUF_LEN];
    if (ms == 0 || timestamp_format(ms, buf) != 0)
        return json_null();
    return json_string(buf);
}

/*
 * The record at `offset` as a JSON value: the event, or NULL with *reason
 * set when the log no longer holds it (or cannot be read now).
 */
static json_t *read_event(const char *log_dir, uint64_t offset, uint64_t limit, char *reason,
                          size_t rlen)
{
    log_reader_t *r = NULL;
    log_record_t rec;
    json_t *ev = NULL;

    int rc = offset < limit ? log_reader_open(log_dir, offset, &r) : LOG_END;
    if (rc == LOG_OK)
        rc = log_reader_next(r, offset + 1, &rec);
    if (rc == LOG_OK && rec.offset == offset) {
        ev = json_loadb(rec.data, rec.len, 0, NULL);
        if (!ev)
            snprintf(reason, rlen, "the log record at offset %llu is not JSON",
                     (unsigned long long)offset);
    } else if (rc == LOG_INVALID) {
        snprintf(reason, rlen,
                 "log retention deleted the segment holding offset %llu (--log-retention, "
                 "--log-max-bytes); the key is still inside the window",
                 (unsigned long long)offset);
    } else {
        snprintf(reason, rlen, "the log record at offset %llu cannot be read now: %s",
                 (unsigned long long)offset, rc == LOG_OK ? "offset mismatch" : log_strerror(rc));
    }
    log_reader_close(r);
    return ev;
}

char *api_lookup_body(const char *id, size_t id_len, const char *source, const commit_lookup_t *res,
                      const char *log_dir, uint64_t limit, int *status)
{
    json_t *j;
    char reason[256] = "";

    if (!res->found) {
        *status = 404;
        j = json_pack("{s:s, s:s%, s:s, s:o}", "status", "unseen", "messageId", id, id_len,
                      "source", source, "window_start", iso_or_null(res->window_start_ms));
    } else {
        *status = 200;
        json_t *ev = read_event(log_dir, res->offset, limit, reason, sizeof(reason));
        j = json_pack("{s:s%, s:s, s:s, s:I, s:o, s:o}", "messageId", id, id_len, "source", source,
                      "status", "seen", "offset", (json_int_t)res->offset, "receivedAt",
                      iso_or_null(res->received_ms), "event", ev ? ev : json_null());
        if (j && !ev && json_object_set_new(j, "reason", json_string(reason)) != 0) {
            json_decref(j);
            j = NULL;
        }
    }
    char *s = j ? json_dumps(j, JSON_FLAGS) : NULL;
    json_decref(j);
    return s;
}

char *api_lookup_error_body(const char *id, size_t id_len, const char *msg)
{
    json_t *j = json_pack("{s:b, s:s, s:s%}", "success", 0, "error", msg, "messageId", id, id_len);
    if (!j) /* an id that is no string (not UTF-8): the error alone */
        j = json_pack("{s:b, s:s}", "success", 0, "error", msg);
    char *s = j ? json_dumps(j, JSON_FLAGS) : NULL;
    json_decref(j);
    return s;
}

int api_lookup_route(api_t *api, const api_req_t *req, api_resp_t *resp)
{
    uint8_t key[KEYHASH_LEN];
    commit_lookup_t res;
    const char *id = req->path + strlen(API_LOOKUP_PREFIX);
    size_t id_len = strlen(id);
    const char *source = req->param ? req->param(req->transport, "source") : NULL;

    if (api_admin_auth(api, req->authorization, resp) != 0)
        return API_DONE;
    const char *why = api_lookup_check_id(id, id_len);
    if (why) {
        api_error(resp, 400, why);
        return API_DONE;
    }
    if (!source)
        source = "default";
    size_t slen = strlen(source);
    if (slen == 0 || slen > API_LOOKUP_SOURCE_MAX) {
        api_error(resp, 400, "source must be 1..256 bytes");
        return API_DONE;
    }
    /* An unknown source is only a name hashed into the key: its ids are unseen, like any other. */
    keyhash(commit_secret(api->commit), source, slen, id, id_len, key);
    int rc = commit_lookup(api->commit, key, &res);
    if (rc == COMMIT_UNSUPPORTED) {
        api_error(resp, 501,
                  "lookup needs the LMDB store: with --memory-filter the filter keeps no key's "
                  "log position");
        return API_DONE;
    }
    if (rc != COMMIT_OK) {
        api_error_commit(resp, rc);
        return API_DONE;
    }
    int status = 500;
    char *body = api_lookup_body(id, id_len, source, &res, commit_log_dir(api->commit),
                                 commit_committed_offset(api->commit), &status);
    if (!body) {
        api_error(resp, 503, "out of memory, retry later");
        return API_DONE;
    }
    memset(resp, 0, sizeof(*resp));
    resp->status = status;
    resp->content_type = "application/json";
    resp->body = body;
    resp->body_len = strlen(body);
    return API_DONE;
}
