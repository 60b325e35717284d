/* reject: refusals counted by reason and kept in the quarantine (GET /v1/log?log=rejected). */
#include "api/internal.h"

#include <stdlib.h>
#include <string.h>

#include "api/auth.h"
#include "api/redact.h"

/* Of bytes in a content encoding (a gzip body, or one in an encoding refused as unsupported)
 * only gzip's fixed header is kept (RFC 1952: magic, method, flags, mtime, xfl, os): what follows
 * could inflate to a write key, which textual redaction cannot see. */
#define ENCODED_HEAD 10

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
    {"must not contain", "bad_value"},
};

void api_reject_init(api_t *api, const api_options_t *opts)
{
    api->quarantine = opts->quarantine;
    for (size_t i = 0; i < API_REASONS; i++)
        atomic_init(&api->by_reason[i], 0);
    atomic_init(&api->unattributed, 0);
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

/* Whether raw holds bytes in a content encoding rather than text (see ENCODED_HEAD). */
static bool encoded(const char *reason, const char *raw, size_t len)
{
    return strcmp(reason, API_REASON_BAD_ENCODING) == 0 ||
           (len >= 2 && (unsigned char)raw[0] == 0x1f && (unsigned char)raw[1] == 0x8b);
}

/* Counts, and queues the record when there is a quarantine (a full queue counts a drop). Write
 * keys never reach it: the kept bytes are redacted first (api/redact.h), and of encoded bytes
 * only a header is kept. */
static void keep(api_t *api, const api_req_t *req, const char *reason, const char *error,
                 const char *source, int64_t index, const char *raw, size_t len, uint64_t total,
                 size_t cap)
{
    char *clean = NULL;
    size_t clean_len = 0;

    count(api, reason);
    if (!api->quarantine)
        return;
    if (!raw)
        len = 0;
    if (total < len)
        total = len;
    if (len > 0 && encoded(reason, raw, len))
        cap = ENCODED_HEAD;
    if (len > cap)
        len = cap; /* what the record keeps, so redaction reads no more than that */
    if (len > 0 && redact_write_keys(raw, len, &clean, &clean_len) != 0) {
        len = 0; /* out of memory: keep no bytes rather than a key */
    } else if (clean) {
        raw = clean;
        len = clean_len;
    }
    quarantine_entry_t e = {
        .reason = reason,
        .error = error,
        .request_id = req->request_id,
        .source = source,
        .received_ms = req->now_ms,
        .index = index,
        .raw = len > 0 ? raw : NULL,
        .raw_len = len,
        .raw_cap = cap,
        .size = total,
    };
    (void)quarantine_add(api->quarantine, &e);
    free(clean);
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

/* The source of a write key, NULL when ks has no such key. */
static const char *key_source(auth_keyset_t *ks, const char *key, size_t len)
{
    ratelimit_t *limit = NULL;
    const api_write_key_t *wk = auth_keyset_find(ks, key, len, &limit);
    return wk ? wk->source : NULL;
}

/* The source of the key in the Authorization header, else of the first writeKey in the body's
 * bytes as kept (they did not parse, or were refused before parsing); NULL: no known key. */
static const char *request_source(auth_keyset_t *ks, const char *authorization, const char *body,
                                  size_t len)
{
    char *key = NULL;
    size_t klen = 0;
    const char *source = NULL;

    if (authorization && auth_basic_key(authorization, &key, &klen) == AUTH_OK) {
        source = key_source(ks, key, klen);
        free(key);
        return source;
    }
    const char *k = body ? redact_find_write_key(body, len, &klen) : NULL;
    return k ? key_source(ks, k, klen) : NULL;
}

/*
 * A request refused whole. Without a known write key (none in the header, none the body's bytes
 * name) it is only counted, by reason and in api->unattributed: a client holding no key must not
 * be able to fill the quarantine and push out everyone's records (its share is per source).
 */
static void whole(api_t *api, const api_req_t *req, const char *source, const char *reason,
                  const char *error, const char *body, size_t len, uint64_t total)
{
    auth_keyset_t *ks = NULL;

    if (!source && api->quarantine) {
        ks = api_keys_get(api);
        source = request_source(ks, req->authorization, body, len);
    }
    if (!source && api->quarantine) {
        count(api, reason);
        atomic_fetch_add_explicit(&api->unattributed, 1, memory_order_relaxed);
    } else {
        keep(api, req, reason, error, source, -1, body, len, total, QUARANTINE_REQUEST_BYTES);
    }
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
    prom_head(p, "quarantine_carried_total", PROM_COUNTER,
              "Records appended again by the size bound to keep their source's share.");
    prom_sample_u64(p, "quarantine_carried_total", NULL, s.carried);
    prom_head(p, "quarantine_unattributed_total", PROM_COUNTER,
              "Requests refused whole and not recorded: they named no known write key.");
    prom_sample_u64(p, "quarantine_unattributed_total", NULL,
                    (uint64_t)atomic_load_explicit(&api->unattributed, memory_order_relaxed));
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
    json_t *q =
        json_pack("{s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "enabled", 1, "bytes",
                  (json_int_t)s.bytes, "records", (json_int_t)s.records, "dropped",
                  (json_int_t)s.dropped, "failed", (json_int_t)s.failed, "deleted",
                  (json_int_t)s.deleted, "first_offset", (json_int_t)s.first_offset, "next_offset",
                  (json_int_t)s.next_offset, "max_bytes", (json_int_t)s.max_bytes, "segment_bytes",
                  (json_int_t)s.segment_bytes, "queued_bytes", (json_int_t)s.queued_bytes);
    json_object_set_new(q, "carried", json_integer((json_int_t)s.carried));
    json_object_set_new(q, "sources", json_integer((json_int_t)s.sources));
    json_object_set_new(
        q, "unattributed",
        json_integer((json_int_t)atomic_load_explicit(&api->unattributed, memory_order_relaxed)));
    json_object_set_new(j, "quarantine", q);
}
