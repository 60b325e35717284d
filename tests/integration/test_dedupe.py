"""Exactly-once: retries, ids repeated in a batch, concurrent duplicates, restarts, sources."""

import collections
import threading
import unittest

from harness import Server, ServerTestCase, basic, log_cat, new_id, track


class Dedupe(ServerTestCase):
    KEYS = ("k-web:web", "k-web2:web", "k-ios:ios")

    def counts(self):
        return collections.Counter((e["source"], e["messageId"])
                                   for e in log_cat(self.srv.data_dir))

    def test_retried_batch_is_duplicates_and_logged_once(self):
        mids = [new_id() for _ in range(10)]
        events = [track(mid=m) for m in mids]
        self.assertOk(self.srv.batch(events, key="k-web"), accepted=10, duplicates=0)
        self.assertOk(self.srv.batch(events, key="k-web"), accepted=0, duplicates=10)
        self.assertOk(self.srv.batch(events, key="k-web"), accepted=0, duplicates=10)
        c = self.counts()
        for m in mids:
            self.assertEqual(c[("web", m)], 1, m)

    def test_partial_retry(self):
        old = [new_id() for _ in range(3)]
        new = [new_id() for _ in range(2)]
        self.assertOk(self.srv.batch([track(mid=m) for m in old], key="k-web"), accepted=3)
        r = self.srv.batch([track(mid=m) for m in old + new], key="k-web")
        self.assertOk(r, accepted=2, duplicates=3)

    def test_same_id_twice_in_one_batch(self):
        mid = new_id()
        other = new_id()
        r = self.srv.batch([track(mid=mid), track(mid=other), track(mid=mid, event="Again")],
                           key="k-web")
        self.assertOk(r, accepted=2, duplicates=1, rejected=[])
        c = self.counts()
        self.assertEqual(c[("web", mid)], 1)
        first = [e for e in log_cat(self.srv.data_dir) if e["messageId"] == mid][0]
        self.assertEqual(first["event"], "Test Event", "the first occurrence is the one kept")

    def test_sources_do_not_dedupe_each_other(self):
        mid = new_id()
        self.assertOk(self.srv.batch([track(mid=mid)], key="k-web"), accepted=1)
        self.assertOk(self.srv.batch([track(mid=mid)], key="k-ios"), accepted=1, duplicates=0)
        self.assertOk(self.srv.batch([track(mid=mid)], key="k-ios"), accepted=0, duplicates=1)
        c = self.counts()
        self.assertEqual(c[("web", mid)], 1)
        self.assertEqual(c[("ios", mid)], 1)

    def test_keys_of_one_source_share_the_window(self):
        # The dedupe key is (source, messageId): two write keys of one source are one stream.
        mid = new_id()
        self.assertOk(self.srv.batch([track(mid=mid)], key="k-web"), accepted=1)
        self.assertOk(self.srv.batch([track(mid=mid)], key="k-web2"), accepted=0, duplicates=1)

    def test_single_routes_and_batch_share_the_window(self):
        mid = new_id()
        r = self.srv.post("/v1/track", {"event": "E", "userId": "u", "messageId": mid},
                          key="k-web")
        self.assertOk(r, accepted=1)
        self.assertOk(self.srv.batch([track(mid=mid)], key="k-web"), accepted=0, duplicates=1)
        r = self.srv.post("/v1/import", {"batch": [track(mid=mid)]}, key="k-web")
        self.assertOk(r, accepted=0, duplicates=1)

    def test_concurrent_duplicates_race(self):
        threads_n, ids_n, rounds = 16, 50, 3
        mids = [new_id("race") for _ in range(ids_n)]
        body = {"batch": [track(mid=m) for m in mids]}
        barrier = threading.Barrier(threads_n)
        results, errors = [], []
        lock = threading.Lock()

        def worker(i):
            try:
                barrier.wait(timeout=20)
                for _ in range(rounds):
                    # Each thread shuffles the order differently so lock orders differ too.
                    evs = body["batch"][i % ids_n:] + body["batch"][:i % ids_n]
                    r = self.srv.post("/v1/batch", {"batch": evs}, key="k-web")
                    with lock:
                        results.append(r)
            except Exception as e:  # reported below
                with lock:
                    errors.append(repr(e))

        ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads_n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=60)
        self.assertEqual(errors, [])
        self.assertEqual(len(results), threads_n * rounds)
        for r in results:
            self.assertOk(r, rejected=[])
        accepted = sum(r.json["accepted"] for r in results)
        dups = sum(r.json["duplicates"] for r in results)
        self.assertEqual(accepted, ids_n, "accepted totals across responses == unique ids")
        self.assertEqual(dups, threads_n * rounds * ids_n - ids_n)
        c = self.counts()
        for m in mids:
            self.assertEqual(c[("web", m)], 1, m)


class Restart(unittest.TestCase):

    def test_accepted_ids_stay_duplicates_after_restart(self):
        srv = Server(keys=("rkey:web", "rkey2:ios"))
        try:
            srv.start()
            mids = [new_id() for _ in range(20)]
            events = [track(mid=m) for m in mids]
            r = srv.batch(events, key="rkey")
            self.assertEqual((r.status, r.json["accepted"]), (200, 20), r)
            srv.restart()  # SIGTERM, exit 0 asserted, same data dir
            r = srv.batch(events, key="rkey")
            self.assertEqual((r.status, r.json["accepted"], r.json["duplicates"]), (200, 0, 20), r)
            # Another source still gets its first copy accepted after the restart.
            r = srv.batch(events[:1], key="rkey2")
            self.assertEqual((r.status, r.json["accepted"]), (200, 1), r)
            srv.restart()
            r = srv.post("/v1/batch", {"batch": events}, headers={"Authorization": basic("rkey")})
            self.assertEqual((r.status, r.json["duplicates"]), (200, 20), r)
            srv.stop()
            c = collections.Counter((e["source"], e["messageId"]) for e in log_cat(srv.data_dir))
            for m in mids:
                self.assertEqual(c[("web", m)], 1, m)
            self.assertEqual(c[("ios", mids[0])], 1)
            self.assertEqual(len(log_cat(srv.data_dir)), 21)
        finally:
            srv.cleanup()

    def test_log_cat_after_stop_matches_acks(self):
        srv = Server(keys=("k",))
        try:
            srv.start()
            acked = []
            for i in range(5):
                mids = [new_id() for _ in range(7)]
                r = srv.batch([track(mid=m) for m in mids])
                self.assertEqual(r.status, 200, r)
                acked += mids
            srv.stop()
            self.assertEqual([e["messageId"] for e in log_cat(srv.data_dir)], acked)
        finally:
            srv.cleanup()


if __name__ == "__main__":
    unittest.main(verbosity=2)
