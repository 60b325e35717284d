/*
 * GET /v1/log against a real commit_t in a mkdtemp data dir: the route off
 * without an admin token, Bearer auth, NDJSON equal to the committed records,
 * Next-Offset / First-Offset, max and the body cap, 416 for offsets outside
 * the log (also after retention), long-poll (pending, the retry outcome after
 * a commit, the deadline, quiesce, close), and the log fields of /stats and
 * /metrics.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "api/api.h"
#include "api/internal.h"
#include "common/clock.h"
#include "storage/log/groups.h"
#include "storage/log/log.h"
#include "testutil.h"

#define TOKEN  "t0ps3cret"
#define BEARER "Bearer " TOKEN
#define WEB    "Basic a193ZWI6" /* base64("k_web:") */

static const api_write_key_t KEYS[] = {{"k_web", "web"}};

struct fixture {
    char dir[256];
    commit_options_t co;
    commit_t *commit;
    api_t *api;
    pthread_mutex_t mu; /* guards the notices below (written by the writer thread) */
    int warnings;
    char last_warning[512];
};

/* Query parameters of a test request: the api_req_t transport. */
struct params {
    const char *name[4];
    const char *value[4];
};

static const char *get_param(void *transport, const char *name)
{
    const struct params *p = transport;
    for (size_t i = 0; i < 4 && p->name[i]; i++)
        if (strcmp(p->name[i], name) == 0)
            return p->value[i];
    return NULL;
}

/* One awaited done callback. */
struct waiter {
    tu_waiter_t w;
    api_resp_t resp;
};

static void on_done(api_resp_t *resp, void *arg)
{
    struct waiter *w = arg;
    w->resp = *resp;
    resp->body = NULL; /* taken */
    tu_waiter_done(&w->w);
}

static const char *header(const api_resp_t *resp, const char *name)
{
    for (size_t i = 0; i < resp->nheaders; i++)
        if (strcmp(resp->headers[i].name, name) == 0)
            return resp->headers[i].value;
    return NULL;
}

static uint64_t header_u64(const api_resp_t *resp, const char *name)
{
    const char *v = header(resp, name);
    if (!v)
        fail_msg("no %s header", name);
    return strtoull(v, NULL, 10);
}

static void on_notice(void *arg, int level, const char *msg)
{
    struct fixture *f = arg;
    if (level != 1)
        return;
    pthread_mutex_lock(&f->mu);
    f->warnings++;
    snprintf(f->last_warning, sizeof(f->last_warning), "%s", msg);
    pthread_mutex_unlock(&f->mu);
}

static void open_all(struct fixture *f, const char *token)
{
    char err[256] = "";
    if (commit_open(&f->co, &f->commit, err, sizeof(err)) != COMMIT_OK)
        fail_msg("commit_open: %s", err);
    api_options_t ao = {
        .keys = KEYS, .nkeys = 1, .commit = f->commit, .admin_token = token, .data_dir = f->dir};
    assert_int_equal(api_new(&ao, &f->api), 0);
}

/* commit_close first: it fires every watch, which a parked long-poll's api still needs. */
static void close_all(struct fixture *f)
{
    commit_close(f->commit);
    f->commit = NULL;
    api_free(f->api);
    f->api = NULL;
}

static int setup_opts(void **state, const char *token, uint64_t segment_bytes)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    pthread_mutex_init(&f->mu, NULL);
    assert_int_equal(tu_tempdir(f->dir, sizeof(f->dir), "logread"), 0);
    f->co = (commit_options_t){.data_dir = f->dir,
                               .window_ms = 86400000,
                               .segment_bytes = segment_bytes,
                               .notify = on_notice,
                               .notify_arg = f};
    open_all(f, token);
    *state = f;
    return 0;
}

static int setup(void **state)
{
    return setup_opts(state, TOKEN, 4096); /* small segments: reads cross them */
}

static int setup_no_token(void **state)
{
    return setup_opts(state, NULL, 4096);
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    close_all(f);
    tu_rm_rf(f->dir);
    pthread_mutex_destroy(&f->mu);
    free(f);
    return 0;
}

/* POSTs a batch of n track events ("<tag>-<i>" message ids, `pad` bytes of padding each). */
static void ingest(struct fixture *f, const char *tag, int n, size_t pad)
{
    json_t *batch = json_array();
    char *padding = malloc(pad + 1);
    assert_non_null(padding);
    memset(padding, 'p', pad);
    padding[pad] = '\0';
    for (int i = 0; i < n; i++) {
        char id[64];
        snprintf(id, sizeof(id), "%s-%d", tag, i);
        json_array_append_new(batch, json_pack("{s:s, s:s, s:s, s:s, s:{s:s}}", "type", "track",
                                               "userId", "u", "event", "E", "messageId", id,
                                               "properties", "pad", padding));
    }
    free(padding);
    json_t *doc = json_pack("{s:o}", "batch", batch);
    char *body = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    assert_non_null(body);

    struct waiter w = {0};
    api_resp_t resp = {0};
    api_req_t req = {.method = "POST",
                     .path = "/v1/batch",
                     .authorization = WEB,
                     .content_type = "application/json",
                     .body = body,
                     .body_len = strlen(body),
                     .now_ms = tu_now_ms()};
    tu_waiter_init(&w.w);
    tu_waiter_add(&w.w, 1);
    int outcome = api_handle(f->api, &req, &resp, on_done, &w);
    if (outcome == API_PENDING) {
        tu_waiter_wait(&w.w);
        resp = w.resp;
    }
    tu_waiter_destroy(&w.w);
    free(body);
    if (resp.status != 200)
        fail_msg("ingest: %d %.*s", resp.status, (int)resp.body_len, resp.body);
    free(resp.body);
}

/* Every committed record's payload + "\n", concatenated: what the NDJSON must equal. */
static char *committed_ndjson(struct fixture *f, uint64_t from, uint64_t to)
{
    log_reader_t *r = NULL;
    log_record_t rec;
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    assert_non_null(m);
    assert_int_equal(log_reader_open(commit_log_dir(f->commit), from, &r), LOG_OK);
    for (uint64_t o = from; o < to; o++) {
        assert_int_equal(log_reader_next(r, to, &rec), LOG_OK);
        assert_int_equal(rec.offset, o);
        fwrite(rec.data, 1, rec.len, m);
        fputc('\n', m);
    }
    log_reader_close(r);
    fclose(m);
    return buf;
}

/* A GET /v1/log request over `p`; arrived_mono_ms "now" unless given. */
static api_req_t log_req(struct params *p, const char *auth, int64_t arrived)
{
    return (api_req_t){.method = "GET",
                       .path = "/v1/log",
                       .authorization = auth,
                       .now_ms = tu_now_ms(),
                       .arrived_mono_ms = arrived ? arrived : clk_mono_ms(),
                       .param = get_param,
                       .transport = p};
}

/* GET /v1/log with up to three parameters (NULL-terminated name/value pairs); must answer now. */
static api_resp_t get(struct fixture *f, const char *auth, ...)
{
    struct params p = {{0}, {0}};
    va_list ap;
    va_start(ap, auth);
    for (size_t i = 0; i < 3; i++) {
        const char *n = va_arg(ap, const char *);
        if (!n)
            break;
        p.name[i] = n;
        p.value[i] = va_arg(ap, const char *);
    }
    va_end(ap);
    api_req_t req = log_req(&p, auth, 0);
    api_resp_t resp = {0};
    assert_int_equal(api_handle(f->api, &req, &resp, on_done, NULL), API_DONE);
    return resp;
}

static void assert_error(api_resp_t *resp, int status)
{
    if (resp->status != status)
        fail_msg("want %d, got %d: %.*s", status, resp->status, (int)resp->body_len, resp->body);
    assert_string_equal(resp->content_type, "application/json");
    json_t *j = json_loadb(resp->body, resp->body_len, 0, NULL);
    assert_non_null(j);
    assert_true(json_is_false(json_object_get(j, "success")));
    assert_true(json_is_string(json_object_get(j, "error")));
    json_decref(j);
    free(resp->body);
    resp->body = NULL;
}

static void test_off_without_token(void **state)
{
    struct fixture *f = *state;
    const char *methods[] = {"GET", "HEAD", "POST", "DELETE"};
    for (size_t i = 0; i < 4; i++) {
        struct params p = {{0}, {0}};
        api_req_t req = log_req(&p, BEARER, 0);
        api_resp_t resp = {0};
        req.method = methods[i];
        assert_int_equal(api_handle(f->api, &req, &resp, on_done, NULL), API_DONE);
        assert_error(&resp, 404);
        assert_int_equal(api_check_headers(f->api, &req, &resp), API_DONE);
        assert_error(&resp, 404);
    }
}

static void test_auth_and_methods(void **state)
{
    struct fixture *f = *state;
    const char *bad[] = {NULL,
                         "",
                         "Bearer",
                         "Bearer ",
                         "Bearer wrong",
                         "Bearer " TOKEN "x",
                         "Bearer t0ps3cre",
                         "Basic dDBwczNjcmV0Og==",
                         TOKEN,
                         "Bearer" TOKEN,
                         WEB};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        api_resp_t resp = get(f, bad[i], NULL);
        assert_string_equal(header(&resp, "WWW-Authenticate"), "Bearer realm=\"ingestd\"");
        assert_error(&resp, 401);

        struct params p = {{0}, {0}};
        api_req_t req = log_req(&p, bad[i], 0);
        assert_int_equal(api_check_headers(f->api, &req, &resp), API_DONE);
        assert_error(&resp, 401);
    }
    const char *good[] = {BEARER, "bearer " TOKEN, "BEARER  " TOKEN " "};
    for (size_t i = 0; i < 3; i++) {
        api_resp_t resp = get(f, good[i], NULL);
        assert_int_equal(resp.status, 200);
        free(resp.body);
        struct params p = {{0}, {0}};
        api_req_t req = log_req(&p, good[i], 0);
        assert_int_equal(api_check_headers(f->api, &req, &resp), API_CONTINUE);
    }
    /* Trailing slash, like every route. */
    struct params p = {{0}, {0}};
    api_req_t req = log_req(&p, BEARER, 0);
    api_resp_t resp = {0};
    req.path = "/v1/log/";
    assert_int_equal(api_handle(f->api, &req, &resp, on_done, NULL), API_DONE);
    assert_int_equal(resp.status, 200);
    free(resp.body);

    const char *methods[] = {"HEAD", "POST", "PUT", "DELETE"};
    for (size_t i = 0; i < 4; i++) {
        req = log_req(&p, BEARER, 0);
        req.method = methods[i];
        memset(&resp, 0, sizeof(resp));
        assert_int_equal(api_handle(f->api, &req, &resp, on_done, NULL), API_DONE);
        assert_string_equal(resp.allow, "GET");
        assert_error(&resp, 405);
        assert_int_equal(api_check_headers(f->api, &req, &resp), API_DONE);
        assert_error(&resp, 405);
    }
}

static void test_read_ndjson(void **state)
{
    struct fixture *f = *state;

    /* An empty log: 200, no body, Next-Offset = First-Offset = 0. */
    api_resp_t resp = get(f, BEARER, NULL);
    assert_int_equal(resp.status, 200);
    assert_string_equal(resp.content_type, "application/x-ndjson");
    assert_int_equal(resp.body_len, 0);
    assert_int_equal(header_u64(&resp, "Next-Offset"), 0);
    assert_int_equal(header_u64(&resp, "First-Offset"), 0);
    free(resp.body);

    for (int b = 0; b < 5; b++) {
        char tag[16];
        snprintf(tag, sizeof(tag), "b%d", b);
        ingest(f, tag, 10, 200);
    }
    uint64_t end = commit_committed_offset(f->commit);
    assert_int_equal(end, 50);
    commit_stats_t s;
    commit_get_stats(f->commit, &s);
    assert_true(s.log_segments > 2); /* the reads below cross segments */
    char *all = committed_ndjson(f, 0, end);

    /* No `from`: the oldest retained record on. */
    resp = get(f, BEARER, NULL);
    assert_int_equal(resp.status, 200);
    assert_int_equal(resp.body_len, strlen(all));
    assert_memory_equal(resp.body, all, resp.body_len);
    assert_int_equal(header_u64(&resp, "Next-Offset"), 50);
    assert_int_equal(header_u64(&resp, "First-Offset"), 0);
    free(resp.body);

    /* from + max. */
    resp = get(f, BEARER, "from", "10", "max", "5", NULL);
    assert_int_equal(resp.status, 200);
    char *want = committed_ndjson(f, 10, 15);
    assert_int_equal(resp.body_len, strlen(want));
    assert_memory_equal(resp.body, want, resp.body_len);
    assert_int_equal(header_u64(&resp, "Next-Offset"), 15);
    free(want);
    free(resp.body);

    /* A consumer loop passing Next-Offset as the next from sees every record once, in order. */
    char *seen = NULL;
    size_t seen_len = 0;
    FILE *m = open_memstream(&seen, &seen_len);
    char from[32] = "0";
    int calls = 0;
    for (;;) {
        resp = get(f, BEARER, "from", from, "max", "7", NULL);
        assert_int_equal(resp.status, 200);
        calls++;
        if (resp.body_len == 0) {
            assert_string_equal(header(&resp, "Next-Offset"), from);
            free(resp.body);
            break;
        }
        fwrite(resp.body, 1, resp.body_len, m);
        snprintf(from, sizeof(from), "%s", header(&resp, "Next-Offset"));
        free(resp.body);
    }
    fclose(m);
    assert_int_equal(calls, 8 + 1);
    assert_string_equal(seen, all);
    free(seen);

    /* At the end, without wait: 200 empty at once, Next-Offset = from. */
    resp = get(f, BEARER, "from", "50", NULL);
    assert_int_equal(resp.status, 200);
    assert_int_equal(resp.body_len, 0);
    assert_int_equal(header_u64(&resp, "Next-Offset"), 50);
    free(resp.body);
    free(all);
}

static void test_bad_params(void **state)
{
    struct fixture *f = *state;
    ingest(f, "x", 3, 0);
    const char *bad[][2] = {{"max", "0"},      {"max", "10001"},
                            {"max", "abc"},    {"max", ""},
                            {"max", "-1"},     {"max", "1e3"},
                            {"wait", "60001"}, {"wait", "-5"},
                            {"wait", " 5"},    {"from", "x"},
                            {"from", ""},      {"from", "+1"},
                            {"from", "1.0"},   {"from", "99999999999999999999999"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        api_resp_t resp = get(f, BEARER, bad[i][0], bad[i][1], NULL);
        if (resp.status != 400)
            fail_msg("%s=%s: want 400, got %d", bad[i][0], bad[i][1], resp.status);
        assert_error(&resp, 400);
    }
    /* The bounds themselves are fine; records available answer at once whatever wait says. */
    api_resp_t resp = get(f, BEARER, "max", "10000", "wait", "60000", "from", "1");
    assert_int_equal(resp.status, 200);
    assert_int_equal(header_u64(&resp, "Next-Offset"), 3);
    free(resp.body);
    resp = get(f, BEARER, "max", "1", "wait", "0", NULL);
    assert_int_equal(resp.status, 200);
    assert_int_equal(header_u64(&resp, "Next-Offset"), 1);
    free(resp.body);
}

static void assert_416(struct fixture *f, const char *from, uint64_t first, uint64_t next)
{
    api_resp_t resp = get(f, BEARER, "from", from, "wait", "1000", NULL);
    assert_int_equal(resp.status, 416);
    json_t *j = json_loadb(resp.body, resp.body_len, 0, NULL);
    assert_non_null(j);
    assert_true(json_is_false(json_object_get(j, "success")));
    assert_true(json_is_string(json_object_get(j, "error")));
    assert_int_equal(json_integer_value(json_object_get(j, "first_offset")), first);
    assert_int_equal(json_integer_value(json_object_get(j, "next_offset")), next);
    assert_int_equal(json_object_size(j), 4);
    assert_int_equal(header_u64(&resp, "First-Offset"), first);
    assert_int_equal(header_u64(&resp, "Next-Offset"), next);
    json_decref(j);
    free(resp.body);
}

static void test_out_of_range(void **state)
{
    struct fixture *f = *state;
    assert_416(f, "1", 0, 0);
    ingest(f, "a", 5, 0);
    assert_416(f, "6", 0, 5);
    assert_416(f, "1000000", 0, 5);
}

/* Retention deletes old segments: `from` before the new start is 416; no `from` starts there. */
static void test_after_retention(void **state)
{
    struct fixture *f = *state;
    ingest(f, "r0", 20, 300); /* > 4 KiB: the next commit opens a new segment */
    ingest(f, "r1", 20, 300);
    ingest(f, "r2", 20, 300);
    /* Retention runs at most once a second, first after the first commit of a writer: reopen
     * with a size bound so the next commit applies it without the test having to wait. */
    close_all(f);
    f->co.log_max_bytes = 1;
    open_all(f, TOKEN);
    ingest(f, "r3", 1, 0);
    /* Retention runs on the writer after it answered r3: one more commit waits it out. */
    ingest(f, "r4", 1, 0);

    commit_stats_t s;
    commit_get_stats(f->commit, &s);
    if (s.retention_segments < 2)
        fail_msg("retention: %llu segments, first %llu, log segments %llu",
                 (unsigned long long)s.retention_segments, (unsigned long long)s.log_first_offset,
                 (unsigned long long)s.log_segments);
    uint64_t first = s.log_first_offset;
    assert_true(first >= 40);
    assert_int_equal(s.committed_offset, 62);
    /* Those records were inside the 24h window: counted, and a warning went out. */
    assert_true(s.retention_window_records > 0);
    pthread_mutex_lock(&f->mu);
    assert_true(f->warnings > 0);
    assert_non_null(strstr(f->last_warning, "dedupe window"));
    pthread_mutex_unlock(&f->mu);

    assert_416(f, "0", first, 62);
    char buf[32];
    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)(first - 1));
    assert_416(f, buf, first, 62);

    api_resp_t resp = get(f, BEARER, NULL);
    assert_int_equal(resp.status, 200);
    char *want = committed_ndjson(f, first, 62);
    assert_int_equal(resp.body_len, strlen(want));
    assert_memory_equal(resp.body, want, resp.body_len);
    assert_int_equal(header_u64(&resp, "First-Offset"), first);
    assert_int_equal(header_u64(&resp, "Next-Offset"), 62);
    free(want);
    free(resp.body);

    /* /stats and /metrics report it. */
    struct params p = {{0}, {0}};
    api_req_t req = log_req(&p, BEARER, 0); /* the admin token guards /stats too */
    req.path = "/stats";
    assert_int_equal(api_handle(f->api, &req, &resp, on_done, NULL), API_DONE);
    json_t *j = json_loadb(resp.body, resp.body_len, 0, NULL);
    assert_non_null(j);
    json_t *ret = json_object_get(json_object_get(j, "log"), "retention");
    assert_int_equal(json_integer_value(json_object_get(ret, "segments_deleted")),
                     s.retention_segments);
    assert_int_equal(json_integer_value(json_object_get(ret, "records_deleted")),
                     s.retention_records);
    assert_int_equal(json_integer_value(json_object_get(ret, "window_records_deleted")),
                     s.retention_window_records);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "log"), "first_offset")),
                     first);
    json_decref(j);
    free(resp.body);
    req.path = "/metrics";
    assert_int_equal(api_handle(f->api, &req, &resp, on_done, NULL), API_DONE);
    char line[128];
    snprintf(line, sizeof(line), "\ningestd_log_retention_window_records_total %llu\n",
             (unsigned long long)s.retention_window_records);
    assert_non_null(strstr(resp.body, line));
    snprintf(line, sizeof(line), "\ningestd_log_retention_deleted_segments_total %llu\n",
             (unsigned long long)s.retention_segments);
    assert_non_null(strstr(resp.body, line));
    free(resp.body);
}

/* The body stops before 4 MiB; Next-Offset says where to go on. */
static void test_body_cap(void **state)
{
    struct fixture *f = *state;
    for (int b = 0; b < 11; b++) {
        char tag[16];
        snprintf(tag, sizeof(tag), "big%d", b);
        ingest(f, tag, 14, 30 * 1024);
    }
    uint64_t end = commit_committed_offset(f->commit);
    assert_int_equal(end, 154);
    api_resp_t resp = get(f, BEARER, "max", "10000", NULL);
    assert_int_equal(resp.status, 200);
    assert_true(resp.body_len <= API_LOG_BODY_CAP);
    assert_true(resp.body_len > API_LOG_BODY_CAP - 40 * 1024);
    uint64_t next = header_u64(&resp, "Next-Offset");
    assert_true(next > 100 && next < end);
    char *want = committed_ndjson(f, 0, next);
    assert_int_equal(resp.body_len, strlen(want));
    assert_memory_equal(resp.body, want, resp.body_len);
    free(want);
    free(resp.body);

    char from[32];
    snprintf(from, sizeof(from), "%llu", (unsigned long long)next);
    resp = get(f, BEARER, "from", from, "max", "10000", NULL);
    assert_int_equal(resp.status, 200);
    assert_int_equal(header_u64(&resp, "Next-Offset"), end);
    want = committed_ndjson(f, next, end);
    assert_int_equal(resp.body_len, strlen(want));
    assert_memory_equal(resp.body, want, resp.body_len);
    free(want);
    free(resp.body);
}

/* Long-poll: pending, then the retry outcome once a commit lands; handled again it answers. */
static void test_long_poll_commit(void **state)
{
    struct fixture *f = *state;
    ingest(f, "a", 2, 0);

    struct params p = {{"from", "wait"}, {"2", "30000"}};
    api_req_t req = log_req(&p, BEARER, 0);
    api_resp_t resp = {0};
    struct waiter w = {0};
    tu_waiter_init(&w.w);
    tu_waiter_add(&w.w, 1);
    assert_int_equal(api_handle(f->api, &req, &resp, on_done, &w), API_PENDING);

    ingest(f, "b", 3, 0);
    tu_waiter_wait(&w.w); /* the writer fires the watch after that commit */
    assert_int_equal(w.w.calls, 1);
    assert_int_equal(w.resp.status, API_RETRY_STATUS);
    assert_null(w.resp.body);
    tu_waiter_destroy(&w.w);

    /* The transport handles the same request again: now there are records. */
    memset(&resp, 0, sizeof(resp));
    assert_int_equal(api_handle(f->api, &req, &resp, on_done, NULL), API_DONE);
    assert_int_equal(resp.status, 200);
    char *want = committed_ndjson(f, 2, 5);
    assert_int_equal(resp.body_len, strlen(want));
    assert_memory_equal(resp.body, want, resp.body_len);
    assert_int_equal(header_u64(&resp, "Next-Offset"), 5);
    free(want);
    free(resp.body);
}

/* After the deadline: 200, empty body, Next-Offset = from; a retry never extends the wait. */
static void test_long_poll_deadline(void **state)
{
    struct fixture *f = *state;
    ingest(f, "a", 1, 0);

    struct params p = {{"from", "wait"}, {"1", "30"}};
    api_req_t req = log_req(&p, BEARER, 0);
    api_resp_t resp = {0};
    struct waiter w = {0};
    tu_waiter_init(&w.w);
    tu_waiter_add(&w.w, 1);
    assert_int_equal(api_handle(f->api, &req, &resp, on_done, &w), API_PENDING);
    tu_waiter_wait(&w.w); /* the writer wakes at the deadline: a condvar wait, no sleep */
    assert_int_equal(w.resp.status, API_RETRY_STATUS);
    tu_waiter_destroy(&w.w);
    assert_true(clk_mono_ms() >= req.arrived_mono_ms + 30);

    memset(&resp, 0, sizeof(resp));
    assert_int_equal(api_handle(f->api, &req, &resp, on_done, NULL), API_DONE);
    assert_int_equal(resp.status, 200);
    assert_string_equal(resp.content_type, "application/x-ndjson");
    assert_int_equal(resp.body_len, 0);
    assert_int_equal(header_u64(&resp, "Next-Offset"), 1);
    assert_int_equal(header_u64(&resp, "First-Offset"), 0);
    free(resp.body);

    /* A request that arrived longer ago than its wait answers at once, never parks again. */
    struct params p2 = {{"from", "wait"}, {"1", "60000"}};
    req = log_req(&p2, BEARER, clk_mono_ms() - 61000);
    memset(&resp, 0, sizeof(resp));
    assert_int_equal(api_handle(f->api, &req, &resp, on_done, NULL), API_DONE);
    assert_int_equal(resp.status, 200);
    assert_int_equal(resp.body_len, 0);
    free(resp.body);
}

/* Shutting down: api_quiesce answers parked polls now, and later ones do not wait. */
static void test_long_poll_quiesce(void **state)
{
    struct fixture *f = *state;
    struct params p = {{"wait", NULL}, {"60000", NULL}};
    api_req_t req = log_req(&p, BEARER, 0);
    api_resp_t resp = {0};
    struct waiter w[3];
    for (int i = 0; i < 3; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        tu_waiter_init(&w[i].w);
        tu_waiter_add(&w[i].w, 1);
        assert_int_equal(api_handle(f->api, &req, &resp, on_done, &w[i]), API_PENDING);
    }
    api_quiesce(f->api);
    for (int i = 0; i < 3; i++) {
        tu_waiter_wait(&w[i].w);
        assert_int_equal(w[i].resp.status, API_RETRY_STATUS);
    }
    memset(&resp, 0, sizeof(resp));
    assert_int_equal(api_handle(f->api, &req, &resp, on_done, NULL), API_DONE);
    assert_int_equal(resp.status, 200);
    assert_int_equal(resp.body_len, 0);
    free(resp.body);

    /* The watches still fire later (a commit, then close): done is not called twice. */
    ingest(f, "q", 1, 0);
    close_all(f);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(w[i].w.calls, 1);
        tu_waiter_destroy(&w[i].w);
    }
}

/* commit_close answers a parked poll with the retry outcome (the transport's gate then says 503).
 */
static void test_long_poll_close(void **state)
{
    struct fixture *f = *state;
    struct params p = {{"wait", NULL}, {"60000", NULL}};
    api_req_t req = log_req(&p, BEARER, 0);
    api_resp_t resp = {0};
    struct waiter w = {0};
    tu_waiter_init(&w.w);
    tu_waiter_add(&w.w, 1);
    assert_int_equal(api_handle(f->api, &req, &resp, on_done, &w), API_PENDING);
    commit_close(f->commit);
    f->commit = NULL;
    tu_waiter_wait(&w.w);
    assert_int_equal(w.resp.status, API_RETRY_STATUS);
    assert_int_equal(w.w.calls, 1);
    tu_waiter_destroy(&w.w);
}

/* Many pollers at once, woken by one commit; each retry sees the record. */
static void test_long_poll_many(void **state)
{
    struct fixture *f = *state;
    enum { N = 16 };
    struct params p = {{"from", "wait"}, {"0", "30000"}};
    api_req_t req[N];
    struct waiter w[N];
    for (int i = 0; i < N; i++) {
        api_resp_t resp = {0};
        req[i] = log_req(&p, BEARER, 0);
        memset(&w[i], 0, sizeof(w[i]));
        tu_waiter_init(&w[i].w);
        tu_waiter_add(&w[i].w, 1);
        assert_int_equal(api_handle(f->api, &req[i], &resp, on_done, &w[i]), API_PENDING);
    }
    ingest(f, "m", 1, 0);
    char *want = committed_ndjson(f, 0, 1);
    for (int i = 0; i < N; i++) {
        tu_waiter_wait(&w[i].w);
        assert_int_equal(w[i].resp.status, API_RETRY_STATUS);
        tu_waiter_destroy(&w[i].w);
        api_resp_t resp = {0};
        assert_int_equal(api_handle(f->api, &req[i], &resp, on_done, NULL), API_DONE);
        assert_int_equal(resp.status, 200);
        assert_int_equal(resp.body_len, strlen(want));
        assert_memory_equal(resp.body, want, resp.body_len);
        free(resp.body);
    }
    free(want);
}

/* /stats: committed and window offsets, and each group's offset and lag; /metrics likewise. */
static void test_stats_groups(void **state)
{
    struct fixture *f = *state;
    ingest(f, "s", 10, 0);
    assert_int_equal(groups_commit(f->dir, "loader", 4), GROUPS_OK);
    assert_int_equal(groups_commit(f->dir, "ahead", 12), GROUPS_OK);

    struct params p = {{0}, {0}};
    api_req_t req = log_req(&p, BEARER, 0); /* the admin token guards /stats too */
    api_resp_t resp = {0};
    req.path = "/stats";
    assert_int_equal(api_handle(f->api, &req, &resp, on_done, NULL), API_DONE);
    assert_int_equal(resp.status, 200);
    json_t *j = json_loadb(resp.body, resp.body_len, 0, NULL);
    assert_non_null(j);
    json_t *log = json_object_get(j, "log");
    assert_int_equal(json_integer_value(json_object_get(log, "committed_offset")), 10);
    assert_int_equal(json_integer_value(json_object_get(log, "next_offset")), 10);
    assert_int_equal(json_integer_value(json_object_get(log, "window_first_offset")), 0);
    assert_true(json_is_object(json_object_get(log, "retention")));
    json_t *groups = json_object_get(j, "groups");
    assert_int_equal(json_array_size(groups), 2);
    /* Sorted by name; a group ahead of the log (e.g. restored data dir) has lag 0. */
    json_t *g0 = json_array_get(groups, 0), *g1 = json_array_get(groups, 1);
    assert_string_equal(json_string_value(json_object_get(g0, "name")), "ahead");
    assert_int_equal(json_integer_value(json_object_get(g0, "offset")), 12);
    assert_int_equal(json_integer_value(json_object_get(g0, "lag")), 0);
    assert_string_equal(json_string_value(json_object_get(g1, "name")), "loader");
    assert_int_equal(json_integer_value(json_object_get(g1, "offset")), 4);
    assert_int_equal(json_integer_value(json_object_get(g1, "lag")), 6);
    json_decref(j);
    free(resp.body);

    req.path = "/metrics";
    assert_int_equal(api_handle(f->api, &req, &resp, on_done, NULL), API_DONE);
    const char *want[] = {"\ningestd_log_committed_offset 10\n",
                          "\ningestd_group_lag{group=\"loader\"} 6\n",
                          "\ningestd_group_lag{group=\"ahead\"} 0\n",
                          "\ningestd_group_offset{group=\"loader\"} 4\n",
                          "\n# TYPE ingestd_group_lag gauge\n",
                          "\ningestd_log_retention_window_records_total 0\n",
                          "\ningestd_log_retention_deleted_segments_total 0\n"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (!strstr(resp.body, want[i]))
            fail_msg("/metrics lacks %s", want[i]);
    free(resp.body);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_off_without_token, setup_no_token, teardown),
        cmocka_unit_test_setup_teardown(test_auth_and_methods, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_ndjson, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_params, setup, teardown),
        cmocka_unit_test_setup_teardown(test_out_of_range, setup, teardown),
        cmocka_unit_test_setup_teardown(test_after_retention, setup, teardown),
        cmocka_unit_test_setup_teardown(test_body_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_poll_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_poll_deadline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_poll_quiesce, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_poll_close, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_poll_many, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats_groups, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
