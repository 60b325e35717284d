"""Access control: --write-keys-file (start, merge, SIGHUP reload good and bad), the admin token
on /stats and /metrics, and what never reaches the server log (keys, event data).
"""

import os
import shutil
import signal
import tempfile
import threading
import unittest

from harness import Server, ServerTestCase, basic, log_cat, new_id, run_cli, track

ADMIN = "adm-9f2c41d7e0"
# Key strings that look like nothing else in a log line, so a leak is easy to spot.
FLAG_KEY = "wk-flag-5b1e"
FILE_KEYS = ["wk-file-a-77c3", "wk-file-b-0d9e"]


def write(path, text):
    """Replaces `path` atomically, as an operator's deploy tool would."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class KeysFile(unittest.TestCase):
    """One server started with a flag key plus a keys file, reloaded with SIGHUP."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ingestd-access-")
        cls.keys = os.path.join(cls.tmp, "keys.txt")
        write(cls.keys, "# write keys of ingestd\n\n%s:web\n  %s:ios  \n" % tuple(FILE_KEYS))
        cls.srv = Server(keys=[FLAG_KEY + ":flags"], args=["--write-keys-file", cls.keys])
        try:
            cls.srv.start()
        except BaseException:
            cls.srv.cleanup()
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            cls.srv.stop()
        finally:
            cls.srv.cleanup()
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def send(self, key):
        mid = new_id()
        return mid, self.srv.batch([track(mid=mid)], key=key)

    def source_of(self, mid):
        evs = [e for e in log_cat(self.srv.data_dir) if e["messageId"] == mid]
        self.assertEqual(len(evs), 1, evs)
        return evs[0]["source"]

    def reload(self, text):
        """Writes the file, sends SIGHUP and returns the server log line that answers it."""
        start = len(self.srv.lines)
        write(self.keys, text)
        self.srv.signal(signal.SIGHUP)
        return self.srv.wait_for_log(r"SIGHUP: write keys", start=start)

    def test_0_keys_from_flags_and_file_merge(self):
        for key, source in ((FLAG_KEY, "flags"), (FILE_KEYS[0], "web"), (FILE_KEYS[1], "ios")):
            mid, r = self.send(key)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(self.source_of(mid), source)
        _, r = self.send("wk-unknown")
        self.assertEqual(r.status, 401, r)
        self.assertEqual(self.srv.stats()["auth"]["write_keys"], 3)
        self.srv.wait_for_log(r"write keys: 3 in force \(1 from flags, 2 from ")

    def test_1_reload_good_file(self):
        line = self.reload("%s:web\nwk-new-c1f0:android\n" % FILE_KEYS[0])
        self.assertIn("write keys reloaded", line)
        self.assertIn("3 keys in force", line)
        mid, r = self.send("wk-new-c1f0")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.source_of(mid), "android")
        _, r = self.send(FILE_KEYS[1])  # dropped from the file: revoked
        self.assertEqual(r.status, 401, r)
        for key in (FLAG_KEY, FILE_KEYS[0]):  # the flag key stays, the kept file key too
            _, r = self.send(key)
            self.assertEqual(r.status, 200, r)
        self.assertEqual(self.srv.stats()["auth"]["write_keys"], 3)

    def test_2_reload_bad_file_keeps_old_keys(self):
        self.reload("%s:web\nwk-new-c1f0:android\n" % FILE_KEYS[0])
        cases = [
            ("wk-ok-1\nwk bad\n", ":2: blank, control character"),
            ("wk-ok-1\n:nokey\n", ":2: empty write key"),
            ("# header\nwk-ok-1\n\nwk-ok-1:other\n", ":4: write key given twice (also on line 2)"),
            ("%s:again\n" % FLAG_KEY, ":1: write key also given by --write-key"),
        ]
        for text, reason in cases:
            with self.subTest(reason=reason):
                line = self.reload(text)
                self.assertIn("ERROR", line)
                self.assertIn("previous keys stay in force", line)
                self.assertIn(self.keys + reason, line)
                # The old set is still the one in force, whole.
                _, r = self.send("wk-new-c1f0")
                self.assertEqual(r.status, 200, r)
                _, r = self.send("wk-ok-1")
                self.assertEqual(r.status, 401, r)
        # A missing file is a bad file too.
        start = len(self.srv.lines)
        os.unlink(self.keys)
        self.srv.signal(signal.SIGHUP)
        line = self.srv.wait_for_log(r"SIGHUP: write keys", start=start)
        self.assertIn("No such file", line)
        _, r = self.send("wk-new-c1f0")
        self.assertEqual(r.status, 200, r)

    def test_3_reload_under_load(self):
        """Requests in flight across many swaps each see one whole key set: a key present in
        every version is never refused, one present in none is never accepted."""
        versions = ["wk-steady-1:steady\nwk-v%d:v\n" % i for i in range(12)]
        self.reload(versions[0])
        stop = threading.Event()
        bad = []
        sent = []

        def client(key, want):
            while not stop.is_set():
                mid = new_id()
                r = self.srv.batch([track(mid=mid)], key=key)
                if r.status != want:
                    bad.append((key, r))
                elif want == 200:
                    sent.append(mid)

        threads = [threading.Thread(target=client, args=("wk-steady-1", 200)),
                   threading.Thread(target=client, args=("wk-steady-1", 200)),
                   threading.Thread(target=client, args=("wk-never", 401))]
        for t in threads:
            t.start()
        try:
            for text in versions[1:]:
                self.reload(text)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=30)
        self.assertEqual(bad[:3], [])
        self.assertGreater(len(sent), 0)
        logged = {e["messageId"] for e in log_cat(self.srv.data_dir) if e["source"] == "steady"}
        self.assertEqual(set(sent) - logged, set())

    def test_4_emptied_file_keeps_flag_keys(self):
        """With keys from flags too, an empty file is valid: it revokes every file key."""
        line = self.reload("# every file key revoked\n")
        self.assertIn("write keys reloaded", line)
        self.assertIn("1 keys in force (1 from flags)", line)
        _, r = self.send("wk-steady-1")
        self.assertEqual(r.status, 401, r)
        _, r = self.send(FLAG_KEY)
        self.assertEqual(r.status, 200, r)

    def test_9_no_key_in_server_log(self):
        keys = [FLAG_KEY, "wk-new-c1f0", "wk-ok-1", "wk-steady-1"] + FILE_KEYS
        with self.srv._lines_lock:
            leaked = [l for l in self.srv.lines if any(k in l for k in keys)]
        self.assertEqual(leaked, [])


class KeysFileAtStart(unittest.TestCase):
    """A bad keys file stops `serve` with exit 2 and FILE:LINE, before it listens."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ingestd-access-")
        self.keys = os.path.join(self.tmp, "keys.txt")
        self.data = os.path.join(self.tmp, "data")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def serve(self, text, *extra):
        if text is not None:
            write(self.keys, text)
        return run_cli(["serve", "--listen", "127.0.0.1:0", "--data", self.data,
                        "--write-keys-file", self.keys] + list(extra))

    def test_bad_files(self):
        cases = [
            ("wk-a\n\n# c\nwk-secret-b:src x\n", ":4: blank, control character", ()),
            ("wk-a\nwk-secret-b:\n", ":2: empty source after ':'", ()),
            ("wk-a\nwk-a\n", ":2: write key given twice (also on line 1)", ()),
            ("wk-secret-b\n", ":1: write key also given by --write-key",
             ("--write-key", "wk-secret-b")),
            ("# nothing\n", ": no write key in the file", ()),
            (None, ": No such file", ()),
        ]
        for text, reason, extra in cases:
            with self.subTest(reason=reason):
                if text is None and os.path.exists(self.keys):
                    os.unlink(self.keys)
                p = self.serve(text, *extra)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn("--write-keys-file: " + self.keys + reason, p.stderr)
                self.assertNotIn("wk-secret-b", p.stderr)
                self.assertNotIn("listening", p.stderr)

    def test_keys_file_alone_is_enough(self):
        write(self.keys, "wk-only:solo\n")
        srv = Server(keys=[], args=["--write-keys-file", self.keys])
        with srv:
            mid = new_id()
            r = srv.batch([track(mid=mid)], key="wk-only")
            self.assertEqual(r.status, 200, r)
            self.assertEqual([e["source"] for e in log_cat(srv.data_dir)
                              if e["messageId"] == mid], ["solo"])

    def test_no_key_at_all(self):
        p = run_cli(["serve", "--listen", "127.0.0.1:0", "--data", self.data])
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--write-keys-file", p.stderr)

    def test_sighup_without_keys_file(self):
        srv = Server(keys=["wk-x"])
        with srv:
            start = len(srv.lines)
            srv.signal(signal.SIGHUP)
            srv.wait_for_log(r"SIGHUP: no --write-keys-file", start=start)
            self.assertEqual(srv.batch([track(mid=new_id())]).status, 200)


class AdminToken(ServerTestCase):
    """With --admin-token, /stats and /metrics need it; /healthz does not."""

    KEYS = ("wk-admin-test",)
    ARGS = ("--admin-token", ADMIN)

    def assert_denied(self, r, method="GET"):
        self.assertEqual(r.status, 401, r)
        self.assertEqual(r.header("WWW-Authenticate"), 'Bearer realm="ingestd"')
        if method == "GET":
            self.assertError(r, 401)

    def test_stats_and_metrics_need_the_token(self):
        for path in ("/stats", "/metrics"):
            for method in ("GET", "HEAD"):
                with self.subTest(path=path, method=method):
                    self.assert_denied(self.srv.request(method, path), method)
                    self.assert_denied(self.srv.request(
                        method, path, headers={"Authorization": "Bearer wrong"}), method)
                    self.assert_denied(self.srv.request(
                        method, path, headers={"Authorization": "Bearer " + ADMIN[:-1]}),
                        method)
                    self.assert_denied(self.srv.request(
                        method, path, headers={"Authorization": basic(ADMIN)}), method)
                    # A write key is no admin token.
                    self.assert_denied(self.srv.request(
                        method, path, headers={"Authorization": "Bearer wk-admin-test"}),
                        method)
                    r = self.srv.request(method, path,
                                         headers={"Authorization": "Bearer " + ADMIN})
                    self.assertEqual(r.status, 200, r)

    def test_healthz_stays_open(self):
        self.assertEqual(self.srv.get("/healthz").status, 200)
        self.assertEqual(self.srv.request("HEAD", "/healthz").status, 200)

    def test_harness_sends_the_token(self):
        self.assertIn("limits", self.srv.stats())
        self.assertIn("ingestd_rate_limited_requests_total", self.srv.metrics().body.decode())

    def test_denials_counted(self):
        before = self.srv.stats()["requests"]["by_status"].get("401", 0)
        self.srv.get("/stats")
        after = self.srv.stats()["requests"]["by_status"].get("401", 0)
        self.assertEqual(after, before + 1)


class NoEventDataInLogs(unittest.TestCase):
    """Whatever a client sends, good or bad, its event data never reaches the server log."""

    def test_bodies_never_logged(self):
        marker = "evdata-" + new_id()
        srv = Server(keys=["wk-logs"], args=["--log-level", "debug", "--rate-limit", "5"])
        with srv:
            good = [track(mid=new_id(), userId=marker, properties={"p": marker})]
            self.assertEqual(srv.batch(good).status, 200)
            bodies = [
                '{"batch":[{"type":"track","userId":"%s"' % marker,           # truncated JSON
                '{"batch":[{"type":"nope","userId":"%s"}]}' % marker,           # bad event
                '{"writeKey":"%s","batch":[]}' % marker,                         # unknown key
                '{"batch":[' + ",".join(['{"type":"track","event":"e","userId":"%s"}'
                                         % marker] * 10) + ']}',                  # rate limited
            ]
            for b in bodies:
                srv.post("/v1/batch", b, headers={"Content-Type": "application/json",
                                                  "Authorization": basic("wk-logs")})
            srv.post("/v1/batch", "{}", headers={"Authorization": basic(marker)})
            srv.stop()
            with srv._lines_lock:
                leaked = [l for l in srv.lines if marker in l]
            self.assertEqual(leaked, [])


if __name__ == "__main__":
    unittest.main()
