"""Auth: Basic (user = key, or password when the user is empty), writeKey in the body, 401."""

import base64
import unittest

from harness import ServerTestCase, basic, log_cat, new_id, track


def raw_basic(s):
    return "Basic " + base64.b64encode(s.encode()).decode()


class Auth(ServerTestCase):
    KEYS = ("key-one:web", "key-two:mobile")

    def logged(self, mid):
        return [e for e in log_cat(self.srv.data_dir) if e.get("messageId") == mid]

    def post_batch(self, headers, body=None):
        mid = new_id()
        body = body or {"batch": [track(mid=mid)]}
        return mid, self.srv.post("/v1/batch", body, headers=headers)

    def test_basic_user_is_key(self):
        mid, r = self.post_batch({"Authorization": basic("key-one")})
        self.assertOk(r, accepted=1)
        self.assertEqual(self.logged(mid)[0]["source"], "web")

    def test_basic_second_key_other_source(self):
        mid, r = self.post_batch({"Authorization": basic("key-two")})
        self.assertOk(r, accepted=1)
        self.assertEqual(self.logged(mid)[0]["source"], "mobile")

    def test_basic_password_as_key_when_user_empty(self):
        mid, r = self.post_batch({"Authorization": raw_basic(":key-two")})
        self.assertOk(r, accepted=1)
        self.assertEqual(self.logged(mid)[0]["source"], "mobile")

    def test_basic_user_wins_over_password(self):
        mid, r = self.post_batch({"Authorization": raw_basic("key-one:whatever")})
        self.assertOk(r, accepted=1)

    def test_basic_lowercase_scheme(self):
        mid, r = self.post_batch({"Authorization": "basic " + base64.b64encode(
            b"key-one:").decode()})
        # RFC 7235: the scheme is case-insensitive.
        self.assertOk(r, accepted=1)

    def test_write_key_in_batch_body(self):
        mid = new_id()
        r = self.srv.post("/v1/batch", {"writeKey": "key-two", "batch": [track(mid=mid)]})
        self.assertOk(r, accepted=1)
        ev = self.logged(mid)[0]
        self.assertEqual(ev["source"], "mobile")
        self.assertNotIn("writeKey", ev, "writeKey must not be logged")

    def test_write_key_in_import_body(self):
        mid = new_id()
        r = self.srv.post("/v1/import", {"writeKey": "key-one", "batch": [track(mid=mid)]})
        self.assertOk(r, accepted=1)

    def test_write_key_in_single_event(self):
        mid = new_id()
        r = self.srv.post("/v1/track", {"writeKey": "key-one", "event": "E", "userId": "u",
                                        "messageId": mid})
        self.assertOk(r, accepted=1)
        ev = self.logged(mid)[0]
        self.assertEqual(ev["source"], "web")
        self.assertNotIn("writeKey", ev)

    def test_event_write_key_stripped_in_batch(self):
        mid = new_id()
        r = self.srv.post("/v1/batch", {"batch": [track(mid=mid, writeKey="key-one")]},
                          headers={"Authorization": basic("key-one")})
        self.assertOk(r, accepted=1)
        self.assertNotIn("writeKey", self.logged(mid)[0])

    def test_missing_key_401(self):
        for path, body in (("/v1/batch", {"batch": [track()]}),
                           ("/v1/import", {"batch": [track()]}),
                           ("/v1/track", {"event": "E", "userId": "u"}),
                           ("/v1/identify", {"userId": "u"})):
            with self.subTest(path=path):
                self.assertError(self.srv.post(path, body), 401)

    def test_unknown_key_401(self):
        cases = [
            {"Authorization": basic("nope")},
            {"Authorization": raw_basic(":nope")},
            {"Authorization": basic("key-one-but-longer")},
            {"Authorization": basic("key-on")},
            {"Authorization": basic("")},
            {"Authorization": "Basic !!!not-base64!!!"},
            {"Authorization": "Bearer key-one"},
        ]
        for h in cases:
            with self.subTest(headers=h):
                mid, r = self.post_batch(h)
                self.assertError(r, 401)
                self.assertEqual(self.logged(mid), [])

    def test_unknown_key_in_body_401(self):
        r = self.srv.post("/v1/batch", {"writeKey": "nope", "batch": [track()]})
        self.assertError(r, 401)
        r = self.srv.post("/v1/track", {"writeKey": "nope", "event": "E", "userId": "u"})
        self.assertError(r, 401)

    def test_write_key_not_a_string_401(self):
        r = self.srv.post("/v1/batch", {"writeKey": 12, "batch": [track()]})
        self.assertIn(r.status, (400, 401), r)
        self.assertIs(r.json.get("success"), False, r)


if __name__ == "__main__":
    unittest.main(verbosity=2)
