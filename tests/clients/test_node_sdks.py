"""Real Node SDKs against the real ingestd, through a proxy that loses some of ingestd's answers.

One test per SDK: @segment/analytics-node, analytics-node (Segment's older library) and
@rudderstack/rudder-sdk-node, at the versions pinned in package-lock.json (installed here with
`npm ci` when node_modules is missing or stale: nodedeps.py). Each test starts ingestd
(tests/integration/harness.py) and the dropping proxy (proxy.py), then runs send.js, which uses
the SDK the documented way with only its host option pointed at the proxy, sends every event
type in many small batches, flushes, and prints the messageIds the SDK assigned. The proxy
loses the answer to every third new batch after ingestd accepted it (alternately by closing the
connection and by a 502), so the SDK sends that batch again.

Asserted from ingestd's log (`ingestd log cat`), by sdkcase.SdkCase, which the Python, Go and
Java SDK tests share: every event the SDK sent is there exactly once, with its type, the source
of the write key it was sent with, and the SDK's library name; and that the loss really happened
and was really retried: the proxy dropped answers of both kinds, each dropped batch came back
with the same messageIds and got a 200, and ingestd's /stats counted exactly the re-sent events
as duplicates. Also how each SDK sends: gzip (RudderStack) or not, and where the write key is.

    cd tests/clients && INGESTD_BIN=../../build/ingestd python3 test_node_sdks.py -v
"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import nodedeps  # noqa: E402
from sdkcase import EVENTS_PER_TYPE, SdkCase  # noqa: E402

_deps_ready = None  # None: not tried yet; else the exception text, or "" when installed


def setUpModule():
    # Install once per process; a failure fails every test with npm's message.
    global _deps_ready
    if _deps_ready is None:
        try:
            nodedeps.ensure()
            _deps_ready = ""
        except nodedeps.NodeDepsError as e:
            _deps_ready = str(e)


class NodeCase(SdkCase):
    def deps_error(self):
        return _deps_ready

    def command(self, url, key, run_id):
        return (["node", os.path.join(HERE, "send.js"), self.SDK, url, key, run_id,
                 str(EVENTS_PER_TYPE), str(self.FLUSH_AT)], {})


class TestSegmentAnalyticsNode(NodeCase, unittest.TestCase):
    SDK = "segment-next"
    PACKAGE = "@segment/analytics-node"
    LIBRARY_NAME = "@segment/analytics-node"
    ENCODING = None
    KEY_IN = "body"


class TestSegmentClassicAnalyticsNode(NodeCase, unittest.TestCase):
    SDK = "segment-classic"
    PACKAGE = "analytics-node"
    LIBRARY_NAME = "analytics-node"
    ENCODING = None
    KEY_IN = "basic"


class TestRudderStackNode(NodeCase, unittest.TestCase):
    SDK = "rudderstack"
    PACKAGE = "@rudderstack/rudder-sdk-node"
    LIBRARY_NAME = "analytics-node"  # RudderStack's SDK names itself so, after its Segment origin
    ENCODING = "gzip"
    KEY_IN = "basic"


if __name__ == "__main__":
    unittest.main()
