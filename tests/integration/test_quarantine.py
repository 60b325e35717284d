"""The quarantine (issue 18, item 3): what the server refused, kept in DATA/rejected/.

Rejected events and requests refused whole are readable with `ingestd log cat --log rejected`
and GET /v1/log?log=rejected with reason, request id, source and raw bytes; the size bound holds
under a flood; records survive a restart; ingestd_events_rejected_total{reason} agrees.
"""

import http.client
import json
import os
import threading
import unittest

from harness import HarnessError, ServerTestCase, basic, deadline_wait, new_id, run_cli, track

TOKEN = "qtoken"
EVENT_CAP = 32 * 1024
REQUEST_CAP = 4 * 1024


def rejected_cat(data_dir, from_=None):
    """`ingestd log cat --data DIR --log rejected`, parsed."""
    args = ["log", "cat", "--data", data_dir, "--log", "rejected"]
    if from_ is not None:
        args += ["--from", str(from_)]
    p = run_cli(args, timeout=30)
    if p.returncode != 0:
        raise HarnessError("log cat --log rejected exited %d: %s" % (p.returncode, p.stderr))
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def reasons_metric(srv):
    """{reason: count} of ingestd_events_rejected_total."""
    out = {}
    prefix = 'ingestd_events_rejected_total{reason="'
    for line in srv.metrics().body.decode().splitlines():
        if line.startswith(prefix):
            label, _, value = line[len(prefix):].partition('"} ')
            out[label] = int(float(value))
    return out


def flood(case, key, n, size, threads=4):
    """n requests of `size` bytes that do not parse, with `key`, on `threads` connections: each
    answered 400 (asserted on `case`)."""
    body = ("{" + "z" * size).encode()
    errors = []

    def worker(k):
        conn = http.client.HTTPConnection(case.srv.host, case.srv.port, timeout=20)
        try:
            for _ in range(n // threads):
                conn.request("POST", "/v1/batch", body=body,
                             headers={"Authorization": basic(key),
                                      "Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                if resp.status != 400:
                    errors.append(resp.status)
        except OSError as e:
            errors.append(repr(e))
        finally:
            conn.close()

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    case.assertEqual(errors, [])


def drained(srv):
    """/stats once the quarantine's queue is empty (everything handed in is written)."""
    return deadline_wait(lambda: (lambda s: s if s["quarantine"]["queued_bytes"] == 0 else None)(
        srv.stats()), 10, "the quarantine queue to drain")


class QuarantineCase(ServerTestCase):
    KEYS = ("qkey:web",)
    ARGS = ("--admin-token", TOKEN)

    def wait_records(self, pred, what, timeout=10.0):
        """Polls `log cat --log rejected` until pred(records) holds; returns the records."""
        def check():
            recs = rejected_cat(self.srv.data_dir)
            return recs if pred(recs) else None
        return deadline_wait(check, timeout, what, interval=0.05)

    def by_request(self, rid, n=1):
        recs = self.wait_records(lambda rs: len([r for r in rs if r["requestId"] == rid]) >= n,
                                 "%d quarantine record(s) of request %s" % (n, rid))
        return [r for r in recs if r["requestId"] == rid]

    def post_raw(self, body, headers):
        """POST /v1/batch with the test key and the given raw body and headers."""
        return self.srv.post("/v1/batch", body, key=self.key, headers=headers)


class Quarantine(QuarantineCase):

    def test_mixed_batch_rejected_event_is_kept(self):
        rid = "mixed-" + new_id()
        good = [track(mid=new_id()), track(mid=new_id())]
        bad = {"type": "track", "event": "No User", "messageId": new_id(), "x": "\u00e9\u2028"}
        r = self.srv.post("/v1/batch", {"batch": [good[0], bad, good[1]]}, key=self.key,
                          headers={"X-Request-Id": rid})
        self.assertOk(r, accepted=2, duplicates=0)
        self.assertEqual([x["index"] for x in r.json["rejected"]], [1], r)
        (rec,) = self.by_request(rid)
        self.assertEqual(rec["reason"], "missing_field")
        self.assertEqual(rec["error"], "userId or anonymousId is required")
        self.assertEqual(rec["source"], "web")
        self.assertEqual((rec["scope"], rec["index"]), ("event", 1))
        self.assertIs(rec["truncated"], False)
        self.assertEqual(json.loads(rec["raw"]), bad, "the raw bytes are the event as sent")
        self.assertRegex(rec["receivedAt"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        # The same record over HTTP, with the same paging headers as the event log.
        h = {"Authorization": "Bearer " + TOKEN}
        got = self.srv.get("/v1/log?log=rejected&max=10000", headers=h)
        self.assertEqual(got.status, 200, got)
        lines = [json.loads(l) for l in got.body.decode().splitlines()]
        self.assertIn(rec, lines)
        self.assertEqual(int(got.header("Next-Offset")),
                         int(got.header("First-Offset")) + len(lines))
        # The valid events went to the event log, the rejected one did not.
        r2 = self.srv.get("/v1/log?max=10000", headers=h)
        ids = {json.loads(l)["messageId"] for l in r2.body.decode().splitlines()}
        self.assertTrue({good[0]["messageId"], good[1]["messageId"]} <= ids)
        self.assertNotIn(bad["messageId"], ids)

    def test_oversized_event_is_cut_at_32kb(self):
        rid = "big-" + new_id()
        big = track(mid=new_id(), blob="b" * (EVENT_CAP + 5000))
        r = self.srv.post("/v1/batch", {"batch": [big, track(mid=new_id())]}, key=self.key,
                          headers={"X-Request-Id": rid})
        self.assertOk(r, accepted=1)
        (rec,) = self.by_request(rid)
        self.assertEqual(rec["reason"], "too_large")
        self.assertIs(rec["truncated"], True)
        self.assertEqual(len(rec["raw"].encode()), EVENT_CAP)
        self.assertGreater(rec["size"], EVENT_CAP + 5000)
        self.assertTrue(json.dumps(big, separators=(",", ":")).startswith(rec["raw"][:1000]))

    def test_bad_json_request_recorded_once_with_4kb(self):
        rid = "badjson-" + new_id()
        body = '{"batch":[' + "x" * 10000
        r = self.post_raw(body, {"X-Request-Id": rid, "Content-Type": "application/json"})
        self.assertError(r, 400, "invalid JSON")
        self.assertEqual(r.json.get("requestId"), rid)
        (rec,) = self.by_request(rid)
        self.assertEqual((rec["reason"], rec["scope"], rec["source"]),
                         ("invalid_json", "request", "web"))
        self.assertNotIn("index", rec)
        self.assertEqual(rec["raw"], body[:REQUEST_CAP])
        self.assertEqual(rec["size"], len(body))
        self.assertIs(rec["truncated"], True)

    def test_body_over_the_cap_recorded_once(self):
        rid = "huge-" + new_id()
        body = b"[" * (600 * 1024)
        r = self.post_raw(body, {"X-Request-Id": rid, "Content-Type": "application/json"})
        self.assertError(r, 400, "too large")
        (rec,) = self.by_request(rid)
        self.assertEqual(rec["reason"], "request_too_large")
        self.assertLessEqual(len(rec["raw"]), REQUEST_CAP)
        self.assertTrue(set(rec["raw"]) <= {"["}, rec["raw"][:40])
        self.assertEqual(rec["size"], len(body))
        self.assertIs(rec["truncated"], True)

    def test_bad_gzip_is_kept_in_base64(self):
        rid = "gz-" + new_id()
        r = self.post_raw(b"\x1f\x8b\x08garbage", {"X-Request-Id": rid,
                                                   "Content-Encoding": "gzip"})
        self.assertError(r, 400, "gzip")
        (rec,) = self.by_request(rid)
        self.assertEqual(rec["reason"], "bad_encoding")
        self.assertEqual(rec["rawBase64"], "H4sIZ2FyYmFnZQ==")

    def test_auth_failures_are_not_kept(self):
        rid = "noauth-" + new_id()
        r = self.srv.post("/v1/batch", "{bad json", key="wrong", headers={"X-Request-Id": rid})
        self.assertEqual(r.status, 401, r)
        marker = "marker-" + new_id()
        r = self.post_raw("{" + marker, {"X-Request-Id": marker})
        self.assertEqual(r.status, 400, r)
        recs = self.wait_records(lambda rs: any(x["requestId"] == marker for x in rs),
                                 "the later request's record")
        self.assertFalse([x for x in recs if x["requestId"] == rid], "a 401 is not quarantined")

    def test_bad_log_parameter(self):
        r = self.srv.get("/v1/log?log=nope", headers={"Authorization": "Bearer " + TOKEN})
        self.assertError(r, 400, "invalid log")
        r = self.srv.get("/v1/log?log=rejected")
        self.assertEqual(r.status, 401, "same admin token as the event log")
        p = run_cli(["log", "cat", "--data", self.srv.data_dir, "--log", "nope"])
        self.assertEqual(p.returncode, 2, p.stderr)

    def test_zz_metrics_match_and_records_survive_restart(self):
        # A refusal of each kind, so every count below is above zero.
        marker = "last-" + new_id()
        self.post_raw("[]", {"X-Request-Id": marker})
        self.by_request(marker)
        before = rejected_cat(self.srv.data_dir)
        st = self.srv.stats()
        self.assertEqual(st["quarantine"]["records"], len(before))
        self.assertEqual(st["quarantine"]["dropped"], 0)
        counted = reasons_metric(self.srv)
        kept = {}
        for rec in before:
            kept[rec["reason"]] = kept.get(rec["reason"], 0) + 1
        self.assertEqual({k: v for k, v in counted.items() if v}, kept)
        self.assertEqual(st["events"]["rejected_by_reason"], counted)
        self.srv.restart()
        self.assertEqual(rejected_cat(self.srv.data_dir), before, "records survive a restart")
        self.assertEqual(self.srv.stats()["quarantine"]["records"], len(before))


class QuarantineBound(QuarantineCase):
    MAX = 64 * 1024
    ARGS = ("--admin-token", TOKEN, "--rejected-max-bytes", str(MAX))

    def flood(self, n, size, threads=4):
        flood(self, self.key, n, size, threads)

    def test_flood_stays_within_the_bound(self):
        self.flood(600, 3000)  # about 2 MB of records into a 64 KiB bound
        st = drained(self.srv)
        q = st["quarantine"]
        self.assertGreater(q["deleted"], 0, q)
        self.assertGreater(q["first_offset"], 0, q)
        self.assertEqual(q["records"] + q["deleted"] + q["dropped"], 600, q)
        rdir = os.path.join(self.srv.data_dir, "rejected")
        total = sum(os.path.getsize(os.path.join(rdir, f)) for f in os.listdir(rdir))
        # The bound plus the active segment (which may end one record past its size), plus the
        # small sparse index files.
        self.assertLessEqual(total, self.MAX + q["segment_bytes"] + REQUEST_CAP + 512 + 4096, q)
        # The server keeps serving, and what is retained reads from its first offset.
        r = self.srv.batch([track(mid=new_id())])
        self.assertOk(r, accepted=1)
        recs = rejected_cat(self.srv.data_dir)
        self.assertEqual(len(recs), q["records"])
        self.assertTrue(all(x["reason"] == "invalid_json" for x in recs))


class QuarantineOff(QuarantineCase):
    ARGS = ("--admin-token", TOKEN, "--rejected-max-bytes", "0")

    def test_off_keeps_nothing_but_counts(self):
        r = self.post_raw("{nope", {})
        self.assertEqual(r.status, 400)
        self.assertFalse(os.path.exists(os.path.join(self.srv.data_dir, "rejected")))
        r = self.srv.get("/v1/log?log=rejected", headers={"Authorization": "Bearer " + TOKEN})
        self.assertError(r, 404, "quarantine is off")
        self.assertEqual(reasons_metric(self.srv)["invalid_json"], 1)
        self.assertIs(self.srv.stats()["quarantine"]["enabled"], False)


if __name__ == "__main__":
    unittest.main()
