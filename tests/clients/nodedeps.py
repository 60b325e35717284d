"""Installs the SDKs of tests/clients/package-lock.json into tests/clients/node_modules.

Python 3 standard library only. `ensure()` runs `npm ci` only when node_modules is missing or
was installed from another package.json / package-lock.json (a stamp file in node_modules
holds their hash), so a test run pays for the install once. Failures raise NodeDepsError with
npm's own output, so CI says why (no network, no npm, wrong Node) instead of a module error.

    python3 nodedeps.py        # the same from a shell
"""

import fcntl
import hashlib
import os
import re
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
NODE_MODULES = os.path.join(HERE, "node_modules")
STAMP = os.path.join(NODE_MODULES, ".ingestd-installed")
PACKAGES = ("@segment/analytics-node", "analytics-node", "@rudderstack/rudder-sdk-node")
MIN_NODE_MAJOR = 18  # Debian 12's nodejs; every pinned SDK version accepts it (package.json)
NPM_TIMEOUT = 600


class NodeDepsError(AssertionError):
    pass


def _digest():
    h = hashlib.sha256()
    for name in ("package.json", "package-lock.json"):
        with open(os.path.join(HERE, name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read() + b"\0")
    return h.hexdigest()


def node_version():
    """Node's major version; raises NodeDepsError when node or npm is missing or too old."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            raise NodeDepsError("%s not found: install Debian's nodejs and npm "
                                "(scripts/install-deps does)" % tool)
    out = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=30)
    m = re.match(r"v(\d+)\.", out.stdout.strip())
    if out.returncode != 0 or not m:
        raise NodeDepsError("node --version failed: %r %r" % (out.stdout, out.stderr))
    major = int(m.group(1))
    if major < MIN_NODE_MAJOR:
        raise NodeDepsError("node %s is older than %d, which the pinned SDKs need"
                            % (out.stdout.strip(), MIN_NODE_MAJOR))
    return major


def _installed(digest):
    try:
        with open(STAMP) as f:
            if f.read().strip() != digest:
                return False
    except OSError:
        return False
    return all(os.path.isfile(os.path.join(NODE_MODULES, p, "package.json")) for p in PACKAGES)


def ensure():
    """Makes node_modules match package-lock.json (npm ci), unless it already does."""
    node_version()
    digest = _digest()
    if _installed(digest):
        return False
    # Two test processes (e.g. ctest -j) must not run npm ci into the same folder at once;
    # the lock file is the one file npm ci never rewrites.
    with open(os.path.join(HERE, "package-lock.json"), "rb") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)
        if _installed(digest):
            return False
        # --omit=optional: RudderStack's optional Redis queue (bull, ioredis, a native
        # msgpack build) is not used here; --ignore-scripts: no dependency needs one.
        cmd = ["npm", "ci", "--omit=optional", "--ignore-scripts", "--no-audit", "--no-fund",
               "--loglevel=error"]
        try:
            p = subprocess.run(cmd, cwd=HERE, stdin=subprocess.DEVNULL, capture_output=True,
                               text=True, timeout=NPM_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise NodeDepsError("`%s` in %s did not finish within %ds"
                                % (" ".join(cmd), HERE, NPM_TIMEOUT))
        if p.returncode != 0:
            raise NodeDepsError("`%s` in %s failed (exit %d):\n%s\n%s"
                                % (" ".join(cmd), HERE, p.returncode, p.stdout[-3000:],
                                   p.stderr[-3000:]))
        missing = [pkg for pkg in PACKAGES
                   if not os.path.isfile(os.path.join(NODE_MODULES, pkg, "package.json"))]
        if missing:
            raise NodeDepsError("npm ci succeeded but did not install %s" % ", ".join(missing))
        with open(STAMP, "w") as f:
            f.write(digest + "\n")
    return True


if __name__ == "__main__":
    print("installed" if ensure() else "already up to date")
