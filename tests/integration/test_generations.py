"""The window's sealed generations (docs/window.md) through the real server.

With a small --young-keys the young LMDB store is sealed into generation files after a few
thousand events, so these tests see what a 100M-key window does at a 1M-key scale: every key
of a generation stays a duplicate (across restarts, kill -9 and a backup), --max-keys drops
whole generations while keeping at least N keys, an aged-out generation goes even on an idle
server, and kill -9 at any moment of seals and merges never logs a messageId twice.
"""

import os
import random
import shutil
import tempfile
import threading
import time
import unittest

from harness import Server, deadline_wait, gen_files, log_cat, run_cli, send_ids, track

KEY = "k1"


def send(srv, ids, batch=500):
    """Sends ids in batches with KEY; returns (accepted, duplicates)."""
    return send_ids(srv, ids, KEY, batch)


def gens(srv):
    return srv.stats()["dedupe"]["generations"]


class Generations(unittest.TestCase):

    def test_sealed_keys_stay_duplicates(self):
        ids = ["g-%d" % i for i in range(5000)]
        with Server(keys=(KEY,), args=["--young-keys", "1000", "--max-keys", "0"]) as srv:
            # Two rounds, each sealed before the next: two generations.
            self.assertEqual(send(srv, ids[:2500]), (2500, 0))
            deadline_wait(lambda: gens(srv)["seals"] >= 1, 30, "the first seal")
            self.assertEqual(send(srv, ids[2500:]), (2500, 0))
            deadline_wait(lambda: gens(srv)["seals"] >= 2, 30, "the second seal")
            self.assertEqual(gens(srv)["count"], 2)
            st = srv.stats()["dedupe"]
            self.assertEqual(st["keys"], 5000, st)
            self.assertGreaterEqual(st["generations"]["keys"], 2000, st)
            self.assertLess(st["generations"]["memory_bytes"] / st["generations"]["keys"], 4, st)
            self.assertTrue(gen_files(srv.data_dir))
            self.assertEqual(send(srv, ids), (0, 5000))
            srv.restart()
            self.assertEqual(srv.stats()["dedupe"]["keys"], 5000)
            self.assertEqual(send(srv, ids[::7]), (0, len(ids[::7])))
            srv.kill()
            srv.start()
            self.assertEqual(send(srv, ids[1::7] + ["g-new"]), (1, len(ids[1::7])))
            p = run_cli(["check", "--data", srv.data_dir])
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("generations:", p.stdout + p.stderr)
            # A backup taken while serving carries the generations with the store.
            to = os.path.join(tempfile.mkdtemp(prefix="ingestd-gen-backup-"), "b")
            try:
                p = run_cli(["backup", "--data", srv.data_dir, "--to", to], timeout=60)
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                self.assertTrue(gen_files(to))
                with Server(keys=(KEY,), data_dir=to,
                            args=["--young-keys", "1000", "--max-keys", "0"]) as b:
                    self.assertEqual(send(b, ids[2::7]), (0, len(ids[2::7])))
            finally:
                shutil.rmtree(os.path.dirname(to), ignore_errors=True)

    def test_max_keys_drops_whole_generations(self):
        ids = ["s-%d" % i for i in range(6000)]
        with Server(keys=(KEY,), args=["--young-keys", "1000", "--max-keys", "2500"]) as srv:
            self.assertEqual(send(srv, ids), (6000, 0))
            # The oldest generations go; at least 2,500 keys always stay.
            deadline_wait(lambda: srv.stats()["dedupe"]["evicted_size"] >= 2000, 30,
                          "whole generations dropped by size")
            st = srv.stats()["dedupe"]
            self.assertGreaterEqual(st["keys"], 2500, st)
            self.assertLessEqual(st["keys"], 2500 + 2000, st)
            self.assertEqual(send(srv, ids[-2500:]), (0, 2500))
            self.assertEqual(send(srv, ids[:1000]), (1000, 0))  # aged out by size: new again

    def test_generations_go_after_sealing_is_turned_off(self):
        ids = ["o-%d" % i for i in range(3000)]
        srv = Server(keys=(KEY,), args=["--young-keys", "500", "--max-keys", "0"])
        try:
            srv.start()
            self.assertEqual(send(srv, ids), (3000, 0))
            deadline_wait(lambda: gens(srv)["seals"] >= 1, 30, "a seal")
            srv.stop()
            # Restarted with a size bound under the young store's: nothing is sealed any more,
            # but the generations of before still go by the rule, once the young store alone
            # holds the 100 keys the bound keeps.
            srv.args = ["--young-keys", "500", "--max-keys", "100"]
            srv.start()
            self.assertEqual(send(srv, ["o-new-%d" % i for i in range(150)]), (150, 0))
            deadline_wait(lambda: gens(srv)["count"] == 0, 30, "the old generations dropped")
            self.assertEqual(send(srv, ids[:10]), (10, 0))
        finally:
            srv.stop()
            srv.cleanup()

    def test_aged_out_generation_goes_while_idle(self):
        ids = ["a-%d" % i for i in range(2500)]
        with Server(keys=(KEY,), args=["--young-keys", "500", "--window", "2s"]) as srv:
            self.assertEqual(send(srv, ids), (2500, 0))
            deadline_wait(lambda: gens(srv)["seals"] >= 1, 30, "a seal")
            # Nothing more is sent: the idle server's checkpoints still drop what aged out.
            deadline_wait(lambda: srv.stats()["dedupe"]["keys"] == 0, 30, "the window emptied")
            self.assertEqual(gens(srv)["count"], 0)
            self.assertEqual(gen_files(srv.data_dir), [])
            self.assertEqual(send(srv, ids), (2500, 0))


class KillDuringSeals(unittest.TestCase):
    """kill -9 while seals and merges run: no messageId is ever logged twice."""

    ROUNDS = 8

    def test_kill_during_seals(self):
        rnd = random.Random(int(os.environ.get("INGESTD_CRASH_SEED", "17")))
        acked = []
        next_id = [0]
        srv = Server(keys=(KEY,), args=["--young-keys", "200", "--max-keys", "0"])
        try:
            for _ in range(self.ROUNDS):
                srv.start()
                stop = threading.Event()

                def load():
                    while not stop.is_set():
                        new = ["k-%d" % (next_id[0] + i) for i in range(100)]
                        next_id[0] += 100
                        again = rnd.sample(acked, min(20, len(acked)))
                        try:
                            r = srv.batch([track(mid=m) for m in new + again], key=KEY)
                        except OSError:
                            return
                        if r.status == 200:
                            acked.extend(new)
                            assert r.json["duplicates"] == len(again), r

                t = threading.Thread(target=load)
                t.start()
                time.sleep(rnd.uniform(0.5, 4.0))  # a kill at a random moment, not a sync
                srv.kill()
                stop.set()
                t.join()
            srv.start()
            self.assertEqual(send(srv, acked), (0, len(acked)))
            srv.stop()
            seen = [e["messageId"] for e in log_cat(srv.data_dir)]
            self.assertEqual(len(seen), len(set(seen)), "a messageId logged twice")
            self.assertTrue(set(acked) <= set(seen))
            p = run_cli(["check", "--data", srv.data_dir])
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertTrue(gen_files(srv.data_dir), "no seal happened: the test tested nothing")
        finally:
            srv.cleanup()



class RewritesUnderBudgetCuts(unittest.TestCase):
    """Issue #25, item 1, as the reviewer reproduced it: generations mostly cut by a smaller
    per-source budget are rewritten (merges of one) while checkpoints run on a slow disk.
    Before rewrites had one owner, the checkpointer and the merger both rewrote them and the
    loser unlinked the live file: a quiet source's ids were accepted again after a restart.
    The race is timing-bound here (this passes on the old code too, more often than not); the
    deterministic interleaving, which fails on the old code, is test_genset.c's
    test_stale_rewrite_keeps_live_file. This guards the whole path: budget cuts, rewrites,
    restarts, `check`. REWRITE_SYNC_DELAY_US and REWRITE_TRAFFIC_S stretch it by hand."""

    def test_quiet_source_survives_rewrites(self):
        from test_powerloss import faultfs_lib, shim_env
        lib = faultfs_lib()
        if not lib:
            self.skipTest("libfaultfs.so not built")
        quiet = ["q-%d" % i for i in range(600)]
        args = ["--write-key", "kq:quiet", "--write-key", "kf:flood", "--young-keys", "500",
                "--max-keys", "0"]
        srv = Server(keys=(), args=args)
        srv.env.update(shim_env(lib, srv.data_dir, sync_delay_us=int(os.environ.get("REWRITE_SYNC_DELAY_US", "20000"))))
        flood = 0
        with srv:
            # Ten generations, each with 60 quiet keys among 440 of the flood.
            for g in range(10):
                r = srv.batch([track(mid=m) for m in quiet[g * 60:(g + 1) * 60]], key="kq")
                self.assertEqual(r.json["accepted"], 60, r)
                ids = ["f-%d" % i for i in range(flood, flood + 440)]
                flood += 440
                self.assertEqual(srv.batch([track(mid=m) for m in ids], key="kf").json["accepted"],
                                 440)
                deadline_wait(lambda: gens(srv)["seals"] >= g + 1, 60, "seal %d" % (g + 1))
            self.assertGreaterEqual(gens(srv)["count"], 3)
            # A budget of 900 per source cuts the flood's older keys: most generations at least
            # half cut, rewritten by the merger while checkpoints go on under light traffic.
            srv.args = [a for a in args if a != "--max-keys" and a != "0"] + ["--max-keys", "900"]
            srv.restart()
            end = time.monotonic() + float(os.environ.get("REWRITE_TRAFFIC_S", "5"))
            while time.monotonic() < end:
                ids = ["f-%d" % i for i in range(flood, flood + 20)]
                flood += 20
                srv.batch([track(mid=m) for m in ids], key="kf")
                time.sleep(0.05)  # light traffic: a pace, not a synchronisation
            deadline_wait(lambda: gens(srv)["merges"] >= 1, 60, "a rewrite")
            st = srv.stats()
            self.assertEqual(st["commit"]["checkpoint_failures"], 0, st["commit"])
            self.assertEqual(st["storage"]["recoveries"], 0, st["storage"])
            for _ in range(2):
                srv.restart()
                r = srv.batch([track(mid=m) for m in quiet], key="kq")
                self.assertEqual((r.json["accepted"], r.json["duplicates"]), (0, 600), r)
            out = run_cli(["check", "--data", srv.data_dir], timeout=120)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)


if __name__ == "__main__":
    unittest.main()
