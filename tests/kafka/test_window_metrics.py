"""The window's metrics are one list for both roles (storage/window/stats.h).

A real single node (`ingestd serve`) and a real `ingestd worker` on librdkafka's mock cluster
each serve /metrics. Every window series of the single node (dedupe_*, generation*, seals_*,
the merges and the recovery seals; the per-source series are prom_sources' and the memory
filter's rate is not a window of generations) must be on the worker too, once per partition
with a partition label, and say what the partition holds: the keys add up to the events, and
with a young store of a few keys the partitions seal. The worker's /stats shows each
partition's window as the single node's /stats dedupe shows its own.
"""

import os
import re
import shutil
import tempfile
import unittest

from test_worker import Mock, Worker, WAIT, batch, produce  # noqa: E402  (puts integration/ on the path)

from harness import Server, deadline_wait  # noqa: E402

PARTITIONS = 2
EVENTS = 200
YOUNG = 10

WINDOW_RE = re.compile(r"^ingestd_(dedupe_(?!source_|filter_)|generation|seals_|recovery_seals_|"
                       r"recovery_generation_)")
SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


def samples(text):
    """{(name, labels): value} of a /metrics page."""
    out = {}
    for line in text.splitlines():
        m = SAMPLE_RE.match(line)
        if m:
            out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


class WindowMetricsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ingestd-kafka-window-")
        self.mock = Mock(["raw:%d" % PARTITIONS, "out:%d" % PARTITIONS])
        self.w = Worker(self.mock, os.path.join(self.tmp, "w1"),
                        args=["--young-keys", str(YOUNG), "--max-keys", "100000"])
        self.node = Server()

    def tearDown(self):
        if self.w.proc is not None:
            self.w.cleanup()
        self.node.cleanup()
        self.mock.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_worker_has_every_window_metric_of_the_single_node(self):
        self.node.start()
        single = samples(self.node.metrics().body.decode())
        names = sorted({n for n, _ in single if WINDOW_RE.match(n)})
        # The list the worker must match is the single node's whole window, not a part of it.
        for must in ("ingestd_dedupe_keys", "ingestd_dedupe_evicted_total", "ingestd_generations",
                     "ingestd_generation_keys", "ingestd_seals_total",
                     "ingestd_generation_merges_total", "ingestd_recovery_seals_finished_total"):
            self.assertIn(must, names)
        single_gens = set(self.node.stats()["dedupe"]["generations"])

        self.w.start()
        self.w.wait_ready()
        produce(self.mock, batch("win", EVENTS))
        deadline_wait(lambda: self.w.stats()["events"]["consumed"] >= EVENTS, WAIT,
                      "the worker to consume the batch")

        def sealed():
            parts = self.w.stats()["partitions"]
            return len(parts) == PARTITIONS and all(p["generations"] > 0 for p in parts)
        deadline_wait(sealed, WAIT, "every partition to seal its young store")
        status, text = self.w.get("/metrics")
        self.assertEqual(status, 200)
        worker = samples(text)
        for name in names:
            for part in range(PARTITIONS):
                label = 'partition="%d"' % part
                got = [k for k in worker if k[0] == name and label in k[1]]
                self.assertTrue(got, "%s{%s} missing from the worker's /metrics" % (name, label))
        per = {p: {n: v for (n, lb), v in worker.items() if 'partition="%d"' % p in lb}
               for p in range(PARTITIONS)}
        self.assertEqual(sum(per[p]["ingestd_dedupe_keys"] for p in per), EVENTS)
        for p in per:
            self.assertGreater(per[p]["ingestd_seals_total"], 0)
            self.assertGreater(per[p]["ingestd_generation_keys"], 0)
            self.assertLessEqual(per[p]["ingestd_generation_keys"], per[p]["ingestd_dedupe_keys"])

        for p in self.w.stats()["partitions"]:
            win = p["window"]
            self.assertEqual(set(win["generations"]), single_gens)
            self.assertEqual(win["keys"], p["keys"])
            self.assertEqual(win["generations"]["count"], p["generations"])
            self.assertEqual(win["generations"]["keys"], p["generation_keys"])


if __name__ == "__main__":
    unittest.main()
