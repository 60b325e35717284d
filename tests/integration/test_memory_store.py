"""serve --store memory:SPEC: de-duplication by a bounded-memory filter, no LMDB, durable log."""

import collections
import os
import threading
import unittest

from harness import ServerTestCase, log_cat, new_id, track

# Bloom never forgets a key, so every re-send must come back a duplicate; with a few thousand
# keys in 8 Mbit its false positive chance is negligible (~1e-16), so no unique event is lost.
SPEC = "memory:bloom:8Mbit"


class MemoryStore(ServerTestCase):
    KEYS = ("k-web:web", "k-ios:ios")
    ARGS = ("--store", SPEC)

    def counts(self):
        return collections.Counter((e["source"], e["messageId"])
                                   for e in log_cat(self.srv.data_dir))

    def test_no_lmdb_store_is_made(self):
        self.assertOk(self.srv.batch([track(mid=new_id())], key="k-web"), accepted=1)
        self.assertFalse(os.path.exists(os.path.join(self.srv.data_dir, "store")))
        self.assertTrue(os.path.isdir(os.path.join(self.srv.data_dir, "log")))

    def test_retries_are_duplicates_and_logged_once(self):
        mids = [new_id() for _ in range(50)]
        events = [track(mid=m) for m in mids]
        self.assertOk(self.srv.batch(events, key="k-web"), accepted=50, duplicates=0)
        self.assertOk(self.srv.batch(events, key="k-web"), accepted=0, duplicates=50)
        # The same ids from another source are other events.
        self.assertOk(self.srv.batch(events, key="k-ios"), accepted=50, duplicates=0)
        c = self.counts()
        for m in mids:
            self.assertEqual((c[("web", m)], c[("ios", m)]), (1, 1), m)

    def test_concurrent_duplicates(self):
        mids = [new_id() for _ in range(40)]
        accepted = []
        lock = threading.Lock()

        def send():
            r = self.srv.batch([track(mid=m) for m in mids], key="k-web")
            with lock:
                accepted.append(r.json["accepted"])

        ts = [threading.Thread(target=send) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(sum(accepted), len(mids))
        c = self.counts()
        self.assertEqual(sorted(c[("web", m)] for m in mids), [1] * len(mids))

    def test_restart_rebuilds_the_filter_from_the_log(self):
        mids = [new_id() for _ in range(30)]
        self.assertOk(self.srv.batch([track(mid=m) for m in mids], key="k-web"), accepted=30)
        self.srv.restart()
        self.assertOk(self.srv.batch([track(mid=m) for m in mids], key="k-web"),
                      accepted=0, duplicates=30)
        st = self.srv.stats()
        self.assertGreaterEqual(st["recovery"]["replayed_records"], 30)

    def test_kill_9_keeps_every_ack_once(self):
        mids = [new_id() for _ in range(20)]
        self.assertOk(self.srv.batch([track(mid=m) for m in mids], key="k-web"), accepted=20)
        self.srv.kill()  # SIGKILL
        self.srv.start()
        self.assertOk(self.srv.batch([track(mid=m) for m in mids], key="k-web"),
                      accepted=0, duplicates=20)
        c = self.counts()
        self.assertEqual(sorted(c[("web", m)] for m in mids), [1] * 20)

    def test_stats_name_the_filter(self):
        st = self.srv.stats()
        d = st["dedupe"]
        self.assertEqual(d["store"], SPEC.split(":", 1)[0])
        self.assertIn("bloom", d["filter"]["spec"])
        self.assertGreater(d["filter"]["memory_bits"], 0)
        self.assertGreaterEqual(d["filter"]["asymptotic_fpr"], 0)


if __name__ == "__main__":
    unittest.main()
