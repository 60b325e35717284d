"""The Kafka worker role against librdkafka's mock cluster: exactly once across crashes and rebalances.

Real processes only: tests/kafka/mockcluster.c (rd_kafka_mock_cluster_new, 3 brokers, the real
wire protocol on loopback), the real `ingestd worker`, and tests/kafka/kcat_lite.c, which
produces raw events the way an edge does (cluster/partition.h + cluster/producer.h) and reads
the output topic with isolation.level=read_committed.

What the mock cannot do (docs/scale-out.md, "Testing on the mock cluster"): it acknowledges
transactional offset commits without storing them (so the workers run with --mirror-offsets),
and it shows records of aborted transactions to read_committed consumers. So where a
transaction was aborted (the "produced" crash point, injected errors that abort), a raw record
may appear twice in the output, both copies from the same input record (same `ingestd-input`
header); a real cluster hides the aborted copy. Everything else is asserted strictly: every
distinct (source, messageId) is in the output, and no two output records come from different
raw records of one (source, messageId).
"""

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import clean_env, deadline_wait  # noqa: E402

BUILD = os.path.join(HERE, "..", "..", "build")
BIN = os.environ.get("INGESTD_BIN") or os.path.join(BUILD, "ingestd")
MOCK = os.environ.get("KAFKA_MOCK_BIN") or os.path.join(BUILD, "tests", "kafka_mockcluster")
KCAT = os.environ.get("KCAT_LITE_BIN") or os.path.join(BUILD, "tests", "kafka_kcat_lite")

# Short group timeouts so a killed member's partitions move within seconds.
KAFKA_OPTS = ["consumer.session.timeout.ms=6000", "consumer.heartbeat.interval.ms=500",
              "consumer.topic.metadata.refresh.interval.ms=1000"]
WAIT = 45.0  # every wait below is bounded; each test stays under 60 s


class Mock:
    """The mock cluster process; commands go over its stdin, one answer line each."""

    def __init__(self, topics):
        args = [MOCK]
        for t in topics:
            args += ["--topic", t]
        # KAFKA_MOCK_LOG=FILE (with KAFKA_MOCK_DEBUG=mock, mockcluster.c): the mock's own log.
        log = os.environ.get("KAFKA_MOCK_LOG")
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=open(log, "a") if log else subprocess.DEVNULL,
                                     text=True, bufsize=1)
        line = self.proc.stdout.readline()
        if not line.startswith("BOOTSTRAP "):
            raise AssertionError("mockcluster did not start: %r" % line)
        self.bootstrap = line.split()[1]

    def cmd(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if answer != "ok":
            raise AssertionError("mockcluster %r: %s" % (line, answer))

    def close(self):
        self.proc.stdout.close()
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Worker:
    """One `ingestd worker` process on its own data dir."""

    def __init__(self, mock, data_dir, group="workers", extra_env=None, args=()):
        self.mock, self.data_dir, self.group = mock, data_dir, group
        self.extra_env, self.args = extra_env or {}, list(args)
        self.proc = None
        self.port = None

    def start(self):
        self.log_path = os.path.join(self.data_dir + ".log")
        self.log = open(self.log_path, "a")
        offset = os.path.getsize(self.log_path)
        self.proc = subprocess.Popen(self.argv() + self.args, stdout=subprocess.DEVNULL,
                                     stderr=self.log, env=clean_env(self.extra_env))

        def port():
            with open(self.log_path) as f:
                f.seek(offset)
                for line in f:
                    if "listening on http://" in line:
                        return int(line.rsplit(":", 1)[1])
            if self.proc.poll() is not None:
                raise AssertionError("worker exited %s:\n%s" % (self.proc.returncode,
                                                                self.tail()))
            return None
        self.port = deadline_wait(port, 20, "the worker's listening line")
        return self

    def argv(self):
        """The command line before self.args: the mock's topics, short timeouts and mirrored
        offsets (tests/kafka/realcluster.py's RealWorker has a real cluster's)."""
        argv = [BIN, "worker", "--kafka-brokers", self.mock.bootstrap, "--raw-topic", "raw",
                "--out-topic", "out", "--group", self.group, "--data", self.data_dir,
                "--listen", "127.0.0.1:0", "--mirror-offsets", "--log-level", "info"]
        for o in KAFKA_OPTS:
            argv += ["--kafka-opt", o]
        return argv

    def tail(self):
        with open(self.log_path) as f:
            return "".join(f.readlines()[-40:])

    def get(self, path):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.port, path),
                                        timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def stats(self):
        status, body = self.get("/stats")
        assert status == 200, body
        return json.loads(body)

    def wait_ready(self):
        deadline_wait(lambda: self.get("/healthz")[0] == 200, WAIT, "worker /healthz 200")

    def stop(self):
        """SIGTERM; a clean stop exits 0."""
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=30)
        self.log.close()
        assert rc == 0, "worker exit %s:\n%s" % (rc, self.tail())

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.log.close()

    def cleanup(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if not self.log.closed:
            self.log.close()


def event(source, mid, received_ms):
    return {"type": "track", "event": "Order Completed", "messageId": mid, "source": source,
            "receivedAt": received_ms, "properties": {"n": mid}}


def produce(mock, events):
    """Produces (source, messageId, event) tuples to `raw` as an edge would."""
    now = int(time.time() * 1000)
    lines = "".join("%s\t%s\t%d\t%d\t%s\n" % (s, m, now, now, json.dumps(e, sort_keys=True))
                    for s, m, e in events)
    r = subprocess.run([KCAT, "produce", "--brokers", mock.bootstrap, "--topic", "raw"],
                       input=lines, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "produced %d" % len(events), r.stdout


def consume(mock):
    r = subprocess.run([KCAT, "consume", "--brokers", mock.bootstrap, "--topic", "out",
                        "--max-ms", "20000"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def batch(prefix, n, sources=("web", "mobile")):
    now = int(time.time() * 1000)
    out = []
    for i in range(n):
        s = sources[i % len(sources)]
        m = "%s-%05d" % (prefix, i)
        out.append((s, m, event(s, m, now)))
    return out


class WorkerTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ingestd-kafka-")
        self.mock = Mock(["raw:4", "out:4"])
        self.workers = []

    def tearDown(self):
        for w in self.workers:
            w.cleanup()
        self.mock.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def worker(self, name="w1", **kw):
        w = Worker(self.mock, os.path.join(self.tmp, name), **kw)
        self.workers.append(w)
        return w.start()

    def wait_output(self, expected):
        """Polls the output topic until every expected (source, messageId) is in it."""
        want = set(expected)
        state = {}

        def done():
            recs = consume(self.mock)
            state["recs"] = recs
            return want <= {(r["source"], r["messageId"]) for r in recs}
        try:
            deadline_wait(done, WAIT, "%d distinct events in the output topic" % len(want),
                          interval=0.3)
        except AssertionError:
            got = {(r["source"], r["messageId"]) for r in state.get("recs", [])}
            logs = "\n".join(w.tail() for w in self.workers)
            raise AssertionError("missing %d of %d, e.g. %s\n%s" % (
                len(want - got), len(want), sorted(want - got)[:5], logs))
        return state["recs"]

    def check_once(self, recs, expected, reproduced_ok=False):
        """Exactly once; with reproduced_ok, copies of one raw record (aborted on a real cluster)."""
        by_key = collections.defaultdict(list)
        for r in recs:
            by_key[(r["source"], r["messageId"])].append(r)
        self.assertEqual(set(by_key), set(expected), "output holds exactly the distinct events")
        for k, rs in by_key.items():
            inputs = {r["input"] for r in rs}
            self.assertEqual(len(inputs), 1,
                             "%s came out of %d different raw records: a duplicate passed" %
                             (k, len(inputs)))
            if not reproduced_ok:
                self.assertEqual(len(rs), 1, "%s appears %d times" % (k, len(rs)))
            self.assertEqual(rs[0]["value"]["messageId"], k[1])
        return sum(len(rs) - 1 for rs in by_key.values())

    # ---- tests ----

    def test_two_edges_exactly_once(self):
        """The same events through two edges (and one messageId in two sources): once each."""
        w = self.worker()
        w.wait_ready()
        first = batch("a", 200)
        produce(self.mock, first)         # edge 1
        produce(self.mock, first[:120])   # edge 2 retries 120 of them
        extra = [("other", "a-00001", event("other", "a-00001", 0))]  # same id, other source
        produce(self.mock, extra + first[150:])
        expected = {(s, m) for s, m, _ in first + extra}
        recs = self.wait_output(expected)
        self.check_once(recs, expected)
        deadline_wait(lambda: w.stats()["events"]["consumed"] == 200 + 120 + 1 + 50, WAIT,
                      "every raw record consumed")
        st = w.stats()
        self.assertEqual(st["events"]["produced"], 201)
        self.assertEqual(st["events"]["duplicates"], 170)
        self.assertEqual(len(st["partitions"]), 4)
        self.assertEqual(sum(p["keys"] for p in st["partitions"]), 201)
        for p in st["partitions"]:
            self.assertEqual(p["lag"], 0)
            self.assertEqual(p["applied_offset"], p["committed_offset"])
        status, metrics = w.get("/metrics")
        self.assertEqual(status, 200)
        self.assertIn('ingestd_worker_events_total{outcome="produced"} 201', metrics)
        self.assertIn('ingestd_worker_partition_keys{partition="0"}', metrics)
        self.assertEqual(w.get("/nope")[0], 404)
        # A restart remembers: retries of old events stay out, new ones go through.
        w.stop()
        w2 = self.worker()
        produce(self.mock, first[:50] + batch("b", 30))
        expected |= {(s, m) for s, m, _ in batch("b", 30)}
        recs = self.wait_output(expected)
        deadline_wait(lambda: w2.stats()["events"]["consumed"] == 80, WAIT, "80 consumed")
        self.check_once(consume(self.mock), expected)
        w2.stop()

    def test_source_budgets(self):
        """--max-keys is per source in each partition: a flood from one source ages out only its
        own keys, so another source's retries stay duplicates."""
        w = self.worker(args=["--max-keys", "50"])
        w.wait_ready()
        calm = batch("c", 20, sources=("calm",))
        flood = batch("f", 800, sources=("flood",))
        produce(self.mock, calm)
        deadline_wait(lambda: w.stats()["events"]["consumed"] == 20, WAIT, "20 consumed")
        produce(self.mock, flood)
        deadline_wait(lambda: w.stats()["events"]["consumed"] == 820, WAIT, "820 consumed")
        produce(self.mock, calm)  # the retries, after the flood
        deadline_wait(lambda: w.stats()["events"]["consumed"] == 840, WAIT, "840 consumed")
        st = w.stats()
        self.assertEqual(st["events"]["duplicates"], 20, st["events"])
        self.assertEqual(st["events"]["produced"], 820, st["events"])
        # /stats by source, named from the records: 50 of the flood kept per partition.
        deadline_wait(lambda: {s["source"] for s in w.stats()["dedupe"]["sources"]}
                      == {"calm", "flood"}, WAIT, "both sources in /stats")
        by = {s["source"]: s for s in w.stats()["dedupe"]["sources"]}
        self.assertEqual(by["calm"]["keys"], 20, by)
        self.assertIsNone(by["calm"]["effective_window_seconds"], by)
        self.assertLessEqual(by["flood"]["keys"], 4 * 50, by)
        self.assertEqual(by["flood"]["keys"] + by["flood"]["evicted_size"], 800, by)
        self.assertIsNotNone(by["flood"]["effective_window_seconds"], by)
        self.assertIn('ingestd_dedupe_source_keys{source="calm"} 20', w.get("/metrics")[1])
        # 800 over four partitions, 50 kept in each: its oldest ones are new again.
        produce(self.mock, flood[:100])
        deadline_wait(lambda: w.stats()["events"]["consumed"] == 940, WAIT, "940 consumed")
        self.assertEqual(w.stats()["events"]["produced"], 920)
        w.stop()

    def test_generations_exactly_once(self):
        """A small young store seals each partition's keys into generations: retries of sealed
        keys stay out, across a SIGKILL and restart too."""
        args = ["--young-keys", "20", "--max-batch", "25"]
        w = self.worker(args=args)
        w.wait_ready()
        evs = batch("g", 400)
        produce(self.mock, evs)
        expected = {(s, m) for s, m, _ in evs}
        self.wait_output(expected)
        deadline_wait(lambda: w.stats()["events"]["consumed"] == 400, WAIT, "400 consumed")
        parts = w.stats()["partitions"]
        self.assertEqual(sum(p["keys"] for p in parts), 400)
        self.assertTrue(all(p["generations"] > 0 for p in parts), parts)
        self.assertGreaterEqual(sum(p["generation_keys"] for p in parts), 4 * 20, parts)
        for p in parts:
            gens = os.listdir(os.path.join(w.data_dir, "partitions", "raw-%d" % p["partition"],
                                           "gens"))
            self.assertTrue(any(g.endswith(".gen") for g in gens), gens)
        # Retries of sealed (and young) keys, beside new ones.
        fresh = batch("h", 40)
        produce(self.mock, evs[:300] + fresh)
        expected |= {(s, m) for s, m, _ in fresh}
        self.wait_output(expected)
        deadline_wait(lambda: w.stats()["events"]["consumed"] == 740, WAIT, "740 consumed")
        st = w.stats()
        self.assertEqual(st["events"]["duplicates"], 300)
        self.assertEqual(st["events"]["produced"], 440)
        self.check_once(consume(self.mock), expected)
        # SIGKILL, restart on the same data: the generations are still the window.
        w.kill()
        w2 = self.worker(args=args)
        produce(self.mock, evs[100:])
        deadline_wait(lambda: w2.stats()["events"]["consumed"] == 300, WAIT, "300 consumed")
        self.assertEqual(w2.stats()["events"]["duplicates"], 300)
        self.check_once(consume(self.mock), expected)
        w2.stop()

    def test_merges_off_the_consuming_thread(self):
        """Generations merge on the worker's merger thread while batches flow; a rebalance, a
        SIGTERM and a SIGKILL land among the merges: every event comes out exactly once, and
        the partitions keep being consumed. (A merge here takes milliseconds, so whether one is
        cut mid-write is chance; tests/unit/cluster/test_worker_merge.c cancels one for sure.)"""
        args = ["--young-keys", "5", "--max-batch", "8"]  # generations of 5 to 12 keys

        def merges(w):
            return sum(p["merges"] for p in w.stats()["partitions"])
        a = self.worker("wa", args=args)
        a.wait_ready()
        evs = batch("m", 2000)
        produce(self.mock, evs[:1000])
        deadline_wait(lambda: a.stats()["events"]["consumed"] == 1000, WAIT, "1000 consumed")
        deadline_wait(lambda: all(p["merges"] > 0 for p in a.stats()["partitions"]), WAIT,
                      "merges in every partition")
        # A second member joins while batches flow: the rebalance revokes some of a's partitions
        # in the middle of their merges and maintenance.
        produce(self.mock, evs[1000:1500] + evs[:400])
        b = self.worker("wb", args=args)
        deadline_wait(lambda: len(a.stats()["partitions"]) + len(b.stats()["partitions"]) == 4
                      and len(b.stats()["partitions"]) > 0 and b.stats()["ready"], WAIT,
                      "4 partitions split over two workers")
        produce(self.mock, evs[1500:] + evs[400:800])
        expected = {(s, m) for s, m, _ in evs}
        self.wait_output(expected)
        deadline_wait(lambda: merges(b) > 0, WAIT, "merges on the second worker too")
        self.check_once(consume(self.mock), expected)
        # SIGTERM while b merges what it rebuilt: a clean exit (stop() asserts 0), and b takes
        # every partition and goes on consuming.
        a.stop()
        fresh = batch("n", 300)
        produce(self.mock, fresh + evs[:1000])
        expected |= {(s, m) for s, m, _ in fresh}
        deadline_wait(lambda: len(b.stats()["partitions"]) == 4, WAIT,
                      "the survivor owns all 4 partitions")
        self.wait_output(expected)
        self.check_once(consume(self.mock), expected)
        # SIGKILL while batches flow, restart on the same data: still exactly once.
        more = batch("o", 300)
        produce(self.mock, more + evs[1000:])
        consumed = b.stats()["events"]["consumed"]
        deadline_wait(lambda: b.stats()["events"]["consumed"] > consumed, WAIT, "b consuming")
        b.kill()
        b2 = self.worker("wb", args=args)
        expected |= {(s, m) for s, m, _ in more}
        self.wait_output(expected)
        deadline_wait(lambda: len(b2.stats()["partitions"]) == 4 and
                      all(p["lag"] == 0 for p in b2.stats()["partitions"]), WAIT, "no lag")
        # A kill inside a transaction leaves its records visible on the mock only.
        self.check_once(consume(self.mock), expected, reproduced_ok=True)
        b2.stop()

    def crash_at(self, point, reproduced_ok):
        """SIGKILL at an exact point of the second transaction, restart, check."""
        w = self.worker(extra_env={"INGESTD_WORKER_CRASH_AT": "%s:2" % point},
                        args=["--max-batch", "40"])
        evs = batch("c", 300)
        produce(self.mock, evs + evs[:100])
        deadline_wait(lambda: w.proc.poll() is not None, WAIT, "the crash at %s" % point)
        self.assertEqual(w.proc.returncode, -signal.SIGKILL, w.tail())
        w.log.close()
        w2 = self.worker(args=["--max-batch", "40"])
        produce(self.mock, evs[200:])  # more retries after the restart
        expected = {(s, m) for s, m, _ in evs}
        self.wait_output(expected)
        deadline_wait(lambda: w2.stats()["partitions"] and
                      all(p["lag"] == 0 for p in w2.stats()["partitions"]), WAIT, "no lag")
        self.check_once(consume(self.mock), expected, reproduced_ok=reproduced_ok)
        w2.stop()
        return w2

    def test_crash_between_kafka_and_store_commit(self):
        """Kafka committed, LMDB not: the restart repairs the keys and produces nothing twice."""
        self.crash_at("kafka-committed", reproduced_ok=False)
        with open(self.workers[-1].log_path) as f:
            self.assertIn("repairing (keys only)", f.read())

    def test_crash_after_store_commit(self):
        self.crash_at("stored", reproduced_ok=False)

    def test_crash_mid_transaction(self):
        """Records produced, transaction open: a real cluster aborts them (mock: see above)."""
        self.crash_at("produced", reproduced_ok=True)

    def test_sigkill_under_load(self):
        """SIGKILL from outside while batches flow, then restart: nothing lost, no duplicate."""
        w = self.worker(args=["--max-batch", "25"])
        w.wait_ready()
        evs = batch("k", 600)
        produce(self.mock, evs[:300])
        deadline_wait(lambda: w.stats()["events"]["consumed"] >= 50, WAIT, "some progress")
        w.kill()
        produce(self.mock, evs[300:] + evs[:200])
        w2 = self.worker(args=["--max-batch", "25"])
        expected = {(s, m) for s, m, _ in evs}
        self.wait_output(expected)
        # A kill inside a transaction leaves its records visible on the mock only.
        self.check_once(consume(self.mock), expected, reproduced_ok=True)
        w2.stop()

    def test_rebalance_two_workers_one_killed(self):
        """Two members; one SIGKILLed: the other takes its partitions, repairs, stays exact."""
        a = self.worker("wa")
        b = self.worker("wb")
        deadline_wait(lambda: len(a.stats()["partitions"]) + len(b.stats()["partitions"]) == 4
                      and a.stats()["ready"] and b.stats()["ready"], WAIT,
                      "4 partitions split over two workers")
        self.assertGreater(len(b.stats()["partitions"]), 0)
        evs = batch("r", 400)
        produce(self.mock, evs[:250])
        expected1 = {(s, m) for s, m, _ in evs[:250]}
        self.wait_output(expected1)
        b.kill()
        produce(self.mock, evs[250:] + evs[:250])  # retries of everything b had seen
        deadline_wait(lambda: len(a.stats()["partitions"]) == 4, WAIT,
                      "the survivor owns all 4 partitions")
        expected = {(s, m) for s, m, _ in evs}
        self.wait_output(expected)
        deadline_wait(lambda: all(p["lag"] == 0 for p in a.stats()["partitions"]), WAIT,
                      "no lag")
        self.check_once(consume(self.mock), expected)
        self.assertGreater(a.stats()["events"]["repaired"], 0,
                           "b's partitions were rebuilt from the raw topic")
        a.stop()

    def test_fenced_consumer_replaced(self):
        """FENCED_INSTANCE_ID is fatal for a librdkafka consumer; a real cluster answers it to a
        static member whose rejoin raced a coordinator failover (kafka-real/failover). The
        worker replaces its consumer and goes on; before, it polled the dead one for good."""
        w = self.worker()
        w.wait_ready()
        evs = batch("fence", 100)
        produce(self.mock, evs[:50])
        self.wait_output({(s, m) for s, m, _ in evs[:50]})
        self.mock.cmd("errors Heartbeat 1 FENCED_INSTANCE_ID")
        produce(self.mock, evs[50:])
        expected = {(s, m) for s, m, _ in evs}
        self.check_once(self.wait_output(expected), expected)
        self.assertEqual(w.stats()["consumer_restarts"], 1)
        self.assertIn("replacing the consumer", w.tail())
        self.assertEqual(w.get("/healthz")[0], 200)
        w.stop()

    def test_injected_broker_errors(self):
        """Errors and timeouts on the transactional path and a broker outage: it recovers."""
        w = self.worker(args=["--max-batch", "30"])
        w.wait_ready()
        evs = batch("e", 300)
        produce(self.mock, evs[:100])
        self.wait_output({(s, m) for s, m, _ in evs[:100]})
        for c in ["errors Produce 3 NOT_LEADER_FOR_PARTITION REQUEST_TIMED_OUT "
                  "NOT_ENOUGH_REPLICAS",
                  "errors AddPartitionsToTxn 2 CONCURRENT_TRANSACTIONS COORDINATOR_NOT_AVAILABLE",
                  "errors TxnOffsetCommit 2 COORDINATOR_LOAD_IN_PROGRESS NOT_COORDINATOR",
                  "errors EndTxn 3 NOT_COORDINATOR COORDINATOR_NOT_AVAILABLE "
                  "CONCURRENT_TRANSACTIONS",
                  "errors OffsetCommit 1 REQUEST_TIMED_OUT"]:
            self.mock.cmd(c)
        produce(self.mock, evs[100:200] + evs[:50])
        self.mock.cmd("down 2")
        time.sleep(1.0)  # the outage's length, not synchronisation
        self.mock.cmd("up 2")
        produce(self.mock, evs[200:] + evs[150:250])
        expected = {(s, m) for s, m, _ in evs}
        self.wait_output(expected)
        st = w.stats()
        reproduced = self.check_once(consume(self.mock), expected,
                                     reproduced_ok=st["transactions"]["aborted"] > 0)
        if st["transactions"]["aborted"] == 0:
            self.assertEqual(reproduced, 0)
        # A produce error that no retry fixes: the transaction aborts, LMDB forgets the
        # batch, the consumer rewinds, and the next transaction delivers it.
        # The errors are per API for every client: inject it once the edge is done, with the
        # worker stopped, so the worker's first produce meets it.
        self.assertEqual(w.get("/healthz")[0], 200)
        w.stop()
        more = batch("f", 60)
        produce(self.mock, more + evs[:30])
        self.mock.cmd("errors Produce 1 TOPIC_AUTHORIZATION_FAILED")
        w = self.worker(args=["--max-batch", "30"])
        expected |= {(s, m) for s, m, _ in more}
        self.wait_output(expected)
        deadline_wait(lambda: w.stats()["transactions"]["aborted"] > 0, WAIT, "an aborted txn")
        self.check_once(consume(self.mock), expected, reproduced_ok=True)
        self.assertEqual(w.get("/healthz")[0], 200)
        w.stop()


if __name__ == "__main__":
    unittest.main()
