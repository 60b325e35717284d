"""GET /v1/events/{messageId} and `ingestd lookup`: one messageId's verdict, over real HTTP.

A seen id answers with its log offset, receivedAt and the event as logged; after a restart,
a kill -9, a seal into a generation and log retention too. An evicted id answers unseen with
the window's start. The CLI prints the same bodies from another process while the server runs,
including for a key only in the log past LMDB's last checkpoint.
"""

import json
import os
import re
import shutil
import tempfile
import unittest
import urllib.parse

from harness import (Server, ServerTestCase, deadline_wait, log_cat, new_id, parse_iso,
                     run_cli, track, ISO_MS_UTC_RE)

TOKEN = "lookup-admin-token"
AUTH = {"Authorization": "Bearer " + TOKEN}


def lookup(srv, mid, source=None, headers=None):
    path = "/v1/events/" + urllib.parse.quote(mid, safe="")
    if source is not None:
        path += "?source=" + urllib.parse.quote(source, safe="")
    return srv.get(path, headers=AUTH if headers is None else headers)


def cli(data_dir, *ids, source=None):
    args = ["lookup", "--data", data_dir]
    if source is not None:
        args += ["--source", source]
    p = run_cli(args + list(ids))
    lines = [json.loads(l) for l in p.stdout.splitlines()]
    return p.returncode, lines, p.stderr


def logged(data_dir, mid):
    """The event with messageId `mid` as `ingestd log cat` prints it, and its offset."""
    evs = [e for e in log_cat(data_dir) if e.get("messageId") == mid]
    assert len(evs) == 1, evs
    return evs[0]


def applied_offset(data_dir):
    """LMDB's applied offset (the last checkpoint), from `ingestd check`."""
    p = run_cli(["check", "--data", data_dir], timeout=60)
    m = re.search(r"applied offset (\d+)", p.stdout)
    assert m, p.stdout + p.stderr
    return int(m.group(1))


class Lookup(ServerTestCase):
    KEYS = ("k1", "k2:mobile")
    ARGS = ("--admin-token", TOKEN)

    def accept(self, key="k1", **extra):
        mid = new_id("lk")
        r = self.srv.batch([track(mid=mid, **extra)], key=key)
        self.assertOk(r, accepted=1)
        return mid

    def assertSeen(self, r, mid, source="default"):
        self.assertEqual(r.status, 200, r)
        j = r.json
        self.assertEqual((j["status"], j["messageId"], j["source"]), ("seen", mid, source), j)
        self.assertRegex(j["receivedAt"], ISO_MS_UTC_RE)
        self.assertIsInstance(j["offset"], int)
        return j

    def assertUnseen(self, r, mid, source="default"):
        self.assertEqual(r.status, 404, r)
        j = r.json
        self.assertEqual((j["status"], j["messageId"], j["source"]), ("unseen", mid, source), j)
        self.assertIn("window_start", j)
        return j

    def test_seen_after_accept_has_the_logged_event(self):
        mid = self.accept(properties={"revenue": 9.5, "plan": "pro"})
        j = self.assertSeen(lookup(self.srv, mid), mid)
        ev = logged(self.srv.data_dir, mid)
        self.assertEqual(j["event"], ev)
        self.assertEqual(j["event"]["properties"], {"revenue": 9.5, "plan": "pro"})
        self.assertEqual(j["receivedAt"], ev["receivedAt"])
        # The offset is the record's: GET /v1/log at it gives the same event.
        r = self.srv.get("/v1/log?from=%d&max=1" % j["offset"], headers=AUTH)
        self.assertEqual(json.loads(r.body.decode().splitlines()[0]), ev)

    def test_unseen_says_where_the_window_starts(self):
        self.accept()
        mid = new_id("never")
        j = self.assertUnseen(lookup(self.srv, mid), mid)
        self.assertRegex(j["window_start"], ISO_MS_UTC_RE)

    def test_sources_are_separate(self):
        mid = self.accept(key="k2")
        self.assertSeen(lookup(self.srv, mid, source="mobile"), mid, "mobile")
        self.assertUnseen(lookup(self.srv, mid), mid)
        # An unknown source is just a name in the key: unseen, not an error.
        self.assertUnseen(lookup(self.srv, mid, source="no-such-source"), mid, "no-such-source")

    def test_ids_with_slashes_and_unicode(self):
        for mid in ("a/b/../c", "spaces and &=+ signs", "caf\u00e9-\u2603", "%41"):
            r = self.srv.batch([track(mid=mid)], key="k1")
            self.assertOk(r, accepted=1)
            self.assertEqual(self.assertSeen(lookup(self.srv, mid), mid)["event"]["messageId"],
                             mid)
        # A '?' travels as %3F: part of the id, not the start of a query; the CLI finds it too.
        self.assertOk(self.srv.batch([track(mid="what?")], key="k1"), accepted=1)
        self.assertSeen(lookup(self.srv, "what?"), "what?")
        self.assertUnseen(lookup(self.srv, "what"), "what")
        self.assertSeen(lookup(self.srv, "what?", source="default"), "what?")
        rc, lines, err = cli(self.srv.data_dir, "what?")
        self.assertEqual((rc, lines[0]["event"]["messageId"]), (0, "what?"), err)

    def test_bad_ids_are_400(self):
        self.assertError(self.srv.get("/v1/events/", headers=AUTH), 400, "empty")
        self.assertError(lookup(self.srv, "x" * 257), 400, "256")
        r = lookup(self.srv, "x" * 256)  # the longest a messageId may be: a valid question
        self.assertUnseen(r, "x" * 256)
        self.assertError(self.srv.get("/v1/events/ab%zz", headers=AUTH), 400, "percent")
        self.assertError(self.srv.get("/v1/events/ab%4", headers=AUTH), 400, "percent")
        self.assertError(self.srv.get("/v1/events/%ff%fe", headers=AUTH), 400, "utf-8")
        self.assertError(lookup(self.srv, "m1", source="s" * 257), 400, "source")

    def test_token_is_required(self):
        mid = self.accept()
        self.assertError(lookup(self.srv, mid, headers={}), 401, "missing admin token")
        r = lookup(self.srv, mid, headers={"Authorization": "Bearer wrong"})
        self.assertError(r, 401, "invalid admin token")
        self.assertEqual(r.header("WWW-Authenticate"), 'Bearer realm="ingestd"')
        r = self.srv.post("/v1/events/" + mid, b"", headers=AUTH)
        self.assertError(r, 405)
        self.assertEqual(r.header("Allow"), "GET")

    def test_cli_while_the_server_runs(self):
        a, b = self.accept(), self.accept(key="k2")
        never = new_id("never")
        rc, lines, err = cli(self.srv.data_dir, a, never)
        self.assertEqual(rc, 1, err)
        self.assertEqual([l["status"] for l in lines], ["seen", "unseen"], lines)
        self.assertEqual(lines[0], lookup(self.srv, a).json)
        r = lookup(self.srv, never).json
        r.pop("requestId")
        self.assertEqual(lines[1], r)
        rc, lines, err = cli(self.srv.data_dir, b, source="mobile")
        self.assertEqual((rc, lines[0]["status"]), (0, "seen"), err)
        self.assertEqual(lines[0]["event"], logged(self.srv.data_dir, b))
        # Usage and errors: exit 2.
        rc, lines, _ = cli(self.srv.data_dir, a, "x" * 257)
        self.assertEqual(rc, 2)
        self.assertEqual(lines[0]["status"], "seen")
        self.assertIs(lines[1]["success"], False)
        self.assertEqual(run_cli(["lookup", "--data", self.srv.data_dir]).returncode, 2)
        self.assertEqual(run_cli(["lookup", "--bogus", "x"]).returncode, 2)
        empty = tempfile.mkdtemp(prefix="ingestd-lookup-empty-")
        try:
            p = run_cli(["lookup", "--data", empty, a])
            self.assertEqual(p.returncode, 2)
            self.assertIn("secret", p.stderr)
        finally:
            shutil.rmtree(empty, ignore_errors=True)
        p = run_cli(["lookup", "--help"])
        self.assertEqual(p.returncode, 0)
        self.assertIn("Exit 0", p.stdout)

    def test_cli_finds_a_key_only_in_the_log_tail(self):
        """A key acknowledged since LMDB's last checkpoint is in the log alone: the CLI reads
        the log past the applied offset. Checkpoints come every 3 s, so a lookup right after
        the accept nearly always finds the key there; `check` (after it) proves it did."""
        for _ in range(10):
            mid = self.accept()
            rc, lines, err = cli(self.srv.data_dir, mid)
            self.assertEqual((rc, lines[0]["status"]), (0, "seen"), err)
            self.assertEqual(lines[0]["event"], logged(self.srv.data_dir, mid))
            if lines[0]["offset"] >= applied_offset(self.srv.data_dir):
                return  # applied only grows: the lookup ran before the key reached LMDB
        self.fail("no lookup ran before a checkpoint in 10 tries")


class Durability(unittest.TestCase):

    def test_found_after_restart_and_kill(self):
        with Server(keys=("k1",), args=["--admin-token", TOKEN]) as srv:
            ids = [new_id("d") for _ in range(3)]
            r = srv.batch([track(mid=m) for m in ids], key="k1")
            self.assertEqual(r.json["accepted"], 3, r)
            before = [lookup(srv, m).json for m in ids]
            srv.restart()
            self.assertEqual([lookup(srv, m).json for m in ids], before)
            # kill -9 right after an accept: the key is replayed from the log at start.
            late = new_id("late")
            self.assertEqual(srv.batch([track(mid=late)], key="k1").json["accepted"], 1)
            seen = lookup(srv, late).json
            srv.kill()
            rc, lines, err = cli(srv.data_dir, late, *ids)  # a dead server's dir reads too
            self.assertEqual(rc, 0, err)
            self.assertEqual(lines[0], seen)
            srv.start()
            self.assertEqual(lookup(srv, late).json, seen)
            self.assertEqual([lookup(srv, m).json for m in ids], before)

    def test_found_in_a_sealed_generation(self):
        args = ["--admin-token", TOKEN, "--young-keys", "1000", "--max-keys", "0"]
        with Server(keys=("k1",), args=args) as srv:
            ids = ["gen-%d" % i for i in range(2500)]
            for i in range(0, len(ids), 500):
                r = srv.batch([track(mid=m) for m in ids[i:i + 500]], key="k1")
                self.assertEqual(r.json["accepted"], 500, r)
            deadline_wait(lambda: srv.stats()["dedupe"]["generations"]["seals"] >= 1, 30,
                          "a seal")
            self.assertGreater(srv.stats()["dedupe"]["generations"]["keys"], 0)
            first = logged(srv.data_dir, ids[0])
            j = lookup(srv, ids[0]).json
            self.assertEqual((j["status"], j["offset"], j["event"]), ("seen", 0, first), j)
            rc, lines, err = cli(srv.data_dir, ids[0], ids[1500], ids[-1])
            self.assertEqual(rc, 0, err)
            self.assertEqual(lines[0], j)
            self.assertEqual([l["offset"] for l in lines], [0, 1500, 2499])

    def test_evicted_id_is_unseen_with_the_window_start(self):
        with Server(keys=("k1",), args=["--admin-token", TOKEN, "--max-keys", "10"]) as srv:
            old = new_id("old")
            self.assertEqual(srv.batch([track(mid=old)], key="k1").json["accepted"], 1)
            received = parse_iso(lookup(srv, old).json["receivedAt"])
            r = srv.batch([track(mid=new_id("fill")) for _ in range(20)], key="k1")
            self.assertEqual(r.json["accepted"], 20, r)
            deadline_wait(lambda: srv.stats()["dedupe"]["evicted_size"] >= 11, 10, "evictions")
            r = lookup(srv, old)
            self.assertEqual(r.status, 404, r)
            self.assertEqual(r.json["status"], "unseen", r)
            self.assertGreaterEqual(parse_iso(r.json["window_start"]), received)
            # It aged out: a copy sent now is accepted again, as the answer said.
            self.assertEqual(srv.batch([track(mid=old)], key="k1").json["accepted"], 1)
            self.assertEqual(lookup(srv, old).status, 200)

    def test_event_null_once_retention_deleted_it(self):
        args = ["--admin-token", TOKEN, "--segment-bytes", "4KiB", "--log-max-bytes", "8KiB"]
        with Server(keys=("k1",), args=args) as srv:
            mid = new_id("ret")
            self.assertEqual(srv.batch([track(mid=mid)], key="k1").json["accepted"], 1)
            pad = "x" * 1000
            for _ in range(20):  # a segment rolls between batches, not inside one
                r = srv.batch([track(mid=new_id("pad"), pad=pad) for _ in range(2)], key="k1")
                self.assertEqual(r.json["accepted"], 2, r)
            deadline_wait(lambda: srv.stats()["log"]["first_offset"] > 0, 10, "retention")
            r = lookup(srv, mid)
            self.assertEqual(r.status, 200, r)
            self.assertEqual((r.json["status"], r.json["offset"]), ("seen", 0), r.json)
            self.assertIsNone(r.json["event"])
            self.assertIn("retention", r.json["reason"])
            # The CLI reads the log past LMDB's last checkpoint only. Retention waits for a
            # checkpoint before deleting, but one that lands between the CLI's LMDB snapshot and
            # its read of the log leaves it unable to tell (exit 2); once it sees it, LMDB knows.
            rc, lines, err = cli(srv.data_dir, mid)
            if rc == 2:
                self.assertIn("cannot tell", lines[0]["error"])
            deadline_wait(lambda: applied_offset(srv.data_dir) > 0, 20, "a checkpoint")
            rc, lines, err = cli(srv.data_dir, mid)
            self.assertEqual((rc, lines[0].get("event", "?")), (0, None), (lines, err))
            self.assertIn("retention", lines[0]["reason"])

    def test_route_off_without_admin_token(self):
        with Server(keys=("k1",)) as srv:
            mid = new_id("off")
            self.assertEqual(srv.batch([track(mid=mid)], key="k1").json["accepted"], 1)
            r = srv.get("/v1/events/" + mid, headers=AUTH)
            self.assertEqual(r.status, 404, r)
            self.assertIs(r.json["success"], False)

    def test_memory_mode_is_501(self):
        with Server(keys=("k1",), args=["--admin-token", TOKEN, "--store",
                                        "memory:qqhtd:1Mbit"]) as srv:
            mid = new_id("mem")
            self.assertEqual(srv.batch([track(mid=mid)], key="k1").json["accepted"], 1)
            r = lookup(srv, mid)
            self.assertEqual(r.status, 501, r)
            self.assertIn("memory", r.json["error"])


if __name__ == "__main__":
    unittest.main()
