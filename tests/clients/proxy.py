"""A dropping HTTP proxy for SDK tests: forwards every request to ingestd, then loses some answers.

Python 3 standard library only. It stands where a load balancer or a flaky mobile network
stands in production: ingestd has already accepted (and fsynced) the batch, but the client
never learns it, so a correct SDK sends the *same* batch again with the *same* messageIds,
and ingestd must answer the retry as duplicates instead of appending the events twice.

Which answers are lost is deterministic: among the requests that carry a set of messageIds
the proxy has not forwarded before (first attempts, not retries), every `drop_every`-th one
whose upstream answer was a 200 is lost. A retry is never dropped again, so each SDK gets its
batch through with one retry, well inside its retry budget, and the test cannot flake on an
unlucky run of drops. Losses alternate between the two ways a gateway loses an answer:

- "close": the client connection is closed without a byte of response (the SDK sees a
  reset / "socket hang up" / "other side closed"), and
- "502":   a 502 Bad Gateway JSON error, as nginx sends when its upstream connection breaks.

Every SDK under test retries both (network errors and 5xx). The proxy records what it did per
request (`records`), with the messageIds it found in the body (gzip/deflate bodies decoded), the
Content-Encoding and where the write key was (Basic auth or the body), so the test can check
that each dropped batch really came back and how the SDK sent it.

`refuse=(429, 503)` answers the first new batches with those statuses instead of forwarding
them (as ingestd answers a rate-limited key or a full commit queue: a JSON error and
`Retry-After: 1`), to see which the SDK retries. `tls=(cert, key)` serves HTTPS, and
`upstream_ssl` (an ssl.SSLContext) reaches an ingestd that serves HTTPS itself.

    p = DroppingProxy("127.0.0.1", ingestd_port, drop_every=3).start()
    ... point the SDK at p.url ...
    p.stop(); p.records, p.dropped()

Also runs stand-alone: python3 proxy.py --upstream 127.0.0.1:8080 [--listen 127.0.0.1:0]
"""

import argparse
import http.client
import http.server
import json
import socket
import ssl
import threading
import zlib

# Hop-by-hop headers (RFC 9110 7.6.1) are the proxy's own business on each leg, never forwarded.
_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
        "upgrade", "host", "content-length"}


def message_ids(body, encoding):
    """The messageIds of a Segment-style body (batch or single event); None when not readable."""
    doc = decode_body(body, encoding)
    if not isinstance(doc, dict):
        return None
    events = doc.get("batch") if isinstance(doc.get("batch"), list) else [doc]
    return tuple(e.get("messageId") for e in events if isinstance(e, dict))


def decode_body(body, encoding):
    """The JSON document of a (gzip/deflate) body; None when not readable."""
    try:
        enc = (encoding or "").strip().lower()
        if enc in ("gzip", "x-gzip"):
            body = zlib.decompress(body, 16 + zlib.MAX_WBITS)
        elif enc == "deflate":
            body = zlib.decompress(body)
        doc = json.loads(body.decode("utf-8"))
    except (ValueError, zlib.error, UnicodeDecodeError):
        return None
    return doc


class Record:
    """What the proxy did with one request."""

    def __init__(self, path, ids, status, action, encoding=None, key_in=None):
        self.path = path
        self.ids = ids          # tuple of messageIds, or None when the body was not readable
        self.status = status    # ingestd's status code, or None when ingestd was not reached
        self.action = action    # "forwarded", "close", "502", or "refused" (not forwarded)
        self.encoding = encoding  # the request's Content-Encoding, lower case, or None
        self.key_in = key_in    # "basic", "body", "basic+body" or None: where the write key was

    def __repr__(self):
        return "<%s %s -> %s, %d ids, %s, key in %s>" % (
            self.path, self.action, self.status, len(self.ids or ()), self.encoding or "identity",
            self.key_in)


class DroppingProxy:
    def __init__(self, upstream_host, upstream_port, drop_every=3, listen_host="127.0.0.1",
                 listen_port=0, upstream_timeout=30.0, refuse=(), tls=None, upstream_ssl=None):
        if drop_every < 1:
            raise ValueError("drop_every must be >= 1")
        self.upstream = (upstream_host, upstream_port)
        self.drop_every = drop_every
        self.upstream_timeout = upstream_timeout
        self.refuse = tuple(refuse)
        self.upstream_ssl = upstream_ssl
        self._refused = 0
        self.records = []
        self._lock = threading.Lock()
        self._seen = set()      # messageId sets forwarded at least once
        self._first_attempts = 0
        self._drops = 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            # HTTP/1.1 so SDKs keep their connections alive, as they do against a real gateway.
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):  # quiet: the test reports what matters
                pass

            def do_POST(self):
                proxy._handle(self)

            do_GET = do_POST
            do_PUT = do_POST
            do_OPTIONS = do_POST

        self._server = http.server.ThreadingHTTPServer((listen_host, listen_port), Handler)
        self._server.daemon_threads = True
        self.scheme = "http"
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            # The handshake happens on the handler's first read, in its own thread, so a slow
            # client does not hold up accept().
            self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True,
                                                  do_handshake_on_connect=False)
            self.scheme = "https"
        self._thread = None

    @property
    def port(self):
        return self._server.server_address[1]

    @property
    def url(self):
        return "%s://%s:%d" % (self.scheme, self._server.server_address[0], self.port)

    def start(self):
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Stops listening; idempotent."""
        if self._thread is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
        self._thread = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ---- what happened -------------------------------------------------------

    def snapshot(self):
        with self._lock:
            return list(self.records)

    def dropped(self):
        """Requests ingestd accepted whose answer the client never got."""
        return [r for r in self.snapshot() if r.action in ("close", "502")]

    # ---- one request ---------------------------------------------------------

    @staticmethod
    def _read_body(h):
        if "chunked" in (h.headers.get("Transfer-Encoding") or "").lower():
            parts = []
            while True:
                size = int(h.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while h.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(h.rfile.read(size))
                h.rfile.readline()  # CRLF after the chunk
        return h.rfile.read(int(h.headers.get("Content-Length") or 0))

    def _decide(self, ids, status):
        """'forwarded', 'close' or '502' for a request ingestd answered with `status`."""
        with self._lock:
            first = ids is not None and ids not in self._seen
            if ids is not None:
                self._seen.add(ids)
            if not first:
                return "forwarded"
            self._first_attempts += 1
            # Only lose answers of requests ingestd accepted: the point is a retry of a batch
            # that is already durable, which ingestd must recognise as duplicates.
            if status != 200 or self._first_attempts % self.drop_every != 0:
                return "forwarded"
            self._drops += 1
            return "close" if self._drops % 2 == 1 else "502"

    def _refusal(self, ids):
        """The status to answer instead of forwarding (the next of `refuse` for a new batch)."""
        with self._lock:
            if ids is None or ids in self._seen or self._refused >= len(self.refuse):
                return None
            self._refused += 1
            return self.refuse[self._refused - 1]

    @staticmethod
    def _key_in(h, doc):
        where = []
        if (h.headers.get("Authorization") or "").lower().startswith("basic "):
            where.append("basic")
        if isinstance(doc, dict) and doc.get("writeKey"):
            where.append("body")
        return "+".join(where) or None

    def _handle(self, h):
        body = self._read_body(h)
        encoding = (h.headers.get("Content-Encoding") or "").strip().lower() or None
        doc = decode_body(body, encoding)
        ids = message_ids(body, encoding)
        key_in = self._key_in(h, doc)
        refused = self._refusal(ids)
        if refused is not None:
            self._record(Record(h.path, ids, refused, "refused", encoding, key_in))
            self._send(h, refused, [("Content-Type", "application/json"), ("Retry-After", "1")],
                       json.dumps({"success": False,
                                   "error": "refused with %d by the test proxy" % refused}).encode())
            return
        headers = {k: v for k, v in h.headers.items() if k.lower() not in _HOP}
        status, rheaders, rbody = None, [], b""
        try:
            if self.upstream_ssl is not None:
                conn = http.client.HTTPSConnection(*self.upstream, timeout=self.upstream_timeout,
                                                   context=self.upstream_ssl)
            else:
                conn = http.client.HTTPConnection(*self.upstream, timeout=self.upstream_timeout)
            try:
                conn.request(h.command, h.path, body=body, headers=headers)
                resp = conn.getresponse()
                status, rheaders, rbody = resp.status, resp.getheaders(), resp.read()
            finally:
                conn.close()
        except OSError as e:
            self._record(Record(h.path, ids, None, "forwarded", encoding, key_in))
            self._send(h, 502, [("Content-Type", "application/json")],
                       json.dumps({"success": False, "error": "upstream: %s" % e}).encode())
            return
        action = self._decide(ids, status)
        self._record(Record(h.path, ids, status, action, encoding, key_in))
        if action == "close":
            # Lose the answer the way a broken network does: no status line, connection gone.
            h.close_connection = True
            try:
                h.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if action == "502":
            self._send(h, 502, [("Content-Type", "application/json")],
                       b'{"success":false,"error":"bad gateway (dropped by test proxy)"}')
            return
        self._send(h, status, [(k, v) for k, v in rheaders if k.lower() not in _HOP], rbody)

    def _record(self, rec):
        with self._lock:
            self.records.append(rec)

    @staticmethod
    def _send(h, status, headers, body):
        h.send_response(status)
        for k, v in headers:
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
        h.wfile.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--upstream", required=True, help="ingestd HOST:PORT")
    ap.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (default 127.0.0.1:0)")
    ap.add_argument("--drop-every", type=int, default=3)
    a = ap.parse_args()
    uh, up = a.upstream.rsplit(":", 1)
    lh, lp = a.listen.rsplit(":", 1)
    p = DroppingProxy(uh, int(up), a.drop_every, lh, int(lp)).start()
    print("proxy listening on %s -> %s" % (p.url, a.upstream), flush=True)
    try:
        p._thread.join()
    except KeyboardInterrupt:
        p.stop()


if __name__ == "__main__":
    main()
