#!/usr/bin/env python3
"""Crash-state explorer for ingestd's storage, in the manner of ALICE (OSDI 2014).

Each workload drives the real binary under the faultfs shim (LD_PRELOAD libfaultfs.so), one
journal per process (a "phase": a `serve`, or an offline `rebuild`, `backup`, `log cat
--group`), while it seals, merges, cuts, drops, checkpoints, retains, rebuilds, backs up or
writes its small files. The client notes the journal's length right after each 2xx (every
operation the acknowledgement depended on is before it). Then, for the persistence points of
each phase's journal (each successful fsync, directory fsync and rename, and the end), the
explorer builds the states a power loss there may leave (tests/faultfs/powerloss.py,
Timeline): none of the pending operations, all of them, every prefix of them in journal
order, and seeded random subsets (per file: drop, prefix, torn write, or any subset of its
512-byte pieces; names per directory, or in one order under ext4), under the strict POSIX
model (a name is durable only after its directory's fsync) or the ext4 one (any fsync
commits every earlier name). Each distinct state is recovered by the real binary, without
the shim, and checked:

  start         start does not refuse the directory
  log           every event acknowledged before the point is in the log exactly once
                (retention: or gone with a whole older segment); no event twice
  duplicate     every acknowledged id still inside the window is a duplicate when re-sent
                (accepted 0), and `ingestd lookup` says `seen` for a sample of them
  check         `ingestd check` on the crashed directory agrees with recovery (exit 0 when
                start accepted it) and passes on the recovered one after a clean stop
  extra         per workload: the backup starts and holds every event; the group's offset

The enumeration is bounded: the points are taken in priority (those after a rename, a
directory fsync or an fsync of a file outside the log first, then the others in seeded
order), each point's states in the order none, all, random, prefixes spread over the
pending operations, and identical states are recovered once; --max-states and
--budget-seconds stop it. Every failure prints the workload, phase, point, model, state and
the commands that rebuild and recover it by hand; the images are kept (--workdir).

A failure that matches an entry of KNOWN_BUGS (a known storage bug, with its item number) is
XFAIL and does not fail the run; an entry that matched nothing is reported as XPASS (remove
it once its fix is merged). Exit status: 0 when every failure was expected, 1 otherwise, 2
on a usage error.
"""

import argparse
import collections
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)

from harness import (BIN, HarnessError, Server, basic, clean_env, deadline_wait,  # noqa: E402
                     http_request, log_cat, run_cli, track)
import powerloss  # noqa: E402
from test_powerloss import preload  # noqa: E402  (an ASan build's runtime goes first)

# Known storage bugs the explorer finds and that are not fixed yet: a failure that matches one
# (its workloads, model, and a pattern over "check: detail", and "phase" if given) is expected
# (XFAIL) and does not fail the run; an entry that matched nothing in a run that explored its
# workloads is reported as XPASS. Each entry: {"item", "what", "workloads" (a set, or None for
# all), "model" (None for both), "match"}. Empty: every bug found so far (issue #25's items
# 1-8 and N1-N5) is fixed, and any failure fails the run.
KNOWN_BUGS = []


KEYS = {"k1": "default", "k2": "mobile"}
SPEC_RANK = {"none": 0, "all": 1}


# ---- the workloads --------------------------------------------------------------------------


class Ctx:
    """A workload's run: its data dir under the shim's root, its phases and acknowledgements."""

    def __init__(self, workdir, lib, verbose):
        self.workdir = workdir
        self.lib = lib
        self.verbose = verbose
        self.root = os.path.join(workdir, "root")  # FAULTFS_ROOT: data/ and backup/ below it
        self.data = os.path.join(self.root, "data")
        os.makedirs(self.data)
        self.phases = []  # {"name", "image", "serve_args", "acks": [(source, id, jbytes)]}
        self.serve_args = []
        self.n = 0
        self.state = {}   # what a workload's checks need (backup end, group offset, ...)

    def new_phase(self, name, serve_args=None):
        image = os.path.join(self.workdir, "image-%d-%s" % (len(self.phases), name))
        if serve_args is not None:
            self.serve_args = list(serve_args)
        ph = {"name": name, "image": image, "serve_args": list(self.serve_args), "acks": []}
        self.phases.append(ph)
        return ph

    def env(self, ph):
        return {"LD_PRELOAD": preload(self.lib), "FAULTFS_ROOT": self.root,
                "FAULTFS_IMAGE": ph["image"]}

    def jbytes(self, ph):
        return os.path.getsize(os.path.join(ph["image"], "journal"))

    def setup(self, args, rounds, per_round):
        """Restarts without the shim (not explored): each clean stop seals the young store, so
        `rounds` restarts make as many generations in seconds. per_round: [(key, n, tag)]."""
        ph = self.new_phase("setup", args)
        ph["explore"] = False
        srv = Server(keys=["%s:%s" % kv for kv in KEYS.items()], args=args, data_dir=self.data)
        try:
            for _ in range(rounds):
                srv.start()
                for key, n, tag in per_round:
                    ids = self.ids(n, tag)
                    r = srv.batch([track(mid=m) for m in ids], key=key)
                    if r.status != 200 or r.json["accepted"] != n:
                        raise HarnessError("workload setup send: %r" % r)
                    ph["acks"] += [(KEYS[key], m, 0) for m in ids]
                srv.stop()
        finally:
            srv.kill()

    def serve(self, name, args):
        ph = self.new_phase(name, args)
        srv = Server(keys=["%s:%s" % kv for kv in KEYS.items()], args=args, data_dir=self.data,
                     env=self.env(ph))
        srv.start()
        return ph, srv

    def cli(self, name, args, timeout=120):
        ph = self.new_phase(name)
        p = subprocess.run([BIN] + args, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=timeout, env=clean_env(self.env(ph)))
        if p.returncode != 0:
            raise HarnessError("%s exited %d: %s" % (args, p.returncode, p.stderr))
        ph["end"] = self.jbytes(ph)
        return ph, p

    def ids(self, n, tag):
        out = ["%s-%d" % (tag, self.n + i) for i in range(n)]
        self.n += n
        return out

    def send(self, ph, srv, key, ids, batch=100):
        """Sends ids in batches; each acknowledged one is recorded with the journal length."""
        for i in range(0, len(ids), batch):
            chunk = ids[i:i + batch]
            r = http_request(srv.host, srv.port, "POST", "/v1/batch",
                             {"batch": [track(mid=m) for m in chunk]},
                             {"Authorization": basic(key)}, timeout=30)
            if r.status != 200 or r.json["accepted"] != len(chunk):
                raise HarnessError("workload send: %r" % r)
            pos = self.jbytes(ph)
            ph["acks"] += [(KEYS[key], m, pos) for m in chunk]

    def stats(self, srv):
        return srv.stats()

    def wait(self, srv, cond, what, timeout=60):
        deadline_wait(lambda: cond(srv.stats()), timeout, what)


def gens(st):
    return st["dedupe"]["generations"]


class serving:
    """`with serving(ctx, name, args) as (ph, srv)`: an explored serve phase, stopped cleanly
    at the end of the block (killed if the block fails)."""

    def __init__(self, ctx, name, args):
        self.ctx, self.name, self.args = ctx, name, args

    def __enter__(self):
        self.ph, self.srv = self.ctx.serve(self.name, self.args)
        return self.ph, self.srv

    def __exit__(self, *exc):
        try:
            if exc[0] is None:
                self.srv.stop()
        finally:
            self.srv.kill()


def sealing_rounds(ctx, ph, srv, rounds, sends):
    """Sends each round's [(key, n, tag, batch)], then waits for the seal it makes."""
    for _ in range(rounds):
        for key, n, tag, batch in sends:
            ctx.send(ph, srv, key, ctx.ids(n, tag), batch=batch)
        want = gens(srv.stats())["seals"] + 1
        ctx.wait(srv, lambda st: gens(st)["seals"] >= want, "a seal")


def acked(ctx):
    return [(s, m) for ph in ctx.phases for s, m, _p in ph["acks"]]


def newest(acks, source, n):
    mine = [a for a in acks if a[0] == source]
    return mine[-n:] if n else []


def wl_seal(ctx):
    with serving(ctx, "serve", ["--young-keys", "500", "--max-keys", "0"]) as (ph, srv):
        sealing_rounds(ctx, ph, srv, 3, [("k1", 600, "seal", 100)])


def wl_merge(ctx):
    # A window of 24 x 120 keys (restarts merge them into a few large generations); then
    # each seal of about 100 keys is smaller than 3/4 of the target (the window / 16), and
    # after a few of them the merger merges them (docs/window.md).
    ctx.setup(["--young-keys", "100", "--max-keys", "0"], 24, [("k1", 120, "mg")])
    with serving(ctx, "serve", ["--young-keys", "100", "--max-keys", "0"]) as (ph, srv):
        for _ in range(5):
            sealing_rounds(ctx, ph, srv, 1, [("k1", 110, "merge", 55)])
            if gens(srv.stats())["merges"]:
                break
        ctx.wait(srv, lambda st: gens(st)["merges"] >= 1, "a merge")


MIXED = [("k1", 90, "a"), ("k2", 10, "b")]  # the default source floods, mobile trickles


def wl_merge_of_one(ctx):
    # As the reviewer did: mixed generations first, then a restart with a budget that cuts
    # each older generation by more than half for the flooding source: each is rewritten
    # alone (a merge of one), by the merger at open and again after the next seal.
    ctx.setup(["--young-keys", "100", "--max-keys", "0"], 10, MIXED)
    with serving(ctx, "cut", ["--young-keys", "100", "--max-keys", "300"]) as (ph, srv):
        ctx.wait(srv, lambda st: gens(st)["merges"] >= 1, "a merge of one")
        want = gens(srv.stats())["merges"] + 1
        sealing_rounds(ctx, ph, srv, 1, [("k1", 90, "mo-a", 30), ("k2", 10, "mo-b", 10)])
        ctx.wait(srv, lambda st: gens(st)["merges"] >= want, "another merge")


def wl_cut(ctx):
    # Per-source budgets while serving: each seal makes older generations cut for the
    # flooding source; those half cut are rewritten, the others keep their carried keys.
    ctx.setup(["--young-keys", "100", "--max-keys", "300"], 6, MIXED)
    with serving(ctx, "serve", ["--young-keys", "100", "--max-keys", "300"]) as (ph, srv):
        sealing_rounds(ctx, ph, srv, 2, [("k1", 90, "cut-a", 30), ("k2", 10, "cut-b", 10)])


def wl_cut_young(ctx):
    # Per-source budgets in the young store alone (--max-keys under --young-keys: nothing is
    # sealed, eviction goes key by key): the trickling source's keys met below the floor
    # while the flooding one is over its budget are carried.
    with serving(ctx, "serve", ["--max-keys", "200"]) as (ph, srv):
        for _ in range(3):
            ctx.send(ph, srv, "k1", ctx.ids(300, "cy-a"), batch=100)
            ctx.send(ph, srv, "k2", ctx.ids(20, "cy-b"), batch=20)
            want = srv.stats()["commit"]["checkpoints"] + 1
            ctx.wait(srv, lambda st: st["commit"]["checkpoints"] >= want, "a checkpoint")


def wl_drop(ctx):
    with serving(ctx, "serve", ["--young-keys", "300", "--max-keys", "900"]) as (ph, srv):
        sealing_rounds(ctx, ph, srv, 5, [("k1", 300, "drop", 100)])
        ctx.wait(srv, lambda st: st["dedupe"]["evicted_size"] > 0, "whole generations dropped")


def wl_checkpoint(ctx):
    with serving(ctx, "serve", []) as (ph, srv):
        for _ in range(3):
            ctx.send(ph, srv, "k1", ctx.ids(400, "cp"))
            ctx.send(ph, srv, "k2", ctx.ids(100, "cpm"))
            want = srv.stats()["commit"]["checkpoints"] + 1
            ctx.wait(srv, lambda st: st["commit"]["checkpoints"] >= want, "a checkpoint")


def wl_retention(ctx):
    with serving(ctx, "serve", ["--segment-bytes", "8KiB", "--log-max-bytes", "24KiB"]) as \
            (ph, srv):
        for _ in range(4):
            ctx.send(ph, srv, "k1", ctx.ids(150, "ret"), batch=25)
            ctx.wait(srv, lambda st: st["log"]["bytes"] <= 32 * 1024, "retention")


def three_generations(ctx, tag):
    with serving(ctx, "serve", ["--young-keys", "300", "--max-keys", "0"]) as (ph, srv):
        sealing_rounds(ctx, ph, srv, 3, [("k1", 350, tag, 100)])


def wl_rebuild(ctx):
    three_generations(ctx, "rb")
    ctx.cli("rebuild", ["rebuild", "--data", ctx.data])


def wl_backup(ctx):
    three_generations(ctx, "bk")
    ctx.cli("backup", ["backup", "--data", ctx.data, "--to", os.path.join(ctx.root, "backup")])
    ctx.state["backup_phase"] = len(ctx.phases) - 1


def wl_small_files(ctx):
    # The first start makes DATA/secret (and store/, log/); a consumer group makes groups/.
    with serving(ctx, "first-start", []) as (ph, srv):
        ctx.send(ph, srv, "k1", ctx.ids(100, "sf"), batch=20)
        ctx.send(ph, srv, "k2", ctx.ids(20, "sfm"), batch=20)
    ph, p = ctx.cli("group", ["log", "cat", "--data", ctx.data, "--group", "g1"])
    ctx.state["group_phase"] = len(ctx.phases) - 1
    ctx.state["group_offset"] = len([l for l in p.stdout.splitlines() if l.strip()])


WORKLOADS = collections.OrderedDict([
    ("seal", wl_seal),
    ("merge", wl_merge),
    ("merge-of-one", wl_merge_of_one),
    ("cut", wl_cut),
    ("cut-young", wl_cut_young),
    ("drop", wl_drop),
    ("checkpoint", wl_checkpoint),
    ("retention", wl_retention),
    ("rebuild", wl_rebuild),
    ("backup", wl_backup),
    ("small-files", wl_small_files),
])


def in_window(name, phase, acks):
    """The acknowledged (source, id) that must still be duplicates under `phase`'s flags."""
    args = phase["serve_args"]
    max_keys = int(args[args.index("--max-keys") + 1]) if "--max-keys" in args else 0
    if not max_keys:
        return list(acks)
    # --max-keys is a budget per source: at least the newest N of each source stay.
    out = []
    for source in KEYS.values():
        out += newest(acks, source, max_keys)
    return out


# ---- recovery and the checks ----------------------------------------------------------------


def run(args, timeout=60):
    return subprocess.run([BIN] + args, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout, env=clean_env())


def problems(text):
    """check's PROBLEM lines, or its last line."""
    lines = [l.strip() for l in text.splitlines() if l.startswith("PROBLEM")]
    return "; ".join(lines)[:400] if lines else first_line(text)


def first_line(text):
    """The line that says what went wrong: the server's ERROR line first."""
    lines = [l for l in text.splitlines() if l.strip()]
    for words in (("ERROR",), ("error", "refus", "timed out", "exited")):
        err = [l for l in lines if any(w in l for w in words)]
        if err:
            return err[-1][:300]
    return (lines or [""])[-1][:300]


def check_dir(data, serve_args, must, logged_rule, dup, label):
    """Recovers `data` with the real binary and checks it; returns a list of (check, detail)."""
    fails = []
    budget = int(serve_args[serve_args.index("--max-keys") + 1]) \
        if "--max-keys" in serve_args else 0
    raw = run(["check", "--data", data])
    srv = Server(keys=["%s:%s" % kv for kv in KEYS.items()], args=serve_args, data_dir=data)
    try:
        srv.start()
    except HarnessError as e:
        # The server's last lines may still be in the pipe when its exit is seen: read them.
        if srv._reader:
            srv._reader.join(timeout=5)
        fails.append(("start", "%s refused: %s" % (label, first_line(srv.log(200) or str(e)))))
        if raw.returncode == 0:
            fails.append(("check", "%s: check said OK on a dir start refused" % label))
        srv.kill()
        return fails
    try:
        # A crash during the first start, before anything was acknowledged, leaves a dir that
        # was never whole (no secret, no log yet): start makes it anew, check may refuse it.
        if raw.returncode != 0 and must:
            fails.append(("check", "%s: check on the crashed dir failed (start accepted it): %s"
                          % (label, problems(raw.stdout + raw.stderr))))
        events = log_cat(data)
        counts = collections.Counter((e["source"], e["messageId"]) for e in events)
        if budget:
            # The budget keeps each source's newest N keys of the log as recovered, which may
            # hold events whose acknowledgement the power loss took (their fsync was done):
            # they count towards it, and push older acknowledged ones out, rightly.
            kept = set()
            for source in KEYS.values():
                mine = [(e["source"], e["messageId"]) for e in events if e["source"] == source]
                kept.update(mine[-budget:])
            dup = [a for a in dup if a in kept]
        twice = sorted(k for k, c in counts.items() if c > 1)
        if twice:
            fails.append(("log", "%s: %d events logged twice, e.g. %s" % (label, len(twice),
                                                                         twice[:3])))
        lost = [a for a in must if a not in counts]
        if lost and logged_rule == "retention":
            # Retention removes whole oldest segments: what is gone must be older than all
            # that is left.
            present = [i for i, a in enumerate(must) if a in counts]
            lost = [a for i, a in enumerate(must) if a not in counts and present and
                    i > present[0]]
        if lost:
            fails.append(("log", "%s: %d of %d acknowledged events lost, e.g. %s"
                          % (label, len(lost), len(must), lost[:3])))
        for key, source in KEYS.items():
            ids = [m for s, m in dup if s == source]
            for i in range(0, len(ids), 2000):
                chunk = ids[i:i + 2000]
                r = http_request(srv.host, srv.port, "POST", "/v1/batch",
                                 {"batch": [track(mid=m) for m in chunk]},
                                 {"Authorization": basic(key)}, timeout=60)
                if r.status != 200 or r.json["accepted"] != 0:
                    fails.append(("duplicate", "%s: re-send of %d acknowledged in-window ids "
                                  "(%s): %s" % (label, len(chunk), source,
                                                r.json if r.json else r.status)))
                    break
        srv.stop()
    except HarnessError as e:
        fails.append(("start", "%s: the recovered server failed: %s" % (label, first_line(str(e)))))
        srv.kill()
        return fails
    finally:
        srv.kill()
    post = run(["check", "--data", data])
    if post.returncode != 0:
        fails.append(("check", "%s: check after recovery and a clean stop failed: %s"
                      % (label, problems(post.stdout + post.stderr))))
    rng = random.Random(len(dup))
    for source in KEYS.values():
        ids = [m for s, m in dup if s == source]
        sample = rng.sample(ids, min(8, len(ids)))
        if not sample:
            continue
        p = run(["lookup", "--data", data, "--source", source] + sample)
        unseen = [json.loads(l).get("messageId", "?") for l in p.stdout.splitlines()
                  if l.strip() and json.loads(l).get("status") != "seen"]
        if p.returncode not in (0, 1) or unseen:
            fails.append(("duplicate", "%s: lookup says unseen: %s" % (label, unseen[:3])))
    return fails


def check_state(wl, ctx, pi, k, ends_k, state_root):
    """All the checks of one built state of phase `pi` at journal position k."""
    ph = ctx.phases[pi]
    ends = ends_k
    must = []
    for j, p in enumerate(ctx.phases[:pi + 1]):
        for s, m, pos in p["acks"]:
            if j < pi or powerloss.records_before(ends, pos) <= k:
                must.append((s, m))
    serve_args = ph["serve_args"]
    rule = "retention" if wl == "retention" else "exact"
    dup = in_window(wl, ph, must)
    data = os.path.join(state_root, "data")
    fails = check_dir(data, serve_args, must, rule, dup, "data")
    if wl == "backup" and pi == ctx.state.get("backup_phase") and \
            powerloss.records_before(ends, ph["end"]) <= k:
        bdir = os.path.join(state_root, "backup")
        fails += check_dir(bdir, serve_args, must, rule, in_window(wl, ph, must),
                           "backup (finished before the point)")
    if wl == "small-files" and pi == ctx.state.get("group_phase") and \
            powerloss.records_before(ends, ph["end"]) <= k:
        p = run(["log", "groups", "--data", data, "--json"])
        try:  # one JSON object per group and line: {"group", "offset", "lag"}
            groups = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
            off = {g["group"]: g["offset"] for g in groups}.get("g1")
        except (ValueError, KeyError, TypeError):
            off = None
        if off != ctx.state["group_offset"]:
            fails.append(("extra", "group g1 committed at %s before the point, now %r (%s)"
                          % (ctx.state["group_offset"], off, first_line(p.stderr))))
    return fails


# ---- the enumeration ------------------------------------------------------------------------


def interesting(tl, k):
    """A point after a rename, a directory fsync, or an fsync of a file outside the log."""
    typ, _seq, ident, _a, _b, _p = tl.recs[k - 1] if k else (0, 0, 0, 0, 0, b"")
    if typ in (powerloss.J_DIRSYNC, powerloss.J_RENAME, powerloss.J_EXCHANGE):
        return True
    if typ == powerloss.J_SETTLE:
        return "/log/" not in "/" + tl.where.get(ident, "") and \
            not tl.where.get(ident, "").startswith("data/log/")
    return False


def specs_for(npending, seed, prefixes, randoms):
    """A point's states in priority order: none, all, random, spread prefixes, more random."""
    out = ["none"]
    if npending:
        out.append("all")
        out.append("random:%d" % seed)
        if npending > 1:
            if npending - 1 <= prefixes:
                js = range(1, npending)
            else:
                js = sorted({1 + (npending - 2) * i // max(1, prefixes - 1)
                             for i in range(prefixes)})
            out += ["prefix:%d" % j for j in js]
        out += ["random:%d" % (seed + i) for i in range(1, randoms)]
    return out


def plan_phase(image, model, seed, max_states, prefixes, randoms, scratch):
    """Pass 1: the distinct states of a phase in priority order, at most max_states of them.
    Returns ([(rank, k, spec, digest)], number of points, number of candidate states)."""
    tl = powerloss.Timeline(image, model)
    where_pass = powerloss.Timeline(image, model)  # names of files, for `interesting`
    where_pass.advance(len(where_pass.recs))
    tl.where = where_pass.where
    pts = tl.points()
    rng = random.Random("%s/%s/%s" % (seed, model, image))
    end = pts[-1]  # the end of the phase (a finished backup, a committed group) comes first
    first = [k for k in pts if interesting(tl, k) and k != end]
    rest = [k for k in pts if k not in set(first) and k != end]
    rng.shuffle(first)
    rng.shuffle(rest)
    order = [end] + first + rest
    rank_of = {k: r for r, k in enumerate(order)}
    chosen = sorted(order[:max(1, max_states)])
    cands = []
    n_cand = 0
    for k in chosen:
        tl.advance(k)
        specs = specs_for(tl.pending_count(), seed + k, prefixes, randoms)
        n_cand += len(specs)
        for si, spec in enumerate(specs):
            summ = tl.build(spec, None)
            cands.append(((si, rank_of[k]), k, spec, summ["digest"]))
    cands.sort()
    seen, out = set(), []
    for rank, k, spec, digest in cands:
        if digest in seen:
            continue
        seen.add(digest)
        out.append((rank, k, spec, digest))
    return out[:max_states], len(pts), n_cand


def explore_workload(name, args, lib, deadline_fn):
    workdir = tempfile.mkdtemp(prefix="explore-%s-" % name, dir=args.workdir)
    ctx = Ctx(workdir, lib, args.verbose)
    t0 = time.monotonic()
    WORKLOADS[name](ctx)
    t_run = time.monotonic() - t0
    deadline = deadline_fn()
    models = ["strict", "ext4"] if args.model == "both" else [args.model]
    nphase = sum(1 for ph in ctx.phases if ph.get("explore", True)) * len(models)
    per = max(1, args.max_states // nphase)
    result = {"workload": name, "points": 0, "candidates": 0, "explored": 0, "failures": [],
              "acks": len(acked(ctx)), "workdir": workdir, "run_seconds": t_run,
              "phases": [ph["name"] for ph in ctx.phases], "truncated": False}
    lock = threading.Lock()
    queue = []  # every phase's and model's states, recovered in one priority order
    for pi, ph in enumerate(ctx.phases):
        if not ph.get("explore", True):
            continue
        ends = powerloss.journal_ends(os.path.join(ph["image"], "journal"))
        for model in models:
            scratch = os.path.join(workdir, "states-%d-%s" % (pi, model))
            os.makedirs(scratch)
            plan, npts, ncand = plan_phase(ph["image"], model, args.seed, per, args.prefixes,
                                           args.randoms, scratch)
            result["points"] += npts
            result["candidates"] += ncand
            # Pass 2: build the chosen states, forwards through the journal.
            tl = powerloss.Timeline(ph["image"], model)
            for rank, k, spec, digest in sorted(plan, key=lambda x: (x[1], x[0])):
                tl.advance(k)
                d = os.path.join(scratch, "%d-%s" % (k, spec.replace(":", "-")))
                tl.build(spec, d)
                queue.append((rank, pi, model, k, spec, d, tl.describe(k), ends))
    queue.sort(key=lambda x: x[:3])

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                if time.monotonic() > deadline:
                    result["truncated"] = True
                    return
                _rank, pi, model, k, spec, d, what, ends = queue.pop(0)
            ph = ctx.phases[pi]
            try:
                fails = check_state(name, ctx, pi, k, ends, d)
            except Exception as e:  # a harness failure is a finding, not a crash
                fails = [("harness", repr(e)[:300])]
            cmd = ("python3 tests/faultfs/powerloss.py --image %s --out STATE --at %d "
                   "--keep %s --dirsync %s && build/ingestd serve --data STATE/data %s"
                   % (ph["image"], k, spec, model,
                      " ".join("--write-key %s:%s" % kv for kv in KEYS.items()) +
                      (" " + " ".join(ph["serve_args"]) if ph["serve_args"] else "")))
            with lock:
                result["explored"] += 1
                for check, detail in fails:
                    result["failures"].append({
                        "workload": name, "phase": ph["name"], "point": k,
                        "after": what, "model": model, "state": spec,
                        "check": check, "detail": detail, "rebuild": cmd})
            if not fails:
                shutil.rmtree(d, ignore_errors=True)

    ts = [threading.Thread(target=worker) for _ in range(args.jobs)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return result


def classify(wl, fails, strict_xfail=False):
    """Sets each failure's "items": the KNOWN_BUGS it is expected from (none: unexpected). A
    state's "check said OK on a dir start refused" goes with its refused start."""
    by_state = collections.defaultdict(list)
    for f in fails:
        by_state[(f["phase"], f["point"], f["model"], f["state"])].append(f)
        text = "%s: %s" % (f["check"], f["detail"])
        f["items"] = [] if strict_xfail else sorted({
            b["item"] for b in KNOWN_BUGS
            if (b["workloads"] is None or wl in b["workloads"]) and
            b.get("phase", f["phase"]) == f["phase"] and
            (b["model"] is None or b["model"] == f["model"]) and re.search(b["match"], text)})
    for group in by_state.values():
        start = sorted({it for f in group if f["check"] == "start" for it in f["items"]})
        for f in group:
            if "check said OK on a dir start refused" in f["detail"]:
                f["items"] = start


def faultfs_lib():
    lib = os.environ.get("FAULTFS_LIB") or os.path.join(os.path.dirname(BIN), "tests",
                                                        "libfaultfs.so")
    return lib if os.path.exists(lib) else None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--workload", action="append", choices=list(WORKLOADS),
                    help="run this workload (repeatable; default: all)")
    ap.add_argument("--model", choices=("strict", "ext4", "both"), default="both",
                    help="which name-durability model (default both)")
    ap.add_argument("--seed", type=int, default=None,
                    help="seed of the point order and random subsets (default: "
                         "INGESTD_EXPLORE_SEED, else random; printed)")
    ap.add_argument("--max-states", type=int, default=40,
                    help="distinct states recovered per workload, over its phases and models")
    ap.add_argument("--budget-seconds", type=float, default=0,
                    help="stop recovering states after this long overall (0: no limit)")
    ap.add_argument("--prefixes", type=int, default=4,
                    help="prefixes of the pending operations per point (all when fewer)")
    ap.add_argument("--randoms", type=int, default=2, help="random subsets per point")
    ap.add_argument("--jobs", type=int, default=2, help="states recovered at once")
    ap.add_argument("--workdir", default=None,
                    help="where images and states go (kept; default: a temporary directory, "
                         "removed unless something unexpected failed)")
    ap.add_argument("--strict-xfail", action="store_true",
                    help="treat the KNOWN_BUGS as failures too")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    lib = faultfs_lib()
    if not lib:
        print("explore.py: libfaultfs.so not built (set FAULTFS_LIB)", file=sys.stderr)
        return 2
    if args.seed is None:
        env_seed = os.environ.get("INGESTD_EXPLORE_SEED")
        args.seed = int(env_seed) if env_seed else random.randrange(1 << 30)
    keep_workdir = bool(args.workdir)
    if args.workdir:
        os.makedirs(args.workdir, exist_ok=True)
    else:
        args.workdir = tempfile.mkdtemp(prefix="ingestd-explore-")
    names = args.workload or list(WORKLOADS)
    start = time.monotonic()
    deadline = start + args.budget_seconds if args.budget_seconds else float("inf")
    print("crash-state explorer: seed %d, model %s, max %d states per workload, workdir %s"
          % (args.seed, args.model, args.max_states, args.workdir), flush=True)
    results, bad, matched = [], [], collections.Counter()
    for i, name in enumerate(names):
        t = time.monotonic()

        def share(i=i):
            # After its workload ran, each gets its share of what is left of the budget for
            # its states, so the last ones run too.
            now = time.monotonic()
            return min(deadline, now + (deadline - now) / (len(names) - i))

        try:
            r = explore_workload(name, args, lib, share)
        except Exception as e:  # the workload itself broke: a failure of the run
            r = {"workload": name, "points": 0, "candidates": 0, "explored": 0, "acks": 0,
                 "failures": [{"workload": name, "check": "workload", "detail": repr(e)[:2000],
                               "phase": "-", "point": 0, "after": "-", "model": "-",
                               "state": "-", "rebuild": "-"}], "truncated": False}
        results.append(r)
        fails = r["failures"]
        classify(name, fails, args.strict_xfail)
        for f in fails:
            matched.update(f["items"])
        unexpected = [f for f in fails if not f["items"]]
        checks = collections.Counter(f["check"] for f in fails)
        states_failed = len({(f.get("phase"), f.get("point"), f.get("model"), f.get("state"))
                             for f in fails})
        items = sorted({it for f in fails for it in f["items"]})
        if not fails:
            verdict = "PASS"
        elif not unexpected:
            verdict = "XFAIL (%s)" % ", ".join("(%s)" % it for it in items)
        else:
            verdict = "FAIL"
            bad.append(name)
        print("%-13s %s: %d acks, %d persistence points, %d candidate states, %d explored%s, "
              "%d failing states (%s) in %.0fs"
              % (name, verdict, r["acks"], r["points"], r["candidates"], r["explored"],
                 " (budget hit)" if r.get("truncated") else "", states_failed,
                 ", ".join("%s %d" % kv for kv in sorted(checks.items())) or "none",
                 time.monotonic() - t), flush=True)
        shown = collections.Counter()
        for f in fails:
            # One example per kind of failure (numbers, paths and times left out), unless
            # --verbose; the JSON (--json) has them all.
            kind = (f["check"], f["phase"], f["model"], tuple(f["items"]),
                    re.sub(r"[\d:.TZ-]+|/\S+", "", f["detail"]),
                    re.sub(r"[\d]+", "", f["after"]))
            shown[kind] += 1
            if shown[kind] > 1 and not args.verbose:
                continue
            print("  %s %s | phase %s | point %s (after %s) | model %s | state %s\n"
                  "       %s\n       rebuild: %s"
                  % ("FAIL" if not f["items"] else
                     "XFAIL " + ",".join("(%s)" % it for it in f["items"]),
                     f["check"], f["phase"], f["point"], f["after"], f["model"], f["state"],
                     f["detail"], f["rebuild"]), flush=True)
    for bug in KNOWN_BUGS:
        ran = bug["workloads"] is None or bug["workloads"] & set(names)
        if ran and not matched[bug["item"]]:
            print("XPASS (%s) %s: no failure of it in this run (remove it from KNOWN_BUGS once "
                  "its fix is merged)" % (bug["item"], bug["what"]), flush=True)
    total = sum(r["explored"] for r in results)
    print("explored %d crash states in %.0fs (seed %d); unexpected failures: %s"
          % (total, time.monotonic() - start, args.seed, ", ".join(bad) or "none"), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": args.seed, "results": results}, f, indent=1)
    # Images and failing states are kept for reproduction when something unexpected failed,
    # or in a --workdir given; a CI run whose failures were all expected leaves nothing.
    if not bad and not keep_workdir:
        shutil.rmtree(args.workdir, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
