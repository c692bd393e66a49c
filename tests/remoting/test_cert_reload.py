"""Certificates renewed on disk, served without a restart (issue 34): the broker, the name
server and the controller each start with certificate A from a Kubernetes-style Secret volume;
the volume's ``..data`` symlink is swapped to certificate B (another CA, serial and CN); a new
TLS connection then gets B while a connection opened before keeps answering. A renewal whose
key does not match its certificate is refused with one warning and A stays served."""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable

import pytest

from ferrymq.common.controller_protocol import CONTROLLER_GET_STATE
from ferrymq.common.tasks import within
from ferrymq.controller.controller import Controller, ControllerConfig
from ferrymq.namesrv.name_server import NamesrvConfig, NameServer
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.tls import ClientTls
from testkit.certificates import SecretVolume, tls_secret
from testkit.wait import wait_until
from tests.support import InProcessCluster

RELOAD_INTERVAL = 1.0


@dataclass
class Served:
    """A TLS server under test: its port and a request it answers."""

    port: int
    request: Callable[[], RemotingCommand]


async def _broker(tmp_path: Path, volume: SecretVolume) -> AsyncIterator[Served]:
    cluster = await InProcessCluster(tmp_path / "store", settings={
        "tlsMode": "permissive", "tlsServerCertPath": volume.path("tls.crt"),
        "tlsServerKeyPath": volume.path("tls.key"), "tlsCertReloadIntervalSeconds": RELOAD_INTERVAL}).start()
    try:
        yield Served(cluster.broker.server.port, lambda: RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
    finally:
        await cluster.stop()


async def _name_server(tmp_path: Path, volume: SecretVolume) -> AsyncIterator[Served]:
    namesrv = NameServer(NamesrvConfig(listen_port=0, tls_mode="enforcing", tls_server_cert_path=volume.path("tls.crt"),
                                       tls_server_key_path=volume.path("tls.key"),
                                       tls_cert_reload_interval_seconds=RELOAD_INTERVAL))
    await namesrv.start()
    try:
        yield Served(namesrv.port, lambda: RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "t"}))
    finally:
        await namesrv.stop()


async def _controller(tmp_path: Path, volume: SecretVolume) -> AsyncIterator[Served]:
    controller = Controller(ControllerConfig(listen_port=0, data_dir=str(tmp_path / "controller"), tls_mode="enforcing",
                                             tls_server_cert_path=volume.path("tls.crt"),
                                             tls_server_key_path=volume.path("tls.key"),
                                             tls_cert_reload_interval_seconds=RELOAD_INTERVAL))
    await controller.start()
    try:
        yield Served(controller.server.port, lambda: RemotingCommand.request(CONTROLLER_GET_STATE))
    finally:
        await controller.stop()


SERVERS: dict[str, Callable[[Path, SecretVolume], AsyncIterator[Served]]] = {
    "broker": _broker, "name server": _name_server, "controller": _controller}


@pytest.fixture(params=list(SERVERS))
async def served(request, tmp_path, secret_volume) -> AsyncIterator[Served]:
    async for server in SERVERS[request.param](tmp_path, secret_volume):
        yield server


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    client = RemotingClient(tls=ClientTls(insecure=True).context())
    yield client
    await client.close()


def der(certs: dict[str, str]) -> bytes:
    return ssl.PEM_cert_to_DER_cert(Path(certs["server_cert"]).read_text())


async def served_certificate(port: int) -> bytes:
    """The certificate a new TLS connection to ``port`` is given."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the certificate is compared, not verified
    _, writer = await within(asyncio.open_connection("127.0.0.1", port, ssl=context), 5)
    try:
        return writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()


def serves(port: int, certs: dict[str, str]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await served_certificate(port) == der(certs)
    return check


async def test_a_renewed_certificate_is_served_to_new_connections_and_old_ones_keep_working(
        served: Served, client: RemotingClient, secret_volume: SecretVolume, cert_a, cert_b,
        caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="ferrymq.remoting.tls")
    address = f"127.0.0.1:{served.port}"
    await client.invoke(address, served.request(), 3)
    opened_with_a = await client.connection(address)
    assert await served_certificate(served.port) == der(cert_a)

    secret_volume.publish(tls_secret(cert_b))
    # Without the reload every new connection would still get A, and this would time out.
    await wait_until(serves(served.port, cert_b), timeout=10 * RELOAD_INTERVAL, what="certificate B on a new connection")

    response = await client.invoke(address, served.request(), 3)
    assert response.code != ResponseCode.SYSTEM_ERROR
    assert await client.connection(address) is opened_with_a and not opened_with_a.closed
    assert any("reloaded" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)


async def test_a_key_that_does_not_match_keeps_the_old_certificate(
        tmp_path, secret_volume: SecretVolume, cert_a, cert_b, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="ferrymq.remoting.tls")
    async for server in _name_server(tmp_path, secret_volume):
        secret_volume.publish(tls_secret(cert_b, key_of=cert_a))  # a half-done renewal: B's certificate, A's key
        await wait_until(lambda: refusals(caplog), timeout=10 * RELOAD_INTERVAL, what="the renewal refused")
        assert await served_certificate(server.port) == der(cert_a)

        secret_volume.publish(tls_secret(cert_b))  # the renewal completed: tried again because the files changed
        await wait_until(serves(server.port, cert_b), timeout=10 * RELOAD_INTERVAL, what="certificate B served")
        assert len(refusals(caplog)) == 1, "a broken renewal is logged once"


def refusals(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == logging.WARNING and "not loaded" in r.getMessage()]
