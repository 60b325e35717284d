"""Progress lines of the long operator commands: `ingestd check`, `rebuild` and `backup`.

On a terminal (a pseudo-terminal here, as an operator's shell would give) each prints one
`\\r`-rewritten line with the percent done, the rate and an ETA, and erases it before its
report; with stdout on a pipe (scripts, CI logs) not one byte of it. A data dir of 40,000
events (ingestd-load) makes each step long enough to draw.
"""

import os
import pty
import select
import shutil
import subprocess
import tempfile
import unittest

import harness

LOAD_BIN = os.path.abspath(os.environ.get("INGESTD_LOAD_BIN")
                           or os.path.join(harness.HERE, "..", "..", "build", "ingestd-load"))
EVENTS = 40000
TOOL_TIMEOUT = 120


def on_terminal(args):
    """Runs `ingestd ARGS` with stdout and stderr on a pseudo-terminal; (exit code, output)."""
    try:
        master, slave = pty.openpty()
    except OSError as e:  # a container without /dev/pts: say so, neither pass nor fail
        raise unittest.SkipTest("no pseudo-terminal here: %s" % e)
    p = subprocess.Popen([harness.BIN] + args, stdin=subprocess.DEVNULL, stdout=slave,
                         stderr=slave, env=harness.clean_env())
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], TOOL_TIMEOUT)
        if not ready:
            p.kill()
            raise AssertionError("ingestd %s: no output for %ds" % (args, TOOL_TIMEOUT))
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return p.wait(timeout=TOOL_TIMEOUT), out.decode("utf-8", "replace")


class ProgressTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ingestd-progress-")
        cls.data = os.path.join(cls.tmp, "data")
        with harness.Server(keys=["pk"], data_dir=cls.data) as srv:
            subprocess.run([LOAD_BIN, "--url", "http://127.0.0.1:%d" % srv.port,
                            "--write-key", "pk", "--events", str(EVENTS), "--batch", "500",
                            "--connections", "4", "--quiet"], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, check=True, timeout=TOOL_TIMEOUT)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def check_both(self, args, step, final):
        """`step` drawn on a terminal up to 100% and erased; nothing of it in a pipe."""
        rc, out = on_terminal(args)
        self.assertEqual(rc, 0, out)
        self.assertIn("\r%s: " % step, out)
        self.assertIn("100.0%", out)
        self.assertRegex(out, r"/s(, ETA \d+:\d\d)?")
        self.assertIn("\r\033[K", out)  # erased before the report
        self.assertIn(final, out)
        p = harness.run_cli(args, timeout=TOOL_TIMEOUT)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn(final, p.stdout)
        for s in (p.stdout, p.stderr):
            self.assertNotIn("\r", s)
            self.assertNotIn("\033", s)
            self.assertNotIn("%", s)

    def test_check(self):
        self.check_both(["check", "--data", self.data], "checking the log", "check: OK")

    def test_rebuild(self):
        self.check_both(["rebuild", "--data", self.data], "replaying the log", "rebuild: OK")

    def test_backup(self):
        dirs = iter(os.path.join(self.tmp, "backup%d" % i) for i in range(2))
        rc, out = on_terminal(["backup", "--data", self.data, "--to", next(dirs)])
        self.assertEqual(rc, 0, out)
        self.assertIn("\rcopying the log: ", out)
        self.assertIn("backup: OK", out)
        p = harness.run_cli(["backup", "--data", self.data, "--to", next(dirs)],
                            timeout=TOOL_TIMEOUT)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertNotIn("\r", p.stdout + p.stderr)
        self.assertNotIn("\033", p.stdout + p.stderr)


if __name__ == "__main__":
    unittest.main()
