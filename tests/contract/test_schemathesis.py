"""The contract of openapi.yaml checked by schemathesis against the real binary (issue #28).

Starts `ingestd serve` (tests/integration/harness.py) with a write key and the admin token, so
every documented route is on, and runs schemathesis (pinned in requirements.txt, installed once
into a cached venv by pydeps.py) against openapi.yaml and the running server: every operation,
with property-based bodies, parameters and headers (the schema's examples, its boundary
"coverage" cases, random fuzzing), and a stateful run that follows the spec's `links` (POST
/v1/track -> GET /v1/events/{messageId} -> GET /v1/log?from=offset, ...). The checks, in
schemathesis.toml: no 5xx (not_a_server_error), no status, Content-Type, header or body the
response does not declare (status_code_, content_type_, response_headers_ and
response_schema_conformance), and no request the spec calls valid refused
(positive_data_acceptance: the spec must not be looser than the server's validation).

Bounded and repeatable: deterministic generation (the same cases every run, no seed), and
--max-examples per operation (CONTRACT_MAX_EXAMPLES, default below), so the test takes about
2-3 minutes on 2 cores.

    cd tests/contract && INGESTD_BIN=../../build/ingestd python3 test_schemathesis.py -v
"""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import harness  # noqa: E402
import pydeps  # noqa: E402

SPEC = os.path.abspath(
    os.environ.get("INGESTD_OPENAPI") or os.path.join(HERE, "..", "..", "openapi.yaml"))
CONFIG = os.path.join(HERE, "schemathesis.toml")
MAX_EXAMPLES = os.environ.get("CONTRACT_MAX_EXAMPLES", "10")
RUN_TIMEOUT = 600  # the run takes ~2 min; this only bounds a hang

WRITE_KEY = "contract-key"
ADMIN_TOKEN = "contract-admin-token"


class SchemathesisContract(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.st = pydeps.ensure()

    def test_contract(self):
        report_dir = tempfile.mkdtemp(prefix="ingestd-contract-")
        srv = harness.Server(keys=[WRITE_KEY], args=["--admin-token", ADMIN_TOKEN])
        with srv:
            env = dict(os.environ, CONTRACT_WRITE_KEY=WRITE_KEY, CONTRACT_ADMIN_TOKEN=ADMIN_TOKEN,
                       NO_COLOR="1", SCHEMATHESIS_TELEMETRY="false")
            cmd = [self.st, "--config-file", CONFIG, "run", SPEC,
                   "--url", "http://%s:%d" % (srv.host, srv.port),
                   "--phases", "examples,coverage,fuzzing,stateful",
                   "--max-examples", MAX_EXAMPLES,
                   "--generation-deterministic",
                   "--workers", "1",
                   "--report", "junit", "--report-dir", report_dir,
                   "--no-color"]
            print("running:", " ".join(cmd), flush=True)
            # cwd: schemathesis caches its failures in the working folder, kept out of the tree.
            p = subprocess.run(cmd, cwd=report_dir, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=RUN_TIMEOUT)
            print(p.stdout, flush=True)
            # The server must also have survived every request.
            self.assertIsNone(srv.proc.poll(), "ingestd died during the run:\n%s" % srv.log())
        self.assertEqual(p.returncode, 0, "schemathesis found a contract violation (above); "
                         "the JUnit report is in %s" % report_dir)


if __name__ == "__main__":
    unittest.main()
