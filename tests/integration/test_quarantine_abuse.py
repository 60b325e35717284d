"""The quarantine against its own clients (issue 27): nobody without a key can fill it, no
write key can be read from it, and one source cannot push out another's records.

- A request refused whole that names no known write key (no Authorization, no writeKey in its
  bytes) is counted by reason and in quarantine.unattributed, not recorded.
- Write keys are redacted from `raw` everywhere: a second key in the body of a request
  authenticated with another, a key in an event, in a body that does not parse (also with an
  escaped member name, also cut at the 4 KB cap), and a gzip body that does not decode keeps
  only its 10-byte header.
- Each source has its share of --rejected-max-bytes: a flood from one source leaves another's
  records in place.
"""

import base64
import gzip
import json
import os
import unittest

from harness import new_id, track
from test_quarantine import QuarantineCase, drained, flood, rejected_cat

TOKEN = "qtoken"
REQUEST_CAP = 4 * 1024
LONG_KEY = "longsecretkey0123456789abcdef"


def raw_text(rec):
    """The kept bytes of a record, decoded whichever way they were kept."""
    if "raw" in rec:
        return rec["raw"].encode()
    return base64.b64decode(rec["rawBase64"])


class NoKey(QuarantineCase):
    KEYS = ("qkey:web", LONG_KEY + ":other")

    def unattributed(self):
        return self.srv.stats()["quarantine"].get("unattributed", 0)

    def test_refusal_without_a_key_is_counted_not_kept(self):
        before = self.unattributed()
        rid = "nokey-" + new_id()
        r = self.srv.post("/v1/batch", "{bad json", headers={"X-Request-Id": rid})
        self.assertError(r, 400, "invalid JSON")
        rid2 = "nokey-ct-" + new_id()
        r = self.srv.post("/v1/batch", "[]", headers={"X-Request-Id": rid2})
        self.assertError(r, 400, "must be a JSON object")
        # A later refusal with a key is kept: the writer has passed the earlier ones.
        marker = "marker-" + new_id()
        r = self.post_raw("{" + marker, {"X-Request-Id": marker})
        self.assertEqual(r.status, 400, r)
        recs = self.by_request(marker)
        self.assertEqual(recs[0]["source"], "web")
        ids = {x["requestId"] for x in rejected_cat(self.srv.data_dir)}
        self.assertNotIn(rid, ids, "a refusal with no key is not recorded")
        self.assertNotIn(rid2, ids, "a refusal with no key is not recorded")
        self.assertEqual(self.unattributed(), before + 2)
        metrics = self.srv.metrics().body.decode()
        self.assertIn("ingestd_quarantine_unattributed_total %d" % (before + 2), metrics)

    def test_writekey_in_a_body_that_does_not_parse_names_the_source(self):
        rid = "bodykey-" + new_id()
        body = '{"write\\u004bey": "%s", "batch": [' % LONG_KEY
        r = self.srv.post("/v1/batch", body, headers={"X-Request-Id": rid})
        self.assertError(r, 400, "invalid JSON")
        (rec,) = self.by_request(rid)
        self.assertEqual(rec["source"], "other")
        self.assertNotIn(LONG_KEY, rec["raw"])
        self.assertIn('"write\\u004bey": "[redacted]"', rec["raw"])


class Redaction(QuarantineCase):
    KEYS = ("qkey:web", LONG_KEY + ":other")

    def test_second_key_in_the_body_of_a_request_refused_whole(self):
        rid = "second-" + new_id()
        body = json.dumps({"writeKey": LONG_KEY, "batch": "not a list"})
        r = self.post_raw(body, {"X-Request-Id": rid, "Content-Type": "application/json"})
        self.assertError(r, 400)
        (rec,) = self.by_request(rid)
        self.assertEqual(rec["source"], "web")
        self.assertNotIn(LONG_KEY, rec["raw"])
        self.assertEqual(json.loads(rec["raw"])["writeKey"], "[redacted]")

    def test_key_in_a_rejected_event(self):
        rid = "event-" + new_id()
        bad = {"type": "track", "event": "no user", "writeKey": LONG_KEY,
               "properties": {"nested": {"writeKey": "qkey"}}}
        r = self.srv.post("/v1/batch", {"batch": [bad, track(mid=new_id())]}, key=self.key,
                          headers={"X-Request-Id": rid})
        self.assertOk(r, accepted=1)
        (rec,) = self.by_request(rid)
        self.assertEqual(rec["scope"], "event")
        ev = json.loads(rec["raw"])
        self.assertEqual(ev["writeKey"], "[redacted]")
        self.assertEqual(ev["properties"]["nested"]["writeKey"], "[redacted]")
        self.assertNotIn(LONG_KEY, rec["raw"])

    def test_key_cut_by_the_4kb_cap(self):
        rid = "cut-" + new_id()
        head = '{"batch":[' + '"' + "p" * 100 + '"'
        prefix = ',"writeKey":"'
        pad = REQUEST_CAP - len(head) - len(prefix) - 7  # the cap falls 7 bytes into the key
        body = head + " " * pad + prefix + LONG_KEY + '"' + "x" * 100
        r = self.post_raw(body, {"X-Request-Id": rid, "Content-Type": "application/json"})
        self.assertError(r, 400, "invalid JSON")
        (rec,) = self.by_request(rid)
        self.assertIs(rec["truncated"], True)
        self.assertNotIn(LONG_KEY[:7], rec["raw"])

    def test_gzip_body_that_does_not_decode_keeps_only_its_header(self):
        rid = "gzkey-" + new_id()
        plain = json.dumps({"writeKey": LONG_KEY, "batch": [track(mid=new_id())]}).encode()
        broken = gzip.compress(plain)[:-6]  # no trailer: it does not decode
        r = self.post_raw(broken, {"X-Request-Id": rid, "Content-Encoding": "gzip"})
        self.assertError(r, 400, "gzip")
        (rec,) = self.by_request(rid)
        kept = raw_text(rec)
        self.assertLessEqual(len(kept), 10, "nothing past gzip's header: it could inflate")
        self.assertEqual(kept[:2], b"\x1f\x8b")
        self.assertEqual(rec["size"], len(broken))
        self.assertIs(rec["truncated"], True)

    def test_gzip_body_that_decodes_to_bad_json_is_redacted(self):
        rid = "gzjson-" + new_id()
        plain = ('{"writeKey":"%s","batch":[' % LONG_KEY).encode()
        r = self.post_raw(gzip.compress(plain), {"X-Request-Id": rid,
                                                 "Content-Encoding": "gzip"})
        self.assertError(r, 400, "invalid JSON")
        (rec,) = self.by_request(rid)
        self.assertNotIn(LONG_KEY.encode(), raw_text(rec))
        self.assertIn(b'"writeKey":"[redacted]"', raw_text(rec))


class Shares(QuarantineCase):
    MAX = 64 * 1024
    KEYS = ("akey:flood", "bkey:quiet")
    ARGS = ("--admin-token", TOKEN, "--rejected-max-bytes", str(MAX))

    def quiet_refusals(self, n, tag):
        rids = ["%s-%d-%s" % (tag, i, new_id()) for i in range(n)]
        for rid in rids:
            r = self.srv.post("/v1/batch", "{quiet " + "q" * 500, key="bkey",
                              headers={"X-Request-Id": rid})
            self.assertError(r, 400, "invalid JSON")
        self.by_request(rids[-1])
        return rids

    def assert_kept_once(self, rids):
        recs = rejected_cat(self.srv.data_dir)
        for rid in rids:
            self.assertEqual(len([x for x in recs if x["requestId"] == rid]), 1, rid)
        return recs

    def test_a_flood_from_one_source_leaves_anothers_records(self):
        quiet = self.quiet_refusals(5, "quiet")  # the oldest records of the log
        flood(self, "akey", 600, 3000)  # about 2 MB into a 64 KiB bound
        q = drained(self.srv)["quarantine"]
        recs = self.assert_kept_once(quiet)
        self.assertGreater(q["deleted"], 0, q)
        self.assertGreaterEqual(q["carried"], 5, q)
        self.assertEqual(q["sources"], 2, q)
        self.assertTrue([x for x in recs if x["source"] == "flood"], "the flood keeps its share")
        self.assertEqual(len(recs), q["records"])
        rdir = os.path.join(self.srv.data_dir, "rejected")
        total = sum(os.path.getsize(os.path.join(rdir, f)) for f in os.listdir(rdir))
        self.assertLessEqual(total, self.MAX + q["segment_bytes"] + REQUEST_CAP + 512 + 4096, q)
        # After a restart the shares are counted from the log again: a second flood leaves
        # both rounds of the quiet source's records.
        self.srv.restart()
        quiet += self.quiet_refusals(3, "quiet2")
        flood(self, "akey", 300, 3000)
        drained(self.srv)
        self.assert_kept_once(quiet)


if __name__ == "__main__":
    unittest.main()
