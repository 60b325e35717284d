"""Transport limits: request deadline (slowloris), header cap, connection caps, 100-continue,
chunked bodies, pipelining, Content-Length mismatches, gzip bombs, and request ids.

Most of it speaks raw HTTP on sockets, because http.client cannot trickle, pipeline or lie about
Content-Length. Every socket has a timeout, so no test can hang; every hostile test also checks
that a good client is served while (or right after) the hostile one does its worst.
"""

import gzip
import json
import re
import socket
import threading
import time
import unittest

from harness import Server, ServerTestCase, basic, deadline_wait, log_cat, new_id, track

REQUEST_TIMEOUT = 2  # --request-timeout for these servers (s)
SOCK_TIMEOUT = 15.0  # upper bound of any single wait on a socket
RID_RE = re.compile(r"^[0-9a-f]{16}$")


def dumps(o):
    return json.dumps(o, separators=(",", ":")).encode()


class RawResponse:
    def __init__(self, status, reason, headers, body):
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body
        try:
            self.json = json.loads(body.decode()) if body else None
        except ValueError:
            self.json = None

    def header(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def __repr__(self):
        return "<raw %d %r %r>" % (self.status, self.headers, self.body[:200])


class Raw:
    """A raw client connection with a buffered response reader."""

    def __init__(self, srv, source=None, timeout=SOCK_TIMEOUT, sock=None):
        """sock: a connected socket (TLS, say) to read from instead of a new one."""
        self.sock = sock or socket.create_connection(
            (srv.host, srv.port), timeout=timeout,
            source_address=(source, 0) if source else None)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        d = self.sock.recv(65536)
        if not d:
            raise EOFError("connection closed; got %r" % self.buf[:200])
        self.buf += d

    def read_response(self, head_only=False):
        """Reads one response (status line, headers, Content-Length body)."""
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        status = int(parts[1])
        headers = [tuple(x.strip() for x in l.split(":", 1)) for l in lines[1:] if ":" in l]
        resp = RawResponse(status, parts[2] if len(parts) > 2 else "", headers, b"")
        if head_only or status in (100, 204, 304):
            return resp
        n = int(resp.header("Content-Length") or 0)
        while len(self.buf) < n:
            self._fill()
        resp.body, self.buf = self.buf[:n], self.buf[n:]
        resp.__init__(status, resp.reason, headers, resp.body)
        return resp

    def closed_by_peer(self):
        """True once the server has closed (EOF or reset), reading whatever is left."""
        try:
            while True:
                d = self.sock.recv(65536)
                if not d:
                    return True
                self.buf += d
        except ConnectionResetError:
            return True

    def close(self):
        self.sock.close()


def request_bytes(method, path, body=b"", headers=None, key="testkey"):
    hdrs = {"Host": "127.0.0.1"}
    if key is not None:
        hdrs["Authorization"] = basic(key)
    if body:
        hdrs["Content-Type"] = "application/json"
        hdrs["Content-Length"] = str(len(body))
    hdrs.update(headers or {})
    head = "%s %s HTTP/1.1\r\n" % (method, path)
    head += "".join("%s: %s\r\n" % kv for kv in hdrs.items())
    return head.encode() + b"\r\n" + body


def assert_json_error(tc, r, status, contains=None):
    tc.assertEqual(r.status, status, r)
    tc.assertTrue((r.header("Content-Type") or "").startswith("application/json"), r)
    tc.assertIsInstance(r.json, dict, r)
    tc.assertIs(r.json.get("success"), False, r)
    if contains is not None:
        tc.assertIn(contains, r.json.get("error", ""), r)
    rid = r.header("X-Request-Id")
    tc.assertTrue(rid, r)
    tc.assertEqual(r.json.get("requestId"), rid, r)


class GoodClient:
    """Sends unique single-event batches in a loop on fresh connections until stopped."""

    def __init__(self, srv, source=None):
        self.srv = srv
        self.source = source
        self.ids = []
        self.failures = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _one(self):
        mid = new_id("good")
        body = dumps({"batch": [track(mid=mid)]})
        c = Raw(self.srv, self.source)
        try:
            c.send(request_bytes("POST", "/v1/batch", body))
            r = c.read_response()
        finally:
            c.close()
        if r.status != 200 or r.json.get("accepted") != 1:
            self.failures.append(r)
        else:
            self.ids.append(mid)

    def _run(self):
        while not self.stop.is_set() and len(self.ids) < 500:
            try:
                self._one()
            except OSError as e:  # includes socket.timeout
                self.failures.append(e)
            except EOFError as e:
                self.failures.append(e)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=SOCK_TIMEOUT + 5)

    def wait_for(self, n):
        deadline_wait(lambda: len(self.ids) >= n or self.failures, SOCK_TIMEOUT,
                      "%d good requests" % n)


class Transport(ServerTestCase):
    ARGS = ("--request-timeout", "%ds" % REQUEST_TIMEOUT, "--max-header-bytes", "4KiB",
            "--log-level", "debug", "--threads", "2")

    def logged_ids(self):
        return [e.get("messageId") for e in log_cat(self.srv.data_dir)]

    # ---- request ids -------------------------------------------------------

    def test_request_id_on_success_and_in_log(self):
        r1 = self.srv.batch([track(mid=new_id())])
        r2 = self.srv.batch([track(mid=new_id())])
        self.assertOk(r1, accepted=1)
        rid1, rid2 = r1.header("X-Request-Id"), r2.header("X-Request-Id")
        self.assertRegex(rid1 or "", RID_RE)
        self.assertRegex(rid2 or "", RID_RE)
        self.assertNotEqual(rid1, rid2)
        self.assertNotIn("requestId", r1.json)  # only error bodies carry it
        line = self.srv.wait_for_log(r"req=%s .*POST /v1/batch -> 200" % rid1)
        self.assertNotIn("Test Event", line)  # event data never in the log

    def test_request_id_on_errors_and_in_log(self):
        for r, status in ((self.srv.get("/nope"), 404),
                          (self.srv.post("/v1/batch", {"batch": [track()]}, key="wrong"), 401),
                          (self.srv.post("/v1/batch", "{not json", key=self.key), 400),
                          (self.srv.request("DELETE", "/v1/batch"), 405)):
            with self.subTest(status=status):
                self.assertError(r, status)
                rid = r.header("X-Request-Id")
                self.assertRegex(rid or "", RID_RE)
                self.assertEqual(r.json.get("requestId"), rid, r)
                self.srv.wait_for_log(r"req=%s .*-> %d" % (rid, status))

    def test_client_request_id(self):
        r = self.srv.get("/healthz", headers={"X-Request-Id": "lb-7f3a:42/x"})
        self.assertEqual(r.header("X-Request-Id"), "lb-7f3a:42/x")
        r = self.srv.get("/nope", headers={"X-Request-Id": "trace-1"})
        self.assertEqual(r.json.get("requestId"), "trace-1")
        # Unsafe or long ids are replaced by our own.
        for bad in ('a"b', "a b", "x" * 65, "é"):
            with self.subTest(bad=bad):
                c = Raw(self.srv)
                try:
                    c.send(request_bytes("GET", "/nope", headers={"X-Request-Id": bad}))
                    r = c.read_response()
                finally:
                    c.close()
                self.assertRegex(r.header("X-Request-Id") or "", RID_RE)
                assert_json_error(self, r, 404)

    # ---- request deadline (slowloris) -----------------------------------------

    def _trickle(self, prefix, rest, expect_408=True):
        """Sends prefix, then one byte of rest at a time (well inside the idle timeout) until
        the server answers or closes. Returns (response or None, whether rest was all sent)."""
        c = Raw(self.srv, timeout=0.3)
        try:
            c.send(prefix)
            end = time.monotonic() + REQUEST_TIMEOUT + SOCK_TIMEOUT
            i = 0
            while time.monotonic() < end:
                try:
                    d = c.sock.recv(65536)
                    if not d:
                        break
                    c.buf += d
                    if b"\r\n\r\n" in c.buf:
                        break
                except socket.timeout:
                    pass
                if i < len(rest):
                    try:
                        c.send(rest[i:i + 1])
                    except OSError:
                        break
                    i += 1
            c.sock.settimeout(SOCK_TIMEOUT)
            r = c.read_response() if b"\r\n\r\n" in c.buf else None
            return r, i >= len(rest)
        finally:
            c.close()

    def test_slowloris_headers_get_408(self):
        rest = b"".join(b"X-Slow-%d: %s\r\n" % (i, b"v" * 10) for i in range(200)) + b"\r\n"
        with GoodClient(self.srv) as good:
            r, finished = self._trickle(b"GET /healthz HTTP/1.1\r\nHost: x\r\n", rest)
            good.wait_for(5)
        self.assertFalse(finished, "the whole request trickled in: timeout never applied")
        self.assertIsNotNone(r, "closed without a 408")
        assert_json_error(self, r, 408, "request timeout")
        self.srv.wait_for_log(r"req=%s .*--request-timeout" % r.header("X-Request-Id"))
        self.assertEqual(good.failures, [])

    def test_slowloris_body_gets_408_and_nothing_logged(self):
        mid = new_id("slow")
        body = dumps({"batch": [track(mid=mid)]})
        body = body[:-2] + b" " * 400 + body[-2:]
        head = request_bytes("POST", "/v1/batch", body)
        head, body = head[:len(head) - len(body)], body
        with GoodClient(self.srv) as good:
            r, finished = self._trickle(head, body)
            good.wait_for(5)
        self.assertFalse(finished)
        self.assertIsNotNone(r)
        assert_json_error(self, r, 408)
        self.assertEqual(good.failures, [])
        logged = self.logged_ids()
        self.assertNotIn(mid, logged)
        for g in good.ids:
            self.assertIn(g, logged)

    def test_many_slow_clients_do_not_stall_good_ones(self):
        # 30 clients stuck mid-headers or mid-body hold connections while a good client sends
        # 20 batches: every one is answered 200 and logged once; every slow one gets its 408.
        slow = []
        try:
            for i in range(30):
                c = Raw(self.srv)
                if i % 2:
                    c.send(b"POST /v1/batch HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                else:
                    c.send(request_bytes("POST", "/v1/batch", b"x" * 1000)[:-900])
                slow.append(c)
            with GoodClient(self.srv) as good:
                good.wait_for(20)
            self.assertEqual(good.failures, [])
            for c in slow:
                r = c.read_response()
                self.assertEqual(r.status, 408, r)
        finally:
            for c in slow:
                c.close()
        logged = self.logged_ids()
        for g in good.ids:
            self.assertEqual(logged.count(g), 1)

    def test_idle_connection_before_any_byte_is_closed(self):
        c = Raw(self.srv)
        try:
            # Not one byte: by the deadline it gets a 408 and the close.
            r = c.read_response()
            self.assertEqual(r.status, 408)
            self.assertTrue(c.closed_by_peer())
        finally:
            c.close()

    def test_idle_keepalive_closed_without_408(self):
        c = Raw(self.srv)
        try:
            c.send(request_bytes("GET", "/healthz", key=None))
            self.assertEqual(c.read_response().status, 200)
            # Nothing of a next request by the deadline: closed, no unasked 408.
            self.assertTrue(c.closed_by_peer())
            self.assertEqual(c.buf, b"")
        finally:
            c.close()

    def test_keepalive_gets_a_fresh_deadline_per_request(self):
        c = Raw(self.srv)
        try:
            for _ in range(3):
                c.send(request_bytes("GET", "/healthz", key=None))
                self.assertEqual(c.read_response().status, 200)
        finally:
            c.close()

    # ---- header cap ---------------------------------------------------------

    def test_headers_over_cap_431_json(self):
        c = Raw(self.srv)
        try:
            c.send(request_bytes("POST", "/v1/batch", dumps({"batch": [track()]}),
                                 headers={"X-Pad": "p" * 5000}))
            r = c.read_response()
        finally:
            c.close()
        assert_json_error(self, r, 431, "headers too large")
        self.srv.wait_for_log(r"req=%s .*-> 431" % r.header("X-Request-Id"))

    def test_headers_far_over_cap_431_from_mhd(self):
        # Past the connection's memory pool libmicrohttpd answers itself (HTML, no request id).
        c = Raw(self.srv)
        try:
            c.send(request_bytes("GET", "/healthz", headers={"X-Pad": "p" * 200000}, key=None))
            r = c.read_response()
        finally:
            c.close()
        self.assertEqual(r.status, 431)
        self.assertEqual(self.srv.get("/healthz").status, 200)

    def test_headers_under_cap_ok(self):
        r = self.srv.get("/healthz", headers={"X-Pad": "p" * 3000})
        self.assertEqual(r.status, 200)

    # ---- bodies ---------------------------------------------------------------

    def test_expect_100_continue_refused_body_never_invited(self):
        c = Raw(self.srv)
        try:
            c.send(request_bytes("POST", "/v1/batch", headers={
                "Content-Type": "application/json", "Content-Length": str(10 * 1024 * 1024),
                "Expect": "100-continue"}))
            r = c.read_response()
        finally:
            c.close()
        self.assertNotEqual(r.status, 100, "100 Continue invited a body we refuse")
        assert_json_error(self, r, 400, "too large")

    def test_expect_100_continue_accepted(self):
        mid = new_id()
        body = dumps({"batch": [track(mid=mid)]})
        c = Raw(self.srv)
        try:
            head = request_bytes("POST", "/v1/batch", body, headers={"Expect": "100-continue"})
            c.send(head[:len(head) - len(body)])
            r = c.read_response()
            self.assertEqual(r.status, 100)
            c.send(body)
            r = c.read_response()
        finally:
            c.close()
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json["accepted"], 1)
        self.assertIn(mid, self.logged_ids())

    def test_expect_100_continue_bad_key_refused_early(self):
        c = Raw(self.srv)
        try:
            c.send(request_bytes("POST", "/v1/batch", key="wrong", headers={
                "Content-Type": "application/json", "Content-Length": "1000",
                "Expect": "100-continue"}))
            r = c.read_response()
        finally:
            c.close()
        assert_json_error(self, r, 401)

    def _chunked(self, chunks, key="testkey"):
        c = Raw(self.srv)
        try:
            c.send(request_bytes("POST", "/v1/batch", headers={
                "Content-Type": "application/json", "Transfer-Encoding": "chunked"}, key=key))
            for ch in chunks:
                try:
                    c.send(b"%x\r\n%s\r\n" % (len(ch), ch))
                except OSError:
                    break
            else:
                c.send(b"0\r\n\r\n")
            return c.read_response()
        finally:
            c.close()

    def test_chunked_body(self):
        mids = [new_id() for _ in range(3)]
        body = dumps({"batch": [track(mid=m) for m in mids]})
        r = self._chunked([body[i:i + 7] for i in range(0, len(body), 7)])
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json["accepted"], 3)
        logged = self.logged_ids()
        for m in mids:
            self.assertIn(m, logged)

    def test_chunked_over_cap_400(self):
        r = self._chunked([b"[" + b" " * 65535] * 10)  # 640 KiB > 500 KB
        assert_json_error(self, r, 400, "too large")
        self.assertEqual(self.srv.get("/healthz").status, 200)

    def test_pipelined_requests_answered_in_order(self):
        mids = [new_id("pipe") for _ in range(3)]
        reqs = b"".join(request_bytes("POST", "/v1/batch", dumps({"batch": [track(mid=m)]}))
                        for m in mids)
        reqs += request_bytes("GET", "/nope", key=None)
        c = Raw(self.srv)
        try:
            c.send(reqs)  # all at once, before any answer
            rs = [c.read_response() for _ in range(4)]
        finally:
            c.close()
        for r in rs[:3]:
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.json["accepted"], 1, r)
        assert_json_error(self, rs[3], 404)
        self.assertEqual(len({r.header("X-Request-Id") for r in rs}), 4)
        logged = self.logged_ids()
        self.assertEqual([m for m in logged if m in mids], mids)  # in order, once each

    def test_content_length_short_body_then_close(self):
        mid = new_id("short")
        body = dumps({"batch": [track(mid=mid)]})
        c = Raw(self.srv)
        try:
            head = request_bytes("POST", "/v1/batch", body)
            c.send(head[:len(head) - len(body)].replace(
                b"Content-Length: %d" % len(body), b"Content-Length: %d" % (len(body) + 50)))
            c.send(body)
            c.sock.shutdown(socket.SHUT_WR)  # the client gives up mid-body
            self.assertTrue(c.closed_by_peer())
        finally:
            c.close()
        self.assertOk(self.srv.batch([track(mid=new_id())]), accepted=1)
        self.assertNotIn(mid, self.logged_ids())

    def test_content_length_extra_bytes(self):
        # The bytes past Content-Length are read as the next request on the connection.
        mid = new_id("extra")
        body = dumps({"batch": [track(mid=mid)]})
        c = Raw(self.srv)
        try:
            c.send(request_bytes("POST", "/v1/batch", body) + b"GARBAGE GARBAGE\r\n\r\n")
            r = c.read_response()
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.json["accepted"], 1)
            # The garbage gets libmicrohttpd's 400 (or a close); never a second event.
            try:
                r2 = c.read_response()
                self.assertEqual(r2.status, 400, r2)
            except EOFError:
                pass
        finally:
            c.close()
        self.assertEqual(self.logged_ids().count(mid), 1)
        self.assertEqual(self.srv.get("/healthz").status, 200)

    def test_gzip_bomb_refused_by_ratio(self):
        bomb = gzip.compress(b" " * (400 * 1024), 9)  # under the cap, but ~1000:1
        r = self.srv.post("/v1/batch", bomb, key=self.key,
                          headers={"Content-Type": "application/json",
                                   "Content-Encoding": "gzip"})
        self.assertError(r, 400, "decompression bomb")
        self.assertEqual(r.json.get("requestId"), r.header("X-Request-Id"))

    def test_gzip_corrupt(self):
        good = gzip.compress(dumps({"batch": [track()]}))
        r = self.srv.post("/v1/batch", good[:-6], key=self.key,
                          headers={"Content-Encoding": "gzip"})
        self.assertError(r, 400, "invalid gzip")


class ConnectionCaps(unittest.TestCase):
    """Total and per-address caps. libmicrohttpd enforces both at accept, with no answer."""

    def hold(self, srv, n, source=None):
        socks = []
        for _ in range(n):
            socks.append(Raw(srv, source))
        return socks

    def served(self, srv, source=None, timeout=2):
        c = Raw(srv, source, timeout=timeout)
        try:
            c.send(request_bytes("GET", "/healthz", key=None))
            return c.read_response().status == 200
        except (OSError, EOFError):
            return False
        finally:
            c.close()

    def test_per_ip_cap(self):
        with Server(args=["--max-connections-per-ip", "3", "--threads", "1",
                          "--request-timeout", "30s"]) as srv:
            held = self.hold(srv, 3)
            try:
                # Every handshake completes (the kernel accepts), then libmicrohttpd closes.
                extra = Raw(srv)
                try:
                    extra.send(request_bytes("GET", "/healthz", key=None))
                    self.assertTrue(extra.closed_by_peer())
                    self.assertNotIn(b"HTTP/1.1 200", extra.buf)
                finally:
                    extra.close()
                # Another address is served meanwhile (all of 127/8 is loopback on Linux).
                self.assertTrue(self.served(srv, source="127.0.0.2"))
            finally:
                for s in held:
                    s.close()
            # Once they are gone the first address is served again.
            deadline_wait(lambda: self.served(srv), 10, "127.0.0.1 served after the cap")

    def test_total_cap_and_slow_holders_expire(self):
        # 4 s: long enough that the probe below (0.5 s) ends well before any holder expires,
        # even on a loaded machine. Each holder is mid-request (its head complete, its body
        # trickling), so none of them is shed to make room.
        with Server(args=["--max-connections", "4", "--threads", "1", "--request-timeout", "4s",
                          "--max-connections-per-ip", "0"]) as srv:
            held = []
            try:
                # Each holder is surely accepted (it got an answer), then starts a next request
                # whose body never completes: four slots taken, whatever the accept order.
                for _ in range(4):
                    s = Raw(srv)
                    held.append(s)
                    s.send(request_bytes("GET", "/healthz", key=None))
                    self.assertEqual(s.read_response().status, 200)
                    # 100 Continue says its head is in before the next holder connects.
                    head = request_bytes("POST", "/v1/batch", b"x" * 100,
                                         headers={"Expect": "100-continue"})
                    s.send(head[:-100])
                    self.assertEqual(s.read_response().status, 100)
                    s.send(b"x" * 50)
                # Nobody else is served while they hold every slot: the probe waits in the
                # kernel's backlog.
                self.assertFalse(self.served(srv, source="127.0.0.3", timeout=0.5))
                # ...but the holders only last --request-timeout: each gets its 408 and the close.
                for s in held:
                    s.sock.settimeout(SOCK_TIMEOUT)
                    self.assertEqual(s.read_response().status, 408)
                    self.assertTrue(s.closed_by_peer())
            finally:
                for s in held:
                    s.close()
            deadline_wait(lambda: self.served(srv, source="127.0.0.3"), 10,
                          "a good client served after the holders expired")

    def test_near_the_cap_headless_connections_are_closed_oldest_first(self):
        # 8 connections that never finish their request head fill --max-connections 8: each
        # newcomer past 7 open closes the oldest of them, so a prompt client is served at once
        # (before: it waited in the backlog until --request-timeout freed a slot).
        # All from one address, so the per-address share is off (else it would refuse them).
        with Server(args=["--max-connections", "8", "--threads", "1", "--request-timeout", "30s",
                          "--header-timeout", "30s", "--max-connections-per-ip", "0"]) as srv:
            held = []
            try:
                for _ in range(8):
                    s = Raw(srv)
                    s.send(b"POST /v1/batch HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                    held.append(s)
                # At once, not after the holders' 30 s deadline (5 s: room for valgrind).
                start = time.monotonic()
                self.assertTrue(self.served(srv, timeout=5))
                self.assertLess(time.monotonic() - start, 5.0)
                # The two oldest made room (one for the 8th holder, one for the client); the
                # newest holders are still open.
                for s in held[:2]:
                    s.sock.settimeout(SOCK_TIMEOUT)
                    self.assertTrue(s.closed_by_peer())
                for s in held[-3:]:
                    s.sock.settimeout(0.2)
                    with self.assertRaises(socket.timeout):
                        s.sock.recv(1)
            finally:
                for s in held:
                    s.close()


if __name__ == "__main__":
    unittest.main()
