"""Real Node SDKs against the real ingestd, through a proxy that loses some of ingestd's answers.

One test per SDK: @segment/analytics-node, analytics-node (Segment's older library) and
@rudderstack/rudder-sdk-node, at the versions pinned in package-lock.json (installed here with
`npm ci` when node_modules is missing or stale: nodedeps.py). Each test starts ingestd
(tests/integration/harness.py) and the dropping proxy (proxy.py), then runs send.js, which uses
the SDK the documented way with only its host option pointed at the proxy, sends every event
type in many small batches, flushes, and prints the messageIds the SDK assigned. The proxy
loses the answer to every third new batch after ingestd accepted it (alternately by closing the
connection and by a 502), so the SDK sends that batch again.

Asserted from ingestd's log (`ingestd log cat`): every event the SDK sent is there exactly once,
with its type, the source of the write key it was sent with, and the SDK's library name; and
that the loss really happened and was really retried: the proxy dropped answers of both kinds,
each dropped batch came back with the same messageIds and got a 200, and ingestd's /stats
counted exactly the re-sent events as duplicates.

    cd tests/clients && INGESTD_BIN=../../build/ingestd python3 test_node_sdks.py -v
"""

import collections
import json
import os
import subprocess
import sys
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)

import harness  # noqa: E402
import nodedeps  # noqa: E402
from proxy import DroppingProxy  # noqa: E402

EVENTS_PER_TYPE = 6  # x 6 types = 36 events
FLUSH_AT = 4         # -> at least 9 batches, so every-3rd loses at least 3 answers
DROP_EVERY = 3
SEND_TIMEOUT = 180   # send.js gives up by itself after 90 s
TYPES = {"track", "identify", "page", "screen", "group", "alias"}

_deps_ready = None  # None: not tried yet; else the exception text, or "" when installed


def setUpModule():
    # Install once per process; a failure fails every test with npm's message.
    global _deps_ready
    if _deps_ready is None:
        try:
            nodedeps.ensure()
            _deps_ready = ""
        except nodedeps.NodeDepsError as e:
            _deps_ready = str(e)


class SdkCase:
    """Mixed into one unittest.TestCase per SDK."""

    SDK = None           # send.js's name for it
    PACKAGE = None       # npm package
    LIBRARY_NAME = None  # context.library.name as the SDK writes it

    def setUp(self):
        if _deps_ready:
            self.fail("installing the Node SDKs failed:\n" + _deps_ready)
        self.source = "src-" + self.SDK
        self.key = "key-" + self.SDK
        # A second key first, so the test sees the source follow the key the SDK used.
        self.srv = harness.Server(keys=["other-key:other-source",
                                        "%s:%s" % (self.key, self.source)])
        self.addCleanup(self.srv.cleanup)
        self.srv.start()
        self.proxy = DroppingProxy(self.srv.host, self.srv.port, drop_every=DROP_EVERY).start()
        self.addCleanup(self.proxy.stop)

    def send(self, run_id):
        """Runs send.js; returns its report (dict)."""
        cmd = ["node", os.path.join(HERE, "send.js"), self.SDK, self.proxy.url, self.key,
               run_id, str(EVENTS_PER_TYPE), str(FLUSH_AT)]
        p = subprocess.run(cmd, cwd=HERE, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=SEND_TIMEOUT)
        what = "%s\nexit %d\nstdout:\n%s\nstderr:\n%s\nproxy: %r\ningestd:\n%s" % (
            " ".join(cmd), p.returncode, p.stdout[-3000:], p.stderr[-3000:],
            self.proxy.snapshot(), self.srv.log())
        self.assertEqual(p.returncode, 0, what)
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        self.assertTrue(lines, what)
        report = json.loads(lines[-1])
        self.assertEqual(report["package"], self.PACKAGE, what)
        return report, what

    def test_every_event_logged_once_despite_lost_answers(self):
        run_id = "run-" + uuid.uuid4().hex
        report, what = self.send(run_id)
        sent = report["events"]

        # What the SDK says it sent: every event, each with its own messageId, none failed.
        self.assertEqual(len(sent), EVENTS_PER_TYPE * len(TYPES), what)
        self.assertEqual({e["type"] for e in sent}, TYPES, what)
        self.assertEqual(report["errors"], [], what)
        for e in sent:
            self.assertNotIn("error", e, what)
            self.assertIsInstance(e.get("messageId"), str, what)
            self.assertTrue(e["messageId"], what)
        by_id = {e["messageId"]: e for e in sent}
        self.assertEqual(len(by_id), len(sent), "the SDK reused a messageId: " + what)

        # The proxy has answered everything send.js waited for; stop it so its records are final.
        self.proxy.stop()
        records = self.proxy.snapshot()
        dropped = [r for r in records if r.action != "forwarded"]

        # What ingestd logged: each sent event exactly once, with its type and the key's source.
        logged = harness.log_cat(self.srv.data_dir)
        counts = collections.Counter(ev.get("messageId") for ev in logged)
        for mid, e in by_id.items():
            self.assertEqual(counts[mid], 1, "messageId %s (%s #%d) logged %d times\n%s"
                             % (mid, e["type"], e["seq"], counts[mid], what))
        self.assertEqual(len(logged), len(sent),
                         "log has events the SDK did not send: %r" %
                         [ev for ev in logged if ev.get("messageId") not in by_id][:3])
        for ev in logged:
            e = by_id[ev["messageId"]]
            self.assertEqual(ev.get("type"), e["type"], ev)
            self.assertEqual(ev.get("source"), self.source, ev)
            ctx = ev.get("context") or {}
            self.assertEqual(ctx.get("test"), {"run": run_id, "seq": e["seq"]}, ev)
            self.assertEqual((ctx.get("library") or {}).get("name"), self.LIBRARY_NAME, ev)
            for f in ("receivedAt", "timestamp"):
                self.assertIsInstance(ev.get(f), str, ev)

        # The loss happened, both ways, and each lost batch came back whole and was accepted.
        self.assertGreater(len(dropped), 0, "the proxy dropped nothing: %r" % records)
        self.assertEqual({r.action for r in dropped}, {"close", "502"}, records)
        for r in dropped:
            self.assertTrue(r.ids, "dropped a request without readable messageIds: %r" % r)
            later = records[records.index(r) + 1:]
            self.assertTrue(any(x.ids == r.ids and x.action == "forwarded" and x.status == 200
                                for x in later),
                            "the SDK did not resend the batch whose answer was lost: %r in %r"
                            % (r, records))

        # ingestd saw the retries and answered them as duplicates, exactly.
        forwarded_ids = [i for r in records if r.status == 200 for i in r.ids]
        resent = len(forwarded_ids) - len(set(forwarded_ids))
        self.assertGreaterEqual(resent, sum(len(r.ids) for r in dropped), records)
        st = self.srv.stats()["events"]
        self.assertEqual(st["accepted"], len(sent), st)
        self.assertEqual(st["duplicates"], resent, st)
        self.assertEqual(st["rejected"], 0, st)

        self.srv.stop()


class TestSegmentAnalyticsNode(SdkCase, unittest.TestCase):
    SDK = "segment-next"
    PACKAGE = "@segment/analytics-node"
    LIBRARY_NAME = "@segment/analytics-node"


class TestSegmentClassicAnalyticsNode(SdkCase, unittest.TestCase):
    SDK = "segment-classic"
    PACKAGE = "analytics-node"
    LIBRARY_NAME = "analytics-node"


class TestRudderStackNode(SdkCase, unittest.TestCase):
    SDK = "rudderstack"
    PACKAGE = "@rudderstack/rudder-sdk-node"
    LIBRARY_NAME = "analytics-node"  # RudderStack's SDK names itself so, after its Segment origin


if __name__ == "__main__":
    unittest.main()
