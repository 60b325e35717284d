"""Data dir layout, log segments rolling, reading across segments and restarts."""

import collections
import os
import re
import shutil
import socket
import stat
import tempfile
import unittest

from harness import Server, log_cat, new_id, run_cli, track

SEGMENT_RE = re.compile(r"^\d{20}\.seg$")
LOG_FILE_RE = re.compile(r"^\d{20}\.(seg|idx)$")  # segments and their sparse indexes


class Layout(unittest.TestCase):

    def test_layout(self):
        with Server(keys=("k",)) as srv:
            self.assertEqual(srv.batch([track(mid=new_id())]).status, 200)
            d = srv.data_dir
            self.assertTrue(os.path.isfile(os.path.join(d, "LOCK")))
            secret = os.path.join(d, "secret")
            self.assertEqual(os.path.getsize(secret), 16)
            self.assertEqual(stat.S_IMODE(os.stat(secret).st_mode), 0o600)
            self.assertTrue(os.path.isdir(os.path.join(d, "store")))
            files = os.listdir(os.path.join(d, "log"))
            self.assertTrue([f for f in files if SEGMENT_RE.match(f)], "a log segment")
            for f in files:
                self.assertRegex(f, LOG_FILE_RE)
            with open(secret, "rb") as f:
                first = f.read()
            srv.restart()
            with open(secret, "rb") as f:
                self.assertEqual(f.read(), first, "the secret is made once and kept")

    def modes(self, top):
        """{relative path: permission bits} of everything under `top` (top itself as ".")."""
        out = {".": stat.S_IMODE(os.stat(top).st_mode)}
        for root, dirs, files in os.walk(top):
            for name in dirs + files:
                path = os.path.join(root, name)
                out[os.path.relpath(path, top)] = stat.S_IMODE(os.lstat(path).st_mode)
        return out

    def check_modes(self, top, file_mode, dir_mode):
        modes = self.modes(top)
        self.assertTrue(any(re.search(r"log/\d{20}\.seg$", p) for p in modes), modes)
        for path, mode in modes.items():
            full = os.path.join(top, path)
            want = dir_mode if os.path.isdir(full) else file_mode
            if path == "secret":
                want = 0o600  # the hash key: never more
            self.assertEqual(mode, want, "%s is %o, want %o (all: %r)"
                             % (path, mode, want, {p: oct(m) for p, m in modes.items()}))

    def test_file_modes_private(self):
        """Everything ingestd creates in a data dir is the service user's alone (0600 files,
        0700 directories), whatever the umask it was started with: events are personal data.
        The same for what `log cat --group` and `backup` create."""
        tmp = tempfile.mkdtemp(prefix="ingestd-it-")
        old = os.umask(0o022)  # a shell's usual umask, which used to leave it all world-readable
        try:
            data, copy = os.path.join(tmp, "data"), os.path.join(tmp, "backup")
            with Server(keys=("k",), data_dir=data) as srv:
                self.assertEqual(srv.batch([track(mid=new_id())]).status, 200)
                log_cat(data, group="reader")
                p = run_cli(["backup", "--data", data, "--to", copy])
                self.assertEqual(p.returncode, 0, p.stderr)
                self.check_modes(data, 0o600, 0o700)
                self.check_modes(copy, 0o600, 0o700)
        finally:
            os.umask(old)
            shutil.rmtree(tmp, ignore_errors=True)

    def test_file_modes_group(self):
        """--data-mode group: the service user's group may read (0640, 0750), nobody else."""
        tmp = tempfile.mkdtemp(prefix="ingestd-it-")
        old = os.umask(0o022)
        try:
            data = os.path.join(tmp, "data")
            with Server(keys=("k",), data_dir=data, args=["--data-mode", "group"]) as srv:
                self.assertEqual(srv.batch([track(mid=new_id())]).status, 200)
                self.check_modes(data, 0o640, 0o750)
        finally:
            os.umask(old)
            shutil.rmtree(tmp, ignore_errors=True)

    def test_data_dir_created_if_missing(self):
        base = Server(keys=("k",))
        nested = os.path.join(base.data_dir, "a", "b")
        srv = Server(keys=("k",), data_dir=nested)
        try:
            srv.start()
            self.assertEqual(srv.batch([track(mid=new_id())]).status, 200)
            srv.stop()
            self.assertEqual(len(log_cat(nested)), 1)
        finally:
            srv.cleanup()
            base.cleanup()


class Segments(unittest.TestCase):

    def test_many_segments_in_order_across_restart(self):
        with Server(keys=("k",), args=("--segment-bytes", "4KiB")) as srv:
            mids = []
            for i in range(10):
                batch = [track(mid=new_id("seg%d" % i), properties={"pad": "p" * 400})
                         for _ in range(10)]
                mids += [e["messageId"] for e in batch]
                r = srv.batch(batch)
                self.assertEqual((r.status, r.json["accepted"]), (200, 10), r)
            st = srv.stats()["log"]
            self.assertGreaterEqual(st["segments"], 5, st)
            self.assertEqual(st["next_offset"], 100)
            segs = [s for s in os.listdir(os.path.join(srv.data_dir, "log")) if s.endswith(".seg")]
            self.assertEqual(len(segs), st["segments"])
            self.assertEqual([e["messageId"] for e in log_cat(srv.data_dir)], mids)
            self.assertEqual([e["messageId"] for e in log_cat(srv.data_dir, from_=37)],
                             mids[37:])
            srv.restart()
            r = srv.batch([track(mid=m) for m in mids[:50]])
            self.assertEqual((r.json["accepted"], r.json["duplicates"]), (0, 50), r)
            extra = new_id("after")
            r = srv.batch([track(mid=extra)])
            self.assertEqual(r.json["accepted"], 1, r)
            self.assertEqual(srv.stats()["log"]["next_offset"], 101)
            ids = [e["messageId"] for e in log_cat(srv.data_dir)]
            self.assertEqual(ids, mids + [extra])
            self.assertEqual(max(collections.Counter(ids).values()), 1)


class Listen(unittest.TestCase):

    def test_ipv6_loopback(self):
        try:
            s = socket.socket(socket.AF_INET6)
            s.bind(("::1", 0))
            s.close()
        except OSError:
            self.skipTest("no IPv6 loopback here")
        srv = Server(keys=("k",), use_flags=False,
                     args=["--listen", "[::1]:0", "--write-key", "k"])
        srv.args += ["--data", srv.data_dir]
        try:
            srv.start()
            self.assertEqual(srv.host, "::1")
            self.assertEqual(srv.batch([track(mid=new_id())]).status, 200)
            srv.stop()
        finally:
            srv.cleanup()


if __name__ == "__main__":
    unittest.main(verbosity=2)
