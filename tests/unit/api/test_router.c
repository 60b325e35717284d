/*
 * End-to-end tests of api_handle / api_check_headers against a real commit_t
 * in a mkdtemp data dir: response shapes, dedupe across and within requests,
 * auth, routing, /stats, /metrics, what reaches the log, concurrent callers.
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
#include "storage/window/keyhash.h"
#include "storage/log/log.h"
#include "testutil.h"

#define WEB "Basic a193ZWI6" /* base64("k_web:") */
#define IOS "Basic OmtfaW9z" /* base64(":k_ios"): password as key */

static const api_write_key_t KEYS[] = {{"k_web", "web"}, {"k_ios", NULL}};

struct fixture {
    char dir[256]; /* mkdtemp data dir, removed in teardown */
    commit_t *commit;
    api_t *api;
};

/* One awaited answer: api_handle's done callback fills it from the writer thread. */
struct waiter {
    tu_waiter_t w;
    api_resp_t resp;
};

struct result {
    int outcome; /* API_DONE or API_PENDING */
    int status;
    char *body; /* NUL-terminated copy */
    json_t *json;
    int retry_after;
    const char *allow;
    const char *content_type;
};

static void on_done(api_resp_t *resp, void *arg)
{
    struct waiter *w = arg;
    /* Written before tu_waiter_done(), so the waiting thread sees it once woken. */
    w->resp = *resp;
    resp->body = NULL; /* taken */
    tu_waiter_done(&w->w);
}

static void fill(struct result *r, api_resp_t *resp)
{
    json_error_t jerr;
    r->status = resp->status;
    r->body = strndup(resp->body ? resp->body : "", resp->body_len);
    assert_non_null(r->body);
    assert_int_equal(strlen(r->body), resp->body_len);
    r->retry_after = resp->retry_after;
    r->allow = resp->allow;
    r->content_type = resp->content_type;
    r->json = json_loads(r->body, JSON_DECODE_ANY, &jerr);
    free(resp->body);
}

static void result_free(struct result *r)
{
    free(r->body);
    json_decref(r->json);
    memset(r, 0, sizeof(*r));
}

static struct result call_ct(api_t *api, const char *method, const char *path, const char *auth,
                             const char *ctype, const char *body)
{
    struct result r = {0};
    struct waiter w = {0};
    api_resp_t resp = {0};
    api_req_t req = {
        .method = method,
        .path = path,
        .authorization = auth,
        .content_type = ctype,
        .body = body,
        .body_len = body ? strlen(body) : 0,
        .now_ms = tu_now_ms(),
    };
    tu_waiter_init(&w.w);
    tu_waiter_add(&w.w, 1); /* stays pending when api_handle answers at once */
    r.outcome = api_handle(api, &req, &resp, on_done, &w);
    if (r.outcome == API_PENDING) {
        tu_waiter_wait(&w.w);
        fill(&r, &w.resp);
    } else {
        assert_int_equal(r.outcome, API_DONE);
        fill(&r, &resp);
    }
    tu_waiter_destroy(&w.w);
    return r;
}

static struct result call(api_t *api, const char *method, const char *path, const char *auth,
                          const char *body)
{
    return call_ct(api, method, path, auth, "application/json", body);
}

static json_int_t jint(const json_t *obj, const char *path)
{
    /* "a.b.c" lookup; fails the test when a step is missing or the leaf is not an integer. */
    char buf[128], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", path);
    const json_t *cur = obj;
    for (char *t = strtok_r(buf, ".", &save); t; t = strtok_r(NULL, ".", &save)) {
        cur = json_object_get(cur, t);
        if (!cur)
            fail_msg("missing %s", path);
    }
    if (!json_is_integer(cur))
        fail_msg("%s is not an integer", path);
    return json_integer_value(cur);
}

/* Asserts a 200 ingest body: exactly success/accepted/duplicates/rejected with these counts. */
static void assert_ok(const struct result *r, json_int_t accepted, json_int_t duplicates,
                      size_t nrejected)
{
    if (r->status != 200)
        fail_msg("status %d: %s", r->status, r->body);
    assert_string_equal(r->content_type, "application/json");
    assert_non_null(r->json);
    assert_int_equal(json_object_size(r->json), 4);
    assert_true(json_is_true(json_object_get(r->json, "success")));
    if (jint(r->json, "accepted") != accepted || jint(r->json, "duplicates") != duplicates)
        fail_msg("want accepted %lld duplicates %lld, got %s", (long long)accepted,
                 (long long)duplicates, r->body);
    json_t *rej = json_object_get(r->json, "rejected");
    assert_true(json_is_array(rej));
    assert_int_equal(json_array_size(rej), nrejected);
}

static void assert_error(const struct result *r, int status, const char *msg)
{
    if (r->status != status)
        fail_msg("status %d want %d: %s", r->status, status, r->body);
    assert_string_equal(r->content_type, "application/json");
    assert_non_null(r->json);
    assert_int_equal(json_object_size(r->json), 2);
    assert_true(json_is_false(json_object_get(r->json, "success")));
    if (msg)
        assert_string_equal(json_string_value(json_object_get(r->json, "error")), msg);
    else
        assert_true(json_is_string(json_object_get(r->json, "error")));
}

/* Calls api_handle and asserts a 200 ingest body with these counts (assert_ok). */
static void expect_ok(api_t *api, const char *method, const char *path, const char *auth,
                      const char *body, json_int_t accepted, json_int_t duplicates,
                      size_t nrejected)
{
    struct result r = call(api, method, path, auth, body);
    assert_ok(&r, accepted, duplicates, nrejected);
    result_free(&r);
}

/* Calls api_handle and asserts an error answer (assert_error; msg NULL: any message). */
static void expect_error(api_t *api, const char *method, const char *path, const char *auth,
                         const char *body, int status, const char *msg)
{
    struct result r = call(api, method, path, auth, body);
    assert_error(&r, status, msg);
    result_free(&r);
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    char err[256] = "";
    assert_non_null(f);
    assert_int_equal(tu_tempdir(f->dir, sizeof(f->dir), "api"), 0);
    commit_options_t co = {.data_dir = f->dir, .window_ms = 86400000, .max_keys = 1000000};
    if (commit_open(&co, &f->commit, err, sizeof(err)) != COMMIT_OK)
        fail_msg("commit_open: %s", err);
    api_options_t ao = {.keys = KEYS, .nkeys = 2, .commit = f->commit};
    assert_int_equal(api_new(&ao, &f->api), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    api_free(f->api);
    commit_close(f->commit);
    tu_rm_rf(f->dir); /* best effort: a leftover temp dir fails no test */
    free(f);
    return 0;
}

static void test_batch_response_shape(void **state)
{
    struct fixture *f = *state;
    struct result r = call(f->api, "POST", "/v1/batch", WEB,
                           "{\"batch\":[{\"type\":\"track\",\"event\":\"A\",\"userId\":\"u\"},"
                           "{\"type\":\"track\",\"userId\":\"u\"},"
                           "{\"type\":\"identify\",\"userId\":\"u\",\"messageId\":\"m1\"}]}");
    assert_int_equal(r.outcome, API_PENDING);
    assert_ok(&r, 2, 0, 1);
    json_t *rej = json_array_get(json_object_get(r.json, "rejected"), 0);
    assert_int_equal(json_object_size(rej), 2);
    assert_int_equal(jint(rej, "index"), 1);
    assert_string_equal(json_string_value(json_object_get(rej, "error")),
                        "event must be a non-empty string for track");
    assert_int_equal(r.retry_after, 0);
    assert_null(r.allow);
    result_free(&r);

    /* /v1/import is the same endpoint. */
    expect_ok(f->api, "POST", "/v1/import", WEB,
              "{\"batch\":[{\"type\":\"identify\",\"userId\":\"u\"}]}", 1, 0, 0);
}

static void test_duplicates(void **state)
{
    struct fixture *f = *state;
    const char *body = "{\"batch\":[{\"type\":\"identify\",\"userId\":\"u\",\"messageId\":\"d1\"},"
                       "{\"type\":\"identify\",\"userId\":\"u\",\"messageId\":\"d1\"},"
                       "{\"type\":\"identify\",\"userId\":\"u\",\"messageId\":\"d2\"}]}";
    /* The same id twice in one batch is kept once. */
    expect_ok(f->api, "POST", "/v1/batch", WEB, body, 2, 1, 0);

    /* A client retry of the whole batch: all duplicates. */
    expect_ok(f->api, "POST", "/v1/batch", WEB, body, 0, 3, 0);

    /* The same messageIds from another source are other events. */
    expect_ok(f->api, "POST", "/v1/batch", IOS, body, 2, 1, 0);

    /* Single route: the retry is a 200 with duplicates 1. */
    expect_ok(f->api, "POST", "/v1/identify", WEB, "{\"userId\":\"u\",\"messageId\":\"d2\"}", 0, 1,
              0);

    commit_stats_t s;
    commit_get_stats(f->commit, &s);
    assert_int_equal(s.accepted, 4);
    assert_int_equal(s.duplicates, 6);
}

static void test_single_routes(void **state)
{
    struct fixture *f = *state;
    expect_ok(f->api, "POST", "/v1/track", WEB, "{\"event\":\"E\",\"userId\":\"u\"}", 1, 0, 0);
    struct result r = call(f->api, "POST", "/v1/track", WEB, "{\"userId\":\"u\"}");
    assert_int_equal(r.outcome, API_DONE);
    assert_error(&r, 400, "event must be a non-empty string for track");
    result_free(&r);
    expect_error(f->api, "POST", "/v1/page", WEB, "{\"type\":\"screen\",\"userId\":\"u\"}", 400,
                 "type does not match the endpoint");
    expect_ok(f->api, "POST", "/v1/alias", NULL,
              "{\"writeKey\":\"k_web\",\"userId\":\"u\",\"previousId\":\"p\"}", 1, 0, 0);
    expect_error(f->api, "POST", "/v1/screen", WEB, "[1]", 400, "body must be a JSON object");
}

static void test_all_rejected_answers_now(void **state)
{
    struct fixture *f = *state;
    struct result r = call(f->api, "POST", "/v1/batch", WEB, "{\"batch\":[{\"type\":\"nope\"},7]}");
    assert_int_equal(r.outcome, API_DONE); /* nothing went to the commit */
    assert_ok(&r, 0, 0, 2);
    result_free(&r);
    commit_stats_t s;
    commit_get_stats(f->commit, &s);
    assert_int_equal(s.batches, 0);
}

static void test_whole_request_errors(void **state)
{
    struct fixture *f = *state;
    expect_error(f->api, "POST", "/v1/batch", WEB, "{\"batch\":[]}", 400, "batch is empty");
    struct result r = call(f->api, "POST", "/v1/batch", WEB, "{\"batch\":");
    assert_error(&r, 400, NULL);
    assert_true(strncmp(json_string_value(json_object_get(r.json, "error")), "invalid JSON", 12) ==
                0);
    result_free(&r);
    expect_error(f->api, "POST", "/v1/batch", WEB, "", 400, "body is empty");

    /* The body cap is enforced here too, whatever the transport did. */
    size_t n = API_MAX_REQUEST_BYTES + 1;
    char *big = malloc(n + 1);
    assert_non_null(big);
    memset(big, ' ', n);
    big[n] = '\0';
    big[0] = '{';
    big[n - 1] = '}';
    expect_error(f->api, "POST", "/v1/batch", WEB, big, 400,
                 "request body too large (max 512000 bytes)");
    free(big);

    r = call_ct(f->api, "POST", "/v1/batch", WEB, "application/xml", "{}");
    assert_error(&r, 400, "unsupported Content-Type");
    result_free(&r);
}

static void test_content_types(void **state)
{
    struct fixture *f = *state;
    static const char *const ok[] = {
        NULL,
        "",
        "application/json",
        "application/json; charset=utf-8",
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "Application/JSON",
    };
    static const char *const bad[] = {"application/xml", "multipart/form-data; boundary=x",
                                      "text/html", "application/jsonx", "json"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        struct result r = call_ct(f->api, "POST", "/v1/identify", WEB, ok[i], "{\"userId\":\"u\"}");
        if (r.status != 200)
            fail_msg("Content-Type \"%s\": %d", ok[i] ? ok[i] : "(none)", r.status);
        result_free(&r);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct result r =
            call_ct(f->api, "POST", "/v1/identify", WEB, bad[i], "{\"userId\":\"u\"}");
        assert_error(&r, 400, "unsupported Content-Type");
        result_free(&r);
    }
}

static void test_auth(void **state)
{
    struct fixture *f = *state;
    const char *ev = "{\"batch\":[{\"type\":\"identify\",\"userId\":\"u\"}]}";
    expect_error(f->api, "POST", "/v1/batch", NULL, ev, 401, "missing write key");
    /* "nope:" */
    expect_error(f->api, "POST", "/v1/batch", "Basic bm9wZTo=", ev, 401, "unknown write key");
    expect_error(f->api, "POST", "/v1/batch", "Basic %%%", ev, 401,
                 "malformed Authorization header");
    expect_error(f->api, "POST", "/v1/batch", NULL,
                 "{\"writeKey\":\"k_webX\",\"batch\":[{\"type\":\"identify\",\"userId\":\"u\"}]}",
                 401, "unknown write key");
    expect_ok(f->api, "POST", "/v1/batch", NULL,
              "{\"writeKey\":\"k_web\",\"batch\":[{\"type\":\"identify\",\"userId\":\"u\"}]}", 1, 0,
              0);
    /* A bad header key is not rescued by a good body key. */
    expect_error(f->api, "POST", "/v1/batch", "Basic bm9wZTo=",
                 "{\"writeKey\":\"k_web\",\"batch\":[{\"type\":\"identify\",\"userId\":\"u\"}]}",
                 401, "unknown write key");
    /* A key inside an event of a batch is not a credential. */
    expect_error(f->api, "POST", "/v1/batch", NULL,
                 "{\"batch\":[{\"writeKey\":\"k_web\",\"type\":\"identify\",\"userId\":\"u\"}]}",
                 401, "missing write key");
    /* Other schemes are no credentials: the body decides. */
    expect_error(f->api, "POST", "/v1/identify", "Bearer k_web", "{\"userId\":\"u\"}", 401,
                 "missing write key");
}

static void test_routing(void **state)
{
    struct fixture *f = *state;
    struct result r = call(f->api, "POST", "/v1/nope", WEB, "{}");
    assert_error(&r, 404, "not found");
    assert_null(r.allow);
    result_free(&r);
    expect_error(f->api, "GET", "/", NULL, NULL, 404, NULL);
    r = call(f->api, "GET", "/v1/batch", WEB, NULL);
    assert_error(&r, 405, NULL);
    assert_string_equal(r.allow, "POST, OPTIONS");
    result_free(&r);
    r = call(f->api, "PUT", "/v1/track", WEB, NULL);
    assert_error(&r, 405, NULL);
    assert_string_equal(r.allow, "POST, OPTIONS");
    result_free(&r);
    r = call(f->api, "POST", "/stats", NULL, NULL);
    assert_error(&r, 405, NULL);
    assert_string_equal(r.allow, "GET, HEAD");
    result_free(&r);
    r = call(f->api, "DELETE", "/healthz", NULL, NULL);
    assert_string_equal(r.allow, "GET, HEAD");
    result_free(&r);

    r = call(f->api, "GET", "/healthz", NULL, NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"status\":\"ok\"}");
    result_free(&r);
    r = call(f->api, "HEAD", "/healthz/", NULL, NULL);
    assert_int_equal(r.status, 200);
    result_free(&r);
    r = call(f->api, "GET", "/stats?pretty=1", NULL, NULL);
    assert_int_equal(r.status, 200);
    result_free(&r);
    expect_ok(f->api, "POST", "/v1/batch/", WEB,
              "{\"batch\":[{\"type\":\"page\",\"userId\":\"u\"}]}", 1, 0, 0);
    expect_error(f->api, "POST", "/v1/batch//", WEB, "{}", 404, NULL);
    expect_error(f->api, "POST", "/V1/BATCH", WEB, "{}", 404, NULL);
}

/* The prefix route is found by its flag wherever it stands in the table: moved through every
 * position of a table (so that some other route is last), each path still finds its own entry.
 * The old rule (the prefix route is the table's last entry) sends GET /v1/events/x elsewhere. */
static void test_prefix_route_anywhere(void **state)
{
    static const api_route_t BASE[] = {
        {"/v1/events/", API_ROUTE_EVENTS, NULL, true},
        {"/v1/batch", API_ROUTE_INGEST, NULL, false},
        {"/stats", API_ROUTE_STATS, NULL, false},
        {"/v1/later", API_ROUTE_HEALTHZ, NULL, false}, /* a route appended after the prefix */
    };
    enum { N = sizeof(BASE) / sizeof(BASE[0]) };
    api_route_t t[N];
    (void)state;

    for (size_t shift = 0; shift < N; shift++) {
        for (size_t i = 0; i < N; i++)
            t[(i + shift) % N] = BASE[i];
        const api_route_t *ev = &t[shift % N];
        assert_ptr_equal(api_route_find(t, N, "/v1/events/x"), ev);
        assert_ptr_equal(api_route_find(t, N, "/v1/events/a/b?c=1"), ev);
        assert_ptr_equal(api_route_find(t, N, "/v1/events/"), ev); /* empty id: the handler's 400 */
        assert_null(api_route_find(t, N, "/v1/events"));
        assert_null(api_route_find(t, N, "/v1/eventsx"));
        for (size_t i = 1; i < N; i++)
            assert_ptr_equal(api_route_find(t, N, BASE[i].path), &t[(i + shift) % N]);
        assert_null(api_route_find(t, N, "/v1/nope"));
    }
    /* An exact route under the prefix wins over it, whatever the order. */
    const api_route_t both[] = {{"/v1/events/", API_ROUTE_EVENTS, NULL, true},
                                {"/v1/events/special", API_ROUTE_STATS, NULL, false}};
    assert_ptr_equal(api_route_find(both, 2, "/v1/events/special"), &both[1]);
    assert_ptr_equal(api_route_find(both, 2, "/v1/events/other"), &both[0]);
}

static int check(api_t *api, const char *method, const char *path, const char *auth,
                 const char *ctype, api_resp_t *resp)
{
    api_req_t req = {.method = method,
                     .path = path,
                     .authorization = auth,
                     .content_type = ctype,
                     .now_ms = tu_now_ms()};
    memset(resp, 0, sizeof(*resp));
    return api_check_headers(api, &req, resp);
}

static void test_check_headers(void **state)
{
    struct fixture *f = *state;
    api_resp_t resp;
    assert_int_equal(check(f->api, "POST", "/v1/batch", WEB, "application/json", &resp),
                     API_CONTINUE);
    assert_null(resp.body);
    assert_int_equal(check(f->api, "POST", "/v1/batch", NULL, NULL, &resp), API_CONTINUE);
    assert_int_equal(check(f->api, "GET", "/metrics", NULL, NULL, &resp), API_CONTINUE);
    assert_int_equal(check(f->api, "POST", "/v2/batch", WEB, NULL, &resp), API_DONE);
    assert_int_equal(resp.status, 404);
    free(resp.body);
    assert_int_equal(check(f->api, "GET", "/v1/batch", WEB, NULL, &resp), API_DONE);
    assert_int_equal(resp.status, 405);
    assert_string_equal(resp.allow, "POST, OPTIONS");
    free(resp.body);
    assert_int_equal(check(f->api, "POST", "/v1/batch", "Basic bm9wZTo=", NULL, &resp), API_DONE);
    assert_int_equal(resp.status, 401);
    assert_string_equal(resp.body, "{\"success\":false,\"error\":\"unknown write key\"}");
    free(resp.body);
    assert_int_equal(check(f->api, "POST", "/v1/batch", WEB, "image/png", &resp), API_DONE);
    assert_int_equal(resp.status, 400);
    free(resp.body);
}

static void test_commit_errors(void **state)
{
    api_resp_t resp;
    (void)state;
    api_error_commit(&resp, COMMIT_UNAVAILABLE);
    assert_int_equal(resp.status, 503);
    assert_int_equal(resp.retry_after, API_RETRY_AFTER_S);
    assert_string_equal(resp.body,
                        "{\"success\":false,\"error\":\"storage unavailable, retry later\"}");
    assert_string_equal(resp.content_type, "application/json");
    free(resp.body);
    api_error_commit(&resp, COMMIT_CLOSED);
    assert_int_equal(resp.status, 503);
    assert_int_equal(resp.retry_after, API_RETRY_AFTER_S);
    free(resp.body);
    api_error_commit(&resp, COMMIT_INVALID);
    assert_int_equal(resp.status, 500);
    assert_int_equal(resp.retry_after, 0);
    free(resp.body);
    api_error(&resp, 429, "slow down");
    assert_int_equal(resp.retry_after, API_RETRY_AFTER_S);
    assert_int_equal(resp.body_len, strlen(resp.body));
    free(resp.body);
    api_error(&resp, 400, "quote \" and \\ escaped");
    assert_string_equal(resp.body, "{\"success\":false,\"error\":\"quote \\\" and \\\\ escaped\"}");
    assert_int_equal(resp.retry_after, 0);
    free(resp.body);
}

static void test_stats(void **state)
{
    struct fixture *f = *state;
    struct result r =
        call(f->api, "POST", "/v1/batch", WEB,
             "{\"batch\":[{\"type\":\"identify\",\"userId\":\"u\",\"messageId\":\"s1\"},"
             "{\"type\":\"identify\",\"userId\":\"u\",\"messageId\":\"s1\"},"
             "{\"type\":\"identify\"},{\"type\":\"identify\"}]}");
    assert_ok(&r, 1, 1, 2);
    api_count_response(f->api, r.status);
    result_free(&r);
    api_count_response(f->api, 200);
    api_count_response(f->api, 404);

    r = call(f->api, "GET", "/stats", NULL, NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.content_type, "application/json");
    json_t *j = r.json;
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "version")), INGESTD_VERSION);
    assert_true(jint(j, "uptime_seconds") >= 0);
    assert_int_equal(jint(j, "dedupe.window_seconds"), 86400);
    assert_true(jint(j, "dedupe.effective_window_seconds") >= 0);
    assert_true(jint(j, "dedupe.effective_window_seconds") < 600);
    assert_int_equal(jint(j, "dedupe.keys"), 1);
    assert_int_equal(jint(j, "dedupe.max_keys"), 1000000);
    assert_int_equal(jint(j, "dedupe.evicted_age"), 0);
    assert_int_equal(jint(j, "dedupe.evicted_size"), 0);
    assert_true(jint(j, "dedupe.store_map_bytes") > 0);
    assert_true(jint(j, "dedupe.store_used_bytes") > 0);
    assert_int_equal(jint(j, "events.accepted"), 1);
    assert_int_equal(jint(j, "events.duplicates"), 1);
    assert_int_equal(jint(j, "events.rejected"), 2);
    assert_int_equal(jint(j, "requests.total"), 3);
    assert_int_equal(jint(j, "requests.by_status.200"), 2);
    assert_int_equal(jint(j, "requests.by_status.404"), 1);
    assert_null(
        json_object_get(json_object_get(json_object_get(j, "requests"), "by_status"), "500"));
    assert_int_equal(jint(j, "log.first_offset"), 0);
    assert_int_equal(jint(j, "log.next_offset"), 1);
    assert_true(jint(j, "log.bytes") > 0);
    assert_int_equal(jint(j, "log.segments"), 1);
    assert_int_equal(jint(j, "commit.batches"), 1);
    assert_int_equal(jint(j, "commit.events"), 2);
    assert_true(json_is_number(json_object_get(json_object_get(j, "commit"), "avg_batch_events")));
    assert_true(json_number_value(
                    json_object_get(json_object_get(j, "commit"), "avg_batch_events")) == 2.0);
    assert_int_equal(jint(j, "commit.last_batch_events"), 2);
    assert_int_equal(jint(j, "commit.max_batch_events"), 2);
    assert_int_equal(jint(j, "commit.last_batch_requests"), 1);
    assert_int_equal(jint(j, "commit.failures"), 0);
    assert_int_equal(jint(j, "commit.queue_events"), 0);
    assert_true(jint(j, "commit.fsyncs") >= 1);
    static const char *const reals[] = {"fsync_ms_last", "fsync_ms_avg", "fsync_ms_max"};
    for (size_t i = 0; i < 3; i++)
        assert_true(json_is_real(json_object_get(json_object_get(j, "commit"), reals[i])));
    assert_int_equal(jint(j, "commit.map_grows"), 0);
    assert_int_equal(jint(j, "recovery.replayed_records"), 0);
    assert_int_equal(jint(j, "recovery.truncated_bytes"), 0);
    result_free(&r);
}

/* Value of an unlabelled sample, or -1 when the line is missing. */
static double sample(const char *text, const char *name)
{
    char pat[128];
    snprintf(pat, sizeof(pat), "\n%s ", name);
    const char *p = strstr(text, pat);
    return p ? strtod(p + strlen(pat), NULL) : -1;
}

static void test_metrics(void **state)
{
    struct fixture *f = *state;
    static const char *const names[] = {
        "events_accepted_total",
        "events_duplicates_total",
        "events_rejected_total",
        "requests_total",
        "dedupe_keys",
        "dedupe_window_seconds",
        "dedupe_effective_window_seconds",
        "dedupe_max_keys",
        "dedupe_evicted_total",
        "commit_batches_total",
        "commit_events_total",
        "commit_failures_total",
        "commit_queue_events",
        "fsyncs_total",
        "fsync_seconds_total",
        "fsync_seconds_max",
        "log_bytes",
        "log_segments",
        "log_first_offset",
        "log_next_offset",
        "store_map_bytes",
        "store_used_bytes",
        "uptime_seconds",
    };
    expect_ok(f->api, "POST", "/v1/batch", WEB,
              "{\"batch\":[{\"type\":\"identify\",\"userId\":\"u\"},"
              "{\"type\":\"identify\",\"userId\":\"u\"},{\"type\":\"x\"}]}",
              2, 0, 1);
    api_count_response(f->api, 200);
    api_count_response(f->api, 401);

    struct result r = call(f->api, "GET", "/metrics", NULL, NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.content_type, "text/plain; version=0.0.4");
    char pat[160];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(pat, sizeof(pat), "# HELP ingestd_%s ", names[i]);
        if (!strstr(r.body, pat))
            fail_msg("no HELP for %s", names[i]);
        snprintf(pat, sizeof(pat), "# TYPE ingestd_%s %s\n", names[i],
                 strstr(names[i], "_total") ? "counter" : "gauge");
        if (!strstr(r.body, pat))
            fail_msg("no or wrong TYPE for %s", names[i]);
    }
    assert_true(sample(r.body, "ingestd_events_accepted_total") == 2);
    /* "type must be one of ...": one rejection, counted by its reason. */
    assert_true(sample(r.body, "ingestd_events_rejected_total{reason=\"bad_value\"}") == 1);
    assert_true(sample(r.body, "ingestd_events_rejected_total{reason=\"missing_field\"}") == 0);
    assert_true(sample(r.body, "ingestd_dedupe_keys") == 2);
    assert_true(sample(r.body, "ingestd_dedupe_window_seconds") == 86400);
    assert_true(sample(r.body, "ingestd_commit_batches_total") == 1);
    assert_true(sample(r.body, "ingestd_log_next_offset") == 2);
    assert_non_null(strstr(r.body, "\ningestd_requests_total{code=\"200\"} 1\n"));
    assert_non_null(strstr(r.body, "\ningestd_requests_total{code=\"401\"} 1\n"));
    assert_non_null(strstr(r.body, "\ningestd_dedupe_evicted_total{reason=\"age\"} 0\n"));
    assert_non_null(strstr(r.body, "\ningestd_dedupe_evicted_total{reason=\"size\"} 0\n"));
    assert_int_equal(r.body[strlen(r.body) - 1], '\n');
    result_free(&r);
}

static void test_log_contents(void **state)
{
    struct fixture *f = *state;
    expect_ok(f->api, "POST", "/v1/batch", IOS,
              "{\"writeKey\":\"ignored\",\"batch\":["
              "{\"type\":\"track\",\"event\":\"E\",\"userId\":\"u\",\"source\":\"x\"},"
              "{\"type\":\"track\",\"event\":\"E\",\"userId\":\"u\",\"messageId\":\"L\"},"
              "{\"type\":\"bad\"}]}",
              2, 0, 1);

    char dir[300];
    log_reader_t *lr = NULL;
    log_record_t rec;
    json_error_t jerr;
    snprintf(dir, sizeof(dir), "%s/log", f->dir);
    assert_int_equal(log_reader_open(dir, 0, &lr), LOG_OK);
    const uint8_t *secret = commit_secret(f->commit);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(log_reader_next(lr, UINT64_MAX, &rec), LOG_OK);
        json_t *j = json_loadb(rec.data, rec.len, 0, &jerr);
        assert_non_null(j);
        assert_null(memchr(rec.data, '\n', rec.len));
        assert_string_equal(json_string_value(json_object_get(j, "source")), "default");
        assert_null(json_object_get(j, "writeKey"));
        assert_true(json_is_string(json_object_get(j, "receivedAt")));
        const char *mid = json_string_value(json_object_get(j, "messageId"));
        assert_non_null(mid);
        if (i == 0) {
            assert_int_equal(strlen(mid), 36);
            assert_int_equal(mid[14], '4');
        } else {
            assert_string_equal(mid, "L");
        }
        uint8_t key[KEYHASH_LEN];
        keyhash(secret, "default", 7, mid, strlen(mid), key);
        assert_memory_equal(key, rec.key, KEYHASH_LEN);
        json_decref(j);
    }
    assert_int_equal(log_reader_next(lr, UINT64_MAX, &rec), LOG_END);
    log_reader_close(lr);
}

/* Many threads, overlapping messageIds: every id is accepted exactly once overall. */
#define THREADS 4
#define REQS    30
#define PER_REQ 10
#define IDS     100

struct worker {
    api_t *api;
    int seed;
    long accepted, duplicates;
};

static void *work(void *arg)
{
    struct worker *w = arg;
    char body[PER_REQ * 80 + 32];
    for (int q = 0; q < REQS; q++) {
        size_t len = (size_t)sprintf(body, "{\"batch\":[");
        for (int e = 0; e < PER_REQ; e++)
            len += (size_t)sprintf(body + len,
                                   "%s{\"type\":\"identify\",\"userId\":\"u\",\"messageId\":"
                                   "\"c%d\"}",
                                   e ? "," : "", (w->seed * 7 + q * PER_REQ + e) % IDS);
        sprintf(body + len, "]}");
        struct result r = call(w->api, "POST", "/v1/batch", WEB, body);
        if (r.status == 200) {
            w->accepted += (long)jint(r.json, "accepted");
            w->duplicates += (long)jint(r.json, "duplicates");
        }
        result_free(&r);
    }
    return NULL;
}

static void test_concurrent(void **state)
{
    struct fixture *f = *state;
    pthread_t t[THREADS];
    struct worker w[THREADS];
    long accepted = 0, duplicates = 0;
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){.api = f->api, .seed = i};
        assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        accepted += w[i].accepted;
        duplicates += w[i].duplicates;
    }
    assert_int_equal(accepted, IDS);
    assert_int_equal(accepted + duplicates, THREADS * REQS * PER_REQ);
    commit_stats_t s;
    commit_get_stats(f->commit, &s);
    assert_int_equal(s.accepted, IDS);
    assert_int_equal(s.log_next_offset, IDS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_batch_response_shape, setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_single_routes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_all_rejected_answers_now, setup, teardown),
        cmocka_unit_test_setup_teardown(test_whole_request_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_content_types, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth, setup, teardown),
        cmocka_unit_test_setup_teardown(test_routing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_headers, setup, teardown),
        cmocka_unit_test(test_prefix_route_anywhere),
        cmocka_unit_test(test_commit_errors),
        cmocka_unit_test_setup_teardown(test_stats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_contents, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
