"""How long a worker joining, or killed (-9) and restarted, stops the pipeline (mock cluster).

    python3 tests/kafka/rebalance.py join|restart [RUNS] [--kafka-opt NAME=VALUE ...]
                                                   [--worker-arg ARG ...]
        (binaries from build/, or INGESTD_BIN / KAFKA_MOCK_BIN / KCAT_LITE_BIN)

Each run: a fresh mock cluster (3 brokers, raw:8, out:8) and worker A, which takes all 8
partitions. A probe producer then puts one record into every raw partition every PROBE_S
(the messageIds are chosen with Kafka's murmur2 so each probe hits each partition once: probe k
is offset k in every partition). At T0 either worker B starts (join), or B, which has been a
member since the start, is SIGKILLed and started again on the same data dir (restart). The
workers' /stats are polled every POLL_S; a probe record is processed once the applied offset
of its partition, in the stats of a worker that holds the partition, is past it. Reported:

- stall: the longest any probe record produced after T0 waited to be processed: how long a
  partition stood still;
- recovered: from T0 until the group has settled (every partition held by exactly one ready
  worker, the new or restarted worker holding at least one) and every probe produced before
  that moment has been processed: every partition processed again.

tests/kafka/test_rebalance.py asserts a bound on `recovered` with this code.
"""
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

    def __init__(self, mock):
        super().__init__(daemon=True)
        self.mock, self.stop, self.done = mock, threading.Event(), []  # done[k]: delivered at
        self.error = None

    def run(self):
        try:
            k = 0
            while not self.stop.is_set():
                start = time.monotonic()
                now = int(time.time() * 1000)
                t.produce(self.mock, [("web", m, t.event("web", m, now)) for m in probe_ids(k)])
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


def measure(kind, kafka_opts=None, worker_args=(), timeout=120.0, log=print, check=None):
    """One run; returns {"stall": s, "recovered": s, "stall_by_partition": {p: s},
    "held_by_new": [p...], "held_before": {p: "a"|"b"}, "instance_before"/"instance_after": B's
    group.instance.id before the kill (restart) and at the end} (seconds). check(mock, probe_ids_list,
    workers), when given, runs before the teardown (the output topic is still there)."""
    saved = list(t.KAFKA_OPTS)
    if kafka_opts is not None:
        t.KAFKA_OPTS[:] = kafka_opts
    tmp = tempfile.mkdtemp(prefix="ingestd-rebal-")
    mock = t.Mock(["raw:%d" % PARTS, "out:%d" % PARTS])
    workers, probes = [], None
    try:
        def worker(name):
            w = t.Worker(mock, os.path.join(tmp, name), group="rebal", args=list(worker_args))
            workers.append(w)
            return w.start()
        a = worker("a")
        b = worker("b") if kind == "restart" else None
        members = [w for w in (a, b) if w]
        t.deadline_wait(lambda: sum(len(h) == 1 and h[0][2] for h in
                                    holdings(members).values()) == PARTS, timeout,
                        "the first assignment", interval=POLL_S)
        probes = Probes(mock)
        probes.start()
        t.deadline_wait(lambda: len(probes.done) >= 4, timeout, "probes flowing")
        held_before = {p: ("a" if hs[0][0] is a else "b")
                       for p, hs in holdings(members).items() if hs}
        instance_before = b.stats().get("group_instance_id") if b else None
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
        res = {"stall": max(by_part.values()), "recovered": recovered,
               "stall_by_partition": by_part, "held_by_new": held_by_new,
               "held_before": held_before, "instance_before": instance_before,
               "instance_after": b.stats().get("group_instance_id")}
        log("%s: stall %.1f s, recovered %.1f s (B holds %d partitions)" % (
            kind, res["stall"], recovered, len(held_by_new)))
        if check is not None:
            probes.stop.set()
            probes.join(30)
            check(mock, [probe_ids(k) for k in range(len(probes.done))], workers)
        return res
    finally:
        if probes is not None:
            probes.stop.set()
            probes.join(30)
        for w in workers:
            w.cleanup()
        mock.close()
        if os.environ.get("REBALANCE_KEEP"):
            log("worker logs kept in %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        t.KAFKA_OPTS[:] = saved


def main(argv):
    kind = argv[1] if len(argv) > 1 else "join"
    runs, opts, wargs, i = 1, None, [], 2
    if len(argv) > 2 and argv[2].isdigit():
        runs, i = int(argv[2]), 3
    while i < len(argv):
        if argv[i] == "--kafka-opt":
            opts = (opts or []) + [argv[i + 1]]
        elif argv[i] == "--worker-arg":
            wargs.append(argv[i + 1])
        else:
            raise SystemExit(__doc__)
        i += 2
    if kind not in ("join", "restart"):
        raise SystemExit(__doc__)
    print("kafka options: %s; worker args: %s" % (opts if opts is not None else t.KAFKA_OPTS,
                                                 wargs))
    for _ in range(runs):
        measure(kind, opts, wargs)


if __name__ == "__main__":
    main(sys.argv)
