"""Command line: --help, help, version, bad flag values (exit 2), environment variables."""

import shutil
import tempfile
import unittest

from harness import Server, log_cat, new_id, run_cli, track

SERVE_FLAGS = ["--listen", "--data", "--write-key", "--window", "--max-keys", "--segment-bytes",
               "--map-size", "--threads", "--max-connections", "--timeout",
               "--commit-max-events", "--log-level"]
ENV_VARS = ["INGESTD_LISTEN", "INGESTD_DATA", "INGESTD_WRITE_KEY", "INGESTD_WINDOW",
            "INGESTD_MAX_KEYS"]


class Help(unittest.TestCase):

    def test_serve_help_lists_every_flag(self):
        p = run_cli(["serve", "--help"])
        self.assertEqual(p.returncode, 0, p.stderr)
        text = p.stdout + p.stderr
        for flag in SERVE_FLAGS:
            with self.subTest(flag=flag):
                self.assertIn(flag, text)
        for var in ENV_VARS:
            with self.subTest(env=var):
                self.assertIn(var, text)

    # Every subcommand's --help comes from its table (server/options.c): each flag and variable.
    SUBCOMMAND_FLAGS = {
        ("check",): ["--data", "INGESTD_DATA"],
        ("rebuild",): ["--data", "--window", "--max-keys", "INGESTD_WINDOW", "INGESTD_MAX_KEYS"],
        ("backup",): ["--data", "--to"],
        ("log", "cat"): ["--data", "--from", "--follow", "-f", "--group", "--stop-timeout",
                         "--log"],
        ("log", "groups"): ["--data", "--json"],
        ("lookup",): ["--data", "--source"],
        ("filter-bench",): ["--filter", "--bits", "--buckets", "--fingerprint-bits", "--stream",
                            "--seed", "--runs", "--quiet"],
        ("worker",): ["--kafka-brokers", "--raw-topic", "--out-topic", "--group", "--data",
                      "--window", "--max-keys", "--young-keys", "--listen", "--admin-token",
                      "--kafka-opt", "--transactional-id-prefix", "--max-batch",
                      "--mirror-offsets", "--dynamic-membership", "--log-level",
                      "INGESTD_KAFKA_BROKERS", "INGESTD_KAFKA_OPTS", "INGESTD_LISTEN"],
    }

    def test_every_subcommand_help_lists_its_flags(self):
        for cmd, flags in self.SUBCOMMAND_FLAGS.items():
            p = run_cli(list(cmd) + ["--help"])
            self.assertEqual(p.returncode, 0, (cmd, p.stderr))
            for flag in flags:
                with self.subTest(cmd=cmd, flag=flag):
                    self.assertIn(flag, p.stdout)

    def test_subcommand_bad_values_exit_2(self):
        d = tempfile.mkdtemp(prefix="ingestd-cli-")
        try:
            cases = [["rebuild", "--data", d, "--window", "soon"],
                     ["rebuild", "--data", d, "--max-keys", "12x"],
                     ["log", "cat", "--data", d, "--from", "x"],
                     ["log", "cat", "--data", d, "--follow=yes"],
                     ["lookup", "--data", d, "--source", "", "id"],
                     ["worker", "--window", "10y"], ["worker", "--young-keys", "0"],
                     ["worker", "--max-batch", "100001"], ["worker", "--bogus"],
                     ["filter-bench", "--runs", "0"], ["filter-bench", "--seed"]]
            for args in cases:
                with self.subTest(args=args):
                    p = run_cli(args)
                    self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
                    err = p.stderr.strip()
                    self.assertEqual(len(err.splitlines()), 1, err)
                    self.assertTrue(err.startswith("ingestd "), err)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def test_top_level_help(self):
        for args in (["--help"], ["help"]):
            with self.subTest(args=args):
                p = run_cli(args)
                self.assertEqual(p.returncode, 0, p.stderr)
                text = p.stdout + p.stderr
                self.assertIn("serve", text)
                self.assertIn("log cat", text)

    def test_version(self):
        p = run_cli(["version"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("0.1.0", p.stdout + p.stderr)

    def test_unknown_subcommand(self):
        p = run_cli(["frobnicate"])
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)


class BadValues(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ingestd-cli-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def serve(self, *args, env=None, key=True):
        base = ["serve", "--listen", "127.0.0.1:0", "--data", self.dir]
        if key:
            base += ["--write-key", "k"]
        return run_cli(base + list(args), env=env)

    def assertExit2(self, p):
        self.assertEqual(p.returncode, 2, "stdout=%r stderr=%r" % (p.stdout, p.stderr))
        err = p.stderr.strip()
        self.assertTrue(err, "a reason on stderr")
        self.assertEqual(len(err.splitlines()), 1, "one line on stderr: %r" % err)
        self.assertNotIn("listening on", err)

    def test_bad_flag_values_exit_2(self):
        cases = [
            ("--window", "abc"), ("--window", "-5m"), ("--window", "10y"), ("--window", ""),
            ("--max-keys", "abc"), ("--max-keys", "-1"), ("--max-keys", "12x"),
            ("--listen", "nohostport"), ("--listen", "127.0.0.1:99999"),
            ("--listen", "127.0.0.1:port"),
            ("--segment-bytes", "lots"), ("--map-size", "big"),
            ("--threads", "many"), ("--max-connections", "-3"), ("--timeout", "soon"),
            ("--commit-max-events", "x"), ("--log-level", "loud"),
        ]
        for flag, value in cases:
            with self.subTest(flag=flag, value=value):
                self.assertExit2(self.serve(flag, value))

    def test_unknown_flag_exit_2(self):
        self.assertExit2(self.serve("--bogus"))

    def test_flag_without_value_exit_2(self):
        self.assertExit2(self.serve("--window"))

    def test_no_write_key_exit_2(self):
        p = self.serve(key=False)
        self.assertExit2(p)
        self.assertIn("write", p.stderr.lower())

    def test_bad_env_value_exit_2(self):
        self.assertExit2(self.serve(env={"INGESTD_WINDOW": "forever"}))
        self.assertExit2(self.serve(env={"INGESTD_MAX_KEYS": "lots"}))


class Environment(unittest.TestCase):

    def test_env_listen_data_and_write_keys(self):
        d = tempfile.mkdtemp(prefix="ingestd-env-")
        srv = Server(use_flags=False, data_dir=d,
                     env={"INGESTD_LISTEN": "127.0.0.1:0", "INGESTD_DATA": d,
                          "INGESTD_WRITE_KEY": "envkey:envsrc,otherkey",
                          "INGESTD_WINDOW": "15m"})
        try:
            srv.start()
            m1, m2 = new_id(), new_id()
            self.assertEqual(srv.batch([track(mid=m1)], key="envkey").status, 200)
            self.assertEqual(srv.batch([track(mid=m2)], key="otherkey").status, 200)
            self.assertEqual(srv.batch([track()], key="nokey").status, 401)
            self.assertEqual(srv.stats()["dedupe"]["window_seconds"], 900)
            srv.stop()
            src = {e["messageId"]: e["source"] for e in log_cat(d)}
            self.assertEqual(src[m1], "envsrc")
            self.assertEqual(src[m2], "default")
        finally:
            srv.cleanup()
            shutil.rmtree(d, ignore_errors=True)

    def test_flags_win_over_env(self):
        srv = Server(keys=("flagkey",), args=("--window", "90s"),
                     env={"INGESTD_WINDOW": "1h", "INGESTD_LISTEN": "127.0.0.1:1"})
        try:
            srv.start()  # --listen 127.0.0.1:0 from the flag, not port 1 from the env
            self.assertEqual(srv.stats()["dedupe"]["window_seconds"], 90)
            srv.stop()
        finally:
            srv.cleanup()

    def test_second_server_on_same_data_dir_fails(self):
        with Server(keys=("k",)) as a:
            b = Server(keys=("k",), data_dir=a.data_dir)
            try:
                b.start()
                self.fail("a second server started on a locked data dir")
            except AssertionError as e:
                self.assertIn("exited", str(e))
            finally:
                b.cleanup()
            self.assertEqual(a.get("/healthz").status, 200)


if __name__ == "__main__":
    unittest.main(verbosity=2)
