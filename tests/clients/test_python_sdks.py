"""Real Python SDKs against the real ingestd, through a proxy that loses some of ingestd's answers.

segment-analytics-python and rudder-sdk-python, at the versions pinned in
python/requirements.txt (installed once into a venv by sdkdeps.py), each run by python/send.py
with only its host option pointed at the proxy. The assertions are sdkcase.SdkCase's: every
event logged exactly once despite lost answers, plus what differs per SDK (gzip, where the key
travels, 429/503 retried, the event over 32 KB). One case per SDK goes over HTTPS with a test CA
(REQUESTS_CA_BUNDLE, as a deployment with a private CA sets it).

    cd tests/clients && INGESTD_BIN=../../build/ingestd python3 test_python_sdks.py -v
"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import sdkdeps  # noqa: E402
from sdkcase import EVENTS_PER_TYPE, SdkCase  # noqa: E402

class PythonCase(SdkCase):
    def deps_error(self):
        return sdkdeps.once("python")[1]

    def command(self, url, key, run_id):
        env = {"REQUESTS_CA_BUNDLE": self.tls_ca} if self.tls_ca else {}
        return ([sdkdeps.once("python")[0], os.path.join(HERE, "python", "send.py"), self.SDK, url, key,
                 run_id, str(EVENTS_PER_TYPE), str(self.FLUSH_AT), "1" if self.BIG else "0"],
                env)


class Segment(PythonCase):
    SDK = "segment"
    PACKAGE = "segment-analytics-python"
    LIBRARY_NAME = "analytics-python"
    ENCODING = None       # gzip=False by default
    KEY_IN = "basic+body"  # Basic auth and writeKey in the body
    BIG = "sdk"            # RuntimeError "Message exceeds 32kb limit" from track()


class RudderStack(PythonCase):
    SDK = "rudder"
    PACKAGE = "rudder-sdk-python"
    LIBRARY_NAME = "analytics-python"  # as its Segment origin names it
    ENCODING = "gzip"     # gzip=True by default
    KEY_IN = "basic"
    BIG = "server"        # its own limit is 4 MB: ingestd rejects the event alone


class TestSegmentPython(Segment, unittest.TestCase):
    # A 429 with Retry-After makes it put the batch back in its queue and wait (not counted
    # against max_retries); the events may come back in a re-cut batch.
    REFUSE = (429, 503)
    REBATCHES = True


class TestSegmentPythonHttps(Segment, unittest.TestCase):
    TLS = True


class TestRudderStackPython(RudderStack, unittest.TestCase):
    REFUSE = (429, 503)


class TestRudderStackPythonHttps(RudderStack, unittest.TestCase):
    TLS = True


if __name__ == "__main__":
    unittest.main()
