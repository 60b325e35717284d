"""Consumers: every accepted event exactly once and in order, from `log cat` (with consumer
groups) and from GET /v1/log, across segment rotation, server and consumer restarts,
retention and concurrent writes.

The reference is always the log itself (`ingestd log cat` from the oldest offset) and the
set of events the server acknowledged: a consumer's output, concatenated over its runs,
must equal the acknowledged events in log order, with nothing twice.
"""

import json
import os
import signal
import subprocess
import threading
import time
import unittest

from harness import (Follower, HarnessError, Server, clean_env, deadline_wait, log_cat,
                     log_cat_cmd, new_id, run_cli, track)

TOKEN = "s3cret-admin-token"
SMALL_SEGMENTS = ["--segment-bytes", "4KiB"]
PAD = "x" * 120  # ~300-byte events: a 4 KiB segment holds about a dozen


def events(n, tag):
    return [track(mid=new_id(tag), event="Consumed", properties={"i": i, "pad": PAD})
            for i in range(n)]


def mids_of(lines):
    return [json.loads(l)["messageId"] for l in lines if l.strip()]


class Writer:
    """Posts batches from `threads` threads; remembers every acknowledged messageId."""

    def __init__(self, srv, threads=1, batch=10, batches=10, tag="w", gate_after=None):
        self.srv, self.batch, self.batches, self.tag = srv, batch, batches, tag
        # After `gate_after` batches each thread waits for gate.set(): lets a test restart a
        # consumer while writes are known to be still to come.
        self.gate_after = gate_after
        self.gate = threading.Event()
        self.acked = []
        self.errors = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(t,)) for t in range(threads)]

    def _run(self, t):
        try:
            for b in range(self.batches):
                if b == self.gate_after and not self.gate.wait(60):
                    raise HarnessError("writer gate never opened")
                evs = events(self.batch, "%s%d" % (self.tag, t))
                r = self.srv.batch(evs)
                if r.status != 200 or r.json["accepted"] != len(evs):
                    raise HarnessError("batch not fully accepted: %r" % r)
                with self.lock:
                    self.acked.extend(e["messageId"] for e in evs)
        except Exception as e:  # reported by join()
            with self.lock:
                self.errors.append(repr(e))

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def count(self):
        with self.lock:
            return len(self.acked)

    def join(self, timeout=60):
        for t in self.threads:
            t.join(timeout=timeout)
        if self.errors:
            raise HarnessError("writer failed: %s" % self.errors[:3])
        return self.acked


def post_all(srv, n, tag):
    """Posts n events in batches of 10 from this thread; returns their messageIds in order."""
    return Writer(srv, batch=10, batches=n // 10, tag=tag).start().join()


def group_offsets(data_dir):
    p = run_cli(["log", "groups", "--data", data_dir, "--json"])
    if p.returncode != 0:
        raise HarnessError("log groups exited %d: %s" % (p.returncode, p.stderr))
    return {g["group"]: g for g in map(json.loads, p.stdout.splitlines())}


def segments(data_dir):
    return sorted(f for f in os.listdir(os.path.join(data_dir, "log")) if f.endswith(".seg"))


class ConsumerTest(unittest.TestCase):

    def server(self, *args):
        srv = Server(keys=("ck",), args=list(SMALL_SEGMENTS) + list(args))
        self.addCleanup(srv.cleanup)
        return srv.start()

    def follower(self, srv, group, from_=None):
        f = Follower(srv.data_dir, from_=from_, group=group)
        self.addCleanup(f.close)
        return f

    def stop_follower(self, f):
        rc, err = f.stop()
        self.assertEqual(rc, 0, "log cat --follow after SIGTERM: %s" % err)
        with f.lock:
            return list(f.lines), err

    def wait_lines(self, f, n, timeout=20):
        def enough():
            if f.proc.poll() is not None:
                raise HarnessError("log cat exited %s: %s" % (
                    f.proc.returncode, f.proc.stderr.read().decode(errors="replace")))
            with f.lock:
                return len(f.lines) >= n
        deadline_wait(enough, timeout, "%d lines from log cat --follow" % n)

    def assertExactlyOnce(self, runs, expected, what):
        got = [m for run in runs for m in run]
        dups = len(got) - len(set(got))
        self.assertEqual(dups, 0, "%s: %d duplicates" % (what, dups))
        missing = set(expected) - set(got)
        self.assertEqual(len(missing), 0, "%s: %d acknowledged events missing" % (
            what, len(missing)))
        self.assertEqual(got, expected, "%s: out of order or extra events" % what)


class CatGroups(ConsumerTest):

    def test_rotation_server_and_consumer_restarts(self):
        srv = self.server()
        acked = post_all(srv, 60, "a")
        # A new group starts at the oldest record; without --follow it ends at the end of the
        # log and commits there.
        run1 = mids_of(subprocess.run(log_cat_cmd(srv.data_dir, group="g"), capture_output=True,
                                      text=True, env=clean_env(), timeout=30).stdout.splitlines())
        self.assertEqual(run1, acked)
        self.assertEqual(group_offsets(srv.data_dir)["g"]["offset"], 60)
        self.assertEqual(log_cat(srv.data_dir, group="g"), [], "nothing new: nothing printed")

        acked += post_all(srv, 40, "b")
        srv.restart()
        acked += post_all(srv, 40, "c")
        self.assertGreater(len(segments(srv.data_dir)), 5, "4 KiB segments rolled")

        # Follow while a writer runs; SIGTERM mid-stream; resume; again after a server restart.
        runs = [run1]
        f = self.follower(srv, "g")
        w = Writer(srv, batches=12, tag="d").start()
        self.wait_lines(f, 50)
        lines, _ = self.stop_follower(f)
        runs.append(mids_of(lines))
        committed = group_offsets(srv.data_dir)["g"]["offset"]
        self.assertEqual(committed, 60 + len(runs[-1]), "SIGTERM commits what was printed")
        f = self.follower(srv, "g")
        acked += w.join()
        srv.restart()
        acked += post_all(srv, 30, "e")
        self.wait_lines(f, len(acked) - committed)
        lines, _ = self.stop_follower(f)
        runs.append(mids_of(lines))
        self.assertExactlyOnce(runs, acked, "group g over 3 runs")
        self.assertEqual(mids_of(json.dumps(e) for e in log_cat(srv.data_dir)), acked)

        table = run_cli(["log", "groups", "--data", srv.data_dir])
        self.assertEqual(table.returncode, 0, table.stderr)
        rows = [l.split() for l in table.stdout.splitlines()]
        self.assertEqual(rows[0], ["GROUP", "OFFSET", "LAG"])
        self.assertEqual(rows[1:], [["g", str(len(acked)), "0"]])
        deadline_wait(lambda: [g for g in srv.stats().get("groups", [])
                               if g["name"] == "g" and g["lag"] == 0], 5, "/stats groups lag 0")

        # --from wins over the committed offset, and says so; the group then commits from there.
        p = subprocess.run(log_cat_cmd(srv.data_dir, from_=len(acked) - 5, group="g"),
                           capture_output=True, text=True, env=clean_env(), timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(mids_of(p.stdout.splitlines()), acked[-5:])
        self.assertRegex(p.stderr, r"group g is at offset %d" % len(acked))
        # A lagging group: lag is committed minus its offset, in the table and in /stats.
        p = run_cli(["log", "cat", "--data", srv.data_dir, "--group", "lag10",
                     "--from", str(len(acked) - 10)])
        self.assertEqual((p.returncode, mids_of(p.stdout.splitlines())), (0, acked[-10:]))
        post_all(srv, 10, "f")
        g = group_offsets(srv.data_dir)
        self.assertEqual((g["lag10"]["offset"], g["lag10"]["lag"]), (len(acked), 10))
        stats_g = {x["name"]: x for x in srv.stats()["groups"]}
        self.assertEqual((stats_g["lag10"]["offset"], stats_g["lag10"]["lag"]), (len(acked), 10))
        srv.stop()

    def test_concurrent_writes_while_following(self):
        srv = self.server()
        w = Writer(srv, threads=4, batch=10, batches=15, tag="cw", gate_after=8).start()
        f = self.follower(srv, "g")
        deadline_wait(lambda: w.count() >= 150, 30, "a quarter of the writes")
        self.wait_lines(f, 100)
        runs = [mids_of(self.stop_follower(f)[0])]
        self.assertLess(len(runs[0]), 600)
        f = self.follower(srv, "g")
        w.gate.set()  # the rest is written while the restarted consumer follows
        self.wait_lines(f, 1)
        acked = w.join()
        self.assertEqual(len(acked), 600)
        self.wait_lines(f, 600 - len(runs[0]))
        runs.append(mids_of(self.stop_follower(f)[0]))
        in_log = [e["messageId"] for e in log_cat(srv.data_dir)]
        self.assertEqual(sorted(in_log), sorted(acked), "the log holds exactly the acked events")
        self.assertExactlyOnce(runs, in_log, "group g while 4 threads wrote")
        self.assertEqual(group_offsets(srv.data_dir)["g"]["lag"], 0)

        # A reader that goes away (EPIPE): the group commits only records written whole.
        p = subprocess.Popen(log_cat_cmd(srv.data_dir, group="pipe"), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=clean_env())
        first = p.stdout.readline()
        p.stdout.close()
        rc = p.wait(timeout=20)
        err = p.stderr.read().decode(errors="replace")
        p.stderr.close()
        self.assertEqual(rc, 0, err)
        self.assertEqual(json.loads(first)["messageId"], in_log[0])
        off = group_offsets(srv.data_dir)["pipe"]["offset"]
        self.assertGreaterEqual(off, 1)
        self.assertLess(off, 600, "600 events (~200 KB) do not fit in a pipe: not all written")
        srv.stop()


class Retention(ConsumerTest):

    def test_group_that_keeps_up_loses_nothing(self):
        srv = self.server("--log-max-bytes", "16KiB", "--admin-token", TOKEN)
        # A group created at the start that never reads again.
        self.assertEqual(log_cat(srv.data_dir, group="slow"), [])
        self.assertEqual(group_offsets(srv.data_dir)["slow"]["offset"], 0)

        f = self.follower(srv, "fast")
        acked = []
        for i in range(30):
            acked += post_all(srv, 10, "r%d" % i)
            self.wait_lines(f, len(acked))
        # Retention runs at most once a second (also while idle): await the bound, not a pass.
        bound = 16 * 1024 + 8 * 1024
        deadline_wait(lambda: srv.stats()["log"]["bytes"] <= bound, 10,
                      "retention to bring the log under --log-max-bytes")
        st = srv.stats()["log"]
        first = st["first_offset"]
        self.assertGreater(first, 0, st)
        self.assertLessEqual(st["bytes"], bound, st)
        self.assertLessEqual(st["retention"]["window_records_deleted"],
                             st["retention"]["records_deleted"], st)
        self.assertEqual(segments(srv.data_dir)[0], "%020d.seg" % first)
        deadline_wait(lambda: group_offsets(srv.data_dir)["fast"]["lag"] == 0, 5,
                      "the following group to commit")
        stats_g = {g["name"]: g for g in srv.stats()["groups"]}
        self.assertEqual(stats_g["fast"]["lag"], 0)
        self.assertEqual(stats_g["slow"]["lag"], len(acked))
        lines, err = self.stop_follower(f)
        self.assertExactlyOnce([mids_of(lines)], acked, "a group that keeps up")
        self.assertNotIn("deleted by retention", err)

        # The slow group lost what retention deleted: warned, then it goes on from the oldest.
        g = group_offsets(srv.data_dir)["slow"]
        self.assertEqual((g["offset"], g["lag"]), (0, len(acked)))
        p = subprocess.run(log_cat_cmd(srv.data_dir, group="slow"), capture_output=True,
                           text=True, env=clean_env(), timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        first = srv.stats()["log"]["first_offset"]
        self.assertRegex(p.stderr, r"\b%d records\b.*deleted by retention" % first)
        self.assertEqual(mids_of(p.stdout.splitlines()), acked[first:])
        self.assertEqual(group_offsets(srv.data_dir)["slow"], {"group": "slow",
                                                               "offset": len(acked), "lag": 0})
        # An explicit --from that retention deleted is an error, not a skip.
        p = run_cli(["log", "cat", "--data", srv.data_dir, "--from", "0"])
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual(p.stdout, "")

        # Over HTTP: 416 for a deleted offset, with where the log starts.
        r = srv.get("/v1/log?from=0", headers={"Authorization": "Bearer " + TOKEN})
        self.assertEqual(r.status, 416, r)
        self.assertEqual(r.json["first_offset"], first, r)
        r = srv.get("/v1/log?from=%d&max=1" % first,
                    headers={"Authorization": "Bearer " + TOKEN})
        self.assertEqual((r.status, mids_of(r.body.decode().splitlines())), (200, [acked[first]]))
        srv.stop()

    def test_follower_skips_what_retention_deleted_under_it(self):
        # A follower that is stopped (SIGSTOP) while retention deletes the segments ahead of it
        # warns and continues from the oldest retained record: never stuck, never a duplicate.
        srv = self.server("--log-max-bytes", "8KiB")
        acked = post_all(srv, 10, "s0")
        f = self.follower(srv, None)
        self.wait_lines(f, 10)
        f.proc.send_signal(signal.SIGSTOP)
        try:
            acked += post_all(srv, 150, "s1")

            # Retention runs after group commits (at most once a second): keep writing.
            def retained():
                acked.extend(post_all(srv, 10, "s1"))
                return srv.stats()["log"]["first_offset"] > 20
            deadline_wait(retained, 15, "retention", interval=0.1)
        finally:
            f.proc.send_signal(signal.SIGCONT)
        acked += post_all(srv, 10, "s2")
        self.wait_lines(f, 20)
        deadline_wait(lambda: mids_of(f.lines[-1:]) == acked[-1:], 20, "the last event")
        lines, err = self.stop_follower(f)
        got = mids_of(lines)
        self.assertRegex(err, r"\d+ records .*deleted by retention")
        self.assertEqual(len(got), len(set(got)), "no duplicates")
        pos = [acked.index(m) for m in got]
        self.assertEqual(pos, sorted(pos), "in log order")
        self.assertEqual(got[-10:], acked[-10:])
        srv.stop()


class HttpRead(ConsumerTest):

    def auth(self, token=TOKEN):
        return {"Authorization": "Bearer " + token}

    def read(self, srv, frm, max_=None, wait=None, timeout=20):
        q = "/v1/log?from=%d" % frm
        if max_ is not None:
            q += "&max=%d" % max_
        if wait is not None:
            q += "&wait=%d" % wait
        return srv.get(q, headers=self.auth(), timeout=timeout)

    def test_route_off_without_token(self):
        srv = self.server()
        post_all(srv, 10, "n")
        r = srv.get("/v1/log?from=0", headers=self.auth())
        self.assertEqual(r.status, 404, r)
        self.assertEqual(srv.get("/v1/log").status, 404)
        srv.stop()

    def test_auth_paging_restart_and_long_poll(self):
        srv = self.server("--admin-token", TOKEN)
        acked = post_all(srv, 100, "h")
        for hdrs in ({}, self.auth("wrong-token"), {"Authorization": "Bearer"},
                     {"Authorization": "Basic Y2s6"}):
            with self.subTest(headers=hdrs):
                r = srv.get("/v1/log?from=0", headers=hdrs)
                self.assertEqual(r.status, 401, r)
                self.assertEqual(r.json["success"], False, r)

        got, nxt = [], 0

        def drain():
            nonlocal nxt
            while True:
                r = self.read(srv, nxt, max_=7)
                self.assertEqual(r.status, 200, r)
                self.assertEqual(r.header("Content-Type").split(";")[0],
                                 "application/x-ndjson")
                lines = r.body.decode().splitlines()
                self.assertLessEqual(len(lines), 7)
                new = int(r.header("Next-Offset"))
                self.assertEqual(new, nxt + len(lines), r)
                self.assertEqual(int(r.header("First-Offset")), 0)
                got.extend(mids_of(lines))
                nxt = new
                if not lines:
                    return

        drain()
        self.assertEqual(got, acked)
        srv.restart()
        acked += post_all(srv, 50, "i")
        drain()
        self.assertGreater(len(segments(srv.data_dir)), 5)
        self.assertExactlyOnce([got], acked, "GET /v1/log over Next-Offset")

        # Long poll: parked at the end, answered as soon as an event is committed.
        box = {}

        def poll():
            t0 = time.monotonic()
            box["r"] = self.read(srv, nxt, wait=5000)
            box["t"] = time.monotonic()
            box["took"] = box["t"] - t0

        th = threading.Thread(target=poll)
        th.start()
        ev = events(1, "lp")
        r = srv.batch(ev)
        posted = time.monotonic()
        self.assertEqual(r.status, 200, r)
        th.join(timeout=10)
        self.assertFalse(th.is_alive())
        self.assertEqual(box["r"].status, 200, box["r"])
        self.assertEqual(mids_of(box["r"].body.decode().splitlines()), [ev[0]["messageId"]])
        self.assertEqual(int(box["r"].header("Next-Offset")), nxt + 1)
        self.assertLess(box["took"], 3.0, "answered well before the 5 s deadline")
        self.assertLess(box["t"] - posted, 2.0)
        nxt += 1

        # Nothing new: 200, empty body, Next-Offset unchanged, after about `wait`.
        t0 = time.monotonic()
        r = self.read(srv, nxt, wait=300)
        took = time.monotonic() - t0
        self.assertEqual((r.status, r.body), (200, b""), r)
        self.assertEqual(int(r.header("Next-Offset")), nxt)
        self.assertGreaterEqual(took, 0.25)
        self.assertLess(took, 3.0)

        # Past the end: 416.
        r = self.read(srv, nxt + 1)
        self.assertEqual(r.status, 416, r)
        srv.stop()


class Cli(unittest.TestCase):

    def test_help_and_usage_errors(self):
        for args in (["log", "cat", "--help"], ["log", "groups", "--help"], ["log", "--help"]):
            with self.subTest(args=args):
                p = run_cli(args)
                self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("--group", run_cli(["log", "cat", "--help"]).stdout)
        self.assertIn("--json", run_cli(["log", "groups", "--help"]).stdout)
        top = run_cli(["help"]).stdout
        self.assertIn("log groups", top)
        self.assertIn("--group", top)
        for args in (["log", "cat", "--group", "bad/name"], ["log", "cat", "--group", ".x"],
                     ["log", "cat", "--group"], ["log", "groups", "--bogus"],
                     ["log", "groups", "--json=1"], ["log", "frob"]):
            with self.subTest(args=args):
                p = run_cli(args + ["--data", "/nonexistent"] if args[-1] != "--group" else args)
                self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
                self.assertEqual(p.stdout, "")
        p = run_cli(["log", "groups", "--data", "/nonexistent/dir"])
        self.assertEqual(p.returncode, 1)


if __name__ == "__main__":
    unittest.main()
