"""Fault cases on the real cluster (tests/kafka/realcluster.py): a load that keeps going through
the fault, probes that time the recovery, and the exactly-once count at the end.

    def setUpModule():
        start_module_cluster()

    class T(FaultCase):
        def test_x(self):
            raw, out = self.topics("x")
            a, b = self.worker("wa", raw, out), self.worker("wb", raw, out)
            self.wait_split([a, b])
            load = Load([self.edge(raw), self.edge(raw)], "x")
            ...fault...
            self.recovered("x", t_fault, out, "x")  # seconds until every partition flows again
            self.finish("x", load, out, [a, b])     # 0 lost, 0 duplicated, 0 lineage conflicts

The load: CLIENTS HTTP clients post BATCH-event batches to the edges, one every PACE seconds,
until stopped (or MAX_BATCHES each, or after `seconds`); every fourth batch also goes through the
other edge (a client's retry through another edge). A case may shape it otherwise (Load's
arguments: worker_kill posts 100-event batches as fast as they are answered). A 503 or a broken connection is retried through the next
live edge until answered 200; only a 200 acknowledges. The workers run with the flags
docs/scale-out.md recommends, plus KAFKA_OPTS: a session timeout of 6 s (the broker's minimum,
so a lost member's partitions move within the test's time) and a transaction timeout of 10 s
(so the broker aborts a frozen member's open transaction soon).
"""
import importlib.machinery
import importlib.util
import os
import signal
import socket
import struct
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import deadline_wait  # noqa: E402
from realcluster import SCRIPT, RealTestCase, count_output  # noqa: E402
from test_edge import partition_of  # noqa: E402

PARTITIONS = 8
CLIENTS = 4
BATCH = 25
PACE = 0.5            # seconds between one client's batches
MAX_BATCHES = 400     # per client: a bound on the events of a case, whatever its length
KEYS = ["k_web:web", "k_app:app"]
WAIT = 90.0
# The session timeout bounds how long a dead (or frozen) member's partitions wait; the
# transaction timeout how long its open transaction blocks read_committed readers of its output
# partitions (the broker aborts it then, and fences its producer).
KAFKA_OPTS = ["consumer.session.timeout.ms=6000", "consumer.heartbeat.interval.ms=1000",
              "producer.transaction.timeout.ms=10000"]


def _script_module():
    """scripts/kafka-cluster as a module: its Metadata client and node bookkeeping."""
    loader = importlib.machinery.SourceFileLoader("kafka_cluster_script", SCRIPT)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


KC = _script_module()


def stop_node(cluster, node):
    """A clean stop of one broker (SIGTERM: controlled shutdown, leaders move first); the script
    SIGKILLs it after its stop timeout. Returns whether it needed SIGKILL."""
    st = KC.load_state(cluster.dir)
    return bool(KC.stop_nodes(cluster.dir, st, [node]))


def group_coordinator(cluster, group):
    """The node id of `group`'s coordinator (FindCoordinator v1, asked of the first node that
    answers without an error)."""
    st = KC.load_state(cluster.dir)
    body = KC._kstr(group) + struct.pack(">b", 0)
    req = struct.pack(">hhi", 10, 1, 1) + KC._kstr("ingestd-test") + body
    for n in range(1, st["nodes"] + 1):
        try:
            with socket.create_connection(("127.0.0.1", st["port_base"] + n - 1), 5) as c:
                c.sendall(struct.pack(">i", len(req)) + req)
                f = c.makefile("rb")
                size = struct.unpack(">i", f.read(4))[0]
                r = KC._Reader(f.read(size))
        except OSError:
            continue
        r.take(">i")  # correlation id
        r.take(">i")  # throttle_time_ms
        err = r.take(">h")
        r.string()    # error message
        node = r.take(">i")
        if err == 0:
            return node
    raise AssertionError("no coordinator for group %s" % group)


def under_replicated(cluster, topics):
    """(topic, partition) pairs whose ISR lacks a replica, or that have no leader, as the first
    node that answers sees them; None when no node answers."""
    st = KC.load_state(cluster.dir)
    for n in range(1, st["nodes"] + 1):
        if KC.node_pid(cluster.dir, st, n) is None:
            continue
        try:
            _, md = KC.metadata("127.0.0.1", st["port_base"] + n - 1, topics, timeout=2.0)
        except (OSError, ValueError) as e:
            del e
            continue
        return sorted((t, idx) for t, (_err, parts) in md.items()
                      for idx, err, leader, replicas, isr in parts
                      if err or leader < 0 or set(isr) != set(replicas))
    return None


def wait_replicated(cluster, topics, timeout=WAIT):
    """Waits until every partition of `topics` (and the group and transaction logs) has its
    full ISR again."""
    topics = list(topics) + ["__consumer_offsets", "__transaction_state"]
    deadline_wait(lambda: under_replicated(cluster, topics) == [], timeout,
                  "no under-replicated partitions", interval=0.5)


def probes(tag, source="web"):
    """One event per raw partition (by the edges' partitioner)."""
    out, covered = [], set()
    for i in range(10000):
        mid = "probe-%s-%04d" % (tag, i)
        p = partition_of(source, mid, PARTITIONS)
        if p not in covered:
            covered.add(p)
            out.append({"type": "track", "event": "Probe", "userId": "p", "messageId": mid})
        if len(covered) == PARTITIONS:
            return out
    raise AssertionError("no probe for some partition")


class Load:
    """CLIENTS threads posting `batch`-event batches through the edges, one every `pace` seconds
    each, until stop(), `max_batches` each or `seconds` (None: no bound by time)."""

    def __init__(self, edges, tag, batch=BATCH, pace=PACE, max_batches=MAX_BATCHES,
                 seconds=None):
        self.edges = list(edges)  # the live ones: kill_edge() takes one out
        self.tag = tag
        self.batch, self.pace, self.max_batches = batch, pace, max_batches
        self.planned = CLIENTS * max_batches * batch
        self.ok = 0
        self.ok_seconds = 0.0  # the time of the requests answered 200, summed
        self.lock = threading.Lock()
        self.acked = set()
        self.requests = self.retries = self.both = self.unacked = self.broken = 0
        self.inflight = {id(e): 0 for e in self.edges}
        self.errors = []
        self.stopping = threading.Event()
        self.t0 = time.monotonic()
        self.until = self.t0 + seconds if seconds is not None else None
        self.seconds = None
        self.threads = [threading.Thread(target=self.client, args=(t,), daemon=True)
                        for t in range(CLIENTS)]
        for t in self.threads:
            t.start()

    def live(self):
        with self.lock:
            return list(self.edges)

    def send(self, first, key, evs):
        """Posts until a 200, through the next live edge after a 503 or a broken connection;
        False when stopped before."""
        i = first
        while True:
            edges = self.live()
            edge = edges[i % len(edges)]
            with self.lock:
                self.requests += 1
                self.inflight[id(edge)] = self.inflight.get(id(edge), 0) + 1
            t0 = time.monotonic()
            try:
                r = edge.batch(evs, key=key)
            except OSError:
                r = None  # the edge died mid-request (or refused it): retry elsewhere
            finally:
                with self.lock:
                    self.inflight[id(edge)] -= 1
            if r is not None and r.status == 200:
                with self.lock:
                    self.ok += 1
                    self.ok_seconds += time.monotonic() - t0
                if r.json["accepted"] != len(evs):
                    self.errors.append("accepted %s of %d" % (r.json, len(evs)))
                return True
            if r is not None and r.status != 503:
                self.errors.append("HTTP %d: %r" % (r.status, r))
                return False
            with self.lock:
                self.retries += 1
                self.broken += r is None
            if self.past_end() and time.monotonic() > self.ended_at() + 30:
                return False
            i += 1
            time.sleep(0.2)  # a client's back-off before its retry

    def client(self, t):
        try:
            key = KEYS[t % len(KEYS)]
            source = key.split(":")[1]
            for i in range(self.max_batches):
                if self.past_end():
                    return
                evs = [{"type": "track", "event": "Load", "userId": "u%d" % j,
                        "messageId": "%s-c%d-%04d-%02d" % (self.tag, t, i, j),
                        "properties": {"i": i}} for j in range(self.batch)]
                firsts = [t + i]
                if i % 4 == 0:  # the same batch again through the other edge
                    firsts.append(t + i + 1)
                ok = [self.send(f, key, evs) for f in firsts]
                with self.lock:
                    if any(ok):
                        self.acked.update((source, e["messageId"]) for e in evs)
                    else:
                        self.unacked += len(evs)
                    self.both += len(firsts) == 2
                if self.pace:
                    self.stopping.wait(self.pace)
        except Exception as e:  # reported by stop()
            self.errors.append(repr(e))

    def past_end(self):
        """Stopped, or past its time bound."""
        return self.stopping.is_set() or (self.until is not None and
                                          time.monotonic() > self.until)

    def ended_at(self):
        return min(t for t in (getattr(self, "stopped_at", None), self.until) if t is not None)

    def acked_count(self):
        with self.lock:
            return len(self.acked)

    def wait_acked(self, n, what="events acknowledged"):
        deadline_wait(lambda: self.acked_count() >= n, WAIT, "%d %s" % (n, what), interval=0.05)

    def kill_edge(self, edge):
        """SIGKILLs an edge while it has a request in hand; returns once it is dead. The
        clients retry what it left unanswered through the others."""
        deadline_wait(lambda: self.inflight.get(id(edge), 0) > 0, WAIT,
                      "a request in the edge's hands", interval=0.001)
        edge.proc.send_signal(signal.SIGKILL)
        with self.lock:
            self.edges.remove(edge)
        edge.proc.wait(timeout=10)

    def add_edge(self, edge):
        with self.lock:
            self.edges.append(edge)

    def run_out(self):
        """Waits for the clients to end by their own bounds (max_batches, seconds)."""
        assert self.until is not None, "a load without a time bound runs until stop()"
        for t in self.threads:
            t.join(timeout=max(0.0, self.until - time.monotonic()) + WAIT)

    def stop(self):
        self.stopped_at = time.monotonic()
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=WAIT)
        assert not any(t.is_alive() for t in self.threads), "a client thread hangs"
        assert not self.errors, self.errors[:5]
        self.seconds = time.monotonic() - self.t0


class FaultCase(RealTestCase):
    """Edges and workers as the fault cases run them, the recovery probes and the count."""

    def setUp(self):
        super().setUp()
        self.figures = []

    def tearDown(self):
        for w in self.workers:
            if w.proc is not None and w.proc.poll() is None:
                w.proc.send_signal(signal.SIGCONT)  # a frozen one dies of SIGKILL either way
        super().tearDown()

    def topics(self, name):
        raw, out = "raw-" + name, "out-" + name
        self.cluster.create_topic(raw, PARTITIONS)
        self.cluster.create_topic(out, PARTITIONS)
        return raw, out

    def edge(self, raw):
        return super().edge(raw, KEYS)

    def worker(self, name, raw, out, args=(), env=None, kafka_opts=KAFKA_OPTS):
        return super().worker(name, raw, out, group="g-" + raw, kafka_opts=kafka_opts,
                              args=args, extra_env=env)

    @staticmethod
    def parts(w):
        return sorted(p["partition"] for p in w.stats()["partitions"])

    def wait_split(self, workers, what="every partition held once by the workers"):
        """Waits until every partition is held by exactly one of `workers`, each holding some,
        and each is ready; returns {worker: partitions}."""
        state = {}

        def split():
            held = {w: self.parts(w) for w in workers}
            flat = [p for ps in held.values() for p in ps]
            state["held"] = held
            return (sorted(flat) == list(range(PARTITIONS)) and all(held.values()) and
                    all(w.get("/healthz")[0] == 200 for w in workers))
        try:
            deadline_wait(split, WAIT, what, interval=0.2)
        except AssertionError:
            raise AssertionError("%s: held %s\n%s" % (what, state.get("held"), "\n".join(
                w.tail() for w in workers)))
        return state["held"]

    def recovered(self, label, t_event, out, tag):
        """Sends a probe to every raw partition through a live edge and waits until all are in
        the output; returns (and records) the seconds since t_event: the time until every
        partition flowed again."""
        evs = probes(tag)
        for s in self.servers:
            if s.proc is None or s.proc.poll() is not None:
                continue
            deadline_wait(lambda: s.batch(evs, key="k_web").status == 200, WAIT,
                          "the probes acknowledged", interval=0.2)
            break
        self.probe_keys = getattr(self, "probe_keys", set()) | {("web", e["messageId"])
                                                                  for e in evs}
        self.output_holds(out, {("web", e["messageId"]) for e in evs},
                          "%s: a probe of every partition in the output" % label)
        t = time.monotonic() - t_event
        self.figures.append("%s: every partition flowed again after %.1f s" % (label, t))
        return t

    def finish(self, case, load, out, workers):
        """Stops the load, waits for the output to hold every acknowledged event and the live
        workers to have no lag, then counts the output: 0 lost, 0 duplicated, 0 lineage
        conflicts. Prints the figures."""
        load.stop()
        acked = set(load.acked) | getattr(self, "probe_keys", set())
        self.output_holds(out, acked, "every acknowledged event in the output")
        deadline_wait(lambda: all(p["lag"] == 0 for w in workers
                                  for p in w.stats()["partitions"]),
                      WAIT, "the workers without lag", interval=0.5)
        counts = count_output(self.cluster.consume(out), acked)
        print("\nreal cluster, %s: %d events acknowledged in %.1f s (%d requests, %d retried, "
              "%d on a broken connection, %d batches through both edges, %d events never "
              "acknowledged); output: %d records, %d distinct, %d lost, %d duplicated, %d "
              "lineage conflicts, %d unacknowledged events present; %s" % (
                  case, len(load.acked), load.seconds, load.requests, load.retries,
                  load.broken, load.both, load.unacked, counts.records, counts.distinct,
                  counts.lost, counts.duplicated, counts.lineage_conflicts,
                  counts.unacked_seen, "; ".join(self.figures)), file=sys.stderr)
        self.assertEqual(counts.lost, 0, counts.examples)
        self.assertEqual(counts.duplicated, 0, counts.examples)
        self.assertEqual(counts.lineage_conflicts, 0, counts.examples)
        self.assertEqual(counts.records, counts.distinct)
        self.assertGreater(load.both, 0)
        return counts
