"""Replays recorded SDK requests (tests/data/sdk/*.json) against the real server.

Each fixture is one HTTP request in the shape a real client library sends (see its
`imitates` and `shape_source`): gzip bodies, /v1/import, X-Retry-Count on a retry, mobile
context, writeKey in the body or Basic auth, text/plain from browsers, and clients whose
clock is hours ahead or behind. Strings like "{{clock-40s:ns}}" are the client's clock
(the real clock plus the fixture's `client_clock_skew_s`, minus 40 s) in that SDK's
timestamp format; they are rendered once per fixture, so both sends carry the same bytes.

Every fixture is sent twice, as a client retries a batch whose answer it lost (the second
time with `retry_headers`, e.g. X-Retry-Count: 1). Asserted: the first answer (status,
accepted, rejected), the second answer (nothing accepted, everything a duplicate), and
from the log: each expected event exactly once, its fields, its source, no writeKey, a
receivedAt taken during the request, and Segment's corrected timestamp: receivedAt minus
the event's age by the client's own clock (`age_ms`), whatever the skew of that clock.

    cd tests/integration && INGESTD_BIN=../../build/ingestd python3 test_sdk_fixtures.py -v
"""

import datetime
import glob
import gzip
import json
import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import ISO_MS_UTC_RE, ServerTestCase, log_cat  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "sdk")
UTC = datetime.timezone.utc
TEMPLATE_RE = re.compile(r"\{\{clock(?:([+-]\d+(?:\.\d+)?)s)?:([A-Za-z_0-9+:-]+)\}\}")
ISO_RE = re.compile(r"^(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(?:\.(\d+))?"
                    r"([Zz]|[+-]\d\d:?\d\d)$")


def load_fixtures():
    out = []
    for path in sorted(glob.glob(os.path.join(FIXTURES, "*.json"))):
        with open(path, encoding="utf-8") as f:
            out.append((os.path.splitext(os.path.basename(path))[0], json.load(f)))
    return out


# ---- time formats of the SDKs ---------------------------------------------------

def fmt_time(dt, fmt):
    """dt (aware) in the format an SDK writes its timestamps in."""
    u = dt.astimezone(UTC)
    base = u.strftime("%Y-%m-%dT%H:%M:%S")
    if fmt == "ms":  # JS toISOString, analytics-android Iso8601Utils, analytics-ios
        return "%s.%03dZ" % (base, u.microsecond // 1000)
    if fmt == "ns":  # analytics-ios iso8601NanoFormattedString: 9 fraction digits
        return "%s.%06d000Z" % (base, u.microsecond)
    if fmt == "py_ms":  # datetime.isoformat(timespec='milliseconds') of a UTC datetime
        return u.isoformat(timespec="milliseconds")
    if fmt == "py_us":  # datetime.isoformat() of a UTC datetime
        return u.isoformat()
    m = re.fullmatch(r"go([+-])(\d\d):(\d\d)", fmt)
    if m:  # Go's time.RFC3339Nano in a fixed zone: trailing zeros of the fraction dropped
        sign = 1 if m.group(1) == "+" else -1
        tz = datetime.timezone(sign * datetime.timedelta(hours=int(m.group(2)),
                                                         minutes=int(m.group(3))))
        local = dt.astimezone(tz)
        frac = ("%06d000" % local.microsecond).rstrip("0")
        return "%s%s%s%s:%s" % (local.strftime("%Y-%m-%dT%H:%M:%S"), "." + frac if frac else "",
                                m.group(1), m.group(2), m.group(3))
    raise ValueError("unknown time format %r" % fmt)


def iso_ms(s):
    """An ISO-8601 string -> epoch milliseconds, the fraction truncated (as the server does)."""
    m = ISO_RE.match(s)
    if not m:
        raise ValueError("not ISO-8601: %r" % s)
    y, mo, d, h, mi, sec = (int(m.group(i)) for i in range(1, 7))
    frac = int((m.group(7) or "0")[:3].ljust(3, "0"))
    zone = m.group(8)
    if zone in ("Z", "z"):
        off = 0
    else:
        z = zone.replace(":", "")
        off = (1 if z[0] == "+" else -1) * (int(z[1:3]) * 60 + int(z[3:5]))
    dt = datetime.datetime(y, mo, d, h, mi, sec, tzinfo=UTC)
    return int(dt.timestamp()) * 1000 + frac - off * 60000


def fmt_ms(ms):
    dt = datetime.datetime.fromtimestamp(ms // 1000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (ms % 1000)


def render(value, client_now):
    """The fixture with every {{clock...}} template replaced, at the client's clock."""
    if isinstance(value, dict):
        return {k: render(v, client_now) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, client_now) for v in value]
    if isinstance(value, str):
        def sub(m):
            delta = float(m.group(1) or 0)
            return fmt_time(client_now + datetime.timedelta(seconds=delta), m.group(2))
        return TEMPLATE_RE.sub(sub, value)
    return value


def body_bytes(req):
    if "body_text" in req:
        raw = req["body_text"].encode("utf-8")
    elif req.get("body_json_style") == "python":  # json.dumps defaults: ", " and ": "
        raw = json.dumps(req["body"]).encode("utf-8")
    else:
        raw = json.dumps(req["body"], separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if req.get("body_encoding") == "gzip":
        raw = gzip.compress(raw)
    elif req.get("body_encoding") not in (None, "identity"):
        raise ValueError("unknown body_encoding %r" % req["body_encoding"])
    return raw


def sent_events(req):
    """The events of the rendered request body, in order (batch or a single event)."""
    body = req.get("body")
    if isinstance(body, dict) and isinstance(body.get("batch"), list):
        return body["batch"], body.get("sentAt")
    return [body], None


def subset_mismatch(want, have, where="$"):
    """None when every member of `want` is in `have` with that value (objects recursively)."""
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return "%s: expected an object, got %r" % (where, have)
        for k, v in want.items():
            if k not in have:
                return "%s: member %r missing" % (where, k)
            err = subset_mismatch(v, have[k], "%s.%s" % (where, k))
            if err:
                return err
        return None
    if want != have or type(want) is not type(have):
        return "%s: expected %r, got %r" % (where, want, have)
    return None


FIXTURE_LIST = load_fixtures()


def _keys():
    keys = []
    for _, fx in FIXTURE_LIST:
        if fx["write_key"] not in keys:
            keys.append(fx["write_key"])
    return tuple(keys)


class SdkFixtures(ServerTestCase):
    KEYS = _keys()

    def replay(self, name, fx):
        for field in ("description", "imitates", "shape_source", "write_key", "request", "expect"):
            self.assertIn(field, fx, "%s: fixture lacks %r" % (name, field))
        source = fx["write_key"].split(":", 1)[1] if ":" in fx["write_key"] else "default"
        skew = datetime.timedelta(seconds=fx.get("client_clock_skew_s", 0))
        t0_ms = int(time.time() * 1000)
        rendered = render({"request": fx["request"], "expect": fx["expect"]},
                          datetime.datetime.now(UTC) + skew)
        req, exp = rendered["request"], rendered["expect"]
        body = body_bytes(req)
        headers = dict(req.get("headers") or {})

        r1 = self.srv.request(req["method"], req["path"], body=body, headers=headers)
        retry_headers = dict(headers, **fx.get("retry_headers", {}))
        r2 = self.srv.request(req["method"], req["path"], body=body, headers=retry_headers)
        t1_ms = int(time.time() * 1000)

        self.assertEqual(r1.status, exp["status"], "%s: first send: %r" % (name, r1))
        if exp["status"] != 200:
            self.assertEqual(r2.status, exp["status"], "%s: retry: %r" % (name, r2))
            return
        first = self.assertOk(r1, accepted=exp["accepted"], rejected=exp.get("rejected"))
        self.assertOk(r2, accepted=0, duplicates=first["accepted"] + first["duplicates"],
                      rejected=exp.get("rejected"))

        # Fixture self-check: the age it claims is what its rendered timestamps say.
        events, batch_sent = sent_events(req)
        by_id = {e.get("messageId"): e for e in events if isinstance(e, dict)}
        for want in exp["events"]:
            if "age_ms" in want:
                ev = by_id[want["messageId"]]
                sent = ev.get("sentAt") or batch_sent
                self.assertEqual(iso_ms(sent) - iso_ms(ev["timestamp"]), want["age_ms"],
                                 "%s: age_ms of %s does not match its timestamps"
                                 % (name, want["messageId"]))

        ids = {w["messageId"] for w in exp["events"]}
        logged = [e for e in log_cat(self.srv.data_dir) if e.get("messageId") in ids]
        self.assertEqual(len(logged), len(exp["events"]),
                         "%s: expected each of %d events once in the log, got %d: %r"
                         % (name, len(exp["events"]), len(logged), logged))
        logged_by_id = {e["messageId"]: e for e in logged}
        self.assertEqual(set(logged_by_id), ids, "%s: a messageId appears twice" % name)

        for want in exp["events"]:
            mid = want["messageId"]
            got = logged_by_id[mid]
            err = subset_mismatch(want.get("fields", {}), got)
            self.assertIsNone(err, "%s: event %s: %s\n  logged: %r" % (name, mid, err, got))
            self.assertEqual(got.get("source"), source, "%s: %s source" % (name, mid))
            self.assertNotIn("writeKey", got, "%s: %s: writeKey was logged" % (name, mid))
            self.assertRegex(got.get("receivedAt", ""), ISO_MS_UTC_RE, mid)
            received = iso_ms(got["receivedAt"])
            self.assertTrue(t0_ms <= received <= t1_ms,
                            "%s: %s receivedAt %s is not between the request's start and end"
                            % (name, mid, got["receivedAt"]))
            self.assertRegex(got.get("timestamp", ""), ISO_MS_UTC_RE, mid)
            sent_ev = by_id[mid]
            if "age_ms" in want:
                # Segment's correction: the client's clock is off by (sentAt - now), whatever
                # its skew; the event happened age_ms before the request left the client.
                self.assertEqual(got["timestamp"], fmt_ms(received - want["age_ms"]),
                                 "%s: %s: corrected timestamp (receivedAt %s, age %d ms)"
                                 % (name, mid, got["receivedAt"], want["age_ms"]))
                self.assertEqual(got.get("originalTimestamp"), sent_ev["timestamp"],
                                 "%s: %s: the client's timestamp is kept as originalTimestamp"
                                 % (name, mid))
            elif want.get("timestamp_is_client"):
                self.assertEqual(got["timestamp"], fmt_ms(iso_ms(sent_ev["timestamp"])),
                                 "%s: %s: without sentAt the client's timestamp is taken as is"
                                 % (name, mid))
            elif want.get("timestamp_is_received_at"):
                self.assertEqual(got["timestamp"], got["receivedAt"], "%s: %s" % (name, mid))
            else:
                self.fail("%s: %s: the fixture says nothing about the timestamp" % (name, mid))


def _make_test(name, fx):
    def test(self):
        self.replay(name, fx)
    test.__doc__ = "%s: %s" % (name, fx.get("imitates", ""))
    return test


for _name, _fx in FIXTURE_LIST:
    setattr(SdkFixtures, "test_" + _name, _make_test(_name, _fx))


class FixtureFiles(unittest.TestCase):
    def test_there_are_fixtures_for_each_required_shape(self):
        """The issue's list: gzip, /v1/import, X-Retry-Count, mobile context, clock skew both
        ways, writeKey in the body and Basic auth, text/plain from browsers."""
        fx = [f for _, f in FIXTURE_LIST]
        hdr = [{k.lower(): v for k, v in f["request"].get("headers", {}).items()} for f in fx]
        self.assertTrue(any(f["request"].get("body_encoding") == "gzip" for f in fx))
        self.assertTrue(any(f["request"]["path"] == "/v1/import" for f in fx))
        self.assertTrue(any("x-retry-count" in {k.lower() for k in f.get("retry_headers", {})}
                            for f in fx))
        self.assertTrue(any("device" in json.dumps(f["request"].get("body")) for f in fx))
        self.assertTrue(any(f.get("client_clock_skew_s", 0) >= 3600 for f in fx))
        self.assertTrue(any(f.get("client_clock_skew_s", 0) <= -3600 for f in fx))
        self.assertTrue(any("authorization" not in h and '"writeKey"' in
                            json.dumps(f["request"].get("body")) for f, h in zip(fx, hdr)))
        self.assertTrue(any(h.get("authorization", "").startswith("Basic ") for h in hdr))
        self.assertTrue(any(h.get("content-type", "").startswith("text/plain") for h in hdr))


if __name__ == "__main__":
    unittest.main()
