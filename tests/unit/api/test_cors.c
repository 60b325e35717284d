/*
 * Unit tests for api/cors: parsing --cors-origin, origin matching, the allowed-headers echo,
 * the headers of preflights and answers; then the same through api_check_headers / api_handle
 * against a real commit_t, including an answer that arrives later from the writer thread.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "api/api.h"
#include "api/cors.h"
#include "testutil.h"

#define LIST "https://app.example.com, http://127.0.0.1:8080"

/* The value of header `name` among resp's (case-insensitive), or NULL. */
static const char *header(const api_resp_t *resp, const char *name)
{
    for (size_t i = 0; i < resp->nheaders; i++)
        if (strcasecmp(resp->headers[i].name, name) == 0)
            return resp->headers[i].value;
    return NULL;
}

static const char *hdr_of(const cors_headers_t *h, const char *name)
{
    for (size_t i = 0; i < h->n; i++)
        if (strcasecmp(h->h[i].name, name) == 0)
            return h->h[i].value;
    return NULL;
}

static cors_t *make(const char *spec)
{
    cors_t *c = NULL;
    char err[256];
    if (cors_new(spec, &c, err, sizeof(err)) != CORS_OK)
        fail_msg("cors_new(\"%s\"): %s", spec ? spec : "(null)", err);
    return c;
}

static void test_parse_any(void **state)
{
    static const char *const any[] = {"*", " * ", "", "  "};
    (void)state;
    for (size_t i = 0; i < sizeof(any) / sizeof(any[0]); i++) {
        cors_t *c = make(any[i]);
        assert_true(cors_any(c));
        assert_true(cors_allowed(c, "https://anything.example"));
        assert_false(cors_allowed(c, NULL));
        assert_false(cors_allowed(c, ""));
        cors_free(c);
    }
    cors_t *c = make(NULL);
    assert_true(cors_any(c));
    cors_free(c);
    cors_free(NULL);
}

static void test_parse_list(void **state)
{
    (void)state;
    cors_t *c = make(" https://App.Example.com/ ,http://127.0.0.1:8080,http://[::1]:3000 ");
    assert_false(cors_any(c));
    assert_true(cors_allowed(c, "https://app.example.com"));
    assert_true(cors_allowed(c, "HTTPS://APP.EXAMPLE.COM")); /* scheme and host are case-free */
    assert_true(cors_allowed(c, "http://127.0.0.1:8080"));
    assert_true(cors_allowed(c, "http://[::1]:3000"));
    assert_false(cors_allowed(c, "http://app.example.com"));      /* other scheme */
    assert_false(cors_allowed(c, "https://app.example.com:443")); /* not how browsers send it */
    assert_false(cors_allowed(c, "https://app.example.co"));      /* a prefix is not a match */
    assert_false(cors_allowed(c, "https://app.example.com.evil.test"));
    assert_false(cors_allowed(c, "http://127.0.0.1:8081"));
    assert_false(cors_allowed(c, "null"));
    assert_false(cors_allowed(c, NULL));
    cors_free(c);
}

static void test_parse_invalid(void **state)
{
    static const char *const bad[] = {
        "https://a.example,,https://b.example", /* empty entry */
        "https://a.example,",                   /* trailing comma */
        "*,https://a.example",                  /* "*" inside a list */
        "https://a.example/app",                /* path */
        "https://a.example?x=1",
        "https://user@a.example", /* user info */
        "a.example",              /* no scheme */
        "https://",
        "https://a.example:0",
        "https://a.example:65536",
        "https://a.example:80a",
        "https://*.example.com", /* no wildcards */
        "null",
        "https://a b.example",
        "http://[::1",
    };
    char err[256];
    cors_t *c = (cors_t *)1;
    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        if (cors_new(bad[i], &c, err, sizeof(err)) != CORS_INVALID)
            fail_msg("accepted \"%s\"", bad[i]);
        assert_null(c);
        assert_true(strlen(err) > 0);
    }
    /* Too long to echo in a header. */
    char longo[CORS_ORIGIN_MAX + 32];
    snprintf(longo, sizeof(longo), "https://%0*d.example", CORS_ORIGIN_MAX, 0);
    for (char *p = longo + 8; *p == '0'; p++)
        *p = 'a';
    assert_int_equal(cors_new(longo, &c, err, sizeof(err)), CORS_INVALID);
    assert_non_null(strstr(err, "too long"));
    /* errlen 0 is allowed. */
    assert_int_equal(cors_new("nope", &c, NULL, 0), CORS_INVALID);
}

static void test_allow_headers(void **state)
{
    char out[CORS_ALLOW_HEADERS_LEN + 1];
    (void)state;
    assert_int_equal(cors_allow_headers(NULL, out, sizeof(out)), 0);
    assert_string_equal(out, "");
    assert_int_equal(cors_allow_headers("", out, sizeof(out)), 0);
    assert_int_equal(cors_allow_headers("content-type", out, sizeof(out)), 1);
    assert_string_equal(out, "content-type");
    /* Chromium sends lower case without blanks; others may not. Each name once, lower case. */
    assert_int_equal(
        cors_allow_headers(" Authorization ,X-Custom,content-type,CONTENT-TYPE,x-retry-count", out,
                           sizeof(out)),
        4);
    assert_string_equal(out, "authorization, x-custom, content-type, x-retry-count");
    /* What RudderStack's JS SDK v3 asks for, retries included: every name echoed. */
    assert_int_equal(cors_allow_headers("accept,anonymousid,authorization,content-type,"
                                        "rsa-recovered,rsa-retry-attempt,rsa-retry-reason,"
                                        "rsa-since-first-attempt,rsa-since-last-attempt,sentat",
                                        out, sizeof(out)),
                     10);
    assert_non_null(strstr(out, "sentat"));
    assert_non_null(strstr(out, "rsa-since-last-attempt"));
    /* Names that are not tokens, empty entries, and the proxy's client-address headers: out. */
    assert_int_equal(cors_allow_headers("x a,x\"b,,(c),x-forwarded-for,Forwarded,X-Real-IP,"
                                        "x-forwarded-proto,ok!#$%&'*+-.^_`|~9",
                                        out, sizeof(out)),
                     1);
    assert_string_equal(out, "ok!#$%&'*+-.^_`|~9");
    assert_int_equal(cors_allow_headers("\x01, \xc3\xa9t\xc3\xa9", out, sizeof(out)), 0);
    assert_string_equal(out, "");
    /* A prefix of a written name is not that name. */
    assert_int_equal(cors_allow_headers("content-type, content, content-typeX", out, sizeof(out)),
                     3);
    assert_string_equal(out, "content-type, content, content-typex");

    /* Bounded: at most CORS_MAX_ALLOW_HEADERS names, and whole names within the buffer. */
    char many[2048];
    size_t used = 0;
    for (int i = 0; i < 100; i++)
        used += (size_t)snprintf(many + used, sizeof(many) - used, "%sh%d", i ? "," : "", i);
    assert_int_equal(cors_allow_headers(many, out, sizeof(out)), CORS_MAX_ALLOW_HEADERS);
    assert_non_null(strstr(out, "h31"));
    assert_null(strstr(out, "h32"));
    char lng[400];
    memset(lng, 'a', sizeof(lng) - 1);
    lng[sizeof(lng) - 1] = '\0';
    lng[0] = 'b';
    lng[300] = ',';
    assert_int_equal(cors_allow_headers(lng, out, sizeof(out)), 0); /* the first cannot fit */
    assert_string_equal(out, "");
    char small[18]; /* "abcdefgh, ijklmnop" and its NUL would take 19 */
    assert_int_equal(cors_allow_headers("abcdefgh,ijklmnop,qrs", small, sizeof(small)), 1);
    assert_string_equal(small, "abcdefgh");
}

static void test_actual_headers(void **state)
{
    cors_headers_t h;
    (void)state;
    cors_t *any = make("*");
    cors_actual(any, "http://127.0.0.1:9999", &h);
    assert_string_equal(hdr_of(&h, "Access-Control-Allow-Origin"), "*");
    assert_string_equal(hdr_of(&h, "Access-Control-Expose-Headers"), CORS_EXPOSE_HEADERS);
    assert_null(hdr_of(&h, "Vary"));
    assert_null(hdr_of(&h, "Access-Control-Allow-Credentials"));
    cors_actual(any, NULL, &h); /* not a browser's cross-origin request */
    assert_int_equal(h.n, 0);
    cors_free(any);

    cors_t *list = make(LIST);
    cors_actual(list, "http://127.0.0.1:8080", &h);
    assert_string_equal(hdr_of(&h, "Access-Control-Allow-Origin"), "http://127.0.0.1:8080");
    assert_string_equal(hdr_of(&h, "Vary"), "Origin");
    assert_non_null(hdr_of(&h, "Access-Control-Expose-Headers"));
    assert_null(hdr_of(&h, "Access-Control-Allow-Credentials"));
    cors_actual(list, "http://127.0.0.1:9999", &h); /* not allowed: Vary only */
    assert_int_equal(h.n, 1);
    assert_string_equal(hdr_of(&h, "Vary"), "Origin");
    cors_actual(list, NULL, &h);
    assert_int_equal(h.n, 1);
    cors_free(list);
}

static void test_preflight(void **state)
{
    api_resp_t r;
    (void)state;
    cors_t *any = make("*");
    assert_int_equal(cors_preflight(any, "http://127.0.0.1:9999", "content-type,x forwarded", &r),
                     0);
    assert_int_equal(r.status, 204);
    assert_null(r.body);
    assert_string_equal(header(&r, "Access-Control-Allow-Origin"), "*");
    assert_string_equal(header(&r, "Access-Control-Allow-Methods"), "POST, OPTIONS");
    assert_string_equal(header(&r, "Access-Control-Allow-Headers"), "content-type");
    assert_string_equal(header(&r, "Access-Control-Max-Age"), "7200");
    assert_string_equal(header(&r, "Vary"), "Access-Control-Request-Headers");
    assert_int_equal(cors_preflight(any, "http://127.0.0.1:9999", "content-type,x-evil", &r), 0);
    assert_string_equal(header(&r, "Access-Control-Allow-Headers"), "content-type, x-evil");
    assert_null(header(&r, "Access-Control-Allow-Credentials"));
    /* No headers requested: none allowed in the answer. */
    assert_int_equal(cors_preflight(any, "http://x.example", NULL, &r), 0);
    assert_null(header(&r, "Access-Control-Allow-Headers"));
    /* OPTIONS without Origin: plain HTTP OPTIONS, no CORS. */
    assert_int_equal(cors_preflight(any, NULL, NULL, &r), 0);
    assert_int_equal(r.status, 204);
    assert_string_equal(r.allow, "POST, OPTIONS");
    assert_int_equal(r.nheaders, 0);
    cors_free(any);

    cors_t *list = make(LIST);
    assert_int_equal(cors_preflight(list, "https://app.example.com", "authorization", &r), 0);
    assert_int_equal(r.status, 204);
    assert_string_equal(header(&r, "Access-Control-Allow-Origin"), "https://app.example.com");
    assert_string_equal(header(&r, "Access-Control-Allow-Headers"), "authorization");
    assert_string_equal(header(&r, "Vary"), "Origin, Access-Control-Request-Headers");
    /* Not allowed: 403 JSON, no CORS headers. */
    assert_int_equal(cors_preflight(list, "https://evil.example", "content-type", &r), 0);
    assert_int_equal(r.status, 403);
    assert_non_null(r.body);
    assert_non_null(strstr(r.body, "\"success\":false"));
    assert_null(header(&r, "Access-Control-Allow-Origin"));
    assert_null(header(&r, "Access-Control-Allow-Methods"));
    assert_string_equal(header(&r, "Vary"), "Origin");
    free(r.body);
    cors_free(list);
}

/* ---- through the api, against a real commit ---- */

static const api_write_key_t KEYS[] = {{"k_web", "web"}};
#define WEB "Basic a193ZWI6" /* base64("k_web:") */

struct fixture {
    char dir[256];
    commit_t *commit;
    api_t *api;
};

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

static int setup_with(void **state, const char *origins)
{
    struct fixture *f = calloc(1, sizeof(*f));
    char err[256] = "";
    assert_non_null(f);
    assert_int_equal(tu_tempdir(f->dir, sizeof(f->dir), "cors"), 0);
    commit_options_t co = {.data_dir = f->dir, .window_ms = 86400000};
    if (commit_open(&co, &f->commit, err, sizeof(err)) != COMMIT_OK)
        fail_msg("commit_open: %s", err);
    api_options_t ao = {.keys = KEYS, .nkeys = 1, .commit = f->commit, .cors_origin = origins};
    assert_int_equal(api_new(&ao, &f->api), 0);
    *state = f;
    return 0;
}

static int setup_list(void **state)
{
    return setup_with(state, LIST);
}

static int setup_any(void **state)
{
    return setup_with(state, NULL); /* the default: "*" */
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    api_free(f->api);
    commit_close(f->commit);
    tu_rm_rf(f->dir);
    free(f);
    return 0;
}

/* Runs a whole request (check_headers, then handle) and returns its answer (body caller-freed). */
static api_resp_t run(api_t *api, const char *method, const char *path, const char *auth,
                      const char *origin, const char *body)
{
    struct waiter w = {0};
    api_resp_t resp = {0};
    api_req_t req = {
        .method = method,
        .path = path,
        .authorization = auth,
        .content_type = "text/plain",
        .origin = origin,
        .acr_method = strcmp(method, "OPTIONS") == 0 ? "POST" : NULL,
        .acr_headers = strcmp(method, "OPTIONS") == 0 ? "content-type" : NULL,
        .body = body,
        .body_len = body ? strlen(body) : 0,
        .now_ms = tu_now_ms(),
    };
    if (api_check_headers(api, &req, &resp) == API_DONE)
        return resp;
    assert_null(resp.body);
    tu_waiter_init(&w.w);
    tu_waiter_add(&w.w, 1);
    int outcome = api_handle(api, &req, &resp, on_done, &w);
    if (outcome == API_PENDING) {
        tu_waiter_wait(&w.w);
        resp = w.resp;
    } else {
        assert_int_equal(outcome, API_DONE);
    }
    tu_waiter_destroy(&w.w);
    return resp;
}

#define EVENT "{\"type\":\"track\",\"event\":\"E\",\"userId\":\"u\"}"

static void test_api_list(void **state)
{
    struct fixture *f = *state;
    const char *ok = "https://app.example.com";

    /* Preflight on every ingest route, answered before any body. */
    static const char *const routes[] = {"/v1/batch", "/v1/import", "/v1/track", "/v1/identify",
                                         "/v1/page",  "/v1/screen", "/v1/group", "/v1/alias"};
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        api_resp_t r = run(f->api, "OPTIONS", routes[i], NULL, ok, NULL);
        assert_int_equal(r.status, 204);
        assert_string_equal(header(&r, "Access-Control-Allow-Origin"), ok);
        assert_string_equal(header(&r, "Access-Control-Allow-Headers"), "content-type");
    }
    api_resp_t r = run(f->api, "OPTIONS", "/v1/batch", NULL, "https://evil.example", NULL);
    assert_int_equal(r.status, 403);
    assert_null(header(&r, "Access-Control-Allow-Origin"));
    free(r.body);

    /* A success answered later by the writer thread carries the headers. */
    r = run(f->api, "POST", "/v1/track", WEB, ok, EVENT);
    assert_int_equal(r.status, 200);
    assert_string_equal(header(&r, "Access-Control-Allow-Origin"), ok);
    assert_string_equal(header(&r, "Vary"), "Origin");
    assert_string_equal(header(&r, "Access-Control-Expose-Headers"), CORS_EXPOSE_HEADERS);
    free(r.body);

    /* Errors too: 401 before the body, 401 and 400 after it, 405. */
    r = run(f->api, "POST", "/v1/track", "Basic bm9wZTo=", ok, EVENT);
    assert_int_equal(r.status, 401);
    assert_string_equal(header(&r, "Access-Control-Allow-Origin"), ok);
    free(r.body);
    r = run(f->api, "POST", "/v1/track", NULL, ok, EVENT);
    assert_int_equal(r.status, 401);
    assert_string_equal(header(&r, "Access-Control-Allow-Origin"), ok);
    free(r.body);
    r = run(f->api, "POST", "/v1/batch", WEB, ok, "{not json");
    assert_int_equal(r.status, 400);
    assert_string_equal(header(&r, "Access-Control-Allow-Origin"), ok);
    free(r.body);
    r = run(f->api, "GET", "/v1/batch", WEB, ok, NULL);
    assert_int_equal(r.status, 405);
    assert_string_equal(header(&r, "Access-Control-Allow-Origin"), ok);
    free(r.body);

    /* An origin not in the list is refused on every request, not only on preflights: a page
     * of another site cannot send events with a request that needs no preflight (text/plain,
     * key in the body) either. Nothing is logged. */
    commit_stats_t before, after;
    commit_get_stats(f->commit, &before);
    r = run(f->api, "POST", "/v1/track", WEB, "https://evil.example", EVENT);
    assert_int_equal(r.status, 403);
    assert_non_null(strstr(r.body, "origin not allowed by --cors-origin"));
    assert_null(header(&r, "Access-Control-Allow-Origin"));
    assert_string_equal(header(&r, "Vary"), "Origin");
    free(r.body);
    r = run(f->api, "POST", "/v1/batch", NULL, "https://evil.example",
            "{\"writeKey\":\"k_web\",\"batch\":[" EVENT "]}");
    assert_int_equal(r.status, 403);
    free(r.body);
    /* Also when the transport skipped the early check: api_handle refuses it too. */
    api_req_t req = {.method = "POST",
                     .path = "/v1/track",
                     .authorization = WEB,
                     .origin = "https://evil.example",
                     .body = EVENT,
                     .body_len = strlen(EVENT),
                     .now_ms = tu_now_ms()};
    assert_int_equal(api_handle(f->api, &req, &r, NULL, NULL), API_DONE);
    assert_int_equal(r.status, 403);
    free(r.body);
    commit_get_stats(f->commit, &after);
    assert_int_equal(after.accepted, before.accepted);

    /* Routes other than ingest get nothing. */
    r = run(f->api, "GET", "/stats", NULL, ok, NULL);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.nheaders, 0);
    free(r.body);
    r = run(f->api, "OPTIONS", "/stats", NULL, ok, NULL);
    assert_int_equal(r.status, 405);
    assert_null(header(&r, "Access-Control-Allow-Origin"));
    free(r.body);
}

static void test_api_any(void **state)
{
    struct fixture *f = *state;
    api_resp_t r = run(f->api, "OPTIONS", "/v1/page", NULL, "http://127.0.0.1:1", NULL);
    assert_int_equal(r.status, 204);
    assert_string_equal(header(&r, "Access-Control-Allow-Origin"), "*");
    assert_null(header(&r, "Access-Control-Allow-Credentials"));

    r = run(f->api, "POST", "/v1/page", WEB, "http://127.0.0.1:1",
            "{\"type\":\"page\",\"name\":\"Home\",\"userId\":\"u\"}");
    assert_int_equal(r.status, 200);
    assert_string_equal(header(&r, "Access-Control-Allow-Origin"), "*");
    assert_null(header(&r, "Vary"));
    free(r.body);

    /* Not a browser: no CORS headers at all. */
    r = run(f->api, "POST", "/v1/page", WEB, NULL,
            "{\"type\":\"page\",\"name\":\"Home\",\"userId\":\"u\"}");
    assert_int_equal(r.status, 200);
    assert_int_equal(r.nheaders, 0);
    free(r.body);
}

static void test_api_bad_list(void **state)
{
    char dir[256], err[256] = "";
    commit_t *commit = NULL;
    api_t *api = (api_t *)1;
    (void)state;
    assert_int_equal(tu_tempdir(dir, sizeof(dir), "cors-bad"), 0);
    commit_options_t co = {.data_dir = dir, .window_ms = 86400000};
    if (commit_open(&co, &commit, err, sizeof(err)) != COMMIT_OK)
        fail_msg("commit_open: %s", err);
    api_options_t ao = {.keys = KEYS, .nkeys = 1, .commit = commit, .cors_origin = "nope"};
    assert_int_equal(api_new(&ao, &api), -1);
    assert_null(api);
    commit_close(commit);
    tu_rm_rf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_any),
        cmocka_unit_test(test_parse_list),
        cmocka_unit_test(test_parse_invalid),
        cmocka_unit_test(test_allow_headers),
        cmocka_unit_test(test_actual_headers),
        cmocka_unit_test(test_preflight),
        cmocka_unit_test_setup_teardown(test_api_list, setup_list, teardown),
        cmocka_unit_test_setup_teardown(test_api_any, setup_any, teardown),
        cmocka_unit_test(test_api_bad_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
