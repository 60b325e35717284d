"""Browser SDKs in headless Chromium, sending to a real ingestd: Segment's analytics.js
(analytics-next) and RudderStack's JavaScript SDK v3 (@rudderstack/analytics-js).

The page (index.html + page.js, bundled here with esbuild from the locked npm packages: no CDN)
is served by a small static server on one loopback origin; ingestd listens on another, so every
request is a real cross-origin one with a real CORS preflight (analytics.js sends
`Authorization: Basic`, which no simple request may carry). The page sends track, page and
identify events with keepalive fetches, `text/plain` bodies, one at a time (/v1/t, /v1/p,
/v1/i) or batched (/v1/b), the rest of a batch flushed on pagehide as analytics.js does when a
page is left, then POSTs the messageIds it sent back to the static server. The test asserts
from ingestd's log (`ingestd log cat`) that each is there exactly once, from the page's origin,
and from ingestd's /stats that the preflights happened; with `--cors-origin` set to a list
without the page's origin, the browser must deliver nothing.

RudderStackTest does the same with RudderStack's SDK (rudder.html + rudder.js, its `bundled`
build, source configuration inline): JSON bodies with its own AnonymousId and SentAt headers,
which the preflight must allow, one XHR per event (/v1/track, /v1/page, /v1/identify) or
batched (/v1/batch, asserted from ingestd's debug log).

Needs Debian's `chromium`, `nodejs` and `npm` (scripts/install-deps). Python 3 stdlib only.
"""

import contextlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration"))
sys.path.insert(0, os.path.join(HERE, ".."))

import harness  # noqa: E402
import nodedeps  # noqa: E402
from cdp import chromium_path  # noqa: E402  (test_dashboard.py's DevTools client; one lookup)

NODE_MODULES = os.path.join(HERE, "node_modules")
PAGE_TIMEOUT = 40.0  # Chromium start + page run: well under a minute
KEY = "browserkey"
SOURCE = "web"


class BrowserTestError(AssertionError):
    pass


# ---- npm install + bundle ------------------------------------------------------------------

def ensure_node_modules():
    """`npm ci` unless node_modules was installed from this very package.json + lock file.
    Optional dependencies stay: esbuild's binary for this platform is one."""
    nodedeps.ensure(HERE, packages=("@segment/analytics-next", "@rudderstack/analytics-js",
                                    "esbuild"), npm_args=())


def bundle(out_dir, entry="page.js"):
    """Bundles a page script (page.js with analytics-next, rudder.js with RudderStack's SDK)
    into one file with the locked esbuild; returns it."""
    out = os.path.join(out_dir, entry.replace(".js", ".bundle.js"))
    esbuild = os.path.join(NODE_MODULES, ".bin", "esbuild")
    p = subprocess.run([esbuild, os.path.join(HERE, entry), "--bundle", "--format=iife",
                        "--target=chrome100", "--outfile=" + out, "--log-level=warning"],
                       cwd=HERE, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=120)
    if p.returncode != 0 or not os.path.exists(out):
        raise BrowserTestError("esbuild failed (%d): %s %s" % (p.returncode, p.stdout, p.stderr))
    return out


# ---- the page's origin: a static server that also takes the page's report -----------------

class PageServer:
    """Serves the pages (index.html at /, rudder.html at /rudder) and their bundles on
    127.0.0.1:0; collects POST /report bodies."""

    PAGES = {"/": "index.html", "/rudder": "rudder.html"}

    def __init__(self, bundles):
        self.bundles = bundles  # {"/page.bundle.js": path, ...}
        self.reports = []
        self.requests = []  # (method, path) of every request, for failure messages
        self.cond = threading.Condition()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, fmt, *args):
                pass

            def _send(self, status, ctype, body):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                path = self.path.split("?", 1)[0]
                with owner.cond:
                    owner.requests.append(("GET", self.path))
                    owner.cond.notify_all()
                if path in owner.PAGES:
                    with open(os.path.join(HERE, owner.PAGES[path]), "rb") as f:
                        self._send(200, "text/html; charset=utf-8", f.read())
                elif path in owner.bundles:
                    with open(owner.bundles[path], "rb") as f:
                        self._send(200, "text/javascript; charset=utf-8", f.read())
                elif path == "/bye":
                    self._send(200, "text/html; charset=utf-8", b"<!doctype html><p>bye</p>")
                else:
                    self._send(404, "text/plain", b"not found")

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                with owner.cond:
                    owner.requests.append(("POST", self.path))
                    if self.path == "/report":
                        owner.reports.append(json.loads(body.decode("utf-8")))
                    owner.cond.notify_all()
                self._send(204 if self.path == "/report" else 404, "text/plain", b"")

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.origin = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def wait_report(self, run, timeout):
        def found():
            with self.cond:
                return next((r for r in self.reports if r.get("run") == run), None)
        return harness.deadline_wait(found, timeout, "the page's report of run %s "
                                     "(requests seen: %r)" % (run, self.requests))

    def wait_request(self, method, path, timeout):
        def seen():
            with self.cond:
                return (method, path) in self.requests
        return harness.deadline_wait(seen, timeout, "%s %s from the page" % (method, path))

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


# ---- the test -------------------------------------------------------------------------------

def event_run(e):
    """The page's run tag of a logged event: in properties (track, page) or traits (identify;
    RudderStack's SDK puts them in context.traits)."""
    for holder in (e.get("properties"), e.get("traits"), (e.get("context") or {}).get("traits")):
        if isinstance(holder, dict) and "run" in holder:
            return holder["run"]
    return None



class BrowserTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        ensure_node_modules()
        cls.tmp = tempfile.mkdtemp(prefix="ingestd-browser-")
        cls.chromium = chromium_path()
        cls.page = PageServer({"/page.bundle.js": bundle(cls.tmp, "page.js"),
                               "/rudder.bundle.js": bundle(cls.tmp, "rudder.js")})

    @classmethod
    def tearDownClass(cls):
        cls.page.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @contextlib.contextmanager
    def open_page(self, srv, mode, run, then=None, page="/"):
        """Headless Chromium on the page, until it reported (and requested `then`): yields the
        report, and closes the browser when the block is done (so keepalive requests that
        outlive the page have every chance to arrive)."""
        url = "%s%s?host=127.0.0.1:%d&key=%s&mode=%s&run=%s" % (
            self.page.origin, page, srv.port, KEY, mode, run)
        profile = tempfile.mkdtemp(prefix="profile-", dir=self.tmp)
        cmd = [self.chromium, "--headless", "--no-sandbox", "--disable-gpu",
               "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
               "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--user-data-dir=" + profile,
               # Nothing but loopback resolves: a fetch from a CDN would fail the page.
               "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
               url]
        log_path = os.path.join(self.tmp, "chromium-%s.log" % run)
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        try:
            try:
                report = self.page.wait_report(run, PAGE_TIMEOUT)
                if then is not None:
                    self.page.wait_request("GET", then, PAGE_TIMEOUT)
            except harness.HarnessError as e:
                with open(log_path, "rb") as f:
                    tail = f.read()[-3000:].decode("utf-8", "replace")
                raise BrowserTestError("%s\nchromium log:\n%s" % (e, tail)) from None
            yield report
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def wait_logged(self, srv, ids, run, timeout=PAGE_TIMEOUT):
        """Polls the log until every id of `ids` is there; returns the run's events."""
        def all_there():
            events = [e for e in harness.log_cat(srv.data_dir) if event_run(e) == run]
            have = {e.get("messageId") for e in events}
            return events if set(ids) <= have else None
        return harness.deadline_wait(all_there, timeout, "%d events of run %s in the log"
                                     % (len(ids), run), interval=0.2)

    def preflights(self, srv, status):
        return srv.stats()["requests"]["by_status"].get(str(status), 0)

    def check_delivered(self, srv, mode, expect_types, page="/", library="analytics.js"):
        run = "%s-%s" % (mode, uuid.uuid4().hex[:12])
        # analytics.js sends the rest of a batch when the page goes away (/bye); RudderStack's
        # SDK on its flush interval, while the page stays.
        then = "/bye?run=" + run if mode == "batching" and page == "/" else None
        with self.open_page(srv, mode, run, then=then, page=page) as report:
            self.assertNotIn("error", report, report)
            self.assertEqual(report["origin"], self.page.origin)
            sent = report["sent"]
            self.assertEqual(sorted(s["type"] for s in sent), sorted(expect_types), report)
            ids = [s["messageId"] for s in sent]
            self.assertEqual(len(set(ids)), len(ids), report)
            self.wait_logged(srv, ids, run)
        # The browser is gone: whatever it could still have sent (a retry) is in by now.
        events = self.wait_logged(srv, ids, run)

        # Exactly once each, nothing else of this run, from the page, as analytics.js sent it.
        counts = {}
        for e in events:
            counts[e["messageId"]] = counts.get(e["messageId"], 0) + 1
        self.assertEqual(counts, {i: 1 for i in ids}, events)
        by_id = {e["messageId"]: e for e in events}
        for s in sent:
            e = by_id[s["messageId"]]
            self.assertEqual(e["type"], s["type"], e)
            self.assertEqual(e["source"], SOURCE, e)
            ctx = e.get("context") or {}
            self.assertEqual((ctx.get("library") or {}).get("name"), library, e)
            page_url = (ctx.get("page") or {}).get("url", "")
            self.assertTrue(page_url.startswith(self.page.origin + "/"), e)
        # analytics.js sends Authorization: Basic, so the browser asked first.
        self.assertGreaterEqual(self.preflights(srv, 204), 1)
        # Had the browser refused an answer (a CORS header missing on it), analytics.js would
        # have sent the event again: no retry reached ingestd.
        self.assertEqual(srv.stats()["events"]["duplicates"], 0)
        return events

    def test_any_origin(self):
        """The default `--cors-origin *`: both delivery modes arrive, each event once."""
        with harness.Server(keys=["%s:%s" % (KEY, SOURCE)]) as srv:
            self.check_delivered(srv, "standard", ["identify", "page", "track", "track", "track"])
            before = self.preflights(srv, 204)
            self.check_delivered(srv, "batching", ["track", "track", "track", "identify", "page"])
            # A fresh browser profile has no preflight cache: /v1/b was asked about anew.
            self.assertGreater(self.preflights(srv, 204), before)
            self.assertEqual(self.preflights(srv, 403), 0)

    def test_listed_origin(self):
        """A list that names the page's origin: delivered, with the origin echoed."""
        origins = "https://app.example.com,%s" % self.page.origin
        with harness.Server(keys=["%s:%s" % (KEY, SOURCE)],
                            args=["--cors-origin", origins]) as srv:
            self.check_delivered(srv, "standard", ["identify", "page", "track", "track", "track"])
            self.check_delivered(srv, "batching", ["track", "track", "track", "identify", "page"])

    def test_unlisted_origin(self):
        """A list without the page's origin: the browser must not deliver anything."""
        with harness.Server(keys=["%s:%s" % (KEY, SOURCE)],
                            args=["--cors-origin", "https://app.example.com"]) as srv:
            run = "denied-%s" % uuid.uuid4().hex[:12]
            with self.open_page(srv, "standard", run) as report:
                self.assertEqual(len(report.get("sent") or []), 5, report)
                # Each event's request was refused at its preflight, so no POST reached ingestd.
                harness.deadline_wait(lambda: self.preflights(srv, 403) >= 1, 10,
                                      "a refused preflight in /stats")
            self.assertEqual(self.preflights(srv, 204), 0)
            self.assertEqual(harness.log_cat(srv.data_dir), [])
            self.assertEqual(srv.stats()["events"]["accepted"], 0)


# What RudderStack's JS SDK v3 reports as context.library.name.
RUDDER_LIBRARY = "RudderLabs JavaScript SDK"


class RudderStackTest(BrowserTest):
    """RudderStack's JavaScript SDK v3 (@rudderstack/analytics-js, bundled build) in the same
    headless Chromium: it sends AnonymousId and SentAt headers, which the preflight must allow
    (a fixed list of headers blocked every event), one event per XHR and batched."""

    TYPES = ["identify", "page", "track", "track", "track"]

    def posts(self, srv):
        """The paths of the POSTs ingestd answered 200 (its debug log: one line each)."""
        return re.findall(r"http: POST (\S+) -> 200(?: \(from [^)]*\))?$", srv.log(100000),
                          re.MULTILINE)

    def test_any_origin(self):
        with harness.Server(keys=["%s:%s" % (KEY, SOURCE)], args=["--log-level", "debug"]) as srv:
            self.check_delivered(srv, "standard", self.TYPES, page="/rudder",
                                 library=RUDDER_LIBRARY)
            # One request per event, on the event's own route.
            self.assertEqual(sorted(self.posts(srv)),
                             ["/v1/identify", "/v1/page", "/v1/track", "/v1/track", "/v1/track"])
            events = self.check_delivered(srv, "batching", self.TYPES, page="/rudder",
                                          library=RUDDER_LIBRARY)
            # Batched: a full batch of three, then the other two on the flush interval.
            self.assertEqual(self.posts(srv)[5:], ["/v1/batch", "/v1/batch"])
            # The SDK's own time fields are kept as sent (it sends no `timestamp`, so the logged
            # one is receivedAt; its clock also came as the SentAt header, allowed by the
            # preflight).
            for e in events:
                self.assertIn("sentAt", e)
                self.assertIn("originalTimestamp", e)
                self.assertEqual(e["timestamp"], e["receivedAt"])
            self.assertEqual(self.preflights(srv, 403), 0)

    def test_listed_origin(self):
        origins = "https://app.example.com,%s" % self.page.origin
        with harness.Server(keys=["%s:%s" % (KEY, SOURCE)],
                            args=["--cors-origin", origins]) as srv:
            self.check_delivered(srv, "standard", self.TYPES, page="/rudder",
                                 library=RUDDER_LIBRARY)
            self.check_delivered(srv, "batching", self.TYPES, page="/rudder",
                                 library=RUDDER_LIBRARY)

    def test_unlisted_origin(self):
        """A list without the page's origin: nothing is delivered."""
        with harness.Server(keys=["%s:%s" % (KEY, SOURCE)],
                            args=["--cors-origin", "https://app.example.com"]) as srv:
            run = "denied-%s" % uuid.uuid4().hex[:12]
            with self.open_page(srv, "standard", run, page="/rudder") as report:
                self.assertEqual(len(report.get("sent") or []), 5, report)
                harness.deadline_wait(lambda: self.preflights(srv, 403) >= 1, 10,
                                      "a refused preflight in /stats")
            self.assertEqual(self.preflights(srv, 204), 0)
            self.assertEqual(harness.log_cat(srv.data_dir), [])


if __name__ == "__main__":
    unittest.main()
