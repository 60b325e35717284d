"""A data dir written by an older release (LMDB store format 2) is migrated on open (rebuilt).

tests/data/datadir-v2 was written by `ingestd serve` at store format 2 (before generations):
write key k1:s1, three batches of two events, messageIds v2-1..v2-3 and v2-x1..v2-x3.
"""

import os
import shutil
import tempfile
import unittest

from harness import Server, log_cat, run_cli, track

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "datadir-v2")
OLD_IDS = ["v2-1", "v2-x1", "v2-2", "v2-x2", "v2-3", "v2-x3"]


class UpgradeFromFormat2(unittest.TestCase):

    def setUp(self):
        self.base = tempfile.mkdtemp(prefix="ingestd-upgrade-")
        self.data = os.path.join(self.base, "data")
        shutil.copytree(FIXTURE, self.data)

    def tearDown(self):
        shutil.rmtree(self.base, ignore_errors=True)

    def test_read_only_tools_take_format_2(self):
        # Before any server opened it: `log cat` and `check` read it as it is.
        self.assertEqual([e["messageId"] for e in log_cat(self.data)], OLD_IDS)
        p = run_cli(["check", "--data", self.data])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_serve_migrates_and_keeps_the_window(self):
        # --window 365d: the fixture's receivedAt (2026-11-24) must stay inside the window.
        with Server(keys=("k1:s1",), data_dir=self.data, args=["--window", "365d"]) as srv:
            # Every id the old release accepted is still a duplicate; a new one is accepted.
            r = srv.batch([track(mid=m) for m in OLD_IDS] + [track(mid="after-upgrade")], key="k1")
            self.assertEqual(r.status, 200, r)
            self.assertEqual((r.json["accepted"], r.json["duplicates"]), (1, 6), r)
            self.assertEqual(srv.stats()["dedupe"]["keys"], 7)
            srv.restart()
            r = srv.batch([track(mid="after-upgrade"), track(mid="v2-2")], key="k1")
            self.assertEqual((r.json["accepted"], r.json["duplicates"]), (0, 2), r)
        self.assertEqual([e["messageId"] for e in log_cat(self.data)], OLD_IDS + ["after-upgrade"])
        p = run_cli(["check", "--data", self.data])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)


if __name__ == "__main__":
    unittest.main()
