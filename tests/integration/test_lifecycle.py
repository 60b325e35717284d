"""Process life: SIGTERM with requests in flight, `log cat --from`, `log cat --follow`."""

import json
import signal
import socket
import threading
import time
import unittest

from harness import (Follower, HarnessError, Server, basic, http_request, log_cat, new_id,
                     run_cli, track)


def read_interim(sock, timeout=10):
    """Reads one interim response head (e.g. "HTTP/1.1 100 Continue") from a raw socket."""
    sock.settimeout(timeout)
    buf = b""
    while b"\r\n\r\n" not in buf:
        c = sock.recv(1)  # byte by byte: nothing after the interim head may be consumed
        if not c:
            raise HarnessError("connection closed before an interim response: %r" % buf)
        buf += c
    return buf


def read_http_response(sock, timeout=20):
    """Reads one HTTP/1.1 response with Content-Length from a raw socket: (status, headers, body)."""
    sock.settimeout(timeout)
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise HarnessError("connection closed before a response: %r" % buf)
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    while len(body) < n:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, headers, body[:n]


class Shutdown(unittest.TestCase):

    def test_sigterm_answers_request_whose_body_is_still_arriving(self):
        srv = Server(keys=("k",))
        try:
            srv.start()
            mid = new_id()
            body = json.dumps({"batch": [track(mid=mid)]}).encode()
            head = ("POST /v1/batch HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: %s\r\n"
                    "Content-Type: application/json\r\nContent-Length: %d\r\n"
                    "Expect: 100-continue\r\n\r\n" % (basic("k"), len(body))).encode()
            s = socket.create_connection((srv.host, srv.port), timeout=10)
            try:
                # "100 Continue" proves the server has taken the request in (its handler ran)
                # before the signal: from then on the request is in flight.
                s.sendall(head)
                interim = read_interim(s)
                self.assertTrue(interim.startswith(b"HTTP/1.1 100"), interim)
                s.sendall(body[:10])
                mark = len(srv.lines)
                srv.signal(signal.SIGTERM)
                srv.wait_for_log(r"stopping", timeout=10, start=mark)
                s.sendall(body[10:])
                status, _, rbody = read_http_response(s)
            finally:
                s.close()
            rc = srv.wait()
            self.assertEqual(rc, 0, srv.log())
            srv.proc = None
            self.assertEqual(status, 200, "an in-flight request is answered, not refused: %r"
                             % rbody)
            self.assertEqual(json.loads(rbody)["accepted"], 1)
            self.assertIn(mid, [e["messageId"] for e in log_cat(srv.data_dir)])
        finally:
            srv.cleanup()

    def test_sigterm_under_load_exits_0_and_keeps_every_ack(self):
        srv = Server(keys=("k",))
        try:
            srv.start()
            host, port = srv.host, srv.port
            lock = threading.Lock()
            acked, sent, bad = [], set(), []
            answered = [0]
            stop = threading.Event()

            def worker():
                for _ in range(500):  # bounded; the loop ends when the server is gone
                    if stop.is_set():
                        return
                    mids = [new_id() for _ in range(20)]
                    with lock:
                        sent.update(mids)
                    try:
                        r = http_request(host, port, "POST", "/v1/batch",
                                         {"batch": [track(mid=m) for m in mids]},
                                         {"Authorization": basic("k")}, timeout=20)
                    except OSError:
                        return  # refused or reset: the server has stopped accepting
                    except Exception:  # http.client.RemoteDisconnected etc.
                        return
                    with lock:
                        answered[0] += 1
                        if r.status == 200:
                            acked.extend(mids)
                        elif r.status != 503 or r.header("Retry-After") is None:
                            bad.append(r)

            ts = [threading.Thread(target=worker) for _ in range(8)]
            for t in ts:
                t.start()
            # Signal once the load is flowing, so requests are in flight at that moment.
            deadline = time.monotonic() + 20
            while answered[0] < 40 and time.monotonic() < deadline:
                time.sleep(0.01)
            self.assertGreaterEqual(answered[0], 40, "load never flowed:\n" + srv.log())
            srv.signal(signal.SIGTERM)
            rc = srv.wait()
            stop.set()
            for t in ts:
                t.join(timeout=30)
            srv.proc = None
            self.assertEqual(rc, 0, srv.log())
            self.assertEqual(bad, [], "only 200 or 503+Retry-After while stopping")
            logged = [e["messageId"] for e in log_cat(srv.data_dir)]
            self.assertEqual(len(logged), len(set(logged)), "no event logged twice")
            missing = set(acked) - set(logged)
            self.assertEqual(missing, set(), "acknowledged but not in the log")
            self.assertTrue(set(logged) <= sent)
        finally:
            srv.cleanup()

    def test_sigint_exits_0(self):
        srv = Server(keys=("k",))
        try:
            srv.start()
            srv.batch([track(mid=new_id())])
            srv.signal(signal.SIGINT)
            self.assertEqual(srv.wait(), 0, srv.log())
            srv.proc = None
        finally:
            srv.cleanup()


class LogCat(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.srv = Server(keys=("k",)).start()
        cls.mids = [new_id("seq%d" % i) for i in range(5)]
        for m in cls.mids:
            r = cls.srv.batch([track(mid=m)])
            assert r.status == 200, r

    @classmethod
    def tearDownClass(cls):
        try:
            cls.srv.stop()
        finally:
            cls.srv.cleanup()

    def test_all_in_order(self):
        self.assertEqual([e["messageId"] for e in log_cat(self.srv.data_dir)][:5], self.mids)

    def test_from(self):
        self.assertEqual([e["messageId"] for e in log_cat(self.srv.data_dir, from_=3)][:2],
                         self.mids[3:])
        self.assertEqual([e["messageId"] for e in log_cat(self.srv.data_dir, from_=0)][:5],
                         self.mids)

    def test_from_end_is_empty(self):
        n = len(log_cat(self.srv.data_dir))
        self.assertEqual(log_cat(self.srv.data_dir, from_=n), [])

    def test_errors(self):
        for args in (["--data", self.srv.data_dir + "-missing"],
                     ["--data", self.srv.data_dir, "--from", "abc"],
                     ["--data", self.srv.data_dir, "--from", "1000000"],
                     ["--data", self.srv.data_dir, "--bogus"]):
            with self.subTest(args=args):
                p = run_cli(["log", "cat"] + args)
                self.assertNotEqual(p.returncode, 0, p)
                self.assertTrue(p.stderr.strip(), "a reason on stderr")
                self.assertEqual(p.stdout, "")

    def test_follow_sees_event_committed_later(self):
        f = Follower(self.srv.data_dir)
        try:
            f.wait_for(lambda e: e.get("messageId") == self.mids[-1], 10,
                       "existing events printed first")
            late = new_id("late")
            self.assertEqual(self.srv.batch([track(mid=late)]).status, 200)
            f.wait_for(lambda e: e.get("messageId") == late, 10, "the late event followed")
            ids = [e["messageId"] for e in f.events()]
            self.assertEqual(ids[:5], self.mids)
            self.assertEqual(ids.count(late), 1)
        finally:
            f.close()

    def test_follow_from_offset(self):
        f = Follower(self.srv.data_dir, from_=4)
        try:
            f.wait_for(lambda e: e.get("messageId") == self.mids[4], 10)
            late = new_id("late2")
            r = self.srv.post("/v1/track", {"event": "E", "userId": "u", "messageId": late},
                              key="k")
            self.assertEqual(r.status, 200, r)
            f.wait_for(lambda e: e.get("messageId") == late, 10)
            self.assertNotIn(self.mids[3], [e["messageId"] for e in f.events()])
        finally:
            f.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
