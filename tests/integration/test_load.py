"""ingestd-load (load/ingestd_load.c) against the real server: SUMMARY line, duplicates, --verify.

The load generator's path comes from INGESTD_LOAD_BIN (set by CTest), else ../../build/ingestd-load.
Nothing here is timed: only counts and exit codes are asserted.
"""

import os
import shutil
import subprocess
import tempfile
import unittest

from harness import BIN, HERE, ServerTestCase, clean_env

LOAD_BIN = os.path.abspath(
    os.environ.get("INGESTD_LOAD_BIN") or os.path.join(HERE, "..", "..", "build", "ingestd-load"))


def summary(stdout):
    """The fields of the last `SUMMARY key=value ...` line, as strings."""
    lines = [l for l in stdout.splitlines() if l.startswith("SUMMARY ")]
    if not lines:
        raise AssertionError("no SUMMARY line in:\n%s" % stdout)
    return dict(kv.split("=", 1) for kv in lines[-1].split()[1:])


class Load(ServerTestCase):
    KEYS = ("loadkey",)

    def setUp(self):
        if not os.access(LOAD_BIN, os.X_OK):
            self.fail("ingestd-load not found at %s (set INGESTD_LOAD_BIN)" % LOAD_BIN)

    def load(self, *args, url=None):
        cmd = [LOAD_BIN, "--url", url or "http://127.0.0.1:%d" % self.srv.port,
               "--write-key", self.key, "--quiet"] + list(args)
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=300, env=clean_env())

    def assertRun(self, p, rc=0):
        self.assertEqual(p.returncode, rc, "exit %d\nstdout:\n%s\nstderr:\n%s"
                         % (p.returncode, p.stdout, p.stderr))

    def test_duplicates_are_counted_and_verified(self):
        before = self.srv.stats()["events"]
        p = self.load("--events", "4000", "--batch", "50", "--connections", "8",
                      "--dup-ratio", "0.05", "--run-id", "itdup",
                      "--verify", self.srv.data_dir, "--ingestd", BIN)
        self.assertRun(p)
        s = summary(p.stdout)
        self.assertEqual(s["run_id"], "itdup")
        self.assertEqual(s["verify"], "ok", p.stdout)
        self.assertEqual(int(s["events_sent"]), 4000)
        self.assertEqual(int(s["events_ok"]), 4000)
        self.assertEqual(int(s["requests"]), 80)
        self.assertEqual(int(s["requests_ok"]), 80)
        self.assertEqual(int(s["status_200"]), 80)
        for f in ("errors", "timeouts", "non200", "rejected"):
            self.assertEqual(int(s[f]), 0, f)
        accepted, dups = int(s["accepted"]), int(s["duplicates"])
        self.assertEqual(accepted + dups, 4000)
        # 5% of 4000 re-sends: 200 expected; the bounds only catch "none" or "all".
        self.assertGreater(dups, 50)
        self.assertLess(dups, 600)
        for f in ("events_per_s", "requests_per_s", "p50_ms", "p90_ms", "p99_ms", "max_ms"):
            self.assertGreaterEqual(float(s[f]), 0.0, f)
        self.assertLessEqual(float(s["p50_ms"]), float(s["p99_ms"]))
        self.assertLessEqual(float(s["p99_ms"]), float(s["max_ms"]))
        # The server agrees with what the generator parsed from the 200 bodies.
        after = self.srv.stats()["events"]
        self.assertEqual(after["accepted"] - before["accepted"], accepted)
        self.assertEqual(after["duplicates"] - before["duplicates"], dups)

    def test_gzip_two_threads_partial_last_batch(self):
        p = self.load("--events", "1234", "--batch", "100", "--connections", "4", "--threads",
                      "2", "--gzip", "--dup-ratio", "0.02", "--event-bytes", "600",
                      "--verify", self.srv.data_dir, "--ingestd", BIN)
        self.assertRun(p)
        s = summary(p.stdout)
        self.assertEqual(s["verify"], "ok", p.stdout)
        self.assertEqual(s["gzip"], "1")
        self.assertEqual(s["event_bytes"], "600")
        self.assertEqual(int(s["events_sent"]), 1234)
        self.assertEqual(int(s["accepted"]) + int(s["duplicates"]), 1234)
        self.assertEqual(int(s["errors"]) + int(s["non200"]), 0)

    def test_open_loop_rate_never_offers_more_than_the_schedule(self):
        # 2000 events/s in batches of 10: one request every 5 ms. The schedule bounds what is
        # offered from above whatever the server does (a slow server only lowers it).
        p = self.load("--rate", "2000", "--duration", "2s", "--batch", "10", "--connections",
                      "4", "--verify", self.srv.data_dir, "--ingestd", BIN)
        self.assertRun(p)
        s = summary(p.stdout)
        self.assertEqual(s["verify"], "ok", p.stdout)
        self.assertEqual(float(s["rate"]), 2000.0)
        sent = int(s["events_sent"])
        self.assertGreater(sent, 0)
        self.assertEqual(sent % 10, 0)
        self.assertLessEqual(sent, 2000 * 2 + 10, p.stdout)
        self.assertEqual(int(s["errors"]) + int(s["non200"]), 0)
        self.assertIn("open loop: 2000 events/s offered", p.stdout)

    def test_verify_fails_on_a_data_dir_without_the_events(self):
        empty = tempfile.mkdtemp(prefix="ingestd-it-empty-")
        try:
            p = self.load("--events", "500", "--connections", "2",
                          "--verify", empty, "--ingestd", BIN)
        finally:
            shutil.rmtree(empty, ignore_errors=True)
        self.assertRun(p, rc=1)
        s = summary(p.stdout)
        self.assertEqual(s["verify"], "violation", p.stdout)
        self.assertEqual(int(s["accepted"]), 500)
        self.assertIn("missing 500", p.stdout)

    def test_unknown_write_key_is_counted_as_401(self):
        p = subprocess.run([LOAD_BIN, "--url", "http://127.0.0.1:%d" % self.srv.port,
                            "--write-key", "not-a-key", "--events", "100", "--quiet"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=120, env=clean_env())
        self.assertRun(p)
        s = summary(p.stdout)
        self.assertEqual(int(s["status_401"]), 2)
        self.assertEqual(int(s["non200"]), 2)
        self.assertEqual(int(s["events_ok"]), 0)

    def test_bad_arguments_exit_2(self):
        cases = [
            ["--url", "http://192.0.2.1:8080"],      # not loopback
            ["--url", "http://127.0.0.1:8080/v1"],   # a path
            ["--url", "https://127.0.0.1:8080"],
            ["--batch", "0"],
            ["--batch", "2501"],
            ["--dup-ratio", "1.5"],
            ["--duration", "10x"],
            ["--events", "-3"],
            ["--threads", "3"],
            ["--no-such-option"],
            ["--events"],
            ["--rate", "0"],
            ["--rate", "fast"],
        ]
        for args in cases:
            p = subprocess.run([LOAD_BIN, "--write-key", "k"] + args, stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, timeout=30, env=clean_env())
            self.assertEqual(p.returncode, 2, (args, p.stdout, p.stderr))
            self.assertTrue(p.stderr.strip(), args)
        p = subprocess.run([LOAD_BIN, "--events", "10"], capture_output=True, text=True,
                           timeout=30, env=clean_env())
        self.assertEqual(p.returncode, 2, "no --write-key")
        p = subprocess.run([LOAD_BIN, "--help"], capture_output=True, text=True, timeout=30,
                           env=clean_env())
        self.assertEqual(p.returncode, 0)
        for opt in ("--url", "--write-key", "--connections", "--batch", "--events", "--duration",
                    "--dup-ratio", "--gzip", "--event-bytes", "--verify", "--allow-remote", "--rate",
                    "SUMMARY"):
            self.assertIn(opt, p.stdout)


if __name__ == "__main__":
    unittest.main()
