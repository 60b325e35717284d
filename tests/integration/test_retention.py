"""Log retention never deletes what LMDB has not durably applied (docs/durability.md).

With a tight `--log-max-bytes` (4 KiB segments, a 16 KiB bound) the server writes far past the
bound between two checkpoints (every 3 s). Each test sends batches of new messageIds until a
retention pass has acted on the over-full log (the server logs that it deleted segments, or that
it is waiting for LMDB), then kills the server with SIGKILL:

- before its first checkpoint: LMDB has applied nothing, so no segment may have gone;
- after its first checkpoint: only segments below what that checkpoint applied may have gone.

The restart must succeed, and re-sending every acknowledged messageId must give only duplicates.
A third test checks that the waiting is reported (/stats, /metrics, a warning) and ends once a
checkpoint has applied the records.
"""

import re
import unittest

from harness import Server, deadline_wait, new_id, track

MAX_BYTES = 16384
ARGS = ("--segment-bytes", "4KiB", "--log-max-bytes", "16KiB")
BATCH = 50
PAD = "x" * 200  # ~480 bytes a record; a segment rolls between appends, so one batch each
BATCH_BYTES = BATCH * 600  # at most, for a batch's segment
RETENTION_ACTED = r"log retention (deleted|is waiting)"


class Retention(unittest.TestCase):
    def setUp(self):
        self.srv = Server(args=ARGS)
        self.addCleanup(self.srv.cleanup)
        self.srv.start()
        self.acked = []

    def send(self):
        ids = [new_id("r") for _ in range(BATCH)]
        r = self.srv.batch([track(mid=m, pad=PAD) for m in ids])
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json["accepted"], BATCH, r)
        self.acked += ids

    def logged(self, pattern, from_line):
        """Whether a server log line at index >= from_line matches `pattern`."""
        rx = re.compile(pattern)
        with self.srv._lines_lock:
            return any(rx.search(line) for line in self.srv.lines[from_line:])

    def line_count(self):
        with self.srv._lines_lock:
            return len(self.srv.lines)

    def send_until_retention_acts(self, from_line):
        """Sends batches until a retention pass logged (at line >= from_line) that it acted."""
        def acted():
            self.send()
            return self.logged(RETENTION_ACTED, from_line)
        deadline_wait(acted, 30, "a retention pass on the over-full log", interval=0)

    def restart_and_resend(self):
        self.srv.kill()
        self.srv.start()  # must not refuse
        accepted = 0
        for i in range(0, len(self.acked), 500):
            chunk = self.acked[i:i + 500]
            r = self.srv.batch([track(mid=m, pad=PAD) for m in chunk])
            self.assertEqual(r.status, 200, r)
            accepted += r.json["accepted"]
        self.assertEqual(accepted, 0, "%d of %d acknowledged ids were accepted again"
                         % (accepted, len(self.acked)))
        st = self.srv.stats()
        self.assertLessEqual(st["log"]["first_offset"], len(self.acked))
        self.srv.stop()

    def checkpoints(self):
        return self.srv.stats()["commit"]["checkpoints"]

    def test_kill_before_first_checkpoint(self):
        self.send_until_retention_acts(0)
        checkpoints = self.checkpoints()
        self.restart_and_resend()
        self.assertEqual(checkpoints, 0, "the first checkpoint came before the kill")

    def test_kill_after_a_checkpoint(self):
        def checkpointed():
            self.send()
            return self.checkpoints() >= 1
        deadline_wait(checkpointed, 30, "the first checkpoint", interval=0)
        self.send_until_retention_acts(self.line_count())
        self.restart_and_resend()

    def test_waiting_is_reported_and_ends(self):
        from_line = self.line_count()

        def waiting():
            self.send()
            return self.srv.stats()["log"]["retention"]["held_bytes"] > 0
        deadline_wait(waiting, 30, "retention held back by the store", interval=0)
        self.srv.wait_for_log(r"WARN .*log retention is waiting for LMDB", start=from_line)
        st = self.srv.stats()
        self.assertGreaterEqual(st["log"]["retention"]["waits"], 1)
        text = self.srv.metrics().body.decode()
        self.assertRegex(text, r"(?m)^ingestd_log_retention_held_bytes \d")
        self.assertRegex(text, r"(?m)^ingestd_log_retention_waits_total [1-9]")
        # No more writes: the idle checkpoint applies everything, and the next pass deletes it.
        def caught_up():
            ret = self.srv.stats()["log"]["retention"]
            return ret["held_bytes"] == 0 and ret["segments_deleted"] > 0
        deadline_wait(caught_up, 30, "retention caught up after a checkpoint")
        # Within the bound, but for the active segment (never deleted).
        self.assertLessEqual(self.srv.stats()["log"]["bytes"], MAX_BYTES + BATCH_BYTES)
        self.restart_and_resend()


if __name__ == "__main__":
    unittest.main()
