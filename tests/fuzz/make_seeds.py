#!/usr/bin/env python3
"""Regenerates the seed corpora under tests/fuzz/corpus/ (committed; rerun only to refresh them).

    INGESTD_BIN=build/ingestd python3 tests/fuzz/make_seeds.py

batch/: the bodies of the batch data cases (tests/data/batch/) plus the body-only hostile
        cases (tests/data/hostile/); gzip/: gzip, zlib and multi-member streams, a small bomb,
        cut and damaged streams; log/: segments written by a real server (one small, one past
        the 64 KB index interval with its .idx), each in the harness's input layout
        (fuzz_log.c), and hand-made damaged ones.
"""

import gzip
import json
import os
import shutil
import struct
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))


def put(kind, name, data):
    d = os.path.join(HERE, "corpus", kind)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def case_body(spec):
    """The request body of a data case, as bytes, or None when it is built otherwise."""
    if "body_text" in spec:
        return spec["body_text"].encode("utf-8", "surrogatepass")
    if "body" in spec:
        return json.dumps(spec["body"], separators=(",", ":")).encode()
    return None


def batch_seeds():
    bodies = []
    for sub in ("valid", "invalid"):
        d = os.path.join(ROOT, "tests", "data", "batch", sub)
        for name in sorted(os.listdir(d)):
            with open(os.path.join(d, name)) as f:
                body = case_body(json.load(f))
            if body is not None:
                bodies.append(("%s_%s" % (sub, name[:-5]), body))
    # Hostile cases small enough to be useful seeds (the generated giants are not).
    import test_hostile as hostile  # the corpus reader of the integration runner
    for case in hostile.load_cases():
        if case.get("raw") or case.get("gzip") or case.get("headers", {}).get("Content-Encoding"):
            continue
        body = hostile.build_body(case)
        if len(body) <= 8192:
            bodies.append(("hostile_%s" % case["name"], body))
    for name, body in bodies:
        put("batch", name, body)
    return bodies


def gzip_seeds(bodies):
    sample = dict(bodies)
    b = sample.get("valid_all_types") or bodies[0][1]
    put("gzip", "gzip_batch", gzip.compress(b, 6))
    put("gzip", "gzip_empty", gzip.compress(b"", 6))
    put("gzip", "zlib_batch", zlib.compress(b, 6))
    put("gzip", "gzip_two_members", gzip.compress(b[:40]) + gzip.compress(b[40:]))
    put("gzip", "gzip_bomb_zeros", gzip.compress(b"\0" * (600 * 1024), 9))
    g = gzip.compress(b, 9)
    put("gzip", "gzip_truncated", g[: len(g) // 2])
    put("gzip", "gzip_bad_crc", g[:-8] + bytes([g[-8] ^ 1]) + g[-7:])
    put("gzip", "gzip_trailing_garbage", g + b"garbage")
    put("gzip", "raw_deflate", zlib.compress(b)[2:-4])


def seg_input(seg, idx=None, flags=0):
    """The fuzz_log input for a segment (and index): flags byte, [u16 len + idx], segment."""
    if idx is not None:
        return bytes([flags | 1]) + struct.pack("<H", len(idx)) + idx + seg
    return bytes([flags]) + seg


def log_seeds():
    import harness
    data = harness.tempfile.mkdtemp(prefix="ingestd-seeds-")
    try:
        srv = harness.Server(data_dir=data)
        srv.start()
        try:
            for i in range(5):
                r = srv.batch([harness.track(mid="seed-%d" % i, props={"i": i})])
                assert r.status == 200, r
            # Past LOG_INDEX_INTERVAL (64 KB), so the segment gets an index entry.
            for i in range(0, 120, 20):
                evs = [harness.track(mid="big-%d" % j, pad="x" * 600) for j in range(i, i + 20)]
                assert srv.batch(evs).status == 200
        finally:
            srv.stop()
        logdir = os.path.join(data, "log")
        segs = sorted(n for n in os.listdir(logdir) if n.endswith(".seg"))
        with open(os.path.join(logdir, segs[0]), "rb") as f:
            seg = f.read()
        with open(os.path.join(logdir, segs[0][:-4] + ".idx"), "rb") as f:
            idx = f.read()
    finally:
        shutil.rmtree(data, ignore_errors=True)

    # The first 5 records alone (a small segment), and the whole one with its index.
    pos, recs = 16, []
    while pos + 40 <= len(seg):
        n = struct.unpack_from("<I", seg, pos)[0]
        recs.append((pos, 40 + n))
        pos += 40 + n
    small = seg[: recs[4][0] + recs[4][1]]
    put("log", "server_segment_5", seg_input(small))
    put("log", "server_segment_index", seg_input(seg, idx))
    put("log", "server_segment_5_torn", seg_input(small[:-7]))
    put("log", "server_segment_5_durable3_discard", seg_input(small, flags=2 | (3 << 2)))
    bad = bytearray(small)
    bad[recs[2][0] + 45] ^= 0x20  # a payload byte of record 2: its CRC fails
    put("log", "server_segment_5_bad_crc", seg_input(bytes(bad)))
    put("log", "header_only", seg_input(small[:16]))
    put("log", "torn_header", seg_input(small[:9]))
    # Two segments: records 0..2 in the first, 3..4 in the second (base 3).
    first, second = small[: recs[3][0]], small[:16] + small[recs[3][0]:]
    put("log", "two_segments",
        bytes([32]) + bytes([3]) + struct.pack("<H", len(first)) + first + second)


def main():
    bodies = batch_seeds()
    gzip_seeds(bodies)
    log_seeds()
    for kind in ("batch", "gzip", "log"):
        d = os.path.join(HERE, "corpus", kind)
        print("%s: %d seeds" % (kind, len(os.listdir(d))))


if __name__ == "__main__":
    main()
