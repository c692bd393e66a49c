"""Fixtures for the compatibility tests (the peers live in testkit/: java_client.py, apache.py).

* ``rocketmq_jars``   (session) the cached RocketMQ lib dir, our Java programs compiled;
                      skips with ONE line if Maven Central is unreachable
* ``apache_rocketmq`` (session) a running real Apache name server + broker
                      (``.namesrv_addr``, ``.broker_addr``, ...; see ``testkit.apache.ApacheRocketMQ``)
* ``rocketmq5_jars``  (session) the same for Apache RocketMQ 5.3.1 (remoting client and broker;
                      ``tests/compat/java53``), on a classpath of their own
* ``apache_rocketmq5`` (module) Apache's 5.3.1 broker under the 4.9.7 name server
* ``rocketmq532_jars`` (session) the same for 5.3.2, with ``tests/compat/java532``'s programs
* ``apache_rocketmq532`` (module) Apache's 5.3.2 broker (the first with RECALL_MESSAGE) the same way
* ``rocketmq_proxy_jars`` (session) Apache's gRPC proxy 5.2.0 (``tests/compat/proxy52``): 5.3.x's is
                      not on every Maven mirror
* ``apache_proxy``    (module) Apache's 5.3.1 broker under the 4.9.7 name server with the 5.2.0 proxy
                      in cluster mode in front: ``.grpc_endpoint`` for RocketMQ 5 clients; a test
                      module's ``APACHE_BROKER_CONF`` / ``APACHE_PROXY_CONF`` dicts add broker.conf /
                      rmq-proxy.json keys
* ``java_client``     (session) a ``testkit.java_client.JavaClient``: ``.produce_consume()``,
                      ``.produce()``, ``.consume()``, ``.run(args)``, ``.mqadmin()``

A failing test that used an Apache fixture (or a ``(server, endpoint)`` pair holding one) gets the
name server's, broker's and proxy's log tails in its report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.support import missing_prerequisite

from testkit.apache import ApacheRocketMQ
from testkit.java_client import (PROXY_VERSION, ROCKETMQ5_VERSION, ROCKETMQ532_VERSION, CompatUnavailable,
                                 ensure_compat_classes, ensure_rocketmq_jars, JavaClient)


@pytest.fixture(scope="session")
def rocketmq_jars() -> Path:
    """The RocketMQ 4.9.7 lib dir (Maven runs once, then cached under .cache/)."""
    try:
        lib = ensure_rocketmq_jars()
        ensure_compat_classes()
    except CompatUnavailable as e:
        missing_prerequisite(f"compat: Maven Central unreachable: {e.reason}")
    return lib


@pytest.fixture(scope="session")
def apache_rocketmq(rocketmq_jars: Path) -> Iterator[ApacheRocketMQ]:
    """A real Apache RocketMQ 4.9.7 name server + broker for the whole session."""
    mq = ApacheRocketMQ()
    mq.start()  # on failure: logs printed, processes killed, the error fails the tests
    try:
        yield mq
    finally:
        mq.stop()


def _toolchain_or_skip(version: str) -> Path:
    """One version's lib dir with its programs compiled; ONE line skip if Maven Central is unreachable."""
    try:
        lib = ensure_rocketmq_jars(version)
        ensure_compat_classes(version)
    except CompatUnavailable as e:
        missing_prerequisite(f"compat: Maven Central unreachable: {e.reason}")
    return lib


def _apache_broker(version: str, **options) -> Iterator[ApacheRocketMQ]:
    """Apache's ``version`` broker under a 4.9.7 name server, stopped when the fixture ends."""
    mq = ApacheRocketMQ(broker_version=version, **options)
    mq.start()
    try:
        yield mq
    finally:
        mq.stop()


@pytest.fixture(scope="session")
def rocketmq5_jars(rocketmq_jars: Path) -> Path:
    """The RocketMQ 5.3.1 lib dir (client and broker) with ``tests/compat/java53`` compiled."""
    return _toolchain_or_skip(ROCKETMQ5_VERSION)


@pytest.fixture(scope="module")
def apache_rocketmq5(rocketmq5_jars: Path) -> Iterator[ApacheRocketMQ]:
    """Apache's 5.3.1 broker (its shipped defaults: timerWheelEnable on, timerMaxDelaySec 3 days)
    registered with a 4.9.7 name server, for one test module."""
    yield from _apache_broker(ROCKETMQ5_VERSION)


@pytest.fixture(scope="session")
def rocketmq532_jars(rocketmq_jars: Path) -> Path:
    """The RocketMQ 5.3.2 lib dir (``tests/compat/java53`` at 5.3.2) with ``tests/compat/java53``
    and ``tests/compat/java532`` (5.3.2's programs) compiled."""
    return _toolchain_or_skip(ROCKETMQ532_VERSION)


@pytest.fixture(scope="module")
def apache_rocketmq532(rocketmq532_jars: Path) -> Iterator[ApacheRocketMQ]:
    """Apache's 5.3.2 broker (shipped defaults: recallMessageEnable off) under a 4.9.7 name
    server, for one test module."""
    yield from _apache_broker(ROCKETMQ532_VERSION)


@pytest.fixture(scope="session")
def rocketmq_proxy_jars(rocketmq5_jars: Path) -> Path:
    """Apache's gRPC proxy 5.2.0 and its dependencies (the 5.3.1 broker behind it has its own)."""
    try:
        return ensure_rocketmq_jars(PROXY_VERSION)
    except CompatUnavailable as e:
        missing_prerequisite(f"compat: Maven Central unreachable: {e.reason}")


@pytest.fixture(scope="module")
def apache_proxy(request, rocketmq_proxy_jars: Path) -> Iterator[ApacheRocketMQ]:
    """Apache's 5.3.1 broker with Apache's 5.2.0 proxy (cluster mode) in front, for one test module:
    the gRPC peer of ``ferrymq standalone --grpcListenPort``."""
    yield from _apache_broker(ROCKETMQ5_VERSION, proxy_version=PROXY_VERSION,
                              broker_conf=getattr(request.module, "APACHE_BROKER_CONF", {}),
                              proxy_conf=getattr(request.module, "APACHE_PROXY_CONF", {}))


@pytest.fixture(scope="session")
def java_client(rocketmq_jars: Path) -> JavaClient:
    """The official Java client as a scriptable peer (``ferrymq.compat.ProduceConsume``)."""
    return JavaClient()


@pytest.fixture(scope="module")
def ferrymq(tmp_path_factory, rocketmq_jars):
    """``ferrymq standalone`` as a subprocess for one test module; must stop cleanly."""
    from testkit.processes import StandaloneProcess

    server = StandaloneProcess(tmp_path_factory.mktemp("ferrymq-compat") / "store").start()
    try:
        yield server
    finally:
        code = server.stop()
        assert code == 0, f"standalone did not shut down cleanly ({code}):\n{server.log()}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for arg in getattr(item, "funcargs", {}).values():
            # a fixture's value, or one of a (server, endpoint) pair's
            for mq in arg if isinstance(arg, tuple) else (arg,):
                if isinstance(mq, ApacheRocketMQ):
                    break
            else:
                continue
            state = "running" if mq.alive() else "NOT RUNNING"
            report.sections.append(
                (f"Apache RocketMQ ({state}) logs", mq.logs() or "<no logs>")
            )
