"""kill -9 under load: every acknowledged event survives, nothing is ever logged twice.

Four client threads, two write keys with different sources, share one stream of messageIds
per source ("m-0", "m-1", ... for both sources, so the sources overlap completely). Each
batch mixes new ids (one of them twice) with re-sends of ids already acknowledged for that
source, and every batch that got no answer or a non-200 (connection refused or reset, 503)
is re-sent unchanged, with a short back-off, until it is acknowledged: across rounds too,
as an SDK keeps its queue while the server is down. Each round starts the server on the
same data dir, lets the load run for a random delay (seeded; the seed is printed), and
SIGKILLs it; every fourth round also SIGKILLs a start-up a few ms in, during recovery,
before the server that takes the load starts. A last round lets every client empty its queue, then stops with SIGTERM.

From `ingestd log cat` afterwards: every acknowledged (source, messageId) is there exactly
once, no (source, messageId) is there twice, and nothing is there that was never sent;
after one more restart, re-sending every acknowledged id gives only duplicates and the
log does not grow. Per response: a 200 counts every event, accepted or duplicate, and a
re-send of an id acknowledged earlier is never accepted again.

Environment: INGESTD_CRASH_SEED (reproduce the kill delays), INGESTD_CRASH_SECONDS (time
for the kill rounds, default 30; at least MIN_KILLS rounds run whatever it says).
"""

import collections
import os
import random
import signal
import subprocess
import sys
import threading
import time
import unittest

from harness import HarnessError, Server, basic, clean_env, http_request, log_cat, track

MIN_KILLS = 20
MAX_KILLS = 60
ROUNDS_SECONDS = float(os.environ.get("INGESTD_CRASH_SECONDS", "30"))
CLIENTS = 4
KEYS = ("k1:web", "k2:mobile")
NEW_PER_BATCH = 12
RESEND_PER_BATCH = 4
KILL_DELAY = (0.005, 0.35)  # seconds of load before the SIGKILL, drawn per round
RECOVERY_KILL_EVERY = 4  # every 4th round also kills a start-up (recovery) at a random instant
RECOVERY_KILL_DELAY = (0.0, 0.03)
BACKOFF = 0.01  # client retry back-off after a failed attempt (an SDK's, not a sync)
HTTP_TIMEOUT = 10


class Source:
    """The shared client-side view of one source: its id stream and what it acknowledged."""

    def __init__(self, key, name):
        self.key, self.name = key, name
        self.next_id = 0
        self.sent = set()
        self.acked = set()
        self.acked_list = []  # for drawing re-sends


class Client:
    """One SDK-like client: a queue of batches, the head re-sent until it is acknowledged."""

    def __init__(self, n, source, state):
        self.n, self.source, self.state = n, source, state
        self.rng = random.Random(state.seed * 1000 + n)
        self.queue = collections.deque()  # (batch events, n_new, resent_acked_ids)

    def make_batch(self):
        src, lock = self.source, self.state.lock
        with lock:
            new = ["m-%d" % (src.next_id + i) for i in range(NEW_PER_BATCH)]
            src.next_id += NEW_PER_BATCH
            src.sent.update(new)
            k = min(RESEND_PER_BATCH, len(src.acked_list))
            resend = self.rng.sample(src.acked_list, k) if k else []
        # The first new id twice: a duplicate inside one batch.
        mids = new + [new[0]] + resend
        events = [track(uid="u%d" % self.n, mid=m, properties={"client": self.n}) for m in mids]
        return events, len(new), resend

    def attempt(self, host, port, batch, first):
        """One POST of the queue's head. Returns True when it was acknowledged."""
        st = self.state
        events, n_new, resend = batch
        try:
            r = http_request(host, port, "POST", "/v1/batch", {"batch": events},
                             {"Authorization": basic(self.source.key)}, timeout=HTTP_TIMEOUT)
        except Exception:  # refused, reset, disconnected: the server is gone; retry later
            with st.lock:
                st.failed_attempts += 1
            return False
        if r.status != 200:
            with st.lock:
                if r.status == 503 and r.header("Retry-After") is not None:
                    st.failed_attempts += 1
                else:
                    st.errors.append("client %d: unexpected answer %r" % (self.n, r))
            return False
        j = r.json or {}
        acc, dup, rej = j.get("accepted"), j.get("duplicates"), j.get("rejected")
        with st.lock:
            if rej != [] or acc is None or dup is None or acc + dup != len(events):
                st.errors.append("client %d: 200 that does not count every event: %r"
                                 % (self.n, r))
            elif dup < len(resend) + 1:
                st.errors.append("client %d: %d re-sent acknowledged ids + 1 in-batch repeat, "
                                 "but only %d duplicates (an id accepted twice): %r"
                                 % (self.n, len(resend), dup, r))
            elif first and (acc, dup) != (n_new, len(resend) + 1):
                st.errors.append("client %d: first attempt of a batch with %d new ids: %r"
                                 % (self.n, n_new, r))
            if not first and acc < n_new:
                st.lost_acks += 1  # committed earlier, its answer was lost in a kill
            src = self.source
            for m in events[:n_new]:
                mid = m["messageId"]
                if mid not in src.acked:
                    src.acked.add(mid)
                    src.acked_list.append(mid)
            st.acked_batches += 1
        return True

    def run(self, host, port, round_over, produce):
        """Sends until round_over is set; with produce=False only empties the queue."""
        while not round_over.is_set():
            first = False
            if not self.queue:
                if not produce:
                    return
                self.queue.append(self.make_batch())
                first = True
            if self.attempt(host, port, self.queue[0], first):
                self.queue.popleft()
            else:
                time.sleep(BACKOFF)


class State:
    def __init__(self, seed):
        self.seed = seed
        self.lock = threading.Lock()
        self.errors = []
        self.failed_attempts = 0
        self.acked_batches = 0
        self.lost_acks = 0


def kill_during_start(srv, delay):
    """Starts ingestd on srv's data dir and SIGKILLs it `delay` seconds later, most likely
    while it recovers (cuts the torn tail, replays into LMDB) or before it listens."""
    p = subprocess.Popen(srv.command(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=clean_env(srv.env))
    time.sleep(delay)  # a random instant of the start-up: the point of the test
    p.kill()
    p.wait(timeout=10)


def run_round(srv, clients, delay, produce=True):
    """Starts the clients against srv; SIGKILLs it after `delay` (None: no kill)."""
    round_over = threading.Event()
    ts = [threading.Thread(target=c.run, args=(srv.host, srv.port, round_over, produce))
          for c in clients]
    for t in ts:
        t.start()
    if delay is not None:
        time.sleep(delay)  # the random instant of the kill: the point of the test
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait(timeout=10)
        srv.proc = None
        round_over.set()
    for t in ts:
        t.join(timeout=60)
        if t.is_alive():
            raise HarnessError("a client thread did not finish")
    round_over.set()


class Crash(unittest.TestCase):

    def test_kill9_under_load_keeps_every_ack_once(self):
        seed = int(os.environ.get("INGESTD_CRASH_SEED") or random.SystemRandom().randrange(1 << 31))
        print("\ntest_crash: seed %d (INGESTD_CRASH_SEED=%d reproduces the kill delays)"
              % (seed, seed), file=sys.stderr)
        rng = random.Random(seed)
        state = State(seed)
        sources = [Source(k.split(":")[0], k.split(":")[1]) for k in KEYS]
        clients = [Client(i, sources[i % len(sources)], state) for i in range(CLIENTS)]

        srv = Server(keys=KEYS, args=("--segment-bytes", "64KiB"))
        try:
            t0 = time.monotonic()
            kills = start_kills = truncated = replayed = 0
            while kills < MIN_KILLS or (kills < MAX_KILLS
                                        and time.monotonic() - t0 < ROUNDS_SECONDS):
                if kills % RECOVERY_KILL_EVERY == RECOVERY_KILL_EVERY - 1:
                    kill_during_start(srv, rng.uniform(*RECOVERY_KILL_DELAY))
                    start_kills += 1
                srv.start()  # recovery: torn tail cut, LMDB caught up from the log
                rec = srv.stats()["recovery"]
                truncated += rec["truncated_bytes"]
                replayed += rec["replayed_records"]
                run_round(srv, clients, rng.uniform(*KILL_DELAY))
                kills += 1
            rounds_s = time.monotonic() - t0

            # Last round: every client empties its queue; then a clean stop.
            srv.start()
            run_round(srv, clients, None, produce=False)
            self.assertTrue(all(not c.queue for c in clients))
            srv.stop()

            self.assertEqual(state.errors[:10], [], "%d bad answers" % len(state.errors))
            logged = [(e["source"], e["messageId"]) for e in log_cat(srv.data_dir)]
            counts = collections.Counter(logged)
            twice = sorted(k for k, c in counts.items() if c > 1)
            self.assertEqual(twice[:20], [], "%d (source, messageId) logged more than once"
                             % len(twice))
            acked = {(s.name, m) for s in sources for m in s.acked}
            sent = {(s.name, m) for s in sources for m in s.sent}
            lost = sorted(acked - set(counts))
            self.assertEqual(lost[:20], [], "%d acknowledged but not in the log" % len(lost))
            # Every client's queue is empty, so every id sent was acknowledged at last.
            self.assertEqual(set(counts), acked, "logged exactly what was acknowledged")
            self.assertTrue(set(counts) <= sent)
            by_id = collections.defaultdict(set)
            for src, mid in counts:
                by_id[mid].add(src)
            self.assertTrue(any(len(v) == 2 for v in by_id.values()),
                            "one messageId under both sources is two events")

            # After a restart, every acknowledged id is a duplicate for its own source.
            srv.start()
            for s in sources:
                ids = sorted(s.acked)
                for i in range(0, len(ids), 2000):
                    chunk = ids[i:i + 2000]
                    r = srv.batch([track(mid=m) for m in chunk], key=s.key)
                    self.assertEqual((r.status, r.json["accepted"], r.json["duplicates"]),
                                     (200, 0, len(chunk)), r)
            st = srv.stats()
            self.assertEqual(st["dedupe"]["keys"], len(acked))
            srv.stop()
            self.assertEqual(len(log_cat(srv.data_dir)), len(logged), "nothing appended")

            print("test_crash: %d kills under load + %d during start-up in %.1fs, %d events acknowledged (%s), %d batches "
                  "acknowledged, %d failed attempts retried, %d retries found their batch "
                  "already committed (answer lost in a kill); recovery cut %d torn-tail bytes and "
                  "replayed %d records into LMDB"
                  % (kills, start_kills, rounds_s, len(acked),
                     ", ".join("%s %d" % (s.name, len(s.acked)) for s in sources),
                     state.acked_batches, state.failed_attempts, state.lost_acks, truncated,
                     replayed),
                  file=sys.stderr)
            self.assertGreaterEqual(kills, MIN_KILLS)
        except BaseException:
            print("test_crash: failed with seed %d; server log:\n%s" % (seed, srv.log()),
                  file=sys.stderr)
            raise
        finally:
            srv.cleanup()


if __name__ == "__main__":
    unittest.main(verbosity=2)
