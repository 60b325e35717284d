"""Routes: every ingest route, the GET routes, 404, 405 + Allow, HEAD, trailing slash, query."""

import http.client
import json
import unittest

from harness import ServerTestCase, basic, log_cat, new_id, track

# One valid event per single-event route (the route gives the type).
SINGLE = {
    "track": {"event": "Signed Up", "userId": "u1"},
    "identify": {"userId": "u1", "traits": {"plan": "pro"}},
    "page": {"anonymousId": "a1", "name": "Home"},
    "screen": {"anonymousId": "a1", "name": "Settings"},
    "group": {"userId": "u1", "groupId": "g1"},
    "alias": {"userId": "u2", "previousId": "u1"},
}


class Routes(ServerTestCase):

    def test_batch(self):
        mids = [new_id() for _ in range(3)]
        r = self.srv.batch([track(mid=m) for m in mids])
        self.assertOk(r, accepted=3, duplicates=0, rejected=[])
        logged = {e["messageId"] for e in log_cat(self.srv.data_dir)}
        self.assertTrue(set(mids) <= logged)

    def test_import(self):
        mid = new_id()
        r = self.srv.post("/v1/import", {"batch": [track(mid=mid)]}, key=self.key)
        self.assertOk(r, accepted=1, duplicates=0, rejected=[])
        self.assertIn(mid, {e["messageId"] for e in log_cat(self.srv.data_dir)})

    def test_single_event_routes(self):
        for typ, body in SINGLE.items():
            with self.subTest(route=typ):
                mid = new_id(typ)
                ev = dict(body, messageId=mid)
                r = self.srv.post("/v1/" + typ, ev, key=self.key)
                self.assertOk(r, accepted=1, duplicates=0, rejected=[])
                logged = [e for e in log_cat(self.srv.data_dir) if e.get("messageId") == mid]
                self.assertEqual(len(logged), 1)
                self.assertEqual(logged[0]["type"], typ, "type comes from the path")

    def test_single_route_with_matching_type(self):
        r = self.srv.post("/v1/track", dict(SINGLE["track"], type="track"), key=self.key)
        self.assertOk(r, accepted=1)

    def test_batch_all_types(self):
        events = [dict(body, type=typ, messageId=new_id(typ)) for typ, body in SINGLE.items()]
        self.assertOk(self.srv.batch(events), accepted=len(events), rejected=[])

    def test_healthz(self):
        r = self.srv.get("/healthz")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json, {"status": "ok"})
        self.assertTrue((r.header("Content-Type") or "").startswith("application/json"), r)

    def test_stats_and_metrics_need_no_auth(self):
        self.assertEqual(self.srv.get("/stats").status, 200)
        self.assertEqual(self.srv.get("/metrics").status, 200)
        self.assertEqual(self.srv.get("/healthz").status, 200)

    def test_head_on_get_routes(self):
        for path in ("/healthz", "/stats", "/metrics"):
            with self.subTest(path=path):
                r = self.srv.request("HEAD", path)
                self.assertEqual(r.status, 200, r)
                self.assertEqual(r.body, b"", "HEAD has no body")

    def test_unknown_path_404(self):
        for method, path in (("GET", "/"), ("GET", "/nope"), ("POST", "/v1/nope"),
                             ("POST", "/v2/batch"), ("GET", "/v1"), ("POST", "/v1/batchx")):
            with self.subTest(method=method, path=path):
                r = self.srv.request(method, path, body=b"{}" if method == "POST" else None,
                                     headers={"Authorization": "Basic dGVzdGtleTo="})
                self.assertError(r, 404)

    def test_wrong_method_405_ingest(self):
        for path in ("/v1/batch", "/v1/import", "/v1/track", "/v1/identify", "/v1/page",
                     "/v1/screen", "/v1/group", "/v1/alias"):
            for method in ("GET", "PUT", "DELETE"):
                with self.subTest(path=path, method=method):
                    r = self.srv.request(method, path, key=self.key)
                    self.assertError(r, 405)
                    self.assertEqual((r.header("Allow") or "").replace(" ", ""), "POST,OPTIONS", r)

    def test_wrong_method_405_get_routes(self):
        for path in ("/stats", "/metrics", "/healthz"):
            for method in ("POST", "PUT", "DELETE"):
                with self.subTest(path=path, method=method):
                    r = self.srv.request(method, path, body=b"{}" if method != "DELETE" else None)
                    self.assertError(r, 405)
                    allow = {m.strip() for m in (r.header("Allow") or "").split(",")}
                    self.assertEqual(allow, {"GET", "HEAD"}, r)

    def test_trailing_slash(self):
        mid = new_id()
        r = self.srv.post("/v1/batch/", {"batch": [track(mid=mid)]}, key=self.key)
        self.assertOk(r, accepted=1)
        r = self.srv.post("/v1/track/", SINGLE["track"], key=self.key)
        self.assertOk(r, accepted=1)
        self.assertEqual(self.srv.get("/healthz/").status, 200)
        self.assertEqual(self.srv.get("/stats/").status, 200)

    def test_query_string_ignored(self):
        r = self.srv.post("/v1/batch?foo=bar&x=1", {"batch": [track(mid=new_id())]},
                          key=self.key)
        self.assertOk(r, accepted=1)
        r = self.srv.get("/healthz?verbose=1")
        self.assertEqual(r.status, 200, r)
        r = self.srv.get("/stats?x=y")
        self.assertEqual(r.status, 200, r)

    def test_single_route_rejected_event_is_400(self):
        cases = [
            ("track", {"userId": "u1"}),                              # no event
            ("track", {"event": "", "userId": "u1"}),                 # empty event
            ("track", {"event": "E"}),                                # no user
            ("track", {"event": "E", "userId": "u1", "type": "identify"}),  # type mismatch
            ("group", {"userId": "u1"}),                              # no groupId
            ("alias", {"userId": "u1"}),                              # no previousId
            ("identify", {"traits": {}}),                             # no user
        ]
        for typ, body in cases:
            with self.subTest(route=typ, body=body):
                r = self.srv.post("/v1/" + typ, body, key=self.key)
                self.assertError(r, 400)

    def test_single_route_duplicate(self):
        mid = new_id()
        ev = dict(SINGLE["identify"], messageId=mid)
        self.assertOk(self.srv.post("/v1/identify", ev, key=self.key), accepted=1, duplicates=0)
        self.assertOk(self.srv.post("/v1/identify", ev, key=self.key), accepted=0, duplicates=1)

    def test_keep_alive_many_requests_on_one_connection(self):
        conn = http.client.HTTPConnection(self.srv.host, self.srv.port, timeout=10)
        try:
            mids = [new_id() for _ in range(5)]
            for m in mids:
                conn.request("POST", "/v1/batch", body=json.dumps({"batch": [track(mid=m)]}),
                             headers={"Authorization": basic(self.key),
                                      "Content-Type": "application/json"})
                r = conn.getresponse()
                body = json.loads(r.read())
                self.assertEqual((r.status, body["accepted"]), (200, 1), body)
            conn.request("GET", "/healthz")
            r = conn.getresponse()
            self.assertEqual(r.status, 200)
            r.read()
        finally:
            conn.close()
        logged = [e["messageId"] for e in log_cat(self.srv.data_dir)]
        for m in mids:
            self.assertEqual(logged.count(m), 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
