"""Growing from one node to a cluster keeps the window, on a real Apache Kafka cluster.

The switch of docs/scale-out.md ("From one node to a cluster"), as tests/kafka/test_seed.py runs
it on the mock, here on three real KRaft brokers started by scripts/kafka-cluster (replication
factor 3, min.insync.replicas 2; the worker without --mirror-offsets: the brokers keep its
transactional offsets). A single node acknowledges events; `ingestd seed` runs while it serves;
more events and retries reach it; it stops and a retry is refused; the tail pass runs; an edge
takes the retries of every id the node acknowledged and new ids. The output topic, read
read_committed, must hold every new id exactly once and none of the node's ids. With
SEED_SKIP=1 (no seed passes) the retries reach the output and the test fails.

Needs `scripts/kafka-cluster install` done once (the test starts and stops its own cluster).
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import BIN, Server, send_ids  # noqa: E402
from test_seed import SwitchRig, switch  # noqa: E402

SCRIPT = os.path.join(HERE, "..", "..", "scripts", "kafka-cluster")


class RealCluster:
    """Three brokers in a temporary dir; `bootstrap` as the rig's helpers want it."""

    def __init__(self, tmp):
        self.dir = os.path.join(tmp, "kafka")
        r = subprocess.run([SCRIPT, "start", self.dir], capture_output=True, text=True,
                           timeout=300)
        if r.returncode != 0:
            raise AssertionError("kafka-cluster start: %s%s" % (r.stdout, r.stderr))
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("BOOTSTRAP ")]
        if not lines:
            raise AssertionError("kafka-cluster start printed no BOOTSTRAP line: %r" % r.stdout)
        self.bootstrap = lines[-1].split()[1]

    def create_topic(self, name, partitions):
        r = subprocess.run([SCRIPT, "create-topic", self.dir, name, str(partitions)],
                           capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr

    def stop(self):
        subprocess.run([SCRIPT, "stop", self.dir], capture_output=True, timeout=120)


def installed():
    home = os.environ.get("INGESTD_KAFKA_HOME") or os.path.expanduser(
        "~/.cache/ingestd/kafka-4.4.0")
    return os.path.exists(os.path.join(home, "installed"))


@unittest.skipUnless(installed(), "run scripts/kafka-cluster install first")
class SeedRealTest(SwitchRig):
    names = ("w1", "w2")  # two workers share the 4 raw partitions
    mirror = False  # the brokers keep the transactional offsets

    @classmethod
    def setUpClass(cls):
        cls.ctmp = tempfile.mkdtemp(prefix="ingestd-realseed-")
        cls.cluster = RealCluster(cls.ctmp)
        cls.cluster.create_topic("raw", 4)
        cls.cluster.create_topic("out", 4)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()
        shutil.rmtree(cls.ctmp, ignore_errors=True)

    def setUp(self):
        super().setUp()
        self.tmp = tempfile.mkdtemp(prefix="ingestd-realseed-", dir=self.ctmp)

    def test_switch_keeps_the_window(self):
        workers = switch(self, self.tmp, self.cluster.bootstrap, self.start_worker,
                         self.consume_out)
        seeded = sum(w.stats()["events"]["seeded"] for w in workers)
        dups = sum(w.stats()["events"]["duplicates"] for w in workers)
        self.assertEqual((seeded, dups), (400, 420))

    def test_seed_needs_the_raw_topic(self):
        """A real cluster creates no topic on first use: seeding into a missing one fails."""
        node = Server(keys=["k_web:web"], data_dir=os.path.join(self.tmp, "node"))
        self.servers.append(node)
        node.start()
        send_ids(node, ["a", "b", "c"], "k_web")
        data = node.data_dir
        r = subprocess.run([BIN, "seed", "--data", data, "--kafka-brokers",
                            self.cluster.bootstrap, "--raw-topic", "nosuch"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("it must exist before seeding", r.stderr)


if __name__ == "__main__":
    unittest.main()
