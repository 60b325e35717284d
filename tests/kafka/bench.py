"""Throughput of `ingestd worker` on librdkafka's mock cluster (docs/scale-out.md).

    python3 tests/kafka/bench.py [EVENTS] [DUP_PERCENT]     (binaries from build/, or the
                                                            INGESTD_BIN / KAFKA_MOCK_BIN /
                                                            KCAT_LITE_BIN variables)
Produces EVENTS raw events (DUP_PERCENT of them retries of earlier ones) the way an edge does,
then times one worker (8 raw + 8 output partitions, --max-batch 1000) from start to the last
record consumed, and checks the output holds each distinct event once.
"""
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_worker as t  # noqa: E402

n = int(sys.argv[1]) if len(sys.argv) > 1 else 50000
dup = int(sys.argv[2]) if len(sys.argv) > 2 else 10
random.seed(1)
tmp = tempfile.mkdtemp(prefix="ingestd-kbench-")
mock = t.Mock(["raw:8", "out:8"])
w = None
try:
    evs = []
    for i in range(n):
        j = random.randrange(i) if i and random.randrange(100) < dup else i
        evs.append(("web", "m%08d" % j, t.event("web", "m%08d" % j, 0)))
    t0 = time.monotonic()
    t.produce(mock, evs)
    t1 = time.monotonic()
    print("edge-style produce (kcat_lite): %d events in %.2f s" % (n, t1 - t0))
    w = t.Worker(mock, os.path.join(tmp, "w"), group="bench", args=["--max-batch", "1000"])
    t0 = time.monotonic()
    w.start()
    t.deadline_wait(lambda: w.stats()["events"]["consumed"] >= n, 600, "all consumed",
                    interval=0.05)
    t1 = time.monotonic()
    st = w.stats()
    print("worker: %d raw -> %d out (%d duplicates) in %.2f s incl. group join: %.0f events/s,"
          " %d transactions" % (n, st["events"]["produced"], st["events"]["duplicates"],
                                t1 - t0, n / (t1 - t0), st["transactions"]["committed"]))
    recs = t.consume(mock)
    distinct = {m for _, m, _ in evs}
    assert len(recs) == len(distinct) == len({r["messageId"] for r in recs}), "not exactly once"
    print("output: %d records = %d distinct events, each once" % (len(recs), len(distinct)))
    w.stop()
finally:
    if w is not None:
        w.cleanup()
    mock.close()
    shutil.rmtree(tmp, ignore_errors=True)
