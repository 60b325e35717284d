"""Power loss: kill -9 under load with the faultfs model, rebuild what reached the disk, recover.

Each round runs the real server under tests/faultfs (LD_PRELOAD, FAULTFS_LIB) on the data dir the
previous round left, so recoveries stack up: it checks the invariants (docs/design.md) on the
recovered state, loads it from several client threads (new ids, re-sends of acknowledged ones,
retries of 503s, two sources sharing messageIds), kills it with SIGKILL at a random instant, and
builds the next data dir with tests/faultfs/powerloss.py from only what had been made durable
(seed, mode drop|tear|random, dirsync strict|ext4 vary per round). A failing round prints its seed,
mode and the exact powerloss.py command, and keeps its image and data dirs for reproduction.

INGESTD_POWERLOSS_SEED fixes the base seed; INGESTD_POWERLOSS_ROUNDS the number of rounds.
"""

import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from harness import BIN, Server, basic, http_request, log_cat, new_id, track

HERE = os.path.dirname(os.path.abspath(__file__))
POWERLOSS = os.path.join(HERE, "..", "faultfs", "powerloss.py")
KEYS = {"k1": "default", "k2": "mobile"}  # write key -> source
MODES = ("drop", "tear", "random")


def faultfs_lib():
    lib = os.environ.get("FAULTFS_LIB") or os.path.join(os.path.dirname(BIN), "tests",
                                                        "libfaultfs.so")
    return lib if os.path.exists(lib) else None


def preload(lib):
    """LD_PRELOAD for the shim. An ASan binary needs its runtime first in the list, so it is
    put there: the shim's wrappers then sit between ASan's interceptors and libc."""
    out = subprocess.run(["ldd", BIN], capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0].startswith("libasan.so") and len(parts) >= 3:
            return parts[2] + ":" + lib
    return lib


def shim_env(lib, data_dir, image=None, ctl=None, sync_delay_us=0):
    env = {"LD_PRELOAD": preload(lib), "FAULTFS_ROOT": data_dir}
    if sync_delay_us:
        env["FAULTFS_SYNC_DELAY_US"] = str(sync_delay_us)
    if image:
        env["FAULTFS_IMAGE"] = image
    if ctl:
        env["FAULTFS_CTL"] = ctl
    return env


def check_log(testcase, data_dir, acked, sent, why):
    """The invariants, from `ingestd log cat`; returns {(source, id)} logged."""
    counts = collections.Counter((e["source"], e["messageId"]) for e in log_cat(data_dir))
    twice = sorted(k for k, c in counts.items() if c > 1)
    testcase.assertEqual(twice[:10], [], "%s: (source, messageId) logged twice" % why)
    lost = sorted(acked - set(counts))
    testcase.assertEqual(lost[:10], [], "%s: %d acknowledged events lost" % (why, len(lost)))
    phantom = sorted(set(counts) - sent)
    testcase.assertEqual(phantom[:10], [], "%s: logged events nobody sent" % why)
    return set(counts)


def post(srv, key, events, timeout=20):
    return http_request(srv.host, srv.port, "POST", "/v1/batch", {"batch": events},
                        {"Authorization": basic(key)}, timeout=timeout)


class PowerLoss(unittest.TestCase):

    def setUp(self):
        self.lib = faultfs_lib()
        if not self.lib:
            self.skipTest("libfaultfs.so not built (set FAULTFS_LIB)")
        self.base_seed = int(os.environ.get("INGESTD_POWERLOSS_SEED") or random.randrange(1 << 30))
        self.rounds = int(os.environ.get("INGESTD_POWERLOSS_ROUNDS") or "12")
        self.tmp = tempfile.mkdtemp(prefix="ingestd-powerloss-")
        self.failed_round = None
        self.passed = False

    def tearDown(self):
        if self.passed:  # a failure keeps the images and data dirs for reproduction
            shutil.rmtree(self.tmp, ignore_errors=True)

    # ---- the checks on a recovered server --------------------------------------------

    def verify(self, srv, acked, sent, why):
        logged = check_log(self, srv.data_dir, acked, sent, why)
        # Everything acknowledged is inside the window: every re-send is a duplicate.
        for key, source in KEYS.items():
            ids = sorted(m for s, m in acked if s == source)
            for i in range(0, len(ids), 2000):
                chunk = ids[i:i + 2000]
                r = post(srv, key, [track(mid=m) for m in chunk])
                self.assertEqual(r.status, 200, "%s: re-send: %r" % (why, r))
                self.assertEqual((r.json["accepted"], r.json["duplicates"]), (0, len(chunk)),
                                 "%s: re-send of acknowledged events: %r" % (why, r))
        # The store agrees with the log, and new events are accepted.
        st = srv.stats()
        self.assertEqual(st["dedupe"]["keys"], len(logged), "%s: %r" % (why, st))
        for key, source in KEYS.items():
            fresh = [new_id("pl-new") for _ in range(10)]
            sent.update((source, m) for m in fresh)
            r = post(srv, key, [track(mid=m) for m in fresh])
            self.assertEqual((r.status, r.json and r.json["accepted"]), (200, 10),
                             "%s: new events after recovery: %r" % (why, r))
            acked.update((source, m) for m in fresh)

    # ---- load and kill -------------------------------------------------------------------

    def load_and_kill(self, srv, rng, acked, sent, threads=4):
        lock = threading.Lock()
        stop = threading.Event()
        host, port = srv.host, srv.port
        shared_ids = []  # the same messageId sent under both sources: different events
        acked_ids = {source: [m for s, m in acked if s == source] for source in KEYS.values()}

        def client(n):
            crng = random.Random(rng.random())
            while not stop.is_set():
                key = crng.choice(sorted(KEYS))
                source = KEYS[key]
                batch = []
                with lock:
                    for _ in range(crng.randint(5, 30)):
                        m = shared_ids.pop() if shared_ids and crng.random() < 0.3 else \
                            new_id("pl%d" % n)
                        if crng.random() < 0.2:
                            shared_ids.append(m)
                        batch.append(m)
                    mine = acked_ids[source]
                    batch += crng.sample(mine, min(len(mine), crng.randint(0, 5)))
                    sent.update((source, m) for m in batch)
                events = [track(mid=m) for m in batch]
                while not stop.is_set():  # retry an unacknowledged batch, as SDKs do
                    try:
                        r = http_request(host, port, "POST", "/v1/batch", {"batch": events},
                                         {"Authorization": basic(key)}, timeout=10)
                    except Exception:  # refused, reset: the server is gone
                        return
                    if r.status == 200:
                        with lock:
                            acked.update((source, m) for m in batch)
                            acked_ids[source].extend(batch)
                        break
                    if r.status != 503:
                        raise AssertionError("unexpected answer under load: %r" % r)

        errors = []

        def run(n):
            try:
                client(n)
            except BaseException as e:  # reported by the main thread
                errors.append(e)

        ts = [threading.Thread(target=run, args=(n,), daemon=True) for n in range(threads)]
        for t in ts:
            t.start()
        time.sleep(rng.uniform(0.15, 1.2))  # the crash instant itself is what is random
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait(timeout=10)
        srv.proc = None
        srv.check_sanitizers()
        stop.set()
        for t in ts:
            t.join(timeout=30)
        if errors:
            raise errors[0]

    # ---- the rounds ----------------------------------------------------------------------

    def test_power_loss_rounds(self):
        self.rounds_of_power_loss(self.rounds, lazy=False)

    def test_power_loss_rounds_lazy_store_sync(self):
        """--store-sync lazy: LMDB is never synced while serving, so after each power loss
        (a new boot id, as after a real restart) the server must rebuild the store from the
        log; the invariants must hold all the same."""
        self.rounds_of_power_loss(max(4, self.rounds // 2), lazy=True)

    def rounds_of_power_loss(self, rounds, lazy):
        acked, sent = set(), set()
        data = os.path.join(self.tmp, "data-0" + ("-lazy" if lazy else ""))
        os.mkdir(data)
        started = time.monotonic()
        history = []
        built_by = "an empty directory"
        boot_file = os.path.join(self.tmp, "boot_id" + ("-lazy" if lazy else ""))
        extra = ["--store-sync", "lazy"] if lazy else []

        def reboot(n):
            # Each power loss is followed by a restart of the machine: a new boot id.
            with open(boot_file, "w") as f:
                f.write("boot-%d-%d\n" % (self.base_seed, n))

        for rnd in range(rounds):
            seed = self.base_seed + rnd
            mode = MODES[rnd % len(MODES)]
            dirsync = "strict" if (rnd // len(MODES)) % 2 == 0 else "ext4"
            image = os.path.join(self.tmp, "image-%d" % rnd)
            nxt = os.path.join(self.tmp, "data-%d" % (rnd + 1))
            cmd = [sys.executable, POWERLOSS, "--image", image, "--out", nxt, "--seed",
                   str(seed), "--mode", mode, "--dirsync", dirsync]
            why = ("power-loss round %d (base seed %d): recovering %s, built by the previous "
                   "round; this round: seed=%d mode=%s dirsync=%s; history: %s"
                   % (rnd, self.base_seed, data, seed, mode, dirsync, history))
            reboot(rnd)
            env = shim_env(self.lib, data, image=image,
                           sync_delay_us=random.Random(seed).choice((0, 2000, 10000)))
            env["INGESTD_BOOT_ID_FILE"] = boot_file
            srv = Server(keys=["%s:%s" % kv for kv in KEYS.items()],
                         args=["--segment-bytes", "8KiB"] + extra, data_dir=data, env=env)
            try:
                srv.start()
                self.verify(srv, acked, sent, why)
                self.load_and_kill(srv, random.Random(seed), acked, sent)
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
                self.assertEqual(p.returncode, 0, "%s\npowerloss.py: %s" % (why, p.stderr))
                summary = json.loads(p.stdout)
                torn = sum(1 for f in summary["files"].values() if "torn_at" in f)
                pending = sum(f["pending"] for f in summary["files"].values())
                history.append("%d:%s/%s/%s files=%d ops=%d torn=%d" % (
                    rnd, seed, mode, dirsync, len(summary["files"]), pending, torn))
            except BaseException as e:
                self.failed_round = rnd
                print("\nPOWER-LOSS FAILURE in round %d (base seed %d)\n"
                      "  the data dir recovered here, %s, was built by:\n    %s\n"
                      "  this round's own power loss: seed=%d mode=%s dirsync=%s:\n    %s\n"
                      "  images and data dirs kept in %s\n  server stderr:\n%s"
                      % (rnd, self.base_seed, data, built_by, seed, mode, dirsync,
                         " ".join(cmd), self.tmp, srv.log(40)), file=sys.stderr)
                raise AssertionError("%s: %s" % (why, e)) from e
            finally:
                srv.kill()
            data = nxt
            built_by = " ".join(cmd)
        # The last state, recovered by a server without the shim, stopped cleanly.
        why = "final recovery of %s (base seed %d; history %s)" % (data, self.base_seed, history)
        reboot(rounds)
        srv = Server(keys=["%s:%s" % kv for kv in KEYS.items()], data_dir=data, args=extra,
                     env={"INGESTD_BOOT_ID_FILE": boot_file})
        try:
            srv.start()
            self.verify(srv, acked, sent, why)
            srv.stop()
        except BaseException:
            self.failed_round = rounds
            print("\nPOWER-LOSS FAILURE at the final recovery; kept in %s" % self.tmp,
                  file=sys.stderr)
            raise
        finally:
            srv.kill()
        print("\npower loss%s: %d rounds in %.1fs, base seed %d, %d acknowledged events; %s"
              % (" (lazy store sync)" if lazy else "", rounds, time.monotonic() - started, self.base_seed, len(acked), history),
              file=sys.stderr)
        self.passed = True


if __name__ == "__main__":
    unittest.main(verbosity=2)
