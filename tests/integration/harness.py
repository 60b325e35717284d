"""Integration harness: runs the real ingestd binary on loopback and speaks real HTTP to it.

Python 3 standard library only. Every wait polls a condition against a deadline; nothing
sleeps in place of synchronisation.

    srv = Server(keys=["k1", "k2:mobile"], args=["--window", "90s"])
    srv.start()                      # waits for "listening on http://HOST:PORT" and /healthz
    r = srv.post("/v1/batch", {"batch": [...]}, key="k1")
    r.status, r.json, r.header("Retry-After")
    srv.restart()                    # SIGTERM (asserting exit 0) + start on the same data dir
    events = log_cat(srv.data_dir)   # `ingestd log cat --data DIR`, parsed
    srv.stop()                       # SIGTERM, asserts exit 0
"""

import base64
import datetime
import gzip
import http.client
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
import time
import unittest
import uuid

import openapi_check

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.abspath(
    os.environ.get("INGESTD_BIN") or os.path.join(HERE, "..", "..", "build", "ingestd"))

START_TIMEOUT = float(os.environ.get("INGESTD_TEST_START_TIMEOUT", "20"))
STOP_TIMEOUT = float(os.environ.get("INGESTD_TEST_STOP_TIMEOUT", "20"))
HTTP_TIMEOUT = 20.0

LISTEN_RE = re.compile(r"listening on https?://(\[[^\]]+\]|[^\s:/]+):(\d+)")
UUID4_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
SANITIZER_RE = re.compile(r"(ERROR: (Address|Leak|Undefined)Sanitizer|runtime error: )")
ISO_MS_UTC_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

# Env vars of the server that must not leak from the caller's environment into a test.
_SERVER_ENV_PREFIX = "INGESTD_"
_KEEP_ENV = ("INGESTD_BIN", "INGESTD_TEST_START_TIMEOUT", "INGESTD_TEST_STOP_TIMEOUT")


class HarnessError(AssertionError):
    """A failure of the server as seen by the harness (start, stop, log cat)."""


def clean_env(extra=None):
    """The caller's environment minus INGESTD_* server settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_SERVER_ENV_PREFIX) or k in _KEEP_ENV}
    # Sanitizer builds: a leak report must fail the run, not hang it.
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
    if extra:
        env.update(extra)
    return env


def deadline_wait(cond, timeout, what, interval=0.02):
    """Polls cond() until it returns a true value (returned) or the deadline passes."""
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() >= end:
            raise HarnessError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)  # poll interval, not synchronisation: cond() decides


def basic(key, password=""):
    """Authorization header value for HTTP Basic with user=key."""
    raw = ("%s:%s" % (key, password)).encode()
    return "Basic " + base64.b64encode(raw).decode()


def new_id(prefix="m"):
    return "%s-%s" % (prefix, uuid.uuid4().hex)


def track(uid="u1", mid=None, event="Test Event", **extra):
    """A valid track event for a batch."""
    e = {"type": "track", "event": event, "userId": uid}
    if mid is not None:
        e["messageId"] = mid
    e.update(extra)
    return e


def parse_iso(s):
    """ISO-8601 string -> aware datetime (accepts Z)."""
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    return datetime.datetime.fromisoformat(s)


def iso_ms(dt):
    """Aware datetime -> 2026-11-22T07:32:02.123Z"""
    dt = dt.astimezone(datetime.timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (dt.microsecond // 1000)


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # list of (name, value)
        self.body = body
        try:
            self.json = json.loads(body.decode("utf-8")) if body else None
        except (ValueError, UnicodeDecodeError):
            self.json = None

    def header(self, name):
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None

    def __repr__(self):
        return "<HTTP %d %s %r>" % (self.status, dict(self.headers), self.body[:300])


def http_request(host, port, method, path, body=None, headers=None, timeout=HTTP_TIMEOUT,
                 context=None):
    """One request on a fresh connection. body: bytes, str, or a JSON-able object.

    context: an ssl.SSLContext to speak HTTPS; None: plain HTTP."""
    hdrs = dict(headers or {})
    if body is not None and not isinstance(body, (bytes, bytearray)):
        if not isinstance(body, str):
            body = json.dumps(body, separators=(",", ":"))
            hdrs.setdefault("Content-Type", "application/json")
        body = body.encode("utf-8")
    if context is not None:
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        try:
            conn.request(method, path, body=body, headers=hdrs)
        except (BrokenPipeError, ConnectionResetError):
            # The server may answer (e.g. 400 too large) and close before it read the
            # whole body; the answer is usually still readable.
            pass
        r = conn.getresponse()
        data = r.read()
        # Every answer a test gets through the harness must be one openapi.yaml describes.
        openapi_check.check_response(method, path, r.status, r.getheaders(), data)
        return Response(r.status, r.getheaders(), data)
    finally:
        conn.close()


class Server:
    """One ingestd `serve` process with its own temporary data dir."""

    def __init__(self, keys=("testkey",), args=(), env=None, data_dir=None, use_flags=True,
                 tls_ca=None):
        """tls_ca: CA (or self-signed certificate) file that verifies the server when it listens
        on https:// (--tls-cert); requests then go over TLS."""
        self.keys = list(keys)
        self.tls_ca = tls_ca
        self.ssl_context = None  # set by start() when the server says https://
        self.args = list(args)
        self.env = dict(env or {})
        self.use_flags = use_flags
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="ingestd-it-")
        self.proc = None
        self.host = None
        self.port = None
        self.lines = []  # every stderr line of every run, for failure messages
        self._lines_lock = threading.Lock()
        self._reader = None

    # ---- process control -------------------------------------------------

    def command(self):
        cmd = [BIN, "serve"]
        if self.use_flags:
            cmd += ["--listen", "127.0.0.1:0", "--data", self.data_dir]
            for k in self.keys:
                cmd += ["--write-key", k]
        return cmd + self.args

    def start(self):
        assert self.proc is None, "already running"
        if not os.access(BIN, os.X_OK):
            raise HarnessError("ingestd binary not found at %s (set INGESTD_BIN)" % BIN)
        first_line = len(self.lines)
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env=clean_env(self.env))
        self._reader = threading.Thread(target=self._drain, args=(self.proc,), daemon=True)
        self._reader.start()

        def listening():
            if self.proc.poll() is not None:
                raise HarnessError("ingestd exited with %s before listening:\n%s"
                                   % (self.proc.returncode, self.log()))
            with self._lines_lock:
                for line in self.lines[first_line:]:
                    m = LISTEN_RE.search(line)
                    if m:
                        return m
            return None

        try:
            m = deadline_wait(listening, START_TIMEOUT, "'listening on http://HOST:PORT'")
            self.ssl_context = None
            if m.group(0).startswith("listening on https://"):
                self.ssl_context = ssl.create_default_context(cafile=self.tls_ca)
                if self.tls_ca is None:
                    self.ssl_context.check_hostname = False
                    self.ssl_context.verify_mode = ssl.CERT_NONE
            self.host = m.group(1).strip("[]")
            self.port = int(m.group(2))
            if self.host in ("0.0.0.0", "::", ""):
                self.host = "127.0.0.1"
            deadline_wait(self._healthy, START_TIMEOUT, "GET /healthz == 200")
        except BaseException as e:
            self.kill()
            if isinstance(e, HarnessError):
                raise HarnessError("%s\nstderr:\n%s" % (e, self.log()))
            raise
        return self

    def _healthy(self):
        if self.proc.poll() is not None:
            raise HarnessError("ingestd exited with %s:\n%s" % (self.proc.returncode, self.log()))
        try:
            return self.get("/healthz", timeout=2).status == 200
        except OSError:
            return False

    def _drain(self, proc):
        for raw in proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self._lines_lock:
                self.lines.append(line)
        proc.stderr.close()

    def log(self, last=80):
        with self._lines_lock:
            return "\n".join(self.lines[-last:])

    def wait_for_log(self, pattern, timeout=10.0, start=0):
        """Waits for a stderr line (index >= start) matching regex `pattern`; returns it."""
        rx = re.compile(pattern)

        def found():
            with self._lines_lock:
                for line in self.lines[start:]:
                    if rx.search(line):
                        return line
            return None

        return deadline_wait(found, timeout, "server log line /%s/" % pattern)

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def wait(self, timeout=STOP_TIMEOUT):
        """Waits for exit and returns the exit code (None: still running at the deadline)."""
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        if self._reader:
            self._reader.join(timeout=5)
        return rc

    def stop(self, expect=0):
        """SIGTERM and wait; raises unless the exit code is `expect`. Returns it."""
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        rc = self.wait()
        if rc is None:
            self.kill()
            raise HarnessError("ingestd did not exit within %ss of SIGTERM:\n%s"
                               % (STOP_TIMEOUT, self.log()))
        self.proc = None
        if expect is not None and rc != expect:
            raise HarnessError("ingestd exited with %s after SIGTERM (expected %s):\n%s"
                               % (rc, expect, self.log()))
        self.check_sanitizers()
        return rc

    def check_sanitizers(self):
        """Raises if a sanitizer reported anything (recoverable reports do not change rc)."""
        with self._lines_lock:
            bad = [l for l in self.lines if SANITIZER_RE.search(l)]
        if bad:
            raise HarnessError("sanitizer report in ingestd's stderr:\n%s" % self.log(200))

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def restart(self):
        """SIGTERM (asserting exit 0) and start again on the same data dir."""
        self.stop()
        return self.start()

    def cleanup(self):
        """Kills a still-running server and removes the data dir if the harness made it."""
        self.kill()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, *exc):
        try:
            if self.proc is not None and exc[0] is None:
                self.stop()
        finally:
            self.cleanup()

    # ---- HTTP ------------------------------------------------------------

    def request(self, method, path, body=None, headers=None, key=None, timeout=HTTP_TIMEOUT):
        hdrs = dict(headers or {})
        if key is not None:
            hdrs["Authorization"] = basic(key)
        return http_request(self.host, self.port, method, path, body, hdrs, timeout,
                            context=self.ssl_context)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, key=None, headers=None, gzip_body=False, **kw):
        """POST; body may be a JSON-able object, str or bytes. key: Basic auth user."""
        hdrs = dict(headers or {})
        if body is not None and not isinstance(body, (bytes, bytearray, str)):
            body = json.dumps(body, separators=(",", ":"))
            hdrs.setdefault("Content-Type", "application/json")
        if gzip_body:
            if isinstance(body, str):
                body = body.encode()
            body = gzip.compress(body)
            hdrs.setdefault("Content-Encoding", "gzip")
        return self.request("POST", path, body, hdrs, key, **kw)

    def batch(self, events, key=None, **top):
        """POST /v1/batch with {"batch": events, **top}; key defaults to the first write key."""
        if key is None:
            key = self.keys[0].split(":", 1)[0] if self.keys else None
        body = {"batch": events}
        body.update(top)
        return self.post("/v1/batch", body, key=key)

    def admin_token(self):
        """The --admin-token (or INGESTD_ADMIN_TOKEN) the server was started with, or None."""
        for i, a in enumerate(self.args):
            if a == "--admin-token" and i + 1 < len(self.args):
                return self.args[i + 1]
            if a.startswith("--admin-token="):
                return a.split("=", 1)[1]
        return self.env.get("INGESTD_ADMIN_TOKEN") or None

    def post_as_operator(self, path, body, key):
        """POST `body` (a dict) with the admin token in Authorization: Bearer and `key` in the
        body's writeKey: only then do ?verbose=true's verdicts name log offsets and first
        copies (a write key alone gets statuses)."""
        return self.post(path, dict(body, writeKey=key), headers=self.admin_headers())

    def admin_headers(self):
        """Authorization for /stats, /metrics and /v1/log when an admin token is set."""
        tok = self.admin_token()
        return {"Authorization": "Bearer " + tok} if tok else {}

    def stats(self):
        r = self.get("/stats", headers=self.admin_headers())
        if r.status != 200 or r.json is None:
            raise HarnessError("GET /stats: %r" % r)
        return r.json

    def metrics(self):
        r = self.get("/metrics", headers=self.admin_headers())
        if r.status != 200:
            raise HarnessError("GET /metrics: %r" % r)
        return r


# ---- log cat ------------------------------------------------------------------

def send_ids(srv, ids, key, batch=500):
    """Sends track events with these messageIds in batches; returns (accepted, duplicates)."""
    acc = dup = 0
    for i in range(0, len(ids), batch):
        r = srv.batch([track(mid=m) for m in ids[i:i + batch]], key=key)
        assert r.status == 200, r
        acc += r.json["accepted"]
        dup += r.json["duplicates"]
    return acc, dup


def gen_files(data_dir):
    """The sealed generation files of a data dir, sorted (none when it has no gens/ yet)."""
    d = os.path.join(data_dir, "store", "gens")
    return sorted(f for f in os.listdir(d) if f.endswith(".gen")) if os.path.isdir(d) else []


def log_cat_cmd(data_dir, from_=None, follow=False, group=None):
    cmd = [BIN, "log", "cat", "--data", data_dir]
    if from_ is not None:
        cmd += ["--from", str(from_)]
    if follow:
        cmd.append("--follow")
    if group is not None:
        cmd += ["--group", group]
    return cmd


def log_cat(data_dir, from_=None, timeout=30, group=None):
    """Runs `ingestd log cat --data DIR [--from N] [--group G]`; returns the events as parsed JSON."""
    p = subprocess.run(log_cat_cmd(data_dir, from_, group=group), stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=timeout, env=clean_env())
    if p.returncode != 0:
        raise HarnessError("log cat exited %d: %s" % (p.returncode, p.stderr.decode(errors="replace")))
    events = []
    for n, line in enumerate(p.stdout.decode("utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            events.append(json.loads(line))
        except ValueError:
            raise HarnessError("log cat line %d is not JSON: %r" % (n, line[:300]))
    return events


class Follower:
    """`ingestd log cat --follow` in the background; lines collected by a reader thread."""

    def __init__(self, data_dir, from_=None, group=None):
        self.proc = subprocess.Popen(log_cat_cmd(data_dir, from_, follow=True, group=group),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=clean_env())
        self.lines = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for raw in self.proc.stdout:
            with self.lock:
                self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def events(self):
        with self.lock:
            return [json.loads(l) for l in self.lines if l.strip()]

    def wait_for(self, pred, timeout=10.0, what="a followed event"):
        def check():
            if self.proc.poll() is not None:
                raise HarnessError("log cat --follow exited with %s: %s" % (
                    self.proc.returncode, self.proc.stderr.read().decode(errors="replace")))
            for e in self.events():
                if pred(e):
                    return e
            return None
        return deadline_wait(check, timeout, what)

    def stop(self, timeout=10.0):
        """SIGTERM; waits for exit and EOF on stdout. Returns (exit code, stderr text)."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise HarnessError("log cat --follow did not exit within %.0fs of SIGTERM" % timeout)
        self.thread.join(timeout=timeout)
        err = self.proc.stderr.read().decode(errors="replace")
        self.proc.stdout.close()
        self.proc.stderr.close()
        return rc, err

    def close(self):
        if self.proc.stdout.closed:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.thread.join(timeout=5)
        self.proc.stdout.close()
        self.proc.stderr.close()


def run_cli(args, env=None, timeout=15):
    """Runs `ingestd ARGS...` to completion; returns CompletedProcess (text)."""
    return subprocess.run([BIN] + list(args), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout, env=clean_env(env))



# ---- unittest glue ------------------------------------------------------------


class ServerTestCase(unittest.TestCase):
    """One server per test class (KEYS, ARGS), stopped with SIGTERM (exit 0 asserted)."""

    KEYS = ("testkey",)
    ARGS = ()
    srv = None

    @classmethod
    def setUpClass(cls):
        srv = Server(cls.KEYS, cls.ARGS)
        try:
            srv.start()
        except BaseException:
            srv.cleanup()
            raise
        cls.srv = srv

    @classmethod
    def tearDownClass(cls):
        if cls.srv is None:
            return
        try:
            cls.srv.stop()
        finally:
            cls.srv.cleanup()

    @property
    def key(self):
        return self.KEYS[0].split(":", 1)[0]

    def assertError(self, r, status, contains=None):
        """r is `status` with a JSON {"success":false,"error":"..."} body."""
        self.assertEqual(r.status, status, r)
        ctype = r.header("Content-Type") or ""
        self.assertTrue(ctype.startswith("application/json"), "Content-Type %r: %r" % (ctype, r))
        self.assertIsInstance(r.json, dict, r)
        self.assertIs(r.json.get("success"), False, r)
        self.assertIsInstance(r.json.get("error"), str, r)
        self.assertTrue(r.json["error"], r)
        if contains is not None:
            self.assertIn(contains.lower(), r.json["error"].lower(), r)

    def assertOk(self, r, accepted=None, duplicates=None, rejected=None):
        """r is 200 {"success":true,"accepted":A,"duplicates":D,"rejected":[...]}.

        rejected: None (not checked) or a list of indexes expected in "rejected".
        """
        self.assertEqual(r.status, 200, r)
        self.assertIsInstance(r.json, dict, r)
        self.assertIs(r.json.get("success"), True, r)
        for f in ("accepted", "duplicates", "rejected"):
            self.assertIn(f, r.json, r)
        self.assertIsInstance(r.json["rejected"], list, r)
        for item in r.json["rejected"]:
            self.assertIsInstance(item.get("index"), int, r)
            self.assertIsInstance(item.get("error"), str, r)
        if accepted is not None:
            self.assertEqual(r.json["accepted"], accepted, r)
        if duplicates is not None:
            self.assertEqual(r.json["duplicates"], duplicates, r)
        if rejected is not None:
            self.assertEqual(sorted(i["index"] for i in r.json["rejected"]), sorted(rejected), r)
        return r.json
