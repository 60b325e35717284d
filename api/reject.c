/* reject: refusals counted by reason and kept in the quarantine (GET /v1/log?log=rejected). */
#include "api/internal.h"

#include <stdlib.h>
#include <string.h>

#include "api/auth.h"

/* The reasons of ingestd_events_rejected_total, in the order of api->by_reason. A small fixed
 * set: a label per sentence would give Prometheus an unbounded series count. docs/operations.md
 * lists them. */
static const char *const REASONS[API_REASONS] = {
    "invalid_json",
    "not_object",
    "missing_field",
    "bad_type",
    "bad_value",
    "too_large",
    "batch_too_large",
    API_REASON_REQUEST_TOO_LARGE,
    API_REASON_BAD_ENCODING,
    "bad_content_type",
    "other",
};

/* Sentences of batch.c and ingest.c to reasons: the first entry whose text the sentence holds
 * wins, so the more specific comes first. */
static const struct {
    const char *text;
    const char *reason;
} MAP[] = {
    {"invalid JSON", "invalid_json"},
    {"body is empty", "invalid_json"},
    {"must be a JSON object", "not_object"},
    {"event too large", "too_large"},
    {"too many events", "batch_too_large"},
    {"request body too large", API_REASON_REQUEST_TOO_LARGE},
    {"Content-Encoding", API_REASON_BAD_ENCODING},
    {"gzip", API_REASON_BAD_ENCODING},
    {"Content-Type", "bad_content_type"},
    {"non-empty string for track", "missing_field"},
    {"is required", "missing_field"},
    {"is empty", "missing_field"},
    {"must be a string or number", "bad_type"},
    {"must be a non-empty string", "bad_type"},
    {"must be an object", "bad_type"},
    {"must be an array", "bad_type"},
    {"must be one of", "bad_value"},
    {"does not match", "bad_value"},
    {"ISO-8601", "bad_value"},
    {"out of range", "bad_value"},
    {"longer than", "bad_value"},
};

void api_reject_init(api_t *api, const api_options_t *opts)
{
    api->quarantine = opts->quarantine;
    for (size_t i = 0; i < API_REASONS; i++)
        atomic_init(&api->by_reason[i], 0);
}

const char *api_reject_reason(const char *error)
{
    for (size_t i = 0; error && i < sizeof(MAP) / sizeof(MAP[0]); i++)
        if (strstr(error, MAP[i].text))
            return MAP[i].reason;
    return "other";
}

static void count(api_t *api, const char *reason)
{
    for (size_t i = 0; i < API_REASONS; i++) {
        if (strcmp(REASONS[i], reason) == 0) {
            atomic_fetch_add_explicit(&api->by_reason[i], 1, memory_order_relaxed);
            return;
        }
    }
    atomic_fetch_add_explicit(&api->by_reason[API_REASONS - 1], 1, memory_order_relaxed);
}

/* Counts, and queues the record when there is a quarantine (a full queue counts a drop). */
static void keep(api_t *api, const api_req_t *req, const char *reason, const char *error,
                 const char *source, int64_t index, const char *raw, size_t len, uint64_t total,
                 size_t cap)
{
    count(api, reason);
    if (!api->quarantine)
        return;
    quarantine_entry_t e = {
        .reason = reason,
        .error = error,
        .request_id = req->request_id,
        .source = source,
        .received_ms = req->now_ms,
        .index = index,
        .raw = len > 0 ? raw : NULL,
        .raw_len = raw ? len : 0,
        .raw_cap = cap,
        .size = total,
    };
    (void)quarantine_add(api->quarantine, &e);
}

void api_reject_event(api_t *api, const api_req_t *req, const char *source, const json_t *ev,
                      size_t index, const char *error)
{
    /* The parsed event, written back compactly: the batch's own bytes of it are not kept apart
     * by the parser. Only rejected events pay for this. */
    char *raw = api->quarantine ? json_dumps(ev, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    keep(api, req, api_reject_reason(error), error, source, (int64_t)index, raw,
         raw ? strlen(raw) : 0, 0, QUARANTINE_EVENT_BYTES);
    free(raw);
}

/* The source of the key in the Authorization header; *ks holds it (release it), NULL if none. */
static const char *header_source(api_t *api, const char *authorization, auth_keyset_t **ks)
{
    char *key = NULL;
    size_t len = 0;
    const char *source = NULL;

    *ks = NULL;
    if (!authorization || auth_basic_key(authorization, &key, &len) != AUTH_OK)
        return NULL;
    *ks = api_keys_get(api);
    ratelimit_t *limit = NULL;
    const api_write_key_t *wk = auth_keyset_find(*ks, key, len, &limit);
    free(key);
    if (wk)
        source = wk->source;
    return source;
}

static void whole(api_t *api, const api_req_t *req, const char *source, const char *reason,
                  const char *error, const char *body, size_t len, uint64_t total)
{
    auth_keyset_t *ks = NULL;

    if (!source && api->quarantine)
        source = header_source(api, req->authorization, &ks);
    keep(api, req, reason, error, source, -1, body, len, total, QUARANTINE_REQUEST_BYTES);
    auth_keyset_release(ks);
}

void api_reject_request(api_t *api, const api_req_t *req, const char *source, const char *error)
{
    whole(api, req, source, api_reject_reason(error), error, req->body, req->body_len,
          req->body_len);
}

void api_refused_request(api_t *api, const api_req_t *req, const char *reason, const char *error,
                         const char *body, size_t len, uint64_t total)
{
    whole(api, req, NULL, reason, error, body, len, total);
}

void api_reject_metrics(api_t *api, prom_t *p)
{
    char lb[64];

    prom_head(p, "events_rejected_total", PROM_COUNTER,
              "Events and requests refused with 400, by reason (a request refused whole counts "
              "once).");
    for (size_t i = 0; i < API_REASONS; i++) {
        lb[0] = '\0';
        prom_label(lb, sizeof(lb), "reason", REASONS[i]);
        prom_sample_u64(p, "events_rejected_total", lb,
                        (uint64_t)atomic_load_explicit(&api->by_reason[i], memory_order_relaxed));
    }
    if (!api->quarantine)
        return;
    quarantine_stats_t s;
    quarantine_get_stats(api->quarantine, &s);
    prom_head(p, "quarantine_bytes", PROM_GAUGE, "Bytes of the quarantine log's segments.");
    prom_sample_u64(p, "quarantine_bytes", NULL, s.bytes);
    prom_head(p, "quarantine_records", PROM_GAUGE, "Records retained in the quarantine log.");
    prom_sample_u64(p, "quarantine_records", NULL, s.records);
    prom_head(p, "quarantine_dropped_total", PROM_COUNTER,
              "Refusals not recorded: the quarantine's queue was full.");
    prom_sample_u64(p, "quarantine_dropped_total", NULL, s.dropped);
    prom_head(p, "quarantine_failed_total", PROM_COUNTER,
              "Records lost to a failed write or fsync.");
    prom_sample_u64(p, "quarantine_failed_total", NULL, s.failed);
}

void api_reject_stats(api_t *api, json_t *j)
{
    json_t *by = json_object();
    for (size_t i = 0; by && i < API_REASONS; i++)
        json_object_set_new(by, REASONS[i],
                            json_integer((json_int_t)atomic_load_explicit(&api->by_reason[i],
                                                                          memory_order_relaxed)));
    json_t *events = json_object_get(j, "events");
    if (events)
        json_object_set_new(events, "rejected_by_reason", by);
    else
        json_decref(by);
    if (!api->quarantine) {
        json_object_set_new(j, "quarantine", json_pack("{s:b}", "enabled", 0));
        return;
    }
    quarantine_stats_t s;
    quarantine_get_stats(api->quarantine, &s);
    json_object_set_new(
        j, "quarantine",
        json_pack("{s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "enabled", 1, "bytes",
                  (json_int_t)s.bytes, "records", (json_int_t)s.records, "dropped",
                  (json_int_t)s.dropped, "failed", (json_int_t)s.failed, "deleted",
                  (json_int_t)s.deleted, "first_offset", (json_int_t)s.first_offset, "next_offset",
                  (json_int_t)s.next_offset, "max_bytes", (json_int_t)s.max_bytes, "segment_bytes",
                  (json_int_t)s.segment_bytes, "queued_bytes", (json_int_t)s.queued_bytes));
}
