"""Real Go SDKs against the real ingestd, through a proxy that loses some of ingestd's answers.

github.com/segmentio/analytics-go/v3 and github.com/rudderlabs/analytics-go (v3.3.3+incompatible:
the Go module proxy refused its v4 module here), at the versions pinned in go/go.mod and
go/go.sum, each in a small sender (go/segment, go/rudder) that sdkdeps.py builds once with the
machine's `go build`. The assertions are sdkcase.SdkCase's: every event logged exactly once
despite lost answers, plus what differs per SDK (no gzip, Basic auth, 429/503 retried, the event
over 32 KB refused by the SDK). One case per SDK goes over HTTPS with a test CA (SSL_CERT_FILE,
which Go's crypto/x509 reads on Linux).

    cd tests/clients && INGESTD_BIN=../../build/ingestd python3 test_go_sdks.py -v
"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import sdkdeps  # noqa: E402
from sdkcase import EVENTS_PER_TYPE, SdkCase  # noqa: E402

class GoCase(SdkCase):
    LIBRARY_NAME = "analytics-go"
    ENCODING = None       # neither compresses
    KEY_IN = "basic"
    BIG = "sdk"           # both refuse a message over 32,000 bytes: Callback.Failure
    REFUSE = (429, 503)   # both retry any answer but 2xx (10 attempts), the same batch

    def deps_error(self):
        return sdkdeps.once("go")[1]

    def command(self, url, key, run_id):
        env = {"SSL_CERT_FILE": self.tls_ca} if self.tls_ca else {}
        return ([sdkdeps.once("go")[0][self.SDK], url, key, run_id, str(EVENTS_PER_TYPE),
                 str(self.FLUSH_AT), "1"], env)


class Segment(GoCase):
    SDK = "segment"
    PACKAGE = "github.com/segmentio/analytics-go/v3"


class RudderStack(GoCase):
    SDK = "rudder"
    PACKAGE = "github.com/rudderlabs/analytics-go"


class TestSegmentGo(Segment, unittest.TestCase):
    pass


class TestSegmentGoHttps(Segment, unittest.TestCase):
    TLS = True
    REFUSE = ()


class TestRudderStackGo(RudderStack, unittest.TestCase):
    pass


class TestRudderStackGoHttps(RudderStack, unittest.TestCase):
    TLS = True
    REFUSE = ()


if __name__ == "__main__":
    unittest.main()
