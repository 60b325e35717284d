"""GET /stats and GET /metrics after known traffic; --window and --max-keys visible there."""

import re
import time
import unittest

from harness import Server, ServerTestCase, deadline_wait, new_id, track

STATS_FIELDS = {
    "dedupe": ["window_seconds", "effective_window_seconds", "keys", "max_keys", "evicted_age",
               "evicted_size", "store_map_bytes", "store_used_bytes"],
    "events": ["accepted", "duplicates", "rejected"],
    "requests": ["total", "by_status"],
    "log": ["first_offset", "next_offset", "bytes", "segments"],
    "commit": ["batches", "events", "avg_batch_events", "last_batch_events", "max_batch_events",
               "last_batch_requests", "failures", "queue_events", "fsyncs", "fsync_ms_last",
               "fsync_ms_avg", "fsync_ms_max", "map_grows"],
    "recovery": ["replayed_records", "truncated_bytes"],
}

METRICS = ["events_accepted_total", "events_duplicates_total", "events_rejected_total",
           "requests_total", "dedupe_keys", "dedupe_window_seconds",
           "dedupe_effective_window_seconds", "dedupe_max_keys", "dedupe_evicted_total",
           "commit_batches_total", "commit_events_total", "commit_failures_total",
           "commit_queue_events", "fsyncs_total", "fsync_seconds_total", "fsync_seconds_max",
           "log_bytes", "log_segments", "log_first_offset", "log_next_offset",
           "store_map_bytes", "store_used_bytes", "uptime_seconds"]

SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)(\s+\d+)?$')


def parse_metrics(text):
    """Prometheus text -> ({name: {labels: value}}, {name: help}, {name: type})."""
    samples, helps, types = {}, {}, {}
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("# HELP "):
            name, _, h = line[7:].partition(" ")
            helps[name] = h
        elif line.startswith("# TYPE "):
            name, _, t = line[7:].partition(" ")
            types[name] = t.strip()
        elif line.startswith("#"):
            continue
        else:
            m = SAMPLE_RE.match(line)
            if not m:
                raise AssertionError("bad metrics line: %r" % line)
            samples.setdefault(m.group(1), {})[m.group(2) or ""] = float(m.group(3))
    return samples, helps, types


class Stats(ServerTestCase):
    ARGS = ("--window", "90s", "--max-keys", "1000")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # Known traffic on a fresh server: 3 accepted + 1 rejected, then the same again
        # (3 duplicates + 1 rejected), then a 404 and a 401.
        s = cls.srv
        cls.t_start = time.monotonic()
        events = [track(mid=new_id()) for _ in range(3)] + [{"type": "track", "userId": "u"}]
        cls.r1 = s.batch(events)
        cls.r2 = s.batch(events)
        cls.r404 = s.get("/nope")
        cls.r401 = s.post("/v1/batch", {"batch": [track()]}, key="wrong")

    def test_traffic_answers(self):
        self.assertOk(self.r1, accepted=3, duplicates=0, rejected=[3])
        self.assertOk(self.r2, accepted=0, duplicates=3, rejected=[3])
        self.assertEqual(self.r404.status, 404)
        self.assertEqual(self.r401.status, 401)

    def test_stats_fields(self):
        st = self.srv.stats()
        self.assertEqual(st.get("version"), "0.1.0")
        self.assertIsInstance(st.get("uptime_seconds"), (int, float))
        for section, fields in STATS_FIELDS.items():
            self.assertIsInstance(st.get(section), dict, section)
            for f in fields:
                with self.subTest(field=section + "." + f):
                    self.assertIn(f, st[section])
        r = self.srv.get("/stats")
        self.assertTrue((r.header("Content-Type") or "").startswith("application/json"), r)

    def test_stats_values(self):
        st = self.srv.stats()
        d, ev = st["dedupe"], st["events"]
        self.assertEqual(d["window_seconds"], 90, "reflects --window 90s")
        self.assertEqual(d["max_keys"], 1000, "reflects --max-keys")
        self.assertEqual(d["keys"], 3)
        self.assertEqual((ev["accepted"], ev["duplicates"], ev["rejected"]), (3, 3, 2), ev)
        elapsed = time.monotonic() - self.t_start
        self.assertGreaterEqual(d["effective_window_seconds"], 0)
        self.assertLessEqual(d["effective_window_seconds"], elapsed + 2)
        self.assertEqual(st["log"]["next_offset"] - st["log"]["first_offset"], 3)
        self.assertGreaterEqual(st["log"]["segments"], 1)
        self.assertGreater(st["log"]["bytes"], 0)
        self.assertGreaterEqual(st["commit"]["events"], 3)
        self.assertEqual(st["commit"]["failures"], 0)
        self.assertGreaterEqual(st["commit"]["fsyncs"], 1)
        by = st["requests"]["by_status"]
        self.assertGreaterEqual(by.get("200", 0), 2)
        self.assertGreaterEqual(by.get("404", 0), 1)
        self.assertGreaterEqual(by.get("401", 0), 1)
        self.assertGreaterEqual(st["requests"]["total"], 4)

    def test_effective_window_grows(self):
        first = self.srv.stats()["dedupe"]["effective_window_seconds"]
        deadline_wait(lambda: self.srv.stats()["dedupe"]["effective_window_seconds"] > first,
                      5, "effective_window_seconds to grow with the age of the oldest key")

    def test_metrics(self):
        r = self.srv.metrics()
        ctype = r.header("Content-Type") or ""
        self.assertTrue(ctype.startswith("text/plain"), ctype)
        self.assertIn("version=0.0.4", ctype.replace(" ", ""))
        samples, helps, types = parse_metrics(r.body.decode())
        for name in METRICS:
            full = "ingestd_" + name
            with self.subTest(metric=full):
                self.assertIn(full, samples, "no sample")
                self.assertIn(full, helps, "no # HELP")
                self.assertIn(full, types, "no # TYPE")
        self.assertEqual(samples["ingestd_events_accepted_total"][""], 3)
        self.assertEqual(samples["ingestd_events_duplicates_total"][""], 3)
        # Both rejections lack an event name: by reason, with every reason of the set present.
        rej = samples["ingestd_events_rejected_total"]
        self.assertEqual(rej['{reason="missing_field"}'], 2, rej)
        self.assertEqual(sum(rej.values()), 2, rej)
        self.assertIn('{reason="invalid_json"}', rej)
        self.assertEqual(samples["ingestd_dedupe_keys"][""], 3)
        self.assertEqual(samples["ingestd_dedupe_window_seconds"][""], 90)
        self.assertEqual(samples["ingestd_dedupe_max_keys"][""], 1000)
        self.assertGreaterEqual(samples["ingestd_requests_total"].get('{code="200"}', 0), 2)
        self.assertGreaterEqual(samples["ingestd_requests_total"].get('{code="404"}', 0), 1)
        ev = samples["ingestd_dedupe_evicted_total"]
        self.assertIn('{reason="age"}', ev)
        self.assertIn('{reason="size"}', ev)
        self.assertEqual(types["ingestd_events_accepted_total"], "counter")
        self.assertEqual(types["ingestd_dedupe_keys"], "gauge")


class AgeWindow(unittest.TestCase):

    def test_age_bound_evicts_and_id_is_accepted_again(self):
        with Server(keys=("k",), args=("--window", "1s")) as srv:
            mid = new_id("aged")
            r = srv.batch([track(mid=mid)])
            self.assertEqual((r.status, r.json["accepted"]), (200, 1), r)
            self.assertEqual(srv.stats()["dedupe"]["window_seconds"], 1)
            # Eviction runs inside commits, so keep committing fresh events while waiting
            # for the age bound to pass; then the old id must count as new again.
            def aged_out():
                srv.batch([track(mid=new_id("tick"))])
                return srv.stats()["dedupe"]["evicted_age"] >= 1
            deadline_wait(aged_out, 15, "a key evicted by age", interval=0.1)
            r = srv.batch([track(mid=mid)])
            self.assertEqual((r.json["accepted"], r.json["duplicates"]), (1, 0), r)
            st = srv.stats()["dedupe"]
            self.assertLessEqual(st["effective_window_seconds"], 2, st)


class MaxKeys(unittest.TestCase):

    def test_size_bound_evicts_oldest(self):
        with Server(keys=("k",), args=("--max-keys", "5")) as srv:
            mids = [new_id("evict%d" % i) for i in range(12)]
            for m in mids:
                r = srv.batch([track(mid=m)])
                self.assertEqual((r.status, r.json.get("accepted")), (200, 1), r)
            st = srv.stats()["dedupe"]
            self.assertEqual(st["max_keys"], 5)
            self.assertLessEqual(st["keys"], 5, st)
            self.assertGreaterEqual(st["evicted_size"], 12 - 5, st)
            # The newest id is still inside the window ...
            r = srv.batch([track(mid=mids[-1])])
            self.assertEqual((r.json["accepted"], r.json["duplicates"]), (0, 1), r)
            # ... the oldest was evicted, so it is accepted again.
            r = srv.batch([track(mid=mids[0])])
            self.assertEqual((r.json["accepted"], r.json["duplicates"]), (1, 0), r)
            st = srv.stats()["dedupe"]
            self.assertLessEqual(st["keys"], 5, st)
            m = srv.metrics().body.decode()
            self.assertRegex(m, r'ingestd_dedupe_evicted_total\{reason="size"\} ([1-9]\d*)')
            # Operators hear it in the log too (once a minute at most), not only in /stats.
            line = srv.wait_for_log(r"WARN .*--max-keys 5 evicted \d+ keys younger than --window")
            self.assertIn("effective window", line)
            n = sum(1 for l in srv.log(last=10000).splitlines() if "younger than --window" in l)
            self.assertEqual(n, 1, "rate-limited to one warning a minute")


class SourceBudgets(unittest.TestCase):
    """The issue's report: with --max-keys 100, one source sent 150 new ids and another
    source's retry of an id it had sent just before was accepted a second time. Each
    source now has its own budget: the flood ages out only its own keys."""

    def test_flood_does_not_shorten_another_sources_window(self):
        with Server(keys=("calm-key:calm", "flood-key:flood"),
                    args=("--max-keys", "100")) as srv:
            calm = [track(mid=new_id("calm")) for _ in range(5)]
            self.assertEqual(srv.batch(calm, key="calm-key").json["accepted"], 5)
            flood = [track(mid=new_id("flood")) for _ in range(150)]
            for i in range(0, 150, 50):
                r = srv.batch(flood[i:i + 50], key="flood-key")
                self.assertEqual((r.status, r.json["accepted"]), (200, 50), r)
            r = srv.batch(calm, key="calm-key")
            self.assertEqual((r.json["accepted"], r.json["duplicates"]), (0, 5), r)
            # The flood's own oldest 50 are gone, its newest 100 remembered.
            r = srv.batch(flood[100:], key="flood-key")
            self.assertEqual(r.json["duplicates"], 50, r)
            r = srv.batch(flood[:10], key="flood-key")
            self.assertEqual(r.json["accepted"], 10, r)

            st = srv.stats()["dedupe"]
            by = {s["source"]: s for s in st["sources"]}
            self.assertEqual(by["calm"]["keys"], 5, st)
            self.assertEqual(by["calm"]["evicted_size"], 0, st)
            self.assertIsNone(by["calm"]["effective_window_seconds"], st)
            self.assertEqual(by["flood"]["keys"], 100, st)
            self.assertEqual(by["flood"]["evicted_size"], 60, st)
            self.assertGreaterEqual(by["flood"]["effective_window_seconds"], 0, st)
            self.assertGreater(st["carried"], 0, st)
            samples, _, types = parse_metrics(srv.metrics().body.decode())
            self.assertEqual(samples["ingestd_dedupe_source_keys"]['{source="calm"}'], 5)
            self.assertEqual(samples["ingestd_dedupe_source_keys"]['{source="flood"}'], 100)
            ev = samples["ingestd_dedupe_source_evicted_total"]
            self.assertEqual(ev['{source="flood",reason="size"}'], 60, ev)
            self.assertEqual(ev['{source="calm",reason="size"}'], 0, ev)
            self.assertIn('{source="flood"}',
                          samples["ingestd_dedupe_source_effective_window_seconds"])
            self.assertEqual(types["ingestd_dedupe_source_evicted_total"], "counter")

            # After a restart (the window is read back from the store) the same holds.
            srv.restart()
            r = srv.batch(calm, key="calm-key")
            self.assertEqual(r.json["duplicates"], 5, r)


if __name__ == "__main__":
    unittest.main(verbosity=2)
