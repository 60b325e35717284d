"""One real SDK against the real ingestd, through the proxy that loses answers: the test body that
test_node_sdks.py, test_python_sdks.py, test_go_sdks.py and test_java_sdk.py share.

A test class mixes SdkCase into unittest.TestCase and says how to run its sender (`command`):
a program that uses the SDK the documented way, with only its host option pointed at the
proxy, sends EVENTS_PER_TYPE events of each of the six types in batches of FLUSH_AT, flushes,
and prints one JSON line: {"package", "version", "events": [{"type", "seq", "messageId",
"error"?}], "errors": [...], "big": {...} or null}. Each event carries context.test = {run,
seq}. With BIG (the sender's last argument "1") it also sends one track event over 32 KB and
reports it apart as "big": {"messageId"?, "error"?}.

The proxy (proxy.py) loses the answer to every third new batch after ingestd accepted it
(alternately by closing the connection and by a 502), so the SDK sends that batch again;
with REFUSE it first answers new batches with those statuses (429, 503) without forwarding.

Asserted from ingestd's log (`ingestd log cat`): every event the SDK sent is there exactly once,
with its type, the source of the write key it was sent with, and the SDK's library name; that
the loss really happened and was really retried (each dropped batch came back with the same
messageIds and got a 200; ingestd's /stats counted exactly the re-sent events as duplicates);
and what differs between SDKs: the Content-Encoding of every batch (ENCODING), where the write
key travels (KEY_IN), the path (PATH), the batch size (at most FLUSH_AT events), the refused
statuses retried,
and what becomes of the event over 32 KB (BIG: "sdk" drops it before sending, "server" sends
it and ingestd rejects it alone).
"""

import collections
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import harness  # noqa: E402
from proxy import DroppingProxy  # noqa: E402

EVENTS_PER_TYPE = 6  # x 6 types = 36 events
FLUSH_AT = 4         # -> at least 9 batches, so every-3rd loses at least 3 answers
DROP_EVERY = 3
SEND_TIMEOUT = 180
TYPES = {"track", "identify", "page", "screen", "group", "alias"}


def make_cert(directory):
    """A self-signed certificate for 127.0.0.1/localhost (the test CA); returns (cert, key)."""
    cert = os.path.join(directory, "cert.pem")
    key = os.path.join(directory, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                    "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", key, "-out", cert],
                   check=True, capture_output=True, timeout=30)
    return cert, key


class SdkCase:
    """Mixed into one unittest.TestCase per SDK (and per transport)."""

    SDK = None           # the sender's name for it
    PACKAGE = None       # package as the registry names it
    LIBRARY_NAME = None  # context.library.name as the SDK writes it
    TLS = False          # the SDK talks HTTPS (test CA) to the proxy, the proxy HTTPS to ingestd
    ENCODING = "any"     # Content-Encoding of every batch ("gzip" or None); "any": not checked
    KEY_IN = None        # where the write key travels: "basic", "body", ...; None: not checked
    REFUSE = ()          # statuses the proxy answers first, each to a new batch; all retried
    REBATCHES = False    # a refused batch may come back re-cut (its events in other batches)
    BIG = None           # None: no event over 32 KB; "sdk" or "server": who refuses it
    PATH = "/v1/batch"   # the path every batch is posted to
    FLUSH_AT = FLUSH_AT  # events per batch the sender asks for (more: fewer batches, drops)
    DROP_KINDS = {"close", "502"}  # the ways answers were lost (fewer batches: fewer ways)

    def deps_error(self):
        """Text of the failed install, or "" (installs on first call)."""
        return ""

    def command(self, url, key, run_id):
        """(argv, extra environment) of the sender."""
        raise NotImplementedError

    def setUp(self):
        err = self.deps_error()
        if err:
            self.fail("installing %s failed:\n%s" % (self.PACKAGE, err))
        self.source = "src-" + self.SDK
        self.key = "key-" + self.SDK
        self.tls_ca = None
        # The admin token opens /v1/log?log=rejected, where an event over 32 KB ends up.
        args, upstream_ssl, tls = ["--admin-token", "sdk-test-admin"], None, None
        if self.TLS:
            self.tmp = tempfile.mkdtemp(prefix="ingestd-sdk-tls-")
            self.addCleanup(shutil.rmtree, self.tmp, True)
            cert, keyfile = make_cert(self.tmp)
            self.tls_ca = cert
            args += ["--tls-cert", cert, "--tls-key", keyfile]
            upstream_ssl = ssl.create_default_context(cafile=cert)
            tls = (cert, keyfile)
        # A second key first, so the test sees the source follow the key the SDK used.
        self.srv = harness.Server(keys=["other-key:other-source",
                                        "%s:%s" % (self.key, self.source)],
                                  args=args, tls_ca=self.tls_ca)
        self.addCleanup(self.srv.cleanup)
        self.srv.start()
        self.proxy = DroppingProxy(self.srv.host, self.srv.port, drop_every=DROP_EVERY,
                                   refuse=self.REFUSE, tls=tls, upstream_ssl=upstream_ssl).start()
        self.addCleanup(self.proxy.stop)

    def send(self, run_id):
        """Runs the sender; returns (its report, a description for failures)."""
        cmd, env = self.command(self.proxy.url, self.key, run_id)
        p = subprocess.run(cmd, cwd=HERE, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=SEND_TIMEOUT, env=dict(os.environ, **env))
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

        # The proxy has answered everything the sender waited for; stop it so its records are final.
        self.proxy.stop()
        records = self.proxy.snapshot()
        dropped = self.proxy.dropped()
        big_id = self.check_big(report.get("big"), records, what)

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
        self.assertEqual({r.action for r in dropped}, self.DROP_KINDS, records)
        for r in dropped:
            self.assertTrue(r.ids, "dropped a request without readable messageIds: %r" % r)
            later = records[records.index(r) + 1:]
            self.assertTrue(any(x.ids == r.ids and x.action == "forwarded" and x.status == 200
                                for x in later),
                            "the SDK did not resend the batch whose answer was lost: %r in %r"
                            % (r, records))

        # The statuses refused before ingestd saw the batch: each refused event came back (the
        # same batch, or re-cut when REBATCHES) and was accepted.
        refused = [r for r in records if r.action == "refused"]
        self.assertEqual([r.status for r in refused], list(self.REFUSE), records)
        for r in refused:
            later = records[records.index(r) + 1:]
            for mid in r.ids:
                self.assertTrue(any(mid in x.ids and x.status == 200 and x.action == "forwarded"
                                    for x in later if x.ids),
                                "the SDK did not retry %s after a %d: %r" % (mid, r.status, records))
            if not self.REBATCHES:
                self.assertTrue(any(x.ids == r.ids for x in later),
                                "the batch refused with %d did not come back whole: %r"
                                % (r.status, records))

        # How the SDK sends: the encoding, where the key is, batches of at most FLUSH_AT events.
        posts = [r for r in records if r.ids]
        if self.ENCODING != "any":
            self.assertEqual({r.encoding for r in posts}, {self.ENCODING}, records)
        if self.KEY_IN is not None:
            self.assertEqual({r.key_in for r in posts}, {self.KEY_IN}, records)
        self.assertLessEqual(max(len(r.ids) for r in posts if big_id not in r.ids),
                             self.FLUSH_AT, records)
        self.assertEqual({r.path for r in posts}, {self.PATH}, records)

        # ingestd saw the retries and answered them as duplicates, exactly.
        forwarded_ids = [i for r in records if r.status == 200 for i in r.ids if i != big_id]
        resent = len(forwarded_ids) - len(set(forwarded_ids))
        self.assertGreaterEqual(resent, sum(len(r.ids) for r in dropped if big_id not in r.ids),
                                records)
        st = self.srv.stats()["events"]
        self.assertEqual(st["accepted"], len(sent), st)
        self.assertEqual(st["duplicates"], resent, st)
        self.assertEqual(st["rejected"], 1 if self.BIG == "server" else 0, st)

        self.srv.stop()

    def check_big(self, big, records, what):
        """Asserts what became of the event over 32 KB; returns its messageId (or None)."""
        if self.BIG is None:
            self.assertIsNone(big, what)
            return None
        self.assertIsInstance(big, dict, what)
        seen = [r for r in records if r.ids and big.get("messageId") in r.ids]
        if self.BIG == "sdk":
            # Refused by the SDK itself: never on the wire, and said so to the caller.
            self.assertTrue(big.get("error"), what)
            self.assertEqual(seen, [], what)
            return big.get("messageId")
        # Sent; ingestd took the rest of its batch and rejected it alone ("event too large"),
        # so the SDK saw a 200 and has nothing to retry.
        self.assertNotIn("error", big, what)
        self.assertTrue(seen and all(r.status == 200 for r in seen if r.action == "forwarded"),
                        what)
        rejected = self.srv.get("/v1/log?log=rejected&from=0&max=10",
                                headers=self.srv.admin_headers())
        self.assertEqual(rejected.status, 200, rejected)
        self.assertIn("event too large", rejected.body.decode(), rejected)
        return big["messageId"]
