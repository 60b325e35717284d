"""`ingestd rebuild` and `ingestd check` over sealed generations, retention and per-source budgets.

The issue (#25, items 5 and 6): rebuild moved the generations aside with the store and replayed
only the retained log, so after retention the window silently lost every key whose record was
deleted, and acknowledged ids were accepted again; it used its own default --max-keys, not the
server's; and check failed a healthy data dir once per-source budgets carried a key. Each case
runs the real binary on a temporary data dir and judges by re-sending ids after a restart.
"""

import glob
import os
import re
import shutil
import tempfile
import unittest

from harness import Server, deadline_wait, gen_files, new_id, run_cli, send_ids
from test_powerloss import faultfs_lib, shim_env

TOOL_TIMEOUT = 120
KEY = "k1"


def cli(*args):
    return run_cli(list(args), timeout=TOOL_TIMEOUT)


def show(p):
    return "exit %s\nstdout:\n%s\nstderr:\n%s" % (p.returncode, p.stdout, p.stderr)


def problems(p):
    return [l for l in p.stdout.splitlines() if l.startswith("PROBLEM: ")]


def send(srv, ids, key=KEY, batch=100):
    """Sends ids in batches; returns (accepted, duplicates)."""
    return send_ids(srv, ids, key, batch)


def seals(srv):
    return srv.stats()["dedupe"]["generations"]["seals"]


def siblings(data_dir):
    """What a rebuild puts beside DIR/store (store.rebuild-*, and store.old-* of old releases)."""
    return sorted(n for n in os.listdir(data_dir) if n.startswith("store."))


def store_files(store):
    """path -> content of every file of a store but LMDB's lock file (its readers' table)."""
    out = {}
    for f in glob.glob(store + "/**", recursive=True):
        if os.path.isfile(f) and os.path.basename(f) != "lock.mdb":
            with open(f, "rb") as fh:
                out[f] = fh.read()
    return out


class Case(unittest.TestCase):

    def server(self, args, keys=(KEY,), data_dir=None):
        srv = Server(keys=keys, args=args, data_dir=data_dir)
        self.addCleanup(srv.cleanup)
        return srv

    def sealed_rounds(self, srv, prefix, rounds, n=200):
        """`rounds` rounds of n new ids, each sealed into its own generation; returns the ids."""
        ids = []
        for k in range(rounds):
            batch = ["%s-%d-%d" % (prefix, k, i) for i in range(n)]
            before = seals(srv)
            self.assertEqual(send(srv, batch), (n, 0))
            deadline_wait(lambda: seals(srv) > before, 30, "seal %d" % (k + 1))
            ids += batch
        return ids

    def assertCheckOk(self, data_dir):
        p = cli("check", "--data", data_dir)
        self.assertEqual((p.returncode, problems(p)), (0, []), show(p))
        return p


class RebuildKeepsTheWindow(Case):

    def test_generations_survive_a_rebuild_after_retention(self):
        # 1,000 keys sealed into five generations; retention keeps only the newest segment.
        srv = self.server(["--young-keys", "100", "--max-keys", "0", "--segment-bytes", "4KiB",
                           "--log-max-bytes", "32KiB"])
        srv.start()
        ids = self.sealed_rounds(srv, "r", 5)
        st = srv.stats()
        self.assertGreater(st["log"]["first_offset"], 0, "retention deleted old segments")
        self.assertEqual(st["dedupe"]["keys"], 1000)
        srv.stop()
        self.assertCheckOk(srv.data_dir)
        files = gen_files(srv.data_dir)
        p = cli("rebuild", "--data", srv.data_dir)
        self.assertEqual(p.returncode, 0, show(p))
        self.assertIn("generations: %d files kept" % len(files), p.stdout, show(p))
        self.assertEqual(gen_files(srv.data_dir), files)
        self.assertCheckOk(srv.data_dir)
        srv.start()
        self.assertEqual(srv.stats()["dedupe"]["keys"], 1000)
        self.assertEqual(send(srv, ids), (0, 1000), "every acknowledged id is still a duplicate")
        srv.stop()

    def young_store_past_retention(self):
        """A stopped data dir whose young store holds 400 keys, 300 of them naming records
        retention deleted; returns (srv, ids)."""
        srv = self.server(["--max-keys", "0", "--segment-bytes", "4KiB", "--log-max-bytes",
                           "32KiB"])
        srv.start()
        ids = ["y-%d" % i for i in range(400)]
        self.assertEqual(send(srv, ids), (400, 0))
        deadline_wait(lambda: srv.stats()["log"]["first_offset"] > 0, 30, "retention")
        srv.stop()
        return srv, ids

    def test_refuses_to_shrink_the_window(self):
        srv, ids = self.young_store_past_retention()
        store = os.path.join(srv.data_dir, "store", "data.mdb")
        with open(store, "rb") as f:
            old = f.read()
        p = cli("rebuild", "--data", srv.data_dir)
        self.assertEqual(p.returncode, 1, show(p))
        self.assertIn("--allow-shrink", p.stdout, show(p))
        self.assertRegex(p.stdout, r"PROBLEM: \d+ keys of the window name records log "
                                   r"retention deleted", show(p))
        self.assertEqual(siblings(srv.data_dir), [], "nothing built beside the store")
        with open(store, "rb") as f:
            self.assertEqual(f.read(), old, "nothing changed")
        srv.start()
        self.assertEqual(send(srv, ids), (0, 400))
        srv.stop()

    def test_allow_shrink_rebuilds_and_says_what_the_window_loses(self):
        srv, ids = self.young_store_past_retention()
        p = cli("rebuild", "--data", srv.data_dir, "--allow-shrink")
        self.assertEqual(p.returncode, 0, show(p))
        before = int(re.search(r"window before: (\d+) keys", p.stdout).group(1))
        lost = int(re.search(r"the window loses (\d+) keys", p.stdout).group(1))
        after = int(re.search(r"window after: (\d+) keys", p.stdout).group(1))
        self.assertEqual(before, 400, show(p))
        self.assertGreater(lost, 0, show(p))
        self.assertEqual(after, before - lost, show(p))
        self.assertCheckOk(srv.data_dir)
        srv.start()
        self.assertEqual(srv.stats()["dedupe"]["keys"], after)
        self.assertEqual(send(srv, ids[-after:]), (0, after))
        srv.stop()


class RebuildUsesTheServersSettings(Case):

    def test_rebuild_without_flags_uses_the_servers_max_keys(self):
        srv = self.server(["--max-keys", "1000"])
        srv.start()
        ids = ["m-%d" % i for i in range(50)]
        self.assertEqual(send(srv, ids), (50, 0))
        srv.stop()
        # The server restarted with a smaller bound keeps 30; so must a rebuild without flags.
        srv.args = ["--max-keys", "30"]
        srv.start()
        srv.stop()
        p = cli("rebuild", "--data", srv.data_dir)
        self.assertEqual(p.returncode, 0, show(p))
        self.assertIn("max keys 30 (server's)", p.stdout, show(p))
        out = cli("lookup", "--data", srv.data_dir, ids[0], ids[-1])
        self.assertEqual([l.count('"unseen"') for l in out.stdout.splitlines()], [1, 0],
                         show(out))
        # A flag given still wins.
        p = cli("rebuild", "--data", srv.data_dir, "--max-keys", "40")
        self.assertEqual(p.returncode, 0, show(p))
        self.assertIn("max keys 40 (flag)", p.stdout, show(p))


class CheckGenerations(Case):

    def test_carried_keys_are_healthy(self):
        # One source floods past its budget; the other's keys are carried to the young end.
        srv = self.server(["--max-keys", "100"], keys=("calm-key:calm", "flood-key:flood"))
        srv.start()
        calm = [new_id("calm") for _ in range(5)]
        self.assertEqual(send(srv, calm, key="calm-key"), (5, 0))
        self.assertEqual(send(srv, [new_id("flood") for _ in range(150)], key="flood-key",
                              batch=50), (150, 0))
        self.assertGreater(srv.stats()["dedupe"]["carried"], 0)
        srv.stop()
        p = self.assertCheckOk(srv.data_dir)
        self.assertIn("carried by per-source budgets", p.stdout)
        # What check accepts, recovery and rebuild accept too.
        p = cli("rebuild", "--data", srv.data_dir)
        self.assertEqual(p.returncode, 0, show(p))
        self.assertCheckOk(srv.data_dir)
        srv.start()
        self.assertEqual(send(srv, calm, key="calm-key"), (0, 5))
        srv.stop()

    def test_damaged_generations_are_flagged(self):
        args = ["--young-keys", "100", "--max-keys", "0"]
        a = self.server(args)
        a.start()
        self.sealed_rounds(a, "a", 2)
        a.stop()
        self.assertCheckOk(a.data_dir)
        # Another data dir sealed the same sequence ranges, and one more, from other keys.
        b = self.server(args)
        b.start()
        self.sealed_rounds(b, "b", 3)
        b.stop()
        ga, gb = gen_files(a.data_dir), gen_files(b.data_dir)
        self.assertEqual(ga, gb[:2])
        gens_a = os.path.join(a.data_dir, "store", "gens")
        gens_b = os.path.join(b.data_dir, "store", "gens")
        # Whole files (their checksums hold) whose keys are not the log's.
        shutil.copy(os.path.join(gens_a, ga[1]), os.path.join(a.data_dir, "saved.gen"))
        shutil.copy(os.path.join(gens_b, gb[1]), os.path.join(gens_a, ga[1]))
        p = cli("check", "--data", a.data_dir)
        self.assertEqual(p.returncode, 1, show(p))
        self.assertTrue([l for l in problems(p) if ga[1] in l and "disagrees with log" in l],
                        show(p))
        # A range past the store's numbering is what a power loss after a seal leaves, which
        # recovery finishes (seal_recover): check says so, and still checks its keys against
        # the log, so another data dir's generation is flagged.
        shutil.move(os.path.join(a.data_dir, "saved.gen"), os.path.join(gens_a, ga[1]))
        self.assertCheckOk(a.data_dir)
        shutil.copy(os.path.join(gens_b, gb[2]), os.path.join(gens_a, gb[2]))
        p = cli("check", "--data", a.data_dir)
        self.assertEqual(p.returncode, 1, show(p))
        self.assertIn("next sequence", p.stdout + p.stderr, show(p))
        self.assertTrue([l for l in problems(p) if gb[2] in l], show(p))


class RebuildSwapsAtomically(Case):
    """The new store is built beside DIR/store (DIR/store.rebuild-*) and swapped in with one
    renameat2(RENAME_EXCHANGE): DIR/store is never a partial store, and what a crash leaves
    under the sibling's name is never the store."""

    def sealed_dir(self):
        srv = self.server(["--young-keys", "100", "--max-keys", "0"])
        srv.start()
        ids = self.sealed_rounds(srv, "s", 2)
        srv.stop()
        return srv, ids

    def plant_leftover(self, data_dir, name):
        """What a rebuild cut short leaves: a copy of the store, its LMDB file torn."""
        left = os.path.join(data_dir, name)
        shutil.copytree(os.path.join(data_dir, "store"), left)
        with open(os.path.join(left, "data.mdb"), "r+b") as f:
            f.truncate(4096)
        return left

    def test_leftover_is_reported_by_check_removed_by_start_and_by_rebuild(self):
        srv, ids = self.sealed_dir()
        left = self.plant_leftover(srv.data_dir, "store.rebuild-1700000000-42")
        p = self.assertCheckOk(srv.data_dir)  # information, not a problem
        self.assertRegex(p.stdout, r"1 leftover .*store\.rebuild-\* of a rebuild cut short",
                         show(p))
        srv.start()
        srv.wait_for_log(r"removed 1 leftover .*store\.rebuild-")
        self.assertFalse(os.path.exists(left), "start removes the leftover")
        self.assertEqual(send(srv, ids), (0, len(ids)), "the window is DIR/store's, whole")
        srv.stop()
        left = self.plant_leftover(srv.data_dir, "store.rebuild-1700000001-43")
        p = cli("rebuild", "--data", srv.data_dir)
        self.assertEqual(p.returncode, 0, show(p))
        self.assertIn("removed 1 leftover", p.stdout, show(p))
        self.assertEqual(siblings(srv.data_dir), [], "no leftover, no old store: " + show(p))
        self.assertCheckOk(srv.data_dir)
        srv.start()
        self.assertEqual(send(srv, ids), (0, len(ids)))
        srv.stop()

    def test_a_file_system_that_cannot_exchange_changes_nothing(self):
        lib = faultfs_lib()
        if not lib:
            self.skipTest("libfaultfs.so not built (set FAULTFS_LIB)")
        srv, ids = self.sealed_dir()
        store = os.path.join(srv.data_dir, "store")
        before = store_files(store)
        tmp = tempfile.mkdtemp(prefix="ingestd-rebuild-")
        self.addCleanup(shutil.rmtree, tmp, True)
        ctl = os.path.join(tmp, "ctl")
        with open(ctl, "w") as f:
            f.write("fail renameat2 EINVAL store 1\n")
        p = run_cli(["rebuild", "--data", srv.data_dir], timeout=TOOL_TIMEOUT,
                    env=shim_env(lib, srv.data_dir, ctl=ctl))
        self.assertEqual(p.returncode, 1, show(p))
        self.assertIn("RENAME_EXCHANGE", p.stdout, show(p))
        self.assertIn("nothing was changed", p.stdout, show(p))
        with open(ctl + ".hits") as f:
            self.assertIn("renameat2", f.read(), "the exchange was tried, and refused")
        self.assertEqual(siblings(srv.data_dir), [], "the new store is removed: " + show(p))
        after = store_files(store)
        self.assertEqual(sorted(after), sorted(before))
        self.assertEqual([f for f in before if after[f] != before[f]], [],
                         "DIR/store is the old store, byte for byte")
        self.assertCheckOk(srv.data_dir)
        srv.start()
        self.assertEqual(send(srv, ids), (0, len(ids)))
        srv.stop()


if __name__ == "__main__":
    unittest.main()
