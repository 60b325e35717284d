"""The worker's /dashboard: the page of `serve`, reading the worker's /stats, in headless Chromium.

A real `ingestd worker` on librdkafka's mock cluster (test_worker.py's helpers) de-duplicates
a batch produced twice; Debian's chromium (tests/clients/browser/cdp.py) opens the page on the
worker's --listen port and the test asserts that it shows the worker's partitions: a keys,
window and lag line per partition, total keys and the shortest effective window as /stats
has them, the duplicates as duplicates, and the worker's readiness as its storage state.
"""

import json
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "clients", "browser"))

from test_worker import Mock, Worker, WAIT, batch, produce  # noqa: E402  (puts integration/ on the path)

import cdp  # noqa: E402
from harness import deadline_wait  # noqa: E402

PARTITIONS = 4
EVENTS = 400

READ = """JSON.stringify({
  samples: window.ingestd.samples,
  window: document.getElementById('h-window').dataset.value,
  storage: document.getElementById('h-storage').dataset.value,
  role: document.getElementById('role').textContent,
  series: Object.fromEntries(Object.entries(window.ingestd.charts).map(([id, c]) =>
    [id, Object.fromEntries(c.names.map((s, i) => [s[0], c.data[i + 1][c.data[i + 1].length - 1]]))])),
})"""


class WorkerDashboardTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ingestd-kafka-dash-")
        self.mock = Mock(["raw:%d" % PARTITIONS, "out:%d" % PARTITIONS])
        self.w = Worker(self.mock, os.path.join(self.tmp, "w1"))

    def tearDown(self):
        self.w.cleanup()
        self.mock.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_partitions_on_the_page(self):
        self.w.start()
        self.w.wait_ready()
        events = batch("dash", EVENTS)
        produce(self.mock, events)
        produce(self.mock, events)  # every one again: all duplicates
        deadline_wait(lambda: self.w.stats()["events"]["consumed"] >= 2 * EVENTS, WAIT,
                      "the worker to consume both copies")
        status, html = self.w.get("/dashboard")
        self.assertEqual(status, 200)
        self.assertIn("uPlot", html)
        with cdp.Browser(self.tmp) as browser:
            page = browser.open("http://127.0.0.1:%d/dashboard" % self.w.port)
            page.wait("window.ingestd && window.ingestd.samples >= 3", 30, "3 refreshes")
            state = json.loads(page.eval(READ))
            stats = self.w.stats()
        parts = stats["partitions"]
        self.assertEqual(len(parts), PARTITIONS)
        names = ["partition %d" % p["partition"] for p in parts]
        self.assertEqual(state["role"], "worker")
        self.assertEqual(state["storage"], "ready" if stats["ready"] else "not ready")
        for chart in ("keys", "window", "lag"):
            for n in names:
                self.assertIn(n, state["series"][chart], (chart, state["series"][chart]))
        keys = state["series"]["keys"]
        self.assertEqual(keys["keys"], sum(p["keys"] for p in parts))
        self.assertEqual(keys["keys"], EVENTS)  # the second copies were duplicates
        for p in parts:
            self.assertEqual(keys["partition %d" % p["partition"]], p["keys"])
            self.assertEqual(state["series"]["lag"]["partition %d" % p["partition"]], p["lag"])
        shortest = min(p["effective_window_seconds"] for p in parts)
        self.assertAlmostEqual(float(state["window"]), shortest, delta=2.5)
        self.assertEqual(stats["events"]["duplicates"], EVENTS)
        self.w.stop()


if __name__ == "__main__":
    unittest.main()
