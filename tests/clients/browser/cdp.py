"""Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe).

No WebDriver, no npm package, no port: Chromium reads protocol commands from fd 3 and writes
answers and events to fd 4, each message one JSON text ended by a NUL byte. Python 3 standard
library only.

    with Browser(tmpdir) as b:
        page = b.open("http://127.0.0.1:8080/dashboard")
        page.eval("document.title")          # Runtime.evaluate, by value, promises awaited
        page.screenshot("out.png", 1400, 1000)
"""

import base64
import select
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time

COMMAND_TIMEOUT = 30.0


class CdpError(AssertionError):
    pass


def chromium_path():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    raise CdpError("chromium not found: run scripts/install-deps (Debian's chromium)")


def _high_fd(fd):
    """A close-on-exec copy of fd numbered 10 or more (so dup2 onto 3 and 4 cannot clobber it)."""
    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return new


class Page:
    """One tab, attached in flat mode: its commands carry the session id."""

    def __init__(self, browser, session):
        self.browser = browser
        self.session = session

    def send(self, method, **params):
        return self.browser.send(method, params, self.session)

    def eval(self, expression):
        """The value of `expression` in the page (awaited when it is a promise)."""
        r = self.send("Runtime.evaluate", expression=expression, returnByValue=True,
                      awaitPromise=True)
        if "exceptionDetails" in r:
            raise CdpError("page threw evaluating %r: %s"
                           % (expression[:200], json.dumps(r["exceptionDetails"])[:1500]))
        return r["result"].get("value")

    def wait(self, expression, timeout, what):
        """Polls `expression` until it is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = self.eval(expression)
            if last:
                return last
            time.sleep(0.1)
        raise CdpError("timed out after %.0fs waiting for %s (last value %r)"
                       % (timeout, what, last))

    def screenshot(self, path, width, height):
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)
        self.eval("window.dispatchEvent(new Event('resize')), true")
        time.sleep(1.2)  # one refresh draws the charts at the new size
        png = base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"])
        with open(path, "wb") as f:
            f.write(png)
        return png


class Browser:
    """Debian's chromium, headless, with a throw-away profile under `tmpdir`."""

    def __init__(self, tmpdir):
        self.tmpdir = tmpdir
        self.proc = None
        self.next_id = 0
        self.buf = b""
        self.log_path = os.path.join(tmpdir, "chromium.log")

    def start(self):
        profile = tempfile.mkdtemp(prefix="profile-", dir=self.tmpdir)
        cmd_r, cmd_w = (_high_fd(fd) for fd in os.pipe())
        res_r, res_w = (_high_fd(fd) for fd in os.pipe())
        # The flags of test_browser.py: no sandbox (containers), nothing but loopback resolves,
        # so a page that tried a CDN would fail to load instead of passing by luck.
        cmd = [chromium_path(), "--headless", "--no-sandbox", "--disable-gpu",
               "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
               "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--user-data-dir=" + profile,
               "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
               "--remote-debugging-pipe", "about:blank"]

        def fds():  # in the child, before exec: the protocol's fds 3 (in) and 4 (out)
            os.dup2(cmd_r, 3)
            os.dup2(res_w, 4)

        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         preexec_fn=fds, close_fds=False)
        os.close(cmd_r)
        os.close(res_w)
        self.wfd, self.rfd = cmd_w, res_r
        return self

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-3000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def _read_message(self, deadline):
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CdpError("no answer from chromium in time; its log:\n" + self.log())
            ready, _, _ = select.select([self.rfd], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.rfd, 1 << 20)
            if not chunk:
                raise CdpError("chromium closed the pipe (exit %s); its log:\n%s"
                               % (self.proc.poll(), self.log()))
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method, params=None, session=None):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.wfd, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + COMMAND_TIMEOUT
        while True:
            r = self._read_message(deadline)
            if r.get("id") != self.next_id:
                continue  # an event, or an answer nobody waits for any more
            if "error" in r:
                raise CdpError("%s failed: %s" % (method, r["error"]))
            return r.get("result", {})

    def open(self, url):
        """A new tab on `url`, attached; returns its Page once the document has loaded."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})
        page = Page(self, session["sessionId"])
        page.send("Page.enable")
        page.send("Runtime.enable")
        page.send("Page.navigate", url=url)
        page.wait("document.readyState === 'complete' && location.href === %s" % json.dumps(url),
                  COMMAND_TIMEOUT, "the page to load")
        return page

    def close(self):
        if self.proc is None:
            return
        for fd in (self.wfd, self.rfd):
            try:
                os.close(fd)
            except OSError:
                pass
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()
