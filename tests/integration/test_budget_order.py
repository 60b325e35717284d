"""Per-source budgets forget a source's oldest keys first (found by tests/torture/torture.py).

--max-keys N keeps at least N keys of each source; a client retrying one of its source's newest
N messages must get a duplicate. When one source is over its budget while another is within
it, the eviction pass carries the other source's keys to the young end of the sequence
(docs/window.md, "Per-source budgets"). Once that source goes over its own budget, eviction walks
the sequence from its oldest end and meets its never-carried keys before its carried, older
ones: it forgets keys of its newest N and keeps older ones.

Known bug, not fixed yet: the test is an expected failure, so it turns into an "unexpected
success" (a failed run) once the eviction forgets a source's keys oldest first.
"""

import unittest

from harness import Server, track

BUDGET = 1000


class BudgetOrder(unittest.TestCase):

    @unittest.expectedFailure
    def test_newest_keys_of_a_carried_source_stay(self):
        args = ["--young-keys", "300", "--max-keys", str(BUDGET), "--window", "6h"]
        with Server(keys=("kf:flood", "km:medium"), args=args) as srv:
            sent = {"kf": [], "km": []}
            # Interleaved: the flood goes over its budget first, carrying the medium source's
            # keys; then the medium source goes over its own.
            for n in range(100):
                for key, count in (("kf", 80), ("km", 30)):
                    ids = ["%s-%d-%d" % (key, n, i) for i in range(count)]
                    r = srv.batch([track(mid=m) for m in ids], key=key)
                    self.assertEqual((r.status, r.json["accepted"]), (200, count), r)
                    sent[key] += ids
            for key, ids in sent.items():
                newest = ids[-BUDGET:]
                again = []
                for i in range(0, len(newest), 500):
                    r = srv.post("/v1/batch?verbose=true",
                                 {"batch": [track(mid=m) for m in newest[i:i + 500]]}, key=key)
                    self.assertEqual(r.status, 200, r)
                    again += [newest[i + x["index"]] for x in r.json["results"]
                              if x["status"] == "accepted"]
                self.assertEqual(again[:5], [], "%s: %d of its newest %d ids accepted again"
                                 % (key, len(again), BUDGET))


if __name__ == "__main__":
    unittest.main()
