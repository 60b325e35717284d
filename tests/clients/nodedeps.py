"""Installs the npm packages of a package-lock.json into the node_modules beside it.

By default the SDKs of tests/clients/; tests/clients/browser/ calls it for its own lock file.
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
STAMP_NAME = ".ingestd-installed"  # in node_modules: the hash of what it was installed from
PACKAGES = ("@segment/analytics-node", "analytics-node", "@rudderstack/rudder-sdk-node")
MIN_NODE_MAJOR = 18  # Debian 12's nodejs; every pinned SDK version accepts it (package.json)
NPM_TIMEOUT = 600


class NodeDepsError(AssertionError):
    pass


def _digest(here):
    h = hashlib.sha256()
    for name in ("package.json", "package-lock.json"):
        with open(os.path.join(here, name), "rb") as f:
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


def _installed(here, digest, packages):
    modules = os.path.join(here, "node_modules")
    try:
        with open(os.path.join(modules, STAMP_NAME)) as f:
            if f.read().strip() != digest:
                return False
    except OSError:
        return False
    return all(os.path.isfile(os.path.join(modules, p, "package.json")) for p in packages)


# --omit=optional: RudderStack's optional Redis queue (bull, ioredis, a native msgpack build) is
# not used here; --ignore-scripts: no dependency needs one.
SDK_NPM_ARGS = ("--omit=optional", "--ignore-scripts")


def ensure(here=HERE, packages=PACKAGES, npm_args=SDK_NPM_ARGS):
    """Makes here/node_modules match here/package-lock.json (npm ci), unless it already does;
    checks that `packages` are there. Returns True when it installed."""
    node_version()
    digest = _digest(here)
    if _installed(here, digest, packages):
        return False
    # Two test processes (e.g. ctest -j) must not run npm ci into the same folder at once;
    # the lock file is the one file npm ci never rewrites.
    with open(os.path.join(here, "package-lock.json"), "rb") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)
        if _installed(here, digest, packages):
            return False
        cmd = ["npm", "ci"] + list(npm_args) + ["--no-audit", "--no-fund", "--loglevel=error"]
        try:
            p = subprocess.run(cmd, cwd=here, stdin=subprocess.DEVNULL, capture_output=True,
                               text=True, timeout=NPM_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise NodeDepsError("`%s` in %s did not finish within %ds"
                                % (" ".join(cmd), here, NPM_TIMEOUT))
        if p.returncode != 0:
            raise NodeDepsError("`%s` in %s failed (exit %d):\n%s\n%s"
                                % (" ".join(cmd), here, p.returncode, p.stdout[-3000:],
                                   p.stderr[-3000:]))
        modules = os.path.join(here, "node_modules")
        missing = [pkg for pkg in packages
                   if not os.path.isfile(os.path.join(modules, pkg, "package.json"))]
        if missing:
            raise NodeDepsError("npm ci succeeded but did not install %s" % ", ".join(missing))
        with open(os.path.join(modules, STAMP_NAME), "w") as f:
            f.write(digest + "\n")
    return True


if __name__ == "__main__":
    print("installed" if ensure() else "already up to date")
