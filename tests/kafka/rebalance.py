"""How long a worker joining, or killed (-9) and restarted, stops the pipeline (mock or real
cluster).

    python3 tests/kafka/rebalance.py join|restart [RUNS] [--real | --cluster DIR]
                                     [--kafka-opt NAME=VALUE ...] [--worker-arg ARG ...]
        (binaries from build/, or INGESTD_BIN / KAFKA_MOCK_BIN / KCAT_LITE_BIN)

Each run: a fresh mock cluster (3 brokers, raw:8, out:8), or with --real fresh topics (raw and
output, 8 partitions each, replication factor 3) and a fresh group on one real 3-node Kafka
(scripts/kafka-cluster, started once for all runs and stopped at the end; --cluster DIR: the
one already running in DIR, left running), and worker A, which
takes all 8 partitions. A probe producer then puts one record into every raw partition every
PROBE_S (the messageIds are chosen with Kafka's murmur2 so each probe hits each partition once:
probe k is offset k in every partition): kcat_lite on the mock, an edge (`ingestd serve --role
edge`, a batch of 8 answered once delivered) on the real cluster. Without --kafka-opt the real
cluster's workers run with no --kafka-opt at all: the defaults docs/scale-out.md recommends.
At T0 either worker B starts (join), or B, which has been a member since the start, is
SIGKILLed and started again on the same data dir (restart). The workers' /stats are polled
every POLL_S; a probe record is processed once the applied offset of its partition, in the
stats of a worker that holds the partition, is past it. Reported:

- stall: the longest any probe record produced after T0 waited to be processed: how long a
  partition stood still;
- recovered: from T0 until the group has settled (every partition held by exactly one ready
  worker, the new or restarted worker holding at least one) and every probe produced before
  that moment has been processed: every partition processed again.

tests/kafka/test_rebalance.py (mock) and test_real_rebalance.py (real cluster) assert bounds on
`recovered` with this code.
"""
import collections
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_edge  # noqa: E402
import test_worker as t  # noqa: E402

PARTS = 8
PROBE_S = 0.25
POLL_S = 0.1


def partition_of(source, mid):
    return test_edge.partition_of(source, mid, PARTS)  # Kafka's murmur2, as the edge routes


def probe_ids(k):
    """One messageId per partition for probe k: [mid for partition 0, 1, ...]."""
    ids, i = [None] * PARTS, 0
    while None in ids:
        mid = "p%06d-%d" % (k, i)
        p = partition_of("web", mid)
        if ids[p] is None:
            ids[p] = mid
        i += 1
    return ids


class Probes(threading.Thread):
    """Produces probe k (one record per partition) every PROBE_S; remembers when each landed."""

    def __init__(self, backend):
        super().__init__(daemon=True)
        self.backend, self.stop, self.done = backend, threading.Event(), []  # done[k]: delivered at
        self.error = None

    def run(self):
        try:
            k = 0
            while not self.stop.is_set():
                start = time.monotonic()
                self.backend.produce("web", probe_ids(k))
                self.done.append(time.monotonic())
                k += 1
                self.stop.wait(max(0.0, PROBE_S - (time.monotonic() - start)))
        except Exception as e:  # reported by the measuring thread
            self.error = e


def holdings(workers):
    """{partition: [(worker, applied_offset, ready)]} from every worker that answers."""
    out = {p: [] for p in range(PARTS)}
    for w in workers:
        if w is None or w.proc is None or w.proc.poll() is not None:
            continue
        try:
            st = w.stats()
        except Exception:  # killed, or not listening yet
            continue
        for p in st["partitions"]:
            out[p["partition"]].append((w, p["applied_offset"], st["ready"]))
    return out


class MockBackend:
    """A fresh mock cluster per run; the workers get the tests' short timeouts (t.KAFKA_OPTS)
    and --mirror-offsets, the probes go through kcat_lite."""

    def __init__(self):
        self.mock = t.Mock(["raw:%d" % PARTS, "out:%d" % PARTS])

    def worker(self, data_dir, kafka_opts, worker_args):
        # kafka_opts: measure() has put them in t.KAFKA_OPTS, which t.Worker reads
        return t.Worker(self.mock, data_dir, group="rebal", args=list(worker_args))

    def produce(self, source, mids):
        now = int(time.time() * 1000)
        t.produce(self.mock, [(source, m, t.event(source, m, now)) for m in mids])

    def consume(self):
        return t.consume(self.mock)

    def close(self):
        self.mock.close()


class RealBackend:
    """Fresh topics (raw-rebalN, out-rebalN) and group on a running real cluster
    (realcluster.RealCluster); the probes go through one edge."""

    runs = 0

    def __init__(self, cluster, tmp):
        import realcluster  # needs only the real-cluster runs
        RealBackend.runs += 1
        n = "%d-%d" % (os.getpid(), RealBackend.runs)
        self.realcluster, self.cluster = realcluster, cluster
        self.raw, self.out, self.group = "raw-rebal" + n, "out-rebal" + n, "rebal" + n
        cluster.create_topic(self.raw, PARTS)
        cluster.create_topic(self.out, PARTS)
        self.edge = realcluster.Server(
            keys=["k_web:web"], data_dir=os.path.join(tmp, "edge"),
            args=["--role", "edge", "--kafka-brokers", cluster.bootstrap,
                  "--raw-topic", self.raw]).start()

    def worker(self, data_dir, kafka_opts, worker_args):
        return self.realcluster.RealWorker(self.cluster, data_dir, self.raw, self.out,
                                           group=self.group, kafka_opts=kafka_opts or (),
                                           args=list(worker_args))

    def produce(self, source, mids):
        assert source == "web", source
        r = self.edge.batch([{"type": "track", "event": "Probe", "userId": "p",
                              "messageId": m} for m in mids], key="k_web")
        if r.status != 200:
            raise AssertionError("edge answered %d: %r" % (r.status, r))

    def consume(self):
        return self.cluster.consume(self.out)

    def close(self):
        self.edge.cleanup()


def settled(hold, members):
    """Every partition held by exactly one ready worker, and each member holding some."""
    return (all(len(hs) == 1 and hs[0][2] for hs in hold.values()) and
            all(any(hs[0][0] is w for hs in hold.values()) for w in members))


def measure(kind, kafka_opts=None, worker_args=(), timeout=120.0, log=print, check=None,
            cluster=None):
    """One run, on the mock cluster, or on `cluster` (a running realcluster.RealCluster) when
    given; returns {"stall": s, "recovered": s, "stall_by_partition": {p: s},
    "held_by_new": [p...], "held_before": {p: "a"|"b"}, "instance_before"/"instance_after": B's
    group.instance.id before the kill (restart) and at the end, "a_revocations": the lines of
    A's log after T0 that say partitions were revoked from it} (seconds). check(consume,
    probe_ids_list, workers), when given, runs before the teardown: consume() reads the output
    topic read_committed (kcat_lite's records)."""
    saved = list(t.KAFKA_OPTS)
    if kafka_opts is not None and cluster is None:
        t.KAFKA_OPTS[:] = kafka_opts
    tmp = tempfile.mkdtemp(prefix="ingestd-rebal-")
    backend, workers, probes = None, [], None
    try:
        backend = MockBackend() if cluster is None else RealBackend(cluster, tmp)

        def worker(name):
            w = backend.worker(os.path.join(tmp, name), kafka_opts, worker_args)
            workers.append(w)
            return w.start()
        a = worker("a")
        b = worker("b") if kind == "restart" else None
        members = [w for w in (a, b) if w]
        # Settled: every partition held by one ready worker, and (restart) B among them; A
        # alone holding all 8 before B joined is not yet the group the restart starts from.
        t.deadline_wait(lambda: settled(holdings(members), members), timeout,
                        "the first assignment", interval=POLL_S)
        probes = Probes(backend)
        probes.start()
        t.deadline_wait(lambda: len(probes.done) >= 4, timeout, "probes flowing")
        held_before = {p: ("a" if hs[0][0] is a else "b")
                       for p, hs in holdings(members).items() if hs}
        instance_before = b.stats().get("group_instance_id") if b else None
        a_log_at = os.path.getsize(a.log_path)
        if kind == "join":
            t0 = time.monotonic()
            b = worker("b")
        else:
            b.proc.send_signal(signal.SIGKILL)
            b.proc.wait()
            b.log.close()
            t0 = time.monotonic()
            b.start()
        processed = {}  # (partition, k) -> when first seen processed
        settled_at = None
        end = t0 + timeout
        while time.monotonic() < end:
            if probes.error:
                raise probes.error
            now = time.monotonic()
            hold = holdings([a, b])
            delivered = len(probes.done)
            for p, hs in hold.items():
                applied = max((o for _, o, _ in hs), default=0)
                for k in range(min(applied, delivered)):
                    processed.setdefault((p, k), now)
            one_owner = all(len(hs) == 1 and hs[0][2] for hs in hold.values())
            if settled_at is None and one_owner and any(hs[0][0] is b for hs in hold.values()):
                settled_at, settled_k = now, delivered
            if settled_at is not None and all((p, k) in processed for p in range(PARTS)
                                              for k in range(settled_k)):
                break
            time.sleep(POLL_S)  # the poll interval of the measurement, not synchronisation
        else:
            raise AssertionError("%s: not recovered within %.0f s\n%s" % (
                kind, timeout, "\n".join(w.tail() for w in workers)))
        recovered = time.monotonic() - t0
        after = [k for k, at in enumerate(probes.done[:settled_k]) if at >= t0]
        by_part = {p: max((processed[(p, k)] - probes.done[k] for k in after), default=0.0)
                   for p in range(PARTS)}
        held_by_new = [p for p, hs in holdings([a, b]).items() if hs and hs[0][0] is b]
        with open(a.log_path) as f:
            f.seek(a_log_at)
            a_revocations = [ln.strip() for ln in f if "revoked" in ln]
        res = {"stall": max(by_part.values()), "recovered": recovered,
               "stall_by_partition": by_part, "held_by_new": held_by_new,
               "held_before": held_before, "instance_before": instance_before,
               "instance_after": b.stats().get("group_instance_id"),
               "a_revocations": a_revocations}
        kept = [v for p, v in by_part.items() if p not in held_by_new]
        log("%s: stall %.1f s, recovered %.1f s (B holds %d partitions; the others' longest "
            "wait %.1f s; A's log after T0: %d revocation(s))" % (
                kind, res["stall"], recovered, len(held_by_new), max(kept, default=0.0),
                len(a_revocations)))
        if check is not None:
            probes.stop.set()
            probes.join(30)
            check(backend.consume, [probe_ids(k) for k in range(len(probes.done))], workers)
        return res
    finally:
        if probes is not None:
            probes.stop.set()
            probes.join(30)
        for w in workers:
            w.cleanup()
        if backend is not None:
            backend.close()
        if os.environ.get("REBALANCE_KEEP"):
            log("worker logs kept in %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        t.KAFKA_OPTS[:] = saved


def output_check(tc, reproduced_ok):
    """A `check` for measure() asserting with TestCase tc: the output topic holds exactly the
    probes, each from one raw record, and (unless reproduced_ok: a transaction the mock showed
    although aborted) each once."""
    def check(consume, probes, workers):
        expected = {("web", m) for ids in probes for m in ids}
        state = {}

        def complete():
            state["recs"] = consume()
            return expected <= {(r["source"], r["messageId"]) for r in state["recs"]}
        try:
            t.deadline_wait(complete, t.WAIT, "every probe in the output", interval=0.5)
        except AssertionError:
            raise AssertionError("\n".join(w.tail() for w in workers))
        by_key = collections.defaultdict(list)
        for r in state["recs"]:
            by_key[(r["source"], r["messageId"])].append(r)
        tc.assertEqual(set(by_key), expected, "only the probes, each of them")
        for k, rs in by_key.items():
            tc.assertEqual(len({r["input"] for r in rs}), 1,
                           "%s from two raw records: a duplicate passed" % (k,))
            if not reproduced_ok:
                tc.assertEqual(len(rs), 1, "%s appears %d times" % (k, len(rs)))
    return check


def assert_kept_flowing(tc, res, bound):
    """Asserts with TestCase tc that no partition the new worker did not take (after a join)
    had a probe wait `bound` seconds or more: cooperative-sticky never stopped them."""
    for p in range(PARTS):
        if p in res["held_by_new"]:
            continue
        tc.assertLess(res["stall_by_partition"][p], bound,
                      "partition %d stayed with the first worker and should never have "
                      "stopped (cooperative-sticky): stalled %.1f s" %
                      (p, res["stall_by_partition"][p]))


def main(argv):
    kind = argv[1] if len(argv) > 1 else "join"
    runs, opts, wargs, real, i = 1, None, [], False, 2
    if len(argv) > 2 and argv[2].isdigit():
        runs, i = int(argv[2]), 3
    while i < len(argv):
        if argv[i] == "--kafka-opt":
            opts = (opts or []) + [argv[i + 1]]
        elif argv[i] == "--worker-arg":
            wargs.append(argv[i + 1])
        elif argv[i] == "--real":
            real = True
            i -= 1
        elif argv[i] == "--cluster":
            real = argv[i + 1]
        else:
            raise SystemExit(__doc__)
        i += 2
    if kind not in ("join", "restart"):
        raise SystemExit(__doc__)
    default = "none (the recommended defaults)" if real else t.KAFKA_OPTS
    print("kafka options: %s; worker args: %s" % (opts if opts is not None else default, wargs))
    cluster = None
    if real is True:
        import realcluster
        cluster = realcluster.RealCluster().start()
    elif real:
        import realcluster
        cluster = realcluster.RealCluster()
        shutil.rmtree(cluster.dir)
        cluster.dir = real
        with open(os.path.join(real, "bootstrap")) as f:
            cluster.bootstrap = f.read().strip()
    try:
        for _ in range(runs):
            measure(kind, opts, wargs, cluster=cluster)
    finally:
        if real is True:
            cluster.stop()


if __name__ == "__main__":
    main(sys.argv)
