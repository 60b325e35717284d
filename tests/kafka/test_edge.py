"""The Kafka edge role (`ingestd serve --role edge`) against librdkafka's mock cluster.

Real processes only: tests/kafka/mockcluster.c (3 brokers, the real wire protocol on loopback),
the real `ingestd serve --role edge` driven over HTTP through the integration harness (so every
answer is also checked against openapi.yaml), the real `ingestd worker`, and
tests/kafka/kcat_lite.c to read topics (read_committed). The mock's limits are in
test_worker.py's docstring and docs/scale-out.md ("Testing on the mock cluster").

Checked here: every accepted event is in the raw topic, on the partition Kafka's murmur2 of
"source NUL messageId" names (computed independently below), key and value as specified; the
same events sent through two edges and retried come out of the worker exactly once; a broker
that errs or does not answer makes the edge answer 503 with Retry-After, and the retry later is
still exactly once downstream; --partitions-before/--repartition-at routes old events with the
old partition count.
"""

import collections
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import BIN, Server, deadline_wait  # noqa: E402
from test_worker import KCAT, Mock, Worker, consume  # noqa: E402  (H8's rig, reused)

WAIT = 45.0  # every wait is bounded; each test stays under 60 s
KEYS = ["k_web:web", "k_ios:ios"]


def murmur2(data):
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), seed 0x9747b28c."""
    m, mask = 0x5bd1e995, 0xffffffff
    length = len(data)
    h = (0x9747b28c ^ length) & mask
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    rest = length % 4
    tail = data[length - rest:]
    if rest == 3:
        h ^= tail[2] << 16
    if rest >= 2:
        h ^= tail[1] << 8
    if rest >= 1:
        h ^= tail[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h


def partition_of(source, mid, count):
    key = source.encode() + b"\0" + mid.encode()
    return (murmur2(key) & 0x7fffffff) % count


def iso(ms):
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (ms % 1000)


def consume_topic(mock, topic, max_ms=20000):
    r = subprocess.run([KCAT, "consume", "--brokers", mock.bootstrap, "--topic", topic,
                        "--max-ms", str(max_ms)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


class EdgeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ingestd-edge-")
        self.servers = []
        self.workers = []
        self.mock = None

    def tearDown(self):
        for s in self.servers:
            s.cleanup()
        for w in self.workers:
            w.cleanup()
        if self.mock is not None:
            self.mock.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def edge(self, *args):
        data = os.path.join(self.tmp, "edge-data-%d" % len(self.servers))
        s = Server(keys=KEYS, data_dir=data,
                   args=["--role", "edge", "--kafka-brokers", self.mock.bootstrap,
                         "--raw-topic", "raw"] + list(args))
        self.servers.append(s)
        s.start()
        return s

    def worker(self, name="w1"):
        w = Worker(self.mock, os.path.join(self.tmp, name))
        self.workers.append(w)
        w.start()
        w.wait_ready()
        return w

    def events(self, prefix, n, ts_ms=None):
        out = []
        for i in range(n):
            e = {"type": "track", "event": "Order Completed", "userId": "u%d" % i,
                 "messageId": "%s-%04d" % (prefix, i), "properties": {"i": i}}
            if ts_ms is not None:
                e["timestamp"] = iso(ts_ms)
            out.append(e)
        return out

    def send(self, srv, key, events, expect=200, accepted=None):
        """POSTs a batch; expect None takes 200 or 503 (a retry loop), checking either."""
        r = srv.batch(events, key=key)
        if expect is None:
            self.assertIn(r.status, (200, 503), r)
        else:
            self.assertEqual(r.status, expect, r)
        if r.status == 503:
            self.assertIsNotNone(r.header("Retry-After"), r)
        if r.status == 200:
            self.assertEqual(r.json["accepted"], len(events) if accepted is None else accepted,
                             r.json)
            self.assertEqual(r.json["duplicates"], 0)
        return r

    def check_output_once(self, expected):
        """Polls the worker's output topic until it holds every expected (source, messageId);
        then each exactly once."""
        want = set(expected)
        state = {}

        def done():
            state["recs"] = consume(self.mock)
            return want <= {(r["source"], r["messageId"]) for r in state["recs"]}
        try:
            deadline_wait(done, WAIT, "%d distinct events in the output topic" % len(want),
                          interval=0.3)
        except AssertionError:
            logs = "\n".join(w.tail() for w in self.workers)
            got = {(r["source"], r["messageId"]) for r in state.get("recs", [])}
            raise AssertionError("missing %s\n%s" % (sorted(want - got)[:5], logs))
        counts = collections.Counter((r["source"], r["messageId"]) for r in state["recs"])
        self.assertEqual(set(counts), want, "the output holds exactly the accepted events")
        dup = {k: c for k, c in counts.items() if c != 1}
        self.assertEqual(dup, {}, "events in the output more than once")
        return state["recs"]

    # ---- tests ----

    def test_edge_to_raw_topic(self):
        """Each accepted event lands on the partitioner's partition with the specified key and
        value; the edge keeps no storage; /stats, /metrics and /healthz speak of the edge."""
        self.mock = Mock(["raw:4"])
        srv = self.edge()
        now = int(time.time() * 1000)
        web = self.events("w", 40, ts_ms=now - 3600 * 1000)
        ios = self.events("i", 20)
        ios.append({"type": "identify", "userId": "nomid"})  # the edge assigns its messageId
        self.send(srv, "k_web", web)
        r = self.send(srv, "k_ios", ios + [{"type": "nope", "userId": "x"}], accepted=len(ios))
        self.assertEqual(r.json["rejected"][0]["index"], len(ios))
        r = srv.post("/v1/track", {"event": "Single", "anonymousId": "a", "messageId": "one"},
                     key="k_web")
        self.assertEqual(r.status, 200, r)

        recs = consume_topic(self.mock, "raw")
        self.assertEqual(len(recs), len(web) + len(ios) + 1)
        seen = set()
        for rec in recs:
            v = rec["value"]
            self.assertIsNone(rec["input"])
            # Key: source NUL messageId, exactly the value's.
            self.assertEqual(rec["source"], v["source"])
            self.assertEqual(rec["messageId"], v["messageId"])
            self.assertEqual(rec["partition"], partition_of(rec["source"], rec["messageId"], 4),
                             rec)
            # Value: the event as single-node logs it (server fields stamped).
            self.assertIn("receivedAt", v)
            # CreateTime = receivedAt (the workers age keys out by it).
            self.assertEqual(rec["timestamp"], round(datetime.datetime.strptime(
                v["receivedAt"], "%Y-%m-%dT%H:%M:%S.%f%z").timestamp() * 1000), rec)
            seen.add((rec["source"], rec["messageId"]))
        sent = {("web", e["messageId"]) for e in web} | {("ios", e["messageId"]) for e in ios
                                                         if "messageId" in e}
        self.assertTrue(sent < seen)
        self.assertIn(("web", "one"), seen)
        self.assertEqual(len({p for p in (rec["partition"] for rec in recs)}), 4,
                         "61 keys spread over every partition")

        st = srv.stats()
        self.assertEqual(st["role"], "edge")
        self.assertEqual(st["events"]["accepted"], len(recs))
        self.assertEqual(st["events"]["duplicates"], 0)
        self.assertEqual(st["events"]["rejected"], 1)
        self.assertEqual(st["edge"]["partitions"], 4)
        self.assertEqual(st["edge"]["events"]["delivered"], len(recs))
        self.assertEqual(st["edge"]["requests"]["waiting"], 0)
        self.assertNotIn("dedupe", st)
        m = srv.metrics().body.decode()
        self.assertIn('ingestd_edge_events_total{outcome="delivered"} %d' % len(recs), m)
        self.assertEqual(srv.get("/healthz").status, 200)
        self.assertEqual(srv.get("/v1/log").status, 404)
        srv.stop()
        self.assertFalse(os.path.exists(srv.data_dir), "the edge created its --data dir")

    def test_verbose_accepted_without_offset(self):
        """?verbose=true at the edge: it neither de-duplicates nor logs, so every valid event
        is accepted without an offset (a retry too); a rejected one carries its error."""
        self.mock = Mock(["raw:2"])
        srv = self.edge()
        ev = self.events("v", 1)[0]
        body = {"batch": [ev, {"type": "nope", "userId": "x"}, ev]}
        r = srv.post("/v1/batch?verbose=true", body, key="k_web")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json["results"], [
            {"index": 0, "messageId": ev["messageId"], "status": "accepted"},
            {"index": 1, "messageId": None, "status": "rejected",
             "error": r.json["rejected"][0]["error"]},
            {"index": 2, "messageId": ev["messageId"], "status": "accepted"}])
        r = srv.post("/v1/batch", body, key="k_web")
        self.assertNotIn("results", r.json)

    def test_two_edges_retries_worker_exactly_once(self):
        """The same events through two edges, retried: the worker's output has each once."""
        self.mock = Mock(["raw:4", "out:4"])
        w = self.worker()
        a, b = self.edge(), self.edge()
        # The ios events carry a client timestamp a month old: CreateTime must still be
        # receivedAt (the worker ages keys out by it), checked through the worker's window.
        month_ago = int(time.time() * 1000) - 30 * 86400 * 1000
        web, ios = self.events("x", 150), self.events("y", 60, ts_ms=month_ago)
        self.send(a, "k_web", web[:100])
        self.send(b, "k_web", web[50:])      # overlaps 50 events of edge a
        self.send(a, "k_ios", ios)
        self.send(b, "k_ios", ios[:30])      # a client retry through the other edge
        self.send(a, "k_web", web[:10])      # and again through the first
        # The same messageId under another source is another event.
        self.send(b, "k_ios", [dict(web[0])])
        expected = ({("web", e["messageId"]) for e in web} |
                    {("ios", e["messageId"]) for e in ios} | {("ios", web[0]["messageId"])})
        self.check_output_once(expected)
        raw = consume_topic(self.mock, "raw")
        self.assertEqual(len(raw), 100 + 100 + 60 + 30 + 10 + 1, "every copy reached Kafka")
        # The stats snapshot follows the LMDB commit, which follows the Kafka one.
        deadline_wait(lambda: sum(p["keys"] for p in w.stats()["partitions"]) == len(expected),
                      WAIT, "every distinct event's key in the worker's stores")
        for p in w.stats()["partitions"]:
            self.assertLess(p["effective_window_seconds"], 600,
                            "keys aged by receivedAt, not by the client timestamp: %s" % p)
        a.stop()
        b.stop()

    def test_broker_trouble_503_then_retry_once(self):
        """Errors and a silent broker: 503 with Retry-After; the retry succeeds, once downstream."""
        self.mock = Mock(["raw:4", "out:4"])
        # librdkafka would wait longer than the edge: the edge's own timer answers the 503.
        srv = self.edge("--delivery-timeout", "2s", "--kafka-opt", "message.timeout.ms=20000")
        batch1 = self.events("e", 30)
        self.send(srv, "k_web", batch1[:10])  # warm: metadata and producer id are in place
        # A permanent error on the next produce request: the delivery fails, 503 at once.
        self.mock.cmd("errors Produce 1 TOPIC_AUTHORIZATION_FAILED")
        r = self.send(srv, "k_web", batch1[10:], expect=503)
        self.assertIsNotNone(r.header("Retry-After"))
        self.assertFalse(r.json["success"])
        # The client retries after Retry-After until it gets its 200 (right after the error
        # librdkafka refreshes the topic's metadata, and refuses sends at once meanwhile).
        deadline_wait(lambda: self.send(srv, "k_web", batch1[10:], expect=None).status == 200,
                      WAIT, "a 200 for the retried request", interval=0.5)
        # Brokers that do not answer in time: the edge gives up after --delivery-timeout.
        for broker in (1, 2, 3):
            self.mock.cmd("rtt %d 4000" % broker)
        batch2 = self.events("t", 20)
        t0 = time.monotonic()
        r = self.send(srv, "k_ios", batch2, expect=503)
        self.assertLess(time.monotonic() - t0, 15, "the wait is bounded")
        self.assertIsNotNone(r.header("Retry-After"))
        for broker in (1, 2, 3):
            self.mock.cmd("rtt %d 0" % broker)
        st = srv.stats()["edge"]
        self.assertEqual(st["requests"]["failed"], 1, st)
        self.assertEqual(st["requests"]["timed_out"], 1, st)
        # Retried until a 200 (a copy of the first try may still arrive: the worker drops it).
        deadline_wait(lambda: self.send(srv, "k_ios", batch2, expect=None).status == 200, WAIT,
                      "a 200 for the retried request", interval=0.5)
        deadline_wait(lambda: srv.stats()["edge"]["requests"]["waiting"] == 0, WAIT,
                      "no request waiting")
        self.assertEqual(srv.get("/healthz").status, 200)
        self.worker()
        expected = ({("web", e["messageId"]) for e in batch1} |
                    {("ios", e["messageId"]) for e in batch2})
        self.check_output_once(expected)
        srv.stop()

    def test_repartition_routes_old_events_with_old_count(self):
        """--partitions-before 4 --repartition-at T over an 8-partition topic."""
        self.mock = Mock(["raw:8"])
        now = int(time.time() * 1000)
        cut = now - 24 * 3600 * 1000
        srv = self.edge("--partitions-before", "4", "--repartition-at", iso(cut))
        old = self.events("old", 40, ts_ms=cut - 3600 * 1000)
        new = self.events("new", 40, ts_ms=cut + 3600 * 1000)
        none = self.events("none", 20)  # no timestamp: the current count
        self.send(srv, "k_web", old + new + none)
        want = {}
        for e in old:
            want[e["messageId"]] = partition_of("web", e["messageId"], 4)
        for e in new + none:
            want[e["messageId"]] = partition_of("web", e["messageId"], 8)
        # The test means something only if the two counts disagree for some old events.
        self.assertTrue(any(partition_of("web", e["messageId"], 4) !=
                            partition_of("web", e["messageId"], 8) for e in old))
        recs = consume_topic(self.mock, "raw")
        self.assertEqual({r["messageId"]: r["partition"] for r in recs}, want)
        st = srv.stats()["edge"]
        self.assertEqual((st["partitions"], st["partitions_before"], st["repartition_at_ms"]),
                         (8, 4, cut))
        srv.stop()

    def test_sigterm_answers_waiting_requests(self):
        """SIGTERM while a request waits for Kafka: after the drain it gets 503, exit 0."""
        self.mock = Mock(["raw:2"])
        srv = self.edge("--delivery-timeout", "60s")
        self.send(srv, "k_web", self.events("s", 2))
        for broker in (1, 2, 3):
            self.mock.cmd("rtt %d 14000" % broker)
        answer = {}

        def post():
            answer["r"] = srv.batch(self.events("late", 3), key="k_web")
        t = threading.Thread(target=post)
        t.start()
        deadline_wait(lambda: srv.stats()["edge"]["requests"]["waiting"] == 1, WAIT,
                      "the request waits for its delivery reports")
        srv.stop()  # SIGTERM; asserts exit 0 (the drain waits 10 s, then the edge answers)
        t.join(timeout=WAIT)
        self.assertFalse(t.is_alive())
        self.assertEqual(answer["r"].status, 503, answer["r"])
        self.assertIsNotNone(answer["r"].header("Retry-After"))

    def test_bad_partitions_before_exits(self):
        """More partitions before than now is a configuration error, said at start."""
        self.mock = Mock(["raw:2"])
        r = subprocess.run([BIN, "serve", "--role", "edge", "--write-key", "k",
                            "--kafka-brokers", self.mock.bootstrap, "--raw-topic", "raw",
                            "--partitions-before", "4", "--repartition-at", "1769817600000",
                            "--listen", "127.0.0.1:0"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("--partitions-before 4", r.stderr)


if __name__ == "__main__":
    unittest.main()
