"""Exactly once through SASL_SSL (TLS + SCRAM-SHA-512, or PLAIN: below) on a real Kafka cluster.

The cluster (`scripts/kafka-cluster start --secure`) has, besides its PLAINTEXT listeners, a
SASL_SSL listener on each node: TLS with a certificate of a test CA made with openssl, and
SCRAM-SHA-512 with one user added at format time (the storage tool's --add-scram). The edges and
workers are given only the SASL_SSL listeners and the pass-through options docs/scale-out.md
("Pointing it at a real cluster") documents: security.protocol, sasl.mechanisms,
sasl.username, sasl.password and ssl.ca.location. The workers get them as --kafka-opt flags,
the edges as INGESTD_KAFKA_OPTS (one NAME=VALUE a line: the password off the command line).

The case runs with SCRAM-SHA-512 when the binary's librdkafka is 2.6.1 or newer, after an edge
with a wrong password has failed to start. Older librdkafka (Debian 12 ships 2.0.2) puts its
client nonce twice into the SCRAM client-final-message, which Kafka 4 refuses (librdkafka
#4895): then an edge with the right password must fail to start with "invalid credentials", and
the case runs with SASL PLAIN over the same TLS listener (sasl.mechanisms=PLAIN, the same user
and password), the only SASL mechanism of Kafka's own that such a client can use there.

Then the case of test_real_worker_kill.py, shorter: two edges, two workers, HTTP clients
posting batches for 12 s (tests/kafka/realfaults.py's load: every fourth also through the other
edge), one worker SIGKILLed mid-load and restarted 2 s later. The output topic, read read_committed (over PLAINTEXT: the
reader is the test's, not the roles'), holds every acknowledged event exactly once.
"""
import ctypes
import os
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import HarnessError, deadline_wait  # noqa: E402
from realcluster import BIN, RealTestCase, count_output, start_module_cluster  # noqa: E402
from realfaults import KEYS, Load  # noqa: E402

PARTITIONS = 8
SCRAM_FIXED = 0x020601ff  # librdkafka 2.6.1: the first whose SCRAM Kafka 4 accepts
WAIT = 90.0
OUTAGE = 2.0  # seconds between the kill and the restart


def librdkafka():
    """The librdkafka the ingestd binary loads (ldd), opened with ctypes."""
    out = subprocess.run(["ldd", BIN], capture_output=True, text=True).stdout
    paths = [ln.split("=>")[1].split()[0] for ln in out.splitlines()
             if "librdkafka" in ln and "=>" in ln]
    lib = ctypes.CDLL(paths[0] if paths else "librdkafka.so.1")
    lib.rd_kafka_version_str.restype = ctypes.c_char_p
    return lib


def librdkafka_version():
    return librdkafka().rd_kafka_version()


def librdkafka_version_str():
    return librdkafka().rd_kafka_version_str().decode()


def setUpModule():
    start_module_cluster(secure=True)


class RealSecuredTest(RealTestCase):
    def test_sasl_ssl_scram_exactly_once(self):
        opts = self.cluster.client_opts
        self.assertEqual(sorted(o.split("=", 1)[0] for o in opts),
                         ["sasl.mechanisms", "sasl.password", "sasl.username",
                          "security.protocol", "ssl.ca.location"])
        self.assertIn("security.protocol=SASL_SSL", opts)
        self.assertIn("sasl.mechanisms=SCRAM-SHA-512", opts)
        secure = self.cluster.secure_bootstrap
        self.assertTrue(set(secure.split(",")).isdisjoint(self.cluster.bootstrap.split(",")))
        raw, out = "raw-sec", "out-sec"
        self.cluster.create_topic(raw, PARTITIONS)
        self.cluster.create_topic(out, PARTITIONS)

        if librdkafka_version() >= SCRAM_FIXED:
            # A wrong password: the edge cannot read the topic's partition count and exits.
            bad = [o if not o.startswith("sasl.password=") else "sasl.password=wrong"
                   for o in opts]
            why = r"(?i)authentication"
        else:
            # librdkafka before 2.6.1 puts its client nonce twice into the SCRAM
            # client-final-message; Kafka 4 compares the nonce strictly and refuses it
            # (librdkafka #4895): with the right password, the edge cannot authenticate.
            bad = opts
            why = r"invalid credentials with SASL mechanism SCRAM-SHA-512"
            opts = [o if not o.startswith("sasl.mechanisms=") else "sasl.mechanisms=PLAIN"
                    for o in opts]
        with self.assertRaises(HarnessError) as cm:
            self.edge(raw, KEYS, brokers=secure, env={"INGESTD_KAFKA_OPTS": "\n".join(bad)})
        self.assertRegex(str(cm.exception), why)
        mech = [o for o in opts if o.startswith("sasl.mechanisms=")][0].split("=", 1)[1]
        print("\nlibrdkafka %s: the case runs with SASL %s" % (librdkafka_version_str(), mech),
              file=sys.stderr)

        worker_opts = list(opts)
        a = self.worker("wa", raw, out, kafka_opts=worker_opts, brokers=secure)
        b = self.worker("wb", raw, out, kafka_opts=worker_opts, brokers=secure)
        a.wait_ready()
        b.wait_ready()
        deadline_wait(lambda: len(a.stats()["partitions"]) + len(b.stats()["partitions"])
                      == PARTITIONS and a.stats()["partitions"] and b.stats()["partitions"],
                      WAIT, "8 partitions split over the two workers")
        env = {"INGESTD_KAFKA_OPTS": "\n".join(opts)}
        edges = [self.edge(raw, KEYS, brokers=secure, env=env),
                 self.edge(raw, KEYS, brokers=secure, env=env)]

        # The kill case's load (100-event batches, as fast as answered), 12 s at most.
        load = Load(edges, "sec", batch=100, pace=0, max_batches=100, seconds=12.0)
        deadline_wait(lambda: load.acked_count() >= 1000 or
                      time.monotonic() > load.until - 3, 30, "load acknowledged",
                      interval=0.05)
        acked_at_kill = load.acked_count()
        self.assertGreater(acked_at_kill, 0, "the kill comes under load")
        b.kill()
        time.sleep(OUTAGE)  # the outage's length, not synchronisation
        b.start()
        load.run_out()
        load.stop()
        acked = set(load.acked)
        self.assertGreater(len(acked), acked_at_kill)
        state = {}

        def complete():
            state["recs"] = self.cluster.consume(out)
            return acked <= {(r["source"], r["messageId"]) for r in state["recs"]}
        try:
            deadline_wait(complete, WAIT, "every acknowledged event in the output", interval=1)
        except AssertionError:
            raise AssertionError("\n".join(w.tail() for w in self.workers))
        counts = count_output(state["recs"], acked)
        print("\nSASL_SSL (%s): %d events acknowledged (%d before the kill, %d batches "
              "through both edges); output: %d records, %d distinct, %d lost, %d duplicated, "
              "%d lineage conflicts" % (mech, len(acked), acked_at_kill, load.both,
                                        counts.records, counts.distinct, counts.lost,
                                        counts.duplicated, counts.lineage_conflicts),
              file=sys.stderr)
        self.assertEqual(counts.lost, 0, counts.examples)
        self.assertEqual(counts.duplicated, 0, counts.examples)
        self.assertEqual(counts.lineage_conflicts, 0, counts.examples)
        self.assertGreater(load.both, 0)
        # Both roles really went through the SASL_SSL listeners: the workers' stats count
        # what they produced there.
        produced = a.stats()["events"]["produced"] + b.stats()["events"]["produced"]
        self.assertGreater(produced, 0)
        for s in self.servers:
            if s.proc is not None and s.proc.poll() is None:
                s.stop()
        for w in self.workers:
            if w.proc is not None and w.proc.poll() is None:
                w.stop()


if __name__ == "__main__":
    unittest.main()
