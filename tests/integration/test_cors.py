"""CORS on the wire: preflights allowed and refused, headers on successes and errors, `*` vs a list.

The browser side (analytics.js in headless Chromium) is tests/clients/browser/test_browser.py;
this is what any HTTP client sees, against the real binary.
"""

import shutil
import tempfile
import unittest

from harness import ServerTestCase, basic, log_cat, new_id, run_cli, track

INGEST = ("/v1/batch", "/v1/import", "/v1/track", "/v1/identify", "/v1/page", "/v1/screen",
          "/v1/group", "/v1/alias", "/v1/b", "/v1/t", "/v1/i", "/v1/p", "/v1/s", "/v1/g",
          "/v1/a")
PAGE = "http://127.0.0.1:3000"
OTHER = "https://app.example.com"
CORS_NAMES = ("access-control-allow-origin", "access-control-allow-methods",
              "access-control-allow-headers", "access-control-max-age",
              "access-control-expose-headers", "access-control-allow-credentials")


def preflight(srv, path, origin, headers="content-type,authorization"):
    hdrs = {"Origin": origin, "Access-Control-Request-Method": "POST"}
    if headers is not None:
        hdrs["Access-Control-Request-Headers"] = headers
    return srv.request("OPTIONS", path, headers=hdrs)


class CorsMixin:
    def assertNoCors(self, r):
        present = [k for k, _ in r.headers if k.lower() in CORS_NAMES]
        self.assertEqual(present, [], r)

    def assertExposes(self, r):
        exposed = {h.strip().lower() for h in (r.header("Access-Control-Expose-Headers")
                                               or "").split(",")}
        self.assertLessEqual({"retry-after", "x-request-id"}, exposed, r)


class AnyOrigin(CorsMixin, ServerTestCase):
    """The default, `--cors-origin *`."""

    def test_preflight_every_ingest_route(self):
        for path in INGEST:
            with self.subTest(path=path):
                r = preflight(self.srv, path, PAGE)
                self.assertEqual(r.status, 204, r)
                self.assertEqual(r.body, b"")
                self.assertEqual(r.header("Access-Control-Allow-Origin"), "*")
                methods = {m.strip() for m in r.header("Access-Control-Allow-Methods").split(",")}
                self.assertEqual(methods, {"POST", "OPTIONS"})
                allowed = {h.strip() for h in r.header("Access-Control-Allow-Headers").split(",")}
                self.assertEqual(allowed, {"content-type", "authorization"})
                self.assertGreater(int(r.header("Access-Control-Max-Age")), 0)
                self.assertIsNone(r.header("Access-Control-Allow-Credentials"))

    def test_preflight_reflects_requested_headers(self):
        """The requested names come back (lower case, once each): a browser SDK's own headers
        (RudderStack's SentAt, AnonymousId, Rsa-*) pass, not only a fixed list."""
        r = preflight(self.srv, "/v1/batch", PAGE,
                      "Content-Encoding, X-Retry-Count, SentAt, AnonymousId, rsa-retry-attempt, "
                      "content-type, Content-Type")
        self.assertEqual(r.status, 204, r)
        allowed = [h.strip() for h in r.header("Access-Control-Allow-Headers").split(",")]
        self.assertEqual(allowed, ["content-encoding", "x-retry-count", "sentat", "anonymousid",
                                   "rsa-retry-attempt", "content-type"])
        vary = {v.strip() for v in r.header("Vary").split(",")}
        self.assertIn("Access-Control-Request-Headers", vary)
        # Not field names, or the client-address headers a trusted proxy sets: left out.
        r = preflight(self.srv, "/v1/batch", PAGE, "x a, (x), X-Forwarded-For, forwarded, ok")
        self.assertEqual(r.header("Access-Control-Allow-Headers"), "ok")
        # Bounded: at most 32 names.
        r = preflight(self.srv, "/v1/batch", PAGE, ",".join("h%d" % i for i in range(100)))
        self.assertEqual(len(r.header("Access-Control-Allow-Headers").split(",")), 32)
        # Nothing requested: nothing granted.
        r = preflight(self.srv, "/v1/batch", PAGE, headers=None)
        self.assertEqual(r.status, 204, r)
        self.assertIsNone(r.header("Access-Control-Allow-Headers"))

    def test_options_without_origin_is_plain(self):
        r = self.srv.request("OPTIONS", "/v1/track")
        self.assertEqual(r.status, 204, r)
        self.assertEqual({m.strip() for m in r.header("Allow").split(",")}, {"POST", "OPTIONS"})
        self.assertNoCors(r)

    def test_success_and_errors_carry_headers(self):
        mid = new_id()
        hdrs = {"Origin": PAGE, "Content-Type": "text/plain"}
        body = '{"batch":[{"type":"track","event":"E","userId":"u","messageId":"%s"}]}' % mid
        r = self.srv.post("/v1/b", body, key=self.key, headers=hdrs)
        self.assertOk(r, accepted=1)
        self.assertEqual(r.header("Access-Control-Allow-Origin"), "*")
        self.assertIsNone(r.header("Vary"))
        self.assertExposes(r)
        self.assertIsNone(r.header("Access-Control-Allow-Credentials"))

        # 401 (unknown key in the header: answered before the body), 401 (no key at all:
        # after it), 400 (not JSON), 405: a script can read each of them.
        for method, path, key, body, status in (
                ("POST", "/v1/t", "nope", '{"event":"E","userId":"u"}', 401),
                ("POST", "/v1/t", None, '{"event":"E","userId":"u"}', 401),
                ("POST", "/v1/batch", self.key, "{nope", 400),
                ("GET", "/v1/batch", self.key, None, 405)):
            with self.subTest(status=status, path=path):
                h = dict(hdrs)
                if key is not None:
                    h["Authorization"] = basic(key)
                r = self.srv.request(method, path, body=body, headers=h)
                self.assertError(r, status)
                self.assertEqual(r.header("Access-Control-Allow-Origin"), "*", r)
                self.assertExposes(r)

        # Answers the transport makes itself carry them too: an unsupported Content-Encoding
        # and a corrupt gzip body never reach the api's parser.
        for extra, body in (({"Content-Encoding": "br"}, "{}"),
                            ({"Content-Encoding": "gzip"}, "not gzip at all")):
            with self.subTest(transport=extra["Content-Encoding"]):
                h = dict(hdrs, Authorization=basic(self.key), **extra)
                r = self.srv.request("POST", "/v1/batch", body=body, headers=h)
                self.assertError(r, 400)
                self.assertEqual(r.header("Access-Control-Allow-Origin"), "*", r)
                self.assertExposes(r)

    def test_no_cors_without_origin_or_off_ingest(self):
        r = self.srv.post("/v1/track", track(mid=new_id()), key=self.key)
        self.assertOk(r, accepted=1)
        self.assertNoCors(r)
        for path in ("/stats", "/metrics", "/healthz"):
            with self.subTest(path=path):
                r = self.srv.get(path, headers={"Origin": PAGE})
                self.assertEqual(r.status, 200, r)
                self.assertNoCors(r)
                r = self.srv.request("OPTIONS", path, headers={
                    "Origin": PAGE, "Access-Control-Request-Method": "GET"})
                self.assertError(r, 405)
                self.assertNoCors(r)

    def test_preflights_counted(self):
        before = self.srv.stats()["requests"]["by_status"].get("204", 0)
        preflight(self.srv, "/v1/page", PAGE)
        after = self.srv.stats()["requests"]["by_status"].get("204", 0)
        self.assertEqual(after, before + 1)


class OriginList(CorsMixin, ServerTestCase):
    """`--cors-origin` with a list: the origin is echoed, other origins are refused (403)."""

    ARGS = ("--cors-origin", " %s/ , %s" % (OTHER, PAGE))

    def test_allowed_preflight_echoes_origin(self):
        for origin in (PAGE, OTHER):
            with self.subTest(origin=origin):
                r = preflight(self.srv, "/v1/batch", origin)
                self.assertEqual(r.status, 204, r)
                self.assertEqual(r.header("Access-Control-Allow-Origin"), origin)
                self.assertIn("Origin", [v.strip() for v in r.header("Vary").split(",")])
                self.assertIsNone(r.header("Access-Control-Allow-Credentials"))

    def test_refused_preflight(self):
        for origin in ("http://127.0.0.1:3001", "https://app.example.com.evil.test",
                       "http://app.example.com", "null"):
            with self.subTest(origin=origin):
                r = preflight(self.srv, "/v1/t", origin)
                self.assertError(r, 403, "origin not allowed")
                self.assertNoCors(r)

    def test_answers(self):
        r = self.srv.post("/v1/track", track(mid=new_id()), key=self.key,
                          headers={"Origin": PAGE})
        self.assertOk(r, accepted=1)
        self.assertEqual(r.header("Access-Control-Allow-Origin"), PAGE)
        self.assertEqual(r.header("Vary"), "Origin")
        self.assertExposes(r)
        r = self.srv.post("/v1/track", track(mid=new_id()), key="nope", headers={"Origin": PAGE})
        self.assertError(r, 401)
        self.assertEqual(r.header("Access-Control-Allow-Origin"), PAGE)
        # Not listed: refused, before the body is read; nothing of it is logged.
        mid = new_id()
        r = self.srv.post("/v1/track", track(mid=mid), key=self.key,
                          headers={"Origin": "http://127.0.0.1:3001"})
        self.assertError(r, 403, "origin not allowed by --cors-origin")
        self.assertNoCors(r)
        self.assertEqual(r.header("Vary"), "Origin")
        self.assertNotIn(mid, [e.get("messageId") for e in log_cat(self.srv.data_dir)])
        # No Origin: a list still varies on it, so no cache hands this answer to a browser.
        r = self.srv.post("/v1/track", track(mid=new_id()), key=self.key)
        self.assertOk(r, accepted=1)
        self.assertNoCors(r)
        self.assertEqual(r.header("Vary"), "Origin")

    def test_simple_request_from_other_origin_refused(self):
        """A request that needs no preflight (text/plain, the key in the body, as a page could
        send with fetch(..., {mode: 'no-cors'}) or a form) from an origin not listed: 403, and
        nothing is logged. Before, it was accepted."""
        mid = new_id()
        body = '{"writeKey":"%s","batch":[{"type":"track","event":"E","userId":"u",' \
               '"messageId":"%s"}]}' % (self.key, mid)
        for path in ("/v1/batch", "/v1/b"):
            with self.subTest(path=path):
                r = self.srv.post(path, body, headers={"Origin": "https://evil.example",
                                                       "Content-Type": "text/plain"})
                self.assertError(r, 403, "origin not allowed")
                self.assertNoCors(r)
        r = self.srv.post("/v1/batch", body, headers={"Origin": "null",
                                                      "Content-Type": "text/plain"})
        self.assertError(r, 403, "origin not allowed")
        self.assertNotIn(mid, [e.get("messageId") for e in log_cat(self.srv.data_dir)])
        # The same from a listed origin, and without Origin (servers, curl): accepted.
        r = self.srv.post("/v1/batch", body, headers={"Origin": PAGE, "Content-Type": "text/plain"})
        self.assertOk(r, accepted=1)
        self.assertEqual(r.header("Access-Control-Allow-Origin"), PAGE)


class BadOriginList(unittest.TestCase):
    def test_bad_list_exits_2(self):
        data = tempfile.mkdtemp(prefix="ingestd-it-")
        try:
            for bad in ("https://a.example/path", "*,https://a.example", "a.example",
                        "https://a.example,,https://b.example"):
                with self.subTest(value=bad):
                    p = run_cli(["serve", "--listen", "127.0.0.1:0", "--data", data,
                                 "--write-key", "k", "--cors-origin", bad])
                    self.assertEqual(p.returncode, 2, p.stderr)
                    self.assertIn("--cors-origin", p.stderr)
        finally:
            shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
