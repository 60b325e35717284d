#!/usr/bin/env python3
"""Refusals that must reach the client (issue 16, item 1), as a client that writes its whole body
before it reads sees them: Python's urllib posts a ~640 KB batch (over the 500 KB cap) TRIES
times to a fresh `ingestd serve` and counts the 400 JSON answers with a requestId against the
connection errors (EPIPE, ECONNRESET) a server that refuses without lingering causes.

    load/refusals.py build/ingestd [TRIES]
"""
import base64
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


def start(binary, args=()):
    """Starts `serve` on a free port; returns (process, port, data dir)."""
    d = tempfile.mkdtemp(prefix="ingestd-load-")
    log = open(d + ".log", "w")
    p = subprocess.Popen([binary, "serve", "--listen", "127.0.0.1:0", "--data", d,
                          "--write-key", "k"] + list(args), stderr=log)
    end = time.monotonic() + 20
    while time.monotonic() < end:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(d + ".log").read())
        if m:
            return p, int(m.group(1)), d
        time.sleep(0.05)  # polls the log for the start line
    p.kill()
    sys.exit("the server did not start; see %s.log" % d)


def stop(p, d):
    p.terminate()
    p.wait()
    shutil.rmtree(d, ignore_errors=True)


def main():
    binary = sys.argv[1]
    tries = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    p, port, d = start(binary)
    body = json.dumps({"batch": [{"type": "track", "event": "E", "userId": "u",
                                  "properties": {"p": "x" * 1000}}] * 600}).encode()
    auth = "Basic " + base64.b64encode(b"k:").decode()
    answered, errors = 0, {}
    for _ in range(tries):
        req = urllib.request.Request("http://127.0.0.1:%d/v1/batch" % port, data=body,
                                     headers={"Content-Type": "application/json",
                                              "Authorization": auth})
        try:
            urllib.request.urlopen(req, timeout=20)
        except urllib.error.HTTPError as e:
            answered += e.code == 400 and "requestId" in json.loads(e.read())
        except OSError as e:
            why = e.reason if isinstance(e, urllib.error.URLError) else e
            errors[type(why).__name__] = errors.get(type(why).__name__, 0) + 1
    stop(p, d)
    print("%d/%d got the 400 JSON with its requestId; connection errors: %s"
          % (answered, tries, errors or "none"))


if __name__ == "__main__":
    main()
