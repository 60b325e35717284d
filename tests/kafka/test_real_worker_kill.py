"""Exactly once on a real Kafka cluster (tests/kafka/realcluster.py) while a worker is SIGKILLed
under load and restarted.

Real processes only: a 3-node Apache Kafka 4 in KRaft mode (scripts/kafka-cluster), two edges
(`ingestd serve --role edge`) driven over HTTP by client threads, two `ingestd worker`s with the
flags docs/scale-out.md recommends (none: static membership, cooperative-sticky, librdkafka's
session.timeout.ms of 45 s), raw and output topics of 8 partitions with replication factor 3.
Some batches go through both edges, as a client's retry through another edge does; a 503 is
retried until it is answered 200, and only a 200 counts as acknowledged.

Mid-load one worker is SIGKILLed (its transaction left open) and restarted 2 s later on its
data dir. Then the output topic, read read_committed, must hold every acknowledged event exactly
once, each from a single raw record (its `ingestd-input` lineage header): 0 lost, 0 duplicated.
The restarted worker must come back as the same static member with its own partitions, and
the other worker must lose none of its partitions meanwhile. Printed: the time from the restart
until a probe sent to every partition is in the output (every partition processed again).
"""
import os
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import deadline_wait  # noqa: E402
from realcluster import RealTestCase, count_output, start_module_cluster  # noqa: E402
from test_edge import partition_of  # noqa: E402

PARTITIONS = 8
CLIENTS = 4
BATCH = 100            # events per request
BATCHES = 100          # per client at most
LOAD_SECONDS = 30.0    # the load stops at whichever bound comes first
KILL_AFTER = 0.25      # of the planned events acknowledged before the kill
OUTAGE = 2.0           # seconds between the kill and the restart
KEYS = ["k_web:web", "k_app:app"]
WAIT = 90.0



def setUpModule():
    start_module_cluster()


class Load:
    """CLIENTS threads posting batches to the edges until BATCHES or LOAD_SECONDS."""

    def __init__(self, edges):
        self.edges = edges
        self.lock = threading.Lock()
        self.acked = set()
        self.requests = self.retries = self.both = self.unacked = self.ok = 0
        self.ok_seconds = 0.0
        self.errors = []
        self.stop_at = time.monotonic() + LOAD_SECONDS
        self.threads = [threading.Thread(target=self.client, args=(t,), daemon=True)
                        for t in range(CLIENTS)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def join(self):
        for t in self.threads:
            t.join(timeout=LOAD_SECONDS + 60)
        assert not any(t.is_alive() for t in self.threads), "a client thread hangs"
        assert not self.errors, self.errors[:5]

    def send(self, edge, key, evs):
        """Posts until 200 (a client retrying 503s); False when the load's time ran out."""
        while True:
            with self.lock:
                self.requests += 1
            try:
                t0 = time.monotonic()
                r = edge.batch(evs, key=key)
                if r.status == 200:
                    with self.lock:
                        self.ok_seconds += time.monotonic() - t0
                        self.ok += 1
                    if r.json["accepted"] != len(evs):
                        self.errors.append("accepted %s of %d" % (r.json, len(evs)))
                    return True
                if r.status != 503:
                    self.errors.append("HTTP %d: %r" % (r.status, r))
                    return False
            except OSError:
                pass  # connection trouble: retry as a client would
            with self.lock:
                self.retries += 1
            if time.monotonic() > self.stop_at + 30:
                return False
            time.sleep(0.2)  # a client's back-off before its retry

    def client(self, t):
        try:
            key = KEYS[t % len(KEYS)]
            source = key.split(":")[1]
            for i in range(BATCHES):
                if time.monotonic() > self.stop_at:
                    return
                evs = [{"type": "track", "event": "Load", "userId": "u%d" % j,
                        "messageId": "c%d-%04d-%02d" % (t, i, j), "properties": {"i": i}}
                       for j in range(BATCH)]
                first = self.edges[(t + i) % 2]
                targets = [first]
                if i % 4 == 0:  # a retry of the same batch through the other edge
                    targets.append(self.edges[(t + i + 1) % 2])
                ok = [self.send(e, key, evs) for e in targets]
                with self.lock:
                    if any(ok):
                        self.acked.update((source, e["messageId"]) for e in evs)
                    else:
                        self.unacked += len(evs)
                    if len(targets) == 2:
                        self.both += 1
        except Exception as e:  # reported by join()
            self.errors.append(repr(e))

    def acked_count(self):
        with self.lock:
            return len(self.acked)


class RealWorkerKillTest(RealTestCase):
    def test_worker_sigkill_under_load(self):
        raw, out = "raw-kill", "out-kill"
        self.cluster.create_topic(raw, PARTITIONS)
        self.cluster.create_topic(out, PARTITIONS)
        a, b = self.worker("wa", raw, out), self.worker("wb", raw, out)
        a.wait_ready()
        b.wait_ready()
        deadline_wait(lambda: len(a.stats()["partitions"]) + len(b.stats()["partitions"])
                      == PARTITIONS and a.stats()["partitions"] and b.stats()["partitions"],
                      WAIT, "8 partitions split over the two workers")
        b_instance = b.stats()["group_instance_id"]
        b_parts = sorted(p["partition"] for p in b.stats()["partitions"])
        edges = [self.edge(raw, KEYS), self.edge(raw, KEYS)]

        t_load = time.monotonic()
        load = Load(edges).start()
        planned = CLIENTS * BATCHES * BATCH
        deadline_wait(lambda: load.acked_count() >= planned * KILL_AFTER
                      or time.monotonic() > load.stop_at - LOAD_SECONDS * 0.6,
                      LOAD_SECONDS, "a quarter of the load acknowledged", interval=0.05)
        acked_at_kill = load.acked_count()
        a_log_at_kill = os.path.getsize(a.log_path)
        b.kill()
        time.sleep(OUTAGE)  # the outage's length, not synchronisation
        t_restart = time.monotonic()
        b.start()
        # One probe event per raw partition through an edge: every partition is processed
        # again once all of them are in the output.
        probes, covered = [], set()
        for i in range(1000):
            mid = "probe-%03d" % i
            p = partition_of("web", mid, PARTITIONS)
            if p not in covered:
                covered.add(p)
                probes.append({"type": "track", "event": "Probe", "userId": "p",
                               "messageId": mid})
            if len(covered) == PARTITIONS:
                break
        r = edges[0].batch(probes, key="k_web")
        self.assertEqual(r.status, 200, r)
        self.output_holds(out, {("web", e["messageId"]) for e in probes},
                          "a probe of every partition in the output")
        recovered = time.monotonic() - t_restart
        load.join()
        load_seconds = time.monotonic() - t_load

        acked = set(load.acked) | {("web", e["messageId"]) for e in probes}
        self.output_holds(out, acked, "every acknowledged event in the output")
        deadline_wait(lambda: all(p["lag"] == 0 for w in (a, b)
                                  for p in w.stats()["partitions"]),
                      WAIT, "both workers without lag")
        counts = count_output(self.cluster.consume(out), acked)
        with open(a.log_path) as f:
            f.seek(a_log_at_kill)
            a_log = f.read()
        st_a, st_b = a.stats(), b.stats()
        print("\nreal cluster, worker SIGKILL under load: %d events acknowledged (%d before the "
              "kill) in %.1f s over %d requests (answered 200 in %.2f s on average; %d retried 503s, %d batches through both "
              "edges, %d events never acknowledged); every partition processed again %.1f s "
              "after the restart (%.1f s after the kill); output: %d records, %d distinct, "
              "%d lost, %d duplicated, %d lineage conflicts; transactions committed %d + %d, "
              "aborted %d + %d; duplicates dropped %d + %d; the survivor saw %d assignment(s)" % (
                  len(load.acked), acked_at_kill, load_seconds, load.requests,
                  load.ok_seconds / max(load.ok, 1), load.retries,
                  load.both, load.unacked, recovered, recovered + OUTAGE, counts.records,
                  counts.distinct, counts.lost, counts.duplicated, counts.lineage_conflicts,
                  st_a["transactions"]["committed"], st_b["transactions"]["committed"],
                  st_a["transactions"]["aborted"], st_b["transactions"]["aborted"],
                  st_a["events"]["duplicates"], st_b["events"]["duplicates"],
                  a_log.count("assigned ")),
              file=sys.stderr)
        self.assertEqual(counts.lost, 0, counts.examples)
        self.assertEqual(counts.duplicated, 0, counts.examples)
        self.assertEqual(counts.lineage_conflicts, 0, counts.examples)
        self.assertGreater(load.both, 0)
        # The restarted worker came back as the same static member with its own partitions.
        self.assertEqual(st_b["group_instance_id"], b_instance)
        self.assertEqual(sorted(p["partition"] for p in st_b["partitions"]), b_parts)
        # The survivor's partitions never stopped: nothing was revoked from it.
        self.assertNotIn("revoked", a_log)
        for s in self.servers:
            s.stop()
        for w in self.workers:
            w.stop()


if __name__ == "__main__":
    unittest.main()
