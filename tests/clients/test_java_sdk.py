"""Segment's analytics-java against the real ingestd, through a proxy that loses some answers.

com.segment.analytics.java:analytics at the version pinned in java/pom.xml; sdkdeps.py resolves
its class path once with Maven (`dependency:build-classpath`) and compiles java/src (Send.java)
with javac. The assertions are sdkcase.SdkCase's: every event logged exactly once despite lost
answers, plus what differs for this SDK (no gzip, the write key in the body, /v1/import/, a
429 retried after its 15 s back-off, the event over 32 KB refused by the SDK). One case goes over HTTPS with a test CA, given to the JVM as a
PKCS12 trust store (-Djavax.net.ssl.trustStore), as a deployment with a private CA does.

    cd tests/clients && INGESTD_BIN=../../build/ingestd python3 test_java_sdk.py -v
"""

import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import sdkdeps  # noqa: E402
from sdkcase import EVENTS_PER_TYPE, SdkCase  # noqa: E402


class Segment(SdkCase):
    SDK = "segment"
    PACKAGE = "com.segment.analytics.java:analytics"
    LIBRARY_NAME = "analytics-java"
    ENCODING = None      # not compressed
    KEY_IN = "body"      # writeKey in the JSON body, no Authorization header
    PATH = "/v1/import/"  # its upload URL, trailing slash and all
    BIG = "sdk"          # enqueue() throws for a message over 32 KB
    FLUSH_AT = 6         # 6 batches: two answers lost, one closed and one 502

    def deps_error(self):
        return sdkdeps.once("java")[1]

    def command(self, url, key, run_id):
        java = ["java"]
        if self.tls_ca:
            store = os.path.join(self.tmp, "trust.p12")
            subprocess.run(["keytool", "-importcert", "-noprompt", "-alias", "ingestd-test",
                            "-file", self.tls_ca, "-keystore", store, "-storetype", "PKCS12",
                            "-storepass", "changeit"], check=True, capture_output=True,
                           timeout=60)
            java += ["-Djavax.net.ssl.trustStore=" + store,
                     "-Djavax.net.ssl.trustStorePassword=changeit",
                     "-Djavax.net.ssl.trustStoreType=PKCS12"]
        return (java + ["-cp", sdkdeps.once("java")[0], sdkdeps.JAVA_MAIN, url, key, run_id,
                        str(EVENTS_PER_TYPE), str(self.FLUSH_AT), "1"], {})


# It sends one batch at a time and waits a back-off of 15 s and more (jittered, Retry-After
# ignored) before each retry of a 429 or 5xx, so every such answer costs the run about 15 s: the
# cases keep them few. A closed connection costs nothing: OkHttp resends at once by itself.
class TestSegmentJava(Segment, unittest.TestCase):
    REFUSE = (429,)  # 6 batches: a 429, then one answer lost by a close and one by a 502


class TestSegmentJavaHttps(Segment, unittest.TestCase):
    TLS = True
    FLUSH_AT = 12           # 3 batches: one answer lost, by a closed connection
    DROP_KINDS = {"close"}


if __name__ == "__main__":
    unittest.main()
