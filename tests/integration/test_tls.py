"""HTTPS with --tls-cert/--tls-key: a certificate made at test time with the openssl CLI, real
TLS batches accepted and logged, plain HTTP to the TLS port refused cleanly, bad TLS settings
refused at start."""

import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import unittest

from harness import Server, log_cat, new_id, run_cli, track

OPENSSL = shutil.which("openssl")


def make_cert(directory):
    """A self-signed certificate for 127.0.0.1/localhost; returns (cert path, key path)."""
    cert = os.path.join(directory, "cert.pem")
    key = os.path.join(directory, "key.pem")
    subprocess.run([OPENSSL, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                    "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", key, "-out", cert],
                   check=True, capture_output=True, timeout=30)
    return cert, key


@unittest.skipIf(OPENSSL is None, "the openssl CLI is needed (scripts/install-deps)")
class Tls(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="ingestd-tls-")
        cls.cert, cls.key = make_cert(cls.dir)
        cls.srv = Server(args=["--tls-cert", cls.cert, "--tls-key", cls.key,
                               "--request-timeout", "2s", "--log-level", "debug"],
                         tls_ca=cls.cert)
        try:
            cls.srv.start()  # waits for "listening on https://" and GET /healthz over TLS
        except BaseException:
            cls.srv.cleanup()
            shutil.rmtree(cls.dir, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            cls.srv.stop()
        finally:
            cls.srv.cleanup()
            shutil.rmtree(cls.dir, ignore_errors=True)

    def test_startup_line_says_https(self):
        self.srv.wait_for_log(r"listening on https://127\.0\.0\.1:%d" % self.srv.port)

    def test_batch_over_https_accepted_and_logged(self):
        mids = [new_id("tls") for _ in range(3)]
        r = self.srv.batch([track(mid=m) for m in mids])
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json["accepted"], 3)
        rid = r.header("X-Request-Id")
        self.assertTrue(rid)
        self.srv.wait_for_log(r"req=%s .*POST /v1/batch -> 200" % rid)
        logged = [e["messageId"] for e in log_cat(self.srv.data_dir)]
        for m in mids:
            self.assertEqual(logged.count(m), 1)
        # A retry over TLS is a duplicate like any other.
        r = self.srv.batch([track(mid=m) for m in mids])
        self.assertEqual(r.json["duplicates"], 3)

    def test_error_over_https_has_request_id(self):
        r = self.srv.post("/v1/batch", {"batch": [track()]}, key="wrong")
        self.assertEqual(r.status, 401)
        self.assertEqual(r.json.get("requestId"), r.header("X-Request-Id"))

    def test_certificate_is_the_one_configured(self):
        ctx = ssl.create_default_context(cafile=self.cert)
        with socket.create_connection((self.srv.host, self.srv.port), timeout=10) as s:
            with ctx.wrap_socket(s, server_hostname="localhost") as t:
                self.assertIsNotNone(t.getpeercert())
        # A client that trusts other CAs refuses it: the server really is the one with our key.
        with socket.create_connection((self.srv.host, self.srv.port), timeout=10) as s:
            with self.assertRaises(ssl.SSLError):
                ssl.create_default_context().wrap_socket(s, server_hostname="localhost")

    def test_plain_http_to_tls_port_fails_cleanly(self):
        with socket.create_connection((self.srv.host, self.srv.port), timeout=10) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            got = b""
            try:
                while True:
                    d = s.recv(4096)
                    if not d:
                        break
                    got += d
            except ConnectionResetError:
                pass
        # No HTTP answer in clear text, just the end of the connection (or a TLS alert).
        self.assertFalse(got.startswith(b"HTTP/"), got[:100])
        self.assertEqual(self.srv.get("/healthz").status, 200)

    def test_slow_tls_client_is_closed(self):
        # Over TLS the deadline closes the connection (no 408: the bytes would have to go
        # through the TLS session libmicrohttpd owns).
        ctx = ssl.create_default_context(cafile=self.cert)
        with socket.create_connection((self.srv.host, self.srv.port), timeout=15) as s:
            with ctx.wrap_socket(s, server_hostname="localhost") as t:
                t.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                try:
                    d = t.recv(4096)
                except (ConnectionResetError, ssl.SSLError):
                    d = b""
                self.assertEqual(d, b"")  # closed, within the socket's timeout
        self.srv.wait_for_log(r"--request-timeout\); closing")
        self.assertEqual(self.srv.get("/healthz").status, 200)


@unittest.skipIf(OPENSSL is None, "the openssl CLI is needed (scripts/install-deps)")
class TlsConfig(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ingestd-tlscfg-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.cert, self.key = make_cert(self.dir)

    def serve(self, *args):
        return run_cli(["serve", "--listen", "127.0.0.1:0", "--data",
                        os.path.join(self.dir, "data"), "--write-key", "k"] + list(args))

    def test_cert_without_key(self):
        p = self.serve("--tls-cert", self.cert)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--tls-cert without --tls-key", p.stderr)
        p = self.serve("--tls-key", self.key)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--tls-key without --tls-cert", p.stderr)

    def test_unreadable_files(self):
        missing = os.path.join(self.dir, "nope.pem")
        p = self.serve("--tls-cert", missing, "--tls-key", self.key)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("cannot read TLS certificate", p.stderr)
        self.assertIn(missing, p.stderr)
        notpem = os.path.join(self.dir, "junk.pem")
        with open(notpem, "w") as f:
            f.write("not a key\n")
        p = self.serve("--tls-cert", self.cert, "--tls-key", notpem)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("is not a PEM file", p.stderr)

    def test_key_not_matching_cert(self):
        other_dir = os.path.join(self.dir, "other")
        os.mkdir(other_dir)
        _, other_key = make_cert(other_dir)
        p = self.serve("--tls-cert", self.cert, "--tls-key", other_key)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("do not match", p.stderr)  # GnuTLS's reason, logged
        self.assertIn("does --tls-key belong to --tls-cert?", p.stderr)


if __name__ == "__main__":
    unittest.main()
