"""The real-cluster fixture: a 3-node Apache Kafka (scripts/kafka-cluster) for one test module.

    from realcluster import RealTestCase, count_output, start_module_cluster

    def setUpModule():
        start_module_cluster()             # stopped at the module's end, even on failure

    class T(RealTestCase):                 # self.cluster; edges and workers cleaned up
        def test_x(self):
            self.cluster.create_topic("raw-x", 8)   # replication factor 3, on every broker
            w = self.worker("w1", "raw-x", "out-x")  # RealWorker, started
            e = self.edge("raw-x", ["key:source"])   # harness.Server --role edge, started
            self.cluster.kill_node(2); self.cluster.start_node(2)
            counts = count_output(self.cluster.consume("out-x"), acked)  # read_committed

`scripts/kafka-cluster install` must have run (scripts/test does it before the Release tests):
without it, start fails and so do the tests (they never skip). The cluster's port block is a free
one, so several runs can share the machine. If the test process dies without its cleanup (a
ctest timeout kills it), a guard process started with the cluster notices its stdin closing and
stops the cluster.
"""
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from test_worker import BIN, KCAT, Worker  # (it puts tests/integration on sys.path)
from harness import Server, deadline_wait  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.abspath(os.path.join(HERE, "..", "..", "scripts", "kafka-cluster"))

# Runs beside the test: blocks on its stdin (a pipe from the test process) and stops the cluster
# when it closes, that is when the test process ends, however it ends; then removes its dir
# unless INGESTD_TEST_KEEP is set (after a clean stop, stop() already did both).
_GUARD = ("import os, shutil, subprocess, sys\n"
          "sys.stdin.read()\n"
          "if os.path.exists(os.path.join(sys.argv[2], 'cluster.json')):\n"
          "    subprocess.run([sys.executable, sys.argv[1], 'stop', sys.argv[2]],\n"
          "                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
          "if not os.environ.get('INGESTD_TEST_KEEP'):\n"
          "    shutil.rmtree(sys.argv[2], ignore_errors=True)\n")


class ClusterError(AssertionError):
    pass


class RealCluster:
    """A running 3-node cluster in a temporary dir; `bootstrap` is its broker list. With
    secure=True it also has SASL_SSL listeners (SCRAM-SHA-512, a test CA): `secure_bootstrap`
    is their list and `client_opts` the librdkafka options a client needs there
    (["security.protocol=SASL_SSL", ...], from kafka-cluster's DIR/secure/client.conf)."""

    def __init__(self, nodes=3, secure=False):
        self.nodes, self.secure = nodes, secure
        self.dir = tempfile.mkdtemp(prefix="ingestd-kafka-real-")
        self.bootstrap = self.secure_bootstrap = None
        self.client_opts = []
        self.guard = None
        self.start_seconds = None

    def run(self, *args, timeout=180):
        r = subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True,
                           text=True, timeout=timeout)
        if r.returncode != 0:
            raise ClusterError("kafka-cluster %s: exit %d\n%s%s" % (
                " ".join(args), r.returncode, r.stdout, r.stderr))
        return r.stdout

    def start(self):
        t0 = time.monotonic()
        self.guard = subprocess.Popen([sys.executable, "-c", _GUARD, SCRIPT, self.dir],
                                      stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True)
        out = self.run("start", self.dir, "--nodes", str(self.nodes),
                       *(["--secure"] if self.secure else []), timeout=300)
        lines = [ln for ln in out.splitlines() if ln.startswith("BOOTSTRAP ")]
        if not lines:
            raise ClusterError("kafka-cluster start printed no BOOTSTRAP line: %r" % out)
        self.bootstrap = lines[0].split()[1]
        if self.secure:
            lines = [ln for ln in out.splitlines() if ln.startswith("SECURE_BOOTSTRAP ")]
            if not lines:
                raise ClusterError("kafka-cluster start --secure printed no SECURE_BOOTSTRAP "
                                   "line: %r" % out)
            self.secure_bootstrap = lines[0].split()[1]
            with open(os.path.join(self.dir, "secure", "client.conf")) as f:
                self.client_opts = [ln.strip() for ln in f if ln.strip()]
        self.start_seconds = time.monotonic() - t0
        print("real cluster: %d nodes up in %.1f s at %s" % (self.nodes, self.start_seconds,
                                                             self.bootstrap), file=sys.stderr)
        return self

    def stop(self):
        """Stops every node (the script SIGKILLs one that does not stop in time), then the
        guard; removes the dir unless INGESTD_TEST_KEEP is set."""
        try:
            if os.path.exists(os.path.join(self.dir, "cluster.json")):
                self.run("stop", self.dir, timeout=120)
        finally:
            if self.guard is not None:
                self.guard.stdin.close()
                self.guard.wait(timeout=120)
            if os.environ.get("INGESTD_TEST_KEEP"):
                print("real cluster: kept %s" % self.dir, file=sys.stderr)
            else:
                shutil.rmtree(self.dir, ignore_errors=True)

    def create_topic(self, name, partitions, **config):
        """Replication factor 3; returns once every broker serves it with leaders."""
        self.run("create-topic", self.dir, name, str(partitions),
                 *["%s=%s" % (k.replace("_", "."), v) for k, v in config.items()])

    def kill_node(self, node):
        """SIGKILL one broker+controller node (1..3)."""
        self.run("kill", self.dir, str(node))

    def start_node(self, node):
        """Starts a killed node again; returns once it is a broker in the metadata."""
        self.run("start-node", self.dir, str(node))

    def log_tail(self, node, lines=40):
        with open(os.path.join(self.dir, "node%d" % node, "server.log"), errors="replace") as f:
            return "".join(f.readlines()[-lines:])

    def consume(self, topic, max_ms=30000):
        """Every record of `topic` with isolation.level=read_committed (kcat_lite consume):
        dicts with partition, offset, source, messageId, input (the ingestd-input header,
        "P:O" or None) and value."""
        r = subprocess.run([KCAT, "consume", "--brokers", self.bootstrap, "--topic", topic,
                            "--max-ms", str(max_ms)], capture_output=True, text=True,
                           timeout=max_ms / 1000 + 30)
        if r.returncode != 0:
            raise ClusterError("kcat_lite consume %s: %s" % (topic, r.stderr[-2000:]))
        return [json.loads(line) for line in r.stdout.splitlines()]


CURRENT = None  # the running module's cluster (RealTestCase.cluster)


def start_module_cluster(nodes=3, secure=False):
    """Starts a cluster for the calling test module and registers its stop as a module
    cleanup (it runs after tearDownModule, also when setUpModule or a test failed)."""
    global CURRENT
    c = RealCluster(nodes, secure)
    try:
        c.start()
    except BaseException:
        c.stop()
        raise
    unittest.addModuleCleanup(c.stop)
    CURRENT = c
    return c


class RealWorker(Worker):
    """`ingestd worker` on the real cluster: no --mirror-offsets (Kafka stores transactional
    offsets), and no --kafka-opt unless given: the defaults docs/scale-out.md recommends
    (static membership, cooperative-sticky, librdkafka's session.timeout.ms of 45 s)."""

    def __init__(self, cluster, data_dir, raw, out, group="workers", kafka_opts=(), args=(),
                 extra_env=None, brokers=None):
        super().__init__(cluster, data_dir, group=group, extra_env=extra_env, args=args)
        self.raw, self.out, self.kafka_opts = raw, out, list(kafka_opts)
        self.brokers = brokers or cluster.bootstrap  # e.g. cluster.secure_bootstrap

    def argv(self):
        argv = [BIN, "worker", "--kafka-brokers", self.brokers, "--raw-topic", self.raw,
                "--out-topic", self.out, "--group", self.group, "--data", self.data_dir,
                "--listen", "127.0.0.1:0", "--log-level", "info"]
        for o in self.kafka_opts:
            argv += ["--kafka-opt", o]
        return argv


Counts = collections.namedtuple("Counts", "acked distinct records lost duplicated "
                                          "lineage_conflicts unacked_seen examples")


def count_output(recs, acked):
    """Counts an output topic read read_committed against the acknowledged (source, messageId)
    set: lost = acknowledged but absent; duplicated = present more than once; lineage
    conflicts = one event produced from two different raw records (its `ingestd-input`
    headers differ); unacked_seen = present but never acknowledged (allowed: a request
    answered 503 may still have landed)."""
    by_key = collections.defaultdict(list)
    for r in recs:
        by_key[(r["source"], r["messageId"])].append(r)
    lost = sorted(set(acked) - set(by_key))
    dup = {k: len(rs) for k, rs in by_key.items() if len(rs) > 1}
    conflicts = {k: sorted({r["input"] for r in rs}) for k, rs in by_key.items()
                 if len({r["input"] for r in rs}) > 1}
    return Counts(acked=len(acked), distinct=len(by_key), records=len(recs), lost=len(lost),
                  duplicated=len(dup), lineage_conflicts=len(conflicts),
                  unacked_seen=len(set(by_key) - set(acked)),
                  examples={"lost": lost[:5], "duplicated": sorted(dup.items())[:5],
                            "conflicts": sorted(conflicts.items())[:5]})


class RealTestCase(unittest.TestCase):
    """A test on the module's cluster: a temporary dir, and every edge and worker it started
    killed at its end if still running (a passing test stops them itself, asserting exit 0)."""

    def setUp(self):
        self.cluster = CURRENT
        self.assertIsNotNone(self.cluster, "setUpModule must call start_module_cluster()")
        self.tmp = tempfile.mkdtemp(prefix="ingestd-real-")
        self.servers, self.workers = [], []

    def tearDown(self):
        for s in self.servers:
            s.cleanup()
        for w in self.workers:
            w.cleanup()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def edge(self, raw, keys, args=(), brokers=None, env=None):
        """`ingestd serve --role edge` on the cluster (or on `brokers`), started (the
        integration harness's Server: every answer is checked against openapi.yaml)."""
        s = Server(keys=keys, data_dir=os.path.join(self.tmp, "edge-%d" % len(self.servers)),
                   args=["--role", "edge", "--kafka-brokers", brokers or self.cluster.bootstrap,
                         "--raw-topic", raw] + list(args), env=env)
        self.servers.append(s)
        return s.start()

    def worker(self, name, raw, out, **kw):
        """A RealWorker on data dir TMP/name, started (a second call with the same name
        restarts on the same data dir)."""
        w = RealWorker(self.cluster, os.path.join(self.tmp, name), raw, out, **kw)
        self.workers.append(w)
        return w.start()

    def output_holds(self, out, want, what, timeout=90.0):
        """Waits until the topic `out`, read read_committed, holds every (source, messageId) in
        `want`; returns its records. On a timeout: what is missing, and the workers' logs."""
        state = {}

        def done():
            state["recs"] = self.cluster.consume(out)
            return set(want) <= {(r["source"], r["messageId"]) for r in state["recs"]}
        try:
            deadline_wait(done, timeout, what, interval=0.5)
        except AssertionError:
            got = {(r["source"], r["messageId"]) for r in state.get("recs", [])}
            raise AssertionError("%s: %d of %d missing, e.g. %s\n%s" % (
                what, len(set(want) - got), len(want), sorted(set(want) - got)[:5],
                "\n".join(w.tail() for w in self.workers)))
        return state["recs"]
