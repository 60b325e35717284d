"""Growing from one node to a cluster keeps the window: `ingestd seed` and the switch procedure.

The procedure of docs/scale-out.md ("From one node to a cluster"), run for real: a single
`ingestd serve` acknowledges events; a worker starts; `ingestd seed` carries the node's log into
the raw topic while the node still serves; more events and retries reach the node; the node
stops (a client's retry to it is refused); `ingestd seed --from-offset N` carries the tail; an
edge takes the traffic, where the clients retry every id the node acknowledged and send new
ones. The output topic (read_committed) must hold every new id exactly once and none of the ids
the node acknowledged. Without the seed passes (SEED_SKIP=1, for showing the test's teeth) the
retries reach the output and the test fails.

Here on librdkafka's mock cluster (the rig of test_worker.py); tests/kafka/test_real_seed.py
runs the same switch on a real Apache Kafka cluster.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import BIN, Server, deadline_wait, send_ids  # noqa: E402
from test_worker import Mock, Worker, consume  # noqa: E402

KEYS = ["k_web:web"]
WAIT = 60.0


def seed(bootstrap, data_dir, from_offset=None, kafka_opts=(), raw="raw"):
    """Runs `ingestd seed`; returns its JSON summary line."""
    argv = [BIN, "seed", "--data", data_dir, "--kafka-brokers", bootstrap, "--raw-topic", raw]
    if from_offset is not None:
        argv += ["--from-offset", str(from_offset)]
    for o in kafka_opts:
        argv += ["--kafka-opt", o]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, "ingestd seed exit %d:\n%s" % (r.returncode, r.stderr)
    return json.loads(r.stdout)


def refused(port):
    """Whether a connection to the (stopped) node's port is refused, as a client's retry is."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return False
    except ConnectionRefusedError:
        return True


class Retrier(threading.Thread):
    """A client retrying acknowledged ids at the node until the node refuses it (the node is
    being stopped): each round a whole batch, which the node answers as duplicates."""

    def __init__(self, node, ids):
        super().__init__(daemon=True)
        self.node, self.ids = node, ids
        self.answered = self.refused = 0
        self.go = threading.Event()

    def run(self):
        while True:
            try:
                r = self.node.batch([{"type": "track", "userId": "u", "event": "Retry",
                                      "messageId": m} for m in self.ids], key="k_web")
                if r.status == 200:
                    self.answered += 1
                    self.go.set()
            except OSError:
                self.refused += 1
                self.go.set()
                return


def switch(test, tmp, bootstrap, start_worker, consume_out, raw="raw", n_old=300, n_tail=100,
           n_new=100):
    """The documented procedure, end to end, into the topic `raw`; asserts on the output topic.
    start_worker() starts the workers and waits until they are ready; consume_out() returns the
    output topic's records (read_committed) once the workers are done with every raw record;
    both are the rig's (SwitchRig)."""
    skip = os.environ.get("SEED_SKIP") == "1"
    node = Server(keys=KEYS, data_dir=os.path.join(tmp, "node"))
    test.servers.append(node)
    node.start()
    old = ["old-%05d" % i for i in range(n_old)]
    tail = ["tail-%05d" % i for i in range(n_tail)]
    new = ["new-%05d" % i for i in range(n_new)]
    test.assertEqual(send_ids(node, old, "k_web"), (n_old, 0))

    # 1. topics exist (the rig's), workers run; 2. the first pass while the node serves
    workers = start_worker()
    first = {"seeded": 0, "next_offset": None} if skip else seed(bootstrap, node.data_dir, raw=raw)
    if not skip:
        test.assertEqual((first["seeded"], first["from_offset"], first["next_offset"]),
                         (n_old, 0, n_old))
    # traffic goes on at the node: new ids (acknowledged after the first pass) and retries
    test.assertEqual(send_ids(node, tail, "k_web"), (n_tail, 0))
    retrier = Retrier(node, old[:50] + tail[:50])
    retrier.start()
    test.assertTrue(retrier.go.wait(WAIT), "the retrier got no answer from the node")
    # 3. stop the node; clients' requests now fail (refused) and are retried later
    port = node.port
    node.stop()
    retrier.join(WAIT)
    test.assertGreater(retrier.answered, 0)
    test.assertEqual(retrier.refused, 1)
    test.assertTrue(refused(port))
    # 4. the tail pass
    if not skip:
        second = seed(bootstrap, node.data_dir, from_offset=first["next_offset"], raw=raw)
        test.assertEqual((second["seeded"], second["from_offset"], second["next_offset"]),
                         (n_tail, n_old, n_old + n_tail))
        again = seed(bootstrap, node.data_dir, from_offset=second["next_offset"], raw=raw)
        test.assertEqual(again["seeded"], 0)
    # 5. the edge takes the traffic: the clients retry everything the node acknowledged
    edge = Server(keys=KEYS, data_dir=os.path.join(tmp, "edge"),
                  args=["--role", "edge", "--kafka-brokers", bootstrap, "--raw-topic", raw])
    test.servers.append(edge)
    edge.start()
    test.assertEqual(send_ids(edge, old + tail + new, "k_web")[0], n_old + n_tail + n_new)
    test.assertEqual(send_ids(edge, new[:10] + old[:10], "k_web")[0], 20)

    seeded = 0 if skip else n_old + n_tail
    raw_total = seeded + n_old + n_tail + n_new + 20
    out = consume_out(workers, raw_total)
    ids = [r["messageId"] for r in out]
    counts = {m: ids.count(m) for m in set(ids)}
    leaked = sorted(m for m in counts if not m.startswith("new-"))
    test.assertEqual(leaked, [], "ids the node acknowledged reached the output: %d of them, "
                     "e.g. %s" % (len(leaked), leaked[:5]))
    test.assertEqual(sorted(counts), sorted(new))
    test.assertEqual([m for m, c in counts.items() if c != 1], [])
    return workers


class SwitchRig:
    """What the mock and the real-cluster tests share (a mixin for their TestCase): workers
    from self.new_worker(name), every raw partition owned before seeding, and the output read
    once the workers caught up. The TestCase provides self.workers, self.cluster and
    self.read_out()."""
    names = ("w1",)  # the workers' data dirs
    partitions = 4  # of the raw topic

    def start_worker(self):
        out = []
        for name in self.names:
            w = self.new_worker(name)
            self.workers.append(w)
            w.start()
            out.append(w)
        for w in out:
            w.wait_ready()
        # every raw partition has its owner before the first seed record is produced
        deadline_wait(lambda: all(w.stats()["partitions"] for w in out) and
                      sum(len(w.stats()["partitions"]) for w in out) == self.partitions, WAIT,
                      "the raw partitions assigned", interval=0.2)
        return out

    def consume_out(self, workers, raw_total):
        deadline_wait(lambda: sum(w.stats()["events"]["consumed"] for w in workers) >= raw_total
                      and all(p["lag"] == 0 for w in workers for p in w.stats()["partitions"]),
                      WAIT, "the workers consumed %d raw records" % raw_total, interval=0.2)
        return self.read_out()


class SeedMockTest(SwitchRig, unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ingestd-seed-")
        self.cluster = Mock(["raw:4", "out:4"])
        self.servers, self.workers = [], []

    def tearDown(self):
        for p in self.servers + self.workers:
            p.cleanup()
        self.cluster.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def new_worker(self, name):
        return Worker(self.cluster, os.path.join(self.tmp, name))

    def read_out(self):
        return consume(self.cluster)

    def test_switch_keeps_the_window(self):
        workers = switch(self, self.tmp, self.cluster.bootstrap, self.start_worker,
                         self.consume_out)
        ev = workers[0].stats()["events"]
        if os.environ.get("SEED_SKIP") != "1":
            self.assertEqual(ev["seeded"], 400)
            self.assertEqual(ev["duplicates"], 420)
        status, metrics = workers[0].get("/metrics")
        self.assertIn('ingestd_worker_events_total{outcome="seeded"}', metrics)

    def crash_while_seeding(self, point):
        """The worker SIGKILLed at `point` of its second transaction of seed records, then
        restarted: the repair (kafka-committed) and the re-read of an aborted transaction
        (produced) insert the seeds' keys and produce none of them."""
        node = Server(keys=KEYS, data_dir=os.path.join(self.tmp, "node"))
        self.servers.append(node)
        node.start()
        old, new = ["old-%05d" % i for i in range(300)], ["new-%05d" % i for i in range(50)]
        send_ids(node, old, "k_web")
        node.stop()
        w = Worker(self.cluster, os.path.join(self.tmp, "w1"), args=["--max-batch", "40"],
                   extra_env={"INGESTD_WORKER_CRASH_AT": "%s:2" % point})
        self.workers.append(w)
        w.start()
        w.wait_ready()
        self.assertEqual(seed(self.cluster.bootstrap, node.data_dir)["seeded"], 300)
        deadline_wait(lambda: w.proc.poll() is not None, WAIT, "the crash at %s" % point)
        self.assertEqual(w.proc.returncode, -signal.SIGKILL, w.tail())
        w.log.close()
        w2 = Worker(self.cluster, os.path.join(self.tmp, "w1"), args=["--max-batch", "40"])
        self.workers.append(w2)
        w2.start()
        w2.wait_ready()
        edge = Server(keys=KEYS, data_dir=os.path.join(self.tmp, "edge"),
                      args=["--role", "edge", "--kafka-brokers", self.cluster.bootstrap,
                            "--raw-topic", "raw"])
        self.servers.append(edge)
        edge.start()
        send_ids(edge, old + new, "k_web")
        deadline_wait(lambda: w2.stats()["events"]["produced"] >= len(new) and
                      w2.stats()["events"]["duplicates"] >= len(old), WAIT,
                      "the retries dropped and the new ids produced", interval=0.2)
        ids = [r["messageId"] for r in consume(self.cluster)]
        self.assertEqual(sorted(ids), sorted(new))
        return w2

    def test_worker_killed_between_kafka_and_store_commit_of_seeds(self):
        w2 = self.crash_while_seeding("kafka-committed")
        with open(w2.log_path) as f:
            self.assertIn("repairing (keys only)", f.read())
        self.assertGreater(w2.stats()["events"]["repaired"], 0)

    def test_worker_killed_inside_a_transaction_of_seeds(self):
        w2 = self.crash_while_seeding("produced")
        self.assertGreater(w2.stats()["events"]["seeded"], 0)

    def test_seed_flags(self):
        """Usage errors, an empty node, and a pass past the acknowledged end. (A missing raw topic
        is tested on the real cluster: the mock creates topics on first use.)"""
        r = subprocess.run([BIN, "seed", "--data", self.tmp], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--kafka-brokers and --raw-topic are required", r.stderr)
        empty = os.path.join(self.tmp, "empty")
        os.mkdir(empty)
        self.assertEqual(seed(self.cluster.bootstrap, empty),
                         {"seeded": 0, "skipped": 0, "from_offset": 0, "next_offset": 0})
        node = Server(keys=KEYS, data_dir=os.path.join(self.tmp, "node"))
        self.servers.append(node)
        node.start()
        send_ids(node, ["a", "b", "c"], "k_web")
        r = subprocess.run([BIN, "seed", "--data", node.data_dir, "--kafka-brokers",
                            self.cluster.bootstrap, "--raw-topic", "raw", "--from-offset", "9"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("past the acknowledged end of the log (3)", r.stderr)


if __name__ == "__main__":
    unittest.main()
