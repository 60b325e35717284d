"""Records deleted before the worker processed them are never skipped silently, on a real Kafka.

Real processes only: a 3-node Apache Kafka 4 in KRaft mode (scripts/kafka-cluster,
tests/kafka/realcluster.py), the real `ingestd worker`, and tests/kafka/kcat_lite.c, which
produces raw events as an edge does, deletes records with the Admin API's DeleteRecords (what
retention does to old segments, but at once and to an exact offset) and reads topics
read_committed.

Each case: a worker processes a first batch and is stopped (SIGTERM); a second batch is produced
while it is away, and the records of one partition below an offset inside that batch are
deleted; the worker is started again on its data dir (a static member back within the session
timeout gets its partitions back). Then (docs/scale-out.md, "Records deleted before they were
processed"):
  - stop (the default): an ERROR names the partition and the range lost, /metrics and /stats
    count it, the partition is stopped while the others' events of the second batch reach the
    output, /healthz answers 503 and /stats `ready` is false; POST /admin/partitions/P/resume
    moves it to the log start, counts the offsets skipped, and the rest of its events follow;
  - --on-records-lost continue: the same ERROR and counts, the worker stays ready and goes on;
  - a repair below the log start (the partition's store deleted, its keys re-read from the raw
    topic up to the group's committed offset): the keys that cannot be re-read are a window
    loss, said in an ERROR and counted as kind="keys"; the partition is not stopped.
Before this change the worker's consumer reset such a position to the log start with a
librdkafka WARN only, and these tests fail on their first assertion.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import deadline_wait  # noqa: E402
from realcluster import RealWorker, start_module_cluster  # noqa: E402
from test_edge import partition_of  # noqa: E402
from test_worker import KCAT, event  # noqa: E402

PARTITIONS = 4
LOST = 1          # the partition whose records are deleted
TOKEN = "admin-secret"
PER_BATCH = 200   # events per batch, over every partition
WAIT = 90.0       # a first join on a real broker takes a few seconds; bounded anyway

CLUSTER = None


def setUpModule():
    global CLUSTER
    CLUSTER = start_module_cluster()


def produce(topic, events):
    now = int(time.time() * 1000)
    lines = "".join("%s\t%s\t%d\t%d\t%s\n" % (s, m, now, now, json.dumps(e, sort_keys=True))
                    for s, m, e in events)
    r = subprocess.run([KCAT, "produce", "--brokers", CLUSTER.bootstrap, "--topic", topic],
                       input=lines, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "produced %d" % len(events), r.stdout


def delete_records(topic, partition, before):
    r = subprocess.run([KCAT, "delete-records", "--brokers", CLUSTER.bootstrap, "--topic", topic,
                        "--partition", str(partition), "--before", str(before)],
                       capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "low %d" % before, r.stdout


def batch(prefix, n=PER_BATCH):
    now = int(time.time() * 1000)
    return [("web", "%s-%05d" % (prefix, i), event("web", "%s-%05d" % (prefix, i), now))
            for i in range(n)]


def ids(recs):
    return {r["messageId"] for r in recs}


def log_text(w):
    with open(w.log_path) as f:
        return f.read()


class RecordsLostTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ingestd-kafka-lost-")
        self.workers = []

    def tearDown(self):
        for w in self.workers:
            w.cleanup()
        if not os.environ.get("INGESTD_TEST_KEEP"):
            shutil.rmtree(self.tmp, ignore_errors=True)

    def topics(self, name):
        raw, out = "raw-" + name, "out-" + name
        CLUSTER.create_topic(raw, PARTITIONS)
        CLUSTER.create_topic(out, PARTITIONS)
        return raw, out

    def start(self, raw, out, args=()):
        w = RealWorker(CLUSTER, os.path.join(self.tmp, "w1"), raw, out, group="g-" + raw,
                       args=["--admin-token", TOKEN] + list(args))
        self.workers.append(w)
        return w.start()

    def wait_output(self, out, want, what):
        """Until every messageId of `want` is in the output topic; returns the records."""
        state = {}

        def done():
            state["recs"] = CLUSTER.consume(out)
            return want <= ids(state["recs"])
        deadline_wait(done, WAIT, what, interval=1.0)
        return state["recs"]

    def first_round(self, raw, out, args=()):
        """Batch a processed, worker stopped, batch b produced, records of LOST deleted below
        an offset inside b. Returns (worker, b, the ids of b in LOST by offset, deleted_from,
        deleted_to)."""
        w = self.start(raw, out, args)
        a = batch("a")
        produce(raw, a)
        self.wait_output(out, {m for _, m, _ in a}, "the first batch in the output")
        w.stop()
        b = batch("b")
        produce(raw, b)
        in_lost = sorted((r["offset"], r["messageId"]) for r in CLUSTER.consume(raw)
                         if r["partition"] == LOST and r["messageId"].startswith("b-"))
        self.assertGreater(len(in_lost), 10, "the second batch must reach partition %d" % LOST)
        start = in_lost[0][0]
        cut = in_lost[len(in_lost) // 2][0]
        delete_records(raw, LOST, cut)
        return w, b, in_lost, start, cut

    def metric(self, w, name, **labels):
        status, body = w.get("/metrics")
        self.assertEqual(status, 200)
        want = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
        for line in body.splitlines():
            m = re.match(r"^ingestd_%s(\{[^}]*\})? (\S+)$" % name, line)
            if m and ",".join(sorted((m.group(1) or "{}")[1:-1].split(","))).strip(",") == want:
                return float(m.group(2))
        return None

    def post(self, w, path, token=TOKEN):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (w.port, path), data=b"",
                                     method="POST",
                                     headers={"Authorization": "Bearer " + token} if token else {})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read().decode())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read().decode())

    def part_stats(self, w, p):
        return [s for s in w.stats()["partitions"] if s["partition"] == p][0]

    def test_stop_then_resume(self):
        raw, out = self.topics("stop")
        w, b, in_lost, start, cut = self.first_round(raw, out)
        w.start()
        line = "partition %d of %s: records [%d, %d) were deleted" % (LOST, raw, start, cut)
        deadline_wait(lambda: line in log_text(w), WAIT,
                      "the ERROR line naming the partition and the range (%s)" % line,
                      interval=0.2)
        for ln in log_text(w).splitlines():
            if line in ln:
                self.assertIn("ERROR", ln)
                self.assertIn("%d offset(s) lost" % (cut - start), ln)
        # The others go on: every event of b outside LOST reaches the output.
        others = {m for _, m, _ in b if partition_of("web", m, PARTITIONS) != LOST}
        recs = self.wait_output(out, others, "the other partitions' events of the second batch")
        self.assertFalse(ids(recs) & {m for _, m in in_lost},
                         "a stopped partition produced events")
        status, body = w.get("/healthz")
        self.assertEqual(status, 503, body)
        self.assertIn("stopped", body)
        st = w.stats()
        self.assertFalse(st["ready"])
        self.assertIn("stopped", st["not_ready_reason"])
        self.assertEqual(self.part_stats(w, LOST)["stopped"]["reason"], "records deleted")
        self.assertEqual(self.part_stats(w, LOST)["stopped"]["from"], start)
        self.assertEqual(self.part_stats(w, LOST)["stopped"]["to"], cut)
        self.assertEqual([s["partition"] for s in st["records_lost"]["stopped"]], [LOST])
        for p in range(PARTITIONS):
            if p != LOST:
                self.assertIsNone(self.part_stats(w, p)["stopped"])
        self.assertEqual(self.metric(w, "worker_out_of_range_total", partition=str(LOST)), 1)
        self.assertEqual(self.metric(w, "worker_partitions_stopped"), 1)
        self.assertEqual(self.metric(w, "worker_ready"), 0)
        # Resuming: the admin token is required; a partition not stopped is a 409.
        self.assertEqual(self.post(w, "/admin/partitions/%d/resume" % LOST, token="bad")[0], 401)
        other = (LOST + 1) % PARTITIONS
        self.assertEqual(self.post(w, "/admin/partitions/%d/resume" % other),
                         (409, {"partition": other, "status": "not_stopped"}))
        status, body = self.post(w, "/admin/partitions/%d/resume" % LOST)
        self.assertEqual((status, body["status"], body["skipped_from"], body["resumed_at"],
                          body["offsets_skipped"]), (200, "resumed", start, cut, cut - start))
        w.wait_ready()
        kept = {m for o, m in in_lost if o >= cut}
        recs = self.wait_output(out, kept, "the resumed partition's remaining events")
        self.assertFalse(ids(recs) & {m for o, m in in_lost if o < cut},
                         "deleted records cannot have been produced")
        self.assertEqual(self.metric(w, "worker_offsets_lost_total", partition=str(LOST),
                                     kind="records"), cut - start)
        self.assertEqual(self.metric(w, "worker_partitions_stopped"), 0)
        st = w.stats()
        self.assertTrue(st["ready"])
        self.assertIsNone(st["not_ready_reason"])
        self.assertEqual(st["records_lost"]["offsets_records"], cut - start)
        w.stop()

    def test_continue(self):
        raw, out = self.topics("continue")
        w, b, in_lost, start, cut = self.first_round(raw, out, ["--on-records-lost", "continue"])
        w.start()
        kept = {m for _, m, _ in b if partition_of("web", m, PARTITIONS) != LOST}
        kept |= {m for o, m in in_lost if o >= cut}
        recs = self.wait_output(out, kept, "every retained event of the second batch")
        self.assertFalse(ids(recs) & {m for o, m in in_lost if o < cut})
        log = log_text(w)
        self.assertRegex(log, r"ERROR.*partition %d of %s: records \[%d, %d\) were deleted.*"
                         r"going on at the log start" % (LOST, raw, start, cut))
        self.assertEqual(w.get("/healthz")[0], 200)
        self.assertEqual(self.metric(w, "worker_offsets_lost_total", partition=str(LOST),
                                     kind="records"), cut - start)
        self.assertEqual(self.metric(w, "worker_out_of_range_total", partition=str(LOST)), 1)
        self.assertIsNone(self.part_stats(w, LOST)["stopped"])
        w.stop()

    def test_repair_below_log_start_is_a_window_loss(self):
        raw, out = self.topics("repair")
        w = self.start(raw, out)
        a = batch("a")
        produce(raw, a)
        self.wait_output(out, {m for _, m, _ in a}, "the first batch in the output")
        w.stop()
        in_lost = sorted(r["offset"] for r in CLUSTER.consume(raw) if r["partition"] == LOST)
        cut = in_lost[len(in_lost) // 2]
        delete_records(raw, LOST, cut)
        # The operator deletes the partition's store (docs/scale-out.md, failure table): the
        # next assignment repairs it from the raw topic, which no longer holds [0, cut).
        shutil.rmtree(os.path.join(w.data_dir, "partitions", "%s-%d" % (raw, LOST)))
        w.start()
        w.wait_ready()
        line = ("partition %d of %s: offsets [0, %d) were deleted before this worker re-read "
                "their keys" % (LOST, raw, cut))
        deadline_wait(lambda: line in log_text(w), WAIT, line, interval=0.2)
        log = log_text(w)
        self.assertRegex(log, r"ERROR.*%s.*keys of the window are lost" % re.escape(line))
        self.assertEqual(self.metric(w, "worker_offsets_lost_total", partition=str(LOST),
                                     kind="keys"), cut)
        self.assertIsNone(self.part_stats(w, LOST)["stopped"])
        # The keys it could re-read are back: a retry of a retained event is a duplicate.
        deadline_wait(lambda: self.part_stats(w, LOST)["keys"] == len(in_lost) - in_lost.index(cut),
                      WAIT, "the repaired keys", interval=0.2)
        w.stop()


if __name__ == "__main__":
    unittest.main()
