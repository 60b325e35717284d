"""DNS rebinding: without --admin-token, /stats, /metrics and /dashboard answer only a Host that
no rebinding page can send (localhost, an IP address, the --listen host, --admin-hosts); any
other Host gets 403 with a JSON error. The ingest routes and /healthz answer any Host, and with
--admin-token the token decides, not the Host."""

import socket
import unittest

from harness import Server, http_request, track

OPERATOR = ("/stats", "/metrics", "/dashboard")


def get(srv, path, host, headers=None):
    hdrs = {"Host": host}
    hdrs.update(headers or {})
    return http_request(srv.host, srv.port, "GET", path, headers=hdrs)


def get_http10_without_host(srv, path):
    """HTTP/1.0 lets a request go without Host: no browser sends one."""
    with socket.create_connection((srv.host, srv.port), timeout=10) as s:
        s.sendall(b"GET " + path.encode() + b" HTTP/1.0\r\n\r\n")
        got = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            got += d
    return int(got.split(b" ", 2)[1])


class Default(unittest.TestCase):
    """The defaults: no --admin-token, no --admin-hosts."""

    @classmethod
    def setUpClass(cls):
        cls.srv = Server().start()

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        cls.srv.cleanup()

    def test_rebound_name_refused(self):
        for path in OPERATOR:
            for host in ("evil.example", "evil.example:%d" % self.srv.port, "attacker.test.",
                         "127.0.0.1.evil.example", "localhost.evil.example", "ingestd.internal",
                         "xlocalhost"):
                r = get(self.srv, path, host)
                self.assertEqual(r.status, 403, (path, host, r))
                self.assertFalse(r.json["success"])
                self.assertIn("--admin-hosts", r.json["error"])
                self.assertTrue(r.json.get("requestId"))

    def test_loopback_and_ip_addresses_answered(self):
        for path in OPERATOR:
            for host in ("127.0.0.1:%d" % self.srv.port, "127.0.0.1", "localhost",
                         "LOCALHOST:%d" % self.srv.port, "localhost.", "app.localhost",
                         "[::1]:%d" % self.srv.port, "10.1.2.3:8080"):
                r = get(self.srv, path, host)
                self.assertEqual(r.status, 200, (path, host, r))

    def test_without_host_answered(self):
        self.assertEqual(get_http10_without_host(self.srv, "/stats"), 200)

    def test_other_routes_answer_any_host(self):
        self.assertEqual(get(self.srv, "/healthz", "evil.example").status, 200)
        r = http_request(self.srv.host, self.srv.port, "POST", "/v1/track", track(),
                         headers={"Host": "evil.example",
                                  "Authorization": "Basic dGVzdGtleTo="})  # testkey:
        self.assertEqual(r.status, 200, r)


class Listed(unittest.TestCase):
    def test_admin_hosts_names_answered_others_not(self):
        with Server(args=["--admin-hosts", "ingestd.internal, Metrics.Example.COM"]) as srv:
            for path in OPERATOR:
                for host in ("ingestd.internal", "ingestd.internal:8080", "metrics.example.com",
                             "127.0.0.1"):
                    self.assertEqual(get(srv, path, host).status, 200, (path, host))
                for host in ("ingestd.internal2", "evil.example"):
                    self.assertEqual(get(srv, path, host).status, 403, (path, host))


class AnyHost(unittest.TestCase):
    def test_star_allows_any_host(self):
        with Server(args=["--admin-hosts", "*"]) as srv:
            for path in OPERATOR:
                self.assertEqual(get(srv, path, "evil.example").status, 200)


class WithToken(unittest.TestCase):
    def test_token_decides_not_the_host(self):
        with Server(args=["--admin-token", "tok-123"]) as srv:
            auth = {"Authorization": "Bearer tok-123"}
            self.assertEqual(get(srv, "/stats", "evil.example", auth).status, 200)
            self.assertEqual(get(srv, "/metrics", "evil.example", auth).status, 200)
            self.assertEqual(get(srv, "/stats", "evil.example").status, 401)
            # The page holds no data and asks for the token itself.
            self.assertEqual(get(srv, "/dashboard", "evil.example").status, 200)


if __name__ == "__main__":
    unittest.main()
