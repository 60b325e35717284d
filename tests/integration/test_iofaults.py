"""I/O faults while serving: failing write, fsync, ftruncate, ENOSPC, MDB_MAP_FULL.

The real server runs under tests/faultfs (LD_PRELOAD, FAULTFS_LIB); each test writes a fault
rule into the shim's control file, sends a batch, and checks the answer (503 + Retry-After +
JSON error), that nothing of a failed batch is half-visible in `ingestd log cat`, that
/healthz is 503 exactly while storage is failed, that the server re-establishes storage by
itself once the fault is cleared, and that the same batch then goes through exactly once.
The shim also keeps a power-loss image the whole time: the last test cuts the power after all
those faults (a failed fsync loses its writes from the durable image, as on Linux) and checks
that every acknowledged event is still there exactly once.
"""

import collections
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from harness import Server, deadline_wait, log_cat, new_id, track
from test_powerloss import POWERLOSS, faultfs_lib, shim_env

RECOVER_TIMEOUT = 15.0  # storage is re-established at most once a second


class IoFaults(unittest.TestCase):
    srv = None

    @classmethod
    def setUpClass(cls):
        cls.lib = faultfs_lib()
        if not cls.lib:
            raise unittest.SkipTest("libfaultfs.so not built (set FAULTFS_LIB)")
        cls.tmp = tempfile.mkdtemp(prefix="ingestd-iofaults-")
        cls.data = os.path.join(cls.tmp, "data")
        cls.ctl = os.path.join(cls.tmp, "ctl")
        cls.image = os.path.join(cls.tmp, "image")
        os.mkdir(cls.data)
        cls.acked = set()
        cls.sent = set()
        cls.ok = True
        srv = Server(keys=("k",), data_dir=cls.data,
                     env=shim_env(cls.lib, cls.data, image=cls.image, ctl=cls.ctl))
        try:
            srv.start()
        except BaseException:
            srv.kill()
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise
        cls.srv = srv

    @classmethod
    def tearDownClass(cls):
        if cls.srv is not None:
            cls.srv.kill()
        if cls.ok:
            shutil.rmtree(cls.tmp, ignore_errors=True)
        else:
            print("\niofaults: data dir, control file and image kept in %s" % cls.tmp,
                  file=sys.stderr)

    def run(self, result=None):
        result = super().run(result)
        if result is not None and (result.failures or result.errors):
            type(self).ok = False
        return result

    # ---- helpers -------------------------------------------------------------------------

    def set_faults(self, *lines):
        """Replaces the control file (a new inode, so the shim notices at once)."""
        tmp = self.ctl + ".tmp"
        with open(tmp, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, self.ctl)

    def hits(self):
        try:
            with open(self.ctl + ".hits") as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def batch(self, n=20):
        ids = [new_id("iof") for _ in range(n)]
        self.sent.update(ids)
        return ids

    def send(self, ids):
        return self.srv.batch([track(mid=m) for m in ids], key="k")

    def logged(self):
        return collections.Counter(e["messageId"] for e in log_cat(self.data))

    def assert503(self, r):
        self.assertEqual(r.status, 503, r)
        self.assertTrue(r.header("Retry-After"), "503 without Retry-After: %r" % r)
        self.assertTrue((r.header("Content-Type") or "").startswith("application/json"), r)
        self.assertIs(r.json and r.json.get("success"), False, r)
        self.assertIsInstance(r.json.get("error"), str, r)

    def health(self):
        r = self.srv.get("/healthz", timeout=5)
        return r, self.srv.stats()

    def assert_health_consistent(self):
        """/healthz is 503 (with Retry-After) exactly while /stats says storage failed."""
        for _ in range(3):  # the writer may change state between the two GETs: re-read
            r, st = self.health()
            r2, st2 = self.health()
            if st["storage"]["failed"] == st2["storage"]["failed"]:
                break
        failed = bool(st2["storage"]["failed"])
        self.assertEqual(r2.status, 503 if failed else 200, (r2, st2["storage"]))
        if failed:
            self.assertTrue(r2.header("Retry-After"), r2)
        return failed

    def await_healthy(self):
        deadline_wait(lambda: self.srv.get("/healthz", timeout=5).status == 200,
                      RECOVER_TIMEOUT, "/healthz 200 after the fault was cleared")
        self.assertFalse(self.srv.stats()["storage"]["failed"])

    def assert_all_or_nothing(self, ids, what):
        counts = self.logged()
        present = [m for m in ids if counts[m]]
        self.assertIn(len(present), (0, len(ids)),
                      "%s: half of a failed batch is visible: %d of %d" % (what, len(present),
                                                                           len(ids)))
        twice = [m for m, c in counts.items() if c > 1]
        self.assertEqual(twice, [], "%s: logged twice" % what)
        return bool(present)

    def resend_exactly_once(self, ids, visible, what):
        """The retry of a failed batch: 200, accepted unless recovery already applied it."""
        r = self.send(ids)
        self.assertEqual(r.status, 200, "%s: retry after recovery: %r" % (what, r))
        want = (0, len(ids)) if visible else (len(ids), 0)
        self.assertEqual((r.json["accepted"], r.json["duplicates"]), want, "%s: %r" % (what, r))
        counts = self.logged()
        self.assertEqual([m for m in ids if counts[m] != 1], [], "%s: not exactly once" % what)
        self.acked.update(ids)

    def scenario(self, rules, persistent, log_fault, stays_failed=False):
        """One fault of the log: it strikes before the log sync (the batch must vanish
        entirely) when `log_fault`, else maybe after it (then the batch is either replayed
        whole or not at all). `stays_failed`: re-opening
        storage cannot succeed while the fault lasts, so /healthz must say 503 meanwhile."""
        what = " + ".join(rules)
        self.await_healthy()
        st0 = self.srv.stats()
        nhits = len(self.hits())
        ids = self.batch()
        self.set_faults(*rules)
        try:
            r = self.send(ids)
            self.assertGreater(len(self.hits()), nhits, "%s: the fault never fired" % what)
            self.assert503(r)
            st = self.srv.stats()
            self.assertGreater(st["commit"]["failures"], st0["commit"]["failures"], what)
            more = []
            if persistent:
                # Still failing: fail fast (storage failed) or fail again; never a 200.
                more = self.batch(5)
                self.assert503(self.send(more))
                failed = self.assert_health_consistent()
                if stays_failed:
                    self.assertTrue(failed, "%s: storage not failed while the fault lasts" % what)
        finally:
            self.set_faults("clear")
        self.await_healthy()
        self.assertGreater(self.srv.stats()["storage"]["recoveries"], st0["storage"]["recoveries"])
        for batch_ids in (ids, more):
            if not batch_ids:
                continue
            visible = self.assert_all_or_nothing(batch_ids, what)
            if log_fault:
                self.assertFalse(visible, "%s: a batch answered 503 is in the log" % what)
            self.resend_exactly_once(batch_ids, visible, what)

    # ---- the faults ----------------------------------------------------------------------

    def test_fdatasync_eio_segment_once(self):
        self.scenario(["fail fdatasync EIO *.seg 1"], persistent=False, log_fault=True)

    def test_fdatasync_eio_segment_persistent(self):
        self.scenario(["fail fdatasync EIO *.seg *"], persistent=True, log_fault=True,
                      stays_failed=True)

    def test_write_enospc_segment(self):
        # Re-opening needs no write, so storage comes back and each batch fails again.
        self.scenario(["fail pwrite ENOSPC *.seg *"], persistent=True, log_fault=True)

    def test_write_enospc_segment_short_write(self):
        # Half the batch reaches the file (a short write), then the disk is full.
        self.scenario(["fail write ENOSPC *.seg 1 partial"], persistent=False, log_fault=True)

    def test_ftruncate_fails_during_rollback(self):
        # Double fault: the append fails half-way, then so does the rollback's ftruncate.
        self.scenario(["fail write EIO *.seg 1 partial", "fail ftruncate EIO *.seg 1"],
                      persistent=False, log_fault=True)

    # LMDB faults strike at a checkpoint, after batches were fsynced to the log and answered:
    # those stand (the log is the truth); recovery replays them once the fault is gone.

    def lmdb_scenario(self, rules, persistent):
        what = " + ".join(rules)
        self.await_healthy()
        st0 = self.srv.stats()
        nhits = len(self.hits())
        ids = self.batch()
        self.set_faults(*rules)
        more = []
        try:
            r = self.send(ids)
            if r.status != 200:
                # The fault struck a checkpoint of earlier batches first and storage is down.
                self.assert503(r)
            deadline_wait(lambda: len(self.hits()) > nhits, RECOVER_TIMEOUT,
                          "%s: the fault fired at a checkpoint" % what)
            deadline_wait(lambda: self.srv.stats()["commit"]["checkpoint_failures"]
                          > st0["commit"]["checkpoint_failures"], RECOVER_TIMEOUT,
                          "%s: a failed checkpoint counted" % what)
            if persistent:
                # Re-opening replays into LMDB, which cannot write: storage stays failed and
                # new batches fail fast, never a 200.
                deadline_wait(lambda: self.srv.stats()["storage"]["failed"], RECOVER_TIMEOUT,
                              "%s: storage failed while the fault lasts" % what)
                more = self.batch(5)
                self.assert503(self.send(more))
                self.assertTrue(self.assert_health_consistent(),
                                "%s: storage not failed while the fault lasts" % what)
        finally:
            self.set_faults("clear")
        # The failed checkpoint is counted before storage is re-established: await both.
        deadline_wait(lambda: self.srv.stats()["storage"]["recoveries"]
                      > st0["storage"]["recoveries"], RECOVER_TIMEOUT,
                      "%s: storage re-established" % what)
        self.await_healthy()
        if r.status == 200:
            self.assertEqual(r.json["accepted"], len(ids), r)
            counts = self.logged()
            self.assertEqual([m for m in ids if counts[m] != 1], [], "%s: acked, not once" % what)
            self.acked.update(ids)
            self.resend_exactly_once(ids, True, what)
        else:
            visible = self.assert_all_or_nothing(ids, what)
            self.resend_exactly_once(ids, visible, what)
        if more:
            visible = self.assert_all_or_nothing(more, what)
            self.assertFalse(visible, "%s: a batch answered 503 is in the log" % what)
            self.resend_exactly_once(more, visible, what)

    def test_write_eio_lmdb(self):
        self.lmdb_scenario(["fail write EIO data.mdb *"], persistent=True)

    def test_fsync_eio_lmdb(self):
        self.lmdb_scenario(["fail fsync EIO data.mdb *"], persistent=True)

    def test_write_eio_lmdb_once(self):
        """A single LMDB write error at a checkpoint: re-opening replays what the log holds
        past the last good checkpoint, and every answered batch stays answered, once."""
        self.lmdb_scenario(["fail write EIO data.mdb 1"], persistent=False)

    def test_z_power_loss_after_faults(self):
        """Last: cut the power after all the faults above; nothing acknowledged is lost."""
        self.await_healthy()
        ids = self.batch()
        r = self.send(ids)
        self.assertEqual(r.status, 200, r)
        self.acked.update(ids)
        self.srv.check_sanitizers()
        self.srv.kill()
        type(self).srv = None
        for seed, mode, dirsync in ((1, "drop", "strict"), (2, "random", "ext4")):
            out = os.path.join(self.tmp, "after-%s-%s" % (mode, dirsync))
            cmd = [sys.executable, POWERLOSS, "--image", self.image, "--out", out, "--seed",
                   str(seed), "--mode", mode, "--dirsync", dirsync]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            srv = Server(keys=("k",), data_dir=out)
            try:
                srv.start()
                counts = collections.Counter(e["messageId"] for e in log_cat(out))
                what = "power loss after the faults (%s)" % " ".join(cmd)
                self.assertEqual([m for m, c in counts.items() if c > 1], [], what)
                self.assertEqual(sorted(self.acked - set(counts))[:10], [], what + ": lost")
                self.assertEqual(sorted(set(counts) - self.sent)[:10], [], what)
                chunk = sorted(self.acked)
                r = srv.batch([track(mid=m) for m in chunk], key="k")
                self.assertEqual((r.status, r.json["accepted"], r.json["duplicates"]),
                                 (200, 0, len(chunk)), r)
                srv.stop()
            finally:
                srv.kill()


class MapFull(unittest.TestCase):
    """MDB_MAP_FULL: a 1 MiB map fills and grows; every batch is still 200, nothing lost."""

    def test_map_grows_under_load(self):
        srv = Server(keys=("k",), args=["--map-size", "1MiB"])
        try:
            srv.start()
            ids = []
            for _ in range(12):
                chunk = [new_id("mf") for _ in range(2000)]
                r = srv.batch([track(mid=m) for m in chunk], key="k")
                self.assertEqual((r.status, r.json and r.json["accepted"]), (200, len(chunk)), r)
                ids += chunk
            # The map fills at a checkpoint, in the background, after the batches were answered;
            # storage is re-opened with a bigger map and replays them.
            def regrown():
                s = srv.stats()
                return s if s["storage"]["recoveries"] > 0 else None
            st = deadline_wait(regrown, 30, "a checkpoint that grew the map")
            self.assertGreater(st["commit"]["map_grows"], 0, st)
            self.assertGreater(st["dedupe"]["store_map_bytes"], 1 << 20, st)
            self.assertEqual(st["commit"]["failures"], 0, st)
            self.assertEqual(st["dedupe"]["keys"], len(ids), st)
            counts = collections.Counter(e["messageId"] for e in log_cat(srv.data_dir))
            self.assertEqual([m for m in ids if counts[m] != 1], [])
            srv.restart()  # the grown map is found again on re-open
            r = srv.batch([track(mid=m) for m in ids[:2000]], key="k")
            self.assertEqual((r.status, r.json["duplicates"]), (200, 2000), r)
            srv.stop()
        finally:
            srv.cleanup()


if __name__ == "__main__":
    unittest.main(verbosity=2)
