"""Request framing a proxy in front might read differently from us (issue 16, item 8):
Content-Length beside chunked (answered, then closed: RFC 9112 6.1), transfer codings other
than chunked (501), obs-folded headers and blanks before the colon (400), %00 in the path (400).

Raw sockets: http.client cannot send any of these.
"""

import json
import unittest

from harness import ServerTestCase, log_cat, new_id, track
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


if __name__ == "__main__":
    unittest.main()
