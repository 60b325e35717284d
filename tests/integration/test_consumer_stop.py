"""`log cat --follow --group NAME | slow-loader`: a consumer stops when told, even when its
reader has stalled and the pipe is full.

The real binary writes into a real pipe that the test does not read: once the pipe holds its
whole capacity, `log cat` is blocked in write(2) (it has more to write). SIGTERM then lets the
write go on for `--stop-timeout` (default 2 s), abandons it, commits the group at exactly the
events that got out whole, and exits 0. The next `log cat --group NAME` resumes at the first
event not fully delivered, so over the two runs every event is read once, whole.
"""

import fcntl
import json
import os
import signal
import struct
import subprocess
import termios
import threading
import time
import unittest

from harness import Server, clean_env, deadline_wait, log_cat, log_cat_cmd, new_id, run_cli, track

F_GETPIPE_SZ = 1032  # fcntl.h (Linux); Python's fcntl module names it only from 3.10
PAD = "x" * 200  # ~330-byte lines: 1,500 of them are ~500 KB, several pipes full
EVENTS = 1500


def pipe_bytes(fd):
    """Bytes waiting in a pipe (FIONREAD on its read end)."""
    buf = fcntl.ioctl(fd, termios.FIONREAD, struct.pack("i", 0))
    return struct.unpack("i", buf)[0]


def drain(fd):
    chunks = []
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def delivered(pid, sig):
    """True once `sig` is no longer pending for process pid (its handler has taken it)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16) >> (sig - 1) & 1:
                return False
    return True


def group_offset(data_dir, group):
    p = run_cli(["log", "groups", "--data", data_dir, "--json"])
    assert p.returncode == 0, p.stderr
    return {g["group"]: g["offset"] for g in map(json.loads, p.stdout.splitlines())}[group]


class StopWhileStalled(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.srv = Server(keys=("ck",)).start()
        for b in range(EVENTS // 100):
            evs = [track(mid=new_id("st%d" % b), properties={"pad": PAD}) for _ in range(100)]
            r = cls.srv.batch(evs)
            assert r.status == 200 and r.json["accepted"] == 100, r
        cls.in_log = [e["messageId"] for e in log_cat(cls.srv.data_dir)]
        assert len(cls.in_log) == EVENTS

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        cls.srv.cleanup()

    def stalled(self, group, *args):
        """Starts `log cat --follow --group GROUP ARGS` into a pipe nobody reads; returns once
        the pipe is full (the writer blocked), as (process, read end of the pipe)."""
        r, w = os.pipe()
        self.addCleanup(os.close, r)
        p = subprocess.Popen(log_cat_cmd(self.srv.data_dir, follow=True, group=group) +
                             list(args), stdin=subprocess.DEVNULL, stdout=w,
                             stderr=subprocess.PIPE, env=clean_env())
        os.close(w)
        self.addCleanup(lambda: p.poll() is None and (p.kill(), p.wait()))
        cap = fcntl.fcntl(r, F_GETPIPE_SZ)

        def full():
            if p.poll() is not None:
                raise AssertionError("log cat exited %s: %s" % (p.returncode, p.stderr.read()))
            return pipe_bytes(r) >= cap
        deadline_wait(full, 20, "log cat to fill the pipe")
        return p, r

    def finish(self, p, r, wait):
        """Waits for the exit; returns (exit status, the lines written whole, stderr)."""
        try:
            rc = p.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            self.fail("log cat did not exit within %.0f s of SIGTERM with its reader stalled" %
                      wait)
        err = p.stderr.read().decode(errors="replace")
        p.stderr.close()
        out = drain(r)
        whole = out.split(b"\n")[:-1]  # the part after the last newline was cut off
        return rc, [json.loads(l)["messageId"] for l in whole], err

    def check_resume(self, group, got):
        """The group committed exactly the whole lines; the next run starts right after them."""
        self.assertEqual(got, self.in_log[:len(got)], "whole lines, in log order, from the start")
        self.assertEqual(group_offset(self.srv.data_dir, group), len(got),
                         "the committed offset counts exactly the events written whole")
        rest = [e["messageId"] for e in log_cat(self.srv.data_dir, group=group)]
        self.assertEqual(got + rest, self.in_log, "the next run resumes at the first event "
                         "not fully delivered: every event once over the two runs")

    def test_sigterm_abandons_a_blocked_write_after_the_default_2s(self):
        p, r = self.stalled("dflt")
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        rc, got, err = self.finish(p, r, 15)
        elapsed = time.monotonic() - t0
        self.assertEqual(rc, 0, err)
        self.assertGreaterEqual(elapsed, 1.9, "the blocked write had its 2 s")
        self.assertLess(elapsed, 5.0, "then it was abandoned")
        self.assertIn("stopped with the reader stalled", err)
        self.assertGreater(len(got), 0)
        self.assertLess(len(got), EVENTS)
        self.check_resume("dflt", got)

    def test_stop_timeout_zero_and_second_signal(self):
        p, r = self.stalled("zero", "--stop-timeout", "0")
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        rc, got, err = self.finish(p, r, 10)
        self.assertEqual(rc, 0, err)
        self.assertLess(time.monotonic() - t0, 1.5, "--stop-timeout 0: abandoned at once")
        self.check_resume("zero", got)

        # A long timeout, cut short by a second signal.
        p, r = self.stalled("twice", "--stop-timeout", "1m")
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        # Two SIGTERMs still pending at once merge into one: send the second once the
        # first was taken.
        deadline_wait(lambda: delivered(p.pid, signal.SIGTERM), 5, "the first SIGTERM taken")
        self.assertIsNone(p.poll())
        p.send_signal(signal.SIGTERM)
        rc, got, err = self.finish(p, r, 10)
        self.assertEqual(rc, 0, err)
        self.assertLess(time.monotonic() - t0, 1.5, "the second SIGTERM abandoned at once")
        self.check_resume("twice", got)

    def test_reader_that_resumes_within_the_timeout_gets_everything_buffered(self):
        p, r = self.stalled("late", "--stop-timeout", "30s")
        p.send_signal(signal.SIGTERM)
        out = []
        reader = threading.Thread(target=lambda: out.append(drain(r)))
        reader.start()  # the reader wakes up after the signal: the write completes
        rc = p.wait(timeout=20)
        reader.join(20)
        err = p.stderr.read().decode(errors="replace")
        p.stderr.close()
        self.assertEqual(rc, 0, err)
        self.assertTrue(out[0].endswith(b"\n"), "nothing cut off")
        self.assertNotIn("stopped with the reader stalled", err)
        got = [json.loads(l)["messageId"] for l in out[0].split(b"\n")[:-1]]
        self.assertGreater(len(got), 0)
        self.check_resume("late", got)

    def test_bad_stop_timeout_is_a_usage_error(self):
        for v in ("-1", "2x", "2h"):
            with self.subTest(v=v):
                p = run_cli(["log", "cat", "--data", self.srv.data_dir, "--stop-timeout", v])
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn("--stop-timeout", p.stderr)
        self.assertIn("--stop-timeout", run_cli(["log", "cat", "--help"]).stdout)


if __name__ == "__main__":
    unittest.main()
