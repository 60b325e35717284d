"""The client address (issue 16, items 2 and 3): context.ip filled as Segment fills it, from the
socket's peer or, for connections from --trusted-proxies, from X-Forwarded-For / Forwarded read
from the right; --no-context-ip (INGESTD_NO_CONTEXT_IP) turns it off; log lines name the client.
"""

import json
import unittest

from harness import Server, ServerTestCase, log_cat, new_id, track
from test_transport import Raw, request_bytes


def dumps(o):
    return json.dumps(o, separators=(",", ":")).encode()


class ClientIpCase:
    def send(self, event, headers=None, source=None):
        """Posts one event (from `source`, a loopback address); returns its logged form."""
        c = Raw(self.srv, source)
        try:
            c.send(request_bytes("POST", "/v1/batch", dumps({"batch": [event]}),
                                 headers=headers))
            r = c.read_response()
        finally:
            c.close()
        self.assertEqual(r.status, 200, r)
        mid = event["messageId"]
        for e in log_cat(self.srv.data_dir):
            if e.get("messageId") == mid:
                return e
        self.fail("%s not logged" % mid)

    def ip(self, headers=None, source=None, **extra):
        e = self.send(track(mid=new_id("ip"), **extra), headers, source)
        return e.get("context", {}).get("ip")


class BehindProxy(ClientIpCase, ServerTestCase):
    ARGS = ("--trusted-proxies", "127.0.0.1/32, 10.0.0.0/8", "--log-level", "debug",
            "--request-timeout", "2s")

    def test_x_forwarded_for(self):
        self.assertEqual(self.ip({"X-Forwarded-For": "203.0.113.9"}), "203.0.113.9")

    def test_x_forwarded_for_read_from_the_right(self):
        # What the client wrote itself is left of what our proxies added.
        self.assertEqual(self.ip({"X-Forwarded-For": "1.1.1.1, 203.0.113.7"}), "203.0.113.7")
        self.assertEqual(self.ip({"X-Forwarded-For": "1.1.1.1, 203.0.113.7, 10.1.2.3"}),
                         "203.0.113.7")

    def test_repeated_x_forwarded_for_joined(self):
        c = Raw(self.srv)
        mid = new_id("ip")
        try:
            body = dumps({"batch": [track(mid=mid)]})
            req = request_bytes("POST", "/v1/batch", body)
            head, _ = req.split(b"\r\n\r\n", 1)
            c.send(head + b"\r\nX-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For: 203.0.113.5"
                   b"\r\n\r\n" + body)
            self.assertEqual(c.read_response().status, 200)
        finally:
            c.close()
        e = [e for e in log_cat(self.srv.data_dir) if e.get("messageId") == mid][0]
        self.assertEqual(e["context"]["ip"], "203.0.113.5")

    def test_forwarded(self):
        self.assertEqual(self.ip({"Forwarded": 'for="[2001:db8::1]:4711";proto=https'}),
                         "2001:db8::1")
        self.assertEqual(self.ip({"Forwarded": "for=192.0.2.60",
                                  "X-Forwarded-For": "203.0.113.9"}), "192.0.2.60")

    def test_no_header_the_proxy_itself(self):
        self.assertEqual(self.ip(), "127.0.0.1")

    def test_untrusted_peer_header_ignored(self):
        self.assertEqual(self.ip({"X-Forwarded-For": "203.0.113.9"}, source="127.0.0.2"),
                         "127.0.0.2")

    def test_event_and_batch_context_ip_win(self):
        self.assertEqual(self.ip({"X-Forwarded-For": "203.0.113.9"}, context={"ip": "1.2.3.4"}),
                         "1.2.3.4")
        mid = new_id("ip")
        r = self.srv.post("/v1/batch", {"context": {"ip": "5.6.7.8"}, "batch": [track(mid=mid)]},
                          key=self.key)
        self.assertEqual(r.status, 200, r)
        e = [e for e in log_cat(self.srv.data_dir) if e.get("messageId") == mid][0]
        self.assertEqual(e["context"]["ip"], "5.6.7.8")

    def test_log_lines_name_the_client(self):
        rid = "client-ip-log"
        c = Raw(self.srv)
        try:
            c.send(request_bytes("GET", "/healthz", key=None,
                                 headers={"X-Forwarded-For": "203.0.113.44", "X-Request-Id": rid}))
            self.assertEqual(c.read_response().status, 200)
        finally:
            c.close()
        self.srv.wait_for_log(r"req=%s .*GET /healthz -> 200 \(from 203\.0\.113\.44\)" % rid)
        # The watchdog's lines too: a body that never completes.
        c = Raw(self.srv)
        try:
            c.send(request_bytes("POST", "/v1/batch", b"x" * 100, headers={
                "X-Forwarded-For": "203.0.113.45", "X-Request-Id": "client-ip-slow"})[:-50])
            self.assertEqual(c.read_response().status, 408)
        finally:
            c.close()
        self.srv.wait_for_log(r"req=client-ip-slow .*from 203\.0\.113\.45 \(via 127\.0\.0\.1\)")
        # A proxy's kept-alive connection carries many clients: a later request without the
        # header is the proxy's own, not the previous client's.
        c = Raw(self.srv)
        try:
            c.send(request_bytes("GET", "/healthz", key=None,
                                 headers={"X-Forwarded-For": "203.0.113.46"}))
            self.assertEqual(c.read_response().status, 200)
            c.send(request_bytes("POST", "/v1/batch", b"x" * 100,
                                 headers={"X-Request-Id": "client-ip-own"})[:-50])
            self.assertEqual(c.read_response().status, 408)
        finally:
            c.close()
        line = self.srv.wait_for_log(r"req=client-ip-own .*from 127\.0\.0\.1:\d+ ")
        self.assertNotIn("203.0.113.46", line)


class PerAddressCapBehindProxy(ServerTestCase):
    """--max-connections-per-ip counts socket addresses for direct clients, and requests in
    flight per forwarded client for connections from a trusted proxy, never the proxy itself."""

    ARGS = ("--trusted-proxies", "127.0.0.1/32", "--max-connections-per-ip", "2",
            "--threads", "2", "--request-timeout", "30s", "--header-timeout", "30s")

    def hold(self, xff):
        """A request from client `xff` via the proxy, its head in (100 Continue), body pending."""
        c = Raw(self.srv)
        body = dumps({"batch": [track()]})
        req = request_bytes("POST", "/v1/batch", body, headers={
            "X-Forwarded-For": xff, "Expect": "100-continue"})
        c.send(req[:len(req) - len(body)])
        self.assertEqual(c.read_response().status, 100)
        return c, body

    def post_via(self, xff):
        c = Raw(self.srv)
        try:
            c.send(request_bytes("POST", "/v1/batch", dumps({"batch": [track()]}),
                                 headers={"X-Forwarded-For": xff}))
            return c.read_response()
        finally:
            c.close()

    def test_forwarded_clients_counted_apart(self):
        held = [self.hold("203.0.113.1"), self.hold("203.0.113.1")]
        try:
            r = self.post_via("203.0.113.1")
            self.assertEqual(r.status, 429, r)
            self.assertEqual(r.header("Retry-After"), "1")
            self.assertIn("too many requests at once", r.json["error"])
            # Another client behind the same proxy is served...
            self.assertEqual(self.post_via("203.0.113.2").status, 200)
            # ... and the proxy's own connections are not capped: more than 2 open at once.
            idle = [Raw(self.srv) for _ in range(4)]
            try:
                self.assertEqual(self.post_via("203.0.113.3").status, 200)
            finally:
                for c in idle:
                    c.close()
        finally:
            for c, body in held:
                c.send(body)
                self.assertEqual(c.read_response().status, 200)
                c.close()
        # Their requests done, the client is served again.
        self.assertEqual(self.post_via("203.0.113.1").status, 200)

    def test_every_route_answers_429_as_the_spec_says(self):
        # The cap is checked before routing, so every route answers a capped client 429;
        # the harness validates each answer against openapi.yaml (429 listed, Retry-After).
        held = [self.hold("203.0.113.4"), self.hold("203.0.113.4")]
        try:
            via = {"X-Forwarded-For": "203.0.113.4"}
            for method, path in (("GET", "/stats"), ("HEAD", "/stats"), ("GET", "/metrics"),
                                 ("HEAD", "/metrics"), ("GET", "/healthz"), ("HEAD", "/healthz"),
                                 ("GET", "/dashboard"), ("HEAD", "/dashboard"),
                                 ("OPTIONS", "/v1/track"), ("OPTIONS", "/v1/batch")):
                r = self.srv.request(method, path, headers=via)
                self.assertEqual(r.status, 429, "%s %s: %r" % (method, path, r))
                self.assertEqual(r.header("Retry-After"), "1")
        finally:
            for c, body in held:
                c.send(body)
                self.assertEqual(c.read_response().status, 200)
                c.close()

    def test_direct_clients_capped_at_accept(self):
        held = [Raw(self.srv, source="127.0.0.2") for _ in range(2)]
        try:
            for c in held:  # surely accepted: each is answered
                c.send(request_bytes("GET", "/healthz", key=None))
                self.assertEqual(c.read_response().status, 200)
            extra = Raw(self.srv, source="127.0.0.2")
            try:
                extra.send(request_bytes("GET", "/healthz", key=None))
                self.assertTrue(extra.closed_by_peer())
                self.assertNotIn(b"HTTP/1.1 200", extra.buf)
            finally:
                extra.close()
        finally:
            for c in held:
                c.close()


class NoProxy(ClientIpCase, ServerTestCase):
    def test_peer_address_and_headers_ignored(self):
        self.assertEqual(self.ip(), "127.0.0.1")
        self.assertEqual(self.ip(source="127.0.0.3"), "127.0.0.3")
        self.assertEqual(self.ip({"X-Forwarded-For": "203.0.113.9"}), "127.0.0.1")

    def test_single_event_routes_too(self):
        mid = new_id("ip")
        r = self.srv.post("/v1/track", {"userId": "u", "event": "E", "messageId": mid},
                          key=self.key)
        self.assertEqual(r.status, 200, r)
        e = [e for e in log_cat(self.srv.data_dir) if e.get("messageId") == mid][0]
        self.assertEqual(e["context"]["ip"], "127.0.0.1")


class NoContextIp(ClientIpCase, unittest.TestCase):
    def run_with(self, args=(), env=None):
        with Server(args=list(args), env=env) as self.srv:
            self.assertIsNone(self.ip())
            self.assertEqual(self.ip(context={"ip": "1.2.3.4"}), "1.2.3.4")

    def test_flag(self):
        self.run_with(["--no-context-ip"])

    def test_env(self):
        self.run_with(env={"INGESTD_NO_CONTEXT_IP": "1"})


if __name__ == "__main__":
    unittest.main()
