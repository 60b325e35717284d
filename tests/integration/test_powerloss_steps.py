"""Power loss right after one small durable step of the data dir, under strict POSIX.

test_powerloss.py cuts power at random instants under load; these tests cut it right after a
step that creates a directory or a small file, where one missing fsync loses a whole
directory: the first seal (DIR/store/gens/), a consumer group's first commit (DIR/groups/), a
backup (its target dir and the copied LMDB file), and lazy store sync's reset after a machine
crash (the UNSYNCED marker before LMDB's first write). Each runs the real binary under the
faultfs shim (tests/faultfs/README.md), builds what a power loss leaves with
tests/faultfs/powerloss.py in --mode drop --dirsync strict (only what was fsynced, and a name
only once its directory was fsynced), and checks it from there.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from harness import Server, deadline_wait, run_cli, track
from test_powerloss import faultfs_lib, post, shim_env

HERE = os.path.dirname(os.path.abspath(__file__))
FAULTFS = os.path.join(HERE, "..", "faultfs")
POWERLOSS = os.path.join(FAULTFS, "powerloss.py")
sys.path.insert(0, FAULTFS)
import powerloss  # noqa: E402  (tests/faultfs: the journal's reader)

KEY = "pk"


def seq_ids(tag, n):
    return ["%s-%d" % (tag, i) for i in range(n)]


class PowerLossSteps(unittest.TestCase):

    def setUp(self):
        self.lib = faultfs_lib()
        if not self.lib:
            self.skipTest("libfaultfs.so not built (set FAULTFS_LIB)")
        self.tmp = tempfile.mkdtemp(prefix="ingestd-plsteps-")
        self.keep = False

    def tearDown(self):
        if self.keep:
            print("\nkept for reproduction: %s" % self.tmp, file=sys.stderr)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def power_loss(self, image, out):
        """The data dir (or faultfs root) a power loss leaves: only what was made durable."""
        cmd = [sys.executable, POWERLOSS, "--image", image, "--out", out, "--seed", "1",
               "--mode", "drop", "--dirsync", "strict"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, "%s: %s" % (" ".join(cmd), p.stderr))
        return out

    def assert_duplicates(self, srv, ids, why):
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            r = post(srv, KEY, [track(mid=m) for m in chunk])
            self.assertEqual(r.status, 200, "%s: %r" % (why, r))
            self.keep = self.keep or r.json["accepted"] != 0
            self.assertEqual((r.json["accepted"], r.json["duplicates"]), (0, len(chunk)),
                             "%s: acknowledged ids accepted again: %r" % (why, r))

    def checkpoints(self, srv):
        return srv.stats()["commit"]["checkpoints"]

    # ---- (a) the first seal: DIR/store/gens/ ------------------------------------------------

    def test_first_seal_survives(self):
        """The first seal creates DIR/store/gens/ and moves the young store's keys into a file
        there. Unless gens/ itself is durable in store/, a power loss takes the generation and
        its keys with it, while LMDB (synced by the next checkpoint) no longer has them."""
        data, image = self.path("data"), self.path("image")
        os.mkdir(data)
        ids = seq_ids("seal", 600)
        srv = Server(keys=[KEY], data_dir=data, args=["--young-keys", "200", "--max-keys",
                                                      "100000"],
                     env=shim_env(self.lib, data, image=image))
        try:
            srv.start()
            r = post(srv, KEY, [track(mid=m) for m in ids])
            self.assertEqual((r.status, r.json["accepted"]), (200, 600), repr(r))
            deadline_wait(lambda: srv.stats()["dedupe"]["generations"]["seals"] >= 1, 30,
                          "the first seal")
            # One more checkpoint after the seal: its LMDB commit syncs the seal's (the young
            # store emptied), so after the power loss the keys are in the generation only.
            done = self.checkpoints(srv)
            r = post(srv, KEY, [track(mid="after-seal")])
            self.assertEqual(r.status, 200, repr(r))
            deadline_wait(lambda: self.checkpoints(srv) > done, 30, "a checkpoint after the seal")
            ids.append("after-seal")
            srv.kill()
        finally:
            srv.kill()
        after = self.power_loss(image, self.path("after"))
        with Server(keys=[KEY], data_dir=after,
                    args=["--young-keys", "200", "--max-keys", "100000"]) as b:
            self.assert_duplicates(b, ids, "after a power loss right after the first seal")

    # ---- (b) a consumer group's first commit: DIR/groups/ ---------------------------------

    def test_first_group_commit_survives(self):
        data, image = self.path("data"), self.path("image")
        os.mkdir(data)
        with Server(keys=[KEY], data_dir=data) as srv:
            r = post(srv, KEY, [track(mid=m) for m in seq_ids("grp", 25)])
            self.assertEqual((r.status, r.json["accepted"]), (200, 25), repr(r))
        # The group's first `log cat`, under the shim; then the power goes.
        p = run_cli(["log", "cat", "--data", data, "--group", "g"],
                    env=shim_env(self.lib, data, image=image), timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(p.stdout.splitlines()), 25)
        after = self.power_loss(image, self.path("after"))
        p = run_cli(["log", "groups", "--data", after, "--json"])
        self.assertEqual(p.returncode, 0, p.stderr)
        groups = {g["group"]: g["offset"] for g in map(json.loads, p.stdout.splitlines())}
        self.keep = groups.get("g") != 25
        self.assertEqual(groups.get("g"), 25,
                         "the group's first commit did not survive the power loss: %s" % p.stdout)
        # And it reads on from there: nothing again.
        p = run_cli(["log", "cat", "--data", after, "--group", "g"])
        self.assertEqual((p.returncode, p.stdout), (0, ""), p.stderr)

    # ---- (c) backup ------------------------------------------------------------------------

    def test_backup_survives(self):
        """`backup` says its copy is fsynced: its target dir (a name in its parent), the LMDB
        copy, the log and the secret. Retention has deleted the log's first segments, so their
        keys are in the LMDB copy only."""
        data, root, image = self.path("data"), self.path("root"), self.path("image")
        os.mkdir(data)
        os.mkdir(root)
        ids = seq_ids("bk", 600)
        args = ["--segment-bytes", "8KiB", "--log-max-bytes", "16KiB"]
        with Server(keys=[KEY], data_dir=data, args=args) as srv:
            for i in range(0, len(ids), 50):
                r = post(srv, KEY, [track(mid=m, properties={"pad": "x" * 100})
                                    for m in ids[i:i + 50]])
                self.assertEqual((r.status, r.json["accepted"]), (200, 50), repr(r))
            done = self.checkpoints(srv)
            deadline_wait(lambda: self.checkpoints(srv) > done, 30, "a checkpoint")
            deadline_wait(lambda: srv.stats()["log"]["retention"]["window_records_deleted"] > 0,
                          30, "retention deleting the first segments")
            p = run_cli(["backup", "--data", data, "--to", os.path.join(root, "b")],
                        env=shim_env(self.lib, root, image=image), timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        after = self.power_loss(image, self.path("after"))
        restored = os.path.join(after, "b")
        self.keep = not os.path.isdir(restored)
        self.assertTrue(os.path.isdir(restored), "the backup's directory did not survive")
        with Server(keys=[KEY], data_dir=restored, args=args) as b:
            self.assert_duplicates(b, ids, "a backup after a power loss")

    # ---- lazy store sync: the marker before LMDB's first write ------------------------------

    def assert_marker_first(self, image, store_dir, why):
        """In the journal: after the last time `store_dir` (relative to the root) was moved
        aside or created, no write reached a file LMDB created there before the UNSYNCED marker
        was durable (renamed into place and the directory fsynced)."""
        recs = powerloss.read_journal(os.path.join(image, "journal"))
        start = 0
        for i, (typ, _seq, _ident, _a, _b, payload) in enumerate(recs):
            names = powerloss.parse_names(payload) if typ in (
                powerloss.J_RENAME, powerloss.J_MKDIR) else []
            if typ == powerloss.J_RENAME and names[:2] == ["", store_dir]:
                start = i  # the store moved aside: a fresh one follows
            elif typ == powerloss.J_MKDIR and names == ["", store_dir]:
                start = max(start, i)
        lmdb_files, marker_renamed, marker_durable = set(), False, None
        first_write = None
        for i in range(start, len(recs)):
            typ, _seq, ident, _a, _b, payload = recs[i]
            if typ == powerloss.J_CREATE:
                d, n = powerloss.parse_names(payload)[:2]
                if d == store_dir and n == "data.mdb":
                    lmdb_files.add(ident)
            elif typ == powerloss.J_RENAME:
                n = powerloss.parse_names(payload)
                if n[2:] == [store_dir, "UNSYNCED"]:
                    marker_renamed = True
            elif typ == powerloss.J_DIRSYNC and payload.decode() == store_dir and marker_renamed:
                marker_durable = i if marker_durable is None else marker_durable
            elif typ in (powerloss.J_WRITE, powerloss.J_TRUNC) and ident in lmdb_files:
                first_write = i if first_write is None else first_write
        self.assertIsNotNone(first_write, "%s: LMDB never wrote (journal from %d)" % (why, start))
        self.assertIsNotNone(marker_durable, "%s: the marker was never made durable" % why)
        self.assertLess(marker_durable, first_write,
                        "%s: LMDB wrote its store (journal record %d) before the UNSYNCED marker "
                        "was durable (record %d): a power loss in between leaves an unsynced "
                        "store without its marker" % (why, first_write, marker_durable))

    def lazy_run(self, data, boot_id, image, ids):
        """A lazy-mode server under the shim on `data`, in boot `boot_id`: `ids` accepted,
        then kill -9 (the marker stays)."""
        boot = self.path("boot_id")
        with open(boot, "w") as f:
            f.write(boot_id + "\n")
        env = shim_env(self.lib, data, image=image)
        env["INGESTD_BOOT_ID_FILE"] = boot
        srv = Server(keys=[KEY], data_dir=data, args=["--store-sync", "lazy"], env=env)
        try:
            srv.start()
            r = post(srv, KEY, [track(mid=m) for m in ids])
            self.assertEqual((r.status, r.json["accepted"]), (200, len(ids)), repr(r))
        finally:
            srv.kill()

    def test_lazy_first_start_marks_before_lmdb_writes(self):
        data = self.path("data")
        os.mkdir(data)
        self.lazy_run(data, "boot-1", self.path("image-1"), seq_ids("lz1", 50))
        self.assert_marker_first(self.path("image-1"), "store", "first start in lazy mode")

    def test_lazy_reset_marks_before_lmdb_writes(self):
        """After a machine crash (another boot id) the store is moved aside and a fresh one
        filled from the log: its marker must be durable before the fresh store's first write.
        What the reset leaves after a power loss must start and know every acknowledged id."""
        data = self.path("data")
        os.mkdir(data)
        self.lazy_run(data, "boot-1", self.path("image-1"), seq_ids("lz1", 50))
        self.lazy_run(data, "boot-2", self.path("image-2"), seq_ids("lz2", 50))
        self.assertEqual([n for n in os.listdir(data) if n.startswith("store.unsynced-")], [],
                         "the store moved aside was not removed after the rebuild")
        self.assert_marker_first(self.path("image-2"), "store", "reset after a machine crash")
        after = self.power_loss(self.path("image-2"), self.path("after"))
        boot = self.path("boot_id")
        with open(boot, "w") as f:
            f.write("boot-3\n")
        with Server(keys=[KEY], data_dir=after, args=["--store-sync", "lazy"],
                    env={"INGESTD_BOOT_ID_FILE": boot}) as b:
            self.assert_duplicates(b, seq_ids("lz1", 50) + seq_ids("lz2", 50),
                                   "lazy mode after a power loss")

if __name__ == "__main__":
    unittest.main(verbosity=2)
