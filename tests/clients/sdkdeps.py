"""Installs the pinned Python, Go and Java SDKs once and builds their senders, like nodedeps.py.

Python 3 standard library only. Each `ensure_*()` does its work only when its stamp is missing
or was made from other inputs (the stamp holds a hash of the files it was built from), so a
test run pays for pip, `go build` or Maven once:

- ensure_python(): a venv with python/requirements.txt (exact versions) installed by pip;
  returns the venv's python.
- ensure_go():     go/'s two senders built with `go build` (module cache as usual, versions from
  go/go.mod and go/go.sum, GOFLAGS=-mod=mod); returns {name: binary}.
- ensure_java():   java/pom.xml's class path resolved by `mvn dependency:build-classpath`,
  java/src compiled with javac; returns the class path to run it with.

Everything goes under one cache directory: $INGESTD_CLIENTS_CACHE (tests/CMakeLists.txt points
it into the build directory), else ~/.cache/ingestd/clients. The registries' own caches (pip's,
Go's module cache, ~/.m2) are used as usual. A failure raises SdkDepsError with the tool's own
output, so CI says why (no network, no go, a refused version) instead of an import error.

    python3 sdkdeps.py [python|go|java ...]   # the same from a shell
"""

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
STAMP_NAME = ".ingestd-installed"
TOOL_TIMEOUT = 900  # a cold install on a slow mirror; far above the measured cold times


class SdkDepsError(AssertionError):
    pass


def cache_dir():
    d = os.environ.get("INGESTD_CLIENTS_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "ingestd", "clients")
    os.makedirs(d, exist_ok=True)
    return d


def _digest(paths, extra=""):
    """Hash of the files (relative to HERE; folders walked, sorted) and of `extra`."""
    h = hashlib.sha256(extra.encode() + b"\0")
    files = []
    for p in paths:
        full = os.path.join(HERE, p)
        if os.path.isdir(full):
            for root, dirs, names in os.walk(full):
                dirs.sort()
                files += [os.path.join(root, n) for n in sorted(names)]
        else:
            files.append(full)
    for f in files:
        with open(f, "rb") as fh:
            h.update(os.path.relpath(f, HERE).encode() + b"\0" + fh.read() + b"\0")
    return h.hexdigest()


def _stamped(target, digest):
    try:
        with open(os.path.join(target, STAMP_NAME)) as f:
            return f.read().strip() == digest
    except OSError:
        return False


@contextlib.contextmanager
def _locked(target):
    """Two test processes (ctest -j) must not build into one folder at once."""
    with open(target + ".lock", "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)
        yield


def _run(cmd, cwd=None, env=None):
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=TOOL_TIMEOUT)
    except FileNotFoundError as e:
        raise SdkDepsError("`%s` cannot run: %s" % (" ".join(cmd), e))
    except subprocess.TimeoutExpired:
        raise SdkDepsError("`%s` did not finish within %ds" % (" ".join(cmd), TOOL_TIMEOUT))
    if p.returncode != 0:
        raise SdkDepsError("`%s` failed (exit %d):\n%s\n%s" % (
            " ".join(cmd), p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
    return p.stdout


def _build(name, inputs, extra, build):
    """Runs build(tmp) into a fresh folder, then moves it to cache/name with its stamp, unless
    cache/name already holds a build of the same inputs. Returns (path, built)."""
    target = os.path.join(cache_dir(), name)
    digest = _digest(inputs, extra)
    if _stamped(target, digest):
        return target, False
    with _locked(target):
        if _stamped(target, digest):
            return target, False
        tmp = target + ".new"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        build(tmp)
        with open(os.path.join(tmp, STAMP_NAME), "w") as f:
            f.write(digest + "\n")
        shutil.rmtree(target, ignore_errors=True)
        os.rename(tmp, target)
    return target, True


def _which(tool, hint):
    path = shutil.which(tool)
    if path is None:
        raise SdkDepsError("%s not found: %s" % (tool, hint))
    return path


# ---- Python ---------------------------------------------------------------------------------

def ensure_python():
    """Returns the venv's python with python/requirements.txt installed."""
    def build(tmp):
        _run([sys.executable, "-m", "venv", tmp])
        _run([os.path.join(tmp, "bin", "python"), "-m", "pip", "install", "--quiet",
              "--no-input", "--disable-pip-version-check", "--require-virtualenv",
              "-r", os.path.join(HERE, "python", "requirements.txt")])

    # The venv is tied to the interpreter that made it.
    target, _ = _build("python-venv", ["python/requirements.txt"], sys.version, build)
    return os.path.join(target, "bin", "python")


# ---- Go -------------------------------------------------------------------------------------

GO_SENDERS = ("segment", "rudder")


def go_env():
    env = dict(os.environ)
    env["GOFLAGS"] = "-mod=mod"
    return env


def ensure_go():
    """Returns {sender name: built binary} for go/'s senders."""
    go = _which("go", "the machine's Go toolchain (1.23 or later, as go/go.mod says) is "
                "needed on PATH")

    def build(tmp):
        _run([go, "build", "-trimpath", "-o", tmp + "/"] +
             ["./" + s for s in GO_SENDERS], cwd=os.path.join(HERE, "go"), env=go_env())

    version = _run([go, "version"]).strip()
    target, _ = _build("go-senders", ["go"], version, build)
    return {s: os.path.join(target, s) for s in GO_SENDERS}


# ---- Java -----------------------------------------------------------------------------------

JAVA_MAIN = "ingestd.clients.Send"


def ensure_java():
    """Returns the class path (str) that runs JAVA_MAIN."""
    mvn = _which("mvn", "Maven is needed (Debian's maven package)")
    javac = _which("javac", "a JDK (17 or later) is needed")

    def build(tmp):
        cp_file = os.path.join(tmp, "classpath.txt")
        _run([mvn, "-q", "-B", "dependency:build-classpath", "-Dmdep.outputFile=" + cp_file],
             cwd=os.path.join(HERE, "java"))
        with open(cp_file) as f:
            cp = f.read().strip()
        src = os.path.join(HERE, "java", "src", "main", "java")
        sources = [os.path.join(r, n) for r, _, ns in os.walk(src) for n in ns
                   if n.endswith(".java")]
        _run([javac, "--release", "17", "-d", os.path.join(tmp, "classes"), "-cp", cp] + sources)

    version = _run([javac, "-version"]).strip()
    target, _ = _build("java-sender", ["java/pom.xml", "java/src"], version, build)
    with open(os.path.join(target, "classpath.txt")) as f:
        jars = f.read().strip()
    if not all(os.path.isfile(j) for j in jars.split(os.pathsep)):
        # The jars live in Maven's own repository (~/.m2), which may have been cleaned since.
        os.remove(os.path.join(target, STAMP_NAME))
        return ensure_java()
    return os.path.join(target, "classes") + os.pathsep + jars


_results = {}


def once(what):
    """ensure_<what>() at most once per process: (its result, "") or (None, the error's text),
    so every test of a module fails with the tool's message instead of retrying the install."""
    if what not in _results:
        try:
            _results[what] = ({"python": ensure_python, "go": ensure_go,
                               "java": ensure_java}[what](), "")
        except SdkDepsError as e:
            _results[what] = (None, str(e))
    return _results[what]


if __name__ == "__main__":
    which = sys.argv[1:] or ["python", "go", "java"]
    for w in which:
        print(w, {"python": ensure_python, "go": ensure_go, "java": ensure_java}[w]())
