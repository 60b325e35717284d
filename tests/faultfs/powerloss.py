#!/usr/bin/env python3
"""Builds the data dir a power loss would leave, from a faultfs image (see faultfs.c).

    powerloss.py --image IMG --out DATA_DIR --seed N --mode drop|tear|random [--dirsync strict|ext4]

The image holds what was durable when the process died (IMG/inodes/<id>, the durable names
in IMG/tree/ as hard links to them) and IMG/journal, every operation in order. Operations
not settled by a successful fsync were still only in the page cache; this tool decides, per
file and per directory, which of them reached the disk:

  file data (writes and truncates of one file, in order), per file one of:
    drop    none of them
    prefix  the first k (k random, 0..all)
    tear    the first k, then the first sectors (512-byte boundaries of the file) of the
            next write, as a disk that lost power in the middle of it
    subset  (random mode only) every 512-byte piece of every write, and every truncate,
            independently with probability 1/2: disks reorder unsynced writes
  --mode drop: every file drops; --mode tear: drop/prefix/tear per file; --mode random:
  drop/prefix/tear/subset per file. Writes to O_DSYNC descriptors are always kept.

  names (create, mkdir, rename, exchange, unlink), per directory: a random prefix in order (file
  systems journal metadata in order); --mode drop keeps none. --dirsync strict (POSIX):
  only an fsync of the directory makes them durable. --dirsync ext4: any successful
  fsync/fdatasync also commits every earlier name operation (ext4's journal commit).

Prints a JSON summary of the choices on stdout. The same image, seed, mode and dirsync
always give the same data dir.

    powerloss.py --image IMG --out DIR --at K --keep none|all|prefix:J|random:SEED
                 [--dirsync strict|ext4]

builds instead the state of a power loss at journal position K (after the first K records;
`--at end`: all of them), from the journal alone and IMG/base/ (the files found at start):
durable is what the records before K made durable; of the operations still pending at K
(file data, and names not yet made durable by their directory's fsync, or under ext4 by any
fsync), --keep none keeps none, all keeps all, prefix:J the first J in journal order,
random:SEED per file drop/prefix/tear/subset and per directory (ext4: over all directories,
its journal being one) a prefix of the names, as above. tests/faultfs/explore.py enumerates
these states (see tests/faultfs/README.md).
"""

import argparse
import bisect
import hashlib
import json
import os
import random
import struct
import sys

HDR = struct.Struct("<IIQQQQII")
MAGIC = 0x4A464646
SECTOR = 512

J_WRITE, J_TRUNC, J_SETTLE, J_CREATE, J_MKDIR, J_RENAME, J_UNLINK, J_DIRSYNC, J_BASEDIR, \
    J_BASEFILE, J_EXCHANGE = range(1, 12)
NAME_OPS = (J_CREATE, J_MKDIR, J_RENAME, J_UNLINK, J_EXCHANGE)


def scan_journal(path):
    """(records, end offsets): the journal's complete records (a torn last one, from a kill
    mid-write, is dropped) and the byte offset just past each."""
    with open(path, "rb") as f:
        buf = f.read()
    recs, ends, pos = [], [], 0
    while pos + HDR.size <= len(buf):
        magic, typ, seq, ident, a, b, plen, _ = HDR.unpack_from(buf, pos)
        if magic != MAGIC or pos + HDR.size + plen > len(buf):
            break
        payload = buf[pos + HDR.size:pos + HDR.size + plen]
        recs.append((typ, seq, ident, a, b, payload))
        pos += HDR.size + plen
        ends.append(pos)
    return recs, ends


def read_journal(path):
    return scan_journal(path)[0]


def join(d, n):
    return n if not d else d + "/" + n


def parse_names(payload):
    return [p.decode() for p in payload.split(b"\0")]


class Model:
    def __init__(self, image, dirsync):
        self.image = image
        self.pending = {}       # inode id -> [op]
        self.dir_pending = {}   # owner dir -> [dir op]
        self.forced = {}        # owner dir -> how many of its pending ops are durable anyway
        self.linked = {""}      # directories durably linked into their parent
        for typ, seq, ident, a, b, payload in read_journal(os.path.join(image, "journal")):
            if typ == J_WRITE:
                self.pending.setdefault(ident, []).append(
                    {"t": "W", "seq": seq, "off": a, "data": payload, "dsync": bool(b)})
            elif typ == J_TRUNC:
                self.pending.setdefault(ident, []).append({"t": "T", "seq": seq, "size": a})
            elif typ == J_SETTLE:
                self.pending[ident] = []
                if dirsync == "ext4" and a == 0:
                    for d, ops in self.dir_pending.items():
                        self.forced[d] = len(ops)
            elif typ in NAME_OPS:
                names = parse_names(payload)
                op = {"t": typ, "seq": seq, "id": ident, "flag": a, "names": names}
                owner = names[2] if typ in (J_RENAME, J_EXCHANGE) else names[0]
                self.dir_pending.setdefault(owner, []).append(op)
            elif typ == J_DIRSYNC:
                d = payload.decode()
                for op in self.dir_pending.get(d, []):
                    self.apply_dir_op(op, None)
                self.dir_pending[d] = []
                self.forced[d] = 0
            elif typ == J_BASEDIR:
                self.linked.add(payload.decode())

    def apply_dir_op(self, op, names):
        """Applies a name operation to `names` (rel -> inode id) and the linked directories."""
        typ, n = op["t"], op["names"]
        if typ == J_CREATE:
            if names is not None:
                names[join(n[0], n[1])] = op["id"]
        elif typ == J_MKDIR:
            self.linked.add(join(n[0], n[1]))
        elif typ == J_RENAME:
            old, new = join(n[0], n[1]), join(n[2], n[3])
            if names is not None and old in names:
                names[new] = names.pop(old)
        elif typ == J_EXCHANGE:
            # Two names swap what they hold: files, or directories with all below them.
            a, b = join(n[0], n[1]), join(n[2], n[3])

            def swap(rel):
                for x, y in ((a, b), (b, a)):
                    if rel == x or rel.startswith(x + "/"):
                        return y + rel[len(x):]
                return rel
            self.linked = {swap(d) for d in self.linked}
            if names is not None:
                moved = {swap(rel): ident for rel, ident in names.items()}
                names.clear()
                names.update(moved)
        elif typ == J_UNLINK:
            rel = join(n[0], n[1])
            if op["flag"]:
                self.linked.discard(rel)
            elif names is not None:
                names.pop(rel, None)

    def durable_names(self):
        """rel -> inode id for every file in the durable tree."""
        by_ino = {}
        idir = os.path.join(self.image, "inodes")
        for name in os.listdir(idir):
            by_ino[os.stat(os.path.join(idir, name)).st_ino] = int(name)
        names = {}
        tree = os.path.join(self.image, "tree")
        for dirpath, _dirs, files in os.walk(tree):
            for f in files:
                p = os.path.join(dirpath, f)
                ino = os.stat(p).st_ino
                if ino in by_ino:
                    names[os.path.relpath(p, tree)] = by_ino[ino]
        return names


def apply_write(content, off, data):
    end = off + len(data)
    if len(content) < off:
        content.extend(b"\0" * (off - len(content)))
    content[off:end] = data


def apply_op(content, op):
    if op["t"] == "W":
        apply_write(content, op["off"], op["data"])
    elif op["size"] <= len(content):
        del content[op["size"]:]
    else:
        content.extend(b"\0" * (op["size"] - len(content)))


def sector_pieces(off, data):
    """(offset, bytes) pieces of a write, split at the file's 512-byte boundaries."""
    pieces, pos = [], 0
    while pos < len(data):
        start = off + pos
        end = min(off + len(data), (start // SECTOR + 1) * SECTOR)
        pieces.append((start, data[pos:pos + end - start]))
        pos += end - start
    return pieces


def choose_file(rng, mode, ops, content):
    """Applies a random choice of the pending `ops` to `content`; returns its description."""
    n = len(ops)
    choices = {"drop": ["drop"], "tear": ["drop", "prefix", "tear"],
               "random": ["drop", "prefix", "tear", "subset"]}[mode]
    choice = rng.choice(choices)
    desc = {"pending": n, "choice": choice}
    if choice == "drop":
        keep = 0
    elif choice == "prefix":
        keep = rng.randint(0, n)
    elif choice == "tear":
        keep = rng.randint(0, n - 1) if n else 0
    if choice == "subset":
        kept = 0
        for op in ops:
            if op["t"] == "W" and not op.get("dsync"):
                for poff, piece in sector_pieces(op["off"], op["data"]):
                    if rng.random() < 0.5:
                        apply_write(content, poff, piece)
                        kept += 1
            elif op.get("dsync") or rng.random() < 0.5:
                apply_op(content, op)
                kept += 1
        desc["kept_pieces"] = kept
        return desc
    for i, op in enumerate(ops):
        if i < keep or op.get("dsync"):
            apply_op(content, op)
        elif i == keep and choice == "tear" and op["t"] == "W":
            pieces = sector_pieces(op["off"], op["data"])
            cut = rng.randint(0, len(pieces) - 1) if len(pieces) > 1 else 0
            for poff, piece in pieces[:cut]:
                apply_write(content, poff, piece)
            desc["torn_at"] = pieces[cut][0]
    desc["kept"] = keep
    return desc


def build(image, out, seed, mode, dirsync="strict"):
    rng = random.Random("%s/%s/%s" % (seed, mode, dirsync))
    model = Model(image, dirsync)
    names = model.durable_names()
    summary = {"seed": seed, "mode": mode, "dirsync": dirsync, "dirs": {}, "files": {}}

    for d in sorted(model.dir_pending):
        ops = model.dir_pending[d]
        if not ops:
            continue
        forced = model.forced.get(d, 0)
        keep = forced if mode == "drop" else rng.randint(forced, len(ops))
        for op in ops[:keep]:
            model.apply_dir_op(op, names)
        summary["dirs"][d or "."] = {"pending": len(ops), "kept": keep, "forced": forced}

    def visible(rel):
        parts = rel.split("/")[:-1]
        return all("/".join(parts[:i + 1]) in model.linked for i in range(len(parts)))

    if os.path.exists(out) and os.listdir(out):
        raise SystemExit("powerloss.py: %s exists and is not empty" % out)
    os.makedirs(out, exist_ok=True)
    for d in sorted(model.linked):
        if d and visible(d + "/x"):
            os.makedirs(os.path.join(out, d), exist_ok=True)
    contents = {}
    for rel in sorted(names):
        if not visible(rel):
            continue
        ident = names[rel]
        if ident not in contents:
            with open(os.path.join(image, "inodes", str(ident)), "rb") as f:
                content = bytearray(f.read())
            ops = model.pending.get(ident, [])
            if ops:
                summary["files"][rel] = choose_file(rng, mode, ops, content)
            contents[ident] = content
        path = os.path.join(out, rel)
        with open(path, "wb") as f:
            f.write(contents[ident])
        mode_bits = os.stat(os.path.join(image, "inodes", str(ident))).st_mode & 0o777
        os.chmod(path, mode_bits)
    return summary


# ---- the state of a power loss at any journal position (--at) ---------------------------


def journal_ends(path):
    """Byte offset just past each complete record of the journal, in order."""
    return scan_journal(path)[1]


def records_before(ends, byte_pos):
    """How many records were complete when the journal was `byte_pos` bytes long."""
    return bisect.bisect_right(ends, byte_pos)


class Timeline:
    """Replays a journal forwards; at any position builds the states a power loss may leave.

    Durable file content starts from IMG/base/<id> (files found at start) or empty (files
    created since); a file's writes and truncates stay pending until a successful fsync of it
    (a failed one loses them, O_DSYNC writes excepted). Directories are tracked as instances,
    not paths, so that a directory made anew where another was renamed away keeps its own
    entries: a name operation (create, mkdir, rename, unlink) belongs to the directory instance
    it was made in (a rename to its new directory) and stays pending until that directory is
    fsynced, or (ext4) until any successful fsync, which commits the one metadata journal in
    order. The state is what is reachable from the root through durable entries."""

    PERSIST = (J_SETTLE, J_DIRSYNC, J_RENAME, J_EXCHANGE)

    def __init__(self, image, dirsync):
        self.image = image
        self.dirsync = dirsync
        self.recs = read_journal(os.path.join(image, "journal"))
        self.pos = 0
        self.content = {}      # inode id -> durable bytes
        self.pending = {}      # inode id -> [(record index, op)]
        self.dur = {0: {}}     # directory instance -> {name: ("f", id) | ("d", instance)}
        self.live = {0: {}}    # the same, as the process saw it
        self.ninst = 1
        self.npending = []     # [(record index, name op)] not yet durable, in journal order
        self.where = {}        # inode id -> its latest name (for reports)

    def points(self):
        """Persistence points: positions right after each successful fsync, directory fsync
        and rename, plus the end of the journal."""
        pts = [i + 1 for i, r in enumerate(self.recs)
               if r[0] in self.PERSIST and not (r[0] == J_SETTLE and r[3])]
        if not pts or pts[-1] != len(self.recs):
            pts.append(len(self.recs))
        return pts

    def describe(self, k):
        """A short description of record k-1 (what the persistence point follows)."""
        if k == 0:
            return "start"
        typ, _seq, ident, a, _b, payload = self.recs[k - 1]
        name = {J_WRITE: "write", J_TRUNC: "truncate", J_SETTLE: "fsync", J_CREATE: "create",
                J_MKDIR: "mkdir", J_RENAME: "rename", J_UNLINK: "unlink", J_DIRSYNC: "dirsync",
                J_BASEDIR: "basedir", J_BASEFILE: "basefile",
                J_EXCHANGE: "exchange"}.get(typ, str(typ))
        if typ in (J_SETTLE, J_WRITE, J_TRUNC):
            return "%s %s" % (name + (" (failed)" if typ == J_SETTLE and a else ""),
                              self.where.get(ident, "#%d" % ident))
        if typ in NAME_OPS:
            n = parse_names(payload)
            if typ == J_RENAME:
                return "rename %s -> %s" % (join(n[0], n[1]), join(n[2], n[3]))
            if typ == J_EXCHANGE:
                return "exchange %s <-> %s" % (join(n[0], n[1]), join(n[2], n[3]))
            return "%s %s" % (name, join(n[0], n[1]))
        return "%s %s" % (name, payload.decode(errors="replace") or ".")

    def pending_count(self):
        return sum(len(v) for v in self.pending.values()) + len(self.npending)

    def _resolve(self, tree, rel):
        """The directory instance at `rel` in `tree` (live or durable), or None."""
        inst = 0
        for part in [p for p in rel.split("/") if p]:
            obj = tree.get(inst, {}).get(part)
            if not obj or obj[0] != "d":
                return None
            inst = obj[1]
        return inst

    def _new_dir(self):
        inst = self.ninst
        self.ninst += 1
        self.live[inst] = {}
        self.dur[inst] = {}
        return inst

    @staticmethod
    def apply_name(op, dur):
        """Makes a name operation durable in `dur` (directory instance -> entries)."""
        if op["kind"] == "exchange":  # both names at once, to what the process saw
            for (inst, name), obj in ((op["from"], op["other"]), ((op["owner"], op["name"]),
                                                                   op["obj"])):
                entries = dur.setdefault(inst, {})
                if obj is None:
                    entries.pop(name, None)
                else:
                    entries[name] = obj
            return
        if op["from"] is not None:  # rename: the old name goes if it still names the object
            o1, n1 = op["from"]
            if dur.setdefault(o1, {}).get(n1) == op["obj"]:
                del dur[o1][n1]
        entries = dur.setdefault(op["owner"], {})
        if op["kind"] == "unlink":
            if entries.get(op["name"]) == op["obj"]:
                del entries[op["name"]]
        else:
            entries[op["name"]] = op["obj"]

    def _commit_names(self, owner=None):
        keep = []
        for idx, op in self.npending:
            if owner is None or op["owner"] == owner:
                self.apply_name(op, self.dur)
            else:
                keep.append((idx, op))
        self.npending = keep

    def _name_op(self, i, typ, ident, a, names):
        live = self.live
        o = self._resolve(live, names[0])
        if o is None:  # below a directory the model never saw: outside the tree
            return
        if typ == J_CREATE:
            obj = ("f", ident)
            if ident not in self.content:  # else a hard link: a new name for a known file
                self.content[ident] = bytearray()
                self.where[ident] = join(names[0], names[1])
            op = {"kind": "link", "owner": o, "name": names[1], "obj": obj, "from": None}
        elif typ == J_MKDIR:
            obj = ("d", self._new_dir())
            op = {"kind": "link", "owner": o, "name": names[1], "obj": obj, "from": None}
        elif typ == J_RENAME:
            o2 = self._resolve(live, names[2])
            obj = live[o].get(names[1])
            if o2 is None or obj is None:
                return
            live[o].pop(names[1], None)
            op = {"kind": "link", "owner": o2, "name": names[3], "obj": obj,
                  "from": (o, names[1])}
            if obj[0] == "f":
                self.where[obj[1]] = join(names[2], names[3])
            o = o2
        elif typ == J_EXCHANGE:
            # One step, owned (as a rename) by the second name's directory: within one
            # directory, durable with that directory's fsync, both names or neither.
            o2 = self._resolve(live, names[2])
            if o2 is None:
                return
            obj, other = live[o].get(names[1]), live[o2].get(names[3])
            for inst, d, name, got in ((o, names[0], names[1], other),
                                       (o2, names[2], names[3], obj)):
                if got is None:
                    live[inst].pop(name, None)
                else:
                    live[inst][name] = got
                    if got[0] == "f":
                        self.where[got[1]] = join(d, name)
            self.npending.append((i, {"kind": "exchange", "owner": o2, "name": names[3],
                                      "obj": obj, "from": (o, names[1]), "other": other}))
            return
        else:
            obj = live[o].get(names[1])
            if obj is None:
                return
            op = {"kind": "unlink", "owner": o, "name": names[1], "obj": obj, "from": None}
        if op["kind"] == "link":
            live[o][op["name"]] = obj
        else:
            live[o].pop(op["name"], None)
        self.npending.append((i, op))

    def advance(self, k):
        """Replays records up to (not including) index k."""
        assert k >= self.pos, "a timeline only moves forwards"
        for i in range(self.pos, k):
            typ, _seq, ident, a, b, payload = self.recs[i]
            if typ == J_WRITE:
                self.pending.setdefault(ident, []).append(
                    (i, {"t": "W", "off": a, "data": payload, "dsync": bool(b)}))
            elif typ == J_TRUNC:
                self.pending.setdefault(ident, []).append((i, {"t": "T", "size": a}))
            elif typ == J_SETTLE:
                content = self.content.setdefault(ident, bytearray())
                for _i, op in self.pending.pop(ident, []):
                    if not a or op.get("dsync"):
                        apply_op(content, op)
                if self.dirsync == "ext4" and a == 0:
                    self._commit_names()
            elif typ in NAME_OPS:
                self._name_op(i, typ, ident, a, parse_names(payload))
            elif typ == J_DIRSYNC:
                inst = self._resolve(self.live, payload.decode())
                if inst is not None:
                    self._commit_names(inst)
            elif typ in (J_BASEDIR, J_BASEFILE):
                rel = payload.decode()
                if not rel:
                    continue
                parent, _sep, name = rel.rpartition("/")
                pd = self._resolve(self.dur, parent)
                if typ == J_BASEDIR:
                    obj = ("d", self._new_dir())
                else:
                    obj = ("f", ident)
                    base = os.path.join(self.image, "base", str(ident))
                    if not os.path.exists(base):
                        raise SystemExit("powerloss.py: %s missing: --at needs an image written "
                                         "by a faultfs that keeps base/ copies" % base)
                    with open(base, "rb") as f:
                        self.content[ident] = bytearray(f.read())
                    self.where[ident] = rel
                self.dur[pd][name] = obj
                self.live[pd][name] = obj
        self.pos = k

    def build(self, keep, out):
        """Writes the state a power loss at the current position leaves, keeping `keep` of
        the pending operations (none, all, prefix:J, random:SEED), into `out` (None: only
        the digest). Returns a summary with a digest of the state (equal digests: equal
        data dirs)."""
        dur = {inst: dict(entries) for inst, entries in self.dur.items()}
        contents = {}
        summary = {"at": self.pos, "keep": keep, "dirsync": self.dirsync,
                   "pending": self.pending_count(), "files": {}}

        def content_of(ident):
            if ident not in contents:
                contents[ident] = bytearray(self.content.get(ident, b""))
            return contents[ident]

        if keep.startswith("random:"):
            rng = random.Random("%s/%d/%s" % (keep, self.pos, self.dirsync))
            for ident in sorted(self.pending):
                ops = [op for _i, op in self.pending[ident]]
                if ops:
                    summary["files"][self.where.get(ident, str(ident))] = choose_file(
                        rng, "random", ops, content_of(ident))
            if self.dirsync == "ext4":
                chosen = self.npending[:rng.randint(0, len(self.npending))]
            else:
                chosen, owners = [], {}
                for idx, op in self.npending:
                    owners.setdefault(op["owner"], []).append((idx, op))
                for owner in sorted(owners):
                    ops = owners[owner]
                    chosen += ops[:rng.randint(0, len(ops))]
                chosen.sort(key=lambda x: x[0])
            for _i, op in chosen:
                self.apply_name(op, dur)
            summary["names_kept"] = len(chosen)
        else:
            allops = [(i, "f", ident, op) for ident, ops in self.pending.items()
                      for i, op in ops] + [(i, "n", None, op) for i, op in self.npending]
            allops.sort(key=lambda x: x[0])
            if keep == "none":
                n = 0
            elif keep == "all":
                n = len(allops)
            elif keep.startswith("prefix:"):
                n = min(int(keep.split(":", 1)[1]), len(allops))
            else:
                raise ValueError("--keep: none, all, prefix:J or random:SEED, not %r" % keep)
            for j, (_i, kind, ident, op) in enumerate(allops):
                if kind == "n":
                    if j < n:
                        self.apply_name(op, dur)
                elif j < n or op.get("dsync"):
                    apply_op(content_of(ident), op)
            summary["kept"] = n

        # What is reachable from the root through durable entries.
        dirs, files, stack, seen = [], [], [("", 0)], set()
        while stack:
            rel, inst = stack.pop()
            if inst in seen:
                continue
            seen.add(inst)
            for name, obj in dur.get(inst, {}).items():
                child = join(rel, name)
                if obj[0] == "d":
                    dirs.append(child)
                    stack.append((child, obj[1]))
                else:
                    files.append((child, obj[1]))
        if out is not None:
            if os.path.exists(out) and os.listdir(out):
                raise SystemExit("powerloss.py: %s exists and is not empty" % out)
            os.makedirs(out, exist_ok=True)
        digest = hashlib.sha256()
        for d in sorted(dirs):
            if out is not None:
                os.makedirs(os.path.join(out, d), exist_ok=True)
            digest.update(b"D" + d.encode() + b"\0")
        for rel, ident in sorted(files):
            data = contents[ident] if ident in contents else self.content.get(ident, b"")
            if out is not None:
                with open(os.path.join(out, rel), "wb") as f:
                    f.write(data)
            digest.update(b"F" + rel.encode() + b"\0" + hashlib.sha256(data).digest())
        summary["digest"] = digest.hexdigest()[:16]
        return summary


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--image", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, help="the random choices (without --at)")
    ap.add_argument("--mode", choices=("drop", "tear", "random"), help="(without --at)")
    ap.add_argument("--dirsync", choices=("strict", "ext4"), default="strict")
    ap.add_argument("--at", help="journal position K (records before it happened), or end")
    ap.add_argument("--keep", default="none",
                    help="with --at: none, all, prefix:J or random:SEED of the pending operations")
    args = ap.parse_args(argv)
    if args.at is not None:
        tl = Timeline(args.image, args.dirsync)
        tl.advance(len(tl.recs) if args.at == "end" else min(int(args.at), len(tl.recs)))
        summary = tl.build(args.keep, args.out)
    else:
        if args.seed is None or args.mode is None:
            ap.error("--seed and --mode are required without --at")
        summary = build(args.image, args.out, args.seed, args.mode, args.dirsync)
    json.dump(summary, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
