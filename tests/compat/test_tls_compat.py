"""The official 4.9.7 Java client with -Dtls.enable=true against ``ferrymq standalone`` in
tlsMode=enforcing (name server and broker): it produces and consumes; without TLS it is refused."""

from __future__ import annotations

import uuid

import pytest

from testkit.processes import StandaloneProcess

from testkit.certificates import make_test_certificates

from testkit.java_client import JavaClient, run_java_client

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def tls_ferrymq(tmp_path_factory, rocketmq_jars):
    work = tmp_path_factory.mktemp("ferrymq-tls")
    certs = make_test_certificates(work / "certs")
    server = StandaloneProcess(work / "store", ["tlsMode=enforcing", f"tlsServerCertPath={certs['server_cert']}",
                                                f"tlsServerKeyPath={certs['server_key']}"]).start()
    try:
        yield server
    finally:
        server.stop()


def test_java_client_over_tls_produces_and_consumes(tls_ferrymq):
    topic = f"FerryTls_{uuid.uuid4().hex[:8]}"
    args = ["produce-consume", *JavaClient._opts(tls_ferrymq.namesrv_addr, topic, None, 40000, count=10,
                                                 modes=["sync", "async"])]
    events = run_java_client(args, 120, jvm_args=["-Dtls.enable=true"], check=False)
    assert events.done and events.done["ok"], events
    assert len({e["key"] for e in events.of("received")}) == 20


def test_java_client_without_tls_is_refused(tls_ferrymq):
    args = ["produce", *JavaClient._opts(tls_ferrymq.namesrv_addr, "FerryTlsPlain", None, 8000, count=1,
                                         modes=["sync"])]
    events = run_java_client(args, 60, check=False)
    assert not events.of("sent") and events.done and not events.done["ok"], events
    assert "TLS is enforced" in tls_ferrymq.log()
