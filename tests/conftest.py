"""Fixtures shared by every test layer."""

from __future__ import annotations

import pytest

from testkit.certificates import SecretVolume, make_test_certificates, tls_secret
from testkit.processes import StandaloneProcess

from tests.support import InProcessCluster

pytest_plugins = ["tests.parallel_schedule"]


@pytest.fixture
async def cluster(tmp_path):
    """A name server + broker on this test's event loop, on free ports, data in tmp_path."""
    c = InProcessCluster(tmp_path / "store")
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


@pytest.fixture(scope="module")
def cert_a(tmp_path_factory) -> dict[str, str]:
    """The certificate a server starts with in the certificate renewal tests."""
    return make_test_certificates(tmp_path_factory.mktemp("cert-a"))


@pytest.fixture(scope="module")
def cert_b(tmp_path_factory) -> dict[str, str]:
    """Its renewal: another CA, serial and key."""
    return make_test_certificates(tmp_path_factory.mktemp("cert-b"))


@pytest.fixture
def secret_volume(tmp_path, cert_a) -> SecretVolume:
    """A Kubernetes-style Secret volume (tls.crt, tls.key) holding ``cert_a``."""
    volume = SecretVolume(tmp_path / "secret")
    volume.publish(tls_secret(cert_a))
    return volume


@pytest.fixture
def standalone_process(tmp_path, request):
    """``ferrymq standalone`` as a subprocess; its log is printed if the test fails."""
    started: list[StandaloneProcess] = []

    def start(data_dir=None, settings=(), **kw) -> StandaloneProcess:
        p = StandaloneProcess(data_dir or tmp_path / "store", list(settings), **kw).start()
        started.append(p)
        return p

    yield start
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    for p in started:
        p.stop()
        if failed:
            print(f"--- standalone log ({p.log_path}) ---\n{p.log()}")


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
