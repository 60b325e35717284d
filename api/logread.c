/* logread: GET /v1/log, committed log records as NDJSON for consumers, with long-polling. */
#include "api/internal.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "storage/log/log.h"

/*
 * A parked long-poll. It lives from commit_watch() until its watch fires (the
 * writer calls every watch at the latest in commit_close()), which frees it.
 * `answered` makes sure done runs once although both the watch and
 * api_quiesce() may try.
 */
struct api_poll {
    api_t *api;
    api_done_fn done;
    void *arg;
    bool answered;
    struct api_poll *prev, *next; /* api->polls, under api->polls_mu */
};

/*
 * A query parameter as a plain decimal number in [lo, hi]. Returns 1 when
 * present and valid, 0 when absent, -1 (with a 400 in *resp) otherwise.
 */
static int param_u64(const api_req_t *req, const char *name, uint64_t lo, uint64_t hi, uint64_t *v,
                     api_resp_t *resp)
{
    const char *s = req->param ? req->param(req->transport, name) : NULL;
    uint64_t n = 0;
    char msg[128];

    if (!s)
        return 0;
    const char *p = s;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (n > (UINT64_MAX - d) / 10)
            break;
        n = n * 10 + d;
    }
    if (p == s || *p != '\0' || n < lo || n > hi) {
        snprintf(msg, sizeof(msg), "invalid %s: expected a whole number %" PRIu64 "..%" PRIu64,
                 name, lo, hi);
        api_error(resp, 400, msg);
        return -1;
    }
    *v = n;
    return 1;
}

static void offsets_headers(api_resp_t *resp, uint64_t next, uint64_t first)
{
    api_resp_header(resp, "Next-Offset", "%" PRIu64, next);
    api_resp_header(resp, "First-Offset", "%" PRIu64, first);
}

/* 416: `from` is not (or no longer) readable; the body says where the log starts and ends. */
static void out_of_range(api_resp_t *resp, uint64_t from, uint64_t first, uint64_t committed)
{
    char msg[160];

    if (from < first)
        snprintf(msg, sizeof(msg),
                 "offset %" PRIu64 " is no longer retained (the log starts at %" PRIu64 ")", from,
                 first);
    else
        snprintf(msg, sizeof(msg),
                 "offset %" PRIu64 " is beyond the end of the log (next offset %" PRIu64 ")", from,
                 committed);
    json_t *j = json_pack("{s:b, s:s, s:I, s:I}", "success", 0, "error", msg, "first_offset",
                          (json_int_t)first, "next_offset", (json_int_t)committed);
    if (api_resp_json(resp, 416, j) != 0)
        return;
    offsets_headers(resp, committed, first);
}

/* 200 with the NDJSON in `body` (taken; may be NULL when len is 0). */
static void ndjson(api_resp_t *resp, char *body, size_t len, uint64_t next, uint64_t first)
{
    memset(resp, 0, sizeof(*resp));
    resp->status = 200;
    resp->content_type = "application/x-ndjson";
    resp->body = body;
    resp->body_len = len;
    offsets_headers(resp, next, first);
}

static void log_error(api_resp_t *resp, int status)
{
    if (status == LOG_NOMEM)
        api_error(resp, 503, "out of memory, retry later");
    else if (status == LOG_EIO)
        api_error(resp, 503, "log unavailable, retry later");
    else
        api_error(resp, 500, "the log cannot be read here (see the server log, ingestd check)");
}

static void poll_unlink(api_t *api, struct api_poll *p)
{
    if (p->prev)
        p->prev->next = p->next;
    else
        api->polls = p->next;
    if (p->next)
        p->next->prev = p->prev;
    p->prev = p->next = NULL;
}

static void retry(api_done_fn done, void *arg)
{
    api_resp_t resp;

    memset(&resp, 0, sizeof(resp));
    resp.status = API_RETRY_STATUS;
    done(&resp, arg);
}

/* The watch fired (new records, deadline, or commit_close): on the writer thread, no I/O here. */
static void on_watch(void *arg)
{
    struct api_poll *p = arg;
    api_t *api = p->api;

    pthread_mutex_lock(&api->polls_mu);
    poll_unlink(api, p);
    bool answered = p->answered;
    p->answered = true;
    pthread_mutex_unlock(&api->polls_mu);
    if (!answered)
        retry(p->done, p->arg);
    free(p);
}

void api_quiesce(api_t *api)
{
    if (!api)
        return;
    /* Set under the lock park() lists polls with: a poll is either listed here or sees it. */
    pthread_mutex_lock(&api->polls_mu);
    atomic_store(&api->quiescing, true);
    pthread_mutex_unlock(&api->polls_mu);
    /* One at a time, done called outside the lock: done resumes a connection, and the watch may
     * free a poll as soon as the lock is released, so take what done needs first. */
    for (;;) {
        api_done_fn done = NULL;
        void *arg = NULL;
        pthread_mutex_lock(&api->polls_mu);
        for (struct api_poll *p = api->polls; p; p = p->next) {
            if (!p->answered) {
                p->answered = true;
                done = p->done;
                arg = p->arg;
                break;
            }
        }
        pthread_mutex_unlock(&api->polls_mu);
        if (!done)
            return;
        retry(done, arg);
    }
}

/*
 * Parks the request until a record at `from` is committed or deadline_ms
 * passes. Returns API_PENDING, API_DONE with *resp filled, or -1 when the api
 * is quiescing and the caller should answer at once.
 */
static int park(api_t *api, uint64_t from, int64_t deadline_ms, api_resp_t *resp, api_done_fn done,
                void *arg)
{
    struct api_poll *p = calloc(1, sizeof(*p));
    if (!p) {
        api_error(resp, 503, "out of memory, retry later");
        return API_DONE;
    }
    p->api = api;
    p->done = done;
    p->arg = arg;
    /* Listed before the watch exists: the watch may fire (and unlink) before commit_watch
     * returns. */
    pthread_mutex_lock(&api->polls_mu);
    if (atomic_load(&api->quiescing)) {
        pthread_mutex_unlock(&api->polls_mu);
        free(p);
        return -1;
    }
    p->next = api->polls;
    if (api->polls)
        api->polls->prev = p;
    api->polls = p;
    pthread_mutex_unlock(&api->polls_mu);

    int rc = commit_watch(api->commit, from, deadline_ms, on_watch, p);
    if (rc != COMMIT_OK) {
        pthread_mutex_lock(&api->polls_mu);
        poll_unlink(api, p);
        bool answered = p->answered; /* api_quiesce may have answered it meanwhile */
        pthread_mutex_unlock(&api->polls_mu);
        free(p);
        if (answered)
            return API_PENDING; /* done has run or is running: the transport retries */
        api_error_commit(resp, rc);
        return API_DONE;
    }
    return API_PENDING;
}

/* Appends up to `max` committed records of the log in `dir` from `from` as NDJSON lines; answers
 * *resp. */
static void read_records(const char *dir, uint64_t from, uint64_t limit, uint64_t max,
                         uint64_t first, api_resp_t *resp)
{
    log_reader_t *r = NULL;
    log_record_t rec;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    uint64_t next = from;
    int rc = log_reader_open(dir, from, &r);

    if (rc == LOG_INVALID) {
        /* Retention deleted `from` after we looked: report the log as it is now. */
        log_info_t li;
        if (log_describe(dir, &li, NULL) == LOG_OK && li.first_offset > first)
            first = li.first_offset;
        out_of_range(resp, from, first, limit);
        return;
    }
    if (rc != LOG_OK) {
        log_error(resp, rc);
        return;
    }
    for (uint64_t n = 0; n < max; n++) {
        rc = log_reader_next(r, limit, &rec);
        if (rc == LOG_END)
            break;
        if (rc != LOG_OK)
            goto fail;
        size_t need = (size_t)rec.len + 1;
        /* Stop before passing the cap, but always answer with at least one record so a
         * consumer makes progress whatever the record size. */
        if (len > 0 && len + need > API_LOG_BODY_CAP)
            break;
        if (len + need > cap) {
            size_t ncap = cap ? cap : 64 * 1024;
            while (ncap < len + need)
                ncap *= 2;
            char *nb = realloc(buf, ncap);
            if (!nb) {
                rc = LOG_NOMEM;
                goto fail;
            }
            buf = nb;
            cap = ncap;
        }
        memcpy(buf + len, rec.data, rec.len);
        buf[len + rec.len] = '\n';
        len += need;
        next = rec.offset + 1;
    }
    log_reader_close(r);
    ndjson(resp, buf, len, next, first);
    return;
fail:
    log_reader_close(r);
    free(buf);
    log_error(resp, rc);
}

/*
 * GET /v1/log?log=rejected: the quarantine (storage/log/quarantine.h), paged like the event log.
 * Its records are final once fsynced (quarantine next_offset), nobody is told when one comes, so
 * `wait` is not supported: the answer comes at once.
 */
static int read_rejected(api_t *api, uint64_t from, int has_from, uint64_t max, api_resp_t *resp)
{
    quarantine_stats_t qs;

    if (!api->quarantine) {
        api_error(resp, 404, "the quarantine is off (serve --rejected-max-bytes 0)");
        return API_DONE;
    }
    quarantine_get_stats(api->quarantine, &qs);
    if (!has_from)
        from = qs.first_offset;
    if (from < qs.first_offset || from > qs.next_offset)
        out_of_range(resp, from, qs.first_offset, qs.next_offset);
    else if (from < qs.next_offset)
        read_records(quarantine_dir(api->quarantine), from, qs.next_offset, max, qs.first_offset,
                     resp);
    else
        ndjson(resp, NULL, 0, from, qs.first_offset);
    return API_DONE;
}

int api_log_read(api_t *api, const api_req_t *req, api_resp_t *resp, api_done_fn done, void *arg)
{
    uint64_t from = 0, max = API_LOG_MAX_DEFAULT, wait = 0;
    commit_stats_t s;
    int has_from;

    if (api_admin_auth(api, req->authorization, resp) != 0)
        return API_DONE;
    if ((has_from = param_u64(req, "from", 0, INT64_MAX, &from, resp)) < 0 ||
        param_u64(req, "max", 1, API_LOG_MAX_LIMIT, &max, resp) < 0 ||
        param_u64(req, "wait", 0, API_LOG_WAIT_MAX_MS, &wait, resp) < 0)
        return API_DONE;
    const char *which = req->param ? req->param(req->transport, "log") : NULL;
    if (which && strcmp(which, "rejected") == 0)
        return read_rejected(api, from, has_from, max, resp);
    if (which && strcmp(which, "events") != 0) {
        api_error(resp, 400, "invalid log: expected events (the default) or rejected");
        return API_DONE;
    }

    /* The committed offset before the first one: retention only deletes committed records, so
     * first <= committed here unless a whole segment came and went in between (then 416). */
    uint64_t committed = commit_committed_offset(api->commit);
    commit_get_stats(api->commit, &s);
    uint64_t first = s.log_first_offset;
    if (!has_from)
        from = first;
    if (from < first || from > committed) {
        out_of_range(resp, from, first, committed);
        return API_DONE;
    }
    if (from < committed) {
        read_records(commit_log_dir(api->commit), from, committed, max, first, resp);
        return API_DONE;
    }

    /* Nothing to read yet. The deadline counts from the request's arrival, so handling it
     * again after a retry outcome never waits longer than `wait` in all. */
    int64_t arrived = req->arrived_mono_ms > 0 ? req->arrived_mono_ms : clk_mono_ms();
    int64_t deadline = arrived + (int64_t)wait;
    if (wait == 0 || !done || atomic_load(&api->quiescing) || clk_mono_ms() >= deadline) {
        ndjson(resp, NULL, 0, from, first);
        return API_DONE;
    }
    int outcome = park(api, from, deadline, resp, done, arg);
    if (outcome >= 0)
        return outcome;
    ndjson(resp, NULL, 0, from, first);
    return API_DONE;
}
