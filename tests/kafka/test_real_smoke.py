"""Debian's librdkafka 2.0.2 (the one ingestd links) against a real Kafka 4 cluster
(tests/kafka/realcluster.py): Kafka 4 removed old protocol versions (KIP-896), so every client
feature the scale-out roles use is exercised once, on the real processes:

- the edge's idempotent producer (enable.idempotence, acks=all): every accepted event is in the
  raw topic, on the partition murmur2 names;
- the worker's transactional producer: init_transactions, produce, send_offsets_to_transaction
  with the consumer's group metadata, commit_transaction; the offsets are stored in the group
  (TxnOffsetCommit: a restarted worker reads them back, unlike on the mock cluster);
- its consumer group: cooperative-sticky (incremental assignment) and static membership
  (group.instance.id): a restart gets the same member id's partitions back;
- read_committed: a worker killed inside a transaction (records flushed, not committed) leaves
  them unseen, and its restart aborts them: the output holds each event exactly once (the mock
  shows aborted records, so there they would appear twice).
"""
import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import deadline_wait  # noqa: E402
from realcluster import RealTestCase, count_output, start_module_cluster  # noqa: E402
from test_edge import partition_of  # noqa: E402

PARTITIONS = 4
KEYS = ["k_web:web"]
WAIT = 60.0
RESUME_RE = re.compile(r"partition (\d+): applied (-?\d+), committed (-?\d+), resume at")



def setUpModule():
    start_module_cluster()


def events(prefix, n):
    return [{"type": "track", "event": "Smoke", "userId": "u%d" % i,
             "messageId": "%s-%03d" % (prefix, i)} for i in range(n)]


class RealSmokeTest(RealTestCase):
    def smoke_worker(self, extra_env=None):
        return self.worker("w", "raw-smoke", "out-smoke", extra_env=extra_env)

    def log_since(self, w, start):
        with open(w.log_path) as f:
            f.seek(start)
            return f.read()

    def test_librdkafka_202_on_kafka4(self):
        self.cluster.create_topic("raw-smoke", PARTITIONS)
        self.cluster.create_topic("out-smoke", PARTITIONS)
        edge = self.edge("raw-smoke", KEYS)

        # 1. Idempotent produce through the edge; a transactional worker.
        first = events("a", 100)
        r = edge.batch(first, key="k_web")
        self.assertEqual((r.status, r.json["accepted"]), (200, 100), r)
        raw = self.cluster.consume("raw-smoke")
        self.assertEqual(len(raw), 100)
        for rec in raw:
            self.assertEqual(rec["partition"],
                             partition_of(rec["source"], rec["messageId"], PARTITIONS), rec)
        w = self.smoke_worker()
        w.wait_ready()
        instance = w.stats()["group_instance_id"]
        self.assertTrue(instance)
        deadline_wait(lambda: w.stats()["events"]["consumed"] == 100, WAIT, "100 consumed")
        # The offsets went into the group through the transaction.
        deadline_wait(lambda: all(p["committed_offset"] == p["applied_offset"] > 0
                                  for p in w.stats()["partitions"]), WAIT,
                      "committed offsets (TxnOffsetCommit) equal the applied ones")
        st = w.stats()
        self.assertEqual(len(st["partitions"]), PARTITIONS)
        self.assertGreater(st["transactions"]["committed"], 0)
        applied = {p["partition"]: p["applied_offset"] for p in st["partitions"]}
        self.assertIn("(incremental)", self.log_since(w, 0), "cooperative-sticky assignment")
        w.stop()  # SIGTERM: a static member stays in the group

        # 2. Retries and new events while it is down; it restarts with a crash inside its
        # first transaction (records flushed to the output, not committed).
        second = events("b", 60)
        r = edge.batch(second + first[:40], key="k_web")
        self.assertEqual(r.status, 200, r)
        start = os.path.getsize(w.log_path)
        w = self.smoke_worker(extra_env={"INGESTD_WORKER_CRASH_AT": "produced:1"})
        rc = w.proc.wait(timeout=WAIT)
        w.log.close()
        self.assertEqual(rc, -9, "the crash hook SIGKILLs the worker:\n" + w.tail())
        resumed = {int(m.group(1)): (int(m.group(2)), int(m.group(3)))
                   for m in RESUME_RE.finditer(self.log_since(w, start))}
        # The group's offsets were read back from Kafka: what phase 1 committed.
        self.assertEqual(resumed, {p: (a, a) for p, a in applied.items()})

        # 3. Restart: init_transactions aborts the open transaction; read_committed never
        # shows its records, and the batch is produced again, once.
        start = os.path.getsize(w.log_path)
        w = self.smoke_worker()
        w.wait_ready()
        deadline_wait(lambda: w.stats()["events"]["consumed"] == 100, WAIT,
                      "the 100 records after the committed offsets consumed")
        self.assertEqual(w.stats()["group_instance_id"], instance, "static member id kept")
        self.assertEqual(len(w.stats()["partitions"]), PARTITIONS)
        want = {("web", e["messageId"]) for e in first + second}
        state = {}

        def complete():
            state["recs"] = self.cluster.consume("out-smoke")
            return want <= {(r["source"], r["messageId"]) for r in state["recs"]}
        deadline_wait(complete, WAIT, "every event in the output", interval=0.5)
        counts = count_output(state["recs"], want)
        print("\nlibrdkafka 2.0.2 on Kafka 4: %d raw records, output %d records for %d events "
              "(%d lost, %d duplicated, %d lineage conflicts) after a kill inside a transaction"
              % (len(self.cluster.consume("raw-smoke")), counts.records, len(want), counts.lost,
                 counts.duplicated, counts.lineage_conflicts), file=sys.stderr)
        self.assertEqual((counts.lost, counts.duplicated, counts.lineage_conflicts, counts.records),
                         (0, 0, 0, len(want)), counts.examples)
        self.assertEqual(w.stats()["events"]["duplicates"], 40)
        self.assertNotIn("committed -1", self.log_since(w, start))
        w.stop()
        edge.stop()


if __name__ == "__main__":
    unittest.main()
