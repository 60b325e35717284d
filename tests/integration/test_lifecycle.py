"""Process life: SIGTERM with requests in flight, `log cat --from`, `log cat --follow`."""

import json
import signal
import socket
import sys
import threading
import time
import unittest

from harness import (Follower, HarnessError, Server, basic, deadline_wait, log_cat, new_id,
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


# SIGTERM must be answered by an exit 0 within this many seconds, load or not.
STOP_BOUND = 15.0


class NotTakenIn(Exception):
    """The connection failed before the server took the request in (no 100 Continue)."""


class InFlightLost(AssertionError):
    """The server took the request in (sent 100 Continue) and then never answered it."""


def parse_head(head):
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        if k:
            headers[k.strip().lower()] = v.strip()
    return status, headers


def post_expect_continue(host, port, key, body, hold=None, timeout=20):
    """POST /v1/batch with `Expect: 100-continue` on a fresh connection.

    Returns ((status, headers, body), t_interim): t_interim is the monotonic time the
    server's 100 Continue arrived (None when it answered straight away). hold(sock), if
    given, runs after the 100 Continue, may send part of the body, and returns the rest.
    Raises NotTakenIn or InFlightLost (see there).
    """
    head = ("POST /v1/batch HTTP/1.1\r\nHost: %s\r\nAuthorization: %s\r\n"
            "Content-Type: application/json\r\nContent-Length: %d\r\n"
            "Expect: 100-continue\r\nConnection: close\r\n\r\n"
            % (host, basic(key), len(body))).encode()
    try:
        s = socket.create_connection((host, port), timeout=timeout)
    except OSError as e:
        raise NotTakenIn(repr(e))
    try:
        try:
            s.sendall(head)
            first = read_interim(s, timeout)
        except (OSError, HarnessError) as e:
            raise NotTakenIn(repr(e))
        status, headers = parse_head(first)
        if status != 100:  # answered without taking the body (e.g. 503 while stopping)
            n = int(headers.get("content-length", "0"))
            rest = b""
            try:
                while len(rest) < n:
                    c = s.recv(65536)
                    if not c:
                        break
                    rest += c
            except OSError:
                pass
            return (status, headers, rest[:n]), None
        t_interim = time.monotonic()
        try:
            s.sendall(hold(s) if hold is not None else body)
            return read_http_response(s, timeout), t_interim
        except (OSError, HarnessError) as e:
            raise InFlightLost("request taken in (100 Continue) but not answered: %r" % e)
    finally:
        s.close()


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
        """SIGTERM while 8 clients post and 2 requests are held mid-body: exit 0 within
        STOP_BOUND, and every request the server took in (it sent 100 Continue) is answered:
        200 and then in the log, or 503 with Retry-After. A connection refused or reset
        before the server took the request in is fine: the client retries it."""
        srv = Server(keys=("k",))
        try:
            srv.start()
            host, port = srv.host, srv.port
            lock = threading.Lock()
            acked, sent, bad, unanswered = [], set(), [], []
            counts = {"answered": 0, "503": 0, "across": 0}
            held_ready, held_go = threading.Semaphore(0), threading.Event()
            held_results = []
            stop = threading.Event()
            signalled = [None]  # monotonic time of the SIGTERM

            def record(mids, res, t_interim):
                status, headers, body = res
                with lock:
                    counts["answered"] += 1
                    if t_interim is not None and signalled[0] is not None and \
                            t_interim < signalled[0]:
                        counts["across"] += 1  # taken in before the signal, answered after
                    if status == 200:
                        acked.extend(mids)
                    elif status == 503 and "retry-after" in headers:
                        counts["503"] += 1
                    else:
                        bad.append((status, headers, body))

            def worker():
                for _ in range(500):  # bounded; the loop ends when the server is gone
                    if stop.is_set():
                        return
                    mids = [new_id() for _ in range(20)]
                    with lock:
                        sent.update(mids)
                    body = json.dumps({"batch": [track(mid=m) for m in mids]}).encode()
                    try:
                        res, t_interim = post_expect_continue(host, port, "k", body)
                    except NotTakenIn:
                        return  # refused or reset before the server took it in: retry elsewhere
                    except InFlightLost as e:
                        with lock:
                            unanswered.append(str(e))
                        return
                    record(mids, res, t_interim)

            def held():
                """Takes a request in flight and finishes its body only after the SIGTERM."""
                mids = [new_id("held") for _ in range(5)]
                with lock:
                    sent.update(mids)
                body = json.dumps({"batch": [track(mid=m) for m in mids]}).encode()

                def hold(sock):
                    sock.sendall(body[:10])
                    held_ready.release()
                    held_go.wait(30)
                    return body[10:]
                try:
                    res, t_interim = post_expect_continue(host, port, "k", body, hold=hold)
                except (NotTakenIn, InFlightLost) as e:
                    with lock:
                        unanswered.append("held request: %s" % e)
                    held_ready.release()
                    return
                record(mids, res, t_interim)
                with lock:
                    held_results.append(res[0])

            ts = [threading.Thread(target=worker) for _ in range(8)]
            hs = [threading.Thread(target=held) for _ in range(2)]
            for t in ts + hs:
                t.start()
            for _ in hs:
                self.assertTrue(held_ready.acquire(timeout=20), "held request taken in")
            # Signal once the load is flowing, so requests are in flight at that moment.
            deadline_wait(lambda: counts["answered"] >= 40, 20, "load to flow")
            mark = len(srv.lines)
            with lock:
                signalled[0] = time.monotonic()
            srv.signal(signal.SIGTERM)
            srv.wait_for_log(r"stopping", timeout=10, start=mark)
            held_go.set()
            rc = srv.wait(timeout=STOP_BOUND)
            elapsed = time.monotonic() - signalled[0]
            stop.set()
            if rc is None:
                srv.kill()
            for t in ts + hs:
                t.join(timeout=30)
            srv.proc = None
            self.assertIsNotNone(rc, "exit within %ss of SIGTERM:\n%s" % (STOP_BOUND, srv.log()))
            self.assertEqual(rc, 0, srv.log())
            self.assertLess(elapsed, STOP_BOUND)
            self.assertEqual(unanswered, [], "every request taken in is answered")
            self.assertEqual(bad, [], "only 200 or 503+Retry-After while stopping")
            self.assertEqual(len(held_results), 2)
            logged = [e["messageId"] for e in log_cat(srv.data_dir)]
            self.assertEqual(len(logged), len(set(logged)), "no event logged twice")
            missing = set(acked) - set(logged)
            self.assertEqual(missing, set(), "acknowledged but not in the log")
            self.assertTrue(set(logged) <= sent)
            print("\nsigterm under load: exit 0 after %.2fs; %d answers (%d were 503), %d taken "
                  "in before the signal and answered after it (held: %s)"
                  % (elapsed, counts["answered"], counts["503"], counts["across"], held_results),
                  file=sys.stderr)
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
