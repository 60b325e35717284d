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

  names (create, mkdir, rename, unlink), per directory: a random prefix in order (file
  systems journal metadata in order); --mode drop keeps none. --dirsync strict (POSIX):
  only an fsync of the directory makes them durable. --dirsync ext4: any successful
  fsync/fdatasync also commits every earlier name operation (ext4's journal commit).

Prints a JSON summary of the choices on stdout. The same image, seed, mode and dirsync
always give the same data dir.
"""

import argparse
import json
import os
import random
import struct
import sys

HDR = struct.Struct("<IIQQQQII")
MAGIC = 0x4A464646
SECTOR = 512

J_WRITE, J_TRUNC, J_SETTLE, J_CREATE, J_MKDIR, J_RENAME, J_UNLINK, J_DIRSYNC, J_BASEDIR, \
    J_BASEFILE = range(1, 11)


def read_journal(path):
    """The journal's complete records (a torn last one, from a kill mid-write, is dropped)."""
    with open(path, "rb") as f:
        buf = f.read()
    recs, pos = [], 0
    while pos + HDR.size <= len(buf):
        magic, typ, seq, ident, a, b, plen, _ = HDR.unpack_from(buf, pos)
        if magic != MAGIC or pos + HDR.size + plen > len(buf):
            break
        payload = buf[pos + HDR.size:pos + HDR.size + plen]
        recs.append((typ, seq, ident, a, b, payload))
        pos += HDR.size + plen
    return recs


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
            elif typ in (J_CREATE, J_MKDIR, J_RENAME, J_UNLINK):
                names = parse_names(payload)
                op = {"t": typ, "seq": seq, "id": ident, "flag": a, "names": names}
                owner = names[2] if typ == J_RENAME else names[0]
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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--image", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--mode", choices=("drop", "tear", "random"), required=True)
    ap.add_argument("--dirsync", choices=("strict", "ext4"), default="strict")
    args = ap.parse_args(argv)
    summary = build(args.image, args.out, args.seed, args.mode, args.dirsync)
    json.dump(summary, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
