"""Growing from one node to a cluster keeps the window, on a real Apache Kafka cluster.

The switch of docs/scale-out.md ("From one node to a cluster"), as tests/kafka/test_seed.py runs
it on the mock, here on the module's real 3-node cluster (tests/kafka/realcluster.py:
replication factor 3, min.insync.replicas 2; workers with the documented defaults, no
--mirror-offsets: the brokers keep the transactional offsets). A single node acknowledges
events; two workers start; `ingestd seed` runs while the node serves; more events and retries
reach the node; it stops and a retry is refused; the tail pass runs; an edge takes the retries
of every id the node acknowledged and new ids. The output topic, read read_committed, must
hold every new id exactly once and none of the node's ids. With SEED_SKIP=1 (no seed passes)
the retries reach the output and the test fails.
"""

import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import BIN, Server, send_ids  # noqa: E402
from realcluster import RealTestCase, RealWorker, start_module_cluster  # noqa: E402
from test_seed import KEYS, SwitchRig, switch  # noqa: E402

RAW, OUT = "seed-raw", "seed-out"


def setUpModule():
    c = start_module_cluster()
    c.create_topic(RAW, SwitchRig.partitions)
    c.create_topic(OUT, SwitchRig.partitions)


class SeedRealTest(SwitchRig, RealTestCase):
    names = ("w1", "w2")  # two workers share the raw partitions

    def new_worker(self, name):
        return RealWorker(self.cluster, os.path.join(self.tmp, name), RAW, OUT)

    def read_out(self):
        return self.cluster.consume(OUT)

    def test_switch_keeps_the_window(self):
        workers = switch(self, self.tmp, self.cluster.bootstrap, self.start_worker,
                         self.consume_out, raw=RAW)
        if os.environ.get("SEED_SKIP") != "1":
            seeded = sum(w.stats()["events"]["seeded"] for w in workers)
            dups = sum(w.stats()["events"]["duplicates"] for w in workers)
            self.assertEqual((seeded, dups), (400, 420))
        for w in workers:
            w.stop()

    def test_seed_needs_the_raw_topic(self):
        """A real cluster creates no topic on first use: seeding into a missing one fails, at
        the first pass, before anything is read."""
        node = Server(keys=KEYS, data_dir=os.path.join(self.tmp, "node"))
        self.servers.append(node)
        node.start()
        send_ids(node, ["a", "b", "c"], "k_web")
        r = subprocess.run([BIN, "seed", "--data", node.data_dir, "--kafka-brokers",
                            self.cluster.bootstrap, "--raw-topic", "nosuch"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("it must exist before seeding", r.stderr)
        node.stop()


if __name__ == "__main__":
    unittest.main()
