"""One nesting limit on both JSON parsers (issue 27): 256 levels.

The fast parser stopped at 256 levels and handed deeper bodies to jansson, which allowed 2,048,
so one public key could log an event that a stock Python consumer (json.loads, about 1,000
levels) cannot read. Now a body nested deeper than 256 levels is a 400 whichever parser reads
it; at 256 it is accepted, and the logged line reads back with Python's default recursion limit.
Each depth is sent on the fast path and on jansson's (a 70-digit number, which the fast parser
leaves to jansson).
"""

import json
import subprocess
import sys
import unittest

import harness
from harness import ServerTestCase, new_id

LIMIT = 256
SLOW_LEAF = "0." + "0" * 66 + "1"  # 69 characters: past the fast parser's 63


def body(depth, mid, slow):
    """{"batch":[event]} nested `depth` levels in all: the root, the list, the event, and
    depth - 3 arrays in its properties."""
    inner = "[" * (depth - 3) + (SLOW_LEAF if slow else "0") + "]" * (depth - 3)
    return ('{"batch":[{"type":"track","event":"e","userId":"u","messageId":"%s","p":%s}]}'
            % (mid, inner))


class Nesting(ServerTestCase):
    KEYS = ("nkey:nest",)

    def post(self, depth, slow):
        mid = new_id("deep%d-%s" % (depth, "slow" if slow else "fast"))
        return mid, self.srv.post("/v1/batch", body(depth, mid, slow), key=self.key,
                                  headers={"Content-Type": "application/json"})

    def test_at_the_limit_is_accepted_and_readable(self):
        for slow in (False, True):
            with self.subTest(path="jansson" if slow else "fast"):
                mid, r = self.post(LIMIT, slow)
                self.assertOk(r, accepted=1)
                # A stock Python, default recursion limit, reads the logged line.
                out = subprocess.run([harness.BIN, "log", "cat", "--data", self.srv.data_dir],
                                     capture_output=True, timeout=30, check=True).stdout
                line = [l for l in out.splitlines() if mid.encode() in l]
                self.assertEqual(len(line), 1)
                p = subprocess.run([sys.executable, "-c",
                                    "import json,sys; json.loads(sys.stdin.buffer.read())"],
                                   input=line[0], capture_output=True, timeout=30)
                self.assertEqual(p.returncode, 0, p.stderr[-300:])

    def test_past_the_limit_is_refused(self):
        for depth in (LIMIT + 1, 2040):
            for slow in (False, True):
                with self.subTest(depth=depth, path="jansson" if slow else "fast"):
                    mid, r = self.post(depth, slow)
                    self.assertError(r, 400, "nested deeper than 256 levels")
                    self.assertNotIn(mid, {e.get("messageId")
                                           for e in harness.log_cat(self.srv.data_dir)})


if __name__ == "__main__":
    unittest.main()
