"""Exactly once on a real Kafka cluster while the worker group changes under load
(tests/kafka/realfaults.py: edges driven by HTTP clients, workers, one 3-node cluster for the
module, 8 raw and 8 output partitions of replication factor 3).

- a worker joins and one leaves (cooperative-sticky), as static and as dynamic members;
- a zombie: a worker frozen (SIGSTOP) with its transaction open, past its session timeout; the
  other takes its partitions; once resumed (SIGCONT) its transaction is fenced, and nothing it
  produced is visible read_committed;
- a worker SIGKILLed between its Kafka commit and its LMDB commit, and restarted (its store
  repaired from the raw topic);
- a rolling restart of every worker (SIGTERM, start again on the same data dir), the last one
  with a partition's store deleted while stopped (rebuilt from the raw topic), then retries of
  events acknowledged before the restarts.

Each case: 0 lost, 0 duplicated, 0 lineage conflicts among acknowledged events, and it prints
the time until every partition flowed again after each change.
"""
import os
import shutil
import signal
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import deadline_wait  # noqa: E402
from realcluster import start_module_cluster  # noqa: E402
from realfaults import PARTITIONS, WAIT, FaultCase, Load  # noqa: E402
from test_edge import partition_of  # noqa: E402


def setUpModule():
    start_module_cluster()


def frozen(w):
    """Whether the worker's process is stopped (state T in /proc)."""
    with open("/proc/%d/stat" % w.proc.pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


class RealMembersTest(FaultCase):
    def join_and_leave(self, name, membership_args):
        raw, out = self.topics(name)
        a = self.worker("wa", raw, out, args=membership_args)
        b = self.worker("wb", raw, out, args=membership_args)
        self.wait_split([a, b])
        load = Load([self.edge(raw), self.edge(raw)], name)
        load.wait_acked(1000)

        # A third worker joins: only the partitions that move to it stop.
        t_join = time.monotonic()
        held = {w: self.parts(w) for w in (a, b)}
        c = self.worker("wc", raw, out, args=membership_args)
        after = self.wait_split([a, b, c], "the partitions spread over three workers")
        self.assertTrue(set(after[a]) <= set(held[a]) and set(after[b]) <= set(held[b]),
                        "cooperative-sticky: a partition moved between the old workers: "
                        "%s -> %s" % (held, after))
        self.recovered("%s: join" % name, t_join, out, name + "-join")
        load.wait_acked(load.acked_count() + 500)

        # One leaves (SIGTERM): a dynamic member leaves the group at once, a static one's
        # partitions wait out the session timeout.
        t_leave = time.monotonic()
        b.stop()
        self.wait_split([a, c], "b's partitions taken over by a and c")
        self.recovered("%s: leave" % name, t_leave, out, name + "-leave")
        load.wait_acked(load.acked_count() + 500)
        self.finish("worker join and leave, %s" % name, load, out, [a, c])

    def test_join_and_leave_static(self):
        self.join_and_leave("static", [])

    def test_join_and_leave_dynamic(self):
        self.join_and_leave("dynamic", ["--dynamic-membership"])

    def test_zombie_fenced(self):
        raw, out = self.topics("zombie")
        a = self.worker("wa", raw, out)
        # b freezes (SIGSTOP) in its 20th transaction, its records produced and flushed, the
        # transaction not committed.
        b = self.worker("wb", raw, out, env={"INGESTD_WORKER_CRASH_AT": "produced:20:stop"})
        self.wait_split([a, b])
        b_parts = self.parts(b)
        load = Load([self.edge(raw), self.edge(raw)], "zombie")
        deadline_wait(lambda: frozen(b), WAIT, "b frozen in a transaction", interval=0.1)
        t_stop = time.monotonic()
        # Past its session timeout the group gives b's partitions to a; its open transaction
        # holds back read_committed readers of its output partitions until the broker aborts it
        # (transaction.timeout.ms), which also fences b's producer epoch.
        deadline_wait(lambda: self.parts(a) == list(range(PARTITIONS)), WAIT,
                      "a holds every partition", interval=0.2)
        self.recovered("zombie: takeover", t_stop, out, "zombie-takeover")
        load.wait_acked(load.acked_count() + 500)

        # Resumed, b goes on with its transaction: the broker refuses it (fenced), b aborts it,
        # replaces its producer, and rejoins the group.
        b.proc.send_signal(signal.SIGCONT)
        t_cont = time.monotonic()

        deadline_wait(lambda: b.stats()["transactions"]["producer_restarts"] >= 1, WAIT, "b's producer replaced after its fenced transaction",
                      interval=0.2)
        with open(b.log_path) as f:
            log = f.read()
        fence_lines = [ln for ln in log.splitlines() if "fenced" in ln.lower() or
                       "epoch" in ln.lower()]
        self.assertTrue(fence_lines, "no fenced error in b's log:\n%s" % b.tail())
        print("\nzombie's log: %s" % fence_lines[0], file=sys.stderr)
        self.wait_split([a, b], "b back in the group with some partitions")
        self.recovered("zombie: resumed", t_cont, out, "zombie-resumed")
        load.wait_acked(load.acked_count() + 500)
        self.finish("zombie worker (SIGSTOP past the session timeout, SIGCONT)", load, out,
                    [a, b])
        st = b.stats()["transactions"]
        print("zombie: froze holding partitions %s; after SIGCONT: producer restarts %d, "
              "transactions aborted %d" % (b_parts, st["producer_restarts"], st["aborted"]),
              file=sys.stderr)
        self.assertGreaterEqual(st["aborted"], 1)

    def test_crash_between_commits(self):
        raw, out = self.topics("between")
        a = self.worker("wa", raw, out)
        # b SIGKILLs itself after its 10th Kafka commit, before the LMDB commit: the output and
        # the group's offsets have the batch, its stores do not.
        b = self.worker("wb", raw, out, env={"INGESTD_WORKER_CRASH_AT": "kafka-committed:10"})
        self.wait_split([a, b])
        parts = self.parts(b)
        load = Load([self.edge(raw), self.edge(raw)], "between")
        deadline_wait(lambda: b.proc.poll() is not None, WAIT, "b killed between its commits",
                      interval=0.1)
        t = time.monotonic()
        b.log.close()
        b.extra_env = {}
        b.start()
        self.wait_split([a, b], "b back with its partitions")
        self.assertEqual(self.parts(b), parts)
        self.recovered("killed between the commits, restarted", t, out, "between")
        # The restart repaired the store: the batch's keys re-inserted without producing.
        self.assertGreater(b.stats()["events"]["repaired"], 0)
        load.wait_acked(load.acked_count() + 300)
        self.finish("worker SIGKILLed between the Kafka and the LMDB commit", load, out, [a, b])

    def test_rolling_restart_workers(self):
        raw, out = self.topics("rolling")
        ws = [self.worker("wa", raw, out), self.worker("wb", raw, out)]
        self.wait_split(ws)
        load = Load([self.edge(raw), self.edge(raw)], "rolling")
        load.wait_acked(1000)
        # Acknowledged early, retried after the restarts: 100 of each source.
        first = [k for src in ("web", "app") for k in sorted(k for k in load.acked
                                                             if k[0] == src)[:100]]
        lost_store = None
        for w in ws:
            instance, parts = w.stats()["group_instance_id"], self.parts(w)
            t = time.monotonic()
            w.stop()
            if w is ws[-1]:
                # The last one also lost a partition's store while stopped (deleted, as the
                # operator does with a corrupt one): the restart rebuilds it from the raw topic.
                lost_store = parts[0]
                shutil.rmtree(os.path.join(w.data_dir, "partitions", "%s-%d" % (raw, lost_store)))
            w.start()
            self.wait_split(ws, "the restarted worker back with its partitions")
            # Static membership: back within the session timeout as the same member, it gets
            # its own partitions (and stores) back.
            self.assertEqual(w.stats()["group_instance_id"], instance)
            self.assertEqual(self.parts(w), parts)
            self.recovered("restart %s" % os.path.basename(w.data_dir), t, out,
                           "rolling-%s" % os.path.basename(w.data_dir))
            if lost_store is not None:
                self.assertGreater(w.stats()["events"]["repaired"], 0, "the store not rebuilt")
            load.wait_acked(load.acked_count() + 300)
        # Retries of events acknowledged before the restarts, the rebuilt partition's among
        # them, are duplicates.
        edge = load.live()[0]
        for source in ("web", "app"):
            evs = [{"type": "track", "event": "Load", "userId": "u", "messageId": m,
                    "properties": {"retry": True}} for s, m in first if s == source]
            r = edge.batch(evs, key="k_" + source)
            self.assertEqual(r.status, 200, r)
        self.assertTrue(any(partition_of(s, m, PARTITIONS) == lost_store for s, m in first))
        self.finish("rolling restart of every worker (one store rebuilt)", load, out, ws)

if __name__ == "__main__":
    unittest.main()
