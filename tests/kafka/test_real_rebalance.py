"""Rebalances on a real Kafka cluster: how long a worker joining, or killed (-9) and restarted,
stops the pipeline, with the defaults docs/scale-out.md recommends.

tests/kafka/rebalance.py does the measuring (8 raw and 8 output partitions with replication
factor 3 on the 3-node cluster of tests/kafka/realcluster.py, one probe record into every
partition every 0.25 s through an edge, the workers' /stats polled every 0.1 s). The workers get
no --kafka-opt: static membership, cooperative-sticky, librdkafka's session.timeout.ms of 45 s
and heartbeat.interval.ms of 3 s.

Asserted, for each case, within BOUND_S (the goal of issue #26) of the join or of the restart:
every partition processed again (every probe produced until the group settled is applied),
and the output, read read_committed, holds every probe exactly once.

- join: the partitions that stay with the first worker are never revoked (cooperative-sticky):
  its log shows exactly one revocation, of the partitions the newcomer now holds. Their output
  can pause while a round completes (a transaction refused with ILLEGAL_GENERATION until the
  worker has the group's new generation, then redone: docs/scale-out.md), up to as long as the
  partitions that moved, or a little longer: within BOUND_S too;
- restart: the restarted worker is the same static member (group.instance.id) and gets back
  exactly the partitions it held, and the other worker's log shows no revocation at all: no
  rebalance happened (a session timeout of 45 s is far longer than the restart).
"""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import rebalance  # noqa: E402
from realcluster import RealTestCase, start_module_cluster  # noqa: E402

BOUND_S = 10.0


def setUpModule():
    start_module_cluster()


class RealRebalanceTest(RealTestCase):
    def output_check(self):
        return rebalance.output_check(self, reproduced_ok=False)

    def test_join_moves_only_what_must_move(self):
        res = rebalance.measure("join", cluster=self.cluster, log=print,
                                check=self.output_check())
        print("stall by partition: %s; moved: %s; A: %s" % (
            {p: round(v, 1) for p, v in res["stall_by_partition"].items()}, res["held_by_new"],
            res["a_revocations"]))
        self.assertLessEqual(res["recovered"], BOUND_S,
                             "every partition processed again within %.0f s of the join" %
                             BOUND_S)
        self.assertEqual(len(res["held_by_new"]), rebalance.PARTS // 2, "balanced 4 + 4")
        # Cooperative-sticky: one incremental revocation, of what moved and nothing else.
        self.assertEqual(len(res["a_revocations"]), 1, res["a_revocations"])
        self.assertIn("revoked %d partition(s) (rebalance, incremental)" %
                      len(res["held_by_new"]), res["a_revocations"][0])
        # The partitions that stayed were never revoked (above), so never repaired or reopened.
        # Their output may still pause while a round completes: the transaction that carries
        # their offsets is refused with ILLEGAL_GENERATION until the worker has the group's new
        # generation (KIP-447 fencing), is aborted and redone. That pause is not ordered
        # against the moved partitions' stall (the newcomer may start first: 2.9 s against
        # 1.9 s, on this build and on the one before it), so it is held to the bound
        # only; the revocation above is what proves the assignment cooperative.
        rebalance.assert_kept_flowing(self, res, BOUND_S)

    def test_kill_and_restart(self):
        res = rebalance.measure("restart", cluster=self.cluster, log=print,
                                check=self.output_check())
        self.assertLessEqual(res["recovered"], BOUND_S,
                             "every partition processed again within %.0f s of the restart" %
                             BOUND_S)
        self.assertRegex(res["instance_before"] or "", r"^ingestd-rebal[0-9-]+-[0-9a-f]{16}$")
        self.assertEqual(res["instance_after"], res["instance_before"])
        # Static membership: no rebalance. B gets its own partitions back, A loses none.
        held_by_b = sorted(p for p, w in res["held_before"].items() if w == "b")
        self.assertEqual(sorted(res["held_by_new"]), held_by_b)
        self.assertEqual(res["a_revocations"], [], "a restart within the session timeout "
                         "must not rebalance the other worker")


if __name__ == "__main__":
    unittest.main()
