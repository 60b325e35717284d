"""GET /dashboard in headless Chromium, against the real server under load.

ingestd-load offers a steady rate with a known share of duplicates; Debian's chromium
(driven over the DevTools protocol on a pipe, cdp.py) opens the page the server serves
itself, with every host but 127.0.0.1 unresolvable, so nothing can come from a CDN. The test
asserts that:
- the charts draw data: each chart holds points, and its canvas has pixels of its first
  series' colour (the line is really drawn, not only the data held), the lag chart a line for
  the consumer group the test made;
- the headline numbers match /stats: the effective window read from the page and from /stats
  at once (within the refresh), and the page's events/s and duplicate % against the rates the
  test measures itself from two /stats samples 5 s apart, over the same stretch the page's
  headline spans (within 25% and 3 points: the load is steady, so a page showing totals,
  since-start ratios or stale numbers fails);
- with --admin-token, the page asks for the token, refuses a wrong one, shows data with the
  right one, and keeps it for the tab (a reload asks no more); its lookup box answers seen
  and unseen messageIds with that token (GET /v1/events).
A screenshot goes to the temp dir, and to $INGESTD_DASHBOARD_SCREENSHOT when set (that is how
docs/dashboard.png is made).

Needs Debian's `chromium` (scripts/install-deps). Python 3 stdlib only. INGESTD_BIN and
INGESTD_LOAD_BIN name the binaries (CTest sets them).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration"))

import cdp  # noqa: E402
import harness  # noqa: E402

LOAD_BIN = os.path.abspath(os.environ.get("INGESTD_LOAD_BIN")
                           or os.path.join(HERE, "..", "..", "..", "build", "ingestd-load"))
KEY = "dashkey"
TOKEN = "s3cret-admin-token"
RATE = 1500  # events/s offered: steady enough to compare rates, light for a shared machine
DUP_RATIO = 0.3
UNIQUE_FIRST = 30000  # a burst without duplicates first: since-start ratio != recent ratio
HEADLINE_S = 5.0  # the page's headline rates span 5 s (dashboard.js HEADLINE_MS)

# The page's state in one evaluation, so the numbers come from the same refresh.
READ_PAGE = """JSON.stringify({
  samples: window.ingestd.samples,
  t: Number(document.getElementById('h-window').dataset.t),
  window: document.getElementById('h-window').dataset.value,
  windowText: document.getElementById('h-window').textContent,
  rate: document.getElementById('h-rate').dataset.value,
  dup: document.getElementById('h-dup').dataset.value,
  storage: document.getElementById('h-storage').dataset.value,
  loginShown: !document.getElementById('login').hidden,
  mainShown: !document.getElementById('main').hidden,
})"""

# Per chart: points held, and pixels near its first series' colour on its canvas.
READ_CHARTS = """JSON.stringify(Object.fromEntries(Object.entries(window.ingestd.charts)
  .map(([id, c]) => {
    const ys = c.data[1] || [];
    const held = ys.filter((v) => v !== null && v !== undefined && !Number.isNaN(v)).length;
    const stroke = (c.names[0] || [null, '#000000'])[1];
    const want = [1, 3, 5].map((i) => parseInt(stroke.substr(i, 2), 16));
    const cv = c.plot.ctx.canvas;
    const px = c.plot.ctx.getImageData(0, 0, cv.width, cv.height).data;
    let drawn = 0;
    for (let i = 0; i < px.length; i += 4)
      if (px[i + 3] > 200 && Math.abs(px[i] - want[0]) < 24 && Math.abs(px[i + 1] - want[1]) < 24
          && Math.abs(px[i + 2] - want[2]) < 24) drawn++;
    return [id, {held, drawn, series: c.names.map((s) => s[0])}];
  })))"""


def load_cmd(srv, *args):
    if not os.access(LOAD_BIN, os.X_OK):
        raise AssertionError("ingestd-load not found at %s (set INGESTD_LOAD_BIN)" % LOAD_BIN)
    return [LOAD_BIN, "--url", "http://127.0.0.1:%d" % srv.port, "--write-key", KEY, "--quiet",
            "--connections", "4"] + list(args)


def start_load(srv, seconds):
    """UNIQUE_FIRST events without duplicates as fast as they go, then RATE events/s with
    DUP_RATIO duplicates in the background: the recent duplicate % (what the headline shows)
    then differs from the since-start one, and a page showing the wrong one fails."""
    subprocess.run(load_cmd(srv, "--events", str(UNIQUE_FIRST), "--batch", "100"),
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True, timeout=120)
    return subprocess.Popen(
        load_cmd(srv, "--rate", str(RATE), "--dup-ratio", str(DUP_RATIO), "--batch", "25",
                 "--duration", "%ds" % seconds),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_load(p):
    if p.poll() is None:
        p.terminate()
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


class DashboardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ingestd-dashboard-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def page_state(self, page):
        return json.loads(page.eval(READ_PAGE))

    def test_route(self):
        """The page itself: HTML from the binary, no outside references, open with a token."""
        with harness.Server(keys=[KEY], args=["--admin-token", TOKEN]) as srv:
            r = srv.get("/dashboard")  # the harness validates it against openapi.yaml
            self.assertEqual(r.status, 200, r)
            self.assertTrue(r.header("Content-Type").startswith("text/html"))
            html = r.body.decode("utf-8")
            self.assertIn("uPlot", html)
            self.assertNotIn("<script src", html)
            self.assertNotIn("<link", html)
            self.assertIn("default-src 'none'", r.header("Content-Security-Policy"))
            self.assertEqual(srv.request("HEAD", "/dashboard").status, 200)
            r = srv.post("/dashboard", b"x")
            self.assertEqual(r.status, 405)
            self.assertEqual(r.header("Allow"), "GET, HEAD")
            self.assertEqual(srv.get("/stats").status, 401)  # the data still needs the token

    def test_charts_and_headline_under_load(self):
        with harness.Server(keys=[KEY]) as srv, cdp.Browser(self.tmp) as browser:
            load = start_load(srv, 60)
            try:
                # A consumer group that read the unique burst and then stops: its lag grows
                # with the load, a line in the lag chart.
                harness.log_cat(srv.data_dir, group="billing")
                page = browser.open("http://127.0.0.1:%d/dashboard" % srv.port)
                # Enough refreshes for the headline's 5 s span and a few chart points.
                page.wait("window.ingestd && window.ingestd.samples >= 8", 40, "8 refreshes")
                self.check_charts(page)
                self.check_headline(srv, page)
                png = page.screenshot(os.path.join(self.tmp, "dashboard.png"), 1400, 1240)
                self.assertEqual(png[:8], b"\x89PNG\r\n\x1a\n")
                out = os.environ.get("INGESTD_DASHBOARD_SCREENSHOT")
                if out:
                    shutil.copy(os.path.join(self.tmp, "dashboard.png"), out)
            finally:
                stop_load(load)

    def check_charts(self, page):
        charts = json.loads(page.eval(READ_CHARTS))
        for cid in ("rates", "dupratio", "window", "keys", "commit", "latency"):
            c = charts[cid]
            self.assertGreaterEqual(c["held"], 4, "chart %s holds too few points: %r" % (cid, c))
            # A line 2 px wide over a few hundred px: hundreds of pixels; axes and legend
            # swatches alone are far fewer than this.
            self.assertGreater(c["drawn"], 150, "chart %s draws no line: %r" % (cid, c))
        # A source that forgot nothing draws no window line of its own.
        self.assertNotIn("source default", charts["window"]["series"], charts["window"])
        lag = charts["lag"]
        self.assertEqual(lag["series"], ["billing"], lag)
        self.assertGreaterEqual(lag["held"], 4, lag)
        self.assertGreater(lag["drawn"], 150, lag)

    def check_headline(self, srv, page):
        # The window: the page's last refresh against /stats right now, one refresh apart at most.
        state = self.page_state(page)
        stats = srv.stats()
        self.assertTrue(state["mainShown"] and not state["loginShown"], state)
        self.assertGreater(stats["dedupe"]["effective_window_seconds"], 0)
        self.assertAlmostEqual(float(state["window"]),
                               stats["dedupe"]["effective_window_seconds"], delta=2.5,
                               msg="page %r vs /stats %r" % (state, stats["dedupe"]))
        # What it shows: hours with two decimals.
        self.assertTrue(state["windowText"].endswith(" h"), state)
        self.assertAlmostEqual(float(state["windowText"][:-2]),
                               stats["dedupe"]["effective_window_seconds"] / 3600, delta=0.006)
        self.assertEqual(state["storage"], "failed" if stats["storage"]["failed"] else "ok")

        # The rates: the test's own 5 s of /stats, then the page's headline, which spans the
        # same 5 s (give or take its one-second refresh).
        t0, s0 = time.monotonic(), srv.stats()
        time.sleep(HEADLINE_S)
        t1, s1 = time.monotonic(), srv.stats()
        state = self.page_state(page)
        dt = t1 - t0
        acc = (s1["events"]["accepted"] - s0["events"]["accepted"]) / dt
        dup = (s1["events"]["duplicates"] - s0["events"]["duplicates"]) / dt
        self.assertGreater(acc, RATE * 0.4, "the load did not arrive: %r" % s1["events"])
        ratio = 100 * dup / (acc + dup)
        msg = "page %r, /stats over %.1f s: %.0f accepted/s, %.2f %% duplicates" % (
            state, dt, acc, ratio)
        self.assertAlmostEqual(float(state["rate"]), acc, delta=0.25 * acc, msg=msg)
        self.assertAlmostEqual(float(state["dup"]), ratio, delta=3.0, msg=msg)
        # The load's share is what both must show, and the since-start share is well away from
        # it (the unique burst first), so a page showing that one cannot pass.
        self.assertAlmostEqual(ratio, 100 * DUP_RATIO, delta=4.0, msg=msg)
        e = s1["events"]
        since_start = 100 * e["duplicates"] / (e["accepted"] + e["duplicates"])
        self.assertGreater(abs(since_start - ratio), 8.0, msg)

    def test_admin_token(self):
        with harness.Server(keys=[KEY], args=["--admin-token", TOKEN]) as srv, \
                cdp.Browser(self.tmp) as browser:
            srv.batch([harness.track(mid="dash-1")], key=KEY)
            url = "http://127.0.0.1:%d/dashboard" % srv.port
            page = browser.open(url)
            page.wait("!document.getElementById('login').hidden", 15, "the token form")
            state = self.page_state(page)
            self.assertFalse(state["mainShown"], state)
            self.assertEqual(state["samples"], 0, state)

            # A wrong token: refused, asked again, nothing kept.
            self.submit_token(page, "wrong-token")
            page.wait("!document.getElementById('login').hidden && "
                      "/refused/.test(document.getElementById('login-why').textContent)",
                      15, "the form again, saying the token was refused")
            self.assertIsNone(page.eval("sessionStorage.getItem('ingestd.adminToken')"))

            self.submit_token(page, TOKEN)
            page.wait("window.ingestd.samples >= 2", 15, "data after the right token")
            state = self.page_state(page)
            self.assertFalse(state["loginShown"], state)
            self.assertEqual(state["storage"], "ok")
            self.assertEqual(page.eval("sessionStorage.getItem('ingestd.adminToken')"), TOKEN)

            # The lookup box asks GET /v1/events with the token the page keeps.
            self.assertIn("seen at offset 0", self.look_up(page, "dash-1", 1))
            self.assertIn("unseen", self.look_up(page, "never-sent", 2))

            # Asked once: a reload of the tab goes straight to the data.
            page.send("Page.reload")
            page.wait("document.readyState === 'complete' && window.ingestd && "
                      "window.ingestd.samples >= 1", 15, "data after a reload")
            self.assertFalse(self.page_state(page)["loginShown"])

    def look_up(self, page, mid, nth):
        """Types `mid` into the lookup box and submits; returns the verdict shown."""
        page.eval("""(() => {
            document.getElementById('lookup-id').value = %s;
            document.getElementById('lookup-go').click();
            return true; })()""" % json.dumps(mid))
        page.wait("window.ingestd.lookups >= %d" % nth, 15, "the lookup of %s" % mid)
        return page.eval("document.getElementById('lookup-verdict').textContent")

    def submit_token(self, page, token):
        page.eval("""(() => {
            document.getElementById('token').value = %s;
            document.getElementById('login-go').click();
            return true; })()""" % json.dumps(token))


if __name__ == "__main__":
    unittest.main()
