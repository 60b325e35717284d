"""Request framing a proxy in front might read differently from us (issue 16, item 8):
Content-Length beside chunked (answered, then closed: RFC 9112 6.1), transfer codings other
than chunked (501), obs-folded headers and blanks before the colon (400), %00 in the path (400).
Issue 27: raw NULs and control bytes in the request line and headers (400, never a value cut
short), two Transfer-Encoding lines (501, as one line), Host on HTTP/1.1 (RFC 9112 3.2),
absolute-form targets (3.2.2), 1,000 query parameters (414, not silence), and what a malformed
Content-Length gets from libmicrohttpd (docs/deploy.md). tests/data/hostile/*.http replays
these and more as a corpus (test_heads.py).

Raw sockets: http.client cannot send any of these.
"""

import json
import unittest

from harness import ServerTestCase, basic, log_cat, new_id, track
from test_transport import SOCK_TIMEOUT, Raw, assert_json_error, request_bytes


def dumps(o):
    return json.dumps(o, separators=(",", ":")).encode()


def chunked(body):
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


class Framing(ServerTestCase):
    ARGS = ("--threads", "2", "--request-timeout", "5s")

    def exchange(self, data):
        """Sends data; returns (first response, whatever came after it until the close)."""
        c = Raw(self.srv)
        try:
            c.send(data)
            r = c.read_response()
            c.sock.settimeout(SOCK_TIMEOUT)
            self.assertTrue(c.closed_by_peer(), "connection left open")
            return r, c.buf
        finally:
            c.close()

    def logged_ids(self):
        return [e.get("messageId") for e in log_cat(self.srv.data_dir)]

    def test_content_length_and_chunked_answered_then_closed(self):
        mid, smuggled = new_id("cl-te"), new_id("smuggled")
        body = chunked(dumps({"batch": [track(mid=mid)]}))
        second = request_bytes("POST", "/v1/batch", dumps({"batch": [track(mid=smuggled)]}))
        head = request_bytes("POST", "/v1/batch", headers={
            "Content-Type": "application/json", "Content-Length": str(len(body)),
            "Transfer-Encoding": "chunked"})
        r, rest = self.exchange(head + body + second)
        self.assertEqual(r.status, 200, r)
        self.assertEqual((r.header("Connection") or "").lower(), "close")
        # The bytes after the chunked body were never served as a request of their own.
        self.assertEqual(rest, b"")
        logged = self.logged_ids()
        self.assertEqual(logged.count(mid), 1)
        self.assertNotIn(smuggled, logged)

    def test_chunked_alone_keeps_the_connection(self):
        body = chunked(dumps({"batch": [track()]}))
        c = Raw(self.srv)
        try:
            c.send(request_bytes("POST", "/v1/batch", headers={
                "Content-Type": "application/json", "Transfer-Encoding": "chunked"}) + body)
            self.assertEqual(c.read_response().status, 200)
            c.send(request_bytes("GET", "/healthz", key=None))
            self.assertEqual(c.read_response().status, 200)
        finally:
            c.close()

    def test_other_transfer_codings_get_501(self):
        for te in ("gzip", "gzip, chunked", "chunked, gzip", "identity", "x-custom"):
            with self.subTest(te=te):
                r, _ = self.exchange(request_bytes("POST", "/v1/batch", headers={
                    "Content-Type": "application/json", "Transfer-Encoding": te}) + b"abc")
                assert_json_error(self, r, 501, "Transfer-Encoding")

    def test_obs_fold_refused(self):
        for head in (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n b\r\n\r\n",
                     b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n\tb\r\n\r\n",
                     b"POST /v1/batch HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\n"
                     b"Content-Length: 3\r\n\r\nabc"):
            with self.subTest(head=head):
                r, _ = self.exchange(head)
                assert_json_error(self, r, 400, "malformed header")

    def test_blank_before_colon_refused(self):
        for head in (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Foo : a\r\n\r\n",
                     b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Foo\t: a\r\n\r\n",
                     b"POST /v1/batch HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n"
                     b"Content-Length: 3\r\n\r\nabc"):
            with self.subTest(head=head):
                r, _ = self.exchange(head)
                assert_json_error(self, r, 400, "malformed header")

    def test_ordinary_headers_still_fine(self):
        # Blanks around values, tabs, empty values, many headers: not mistaken for folding.
        head = (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A:b\r\nX-B:  \tc d \r\nX-Empty:\r\n"
                + b"".join(b"X-H%d: %d\r\n" % (i, i) for i in range(50)) + b"\r\n")
        c = Raw(self.srv)
        try:
            c.send(head)
            self.assertEqual(c.read_response().status, 200)
        finally:
            c.close()

    def test_nul_in_path_refused(self):
        for path in ("/stats%00.css", "/healthz%00", "/v1/batch%00/x", "/%00"):
            with self.subTest(path=path):
                c = Raw(self.srv)
                try:
                    c.send(request_bytes("GET", path, key=None))
                    r = c.read_response()
                finally:
                    c.close()
                assert_json_error(self, r, 400, "%00")
        # Other escapes are as before, and a keep-alive connection forgets the mark.
        c = Raw(self.srv)
        try:
            c.send(request_bytes("GET", "/healt%68z", key=None))
            self.assertEqual(c.read_response().status, 200)
            c.send(request_bytes("GET", "/healthz", key=None))
            self.assertEqual(c.read_response().status, 200)
        finally:
            c.close()

    def assert_not_logged(self, mid):
        self.assertNotIn(mid, self.logged_ids())

    def test_raw_nul_refused_never_cut(self):
        mid = new_id("nul")
        body = dumps({"batch": [track(mid=mid)]})
        one = dumps(track(mid=mid))
        cl = b"Content-Length: %d" % len(body)
        heads = {
            "Content-Length": request_bytes("POST", "/v1/batch", body).replace(
                cl, cl + b"\x00 99"),
            "Transfer-Encoding": request_bytes("POST", "/v1/batch", headers={
                "Content-Type": "application/json",
                "Transfer-Encoding": "chunked\x00x"}) + chunked(body),
            "path": request_bytes("POST", "/v1/track\x00/../stats", one),
            "query": request_bytes("GET", "/healthz?a=1\x00&b=2", key=None),
            "method": request_bytes("GE\x00T", "/healthz", key=None),
            "other header": request_bytes("GET", "/healthz", key=None,
                                          headers={"X-Note": "a\x00b"}),
        }
        for where, data in heads.items():
            with self.subTest(where=where):
                r, rest = self.exchange(data)
                assert_json_error(self, r, 400, "NUL byte")
                self.assertEqual(rest, b"")
        self.assert_not_logged(mid)

    def test_control_bytes_refused(self):
        for value in ("a\x01b", "a\x7fb", "a\rb", "a\x1bb", "\x1f"):
            with self.subTest(value=value):
                r, _ = self.exchange(request_bytes("GET", "/healthz", key=None,
                                                   headers={"X-Note": value}))
                assert_json_error(self, r, 400, "control byte in the value of header X-Note")
        for path in ("/healthz\x01", "/healthz\x7f", "/healthz x"):
            with self.subTest(path=path):
                r, _ = self.exchange(request_bytes("GET", path, key=None))
                assert_json_error(self, r, 400, "request target")
        # HTAB and obs-text (bytes from 0x80) are allowed in a value.
        c = Raw(self.srv)
        try:
            c.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Note: a\tb caf\xc3\xa9 \xff\r\n\r\n")
            self.assertEqual(c.read_response().status, 200)
        finally:
            c.close()

    def test_two_transfer_encoding_lines_as_one(self):
        for second in ("identity", "chunked", "gzip"):
            with self.subTest(second=second):
                mid = new_id("te2")
                head = (b"POST /v1/batch HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\n"
                        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                        b"Transfer-Encoding: %s\r\n\r\n" % (basic("testkey").encode(),
                                                          second.encode()))
                r, _ = self.exchange(head + chunked(dumps({"batch": [track(mid=mid)]})))
                assert_json_error(self, r, 501, "Transfer-Encoding")
                self.assert_not_logged(mid)

    def test_many_query_parameters_answered(self):
        query = "&".join("a=1" for _ in range(1000))  # 4 KB, 1,000 parameters
        r, _ = self.exchange(request_bytes("GET", "/healthz?" + query, key=None))
        assert_json_error(self, r, 414, "too many query parameters (max 128)")
        c = Raw(self.srv)
        try:
            c.send(request_bytes("GET", "/healthz?" + "&".join(
                "p%d=%d" % (i, i) for i in range(128)), key=None))
            self.assertEqual(c.read_response().status, 200)
        finally:
            c.close()

    def test_malformed_content_length_is_libmicrohttpds(self):
        """Not fixed, documented (docs/deploy.md): libmicrohttpd refuses these before any
        callback of ours, and 0.9.75 sends its answer's status line and headers twice."""
        mid = new_id("badcl")
        body = dumps({"batch": [track(mid=mid)]})
        cl = b"Content-Length: %d" % len(body)
        for value, status in ((b"-1", 400), (b"+%d" % len(body), 400), (b"0x%x" % len(body), 400),
                              (b"%d, %d" % (len(body), len(body)), 400), (b"", 400),
                              (b"18446744073709551616", 413)):
            with self.subTest(value=value):
                r, rest = self.exchange(request_bytes("POST", "/v1/batch", body).replace(
                    cl, b"Content-Length: " + value))
                self.assertEqual(r.status, status)
                whole = r.body + rest
                self.assertTrue(whole.endswith(b"</html>"), whole)
                self.assertLessEqual(whole.count(b"HTTP/1.1 %d " % status), 1, whole)
        self.assert_not_logged(mid)

    def test_host_on_http11(self):
        mid = new_id("host")
        body = dumps({"batch": [track(mid=mid)]})
        no_host = request_bytes("POST", "/v1/batch", body).replace(b"Host: 127.0.0.1\r\n", b"")
        two = request_bytes("POST", "/v1/batch", body).replace(
            b"Host: 127.0.0.1\r\n", b"Host: 127.0.0.1\r\nHost: example.com\r\n")
        for data, msg in ((no_host, "no Host header"), (two, "more than one Host header")):
            with self.subTest(msg=msg):
                c = Raw(self.srv)
                try:
                    c.send(data)
                    assert_json_error(self, c.read_response(), 400, msg)
                finally:
                    c.close()
        self.assert_not_logged(mid)
        # HTTP/1.0 predates Host: served (README, Limits).
        r, _ = self.exchange(no_host.replace(b"HTTP/1.1", b"HTTP/1.0"))
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.logged_ids().count(mid), 1)

    def test_absolute_form_routed_by_path(self):
        mid = new_id("abs")
        c = Raw(self.srv)
        try:
            c.send(request_bytes("POST", "http://127.0.0.1/v1/track", dumps(track(mid=mid))))
            r = c.read_response()
            self.assertEqual(r.status, 200, r)
            c.send(request_bytes("GET", "HTTPS://ingestd.example:8443/healthz", key=None))
            self.assertEqual(c.read_response().status, 200)
        finally:
            c.close()
        self.assertEqual(self.logged_ids().count(mid), 1)


if __name__ == "__main__":
    unittest.main()
