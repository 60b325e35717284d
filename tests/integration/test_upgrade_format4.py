"""A data dir written at store format 3 (keys without their source's tag) is migrated on open.

tests/fixtures/datadir-format3.tar.gz (tests/fixtures/make_datadir_format3.py says how and by
which commit it was made) holds two data dirs with write keys kweb:web and kmob:mobile and
--young-keys 16: `clean` (SIGTERM; keys sealed in a generation and in the young store) and
`killed` (kill -9; the last 20 records past LMDB's applied offset). The new build rebuilds the
store from the log once, giving the keys of those records their source's tag.
"""

import datetime
import json
import os
import shutil
import tarfile
import tempfile
import unittest

from harness import Server, log_cat, run_cli, track

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures",
                       "datadir-format3.tar.gz")
KEYS = ("kweb:web", "kmob:mobile")
KEY_OF = {"web": "kweb", "mobile": "kmob"}
# --window 365d: the fixture's receivedAt are of the day it was made, and must stay in the window.
ARGS = ["--young-keys", "16", "--window", "365d", "--admin-token", "upgrade-admin"]
REBUILDING = "another format version: rebuilding it from the log"


class UpgradeFromFormat3(unittest.TestCase):

    def setUp(self):
        self.base = tempfile.mkdtemp(prefix="ingestd-upgrade4-")
        with tarfile.open(FIXTURE) as tar:
            tar.extractall(self.base)

    def tearDown(self):
        shutil.rmtree(self.base, ignore_errors=True)

    def retry_all(self, srv, old):
        """Sends every old event again on its source's key: each must be a duplicate of its
        first copy (offset = its place in the log, which starts at 0)."""
        for source, key in KEY_OF.items():
            mine = [(off, e) for off, e in enumerate(old) if e["source"] == source]
            self.assertGreaterEqual(len(mine), 35)
            r = srv.post_as_operator("/v1/batch?verbose=true",
                                     {"batch": [track(mid=e["messageId"]) for _, e in mine]}, key)
            self.assertEqual(r.status, 200, r)
            self.assertEqual((r.json["accepted"], r.json["duplicates"]), (0, len(mine)), r.json)
            got = [(v["status"], v.get("offset")) for v in r.json["results"]]
            self.assertEqual(got, [("duplicate", off) for off, _ in mine])

    def upgrade(self, name):
        data = os.path.join(self.base, name)
        old = log_cat(data)
        self.assertIn(len(old), (70, 80))
        made = datetime.datetime.fromisoformat(old[0]["receivedAt"].replace("Z", "+00:00"))
        age = datetime.datetime.now(datetime.timezone.utc) - made
        self.assertLess(age.days, 360, "the fixture is about to leave --window 365d: regenerate "
                        "it with tests/fixtures/make_datadir_format3.py")
        # Before any new server opened it, `check` says what will happen and checks the log.
        p = run_cli(["check", "--data", data])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("older release", p.stdout + p.stderr)
        # `lookup` refuses an unmigrated store, naming what to do.
        p = run_cli(["lookup", "--data", data, "--source", "web", "web-0"])
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("ingestd rebuild", p.stderr)

        srv = Server(keys=KEYS, args=ARGS, data_dir=data)
        with srv:
            srv.wait_for_log(REBUILDING)
            srv.wait_for_log("gave %d log records" % len(old))
            self.assertEqual(srv.stats()["dedupe"]["keys"], len(old))
            # The replay sealed the tagged keys again (two young stores' worth): both kinds answer.
            self.assertGreater(srv.stats()["dedupe"]["generations"]["count"], 0)
            self.retry_all(srv, old)
            # Sources stay apart: an id of one source is new on the other, and a new id is new.
            r = srv.post_as_operator("/v1/batch?verbose=true",
                                     {"batch": [track(mid="web-1"), track(mid="after-upgrade")]},
                                     "kmob")
            self.assertEqual((r.json["accepted"], r.json["duplicates"]), (2, 0), r.json)
            self.assertEqual(r.json["results"][0]["offset"], len(old))
            r = srv.batch([track(mid="both-0")], key="kweb")
            self.assertEqual((r.json["accepted"], r.json["duplicates"]), (0, 1), r.json)
            lines = len(srv.lines)
            srv.restart()
            # No second migration: the store is format 4 now.
            self.assertNotIn(REBUILDING, "\n".join(srv.lines[lines:]))
            self.retry_all(srv, old)
            r = srv.batch([track(mid="after-upgrade")], key="kmob")
            self.assertEqual((r.json["accepted"], r.json["duplicates"]), (0, 1), r.json)
        # The offline tools agree with the server.
        p = run_cli(["lookup", "--data", data, "--source", "mobile", "mob-3", "web-3"])
        self.assertEqual(p.returncode, 1, p.stderr)  # 1: some id unseen
        seen = [json.loads(line) for line in p.stdout.splitlines()]
        self.assertEqual([s["status"] for s in seen], ["seen", "unseen"])
        self.assertEqual(seen[0]["event"]["messageId"], "mob-3")
        p = run_cli(["lookup", "--data", data, "--source", "web", "web-3", "web-1"])
        self.assertEqual([json.loads(line)["status"] for line in p.stdout.splitlines()],
                         ["seen", "seen"], p.stdout + p.stderr)
        p = run_cli(["check", "--data", data])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertNotIn("older release", p.stdout + p.stderr)
        with open(os.path.join(data, "TAGGED_FROM")) as f:
            self.assertEqual(int(f.read()), len(old))

    def test_clean_shutdown(self):
        self.upgrade("clean")

    def test_killed(self):
        self.upgrade("killed")

    def test_rebuild_takes_format_3(self):
        # `ingestd rebuild` before any server: the same migration, offline.
        data = os.path.join(self.base, "killed")
        old = log_cat(data)
        p = run_cli(["rebuild", "--data", data, "--window", "365d"], timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        with Server(keys=KEYS, args=ARGS, data_dir=data) as srv:
            self.retry_all(srv, old)
        p = run_cli(["check", "--data", data])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_memory_mode_takes_format_3(self):
        # Memory mode rebuilds its filter from the log at every open: the old keys get tags too.
        data = os.path.join(self.base, "clean")
        old = log_cat(data)
        with Server(keys=KEYS, args=ARGS + ["--store", "memory:bloom:8Mbit"], data_dir=data) as srv:
            for source, key in KEY_OF.items():
                ids = [e["messageId"] for e in old if e["source"] == source]
                r = srv.batch([track(mid=m) for m in ids], key=key)
                self.assertEqual((r.json["accepted"], r.json["duplicates"]), (0, len(ids)), r.json)


if __name__ == "__main__":
    unittest.main()
