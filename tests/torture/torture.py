#!/usr/bin/env python3
"""A concurrency torture run for the de-duplication window (issue #25).

Drives the real `ingestd serve` (started through tests/integration/harness.py) with a tiny
--young-keys, so the young store is sealed every second or so, several write keys (one flooding
source, one medium, two quiet) under per-source --max-keys budgets that change from run to run (so
the flood's generations are cut and rewritten while the quiet sources keep theirs), tight log
retention, and an fsync delay through the faultfs shim (tests/faultfs/, FAULTFS_SYNC_DELAY_US).
Client threads send new ids and re-send acknowledged ones (the oldest the window still has to
hold, random ones, the quiet sources'), retry the ids of failed requests, and send the same new
id on two connections at once or twice in one batch. The server is SIGKILLed (sometimes
SIGTERMed) at random moments and restarted on the same data dir.

The invariant (docs/design.md, invariant 2, with per-source budgets, docs/window.md): an id
acknowledged as accepted must come back as a duplicate, at the offset of its acknowledged copy,
for as long as the window's guarantee covers it; every start succeeds; the log holds every
acknowledged event that retention kept, once; `ingestd check` passes.

What the guarantee covers (conservatively): --window is longer than the run, so only budgets
bind. A source keeps at least its newest --max-keys keys, so an id is covered while fewer than
--max-keys keys of its source can be newer than it, in every run since it was accepted (each run
has its own --max-keys, and a key forgotten under a smaller budget does not come back). Keys
newer than X are counted from what the clients know: every record of the source at a higher
log offset that a response reported, plus every id of the source in a request that failed
(kill, 503: it may be logged, or held in memory until the kill) since X's run, plus every id of
the source in flight. The count can only be too high, so the check can only skip ids, never
blame the server for forgetting one it was allowed to forget.

Every random choice derives from --seed (printed); thread interleavings and kill instants
relative to the server's work do not, so a seed reproduces the schedule, not the exact run.
Exit status 0: no violation; 1: a violation (what failed and how to run it again are printed).
"""

import argparse
import bisect
import collections
import http.client
import json
import os
import random
import re
import shutil
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
# A replay of a long log after a kill may take more than the harness's default 20 s.
os.environ.setdefault("INGESTD_TEST_START_TIMEOUT", "120")

from harness import BIN, HarnessError, Server, log_cat, run_cli, track  # noqa: E402
from test_powerloss import faultfs_lib, shim_env  # noqa: E402

# write key, source, share of the new ids
SOURCES = (("kf", "flood", 0.80), ("km", "medium", 0.16), ("kq1", "quiet1", 0.025),
           ("kq2", "quiet2", 0.015))
KEY_OF = {s: k for k, s, _ in SOURCES}
ADMIN_TOKEN = "torture-admin"
YOUNG_KEYS = 300
# --max-keys per run, all above --young-keys (sealing on), and by default above what one source
# puts in the window's young part (pending keys and the young store) between two checkpoints (3 s
# at --rate): there a source over its budget evicts key by key, and carries other sources' keys
# to the young end, which loses a carried source's newest keys once it goes over its own budget
# (a known bug, docs/durability.md "Torture run"; --budgets 1000,2500 shows it).
BUDGETS = "0,8000,12000,20000"
RATE = 1500
SYNC_DELAYS_US = (0, 2000, 5000, 20000)
WINDOW = "6h"  # longer than any run: only the budgets bind
CI_SEED = 1


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Concurrency torture run of ingestd's de-duplication window: budgets, seals, "
        "merges, retention, a slow disk, kill -9 and restarts under many clients re-sending "
        "acknowledged ids. Exit 0 when no acknowledged in-window id was accepted twice, no "
        "start refused and the final log and `ingestd check` are clean.")
    p.add_argument("--seconds", type=float, help="length of the loaded part (default 150)")
    p.add_argument("--minutes", type=float, help="the same in minutes")
    p.add_argument("--seed", type=int,
                   help="base seed of every random choice (default: $INGESTD_TORTURE_SEED, "
                   "else %d with --ci, else random)" % CI_SEED)
    p.add_argument("--kills", type=int, default=None,
                   help="SIGKILLs spread over the run (default: one per 10 s)")
    p.add_argument("--clients", type=int, default=8, help="client threads (default 8)")
    p.add_argument("--budgets", default=BUDGETS,
                   help="--max-keys values a run picks from, comma-separated (default %s)"
                   % BUDGETS)
    p.add_argument("--rate", type=float, default=RATE,
                   help="events per second all clients send together, at most (default %d; "
                   "0: as fast as they can)" % RATE)
    p.add_argument("--retention", choices=("on", "off"), default="on",
                   help="tight --log-max-bytes / --log-retention (default on)")
    p.add_argument("--keep", action="store_true", help="keep the data dir of a failed run")
    p.add_argument("--ci", action="store_true",
                   help="the bounded CI slice: seed %d unless --seed or $INGESTD_TORTURE_SEED"
                   % CI_SEED)
    p.add_argument("--progress", type=float, default=10.0, help="seconds between progress lines")
    a = p.parse_args(argv)
    if a.seconds is None:
        a.seconds = a.minutes * 60 if a.minutes is not None else 150.0
    if a.seed is None:
        env = os.environ.get("INGESTD_TORTURE_SEED")
        a.seed = int(env) if env else CI_SEED if a.ci else random.SystemRandom().randrange(1 << 31)
    a.budgets = [int(x) for x in a.budgets.split(",")]
    if a.kills is None:
        a.kills = max(1, int(a.seconds // 10))
    return a


def reproduce(a):
    return ("INGESTD_BIN=%s FAULTFS_LIB=%s %s --seed %d --seconds %g --kills %d --clients %d "
            "--rate %g --budgets %s --retention %s --keep"
            % (BIN, faultfs_lib(), sys.argv[0], a.seed, a.seconds, a.kills, a.clients, a.rate,
               ",".join(map(str, a.budgets)), a.retention))


def hint(text):
    """What a failure is known to be, when its message says so."""
    if re.search(r"applied offset \d+ is older than the log's start", text):
        return ("\n(known: retention deleted log records the store had not applied, issue #25 "
                "item 4; fixed when retention is bounded by the store's durable applied offset)")
    return ""


class Run:
    """One server process: the log offset it started at and the budget it enforced."""

    def __init__(self, index, start, max_keys):
        self.index = index
        self.start = start
        self.max_keys = max_keys
        self.phantom = collections.Counter()  # source -> ids of failed requests sent to it


class Model:
    """What the clients know of the log and the window. compose, failed and answered take the
    lock; covered and oldest_covered expect it held."""

    def __init__(self, seed):
        self.lock = threading.Lock()
        self.tag = "t%d" % seed
        self.next_id = 0
        self.runs = []
        self.run_starts = []
        self.offs = {s: [] for _, s, _ in SOURCES}  # offsets of records of s, sorted
        self.acked = {}  # (source, id) -> offset of its latest acknowledged copy
        self.acked_offs = {s: [] for _, s, _ in SOURCES}  # offsets of acknowledged copies
        self.id_at = {}  # (source, offset) -> id
        self.unknown = {s: [] for _, s, _ in SOURCES}  # ids of failed requests, fate unknown
        self.recent = {s: collections.deque(maxlen=64) for _, s, _ in SOURCES}
        self.inflight = collections.Counter()
        self.violations = []
        self.n = collections.Counter()

    # ---- the guarantee ----

    def add_run(self, start, max_keys):
        self.runs.append(Run(len(self.runs), start, max_keys))
        self.run_starts.append(start)

    def covered(self, s, o, log_offs=None, upto=None):
        """Whether the window must still hold source s's key logged at offset o: in every run
        since, fewer than that run's --max-keys keys of s can be newer. log_offs: the offsets of
        s's records (the final log check passes the log's own; None: the clients' model);
        upto: count only the offsets below it, in the runs up to the one that logged it."""
        offs = self.offs[s] if log_offs is None else log_offs
        low = bisect.bisect_right(offs, o)
        cap = len(offs) if upto is None else bisect.bisect_left(offs, upto)
        first = max(0, bisect.bisect_right(self.run_starts, o) - 1)
        phantom = 0
        for r in range(first, len(self.runs)):
            run = self.runs[r]
            if upto is not None and run.start > upto:
                break
            phantom += run.phantom[s]
            if run.max_keys == 0:
                continue
            end = self.runs[r + 1].start if r + 1 < len(self.runs) else None
            hi = cap if end is None else min(cap, bisect.bisect_left(offs, end))
            if max(0, hi - low) + phantom + self.inflight[s] >= run.max_keys:
                return False
        return True

    def oldest_covered(self, s):
        """Index in acked_offs[s] of the oldest acknowledged copy still covered."""
        a = self.acked_offs[s]
        lo, hi = 0, len(a)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.covered(s, a[mid]):
                hi = mid
            else:
                lo = mid + 1
        return lo

    # ---- composing a request ----

    def compose(self, rng, s):
        """The ids of one request for source s: new, re-sends, retries, shared; registers them
        in flight. Returns a list of ids."""
        with self.lock:
            ids = []
            quiet = s.startswith("quiet")
            for _ in range(rng.randint(0, 3) if quiet else rng.randint(5, 50)):
                m = "%s-%d" % (self.tag, self.next_id)
                self.next_id += 1
                ids.append(m)
                self.recent[s].append(m)
            a = self.acked_offs[s]
            if a:
                b = self.oldest_covered(s)
                # The oldest ids the window must still hold, and random covered ones.
                for i in range(b, min(len(a), b + rng.randint(0, 4))):
                    ids.append(self.id_at[(s, a[i])])
                for _ in range(rng.randint(0, 12)):
                    if b < len(a):
                        ids.append(self.id_at[(s, a[rng.randrange(b, len(a))])])
                # Any acknowledged id: the window may have forgotten it, which is no violation.
                for _ in range(rng.randint(0, 2)):
                    ids.append(self.id_at[(s, a[rng.randrange(len(a))])])
            u = self.unknown[s]
            for _ in range(min(len(u), rng.randint(0, 10))):
                ids.append(u.pop(rng.randrange(len(u))))
            if self.recent[s] and rng.random() < 0.2:
                # A new id another client may be sending right now, on another connection.
                ids.append(rng.choice(self.recent[s]))
            if ids and rng.random() < 0.05:
                ids.append(rng.choice(ids))  # the same id twice in one batch
            rng.shuffle(ids)
            self.inflight[s] += len(ids)
            return ids

    # ---- what a response says ----

    def failed(self, s, run, ids, why):
        with self.lock:
            self.inflight[s] -= len(ids)
            # A request that raced a restart may have reached the next run's server: count its
            # ids there too (counting too many only ever skips a check).
            run.phantom[s] += len(ids)
            if self.runs[-1] is not run:
                self.runs[-1].phantom[s] += len(ids)
            self.n["failed_requests"] += 1
            self.n["failed_ids"] += len(ids)
            for m in set(ids):
                if (s, m) not in self.acked:
                    self.unknown[s].append(m)

    def _learn(self, s, m, o):
        bisect.insort(self.offs[s], o)
        bisect.insort(self.acked_offs[s], o)
        self.id_at[(s, o)] = m
        self.acked[(s, m)] = o

    def answered(self, s, run, ids, results):
        with self.lock:
            try:
                self._answered(s, run, ids, results)
            finally:
                self.inflight[s] -= len(ids)

    def _answered(self, s, run, ids, results):
        self.n["requests"] += 1
        for res in results:
            m = res.get("messageId")
            st = res.get("status")
            o = res.get("offset")
            prev = self.acked.get((s, m))
            if st == "accepted":
                self.n["accepted"] += 1
                if prev == o:
                    continue  # another request's duplicate of this copy was answered first
                if prev is not None:
                    self.n["resent"] += 1
                    if self.covered(s, prev):
                        self.n["accepted_twice"] += 1
                        self.violate("run %d: %s id %s acknowledged at offset %d, still in the "
                                     "window, accepted again at offset %s (%s)"
                                     % (run.index, s, m, prev, o,
                                        [r for r in results if r.get("messageId") == m]))
                    else:
                        self.n["reaccepted_outside"] += 1
                self._learn(s, m, o)
            elif st == "duplicate":
                self.n["duplicates"] += 1
                if prev is None:
                    self._learn(s, m, o)  # a retry or a shared id whose first copy we now know
                    continue
                self.n["resent"] += 1
                if self.covered(s, prev):
                    self.n["checked"] += 1
                    self.n["checked:" + s] += 1
                    if o is not None and o > prev:
                        self.n["accepted_twice"] += 1
                        self.violate("run %d: %s id %s acknowledged at offset %d; a re-send is "
                                     "a duplicate of a later copy at offset %d (logged twice)"
                                     % (run.index, s, m, prev, o))
            else:
                self.violate("run %d: %s id %s: unexpected result %r" % (run.index, s, m, res))

    def violate(self, what):
        self.violations.append(what)
        print("VIOLATION: " + what, flush=True)


class Torture:
    def __init__(self, a):
        self.a = a
        self.rng = random.Random(a.seed)
        self.model = Model(a.seed)
        self.lib = faultfs_lib()
        if not self.lib:
            raise SystemExit("libfaultfs.so not found: build the tests or set FAULTFS_LIB")
        self.work = tempfile.mkdtemp(prefix="ingestd-torture-")
        self.data = os.path.join(self.work, "data")
        os.mkdir(self.data)
        self.srv = None
        self.run = None
        self.up = threading.Condition()
        self.serving = False
        self.done = False
        self.totals = collections.Counter()
        self.started = time.monotonic()
        self.pace_lock = threading.Lock()
        self.next_send = self.started

    def pace(self, n):
        """Spaces the clients' requests to --rate events per second (a pace, not a wait for
        any condition)."""
        if self.a.rate <= 0:
            return
        with self.pace_lock:
            now = time.monotonic()
            at = max(now, self.next_send)
            self.next_send = at + n / self.a.rate
        if at > now:
            time.sleep(at - now)

    # ---- the server ----

    def server_args(self, max_keys):
        r = self.rng
        # The admin token: ?verbose=true names log offsets only to the operator.
        args = ["--young-keys", str(YOUNG_KEYS), "--max-keys", str(max_keys), "--window", WINDOW,
                "--segment-bytes", "64KiB", "--admin-token", ADMIN_TOKEN]
        if self.a.retention == "on":
            # A second or two of log at --rate, down to less than a checkpoint's worth.
            args += ["--log-max-bytes", r.choice(("256KiB", "512KiB", "1MiB", "2MiB"))]
            args += ["--log-retention", r.choice(("0", "0", "5s", "15s"))]
        return args

    def start(self, max_keys, sync_us):
        keys = ["%s:%s" % (k, s) for k, s, _ in SOURCES]
        srv = Server(keys=keys, args=self.server_args(max_keys), data_dir=self.data,
                     env=shim_env(self.lib, self.data, sync_delay_us=sync_us))
        try:
            srv.start()
        except HarnessError as e:
            self.totals["refused_starts"] += 1
            tail = "\n".join(l for l in srv.lines[-200:] if " INFO config " not in l)
            self.model.violate("run %d: the start refused (--max-keys %d): %s\n%s%s"
                               % (len(self.model.runs), max_keys, str(e).splitlines()[0],
                                  tail[-2000:], hint(tail)))
            self.save_stderr(srv, len(self.model.runs))
            return None
        start = srv.stats()["log"]["next_offset"]
        with self.model.lock:
            self.model.add_run(start, max_keys)
            self.run = self.model.runs[-1]
        self.srv = srv
        self.totals["starts"] += 1
        return srv

    def save_stderr(self, srv, index):
        with open(os.path.join(self.work, "run-%03d.stderr" % index), "w") as f:
            f.write("\n".join(srv.lines) + "\n")

    def gather(self, srv):
        """Counts this run's seals, merges and cuts (the torture must exercise them)."""
        try:
            st = srv.stats()
        except (OSError, HarnessError, http.client.HTTPException):
            return
        g = st["dedupe"]["generations"]
        self.totals["seals"] += g["seals"]
        self.totals["merges"] += g["merges"]
        self.totals["evicted_size"] += sum(x["evicted_size"] for x in st["dedupe"]["sources"])
        self.totals["retention_deleted"] += st["log"]["retention"]["records_deleted"]

    # ---- the clients ----

    def set_serving(self, on):
        with self.up:
            self.serving = on
            self.up.notify_all()

    def wait_serving(self):
        """The current run and server, once serving; None when the torture is over."""
        with self.up:
            self.up.wait_for(lambda: self.serving or self.done)
            return None if self.done else (self.run, self.srv.host, self.srv.port)

    def client(self, n):
        rng = random.Random("%d-client-%d" % (self.a.seed, n))
        weights = [w for _, _, w in SOURCES]
        names = [s for _, s, _ in SOURCES]
        conn, conn_run = None, None
        while True:
            cur = self.wait_serving()
            if cur is None:
                break
            run, host, port = cur
            if conn_run is not run:
                if conn:
                    conn.close()
                conn, conn_run = http.client.HTTPConnection(host, port, timeout=30), run
            s = rng.choices(names, weights)[0] if rng.random() < 0.6 else rng.choice(names)
            ids = self.model.compose(rng, s)
            if not ids:
                continue
            body = json.dumps({"batch": [track(mid=m) for m in ids], "writeKey": KEY_OF[s]},
                              separators=(",", ":"))
            self.pace(len(ids))
            try:
                conn.request("POST", "/v1/batch?verbose=true", body=body,
                             headers={"Authorization": "Bearer " + ADMIN_TOKEN,
                                      "Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                status = r.status
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                conn_run = None
                self.model.failed(s, run, ids, repr(e))
                continue
            if status != 200:
                self.model.failed(s, run, ids, "HTTP %d" % status)
                if status not in (429, 503):
                    self.model.violate("run %d: HTTP %d %r" % (run.index, status, data[:300]))
                continue
            self.model.answered(s, run, ids, json.loads(data)["results"])
        if conn:
            conn.close()

    # ---- the schedule ----

    def progress(self, note=""):
        m = self.model
        with m.lock:
            n = dict(m.n)
            acked = len(m.acked)
            nv = len(m.violations)
        el = time.monotonic() - self.started
        print("[%6.0fs] run %d%s | restarts %d kills %d | acked %d resent %d checked %d "
              "reaccepted-outside %d failed-ids %d | violations %d"
              % (el, len(m.runs) - 1, note, self.totals["starts"] - 1, self.totals["kills"], acked,
                 n.get("resent", 0), n.get("checked", 0), n.get("reaccepted_outside", 0),
                 n.get("failed_ids", 0), nv), flush=True)

    def one_run(self, length, kill):
        r = self.rng
        max_keys = r.choice(self.a.budgets)
        sync_us = r.choice(SYNC_DELAYS_US)
        srv = self.start(max_keys, sync_us)
        if srv is None:
            return False
        self.progress(" (--max-keys %d, fsync +%d us, %.1fs, then %s)"
                      % (max_keys, sync_us, length, "kill -9" if kill else "SIGTERM"))
        self.set_serving(True)
        end = time.monotonic() + length
        next_line = time.monotonic() + self.a.progress
        while time.monotonic() < end and not self.model.violations:
            time.sleep(min(0.1, max(0.0, end - time.monotonic())))  # the kill's instant: a pace
            if srv.proc.poll() is not None:
                self.model.violate("run %d: ingestd exited on its own with %s"
                                   % (self.run.index, srv.proc.returncode))
                break
            if time.monotonic() >= next_line:
                self.progress()
                next_line += self.a.progress
        self.gather(srv)
        self.set_serving(False)
        ok = True
        if kill:
            srv.kill()
            self.totals["kills"] += 1
        else:
            try:
                srv.stop()
            except HarnessError as e:
                self.model.violate("run %d: SIGTERM did not end cleanly: %s" % (self.run.index, e))
                ok = False
        # The requests in flight to the dead server fail now; wait until all are counted.
        self.wait_settled()
        self.save_stderr(srv, self.run.index)
        self.srv = None
        return ok and not self.model.violations

    def wait_settled(self):
        end = time.monotonic() + 60
        while time.monotonic() < end:
            with self.model.lock:
                if sum(self.model.inflight.values()) == 0:
                    return
            time.sleep(0.01)  # polling a condition the client threads set
        self.model.violate("client requests still in flight 60 s after the server stopped")

    def loaded(self):
        """The loaded part: runs of random length, each ended by SIGKILL or SIGTERM."""
        a = self.a
        threads = [threading.Thread(target=self.client, args=(i,), daemon=True)
                   for i in range(a.clients)]
        for t in threads:
            t.start()
        mean = a.seconds / (a.kills / 0.85 + 1)  # about one run in seven ends with SIGTERM
        deadline = self.started + a.seconds
        try:
            while time.monotonic() < deadline and not self.model.violations:
                left = deadline - time.monotonic()
                length = min(left, self.rng.uniform(0.3, 1.7) * mean)
                kill = self.totals["kills"] < a.kills and self.rng.random() < 0.85
                if not self.one_run(length, kill):
                    break
        finally:
            with self.up:
                self.done = True
                self.up.notify_all()
            for t in threads:
                t.join(timeout=60)

    # ---- the end: every covered id once more, the log, check ----

    def final(self):
        m = self.model
        srv = self.start(self.runs_last_budget(), 0)
        if srv is None:
            return
        with m.lock:
            todo = {s: [m.id_at[(s, o)] for o in m.acked_offs[s][m.oldest_covered(s):]]
                    for _, s, _ in SOURCES}
        for s, ids in todo.items():
            for i in range(0, len(ids), 1000):
                chunk = ids[i:i + 1000]
                with m.lock:
                    m.inflight[s] += len(chunk)
                r = srv.post_as_operator("/v1/batch?verbose=true",
                                         {"batch": [track(mid=x) for x in chunk]}, KEY_OF[s])
                if r.status != 200:
                    m.failed(s, self.run, chunk, "HTTP %d" % r.status)
                    m.violate("final re-send: %r" % r)
                    continue
                m.answered(s, self.run, chunk, r.json["results"])
        self.gather(srv)
        try:
            srv.stop()
        except HarnessError as e:
            m.violate("final SIGTERM did not end cleanly: %s" % e)
        self.save_stderr(srv, self.run.index)
        self.check_log()

    def runs_last_budget(self):
        return self.model.runs[-1].max_keys if self.model.runs else self.a.budgets[-1]

    def check_log(self):
        m = self.model
        p = run_cli(["check", "--data", self.data], timeout=300)
        if p.returncode != 0:
            m.violate("ingestd check exited %d:\n%s%s" % (p.returncode, p.stdout, p.stderr))
        mo = re.search(r"log: (\d+) records, offsets (\d+)\.\.(\d+)", p.stdout)
        if not mo:
            m.violate("ingestd check printed no log range:\n%s" % p.stdout)
            return
        first = int(mo.group(2))
        events = log_cat(self.data, timeout=300)
        self.totals["log_records"] = len(events)
        self.totals["log_first_offset"] = first
        by_src = collections.defaultdict(list)
        copies = collections.defaultdict(list)
        for i, e in enumerate(events):
            by_src[e["source"]].append(first + i)
            copies[(e["source"], e["messageId"])].append(first + i)
        twice = 0
        for (s, mid), offs in copies.items():
            for a, b in zip(offs, offs[1:]):
                # Was the first copy still covered when the second was logged? Count from the
                # log itself the records of s between them.
                with m.lock:
                    ok = not m.covered(s, a, by_src[s], upto=b)
                if not ok:
                    twice += 1
                    with m.lock:
                        m.n["logged_twice"] += 1
                    m.violate("the log holds %s id %s at offsets %d and %d, the first still in "
                              "the window when the second was logged" % (s, mid, a, b))
        self.totals["logged_twice_outside"] = sum(len(o) - 1 for o in copies.values()) - twice
        lost = 0
        with m.lock:
            for (s, mid), o in m.acked.items():
                if o < first:
                    continue
                e = events[o - first] if o - first < len(events) else None
                if e is None or (e["source"], e["messageId"]) != (s, mid):
                    lost += 1
                    if lost <= 10:
                        m.violate("acknowledged %s id %s at offset %d is not there in the log: %r"
                                  % (s, mid, o, e))
        self.totals["acked_retained"] = sum(1 for o in m.acked.values() if o >= first)

    def summary(self):
        m = self.model
        el = time.monotonic() - self.started
        t = self.totals
        print("\n== torture summary (seed %d) ==" % self.a.seed)
        print("minutes run        %.1f (%.1f planned under load)" % (el / 60, self.a.seconds / 60))
        print("restarts           %d (kills %d, refused starts %d)"
              % (max(0, t["starts"] - 1), t["kills"], t["refused_starts"]))
        if "log_records" in t:
            print("acknowledged ids   %d (the final log holds %d records from offset %d, %d "
                  "acknowledged ids among them)" % (len(m.acked), t["log_records"],
                                                    t["log_first_offset"], t["acked_retained"]))
        else:
            print("acknowledged ids   %d (the final log was not checked)" % len(m.acked))
        print("re-sent            %d; checked (covered, came back duplicates) %d; accepted again "
              "outside the guarantee %d" % (m.n["resent"], m.n["checked"],
                                            m.n["reaccepted_outside"]))
        print("checked by source  %s" % ", ".join("%s %d" % (s, m.n["checked:" + s])
                                                  for _, s, _ in SOURCES))
        print("failed requests    %d (%d ids, retried)" % (m.n["failed_requests"],
                                                           m.n["failed_ids"]))
        print("server work        seals %d, merges %d (budget-cut rewrites included), keys the "
              "young part evicted by budget %d, records deleted by retention %d"
              % (t["seals"], t["merges"], t["evicted_size"], t["retention_deleted"]))
        print("accepted twice     %d (answers), %d (copies in the final log)"
              % (m.n["accepted_twice"], m.n["logged_twice"]))
        print("violations         %d" % len(m.violations))
        if m.violations:
            print("\nFAILED. What failed:")
            for v in m.violations[:20]:
                print("  - " + v.replace("\n", "\n    "))
            print("Run it again: %s" % reproduce(self.a))
            print("Data dir and each run's stderr: %s" % (
                self.work if self.a.keep else "(removed; pass --keep)"))
        else:
            print("OK")


def main(argv):
    a = parse_args(argv)
    print("torture: seed %d, %g s, %d kills, %d clients, retention %s; binary %s"
          % (a.seed, a.seconds, a.kills, a.clients, a.retention, BIN), flush=True)
    print("torture: reproduce with: %s" % reproduce(a), flush=True)
    t = Torture(a)
    try:
        t.loaded()
        if not t.model.violations:
            t.final()
    except KeyboardInterrupt:
        t.model.violate("interrupted")
    finally:
        if t.srv is not None:
            t.srv.kill()
    t.summary()
    bad = bool(t.model.violations)
    if not bad or not a.keep:
        shutil.rmtree(t.work, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
