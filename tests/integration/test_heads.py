"""Hostile request heads: every tests/data/hostile/*.http, replayed byte for byte over a raw
socket against the real binary, answered as tests/data/hostile/heads.txt says (issue 27).

Each .http file is one request exactly as it goes on the wire (head, and for some a body):
NULs, control bytes, bare LFs, two Transfer-Encoding lines, malformed Content-Length, absolute
targets. heads.txt gives, per file, the status, who answers (our JSON, or libmicrohttpd's own
HTML page), and whether the connection closes after the answer or stays open for another
request. Write requests carry the key `testkey` and their file's name as messageId, so the log,
read once at the end, holds exactly the files whose status is 200 and nothing smuggled.

    INGESTD_BIN=../../build/ingestd python3 test_heads.py -v
    INGESTD_HEADS_CASE=nul_ python3 test_heads.py -v      # only files whose name has this
"""

import os
import socket
import unittest

from harness import ServerTestCase, log_cat
from test_transport import Raw

HERE = os.path.dirname(os.path.abspath(__file__))
CASE_DIR = os.path.normpath(os.path.join(HERE, "..", "data", "hostile"))
MANIFEST = os.path.join(CASE_DIR, "heads.txt")
SOCK_TIMEOUT = 10.0  # every case is answered at once; --request-timeout is shorter still


def load_manifest():
    """{name: (status, answerer, after)} from heads.txt."""
    cases = {}
    with open(MANIFEST, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            name, status, answerer, after = line.split()[:4]
            assert answerer in ("json", "mhd"), line
            assert after in ("close", "keep"), line
            cases[name] = (int(status), answerer, after)
    return cases


def case_bytes(name):
    with open(os.path.join(CASE_DIR, name + ".http"), "rb") as f:
        return f.read()


class Heads(ServerTestCase):
    ARGS = ("--request-timeout", "5s")
    CASES = load_manifest()
    ONLY = os.environ.get("INGESTD_HEADS_CASE")

    def check_after(self, name, c, r):
        """The connection after the answer: closed with nothing more, or serving the next."""
        status, answerer, after = self.CASES[name]
        if after == "keep":
            c.send(b"GET /healthz HTTP/1.1\r\nHost: ingestd\r\n\r\n")
            self.assertEqual(c.read_response().status, 200, "%s: connection not usable" % name)
            return
        try:
            self.assertTrue(c.closed_by_peer())
        except socket.timeout:
            self.fail("%s: connection left open" % name)
        if answerer == "mhd" and c.buf:
            # libmicrohttpd 0.9.75 sends the status line and headers of its own 400/413 for a
            # malformed Content-Length twice (docs/deploy.md), so what was read as the body is
            # the second head, and the page follows it; nothing else may.
            whole = r.body + c.buf
            self.assertTrue(whole.startswith(b"HTTP/1.1 %d " % status), (name, whole[:200]))
            self.assertTrue(whole.endswith(b"</html>"), (name, whole[-200:]))
        else:
            self.assertEqual(c.buf, b"", "%s: more after the answer" % name)

    def replay(self, name):
        status, answerer, _ = self.CASES[name]
        c = Raw(self.srv, timeout=SOCK_TIMEOUT)
        try:
            try:
                c.send(case_bytes(name))
            except (BrokenPipeError, ConnectionResetError):
                pass  # answered and closed before all of it was read: read the answer
            r = c.read_response()
            self.assertEqual(r.status, status, "%s: %r" % (name, r))
            if answerer == "json":
                self.assertTrue((r.header("Content-Type") or "").startswith("application/json"), r)
                self.assertTrue(r.header("X-Request-Id"), r)
                if status >= 400:
                    self.assertIs(r.json.get("success"), False, r)
            self.check_after(name, c, r)
        finally:
            c.close()

    def test_corpus(self):
        names = sorted(n for n in self.CASES if not self.ONLY or self.ONLY in n)
        for name in names:
            with self.subTest(case=name):
                self.replay(name)
            self.assertEqual(self.srv.get("/healthz").status, 200,
                             "server unhealthy after %s" % name)
        # Exactly the write requests answered 200 are logged, once; nothing smuggled behind
        # them, nothing from a refused one.
        want = sorted(n for n in names
                      if self.CASES[n][0] == 200 and b"messageId" in case_bytes(n))
        got = sorted(e["messageId"] for e in log_cat(self.srv.data_dir))
        self.assertEqual(got, want)

    def test_manifest_matches_files(self):
        files = sorted(f[:-5] for f in os.listdir(CASE_DIR) if f.endswith(".http"))
        self.assertEqual(files, sorted(self.CASES))


if __name__ == "__main__":
    unittest.main()
