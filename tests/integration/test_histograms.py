"""The /metrics histograms: ingestd_request_duration_seconds by route and status class,
ingestd_fsync_duration_seconds, ingestd_commit_batch_events and
ingestd_duplicate_age_seconds, against the real server.

Each is checked as Prometheus defines a histogram (buckets cumulative and ascending, +Inf last
and equal to _count) and against what the test did and the counters the server already had:
a known number of answers per route and class, one fsync sample per `ingestd_fsyncs_total`,
and batch sizes that add up to `ingestd_commit_events_total`.
"""

import math
import re
import unittest

from harness import ServerTestCase, new_id, track

SAMPLE_RE = re.compile(r"^([a-z_]+)(?:\{([^}]*)\})? (\S+)$")


def parse(text):
    """[(name, {label: value}, float)] of every sample line."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE_RE.match(line)
        assert m, "not a sample line: %r" % line
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        out.append((m.group(1), labels, float(m.group(3))))
    return out


class HistogramsTest(ServerTestCase):
    KEYS = ("histkey",)

    def series(self, samples, name, **want):
        """The histogram `name` for the label set `want` (without le): buckets, sum, count."""
        def match(labels):
            return all(labels.get(k) == v for k, v in want.items()) and \
                set(labels) - {"le"} == set(want)
        buckets = [(l["le"], v) for n, l, v in samples if n == name + "_bucket" and match(l)]
        total = [v for n, l, v in samples if n == name + "_sum" and match(l)]
        count = [v for n, l, v in samples if n == name + "_count" and match(l)]
        self.assertTrue(buckets and len(total) == 1 and len(count) == 1,
                        "%s %r missing: %r" % (name, want, [s for s in samples if s[0].startswith(name)]))
        bounds = [math.inf if le == "+Inf" else float(le) for le, _ in buckets]
        self.assertEqual(bounds, sorted(bounds), "le not ascending")
        self.assertEqual(bounds[-1], math.inf, "+Inf not last")
        counts = [v for _, v in buckets]
        self.assertEqual(counts, sorted(counts), "buckets not cumulative: %r" % buckets)
        self.assertEqual(counts[-1], count[0], "+Inf bucket != _count")
        return buckets, total[0], count[0]

    def test_histograms(self):
        for _ in range(3):
            self.assertOk(self.srv.batch([track(mid=new_id()) for _ in range(5)]), accepted=5)
        self.assertEqual(self.srv.post("/v1/batch", {"batch": []}, key="wrong").status, 401)
        self.assertEqual(self.srv.get("/nowhere").status, 404)
        self.assertEqual(self.srv.get("/healthz").status, 200)
        m = parse(self.srv.metrics().body.decode())
        name = "ingestd_request_duration_seconds"
        _, total, count = self.series(m, name, route="/v1/batch", status="2xx")
        self.assertEqual(count, 3)
        self.assertGreater(total, 0)
        self.assertLess(total, 60)  # seconds, not ms or ns
        self.assertEqual(self.series(m, name, route="/v1/batch", status="4xx")[2], 1)
        self.assertEqual(self.series(m, name, route="other", status="4xx")[2], 1)
        self.assertGreaterEqual(self.series(m, name, route="/healthz", status="2xx")[2], 1)
        # Only what happened has series: nothing was ever answered 5xx.
        self.assertFalse([l for n, l, _ in m if n.startswith(name) and l.get("status") == "5xx"])

        value = {n: v for n, l, v in m if not l}
        _, fsync_sum, fsyncs = self.series(m, "ingestd_fsync_duration_seconds")
        self.assertEqual(fsyncs, value["ingestd_fsyncs_total"])
        self.assertGreaterEqual(fsyncs, 1)
        self.assertAlmostEqual(fsync_sum, value["ingestd_fsync_seconds_total"], delta=1e-6)
        buckets, events, batches = self.series(m, "ingestd_commit_batch_events")
        self.assertEqual(batches, value["ingestd_commit_batches_total"])
        self.assertEqual(events, value["ingestd_commit_events_total"])
        self.assertEqual(events, 15)
        # Batches of 5 events (or several requests together): none in the le="1" bucket.
        self.assertEqual(dict(buckets)["1"], 0)

        # Duplicate ages: one sample per duplicate, on the 1 s .. 28 d ladder.
        name = "ingestd_duplicate_age_seconds"
        self.assertEqual(self.series(m, name)[2], 0)
        ids = [new_id() for _ in range(4)]
        self.assertOk(self.srv.batch([track(mid=i) for i in ids]), accepted=4)
        self.assertOk(self.srv.batch([track(mid=i) for i in ids[:3]]), accepted=0)
        m = parse(self.srv.metrics().body.decode())
        value = {n: v for n, l, v in m if not l}
        buckets, _, dups = self.series(m, name)
        self.assertEqual(dups, value["ingestd_events_duplicates_total"])
        self.assertEqual(dups, 3)
        self.assertEqual((buckets[0][0], buckets[-2][0]), ("1", "2.4192e+06"))


if __name__ == "__main__":
    unittest.main()
