"""Event validation and normalisation: messageId, receivedAt, source, sentAt, timestamp correction."""

import datetime
import json
import shutil
import subprocess
import unittest

from harness import (ISO_MS_UTC_RE, UUID4_RE, ServerTestCase, iso_ms, log_cat, log_cat_cmd,
                     new_id, parse_iso, track)

UTC = datetime.timezone.utc


def now():
    return datetime.datetime.now(UTC)


class Events(ServerTestCase):
    KEYS = ("evkey:my-source",)

    def send(self, events, **top):
        r = self.srv.batch(events, **top)
        self.assertEqual(r.status, 200, r)
        return r.json

    def logged(self, mid):
        found = [e for e in log_cat(self.srv.data_dir) if e.get("messageId") == mid]
        self.assertEqual(len(found), 1, "messageId %s logged %d times" % (mid, len(found)))
        return found[0]

    # ---- validation ----------------------------------------------------

    def check_rejected(self, event):
        body = self.send([event])
        self.assertEqual(body["accepted"], 0, body)
        self.assertEqual([i["index"] for i in body["rejected"]], [0], body)
        return body["rejected"][0]["error"]

    def check_accepted(self, event):
        body = self.send([event])
        self.assertEqual((body["accepted"], body["rejected"]), (1, []), body)

    def test_rejections(self):
        cases = {
            "no type": {"event": "E", "userId": "u"},
            "unknown type": {"type": "purchase", "userId": "u"},
            "type not a string": {"type": 1, "userId": "u"},
            "no user": {"type": "track", "event": "E"},
            "empty userId": {"type": "track", "event": "E", "userId": ""},
            "empty anonymousId": {"type": "track", "event": "E", "anonymousId": ""},
            "userId object": {"type": "identify", "userId": {"a": 1}},
            "track no event": {"type": "track", "userId": "u"},
            "track empty event": {"type": "track", "userId": "u", "event": ""},
            "track event number": {"type": "track", "userId": "u", "event": 5},
            "group no groupId": {"type": "group", "userId": "u"},
            "alias no previousId": {"type": "alias", "userId": "u"},
            "alias no userId": {"type": "alias", "anonymousId": "a", "previousId": "p"},
            "empty messageId": track(mid=""),
            "messageId number": track(mid=123),
            "messageId too long": track(mid="x" * 257),
            "bad timestamp": track(timestamp="2024-13-45"),
            "timestamp words": track(timestamp="yesterday"),
            "timestamp number": track(timestamp=1700000000),
            "date only": track(timestamp="2024-01-01"),
            "bad sentAt": track(sentAt="soon"),
            "bad originalTimestamp": track(originalTimestamp="then"),
        }
        for name, ev in cases.items():
            with self.subTest(case=name):
                err = self.check_rejected(ev)
                self.assertTrue(err and err == err.strip(), err)

    def test_acceptances(self):
        cases = {
            "numeric userId": track(uid=42),
            "anonymousId only": {"type": "page", "anonymousId": "a-1"},
            "numeric anonymousId": {"type": "screen", "anonymousId": 7},
            "group numeric groupId": {"type": "group", "userId": "u", "groupId": 99},
            "alias": {"type": "alias", "userId": "u", "previousId": "p"},
            "messageId 256 bytes": track(mid="m" * 256),
            "timestamp Z": track(timestamp="2024-01-01T00:00:00Z"),
            "timestamp fraction": track(timestamp="2024-01-01T00:00:00.123456Z"),
            "timestamp +hh:mm": track(timestamp="2024-01-01T01:00:00+01:00"),
            "timestamp -hhmm": track(timestamp="2023-12-31T19:00:00-0500"),
        }
        for name, ev in cases.items():
            with self.subTest(case=name):
                if ev.get("messageId") is None:
                    ev["messageId"] = new_id()
                self.check_accepted(ev)

    # ---- normalisation -------------------------------------------------

    def test_message_id_assigned_uuid4(self):
        uid = new_id("user")
        before = len(log_cat(self.srv.data_dir))
        self.send([track(uid=uid), track(uid=uid)])
        mine = [e for e in log_cat(self.srv.data_dir)[before:] if e.get("userId") == uid]
        self.assertEqual(len(mine), 2)
        for e in mine:
            self.assertRegex(e["messageId"], UUID4_RE)
        self.assertNotEqual(mine[0]["messageId"], mine[1]["messageId"])

    def test_message_id_assigned_single_route(self):
        uid = new_id("user")
        r = self.srv.post("/v1/identify", {"userId": uid}, key="evkey")
        self.assertOk(r, accepted=1)
        mine = [e for e in log_cat(self.srv.data_dir) if e.get("userId") == uid]
        self.assertEqual(len(mine), 1)
        self.assertRegex(mine[0]["messageId"], UUID4_RE)

    def test_received_at_and_source(self):
        mid = new_id()
        t0 = now()
        self.send([track(mid=mid, source="client-lies")])
        t1 = now()
        e = self.logged(mid)
        self.assertRegex(e["receivedAt"], ISO_MS_UTC_RE)
        rec = parse_iso(e["receivedAt"])
        self.assertGreaterEqual(rec, t0 - datetime.timedelta(seconds=1))
        self.assertLessEqual(rec, t1 + datetime.timedelta(seconds=1))
        self.assertEqual(e["source"], "my-source", "the key's source overwrites the client's")

    def test_client_fields_kept(self):
        mid = new_id()
        props = {"revenue": 9.99, "items": [1, 2, {"a": None}], "nested": {"ok": True},
                 "unicode": "caf\u00e9 \u2603"}
        self.send([track(mid=mid, properties=props, context={"ip": "10.0.0.1"},
                         customTopLevel="x")])
        e = self.logged(mid)
        self.assertEqual(e["properties"], props)
        self.assertEqual(e["context"]["ip"], "10.0.0.1")
        self.assertEqual(e["customTopLevel"], "x")
        self.assertEqual(e["event"], "Test Event")
        self.assertEqual(e["type"], "track")

    def test_no_timestamp_gets_received_at(self):
        mid = new_id()
        self.send([track(mid=mid)])
        e = self.logged(mid)
        self.assertEqual(e["timestamp"], e["receivedAt"])
        self.assertNotIn("originalTimestamp", e)

    def test_timestamp_corrected_by_sent_at_skew(self):
        # The client clock runs 1 hour ahead; the event happened 5 s before it was sent.
        skew = datetime.timedelta(hours=1)
        age = datetime.timedelta(seconds=5)
        client_now = now() + skew
        ts = iso_ms(client_now - age)
        sent = iso_ms(client_now)
        mid = new_id()
        self.send([track(mid=mid, timestamp=ts, sentAt=sent)])
        e = self.logged(mid)
        self.assertEqual(e["originalTimestamp"], ts, "originalTimestamp is the client's value")
        self.assertEqual(e["sentAt"], sent, "sentAt kept as sent")
        self.assertRegex(e["timestamp"], ISO_MS_UTC_RE)
        want = parse_iso(e["receivedAt"]) - age
        got = parse_iso(e["timestamp"])
        self.assertLessEqual(abs((got - want).total_seconds()), 0.002,
                             "timestamp %s, want receivedAt - 5s = %s" % (got, want))

    def test_timestamp_corrected_by_batch_sent_at(self):
        skew = datetime.timedelta(minutes=-30)  # client clock 30 minutes behind
        age = datetime.timedelta(milliseconds=2500)
        client_now = now() + skew
        ts = iso_ms(client_now - age)
        sent = iso_ms(client_now)
        mid = new_id()
        self.send([track(mid=mid, timestamp=ts)], sentAt=sent)
        e = self.logged(mid)
        self.assertEqual(e["originalTimestamp"], ts)
        self.assertEqual(e["sentAt"], sent, "the batch's sentAt is copied into the event")
        got = parse_iso(e["timestamp"])
        want = parse_iso(e["receivedAt"]) - age
        self.assertLessEqual(abs((got - want).total_seconds()), 0.002)

    def test_event_sent_at_wins_over_batch(self):
        client_now = now()
        ev_sent = iso_ms(client_now)
        batch_sent = iso_ms(client_now + datetime.timedelta(hours=5))
        ts = iso_ms(client_now - datetime.timedelta(seconds=1))
        mid = new_id()
        self.send([track(mid=mid, timestamp=ts, sentAt=ev_sent)], sentAt=batch_sent)
        e = self.logged(mid)
        self.assertEqual(e["sentAt"], ev_sent)
        got = parse_iso(e["timestamp"])
        want = parse_iso(e["receivedAt"]) - datetime.timedelta(seconds=1)
        self.assertLessEqual(abs((got - want).total_seconds()), 0.002)

    def test_timestamp_without_sent_at_normalised(self):
        mid = new_id()
        self.send([track(mid=mid, timestamp="2024-01-01T01:00:00+01:00")])
        e = self.logged(mid)
        self.assertEqual(e["originalTimestamp"], "2024-01-01T01:00:00+01:00")
        self.assertEqual(e["timestamp"], "2024-01-01T00:00:00.000Z")
        self.assertNotIn("sentAt", e)

    def test_single_route_timestamp_correction(self):
        age = datetime.timedelta(seconds=3)
        client_now = now() + datetime.timedelta(days=2)
        ts, sent = iso_ms(client_now - age), iso_ms(client_now)
        mid = new_id()
        r = self.srv.post("/v1/track", {"event": "E", "userId": "u", "messageId": mid,
                                        "timestamp": ts, "sentAt": sent}, key="evkey")
        self.assertOk(r, accepted=1)
        e = self.logged(mid)
        got = parse_iso(e["timestamp"])
        want = parse_iso(e["receivedAt"]) - age
        self.assertLessEqual(abs((got - want).total_seconds()), 0.002)

    def test_batch_context_and_integrations_merged(self):
        m1, m2 = new_id(), new_id()
        self.send([track(mid=m1, context={"ip": "5.6.7.8"}, integrations={"Mixpanel": False}),
                   track(mid=m2)],
                  context={"ip": "1.2.3.4", "library": {"name": "analytics.js"}},
                  integrations={"All": True, "Mixpanel": True})
        e1, e2 = self.logged(m1), self.logged(m2)
        self.assertEqual(e1["context"]["ip"], "5.6.7.8", "the event's own value wins")
        self.assertEqual(e1["context"]["library"], {"name": "analytics.js"})
        self.assertEqual(e2["context"], {"ip": "1.2.3.4", "library": {"name": "analytics.js"}})
        self.assertEqual(e1["integrations"], {"All": True, "Mixpanel": False})
        self.assertEqual(e2["integrations"], {"All": True, "Mixpanel": True})

    def test_logged_event_is_compact_single_line(self):
        mid = new_id()
        self.send([track(mid=mid, properties={"text": "line1\nline2"})])
        e = self.logged(mid)
        self.assertEqual(e["properties"]["text"], "line1\nline2")


    def test_timestamp_kept_in_sane_range(self):
        """A correction that lands outside 2000-01-01..receivedAt + 1 day is not logged: every
        timestamp stays one that ordinary consumers read (Python's fromisoformat among them),
        and the client's value is kept in originalTimestamp."""
        wild = new_id("wild")
        sent_wild = new_id("sent-wild")
        future = new_id("future")
        client_ts = iso_ms(now() - datetime.timedelta(minutes=5))
        self.send([track(mid=wild, timestamp="0000-01-01T00:00:00Z", sentAt="9999-12-31T23:59:59Z"),
                   track(mid=sent_wild, timestamp=client_ts, sentAt="1970-01-01T00:00:00Z"),
                   track(mid=future, timestamp="2999-01-01T00:00:00Z")])
        for mid in (wild, sent_wild, future):
            e = self.logged(mid)
            got = datetime.datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00"))
            self.assertGreaterEqual(got.year, 2000, e)
            self.assertLessEqual(got, parse_iso(e["receivedAt"]) + datetime.timedelta(days=1), e)
        self.assertEqual(self.logged(wild)["timestamp"], self.logged(wild)["receivedAt"])
        self.assertEqual(self.logged(wild)["originalTimestamp"], "0000-01-01T00:00:00Z")
        self.assertEqual(self.logged(sent_wild)["timestamp"], client_ts)
        self.assertEqual(self.logged(future)["timestamp"], self.logged(future)["receivedAt"])
        self.assertEqual(self.logged(future)["originalTimestamp"], "2999-01-01T00:00:00Z")

    def test_sent_at_header_corrects(self):
        """RudderStack's JS SDK sends its clock as a SentAt header: without a sentAt in the body
        it corrects the timestamp as one would."""
        skew = datetime.timedelta(hours=1)
        age = datetime.timedelta(seconds=5)
        client_now = now() + skew
        ts = iso_ms(client_now - age)
        mid = new_id("hdr")
        r = self.srv.post("/v1/track", track(mid=mid, timestamp=ts), key=self.key,
                          headers={"SentAt": iso_ms(client_now)})
        self.assertEqual(r.status, 200, r)
        e = self.logged(mid)
        self.assertEqual(e["originalTimestamp"], ts)
        self.assertNotIn("sentAt", e)
        want = parse_iso(e["receivedAt"]) - age
        got = parse_iso(e["timestamp"])
        self.assertLessEqual(abs((got - want).total_seconds()), 0.002, (e, want))

    # ---- strings as browsers and Node write them (docs/log-format.md, "Strings") -----------

    # What Node's JSON.stringify writes for a title cut inside an emoji ("Sale 😀".slice(0, 6))
    # and an ordinary event: the cut one ends in a lone surrogate escape.
    STRINGIFY_SCRIPT = (
        "const cut = 'Sale \\u{1F600}'.slice(0, 6);"
        "process.stdout.write(JSON.stringify({batch: ["
        "{type: 'track', userId: 'u1', event: cut, messageId: process.argv[1]},"
        "{type: 'track', userId: 'u1', event: 'Plain', messageId: process.argv[2]}]}))")

    def stringify_body(self, mid_cut, mid_plain):
        body = ('{"batch":[{"type":"track","userId":"u1","event":"Sale \\ud83d","messageId":"%s"},'
                '{"type":"track","userId":"u1","event":"Plain","messageId":"%s"}]}'
                % (mid_cut, mid_plain))
        node = shutil.which("node")
        if node:  # the literal is what Node really writes (well-formed JSON.stringify, Node >= 12)
            out = subprocess.run([node, "-e", self.STRINGIFY_SCRIPT, mid_cut, mid_plain],
                                 capture_output=True, text=True, timeout=30)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(out.stdout, body)
        return body

    def test_stringify_cut_emoji_batch(self):
        """A batch from JSON.stringify with one cut emoji and one ordinary event: both logged,
        the cut one with U+FFFD (as Segment's Go API reads it), each once."""
        mid_cut, mid_plain = new_id("cut"), new_id("plain")
        body = self.stringify_body(mid_cut, mid_plain)
        r = self.srv.post("/v1/batch", body.encode("ascii"), key=self.key,
                          headers={"Content-Type": "text/plain"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual((r.json["accepted"], r.json["rejected"]), (2, []), r.json)
        self.assertEqual(self.logged(mid_cut)["event"], "Sale \ufffd")
        self.assertEqual(self.logged(mid_plain)["event"], "Plain")

    def test_nul_kept_escaped(self):
        """\\u0000 is kept in a value and logged as that escape, never as a raw NUL byte."""
        mid, other = new_id("nul"), new_id("nul-other")
        body = ('{"batch":[{"type":"track","userId":"u\\u0000v","event":"e","messageId":"%s"},'
                '{"type":"track","userId":"u","event":"e","messageId":"%s"}]}' % (mid, other))
        r = self.srv.post("/v1/batch", body, key=self.key)
        self.assertEqual((r.status, r.json["accepted"]), (200, 2), r)
        self.assertEqual(self.logged(mid)["userId"], "u\x00v")
        self.logged(other)
        p = subprocess.run(log_cat_cmd(self.srv.data_dir), capture_output=True, timeout=30)
        line = next(ln for ln in p.stdout.split(b"\n") if mid.encode() in ln)
        self.assertIn(b'"userId":"u\\u0000v"', line)
        self.assertNotIn(b"\x00", p.stdout)

    def test_line_separators_escaped_in_log(self):
        """U+2028, U+2029, U+0085 and the other C1 controls are logged escaped: a reader that
        splits lines on them (Python's str.splitlines, as log_cat here) still sees one event a
        line."""
        mid = new_id("sep")
        text = "a\u2028b\u2029c\u0085d\u0080\u009fe\u00a0f"
        r = self.srv.post("/v1/batch", json.dumps(
            {"batch": [track(mid=mid, properties={"text": text, "k\u2028": 1})]},
            ensure_ascii=False).encode("utf-8"), key=self.key)
        self.assertEqual((r.status, r.json["accepted"]), (200, 1), r)
        e = self.logged(mid)
        self.assertEqual(e["properties"], {"text": text, "k\u2028": 1})
        raw = subprocess.run(log_cat_cmd(self.srv.data_dir), capture_output=True,
                             timeout=30).stdout.decode("utf-8")
        line = next(ln for ln in raw.split("\n") if mid in ln)
        self.assertIn("a\\u2028b\\u2029c\\u0085d\\u0080\\u009Fe\u00a0f", line)
        for ch in ("\u2028", "\u2029", "\u0085", "\u0080", "\u009f"):
            self.assertNotIn(ch, raw)


if __name__ == "__main__":
    unittest.main(verbosity=2)
