"""Request bodies: content types, gzip/deflate, size and count limits, malformed JSON, mixed batches."""

import gzip
import http.client
import json
import unittest
import zlib

from harness import ServerTestCase, basic, log_cat, new_id, track

MAX_REQUEST = 500 * 1024
MAX_EVENT = 32 * 1024


def dumps(o):
    return json.dumps(o, separators=(",", ":")).encode()


class Bodies(ServerTestCase):

    def post_raw(self, body, headers=None, path="/v1/batch"):
        h = {"Authorization": basic(self.key)}
        h.update(headers or {})
        return self.srv.request("POST", path, body=body, headers=h)

    def logged_ids(self):
        return [e["messageId"] for e in log_cat(self.srv.data_dir)]

    # ---- content types -------------------------------------------------

    def test_content_types_parsed_as_json(self):
        for ctype in ("application/json", "application/json; charset=utf-8", "text/plain",
                      "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", None):
            with self.subTest(content_type=ctype):
                mid = new_id()
                h = {"Content-Type": ctype} if ctype else {}
                r = self.post_raw(dumps({"batch": [track(mid=mid)]}), h)
                self.assertOk(r, accepted=1)
                self.assertIn(mid, self.logged_ids())

    def test_single_route_text_plain(self):
        r = self.post_raw(dumps({"event": "Beacon", "anonymousId": "a"}),
                          {"Content-Type": "text/plain"}, path="/v1/track")
        self.assertOk(r, accepted=1)

    def test_unsupported_content_type(self):
        for ctype in ("application/xml", "multipart/form-data; boundary=x", "image/png"):
            with self.subTest(content_type=ctype):
                r = self.post_raw(dumps({"batch": [track()]}), {"Content-Type": ctype})
                self.assertError(r, 400, "content-type")

    def test_chunked_transfer_encoding(self):
        mid = new_id()
        body = dumps({"batch": [track(mid=mid)]})
        conn = http.client.HTTPConnection(self.srv.host, self.srv.port, timeout=10)
        try:
            conn.request("POST", "/v1/batch", body=iter([body[:7], body[7:30], body[30:]]),
                         headers={"Authorization": basic(self.key),
                                  "Content-Type": "application/json"},
                         encode_chunked=True)
            r = conn.getresponse()
            self.assertEqual(r.status, 200)
            self.assertEqual(json.loads(r.read())["accepted"], 1)
        finally:
            conn.close()
        self.assertIn(mid, self.logged_ids())

    def test_chunked_too_large_400(self):
        # No Content-Length: the cap must hold while the body streams in.
        body = dumps({"batch": [track(properties={"pad": "x" * (MAX_REQUEST + 4096)})]})
        chunks = [body[i:i + 16384] for i in range(0, len(body), 16384)]
        conn = http.client.HTTPConnection(self.srv.host, self.srv.port, timeout=10)
        try:
            try:
                conn.request("POST", "/v1/batch", body=iter(chunks),
                             headers={"Authorization": basic(self.key)}, encode_chunked=True)
            except (BrokenPipeError, ConnectionResetError):
                pass  # answered and closed before the whole body was sent
            r = conn.getresponse()
            self.assertEqual(r.status, 400)
            self.assertIn("too large", json.loads(r.read())["error"])
        finally:
            conn.close()

    # ---- compression ---------------------------------------------------

    def test_gzip_body(self):
        for enc in ("gzip", "x-gzip"):
            with self.subTest(encoding=enc):
                mids = [new_id() for _ in range(20)]
                body = gzip.compress(dumps({"batch": [track(mid=m) for m in mids]}))
                r = self.post_raw(body, {"Content-Type": "application/json",
                                         "Content-Encoding": enc})
                self.assertOk(r, accepted=20, rejected=[])
                self.assertTrue(set(mids) <= set(self.logged_ids()))

    def test_deflate_body(self):
        mid = new_id()
        body = zlib.compress(dumps({"batch": [track(mid=mid)]}))
        r = self.post_raw(body, {"Content-Type": "application/json", "Content-Encoding": "deflate"})
        self.assertOk(r, accepted=1)

    def test_gzip_single_route(self):
        body = gzip.compress(dumps({"event": "Zipped", "userId": "u"}))
        r = self.post_raw(body, {"Content-Encoding": "gzip"}, path="/v1/track")
        self.assertOk(r, accepted=1)

    def test_gzip_bomb_400(self):
        # ~10 MB of one repeated event inflates far past the 500 KB cap; ~10 KB on the wire.
        inner = b'{"batch":[' + b",".join([dumps(track())] * 250000) + b"]}"
        bomb = gzip.compress(inner, 9)
        self.assertLess(len(bomb), 200 * 1024)
        r = self.post_raw(bomb, {"Content-Type": "application/json", "Content-Encoding": "gzip"})
        self.assertError(r, 400)
        self.assertEqual(self.srv.get("/healthz").status, 200, "server still serving")

    def test_gzip_bomb_zeros_400(self):
        bomb = gzip.compress(b"\0" * (20 * 1024 * 1024), 9)
        r = self.post_raw(bomb, {"Content-Encoding": "gzip"})
        self.assertError(r, 400)

    def test_corrupt_gzip_400(self):
        good = gzip.compress(dumps({"batch": [track()]}))
        for name, body in (("garbage", b"this is not gzip at all"),
                           ("truncated", good[: len(good) // 2]),
                           ("bitflip", good[:12] + bytes([good[12] ^ 0xFF]) + good[13:]),
                           ("plain json labelled gzip", dumps({"batch": [track()]}))):
            with self.subTest(case=name):
                r = self.post_raw(body, {"Content-Encoding": "gzip"})
                self.assertError(r, 400)

    def test_unsupported_content_encoding(self):
        r = self.post_raw(dumps({"batch": [track()]}), {"Content-Encoding": "br"})
        self.assertError(r, 400)

    # ---- limits --------------------------------------------------------

    def test_request_too_large_400(self):
        pad = "x" * (MAX_REQUEST + 10 * 1024)
        body = dumps({"batch": [track(properties={"pad": pad})]})
        r = self.post_raw(body)
        self.assertError(r, 400, "too large")
        self.assertEqual(self.srv.get("/healthz").status, 200)

    def test_request_too_large_after_gzip_400(self):
        # Small on the wire, > 500 KB inflated: the cap is on the decompressed size.
        events = [track(mid=new_id(), properties={"pad": "y" * 1000}) for _ in range(600)]
        raw = dumps({"batch": events})
        self.assertGreater(len(raw), MAX_REQUEST)
        r = self.post_raw(gzip.compress(raw), {"Content-Encoding": "gzip"})
        self.assertError(r, 400, "too large")

    def test_request_just_under_limit_ok(self):
        # ~480 KB of 20 KB events: below both the request and the event limit.
        mids = [new_id() for _ in range(24)]
        events = [track(mid=m, properties={"pad": "z" * (20 * 1024)}) for m in mids]
        raw = dumps({"batch": events})
        self.assertLess(len(raw), MAX_REQUEST)
        self.assertOk(self.post_raw(raw), accepted=24, rejected=[])

    def test_event_too_large_rejected_alone(self):
        big = new_id("big")
        small = new_id("small")
        events = [track(mid=big, properties={"pad": "x" * (MAX_EVENT + 100)}),
                  track(mid=small)]
        r = self.post_raw(dumps({"batch": events}))
        self.assertOk(r, accepted=1, rejected=[0])
        self.assertIn("too large", r.json["rejected"][0]["error"])
        ids = self.logged_ids()
        self.assertIn(small, ids)
        self.assertNotIn(big, ids)

    def test_event_too_large_single_route_400(self):
        r = self.post_raw(dumps({"event": "E", "userId": "u",
                                 "properties": {"pad": "x" * (MAX_EVENT + 100)}}),
                          path="/v1/track")
        self.assertError(r, 400, "too large")

    def test_2500_events_ok(self):
        mids = [new_id() for _ in range(2500)]
        r = self.post_raw(dumps({"batch": [{"type": "track", "event": "e", "userId": "u",
                                            "messageId": m} for m in mids]}))
        self.assertOk(r, accepted=2500, rejected=[])

    def test_2501_events_400(self):
        mids = [new_id("over") for _ in range(2501)]
        r = self.post_raw(dumps({"batch": [{"type": "track", "event": "e", "userId": "u",
                                            "messageId": m} for m in mids]}))
        self.assertError(r, 400)
        self.assertNotIn(mids[0], self.logged_ids(), "nothing of a 400 batch is kept")

    def test_empty_batch_400(self):
        self.assertError(self.post_raw(b'{"batch":[]}'), 400, "batch is empty")

    # ---- malformed -----------------------------------------------------

    def test_malformed_json_400(self):
        for name, body in (("truncated", b'{"batch":[{"type":"track"'),
                           ("garbage", b"hello"),
                           ("trailing", b'{"batch":[]} x'),
                           ("empty", b""),
                           ("invalid utf-8 outside a string", b'{"batch":[\xff]}')):
            with self.subTest(case=name):
                self.assertError(self.post_raw(body), 400)

    def test_invalid_utf8_in_string_read_as_fffd(self):
        """Bytes that are not UTF-8 inside a string read as U+FFFD (as Segment's Go API reads
        them): the event is kept, not the request refused."""
        mid = new_id("latin1")
        r = self.post_raw(('{"batch":[{"type":"track","event":"caf\xe9","userId":"u",'
                           '"messageId":"%s"}]}' % mid).encode("latin-1"))
        self.assertOk(r, accepted=1)
        self.assertIn(mid, self.logged_ids())

    def test_not_an_object_400(self):
        for body in (b"[]", b"42", b'"batch"', b"null", b"true"):
            with self.subTest(body=body):
                self.assertError(self.post_raw(body), 400)
                self.assertError(self.post_raw(body, path="/v1/track"), 400)

    def test_batch_not_array_400(self):
        for body in (b'{"batch":{}}', b'{"batch":"x"}', b'{"batch":null}', b"{}",
                     b'{"events":[]}'):
            with self.subTest(body=body):
                self.assertError(self.post_raw(body), 400)

    def test_server_keeps_serving_after_bad_requests(self):
        self.post_raw(b"\x00\x01garbage")
        self.assertOk(self.srv.batch([track(mid=new_id())]), accepted=1)

    # ---- mixed ---------------------------------------------------------

    def test_mixed_valid_invalid(self):
        good = [new_id("good") for _ in range(4)]
        bad = [new_id("bad") for _ in range(5)]
        events = [
            track(mid=good[0]),
            "not an object",                                           # 1
            {"type": "track", "userId": "u", "messageId": bad[0]},     # 2: no event
            track(mid=good[1]),
            {"type": "bogus", "userId": "u", "messageId": bad[1]},     # 4: unknown type
            {"event": "E", "userId": "u", "messageId": bad[2]},        # 5: no type
            track(mid=good[2]),
            {"type": "identify", "messageId": bad[3]},                 # 7: no user
            track(mid=bad[4], timestamp="yesterday"),                  # 8: bad timestamp
            track(mid=good[3]),
        ]
        r = self.post_raw(dumps({"batch": events}))
        body = self.assertOk(r, accepted=4, duplicates=0, rejected=[1, 2, 4, 5, 7, 8])
        for item in body["rejected"]:
            self.assertTrue(item["error"], item)
        ids = self.logged_ids()
        for m in good:
            self.assertEqual(ids.count(m), 1, m)
        for m in bad:
            self.assertNotIn(m, ids)

    def test_all_rejected_is_still_200(self):
        r = self.post_raw(dumps({"batch": [{"type": "track"}, 5, []]}))
        self.assertOk(r, accepted=0, duplicates=0, rejected=[0, 1, 2])


if __name__ == "__main__":
    unittest.main(verbosity=2)
