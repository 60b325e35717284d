/*
 * ingest: POST routes: auth, parse, validate, group commit, answer once durable.
 *
 * The path is a straight line: each check either passes or hands back a refusal (refusal_t:
 * status, what it counts, error sentence, source when known) without answering, and one exit,
 * refuse(), answers it, counts it and records it in the quarantine (through reject.c). Events
 * rejected one by one are not refusals: the request goes on and reject_events records them.
 */
#include "api/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/auth.h"
#include "api/batch.h"
#include "api/ratelimit.h"
#include "api/verdict.h"
#include "common/clock.h"

/* One pending request: all the commit borrows lives here until the done callback frees it. */
struct pending {
    commit_req_t req;
    api_done_fn done;
    void *arg;
    batch_t batch;     /* owns the event bytes the commit events point at, and the rejected list */
    verdict_t verdict; /* ?verbose=true */
    commit_event_t events[];
};

/* What a refusal counts besides its status (api_count_response counts every answer). */
enum refusal_kind {
    REFUSAL_PLAIN,   /* nothing more: 401, storage and memory errors, a single route's bad event */
    REFUSAL_INPUT,   /* a 400 of the request whole: counted by reason and quarantined */
    REFUSAL_LIMITED, /* a 429 of the key's rate limit: rate_limited_requests and _events */
    REFUSAL_BUSY,    /* a 503 of a full commit queue: queue_full_requests and _events */
};

/* A request refused whole, as the check that refused it saw it; status 0: not refused. */
typedef struct refusal {
    int status;
    enum refusal_kind kind;
    const char *error;    /* the answer's sentence: static, or text */
    const char *source;   /* the write key's source when known (REFUSAL_INPUT), else NULL */
    size_t events;        /* events the request held (REFUSAL_LIMITED, _BUSY); 0: unknown */
    uint32_t retry_after; /* seconds for Retry-After; 0: api_error's default */
    char text[BATCH_ERR_LEN];
} refusal_t;

/* Fills *f; returns -1, what the checks return when they refuse. */
static int refused(refusal_t *f, int status, enum refusal_kind kind, const char *error,
                   const char *source)
{
    f->status = status;
    f->kind = kind;
    f->error = error;
    f->source = source;
    return -1;
}

/* A refusal whose sentence is not static: copied into f->text. */
static int refused_text(refusal_t *f, int status, enum refusal_kind kind, const char *error,
                        const char *source)
{
    snprintf(f->text, sizeof(f->text), "%s", error);
    return refused(f, status, kind, f->text, source);
}

/* A commit status (storage, memory) as a refusal. */
static int refused_commit(refusal_t *f, int commit_status)
{
    const char *error = NULL;
    int status = api_commit_http(commit_status, &error);
    return refused(f, status, REFUSAL_PLAIN, error, NULL);
}

/* 429 for a key whose bucket has no room for `events` (0: not counted yet), or 503 for a full
 * commit queue: both counted with the events the refused request held. */
static int refused_limit(refusal_t *f, enum refusal_kind kind, uint32_t retry_after_s,
                         size_t events)
{
    f->events = events;
    f->retry_after = retry_after_s;
    if (kind == REFUSAL_LIMITED)
        return refused(f, 429, kind, "rate limit of this write key exceeded, retry later", NULL);
    return refused(f, 503, kind, "server busy: too many events waiting to be written, retry later",
                   NULL);
}

/* The one exit of a refused request: counts it, records it (reject.c) and answers it in *resp.
 * req may be NULL unless f is a REFUSAL_INPUT. Returns API_DONE. */
static int refuse(api_t *api, const api_req_t *req, const refusal_t *f, api_resp_t *resp)
{
    switch (f->kind) {
    case REFUSAL_LIMITED:
        atomic_fetch_add_explicit(&api->rate_limited_requests, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&api->rate_limited_events, f->events, memory_order_relaxed);
        break;
    case REFUSAL_BUSY:
        atomic_fetch_add_explicit(&api->queue_full_requests, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&api->queue_full_events, f->events, memory_order_relaxed);
        break;
    case REFUSAL_INPUT:
        api_reject_request(api, req, f->source, f->error);
        break;
    case REFUSAL_PLAIN:
        break;
    }
    api_error(resp, f->status, f->error);
    if (f->retry_after > 0)
        resp->retry_after = (int)f->retry_after;
    return API_DONE;
}

int api_content_type_ok(const char *ct)
{
    static const char *const OK[] = {"application/json", "text/plain",
                                     "application/x-www-form-urlencoded"};
    if (!ct)
        return 1;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    size_t len = strcspn(ct, ";");
    while (len > 0 && (ct[len - 1] == ' ' || ct[len - 1] == '\t'))
        len--;
    if (len == 0)
        return 1;
    for (size_t i = 0; i < sizeof(OK) / sizeof(OK[0]); i++)
        if (strlen(OK[i]) == len && strncasecmp(OK[i], ct, len) == 0)
            return 1;
    return 0;
}

/*
 * The key of the Authorization header in `ks`: 0 with *found (NULL when the
 * header names none) and *limit (its bucket, NULL when not limited), or -1
 * with a 401/503 in *f.
 */
static int header_key(auth_keyset_t *ks, const char *authorization, const api_write_key_t **found,
                      ratelimit_t **limit, refusal_t *f)
{
    char *key = NULL;
    size_t len = 0;

    *found = NULL;
    *limit = NULL;
    switch (auth_basic_key(authorization, &key, &len)) {
    case AUTH_OK:
        *found = auth_keyset_find(ks, key, len, limit);
        free(key);
        if (!*found)
            return refused(f, 401, REFUSAL_PLAIN, "unknown write key", NULL);
        return 0;
    case AUTH_NONE:
        return 0;
    case AUTH_MALFORMED:
        return refused(f, 401, REFUSAL_PLAIN, "malformed Authorization header", NULL);
    default:
        return refused_commit(f, COMMIT_NOMEM);
    }
}

/*
 * Refusals that need no body: a key whose bucket is empty (429) or a full commit queue (503).
 * Returns 0, or -1 with *f filled.
 */
static int early_limits(api_t *api, ratelimit_t *limit, refusal_t *f)
{
    uint32_t wait = 0;
    if (limit && ratelimit_check(limit, clk_mono_ms(), &wait) != RATELIMIT_OK)
        return refused_limit(f, REFUSAL_LIMITED, wait, 0);
    if (api->commit && commit_busy(api->commit))
        return refused_limit(f, REFUSAL_BUSY, 0, 0);
    return 0;
}

int api_header_auth(api_t *api, const char *authorization, api_resp_t *resp)
{
    const api_write_key_t *found = NULL;
    ratelimit_t *limit = NULL;
    refusal_t f = {0};
    auth_keyset_t *ks = api_keys_get(api);
    int rc = header_key(ks, authorization, &found, &limit, &f);
    if (rc == 0)
        rc = early_limits(api, limit, &f);
    auth_keyset_release(ks);
    if (rc != 0)
        refuse(api, NULL, &f, resp); /* no REFUSAL_INPUT here: nothing needs the request */
    return rc;
}

/*
 * 200 {"success":true,"accepted":A,"duplicates":D,"rejected":[...]}, the bytes json_pack +
 * json_dumps made, written directly: this runs on the storage writer thread for every request.
 */
static void success(api_resp_t *resp, size_t accepted, size_t duplicates, const batch_t *b)
{
    /* The fixed text, two 20-digit counts and "]}\0" take 97 bytes; a rejection at most 42 plus
     * its reason escaped (6 bytes a character at worst). */
    size_t cap = 128;
    for (size_t i = 0; i < b->nrejected; i++)
        cap += 48 + 6 * strlen(b->rejected[i].error);
    char *body = malloc(cap);
    if (!body) {
        api_error(resp, 503, "out of memory, retry later");
        return;
    }
    char *p =
        body + sprintf(body, "{\"success\":true,\"accepted\":%zu,\"duplicates\":%zu,\"rejected\":[",
                       accepted, duplicates);
    for (size_t i = 0; i < b->nrejected; i++) {
        p += sprintf(p, "%s{\"index\":%zu,\"error\":", i ? "," : "", b->rejected[i].index);
        p = verdict_put_json_str(p, b->rejected[i].error, strlen(b->rejected[i].error));
        *p++ = '}';
    }
    memcpy(p, "]}", 3);
    p += 2;
    memset(resp, 0, sizeof(*resp));
    resp->status = 200;
    resp->content_type = "application/json";
    resp->body = body;
    resp->body_len = (size_t)(p - body);
}

/* Runs on the storage writer thread once the request's events are durable (or failed). */
static void committed(commit_req_t *req, void *arg)
{
    struct pending *p = arg;
    api_resp_t resp;
    (void)req;

    if (p->req.status != COMMIT_OK) {
        /* Nothing of this request was kept: the client must retry all of it. */
        api_error_commit(&resp, p->req.status);
    } else {
        size_t accepted = 0, duplicates = 0;
        for (size_t i = 0; i < p->req.n; i++) {
            if (p->events[i].result == COMMIT_DUPLICATE)
                duplicates++;
            else
                accepted++;
        }
        success(&resp, accepted, duplicates, &p->batch);
        verdict_append(&resp, &p->verdict, &p->batch, p->events);
    }
    p->done(&resp, p->arg);
    free(resp.body);
    batch_clear(&p->batch);
    verdict_clear(&p->verdict);
    free(p);
}

/* Hands b's events to the group commit: API_PENDING (done will answer), or API_DONE with *f. */
static int submit(api_t *api, const api_req_t *req, batch_t *b, verdict_t *vd, refusal_t *f,
                  api_done_fn done, void *arg)
{
    struct pending *p = calloc(1, sizeof(*p) + b->nevents * sizeof(p->events[0]));
    if (!p) {
        refused_commit(f, COMMIT_NOMEM);
        return API_DONE;
    }
    for (size_t i = 0; i < b->nevents; i++) {
        commit_event_t *e = &p->events[i];
        memcpy(e->key, b->events[i].key, sizeof(e->key));
        e->received_ms = req->now_ms;
        e->data = b->events[i].data;
        e->len = (uint32_t)b->events[i].len;
    }
    p->req.events = p->events;
    p->req.n = b->nevents;
    p->req.done = committed;
    p->req.arg = p;
    p->done = done;
    p->arg = arg;
    p->batch = *b;
    memset(b, 0, sizeof(*b));
    p->verdict = *vd;
    memset(vd, 0, sizeof(*vd));

    /* The sealed generations' filters, asked here on this request's thread, not the writer's. */
    commit_prepare(api->commit, p->events, b->nevents);
    int rc = commit_submit(api->commit, &p->req);
    if (rc != COMMIT_OK) {
        /* Not queued, so the callback will not run: refuse and free here. */
        if (rc == COMMIT_BUSY)
            refused_limit(f, REFUSAL_BUSY, 0, p->req.n);
        else
            refused_commit(f, rc);
        batch_clear(&p->batch);
        verdict_clear(&p->verdict);
        free(p);
        return API_DONE;
    }
    /* From here the writer thread owns p and may already have freed it. */
    return API_PENDING;
}

/* A request whose events went to the sink: what its answer needs until the sink reports. */
struct sink_pending {
    api_t *api;
    api_done_fn done;
    void *arg;
    batch_t batch; /* the rejected list for the 200 */
    verdict_t verdict;
    size_t n;
};

/* The sink's report, on whatever thread it runs on: answer the request. */
static void sink_done(const char *error, void *arg)
{
    struct sink_pending *p = arg;
    api_resp_t resp;

    if (error) {
        /* Nothing of it counts as stored: the client retries the whole request. */
        api_error(&resp, 503, error);
    } else {
        atomic_fetch_add_explicit(&p->api->sink_accepted, p->n, memory_order_relaxed);
        /* Duplicates are decided downstream (the workers): every valid event is accepted here. */
        success(&resp, p->n, 0, &p->batch);
        verdict_append(&resp, &p->verdict, &p->batch, NULL); /* accepted, without offsets */
    }
    p->done(&resp, p->arg);
    free(resp.body);
    batch_clear(&p->batch);
    verdict_clear(&p->verdict);
    free(p);
}

/* Hands b's events to the sink (the edge role): API_PENDING, or API_DONE with *f. */
static int sink_submit(api_t *api, const api_req_t *req, const char *source, batch_t *b,
                       verdict_t *vd, refusal_t *f, api_done_fn done, void *arg)
{
    struct sink_pending *p = calloc(1, sizeof(*p));
    api_sink_event_t *evs = calloc(b->nevents, sizeof(*evs));
    if (!p || !evs) {
        free(p);
        free(evs);
        refused_commit(f, COMMIT_NOMEM);
        return API_DONE;
    }
    for (size_t i = 0; i < b->nevents; i++) {
        const batch_event_t *e = &b->events[i];
        evs[i] =
            (api_sink_event_t){e->data, e->len, e->message_id, e->message_id_len, e->timestamp_ms};
    }
    p->api = api;
    p->done = done;
    p->arg = arg;
    p->n = b->nevents;
    /* The events are only borrowed during submit, so the batch itself may go with p. */
    p->batch = *b;
    memset(b, 0, sizeof(*b));
    p->verdict = *vd;
    memset(vd, 0, sizeof(*vd));
    int rc = api->sink.submit(api->sink.ctx, source, req->now_ms, evs, p->n, sink_done, p);
    free(evs);
    if (rc != 0) {
        /* Refused at once: sink_done will not run. */
        refused(f, 503, REFUSAL_PLAIN, "events could not be handed on now, retry later", NULL);
        batch_clear(&p->batch);
        verdict_clear(&p->verdict);
        free(p);
        return API_DONE;
    }
    /* p is sink_done's now, and may be gone already. */
    return API_PENDING;
}

/* Refusals by the request line and headers alone: ?verbose, Content-Type and size (400). 0, or -1
 * with *f. */
static int precheck(const api_req_t *req, verdict_t *vd, refusal_t *f)
{
    const char *error = NULL;

    if (verdict_param(req, vd, &error) != 0)
        return refused(f, 400, REFUSAL_PLAIN, error, NULL);
    if (!api_content_type_ok(req->content_type))
        return refused(f, 400, REFUSAL_INPUT, "unsupported Content-Type", NULL);
    if (req->body_len > API_MAX_REQUEST_BYTES) {
        snprintf(f->text, sizeof(f->text), "request body too large (max %d bytes)",
                 API_MAX_REQUEST_BYTES);
        return refused(f, 400, REFUSAL_INPUT, f->text, NULL);
    }
    return 0;
}

/* The body parsed into *root (its spans and arena too), or -1 with *f. wk: the header's key,
 * NULL when it named none. */
static int parse(const api_req_t *req, const api_write_key_t *wk, json_t **root,
                 jsonparse_spans_t **spans, jsonparse_arena_t **arena, refusal_t *f)
{
    batch_error_t err = {{0}};
    int prc = batch_parse_spans(req->body, req->body_len, root, spans, arena, &err);
    if (prc == BATCH_NOMEM)
        return refused_commit(f, COMMIT_NOMEM);
    if (prc != BATCH_OK)
        return refused_text(f, 400, REFUSAL_INPUT, err.text, wk ? wk->source : NULL);
    return 0;
}

/* Without a key in the header, the body's writeKey: 0 with *wk and *limit, or -1 with a 401. */
static int body_key(auth_keyset_t *ks, const json_t *root, const api_write_key_t **wk,
                    ratelimit_t **limit, refusal_t *f)
{
    size_t klen = 0;

    if (*wk)
        return 0;
    const char *k = batch_write_key(root, &klen);
    if (!k)
        return refused(f, 401, REFUSAL_PLAIN, "missing write key", NULL);
    *wk = auth_keyset_find(ks, k, klen, limit);
    if (!*wk)
        return refused(f, 401, REFUSAL_PLAIN, "unknown write key", NULL);
    return 0;
}

/* The normalized events of the parsed request into *b, and what ?verbose=true needs into *vd.
 * 0, or -1 with a 400 or 503 in *f. */
static int build(api_t *api, const api_req_t *req, const char *single_type, json_t *root,
                 const jsonparse_spans_t *spans, const api_write_key_t *wk, batch_t *b,
                 verdict_t *vd, refusal_t *f)
{
    batch_error_t err = {{0}};
    batch_options_t o = {
        .single_type = single_type,
        .source = wk->source,
        .secret = api->commit ? commit_secret(api->commit) : NULL, /* edge: no dedupe key */
        .now_ms = req->now_ms,
        .sent_at_header = req->sent_at,
        .size_hint = req->body_len,
        .client_ip = req->client_ip,
        .spans = spans,
    };
    int brc = batch_build(root, &o, b, &err);
    if (brc == BATCH_BAD_REQUEST)
        return refused_text(f, 400, REFUSAL_INPUT, err.text, wk->source);
    if (brc != BATCH_OK || verdict_collect(vd, root, single_type != NULL, b) != 0)
        return refused_commit(f, COMMIT_NOMEM);
    return 0;
}

/* Counts and records (quarantine) the events of b rejected one by one. */
static void reject_events(api_t *api, const api_req_t *req, const char *source,
                          const char *single_type, json_t *root, const batch_t *b)
{
    atomic_fetch_add_explicit(&api->rejected, b->nrejected, memory_order_relaxed);
    for (size_t i = 0; i < b->nrejected; i++) {
        json_t *ev = single_type
                         ? root
                         : json_array_get(json_object_get(root, "batch"), b->rejected[i].index);
        api_reject_event(api, req, source, ev, b->rejected[i].index, b->rejected[i].error);
    }
}

/* Frees the request's tree (in its arena, or an ordinary one) and its spans; NULLs them. */
static void drop_tree(json_t **root, jsonparse_spans_t **spans, jsonparse_arena_t **arena)
{
    if (*arena)
        jsonparse_arena_free(*arena);
    else
        json_decref(*root);
    jsonparse_spans_free(*spans);
    *root = NULL;
    *spans = NULL;
    *arena = NULL;
}

int api_ingest(api_t *api, const api_req_t *req, const char *single_type, api_resp_t *resp,
               api_done_fn done, void *arg)
{
    const api_write_key_t *wk = NULL;
    ratelimit_t *limit = NULL;
    auth_keyset_t *ks = NULL;
    json_t *root = NULL;
    jsonparse_spans_t *spans = NULL;
    jsonparse_arena_t *arena = NULL; /* holds root when set: freed whole, never json_decref'd */
    batch_t b = {0};
    verdict_t vd = {0};
    refusal_t f = {0};
    int rc = API_DONE;

    if (precheck(req, &vd, &f) != 0)
        goto out;
    vd.detail = vd.on && api_admin_ok(api, req->authorization);
    /* One key set for the whole request, even if a reload swaps it meanwhile. */
    ks = api_keys_get(api);
    if (header_key(ks, req->authorization, &wk, &limit, &f) != 0 ||
        early_limits(api, limit, &f) != 0 || parse(req, wk, &root, &spans, &arena, &f) != 0)
        goto out;
    /* wk is set after body_key: by header_key(), or from the body's writeKey (else a 401). */
    if (body_key(ks, root, &wk, &limit, &f) != 0 ||
        build(api, req, single_type, root, spans, wk, &b, &vd, &f) != 0)
        goto out;
    /* Every event of the request counts, valid or not, and all of them or none are taken: a
     * refused request leaves nothing behind, so its retry is exactly the same request. */
    size_t nall = b.nevents + b.nrejected;
    uint32_t wait = 0;
    if (limit && ratelimit_take(limit, nall, clk_mono_ms(), &wait) != RATELIMIT_OK) {
        refused_limit(&f, REFUSAL_LIMITED, wait, nall);
        goto out;
    }
    reject_events(api, req, wk->source, single_type, root, &b);
    /* The parsed tree is no longer needed: the events are serialised; drop it before waiting. */
    drop_tree(&root, &spans, &arena);
    if (single_type && b.nrejected > 0) {
        /* Its one event is recorded already (reject_events): not again as a request. */
        refused(&f, 400, REFUSAL_PLAIN, b.rejected[0].error, NULL);
        goto out;
    }
    if (b.nevents == 0) {
        success(resp, 0, 0, &b);
        verdict_append(resp, &vd, &b, NULL);
        goto out;
    }
    rc = api->has_sink ? sink_submit(api, req, wk->source, &b, &vd, &f, done, arg)
                       : submit(api, req, &b, &vd, &f, done, arg);
    if (rc == API_DONE && limit) {
        /* Not queued (503): the retry will pay for these events, so this attempt must not. */
        ratelimit_give_back(limit, nall, clk_mono_ms());
    }
out:
    if (f.status != 0)
        rc = refuse(api, req, &f, resp);
    drop_tree(&root, &spans, &arena);
    batch_clear(&b);
    verdict_clear(&vd);
    auth_keyset_release(ks);
    return rc;
}
