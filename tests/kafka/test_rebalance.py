"""Rebalances on the mock cluster: a worker joining, or killed (-9) and restarted, stops only
what must move, and for a bounded time (a liveness bound, not a speed benchmark).

tests/kafka/rebalance.py does the measuring (3 mock brokers, 8 raw partitions, one probe record
per partition every 0.25 s, the workers' /stats polled): `recovered` is the time from the join
or the restart until every partition is held by exactly one ready worker, the new one among
them, and every probe produced until then is processed.

On librdkafka's mock every rebalance round lasts session.timeout.ms - 1 s (it never ends a join
phase early), and a follower whose SyncGroup arrives after the leader's is refused and starts
one more round (docs/scale-out.md, "Rebalances"). So the workers here run with
session.timeout.ms=3000: rounds of 2 s, and the bound holds even with a few extra rounds.
(A real broker refuses a session timeout under 6 s by default; it ends a round as soon as every
member has rejoined.)

Also checked: with cooperative-sticky, the partitions the first worker keeps while another
joins are never stopped (the old eager protocol revoked all 8 for the whole round), and the
output topic still holds every probe exactly once (per raw record; see test_worker.py for what
the mock shows of aborted transactions).
"""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import rebalance  # noqa: E402

BOUND_S = 15.0
KEPT_STALL_S = 1.5  # a partition that never moved: normal latency (probe + batch + txn)
OPTS = ["consumer.session.timeout.ms=3000", "consumer.heartbeat.interval.ms=300",
        "consumer.topic.metadata.refresh.interval.ms=1000"]


class RebalanceTest(unittest.TestCase):

    def output_check(self, reproduced_ok):
        return rebalance.output_check(self, reproduced_ok)

    def test_join_moves_only_what_must_move(self):
        res = rebalance.measure("join", OPTS, log=print,
                                check=self.output_check(reproduced_ok=False))
        self.assertLessEqual(res["recovered"], BOUND_S,
                             "every partition processed again within %.0f s of the join" %
                             BOUND_S)
        self.assertEqual(len(res["held_by_new"]), rebalance.PARTS // 2, "balanced 4 + 4")
        print("stall by partition: %s; moved: %s" % (
            {p: round(v, 1) for p, v in res["stall_by_partition"].items()}, res["held_by_new"]))
        rebalance.assert_kept_flowing(self, res, KEPT_STALL_S)

    def test_kill_and_restart(self):
        # A kill inside a transaction leaves its records visible on the mock only.
        res = rebalance.measure("restart", OPTS, log=print,
                                check=self.output_check(reproduced_ok=True))
        self.assertLessEqual(res["recovered"], BOUND_S,
                             "every partition processed again within %.0f s of the restart" %
                             BOUND_S)
        self.assertGreater(len(res["held_by_new"]), 0, "the restarted worker is back at work")
        # Static membership (KIP-345): the same group.instance.id after the restart, so a real
        # broker hands the restarted worker its partitions without a rebalance (the mock
        # ignores the id: docs/scale-out.md).
        self.assertRegex(res["instance_before"] or "", r"^ingestd-rebal-[0-9a-f]{16}$")
        self.assertEqual(res["instance_after"], res["instance_before"])


if __name__ == "__main__":
    unittest.main()
