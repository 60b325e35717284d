/*
 * The edge role without a cluster: the api's sink plumbing driven through api_handle with a
 * recording sink (the sink interface's other implementation, not a mock of our code), the
 * edge's option checks, and its pure /stats and /metrics rendering. The edge against a real
 * Kafka wire protocol is tests/kafka/test_edge.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "api/api.h"
#include "cluster/edge.h"
#include "testutil.h"

#define WEB "Basic a193ZWI6" /* base64("k_web:") */

static const api_write_key_t KEYS[] = {{"k_web", "web"}};

/* What the recording sink saw of the last request, and how it answers. */
struct sink_rec {
    int refuse;        /* submit returns -1 */
    const char *error; /* done(error) */
    int defer;         /* keep done for the test to call later */
    char source[64];
    int64_t received_ms;
    size_t n;
    struct {
        char *data, *mid;
        size_t mid_len;
        int64_t ts;
    } ev[8];
    api_sink_done_fn done;
    void *arg;
    const char *unhealthy;
};

static void rec_clear(struct sink_rec *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->ev[i].data);
        free(r->ev[i].mid);
    }
    r->n = 0;
}

static int rec_submit(void *ctx, const char *source, int64_t received_ms,
                      const api_sink_event_t *events, size_t n, api_sink_done_fn done, void *arg)
{
    struct sink_rec *r = ctx;
    rec_clear(r);
    if (r->refuse)
        return -1;
    snprintf(r->source, sizeof r->source, "%s", source);
    r->received_ms = received_ms;
    assert_true(n <= 8);
    for (size_t i = 0; i < n; i++) {
        /* Borrowed for the call only: copy, as a real sink does. */
        r->ev[i].data = strndup(events[i].data, events[i].len);
        r->ev[i].mid = strndup(events[i].message_id, events[i].message_id_len);
        r->ev[i].mid_len = events[i].message_id_len;
        r->ev[i].ts = events[i].timestamp_ms;
    }
    r->n = n;
    if (r->defer) {
        r->done = done;
        r->arg = arg;
    } else {
        done(r->error, arg); /* on the submitting thread: allowed by the contract */
    }
    return 0;
}

static char *rec_stats(void *ctx)
{
    (void)ctx;
    return strdup("{\"partitions\":4,\"requests\":{\"waiting\":0}}");
}

static char *rec_metrics(void *ctx)
{
    (void)ctx;
    return strdup("ingestd_edge_partitions 4\n");
}

static const char *rec_unhealthy(void *ctx)
{
    return ((struct sink_rec *)ctx)->unhealthy;
}

struct waiter {
    tu_waiter_t w;
    api_resp_t resp;
};

static void on_done(api_resp_t *resp, void *arg)
{
    struct waiter *w = arg;
    w->resp = *resp;
    resp->body = NULL;
    tu_waiter_done(&w->w);
}

struct result {
    int outcome, status, retry_after;
    json_t *json;
    char *body;
};

/* api_handle; a pending answer is awaited (the deferred case calls done itself first). */
static struct result call(api_t *api, struct sink_rec *rec, const char *method, const char *path,
                          const char *auth, const char *body, int64_t now_ms)
{
    struct result r = {0};
    struct waiter w = {0};
    api_resp_t resp = {0};
    api_req_t req = {.method = method,
                     .path = path,
                     .authorization = auth,
                     .content_type = "application/json",
                     .body = body,
                     .body_len = body ? strlen(body) : 0,
                     .now_ms = now_ms};
    tu_waiter_init(&w.w);
    tu_waiter_add(&w.w, 1);
    r.outcome = api_handle(api, &req, &resp, on_done, &w);
    if (r.outcome == API_PENDING) {
        if (rec->defer && rec->done) {
            api_sink_done_fn done = rec->done;
            rec->done = NULL;
            done(rec->error, rec->arg);
        }
        tu_waiter_wait(&w.w);
        resp = w.resp;
    }
    tu_waiter_destroy(&w.w);
    r.status = resp.status;
    r.retry_after = resp.retry_after;
    r.body = strndup(resp.body ? resp.body : "", resp.body_len);
    r.json = json_loads(r.body, JSON_DECODE_ANY, NULL);
    free(resp.body);
    return r;
}

static void result_free(struct result *r)
{
    json_decref(r->json);
    free(r->body);
}

static json_int_t jint(json_t *o, const char *a, const char *b)
{
    json_t *v = json_object_get(o, a);
    if (b != NULL)
        v = json_object_get(v, b);
    assert_true(json_is_integer(v));
    return json_integer_value(v);
}

static api_t *edge_api(struct sink_rec *rec, const char *admin_token)
{
    api_sink_t sink = {.submit = rec_submit,
                       .stats_json = rec_stats,
                       .metrics = rec_metrics,
                       .unhealthy = rec_unhealthy,
                       .role = "edge",
                       .ctx = rec};
    api_options_t o = {
        .keys = KEYS, .nkeys = 1, .commit = NULL, .sink = &sink, .admin_token = admin_token};
    api_t *api = NULL;
    assert_int_equal(api_new(&o, &api), 0);
    return api;
}

static void test_new_needs_commit_or_complete_sink(void **state)
{
    (void)state;
    api_t *api = NULL;
    api_options_t o = {.keys = KEYS, .nkeys = 1};
    assert_int_equal(api_new(&o, &api), -1);
    api_sink_t half = {.submit = rec_submit, .role = "edge"};
    o.sink = &half;
    assert_int_equal(api_new(&o, &api), -1);
    assert_null(api);
}

/* The valid events go to the sink with what the edge routes by; the answer waits for done. */
static void test_sink_gets_events_and_answers_200(void **state)
{
    (void)state;
    struct sink_rec rec = {0};
    api_t *api = edge_api(&rec, NULL);
    const char *body = "{\"batch\":["
                       "{\"type\":\"track\",\"event\":\"A\",\"userId\":\"u\",\"messageId\":\"m-1\","
                       "\"timestamp\":\"2020-01-02T03:04:05.678Z\"},"
                       "{\"type\":\"nope\",\"userId\":\"u\"},"
                       "{\"type\":\"identify\",\"userId\":\"u\"}]}";
    struct result r = call(api, &rec, "POST", "/v1/batch", WEB, body, 1700000000000);
    assert_int_equal(r.outcome, API_PENDING);
    assert_int_equal(r.status, 200);
    assert_int_equal(jint(r.json, "accepted", NULL), 2);
    assert_int_equal(jint(r.json, "duplicates", NULL), 0);
    json_t *rej = json_object_get(r.json, "rejected");
    assert_int_equal(json_array_size(rej), 1);
    assert_int_equal(jint(json_array_get(rej, 0), "index", NULL), 1);
    result_free(&r);

    assert_string_equal(rec.source, "web");
    assert_int_equal(rec.received_ms, 1700000000000);
    assert_int_equal(rec.n, 2);
    /* Event 0: the client's messageId and timestamp as sent. */
    assert_string_equal(rec.ev[0].mid, "m-1");
    assert_int_equal(rec.ev[0].ts, INT64_C(1577934245678));
    /* Event 1: an assigned UUID, no timestamp. */
    assert_int_equal(rec.ev[1].mid_len, 36);
    assert_int_equal(rec.ev[1].ts, INT64_MAX);
    /* The bytes are the event as single-node logs it, holding that very messageId. */
    for (size_t i = 0; i < 2; i++) {
        json_t *ev = json_loads(rec.ev[i].data, 0, NULL);
        assert_non_null(ev);
        assert_string_equal(json_string_value(json_object_get(ev, "messageId")), rec.ev[i].mid);
        assert_string_equal(json_string_value(json_object_get(ev, "source")), "web");
        assert_string_equal(json_string_value(json_object_get(ev, "receivedAt")),
                            "2023-11-14T22:13:20.000Z");
        json_decref(ev);
    }

    /* A single-event route, answered later from "another" place (deferred done). */
    rec.defer = 1;
    r = call(api, &rec, "POST", "/v1/track", WEB,
             "{\"event\":\"B\",\"anonymousId\":\"a\",\"messageId\":\"m-2\"}", 1700000000001);
    assert_int_equal(r.status, 200);
    assert_int_equal(jint(r.json, "accepted", NULL), 1);
    assert_string_equal(rec.ev[0].mid, "m-2");
    result_free(&r);

    /* /stats: the role, no storage sections, the sink's own section. */
    r = call(api, &rec, "GET", "/stats", NULL, NULL, 1700000000002);
    assert_int_equal(r.status, 200);
    assert_string_equal(json_string_value(json_object_get(r.json, "role")), "edge");
    assert_int_equal(jint(r.json, "events", "accepted"), 3);
    assert_int_equal(jint(r.json, "events", "duplicates"), 0);
    assert_int_equal(jint(r.json, "events", "rejected"), 1);
    assert_int_equal(jint(r.json, "edge", "partitions"), 4);
    assert_null(json_object_get(r.json, "dedupe"));
    assert_null(json_object_get(r.json, "log"));
    assert_null(json_object_get(r.json, "commit"));
    result_free(&r);
    r = call(api, &rec, "GET", "/metrics", NULL, NULL, 1700000000002);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "ingestd_events_accepted_total 3\n"));
    assert_non_null(strstr(r.body, "ingestd_edge_partitions 4\n"));
    assert_null(strstr(r.body, "ingestd_commit_"));
    result_free(&r);
    rec_clear(&rec);
    api_free(api);
}

/* A failed delivery or a refusal: 503 with Retry-After, nothing counted as accepted. */
static void test_sink_failure_is_503(void **state)
{
    (void)state;
    struct sink_rec rec = {0};
    api_t *api = edge_api(&rec, "tok");
    const char *body = "{\"batch\":[{\"type\":\"track\",\"event\":\"A\",\"userId\":\"u\"}]}";

    rec.error = "kafka did not take every event of this request, retry later";
    struct result r = call(api, &rec, "POST", "/v1/batch", WEB, body, 1700000000000);
    assert_int_equal(r.outcome, API_PENDING);
    assert_int_equal(r.status, 503);
    assert_true(r.retry_after > 0);
    assert_string_equal(json_string_value(json_object_get(r.json, "error")), rec.error);
    result_free(&r);

    rec.error = NULL;
    rec.refuse = 1;
    r = call(api, &rec, "POST", "/v1/batch", WEB, body, 1700000000000);
    assert_int_equal(r.outcome, API_DONE);
    assert_int_equal(r.status, 503);
    assert_true(r.retry_after > 0);
    result_free(&r);

    /* Validation still answers before any sink: 400 and 401 as single-node. */
    r = call(api, &rec, "POST", "/v1/batch", WEB, "{\"batch\":[]}", 1700000000000);
    assert_int_equal(r.status, 400);
    result_free(&r);
    r = call(api, &rec, "POST", "/v1/batch", "Basic bm9wZTo=", body, 1700000000000);
    assert_int_equal(r.status, 401);
    result_free(&r);

    /* No local log: GET /v1/log does not exist, even with an admin token. */
    r = call(api, &rec, "GET", "/v1/log", "Bearer tok", NULL, 1700000000000);
    assert_int_equal(r.status, 404);
    result_free(&r);
    r = call(api, &rec, "GET", "/stats", "Bearer tok", NULL, 1700000000000);
    assert_int_equal(r.status, 200);
    assert_int_equal(jint(r.json, "events", "accepted"), 0);
    result_free(&r);

    /* /healthz follows the sink. */
    r = call(api, &rec, "GET", "/healthz", NULL, NULL, 1700000000000);
    assert_int_equal(r.status, 200);
    result_free(&r);
    rec.unhealthy = "the kafka producer failed fatally; restart this edge";
    r = call(api, &rec, "GET", "/healthz", NULL, NULL, 1700000000000);
    assert_int_equal(r.status, 503);
    assert_string_equal(json_string_value(json_object_get(r.json, "error")), rec.unhealthy);
    result_free(&r);
    rec_clear(&rec);
    api_free(api);
}

static void test_edge_new_checks_options(void **state)
{
    (void)state;
    char err[256];
    cluster_edge_t *e = (cluster_edge_t *)1;
    cluster_edge_options_t o = {.brokers = "127.0.0.1:9", .raw_topic = ""};
    assert_int_equal(cluster_edge_new(&o, &e, err, sizeof err), CLUSTER_EINVAL);
    assert_null(e);
    o.raw_topic = "raw";
    o.partitions_before = 2; /* without a cut-over */
    assert_int_equal(cluster_edge_new(&o, &e, err, sizeof err), CLUSTER_EINVAL);
    o.partitions_before = -1;
    o.repartition_at_ms = 1;
    assert_int_equal(cluster_edge_new(&o, &e, err, sizeof err), CLUSTER_EINVAL);
    o.partitions_before = 0;
    o.brokers = NULL;
    assert_int_equal(cluster_edge_new(&o, &e, err, sizeof err), CLUSTER_EINVAL);
    assert_null(e);
    cluster_edge_free(NULL, 0);
}

static void test_stats_rendering(void **state)
{
    (void)state;
    cluster_edge_stats_t s = {.raw_topic = "raw\"x",
                              .partitions = 8,
                              .partitions_before = 4,
                              .repartition_at_ms = 1769817600000,
                              .timeout_ms = 10000,
                              .events_produced = 10,
                              .events_delivered = 7,
                              .events_failed = 2,
                              .events_refused = 3,
                              .requests_waiting = 1,
                              .requests_delivered = 5,
                              .requests_failed = 1,
                              .requests_timed_out = 2,
                              .requests_refused = 1};
    char *text = cluster_edge_stats_json(&s);
    assert_non_null(text);
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "raw_topic")), "raw\"x");
    assert_int_equal(jint(j, "partitions", NULL), 8);
    assert_int_equal(jint(j, "partitions_before", NULL), 4);
    assert_int_equal(jint(j, "repartition_at_ms", NULL), 1769817600000);
    assert_int_equal(jint(j, "delivery_timeout_ms", NULL), 10000);
    assert_int_equal(jint(j, "events", "produced"), 10);
    assert_int_equal(jint(j, "events", "delivered"), 7);
    assert_int_equal(jint(j, "events", "failed"), 2);
    assert_int_equal(jint(j, "events", "refused"), 3);
    assert_int_equal(jint(j, "requests", "waiting"), 1);
    assert_int_equal(jint(j, "requests", "delivered"), 5);
    assert_int_equal(jint(j, "requests", "failed"), 1);
    assert_int_equal(jint(j, "requests", "timed_out"), 2);
    assert_int_equal(jint(j, "requests", "refused"), 1);
    assert_true(json_is_null(json_object_get(j, "producer_fatal")));
    json_decref(j);
    free(text);

    s.fatal = "Fatal idempotence error";
    s.partitions_before = 0; /* no repartition: no cut-over shown */
    text = cluster_edge_stats_json(&s);
    j = json_loads(text, 0, &jerr);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "producer_fatal")), s.fatal);
    assert_int_equal(jint(j, "repartition_at_ms", NULL), 0);
    json_decref(j);
    free(text);

    text = cluster_edge_metrics_text(&s);
    assert_non_null(text);
    assert_non_null(strstr(text, "ingestd_edge_events_total{outcome=\"delivered\"} 7\n"));
    assert_non_null(strstr(text, "ingestd_edge_requests_total{outcome=\"timed_out\"} 2\n"));
    assert_non_null(strstr(text, "ingestd_edge_requests_waiting 1\n"));
    assert_non_null(strstr(text, "ingestd_edge_partitions 8\n"));
    assert_non_null(strstr(text, "ingestd_edge_producer_fatal 1\n"));
    assert_non_null(strstr(text, "# TYPE ingestd_edge_events_total counter\n"));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_needs_commit_or_complete_sink),
        cmocka_unit_test(test_sink_gets_events_and_answers_200),
        cmocka_unit_test(test_sink_failure_is_503),
        cmocka_unit_test(test_edge_new_checks_options),
        cmocka_unit_test(test_stats_rendering),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
