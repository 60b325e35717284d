"""Operator tools end to end: `ingestd check`, `ingestd rebuild`, `ingestd backup`.

Every case runs the real binary on a temporary data dir: a server writes through HTTP, the
tool runs as a separate process (while the server runs, where the tool allows it), and the
result is judged by the tool's exit code and report, by `log cat`, and by starting a server
on the result and re-sending ids that must be duplicates.
"""

import os
import re
import shutil
import struct
import tempfile
import threading
import time
import unittest

from harness import (HarnessError, Server, basic, deadline_wait, http_request, log_cat, new_id,
                     run_cli, track)

SEG_HEADER = 16
REC_HEADER = 40
TOOL_TIMEOUT = 120
KEYS = ("k1:web", "k2:mobile")


def admin(*args, env=None):
    """Runs `ingestd ARGS...`; returns the CompletedProcess (text)."""
    return run_cli(list(args), env=env, timeout=TOOL_TIMEOUT)


def show(p):
    return "exit %s\nstdout:\n%s\nstderr:\n%s" % (p.returncode, p.stdout, p.stderr)


def problems(p):
    return [l for l in p.stdout.splitlines() if l.startswith("PROBLEM: ")]


def segments(data_dir):
    d = os.path.join(data_dir, "log")
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".seg"))


def records(seg):
    """(byte position, payload length, record offset) of every record of a segment file."""
    with open(seg, "rb") as f:
        buf = f.read()
    out, pos = [], SEG_HEADER
    while pos + REC_HEADER <= len(buf):
        length, _crc, off = struct.unpack_from("<IIQ", buf, pos)
        if pos + REC_HEADER + length > len(buf):
            break
        out.append((pos, length, off))
        pos += REC_HEADER + length
    return out


def flip_byte(path, pos):
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x20]))


def fill(srv, key, n, batch=20, prefix="a"):
    """Posts n new events in batches; returns their ids (all acknowledged)."""
    ids = []
    while len(ids) < n:
        mids = [new_id(prefix) for _ in range(min(batch, n - len(ids)))]
        r = srv.batch([track(mid=m, properties={"pad": "x" * 100}) for m in mids], key=key)
        assert r.status == 200 and r.json["accepted"] == len(mids), r
        ids += mids
    return ids


class Load:
    """Client threads posting new ids until stopped; `acked` grows as 200s arrive."""

    def __init__(self, srv, threads=3, key="k1"):
        self.host, self.port, self.key = srv.host, srv.port, key
        self.lock = threading.Lock()
        self.acked = []  # in the order the acknowledgements arrived
        self.errors = []
        self.stop_ev = threading.Event()
        self.ts = [threading.Thread(target=self.run) for _ in range(threads)]
        for t in self.ts:
            t.start()

    def run(self):
        while not self.stop_ev.is_set():
            mids = [new_id("load") for _ in range(20)]
            try:
                r = http_request(self.host, self.port, "POST", "/v1/batch",
                                 {"batch": [track(mid=m) for m in mids]},
                                 {"Authorization": basic(self.key)}, timeout=20)
            except Exception as e:  # the server runs throughout: any failure is one
                with self.lock:
                    self.errors.append(repr(e))
                return
            with self.lock:
                if r.status == 200 and r.json["accepted"] == len(mids):
                    self.acked.extend(mids)
                else:
                    self.errors.append(repr(r))

    def count(self):
        with self.lock:
            return len(self.acked)

    def snapshot(self):
        with self.lock:
            return list(self.acked)

    def wait_more(self, n, timeout=20):
        """Waits until n more ids than now are acknowledged (the load flows)."""
        target = self.count() + n
        deadline_wait(lambda: self.count() >= target, timeout, "%d more acknowledged ids" % n)

    def stop(self):
        self.stop_ev.set()
        for t in self.ts:
            t.join(timeout=30)


class AdminCase(unittest.TestCase):

    def tmpdir(self):
        d = tempfile.mkdtemp(prefix="ingestd-admin-")
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def server(self, data_dir=None, args=()):
        srv = Server(keys=KEYS, args=args, data_dir=data_dir)
        self.addCleanup(srv.cleanup)
        return srv

    def assertCheckOk(self, data_dir):
        p = admin("check", "--data", data_dir)
        self.assertEqual(p.returncode, 0, show(p))
        self.assertEqual(problems(p), [], show(p))
        self.assertTrue(p.stdout.strip(), "a summary line")
        return p

    def assertDuplicates(self, srv, ids, key="k1"):
        for i in range(0, len(ids), 1000):
            chunk = ids[i:i + 1000]
            r = srv.batch([track(mid=m) for m in chunk], key=key)
            self.assertEqual((r.status, r.json["accepted"], r.json["duplicates"]),
                             (200, 0, len(chunk)), r)

    def populated(self, args=("--segment-bytes", "4KiB"), n=200):
        """A stopped server's data dir with n events of each source; returns (srv, ids)."""
        srv = self.server(args=args)
        srv.start()
        ids = fill(srv, "k1", n)
        # The same messageIds under the other source are other events.
        for i in range(0, n, 50):
            r = srv.batch([track(mid=m) for m in ids[i:i + 50]], key="k2")
            self.assertEqual((r.status, r.json["accepted"]), (200, len(ids[i:i + 50])), r)
        srv.stop()
        return srv, ids


class Usage(AdminCase):

    def test_help(self):
        for cmd, flags in (("check", ["--data"]),
                           ("rebuild", ["--data", "--window", "--max-keys", "--young-keys", "--allow-shrink"]),
                           ("backup", ["--data", "--to"])):
            with self.subTest(cmd=cmd):
                p = admin(cmd, "--help")
                self.assertEqual(p.returncode, 0, show(p))
                for f in flags:
                    self.assertIn(f, p.stdout)
        p = admin("--help")
        for cmd in ("check", "rebuild", "backup"):
            self.assertIn(cmd, p.stdout)

    def test_usage_errors_exit_2(self):
        d = self.tmpdir()
        for args in (["check", "--bogus"], ["check", "--data"], ["backup", "--data", d],
                     ["rebuild", "--data", d, "--window", "soon"],
                     ["rebuild", "--data", d, "--window", "0s"],
                     ["rebuild", "--data", d, "--max-keys", "-1"],
                     ["rebuild", "--data", d, "--to", d]):
            with self.subTest(args=args):
                p = admin(*args)
                self.assertEqual(p.returncode, 2, show(p))
                self.assertTrue(p.stderr.strip(), "a reason on stderr")

    def test_missing_data_dir_exit_1(self):
        missing = os.path.join(self.tmpdir(), "nope")
        for args in (["check"], ["rebuild"], ["backup", "--to", missing + "-copy"]):
            with self.subTest(cmd=args[0]):
                p = admin(*args, "--data", missing)
                self.assertEqual(p.returncode, 1, show(p))
                self.assertIn("nope", p.stderr)
                self.assertFalse(os.path.exists(missing), "a typo creates nothing")

    def test_data_dir_from_environment(self):
        srv, _ = self.populated(n=20)
        p = admin("check", env={"INGESTD_DATA": srv.data_dir})
        self.assertEqual(p.returncode, 0, show(p))
        p = admin("check", "--data", srv.data_dir + "-missing",
                  env={"INGESTD_DATA": srv.data_dir})
        self.assertEqual(p.returncode, 1, "the flag wins over the environment:\n" + show(p))


class Check(AdminCase):

    def test_healthy_stopped(self):
        srv, _ = self.populated()
        self.assertGreater(len(segments(srv.data_dir)), 1, "several segments")
        p = self.assertCheckOk(srv.data_dir)
        self.assertIn("400", p.stdout.splitlines()[-1], "the summary counts the records")

    def test_healthy_while_server_runs_under_writes(self):
        srv = self.server(args=("--segment-bytes", "16KiB"))
        srv.start()
        fill(srv, "k1", 100)
        load = Load(srv)
        try:
            for _ in range(3):
                load.wait_more(100)
                self.assertCheckOk(srv.data_dir)
            load.wait_more(100)  # and the server kept accepting meanwhile
        finally:
            load.stop()
        self.assertEqual(load.errors, [])
        srv.stop()
        self.assertCheckOk(srv.data_dir)

    def test_flipped_byte_in_a_record(self):
        srv, _ = self.populated()
        seg = segments(srv.data_dir)[0]
        recs = records(seg)
        pos, length, off = recs[len(recs) // 2]
        flip_byte(seg, pos + REC_HEADER + length // 2)
        p = admin("check", "--data", srv.data_dir)
        self.assertEqual(p.returncode, 1, show(p))
        probs = problems(p)
        self.assertTrue(probs, show(p))
        name = os.path.basename(seg)
        base = str(int(name[:-4]))
        named = [l for l in probs
                 if (name in l or re.search(r"\b%s\b" % base, l))
                 and (re.search(r"\b%d\b" % off, l) or re.search(r"\b%d\b" % pos, l))]
        self.assertTrue(named, "a PROBLEM line names segment %s and record offset %d or byte "
                        "%d:\n%s" % (name, off, pos, show(p)))
        self.assertRegex(p.stdout.splitlines()[-1], r"\bproblems?\b")

    def test_flipped_bytes_in_two_segments_are_both_reported(self):
        """One bad record must not hide the segments after it, nor stop the key pass."""
        srv, _ = self.populated()
        segs = segments(srv.data_dir)
        bad = []
        for seg in (segs[0], segs[len(segs) // 2]):
            pos, length, off = records(seg)[1]
            flip_byte(seg, pos + REC_HEADER + length // 2)
            bad.append(off)
        p = admin("check", "--data", srv.data_dir)
        self.assertEqual(p.returncode, 1, show(p))
        for off in bad:
            self.assertTrue([l for l in problems(p) if re.search(r"offset %d\b" % off, l)],
                            "record %d named:\n%s" % (off, show(p)))
        self.assertFalse([l for l in problems(p) if re.search(r"\b0 keys\b", l)],
                         "the store has every key:\n" + show(p))

    def test_secret_file_mismatch(self):
        srv, _ = self.populated(n=20)
        with open(os.path.join(srv.data_dir, "secret"), "r+b") as f:
            s = f.read()
            f.seek(0)
            f.write(bytes(b ^ 0xFF for b in s))
        p = admin("check", "--data", srv.data_dir)
        self.assertEqual(p.returncode, 1, show(p))
        self.assertTrue(any("secret" in l.lower() for l in problems(p)), show(p))

    def test_log_behind_the_store(self):
        """Acknowledged records missing from the log (the last segment lost): a problem."""
        srv, _ = self.populated()
        os.unlink(segments(srv.data_dir)[-1])
        p = admin("check", "--data", srv.data_dir)
        self.assertEqual(p.returncode, 1, show(p))
        self.assertTrue(problems(p), show(p))

    def test_store_behind_the_log_is_not_a_problem(self):
        """A store that has not applied the latest records (as after a kill -9 between the
        log fsync and the LMDB commit) is caught up by replay at start: not a problem."""
        srv, _ = self.populated(n=50)
        store = os.path.join(srv.data_dir, "store")
        old = os.path.join(self.tmpdir(), "store")
        shutil.copytree(store, old)
        srv.start()
        later = fill(srv, "k1", 60, prefix="later")
        srv.stop()
        shutil.rmtree(store)
        shutil.copytree(old, store)
        self.assertCheckOk(srv.data_dir)
        srv.start()  # replays the records the store missed
        self.assertEqual(srv.stats()["recovery"]["replayed_records"], 60)
        self.assertDuplicates(srv, later)
        srv.stop()
        self.assertCheckOk(srv.data_dir)

    def test_deleted_store(self):
        srv, _ = self.populated(n=20)
        shutil.rmtree(os.path.join(srv.data_dir, "store"))
        p = admin("check", "--data", srv.data_dir)
        self.assertEqual(p.returncode, 1, "no store: LMDB cannot agree with the log\n" + show(p))
        self.assertTrue(any("store" in l.lower() for l in p.stdout.splitlines() + [p.stderr]),
                        show(p))


class Rebuild(AdminCase):

    def test_refused_while_the_server_runs(self):
        srv = self.server()
        srv.start()
        ids = fill(srv, "k1", 40)
        p = admin("rebuild", "--data", srv.data_dir)
        self.assertNotEqual(p.returncode, 0, show(p))
        self.assertRegex((p.stdout + p.stderr).lower(), r"running|lock|stop", show(p))
        self.assertEqual(sorted(os.listdir(srv.data_dir)),
                         ["LOCK", "TAGGED_FROM", "WINDOW", "log", "rejected", "secret", "store"], "nothing moved aside")
        self.assertDuplicates(srv, ids)  # the server is unharmed
        self.assertEqual(srv.batch([track(mid=new_id())]).status, 200)
        srv.stop()
        self.assertCheckOk(srv.data_dir)

    def rebuild_and_verify(self, srv, ids, extra=(), before=None):
        if before is None:
            before = log_cat(srv.data_dir)
        p = admin("rebuild", "--data", srv.data_dir, *extra)
        self.assertEqual(p.returncode, 0, show(p))
        self.assertEqual(problems(p), [], show(p))
        self.assertFalse([n for n in os.listdir(srv.data_dir) if n.startswith("store.")],
                         "the old store is removed after a successful rebuild")
        self.assertCheckOk(srv.data_dir)
        self.assertEqual(log_cat(srv.data_dir), before, "the log is untouched")
        srv.start()
        self.assertEqual(srv.stats()["dedupe"]["keys"], 2 * len(ids))
        self.assertDuplicates(srv, ids, "k1")
        self.assertDuplicates(srv, ids, "k2")
        new = new_id("after")
        r = srv.batch([track(mid=new)], key="k1")
        self.assertEqual((r.status, r.json["accepted"]), (200, 1), r)
        srv.stop()
        self.assertCheckOk(srv.data_dir)

    def test_rebuild_after_stop(self):
        srv, ids = self.populated()
        self.rebuild_and_verify(srv, ids)

    def test_rebuild_after_deleting_the_store(self):
        srv, ids = self.populated()
        shutil.rmtree(os.path.join(srv.data_dir, "store"))
        self.rebuild_and_verify(srv, ids, extra=("--window", "24h"))

    def test_rebuild_replaces_a_damaged_store(self):
        srv, ids = self.populated()
        before = log_cat(srv.data_dir)
        with open(os.path.join(srv.data_dir, "store", "data.mdb"), "r+b") as f:
            f.write(b"\0" * 8192)  # both LMDB meta pages
        p = admin("check", "--data", srv.data_dir)
        self.assertEqual(p.returncode, 1, show(p))
        with self.assertRaises(HarnessError):
            srv.start()  # the server refuses a damaged store rather than guess
        self.rebuild_and_verify(srv, ids, before=before)

    def test_failed_rebuild_puts_the_old_store_back(self):
        srv, ids = self.populated()
        store = os.path.join(srv.data_dir, "store", "data.mdb")
        with open(store, "rb") as f:
            old = f.read()
        seg = segments(srv.data_dir)[1]
        pos, length, off = records(seg)[1]
        flip_byte(seg, pos + REC_HEADER + length // 2)
        p = admin("rebuild", "--data", srv.data_dir)
        self.assertEqual(p.returncode, 1, show(p))
        self.assertTrue([l for l in problems(p) if re.search(r"\b%d\b" % off, l)], show(p))
        self.assertEqual(sorted(os.listdir(srv.data_dir)),
                         ["LOCK", "TAGGED_FROM", "WINDOW", "log", "rejected", "secret", "store"])
        with open(store, "rb") as f:
            self.assertEqual(f.read(), old, "the store is as it was")

    def test_rebuild_applies_max_keys_from_the_environment(self):
        srv, ids = self.populated(n=50)
        p = admin("rebuild", "--data", srv.data_dir, env={"INGESTD_MAX_KEYS": "30"})
        self.assertEqual(p.returncode, 0, show(p))
        srv.args = ["--max-keys", "30"]
        srv.start()
        d = srv.stats()["dedupe"]  # --max-keys is per source: 30 of each of the two
        self.assertLessEqual(d["keys"], 60, d)
        self.assertEqual(sorted(s["keys"] for s in d["sources"]), [30, 30], d)
        self.assertDuplicates(srv, ids[-10:], "k2")  # the newest keys are kept
        self.assertDuplicates(srv, ids[-10:], "k1")
        srv.stop()


class Backup(AdminCase):

    def test_backup_under_write_load_then_serve_from_it(self):
        srv = self.server(args=("--segment-bytes", "16KiB"))
        srv.start()
        fill(srv, "k1", 100)
        load = Load(srv)
        try:
            load.wait_more(200)
            before = load.snapshot()  # acknowledged before the backup started
            to = os.path.join(self.tmpdir(), "copy")
            p = admin("backup", "--data", srv.data_dir, "--to", to)
            self.assertEqual(p.returncode, 0, show(p))
            self.assertEqual(problems(p), [], show(p))
            load.wait_more(100)  # the server kept accepting during and after the backup
        finally:
            load.stop()
        self.assertEqual(load.errors, [])
        srv.stop()

        self.assertCheckOk(to)
        with open(os.path.join(srv.data_dir, "TAGGED_FROM")) as a, \
                open(os.path.join(to, "TAGGED_FROM")) as b:
            self.assertEqual(a.read(), b.read(), "where keys began carrying source tags: copied")
        original = log_cat(srv.data_dir)
        copy = log_cat(to)
        self.assertGreater(len(copy), 0)
        self.assertEqual(copy, original[:len(copy)], "the backup's log is a prefix")
        copied = {e["messageId"] for e in copy}
        self.assertEqual(set(before) - copied, set(), "acknowledged before the backup: kept")

        restored = self.server(data_dir=to)
        restored.start()
        self.assertDuplicates(restored, before, "k1")
        r = restored.batch([track(mid=new_id("restored"))], key="k1")
        self.assertEqual((r.status, r.json["accepted"]), (200, 1), r)
        restored.stop()
        self.assertCheckOk(to)

    def test_refuses_a_non_empty_target(self):
        srv, _ = self.populated(n=20)
        to = self.tmpdir()
        with open(os.path.join(to, "precious"), "w") as f:
            f.write("keep me")
        p = admin("backup", "--data", srv.data_dir, "--to", to)
        self.assertEqual(p.returncode, 1, show(p))
        self.assertEqual(os.listdir(to), ["precious"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
