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

The stateful phase must really follow the links: the test reads schemathesis's NDJSON event
report and fails unless at least MIN_LINKS_FOLLOWED of the spec's own links (not those
schemathesis infers) were followed to a 2xx: the link was applied, its `$request`/`$response`
expressions resolved, and the target answered 2xx (a lookup `seen`, a log page). It once ran
only GET /v1/log and followed 1 link of 21; stateful_roots.py (a schemathesis hooks file) says
why, and lets the ingest POSTs start scenarios.

Bounded: deterministic generation of the cases, --max-examples per operation
(CONTRACT_MAX_EXAMPLES, default below) and the stateful phase's own budget in schemathesis.toml,
so the test takes about 1.5 minutes on 2 cores. Which links the stateful phase applies is drawn
at random by schemathesis even then, hence a minimum below the 17 links rather than all.

    cd tests/contract && INGESTD_BIN=../../build/ingestd python3 test_schemathesis.py -v
"""

import glob
import json
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
HOOKS = os.path.join(HERE, "stateful_roots.py")
MAX_EXAMPLES = os.environ.get("CONTRACT_MAX_EXAMPLES", "10")
RUN_TIMEOUT = 600  # the run takes ~1.5 min; this only bounds a hang

WRITE_KEY = "contract-key"
ADMIN_TOKEN = "contract-admin-token"

# Of the 17 links openapi.yaml declares (12 single-event POSTs -> lookup, 3 batches -> lookup,
# lookup -> log, log -> next page). Runs followed 17; 1 (ReadOn alone) before the fix.
MIN_LINKS_FOLLOWED = 15


def _resolved(value):
    return value is not None and not (isinstance(value, dict) and value.get("$unresolvable"))


def links_followed(ndjson_path):
    """{link id: times followed to a 2xx} from the stateful scenarios of an NDJSON report, for
    the links the spec declares (schemathesis's inferred ones left out). A step counts when
    schemathesis built it from the link (is_transition_applied), every runtime expression of
    the link ($request..., $response...) resolved, and the target answered 2xx."""
    followed = {}
    with open(ndjson_path) as f:
        for line in f:
            if not line.startswith('{"ScenarioFinished"'):
                continue
            scenario = json.loads(line)["ScenarioFinished"]
            if scenario.get("phase") != "stateful":
                continue
            recorder = scenario.get("recorder") or {}
            interactions = recorder.get("interactions") or {}
            for case_id, case in (recorder.get("cases") or {}).items():
                t = case.get("transition")
                if not t or t.get("is_inferred") or not case.get("is_transition_applied"):
                    continue
                params = [p for container in (t.get("parameters") or {}).values()
                          for p in container.values()]
                if not all(_resolved(p.get("value")) for p in params
                           if str(p.get("definition", "")).startswith("$")):
                    continue
                response = (interactions.get(case_id) or {}).get("response") or {}
                if 200 <= response.get("status_code", 0) < 300:
                    followed[t["id"]] = followed.get(t["id"], 0) + 1
    return followed


class SchemathesisContract(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.st = pydeps.ensure()

    def test_contract(self):
        report_dir = tempfile.mkdtemp(prefix="ingestd-contract-")
        srv = harness.Server(keys=[WRITE_KEY], args=["--admin-token", ADMIN_TOKEN])
        with srv:
            env = dict(os.environ, CONTRACT_WRITE_KEY=WRITE_KEY, CONTRACT_ADMIN_TOKEN=ADMIN_TOKEN,
                       NO_COLOR="1", SCHEMATHESIS_TELEMETRY="false", SCHEMATHESIS_HOOKS=HOOKS)
            cmd = [self.st, "--config-file", CONFIG, "run", SPEC,
                   "--url", "http://%s:%d" % (srv.host, srv.port),
                   "--phases", "examples,coverage,fuzzing,stateful",
                   "--max-examples", MAX_EXAMPLES,
                   "--generation-deterministic",
                   "--workers", "1",
                   "--report", "junit,ndjson", "--report-dir", report_dir,
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
        reports = glob.glob(os.path.join(report_dir, "ndjson-*.ndjson"))
        self.assertEqual(len(reports), 1, "no NDJSON report in %s" % report_dir)
        followed = links_followed(reports[0])
        print("links followed to a 2xx (%d):" % len(followed))
        for link, n in sorted(followed.items()):
            print("  %3d  %s" % (n, link))
        self.assertGreaterEqual(len(followed), MIN_LINKS_FOLLOWED,
                                "the stateful phase followed too few of the spec's links (above); "
                                "the NDJSON report is in %s" % report_dir)
        os.remove(reports[0])  # every request and response of the run: tens of MB, kept on failure


if __name__ == "__main__":
    unittest.main()
