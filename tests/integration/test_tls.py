"""HTTPS with --tls-cert/--tls-key: a certificate made at test time with the openssl CLI, real
TLS batches accepted and logged, plain HTTP to the TLS port refused cleanly, bad TLS settings
refused at start; the suites and versions served (--tls-min-version), forced from the client side
with `openssl s_client`; the handshakes counted in /metrics and /stats; the pair reloaded on
SIGHUP. Without the openssl CLI these tests fail, never skip (scripts/install-deps installs it)."""

import hashlib
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import unittest

from harness import Server, deadline_wait, log_cat, new_id, run_cli, track

OPENSSL = shutil.which("openssl")


def need_openssl():
    if OPENSSL is None:
        raise AssertionError("the openssl CLI is needed (scripts/install-deps installs it)")


def make_cert(directory, kind="ec", name="cert", subject="/CN=localhost"):
    """A self-signed certificate for 127.0.0.1/localhost; returns (cert path, key path).
    kind: "ec" (P-256) or "rsa" (2048 bits: the only kind static-RSA suites could use)."""
    need_openssl()
    cert = os.path.join(directory, name + ".pem")
    key = os.path.join(directory, name + "-key.pem")
    newkey = (["-newkey", "rsa:2048"] if kind == "rsa" else
              ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"])
    subprocess.run([OPENSSL, "req", "-x509"] + newkey +
                   ["-nodes", "-days", "2", "-subj",
                    subject, "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", key, "-out", cert],
                   check=True, capture_output=True, timeout=30)
    return cert, key


# A request s_client sends once its handshake is done; the answer shows it was served.
REQUEST = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


def s_client(port, *args):
    """openssl s_client with `args` (version and suite options) against 127.0.0.1:port, sending
    REQUEST; returns (served, output). served: the handshake finished and /healthz answered 200.
    Raises when the client itself refused to offer what it was asked to (then the test would
    prove nothing about the server): Debian's OpenSSL does so for TLS 1.0/1.1 and SHA-1 suites
    unless forced with @SECLEVEL=0."""
    p = subprocess.run([OPENSSL, "s_client", "-connect", "127.0.0.1:%d" % port,
                        "-servername", "localhost", "-ign_eof"] + list(args),
                       input=REQUEST, capture_output=True, timeout=30)
    out = (p.stdout + p.stderr).decode("utf-8", "replace")
    for local in ("no protocols available", "no cipher match", "no ciphers available"):
        if local in out:
            raise AssertionError("s_client %s refused on the client side (%s):\n%s"
                                 % (" ".join(args), local, out))
    return "HTTP/1.1 200" in out, out


def fingerprint(port):
    """SHA-256 of the certificate the server presents on a new connection."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        with ctx.wrap_socket(s) as t:
            return hashlib.sha256(t.getpeercert(binary_form=True)).hexdigest()


def file_fingerprint(cert):
    with open(cert) as f:
        der = ssl.PEM_cert_to_DER_cert(f.read())
    return hashlib.sha256(der).hexdigest()


def tls_metric(srv, version):
    text = srv.metrics().body.decode()
    m = re.search(r'^ingestd_tls_handshakes_total\{version="%s"\} (\d+)$' % re.escape(version),
                  text, re.M)
    if m is None:
        raise AssertionError("no ingestd_tls_handshakes_total{version=\"%s\"} in /metrics"
                             % version)
    return int(m.group(1))


class TlsServerCase(unittest.TestCase):
    """One HTTPS server for the class, on a certificate of KIND made for it, with ARGS."""

    KIND = "ec"
    ARGS = ()

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="ingestd-tls-")
        cls.cert, cls.key = make_cert(cls.dir, kind=cls.KIND)
        cls.srv = Server(args=["--tls-cert", cls.cert, "--tls-key", cls.key] + list(cls.ARGS),
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


class Tls(TlsServerCase):
    ARGS = ("--request-timeout", "2s", "--log-level", "debug")

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

    def test_min_version_bad_value(self):
        for bad in ("1.1", "1.0", "tls1.2", "1.4", ""):
            p = self.serve("--tls-cert", self.cert, "--tls-key", self.key,
                           "--tls-min-version", bad)
            self.assertEqual(p.returncode, 2, (bad, p.stderr))
            self.assertIn('invalid --tls-min-version "%s": expected 1.2|1.3' % bad, p.stderr)
        p = run_cli(["serve", "--listen", "127.0.0.1:0", "--data",
                     os.path.join(self.dir, "data"), "--write-key", "k", "--tls-cert", self.cert,
                     "--tls-key", self.key], env={"INGESTD_TLS_MIN_VERSION": "1.1"})
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn('invalid INGESTD_TLS_MIN_VERSION "1.1": expected 1.2|1.3', p.stderr)


class TlsSuites(TlsServerCase):
    """The default (--tls-min-version 1.2): TLS 1.2 and 1.3 with forward-secret AEAD suites only.
    The client offers each refused thing alone and forced (@SECLEVEL=0), so a server that took it
    would be seen to. An RSA certificate, so that static-RSA suites are possible at all."""

    KIND = "rsa"

    def refused(self, *args):
        served, out = s_client(self.srv.port, *args)
        self.assertFalse(served, "served with %s:\n%s" % (" ".join(args), out))
        self.assertEqual(self.srv.get("/healthz").status, 200)  # and the server goes on

    def test_tls10_refused(self):
        self.refused("-tls1", "-cipher", "DEFAULT@SECLEVEL=0")

    def test_tls11_refused(self):
        self.refused("-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0")

    def test_static_rsa_refused_under_tls12(self):
        self.refused("-tls1_2", "-cipher", "AES128-GCM-SHA256@SECLEVEL=0")
        self.refused("-tls1_2", "-cipher", "AES256-SHA256@SECLEVEL=0")

    def test_cbc_sha1_refused_under_tls12(self):
        self.refused("-tls1_2", "-cipher", "ECDHE-RSA-AES128-SHA@SECLEVEL=0")
        self.refused("-tls1_2", "-cipher", "AES128-SHA@SECLEVEL=0")

    def test_tls12_ecdhe_gcm_and_chacha_accepted(self):
        for suite in ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384",
                      "ECDHE-RSA-CHACHA20-POLY1305"):
            served, out = s_client(self.srv.port, "-tls1_2", "-cipher", suite)
            self.assertTrue(served, out)
            self.assertRegex(out, r"New, TLSv1\.2, Cipher is " + suite)
            self.assertIn(suite, out)

    def test_tls13_accepted(self):
        served, out = s_client(self.srv.port, "-tls1_3")
        self.assertTrue(served, out)
        self.assertRegex(out, r"New, TLSv1\.3, Cipher is TLS_")

    def test_handshakes_counted_by_version(self):
        before12, before13 = tls_metric(self.srv, "1.2"), tls_metric(self.srv, "1.3")
        self.assertTrue(s_client(self.srv.port, "-tls1_2", "-cipher",
                                 "ECDHE-RSA-AES128-GCM-SHA256")[0])
        self.assertTrue(s_client(self.srv.port, "-tls1_3")[0])
        # A refused handshake is no handshake.
        self.assertFalse(s_client(self.srv.port, "-tls1", "-cipher", "DEFAULT@SECLEVEL=0")[0])
        self.assertEqual(tls_metric(self.srv, "1.2"), before12 + 1)
        # The scrape itself is one more TLS 1.3 connection (Python's client prefers 1.3).
        self.assertGreaterEqual(tls_metric(self.srv, "1.3"), before13 + 1)
        self.assertEqual(tls_metric(self.srv, "1.0"), 0)
        self.assertEqual(tls_metric(self.srv, "1.1"), 0)
        tls = self.srv.stats()["tls"]
        self.assertEqual(tls["min_version"], "1.2")
        self.assertGreaterEqual(tls["handshakes"]["1.2"], 1)
        self.assertEqual(tls["handshakes"]["1.0"], 0)

    def test_handshake_without_request_counted(self):
        before = tls_metric(self.srv, "1.2")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        with socket.create_connection(("127.0.0.1", self.srv.port), timeout=10) as s:
            with ctx.wrap_socket(s) as t:
                self.assertEqual(t.version(), "TLSv1.2")
        deadline_wait(lambda: tls_metric(self.srv, "1.2") == before + 1, 10,
                      "the request-less TLS 1.2 connection counted")


class TlsMinVersion13(unittest.TestCase):
    def test_only_tls13_served(self):
        d = tempfile.mkdtemp(prefix="ingestd-tls13-")
        self.addCleanup(shutil.rmtree, d, True)
        cert, key = make_cert(d)
        with Server(args=["--tls-cert", cert, "--tls-key", key, "--tls-min-version", "1.3"],
                    tls_ca=cert) as srv:
            served, out = s_client(srv.port, "-tls1_2", "-cipher",
                                   "ECDHE-ECDSA-AES128-GCM-SHA256")
            self.assertFalse(served, out)
            served, out = s_client(srv.port, "-tls1_3")
            self.assertTrue(served, out)
            self.assertEqual(srv.stats()["tls"]["min_version"], "1.3")


class TlsChain(unittest.TestCase):
    def test_chain_served(self):
        # A leaf signed by a CA of our own; the chain file holds both, leaf first. A client
        # that trusts only the CA verifies it, and the key is checked against the leaf.
        d = tempfile.mkdtemp(prefix="ingestd-tlschain-")
        self.addCleanup(shutil.rmtree, d, True)
        ca, ca_key = make_cert(d, name="ca", subject="/CN=ingestd test CA")
        key, csr, leaf = (os.path.join(d, n) for n in ("leaf-key.pem", "leaf.csr", "leaf.pem"))
        ext = os.path.join(d, "ext.cnf")
        with open(ext, "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        for cmd in (["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                     "-nodes", "-subj", "/CN=localhost", "-keyout", key, "-out", csr],
                    ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key,
                     "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", leaf]):
            subprocess.run([OPENSSL] + cmd, check=True, capture_output=True, timeout=30)
        with open(leaf) as f:
            leaf_pem = f.read()
        with open(ca) as f:
            ca_pem = f.read()
        chain = os.path.join(d, "chain.pem")
        with open(chain, "w") as f:
            f.write(leaf_pem + ca_pem)
        with Server(args=["--tls-cert", chain, "--tls-key", key], tls_ca=ca) as srv:
            self.assertEqual(srv.get("/healthz").status, 200)
            self.assertEqual(fingerprint(srv.port), file_fingerprint(leaf))


class TlsReload(unittest.TestCase):
    """SIGHUP reads --tls-cert and --tls-key again; a bad pair leaves the one in force."""

    def test_sighup_reloads_the_pair_and_keeps_it_when_the_new_one_is_bad(self):
        d = tempfile.mkdtemp(prefix="ingestd-tlsreload-")
        self.addCleanup(shutil.rmtree, d, True)
        cert, key = make_cert(d, name="live")
        new_cert, new_key = make_cert(d, name="next")
        other_cert, other_key = make_cert(d, name="other")
        first = file_fingerprint(cert)
        with Server(args=["--tls-cert", cert, "--tls-key", key]) as srv:
            self.assertEqual(fingerprint(srv.port), first)
            # A renewed pair (as certbot writes it), then SIGHUP: new handshakes present it.
            shutil.copy(new_cert, cert)
            shutil.copy(new_key, key)
            mark = len(srv.lines)
            srv.signal(signal.SIGHUP)
            srv.wait_for_log(r"INFO SIGHUP: TLS certificate and key reloaded", start=mark)
            second = file_fingerprint(new_cert)
            self.assertEqual(fingerprint(srv.port), second)
            self.assertEqual(srv.get("/healthz").status, 200)
            # A certificate whose key is not beside it, then none at all: refused, logged as an
            # ERROR with the reason, and the pair in force stays.
            for spoil, reason in ((lambda: shutil.copy(other_cert, cert),
                                   "does --tls-key belong to --tls-cert?"),
                                  (lambda: os.unlink(cert), "cannot read TLS certificate")):
                spoil()
                mark = len(srv.lines)
                srv.signal(signal.SIGHUP)
                line = srv.wait_for_log(r"ERROR SIGHUP: TLS certificate and key not reloaded",
                                        start=mark)
                self.assertIn(reason, line)
                self.assertEqual(fingerprint(srv.port), second)
            self.assertEqual(srv.get("/healthz").status, 200)


if __name__ == "__main__":
    unittest.main()
