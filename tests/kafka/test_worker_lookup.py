"""GET /v1/events/{messageId} on the Kafka worker's --listen port (docs/scale-out.md).

Real processes on librdkafka's mock cluster (tests/kafka/test_worker.py has the harness): a
seen id names its raw partition and the input offset that owns the key (the output record's
`ingestd-input` header), with "event": null and the output topic in the reason; a new id on a
partition owned here is unseen with the window's start; one on a partition another worker
owns is not_owned, naming it; the admin token is required; without it the route is off.
"""

import json
import os
import shutil
import tempfile
import unittest
import urllib.error
import urllib.parse
import urllib.request

from test_worker import Mock, Worker, WAIT, batch, consume, produce  # noqa: E402
from test_edge import partition_of  # noqa: E402
from harness import deadline_wait  # noqa: E402

TOKEN = "worker-admin"


def get(w, mid, source=None, token=TOKEN):
    path = "/v1/events/" + urllib.parse.quote(mid, safe="")
    if source is not None:
        path += "?source=" + urllib.parse.quote(source, safe="")
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (w.port, path))
    if token is not None:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=15) as r:
            return r.status, json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())


class WorkerLookupTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ingestd-kafka-lookup-")
        self.mock = Mock(["raw:4", "out:4"])
        self.workers = []

    def tearDown(self):
        for w in self.workers:
            w.cleanup()
        self.mock.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def worker(self, name, *args):
        w = Worker(self.mock, os.path.join(self.tmp, name),
                   args=["--dynamic-membership"] + list(args))
        self.workers.append(w)
        return w.start()

    def test_lookup_on_the_worker(self):
        # A tiny young store: most keys are looked up in sealed generations.
        w1 = self.worker("w1", "--admin-token", TOKEN, "--young-keys", "4", "--max-batch", "5")
        w1.wait_ready()
        events = batch("lk", 40)
        produce(self.mock, events)
        want = {(s, m) for s, m, _ in events}

        def outputs():
            recs = consume(self.mock)
            return recs if want <= {(r["source"], r["messageId"]) for r in recs} else None
        recs = deadline_wait(outputs, WAIT, "the events in the output topic", interval=0.3)
        inputs = {(r["source"], r["messageId"]): r["input"] for r in recs}
        deadline_wait(lambda: sum(p["generation_keys"] for p in w1.stats()["partitions"]) >= 16,
                      WAIT, "keys sealed into generations")
        for s, m, _ in events:
            status, j = get(w1, m, source=s)
            self.assertEqual(status, 200, j)
            self.assertEqual((j["status"], j["messageId"], j["source"]), ("seen", m, s), j)
            self.assertEqual("%d:%d" % (j["partition"], j["offset"]), inputs[(s, m)], j)
            self.assertEqual(j["partition"], partition_of(s, m, 4))
            self.assertIsNone(j["event"])
            self.assertIn("out", j["reason"])
            self.assertRegex(j["receivedAt"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        # Never sent: unseen on the partition it would go to (all four are owned here).
        status, j = get(w1, "never-sent", source="web")
        self.assertEqual((status, j["status"]), (404, "unseen"), j)
        self.assertEqual(j["partition"], partition_of("web", "never-sent", 4))
        self.assertIn("window_start", j)
        # The same id in another source is another key.
        s, m, _ = events[0]
        status, j = get(w1, m, source="elsewhere")
        self.assertEqual((status, j["status"]), (404, "unseen"), j)
        # Auth and bad ids.
        self.assertEqual(get(w1, m, source=s, token=None)[0], 401)
        self.assertEqual(get(w1, m, source=s, token="wrong")[0], 401)
        self.assertEqual(get(w1, "x" * 257, source=s)[0], 400)

        # A second worker takes half the partitions: w1 names the owner of the others.
        w2 = self.worker("w2", "--admin-token", TOKEN)
        deadline_wait(lambda: len(w1.stats()["partitions"]) == 2 and
                      len(w2.stats()["partitions"]) == 2, WAIT, "two partitions each")
        mine = {p["partition"] for p in w1.stats()["partitions"]}
        for s, m, _ in events:
            p = partition_of(s, m, 4)
            status, j = get(w1, m, source=s)
            if p in mine:
                self.assertEqual((status, j["status"], j["partition"]), (200, "seen", p), j)
            else:
                self.assertEqual((status, j["status"], j["partition"]), (404, "not_owned", p), j)
                self.assertIn("partition %d" % p, j["reason"])
                status, j = get(w2, m, source=s)
                self.assertEqual((status, j["status"], j["partition"]), (200, "seen", p), j)

    def test_route_off_without_token(self):
        w = self.worker("w1")
        w.wait_ready()
        self.assertEqual(get(w, "m-1")[0], 404)


if __name__ == "__main__":
    unittest.main()
