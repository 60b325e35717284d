"""Exactly once on a real Kafka cluster while brokers and edges fail under load
(tests/kafka/realfaults.py: edges driven by HTTP clients, two workers with static membership,
one 3-node cluster for the module, 8 raw and 8 output partitions of replication factor 3,
min.insync.replicas 2).

- a broker SIGKILLed and started again (its partitions' leaders fail over to the others);
- a rolling restart of all three brokers: a clean stop and a start of each in turn, the next
  only once no partition is under-replicated;
- an edge SIGKILLed with a request in hand: every event it acknowledged is in the output, what
  it left unanswered is retried through another edge and is there once.

Each case: 0 lost, 0 duplicated, 0 lineage conflicts among acknowledged events, and it prints
the time until every partition flowed again after each fault.
"""
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from realcluster import start_module_cluster  # noqa: E402
from realfaults import FaultCase, Load, group_coordinator, stop_node, wait_replicated  # noqa: E402


def setUpModule():
    start_module_cluster()


class RealFailoverTest(FaultCase):
    def start(self, name):
        raw, out = self.topics(name)
        ws = [self.worker("wa", raw, out), self.worker("wb", raw, out)]
        self.wait_split(ws)
        load = Load([self.edge(raw), self.edge(raw)], name)
        load.wait_acked(500)
        return raw, out, ws, load

    def restart_node(self, node, topics):
        """Starts a stopped broker and waits until no partition is under-replicated; records
        both times."""
        t = time.monotonic()
        self.cluster.start_node(node)
        t_up = time.monotonic()
        wait_replicated(self.cluster, topics)
        self.figures.append("broker %d up %.1f s after its start, every partition fully "
                            "replicated %.1f s later" % (node, t_up - t, time.monotonic() - t_up))

    def test_broker_sigkill(self):
        raw, out, ws, load = self.start("bkill")
        # The group coordinator's broker: the worst one to lose (the group's and the
        # transactions' coordinators move, every partition it leads fails over). The workers'
        # sessions time out before the cluster notices the death (broker.session.timeout.ms is 9
        # s), and their rejoin may be answered FENCED_INSTANCE_ID, fatal for a librdkafka
        # consumer: the worker must replace its consumer, or it never consumes again.
        node = group_coordinator(self.cluster, "g-" + raw)
        t = time.monotonic()
        self.cluster.kill_node(node)
        self.recovered("broker %d (the group coordinator) SIGKILLed" % node, t, out, "bkill")
        load.wait_acked(load.acked_count() + 300)
        self.restart_node(node, [raw, out])
        load.wait_acked(load.acked_count() + 300)
        self.finish("broker SIGKILLed and restarted", load, out, ws)
        self.figures.append("consumers replaced after a fatal error: %s" % [
            w.stats()["consumer_restarts"] for w in ws])
        print("  " + self.figures[-1], file=sys.stderr)

    def test_broker_rolling_restart(self):
        raw, out, ws, load = self.start("broll")
        for node in (1, 2, 3):
            t = time.monotonic()
            self.assertFalse(stop_node(self.cluster, node), "broker %d needed SIGKILL" % node)
            self.figures.append("broker %d stopped in %.1f s" % (node, time.monotonic() - t))
            self.recovered("broker %d stopped" % node, t, out, "broll-%d" % node)
            self.restart_node(node, [raw, out])
            load.wait_acked(load.acked_count() + 200)
        self.finish("rolling restart of every broker", load, out, ws)

    def test_edge_sigkill(self):
        raw, out, ws, load = self.start("ekill")
        victim = load.live()[0]
        t = time.monotonic()
        load.kill_edge(victim)
        self.recovered("edge SIGKILLed", t, out, "ekill")
        load.add_edge(self.edge(raw))
        load.wait_acked(load.acked_count() + 500)
        self.finish("edge SIGKILLed mid-request", load, out, ws)
        # The kill interrupted a request (the client saw its connection break) and the client
        # retried it elsewhere.
        self.assertGreater(load.broken, 0)


if __name__ == "__main__":
    unittest.main()
