"""kill -9 under load: every acknowledged event survives, nothing is ever logged twice."""

import collections
import signal
import threading
import unittest

from harness import Server, basic, deadline_wait, http_request, log_cat, new_id, track


class Crash(unittest.TestCase):

    def run_load_and_kill(self, srv, threads=6, per_batch=25):
        host, port = srv.host, srv.port
        lock = threading.Lock()
        acked, sent = [], []

        def worker():
            for _ in range(400):  # bounded; ends when the server is gone
                batch = [track(mid=new_id("crash")) for _ in range(per_batch)]
                # Retries of already-sent ids mixed in, as real clients do.
                with lock:
                    if sent:
                        batch += [track(mid=m) for m in sent[-per_batch:][:5]]
                    sent.extend(e["messageId"] for e in batch[:per_batch])
                try:
                    r = http_request(host, port, "POST", "/v1/batch", {"batch": batch},
                                     {"Authorization": basic("k")}, timeout=20)
                except Exception:  # refused, reset, disconnected: the process is gone
                    return
                if r.status == 200:
                    with lock:
                        acked.extend(e["messageId"] for e in batch)

        ts = [threading.Thread(target=worker) for _ in range(threads)]
        for t in ts:
            t.start()
        deadline_wait(lambda: len(acked) >= 6000, 30, "load to flow")
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait(timeout=10)
        srv.proc = None
        for t in ts:
            t.join(timeout=30)
        return set(acked), set(sent)

    def test_kill9_keeps_acks_and_dedupe(self):
        srv = Server(keys=("k",), args=("--segment-bytes", "64KiB"))
        try:
            srv.start()
            acked1, sent1 = self.run_load_and_kill(srv)
            srv.start()  # recovery: torn tail cut, LMDB caught up from the log
            acked2, sent2 = self.run_load_and_kill(srv)
            srv.start()
            acked, sent = acked1 | acked2, sent1 | sent2
            ids = [e["messageId"] for e in log_cat(srv.data_dir)]
            counts = collections.Counter(ids)
            twice = [m for m, c in counts.items() if c > 1]
            self.assertEqual(twice, [], "logged more than once")
            self.assertEqual(acked - set(ids), set(), "acknowledged but lost")
            self.assertTrue(set(ids) <= sent)
            # Everything in the log is inside the window: a retry of all of it is duplicates.
            logged = sorted(set(ids))
            for i in range(0, len(logged), 2000):
                chunk = logged[i:i + 2000]
                r = srv.batch([track(mid=m) for m in chunk], key="k")
                self.assertEqual((r.status, r.json["accepted"], r.json["duplicates"]),
                                 (200, 0, len(chunk)), r)
            st = srv.stats()
            self.assertEqual(st["dedupe"]["keys"], len(logged))
            srv.stop()
        finally:
            srv.cleanup()


if __name__ == "__main__":
    unittest.main(verbosity=2)
