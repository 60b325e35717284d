"""Exactly once on a real Kafka cluster (tests/kafka/realcluster.py) while a worker is SIGKILLed
under load and restarted.

Real processes only: a 3-node Apache Kafka 4 in KRaft mode (scripts/kafka-cluster), two edges
(`ingestd serve --role edge`) driven over HTTP by client threads, two `ingestd worker`s with the
flags docs/scale-out.md recommends (none: static membership, cooperative-sticky, librdkafka's
session.timeout.ms of 45 s), raw and output topics of 8 partitions with replication factor 3.
Some batches go through both edges, as a client's retry through another edge does; a 503 is
retried until it is answered 200, and only a 200 counts as acknowledged (tests/kafka/realfaults.py's
load, here 100-event batches as fast as they are answered, for 30 s at most).

Mid-load one worker is SIGKILLed (its transaction left open) and restarted 2 s later on its
data dir. Then the output topic, read read_committed, must hold every acknowledged event exactly
once, each from a single raw record (its `ingestd-input` lineage header): 0 lost, 0 duplicated.
The restarted worker must come back as the same static member with its own partitions, and
the other worker must lose none of its partitions meanwhile. Printed: the time from the restart
until a probe sent to every partition is in the output (every partition processed again).
"""
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from realcluster import start_module_cluster  # noqa: E402
from realfaults import FaultCase, Load  # noqa: E402

BATCH = 100            # events per request
BATCHES = 100          # per client at most
LOAD_SECONDS = 30.0    # the load stops at whichever bound comes first
KILL_AFTER = 0.25      # of the planned events acknowledged before the kill
OUTAGE = 2.0           # seconds between the kill and the restart


def setUpModule():
    start_module_cluster()


class RealWorkerKillTest(FaultCase):
    def test_worker_sigkill_under_load(self):
        raw, out = self.topics("kill")
        # The recommended defaults (no KAFKA_OPTS): a static member restarted within librdkafka's
        # session timeout of 45 s keeps its partitions, without a rebalance.
        a, b = (self.worker(n, raw, out, kafka_opts=()) for n in ("wa", "wb"))
        held = self.wait_split([a, b])
        b_instance = b.stats()["group_instance_id"]

        load = Load([self.edge(raw), self.edge(raw)], "kill", batch=BATCH, pace=0,
                    max_batches=BATCHES, seconds=LOAD_SECONDS)
        load.wait_acked(int(load.planned * KILL_AFTER), "events acknowledged before the kill")
        acked_at_kill = load.acked_count()
        a_log_at_kill = os.path.getsize(a.log_path)
        b.kill()
        time.sleep(OUTAGE)  # the outage's length, not synchronisation
        t_restart = time.monotonic()
        b.start()
        recovered = self.recovered("worker SIGKILLed after %d events acknowledged, restarted "
                                   "%.0f s later" % (acked_at_kill, OUTAGE), t_restart, out, "kill")
        self.figures.append("every partition processed again %.1f s after the kill" %
                            (recovered + OUTAGE))
        load.run_out()  # the load goes on after the recovery, to its own end
        self.finish("worker SIGKILL under load", load, out, [a, b])
        with open(a.log_path) as f:
            f.seek(a_log_at_kill)
            a_log = f.read()
        st_a, st_b = a.stats(), b.stats()
        print("  requests answered 200 in %.2f s on average; transactions committed %d + %d, "
              "aborted %d + %d; duplicates dropped %d + %d; the survivor saw %d assignment(s)" % (
                  load.ok_seconds / max(load.ok, 1),
                  st_a["transactions"]["committed"], st_b["transactions"]["committed"],
                  st_a["transactions"]["aborted"], st_b["transactions"]["aborted"],
                  st_a["events"]["duplicates"], st_b["events"]["duplicates"],
                  a_log.count("assigned ")), file=sys.stderr)
        # The restarted worker came back as the same static member with its own partitions.
        self.assertEqual(st_b["group_instance_id"], b_instance)
        self.assertEqual(self.parts(b), held[b])
        # The survivor's partitions never stopped: nothing was revoked from it.
        self.assertNotIn("revoked", a_log)


if __name__ == "__main__":
    unittest.main()
