"""Per-event verdicts (?verbose=true), duplicate ages and --window-floor, over real HTTP.

To the operator (the admin token), a duplicate's verdict names the log offset and receivedAt of
its first copy, which GET /v1/log
and `ingestd log cat` confirm: from the keys acknowledged since the last checkpoint, from LMDB
after a restart, and from a sealed generation (--young-keys small). Without the parameter the
answer is the Segment-compatible summary, byte for byte. To a write key alone (public in
browsers) the verdicts are statuses only: the global offset measures every source's volume, and
a first copy tells a prober whether and when someone else sent an id (issue 27). The ages of injected retries land in
ingestd_duplicate_age_seconds; a tiny --max-keys with --window-floor flips the gauge and /stats
and says so once in the log, and once more when the window is back.
"""

import json
import os
import sys
import time
import unittest

from harness import Server, deadline_wait, log_cat, new_id, run_cli, track

KEY = "k1"
TOKEN = "verdict-admin-token"


def post(srv, path, body, verbose=True, admin=True):
    """POST with KEY. admin: as the operator, the admin token in Authorization: Bearer and KEY in
    the body's writeKey; only then do the verdicts name log offsets and first copies."""
    if verbose is not None:
        path += "?verbose=" + ("true" if verbose is True else str(verbose))
    if admin:
        return srv.post(path, dict(body, writeKey=KEY), headers={"Authorization": "Bearer " + TOKEN})
    return srv.post(path, body, key=KEY)


def log_at(srv, offset):
    """The event at `offset`, read with GET /v1/log."""
    r = srv.get("/v1/log?from=%d&max=1" % offset, headers=srv.admin_headers())
    assert r.status == 200, r
    lines = r.body.decode().splitlines()
    assert len(lines) == 1, r.body
    return json.loads(lines[0])


def bucket(metrics_text, le):
    for line in metrics_text.splitlines():
        if line.startswith('ingestd_duplicate_age_seconds_bucket{le="%s"} ' % le):
            return int(line.rsplit(" ", 1)[1])
    raise AssertionError("no bucket le=%s in /metrics" % le)


class Verdicts(unittest.TestCase):

    def test_mixed_batch_in_order_and_checked_against_the_log(self):
        with Server(keys=(KEY,), args=["--admin-token", TOKEN]) as srv:
            a, b = new_id("a"), new_id("b")
            events = [track(mid=a), {"type": "track", "userId": "u", "messageId": "bad-1"},
                      track(mid=b), track(mid=a), track()]
            r = post(srv, "/v1/batch", {"batch": events})
            self.assertEqual(r.status, 200, r)
            res = r.json["results"]
            self.assertEqual([x["index"] for x in res], [0, 1, 2, 3, 4])
            self.assertEqual([x["status"] for x in res],
                             ["accepted", "rejected", "accepted", "duplicate", "accepted"])
            self.assertEqual((r.json["accepted"], r.json["duplicates"]), (3, 1))
            self.assertEqual(res[1]["messageId"], "bad-1")
            self.assertEqual(res[1]["error"], r.json["rejected"][0]["error"])
            self.assertNotIn("offset", res[1])
            # The same id twice in one batch: the second names the first.
            self.assertEqual(res[3]["offset"], res[0]["offset"])
            # An event without a messageId gets the one it was logged with.
            self.assertEqual(log_at(srv, res[4]["offset"])["messageId"], res[4]["messageId"])
            for x in (res[0], res[2]):
                self.assertEqual(log_at(srv, x["offset"])["messageId"], x["messageId"])
            first = log_at(srv, res[0]["offset"])
            self.assertEqual(res[3]["receivedAt"], first["receivedAt"])

            # A retry later, on a single-event route: the first copy's offset and receivedAt.
            r = post(srv, "/v1/track", track(mid=b))
            self.assertEqual(r.status, 200, r)
            (v,) = r.json["results"]
            self.assertEqual((v["index"], v["messageId"], v["status"]), (0, b, "duplicate"))
            self.assertEqual(v["offset"], res[2]["offset"])
            self.assertEqual(v["receivedAt"], log_at(srv, res[2]["offset"])["receivedAt"])

            # After a restart the key comes from LMDB: the same answer.
            srv.restart()
            r = post(srv, "/v1/import", {"batch": [track(mid=a), track(mid=b)]})
            self.assertEqual([(x["status"], x["offset"]) for x in r.json["results"]],
                             [("duplicate", res[0]["offset"]), ("duplicate", res[2]["offset"])])
            self.assertEqual(r.json["results"][0]["receivedAt"], first["receivedAt"])

    def test_without_verbose_the_body_is_unchanged(self):
        with Server(keys=(KEY,)) as srv:
            mid = new_id()
            body = {"batch": [track(mid=mid), {"type": "track", "userId": "u"}]}
            want = (b'{"success":true,"accepted":1,"duplicates":0,"rejected":'
                    b'[{"index":1,"error":"event must be a non-empty string for track"}]}')
            self.assertEqual(post(srv, "/v1/batch", body, verbose=None).body, want)
            want_dup = want.replace(b'"accepted":1,"duplicates":0', b'"accepted":0,"duplicates":1')
            self.assertEqual(post(srv, "/v1/batch", body, verbose="false").body, want_dup)
            self.assertEqual(post(srv, "/v1/batch", body, verbose="0").body, want_dup)
            r = post(srv, "/v1/batch", body, verbose="1")
            self.assertEqual(r.body[:len(want_dup) - 1], want_dup[:-1])
            self.assertEqual(len(r.json["results"]), 2)
            r = post(srv, "/v1/batch", body, verbose="yes")
            self.assertEqual(r.status, 400, r)
            self.assertIn("verbose", r.json["error"])
            # Every single-event route takes it too.
            for route, ev in (("identify", {"userId": "u"}), ("page", {"userId": "u"}),
                              ("screen", {"userId": "u"}), ("group", {"userId": "u",
                                                                      "groupId": "g"}),
                              ("alias", {"userId": "u", "previousId": "p"})):
                ev["messageId"] = new_id(route)
                r = post(srv, "/v1/" + route, ev)
                self.assertEqual(r.status, 200, (route, r))
                self.assertEqual(r.json["results"][0]["status"], "accepted", route)
                self.assertEqual(r.json["results"][0]["messageId"], ev["messageId"])

    def test_first_copy_in_a_sealed_generation(self):
        ids = ["s-%d" % i for i in range(600)]
        args = ["--young-keys", "200", "--max-keys", "0", "--admin-token", TOKEN]
        with Server(keys=(KEY,), args=args) as srv:
            offsets = {}
            for i in range(0, len(ids), 300):
                r = post(srv, "/v1/batch", {"batch": [track(mid=m) for m in ids[i:i + 300]]})
                for x in r.json["results"]:
                    offsets[x["messageId"]] = x["offset"]
            deadline_wait(lambda: srv.stats()["dedupe"]["generations"]["seals"] >= 1, 30,
                          "a seal")
            srv.restart()
            self.assertGreater(srv.stats()["dedupe"]["generations"]["keys"], 0)
            logged = log_cat(srv.data_dir)
            r = post(srv, "/v1/batch", {"batch": [track(mid=m) for m in ids[::7]]})
            self.assertEqual(r.json["duplicates"], len(ids[::7]))
            for x in r.json["results"]:
                self.assertEqual(x["status"], "duplicate")
                self.assertEqual(x["offset"], offsets[x["messageId"]])
                # The log starts at offset 0 here: the n-th line is offset n.
                self.assertEqual(logged[x["offset"]]["messageId"], x["messageId"])
                self.assertEqual(logged[x["offset"]]["receivedAt"], x["receivedAt"])
            # `log cat --from OFFSET` agrees.
            x = r.json["results"][-1]
            p = run_cli(["log", "cat", "--data", srv.data_dir, "--from", str(x["offset"])])
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(json.loads(p.stdout.splitlines()[0])["messageId"], x["messageId"])

    def test_offsets_and_first_copies_only_with_the_admin_token(self):
        with Server(keys=(KEY,), args=["--admin-token", TOKEN]) as srv:
            mid = new_id()
            r = post(srv, "/v1/batch", {"batch": [track(mid=mid)]}, admin=False)
            self.assertEqual(r.json["results"], [{"index": 0, "messageId": mid,
                                                  "status": "accepted"}])
            r = post(srv, "/v1/batch", {"batch": [track(mid=mid), track(mid=mid)]}, admin=False)
            self.assertEqual([x for x in r.json["results"]],
                             [{"index": 0, "messageId": mid, "status": "duplicate"},
                              {"index": 1, "messageId": mid, "status": "duplicate"}])
            # A wrong token (the write key in the body still admits the events): statuses only.
            r = srv.post("/v1/track?verbose=true", dict(track(mid=mid), writeKey=KEY),
                         headers={"Authorization": "Bearer not-the-token"})
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.json["results"], [{"index": 0, "messageId": mid,
                                                  "status": "duplicate"}])
            # The operator sees where the first copy is.
            (v,) = post(srv, "/v1/track", track(mid=mid)).json["results"]
            self.assertEqual((v["status"], v["offset"]), ("duplicate", 0))
            self.assertIn("receivedAt", v)
        # Without --admin-token nobody gets offsets.
        with Server(keys=(KEY,)) as srv:
            for _ in range(2):
                r = post(srv, "/v1/track", track(mid=mid))
                self.assertEqual(r.status, 200, r)
                self.assertEqual(set(r.json["results"][0]), {"index", "messageId", "status"})

    def test_memory_store_says_first_copy_unknown(self):
        with Server(keys=(KEY,), args=["--store", "memory:bloom:1Mbit", "--admin-token", TOKEN]) as srv:
            mid = new_id()
            post(srv, "/v1/track", track(mid=mid))
            r = post(srv, "/v1/track", track(mid=mid))
            (v,) = r.json["results"]
            self.assertEqual(v["status"], "duplicate")
            self.assertEqual(v["firstCopy"], "unknown")
            self.assertNotIn("offset", v)
            self.assertEqual(srv.stats()["dedupe"]["duplicate_age_seconds"]["count"], 0)


class DuplicateAges(unittest.TestCase):

    def test_histogram_counts_retry_ages(self):
        with Server(keys=(KEY,)) as srv:
            a, b = new_id("a"), new_id("b")
            r = post(srv, "/v1/batch", {"batch": [track(mid=a), track(mid=b)]})
            self.assertEqual(r.json["accepted"], 2)
            sent = time.monotonic()
            post(srv, "/v1/track", track(mid=a))  # a retry within the second: le="1"
            # Past the 1 s bucket bound (the clock is the condition here).
            deadline_wait(lambda: time.monotonic() - sent > 1.2, 5, "1.2 s since the first copy")
            r = post(srv, "/v1/track", track(mid=b))  # between 1 and 5 s: le="5"
            self.assertEqual(r.json["duplicates"], 1)
            m = srv.metrics().body.decode()
            self.assertIn("# TYPE ingestd_duplicate_age_seconds histogram", m)
            self.assertEqual(bucket(m, "1"), 1)
            self.assertEqual(bucket(m, "5"), 2)
            self.assertEqual(bucket(m, "+Inf"), 2)
            self.assertIn("ingestd_duplicate_age_seconds_count 2\n", m)
            ages = srv.stats()["dedupe"]["duplicate_age_seconds"]
            self.assertEqual(ages["count"], 2)
            self.assertGreater(ages["max"], 1.0)
            self.assertLess(ages["max"], 5.0)
            self.assertLessEqual(ages["p50"], ages["p99"])
            self.assertLessEqual(ages["p999"], ages["max"])
            self.assertGreater(ages["p999"], 1.0)


class WindowFloor(unittest.TestCase):

    def test_floor_gauge_stats_and_one_log_line_per_crossing(self):
        args = ["--max-keys", "20", "--window-floor", "3s"]
        with Server(keys=(KEY,), args=args) as srv:
            # Young: every key is younger than the floor, but nothing was forgotten.
            post(srv, "/v1/batch", {"batch": [track(mid=new_id()) for _ in range(20)]})
            st = srv.stats()["dedupe"]
            self.assertFalse(st["window_below_floor"], st)
            self.assertEqual(st["window_floor_seconds"], 3)
            self.assertIn("ingestd_dedupe_window_below_floor 0\n", srv.metrics().body.decode())
            # The size bound evicts keys a second old: below the floor, said once.
            for _ in range(3):
                post(srv, "/v1/batch", {"batch": [track(mid=new_id()) for _ in range(20)]})
            st = srv.stats()["dedupe"]
            self.assertGreater(st["evicted_size"], 0)
            self.assertTrue(st["window_below_floor"], st)
            self.assertLess(st["effective_window_seconds"], 3)
            self.assertIn("ingestd_dedupe_window_below_floor 1\n", srv.metrics().body.decode())
            self.assertEqual(srv.get("/healthz").status, 200)
            srv.wait_for_log(r"WARN .*fell below --window-floor")
            # Idle, the window grows back past the floor: said once, on its own.
            srv.wait_for_log(r"INFO .*back above --window-floor", timeout=15)
            self.assertFalse(srv.stats()["dedupe"]["window_below_floor"])
            self.assertIn("ingestd_dedupe_window_below_floor 0\n", srv.metrics().body.decode())
            log = srv.log(400)
            self.assertEqual(log.count("fell below --window-floor"), 1, log)
            self.assertEqual(log.count("back above --window-floor"), 1, log)

    def test_floor_above_window_is_refused(self):
        p = run_cli(["serve", "--listen", "127.0.0.1:0", "--data", "/nonexistent/x",
                     "--write-key", KEY, "--window", "1m", "--window-floor", "2m"])
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--window-floor", p.stderr)


if __name__ == "__main__":
    unittest.main()
