#!/usr/bin/env python3
"""Memory unauthenticated clients can pin (issue 16, item 2): N connections each send the head
and all but 1,000 bytes of a 500,000-byte body with no key in the headers (so the server must
buffer it before it can check the key in it) and hold; prints the server's RSS before and
while they hold.

    load/body_memory.py build/ingestd [N] [-- SERVE FLAGS...]
"""
import socket
import sys
import time

from refusals import start, stop


def rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return -1


def main():
    args = sys.argv[1:]
    flags = args[args.index("--") + 1:] if "--" in args else []
    args = args[:args.index("--")] if "--" in args else args
    binary, n, cl = args[0], int(args[1]) if len(args) > 1 else 1000, 500000
    # All connections come from loopback: the per-address share (a quarter of
    # --max-connections by default) would hold them to n / 2, and the figure is about memory.
    p, port, d = start(binary, ["--threads", "2", "--max-connections", str(2 * n),
                                "--max-connections-per-ip", "0"] + flags)
    before = rss_mib(p.pid)
    head = (b"POST /v1/batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % cl)
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(head + b" " * (cl - 1000))
        socks.append(s)
    # RSS settles once the server has read what was sent: sample until it stops moving.
    last, same = -1, 0
    while same < 5:
        time.sleep(0.2)  # the sampling interval of a measurement
        now = rss_mib(p.pid)
        same = same + 1 if now == last else 0
        last = now
    for s in socks:
        s.close()
    stop(p, d)
    print("%d connections x %d bytes buffered: RSS %d MiB before, %d MiB while they hold"
          % (n, cl - 1000, before, last))


if __name__ == "__main__":
    main()
