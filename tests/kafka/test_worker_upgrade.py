"""The Kafka worker opens a partition store of store format 3 (keys without source tags).

Its keys cannot be tagged in place (a partition store keeps no payloads), so the worker starts it
afresh with its secret and repairs its keys from the raw topic. The format 3 store is a real one:
the LMDB file and generations of tests/fixtures/datadir-format3.tar.gz (written by commit 66580bd)
put in place of one partition's store.
"""

import os
import shutil
import tarfile
import unittest

import test_worker as tw  # not its names: unittest would run its WorkerTest here too
from test_worker import WAIT, batch, consume, deadline_wait, produce

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures",
                       "datadir-format3.tar.gz")


class WorkerUpgrade(unittest.TestCase):
    # test_worker's fixture and helpers, not its tests.
    setUp, tearDown, worker = tw.WorkerTest.setUp, tw.WorkerTest.tearDown, tw.WorkerTest.worker
    wait_output, check_once = tw.WorkerTest.wait_output, tw.WorkerTest.check_once

    def test_format_3_partition_store_is_repaired_from_the_raw_topic(self):
        args = ["--young-keys", "20", "--max-batch", "25"]
        w = self.worker(args=args)
        w.wait_ready()
        evs = batch("u", 200)
        produce(self.mock, evs)
        expected = {(s, m) for s, m, _ in evs}
        self.wait_output(expected)
        deadline_wait(lambda: w.stats()["events"]["consumed"] == 200, WAIT, "200 consumed")
        w.stop()
        # Partition 0's store becomes a format 3 one: another data dir's, with its own keys.
        part = os.path.join(w.data_dir, "partitions", "raw-0")
        shutil.rmtree(part)
        with tarfile.open(FIXTURE) as tar:
            tar.extractall(self.tmp, members=[m for m in tar.getmembers()
                                              if m.name.startswith("clean/store")])
        shutil.copytree(os.path.join(self.tmp, "clean", "store"), part)

        w2 = self.worker(args=args)
        w2.wait_ready()
        deadline_wait(lambda: "older format" in w2.tail(), WAIT, "the migration's log line")
        produce(self.mock, evs)  # every one a retry
        deadline_wait(lambda: w2.stats()["events"]["consumed"] >= 200, WAIT, "200 consumed")
        deadline_wait(lambda: all(p["lag"] == 0 for p in w2.stats()["partitions"]), WAIT,
                      "no lag")
        st = w2.stats()
        self.assertGreater(st["events"]["repaired"], 0, "partition 0 was rebuilt from raw")
        self.assertEqual(st["events"]["produced"], 0, st["events"])
        self.assertEqual(st["events"]["duplicates"], 200, st["events"])
        self.check_once(consume(self.mock), expected)
        w2.stop()


if __name__ == "__main__":
    unittest.main()
