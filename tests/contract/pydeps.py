"""Installs the pinned Python packages of requirements.txt (schemathesis) into a cached venv.

Python 3 standard library only. `ensure()` creates the venv and runs `pip install` only when the
venv is missing or was installed from another requirements.txt or another Python (a stamp file
in the venv holds their hash), so a test run pays for the install once, like
tests/clients/nodedeps.py does for npm. The venv lives in a cache folder outside the source
tree: $INGESTD_CACHE_DIR, else $XDG_CACHE_HOME/ingestd, else ~/.cache/ingestd. Every package,
dependencies included, is pinned in requirements.txt and installed with --no-deps, so nothing
unpinned comes in; `pip check` then proves the set complete. Failures raise PyDepsError with
pip's own output, so CI says why (no network, no PyPI) instead of an import error.

    python3 pydeps.py        # the same from a shell; prints the venv's bin folder
"""

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REQUIREMENTS = os.path.join(HERE, "requirements.txt")
STAMP_NAME = ".ingestd-installed"  # in the venv: the hash of what it was installed from
PIP_TIMEOUT = 900


class PyDepsError(AssertionError):
    pass


def cache_dir():
    d = os.environ.get("INGESTD_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "ingestd")
    return d


def _digest(requirements):
    h = hashlib.sha256()
    with open(requirements, "rb") as f:
        h.update(f.read())
    # A venv is bound to the interpreter that made it.
    h.update(b"\0" + sys.version.encode() + b"\0" + os.path.realpath(sys.executable).encode())
    return h.hexdigest()


def _installed(venv, digest, tool):
    try:
        with open(os.path.join(venv, STAMP_NAME)) as f:
            if f.read().strip() != digest:
                return False
    except OSError:
        return False
    return os.access(os.path.join(venv, "bin", tool), os.X_OK)


def _run(cmd, what):
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=PIP_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise PyDepsError("%s did not finish within %ds: %s" % (what, PIP_TIMEOUT, " ".join(cmd)))
    if p.returncode != 0:
        raise PyDepsError("%s failed (exit %d): %s\n%s\n%s"
                          % (what, p.returncode, " ".join(cmd), p.stdout[-3000:],
                             p.stderr[-3000:]))


def ensure(requirements=REQUIREMENTS, name="schemathesis", tool="st"):
    """Makes the cached venv `name` hold exactly `requirements`, unless it already does.
    Returns the path of the venv's `tool` executable."""
    digest = _digest(requirements)
    venv = os.path.join(cache_dir(), "venv-%s-%s" % (name, digest[:12]))
    exe = os.path.join(venv, "bin", tool)
    if _installed(venv, digest, tool):
        return exe
    os.makedirs(cache_dir(), exist_ok=True)
    # Two test processes (ctest -j) must not build the same venv at once.
    with open(os.path.join(cache_dir(), ".%s.lock" % name), "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)
        if _installed(venv, digest, tool):
            return exe
        shutil.rmtree(venv, ignore_errors=True)  # a half-made venv from an interrupted run
        _run([sys.executable, "-m", "venv", venv], "creating the venv")
        pip = [os.path.join(venv, "bin", "python"), "-m", "pip"]
        _run(pip + ["install", "--quiet", "--disable-pip-version-check", "--no-deps",
                    "-r", requirements], "pip install")
        _run(pip + ["check"], "pip check (requirements.txt misses a dependency)")
        if not os.access(exe, os.X_OK):
            raise PyDepsError("pip install succeeded but %s is missing" % exe)
        with open(os.path.join(venv, STAMP_NAME), "w") as f:
            f.write(digest + "\n")
    return exe


if __name__ == "__main__":
    print(os.path.dirname(ensure()))
