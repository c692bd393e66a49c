"""The gRPC port serves a certificate renewed on disk without a restart (issue 34): started
with certificate A from a Kubernetes-style Secret volume, the volume swapped to certificate B
(another CA): a new channel trusting only B's CA gets through, a channel opened before and
trusting only A's CA still completes calls (it keeps its connection: a new one would be given
B and fail). A key that does not match its certificate keeps A served, with one warning."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import AsyncIterator

import grpc
import pytest

from ferrymq.grpc.protocol import pb, rpc, spb
from testkit.certificates import SecretVolume, tls_secret
from testkit.wait import wait_until
from tests.support import InProcessCluster

RELOAD_INTERVAL = 1.0


@pytest.fixture(params=["enforcing", "permissive"])
async def target(request, tmp_path, secret_volume) -> AsyncIterator[str]:
    """The gRPC port, TLS only (enforcing) or TLS and plaintext told apart by the first byte."""
    cluster = await InProcessCluster(tmp_path / "store", settings={
        "grpcListenPort": 0, "grpcTlsMode": request.param, "tlsServerCertPath": secret_volume.path("tls.crt"),
        "tlsServerKeyPath": secret_volume.path("tls.key"), "tlsCertReloadIntervalSeconds": RELOAD_INTERVAL}).start()
    try:
        yield f"127.0.0.1:{cluster.broker.grpc.port}"
    finally:
        await cluster.stop()


def trusting(certs: dict[str, str]) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(root_certificates=Path(certs["ca"]).read_bytes())


async def call(channel: grpc.aio.Channel) -> None:
    """One call answered (a heartbeat without a client id: refused in its status, but answered)."""
    await rpc.MessagingServiceStub(channel).Heartbeat(spb.HeartbeatRequest(client_type=pb.ClientType.PRODUCER),
                                                      timeout=3)


async def served_to_a_new_channel(target: str, certs: dict[str, str]) -> bool:
    """Whether a new channel trusting only ``certs``' CA completes a call."""
    async with grpc.aio.secure_channel(target, trusting(certs)) as channel:
        try:
            await call(channel)
        except grpc.aio.AioRpcError:
            return False
    return True


async def test_a_renewed_certificate_is_served_to_new_channels_and_old_ones_keep_working(
        target: str, secret_volume: SecretVolume, cert_a, cert_b):
    async with grpc.aio.secure_channel(target, trusting(cert_a)) as opened_with_a:
        await call(opened_with_a)
        assert not await served_to_a_new_channel(target, cert_b)

        secret_volume.publish(tls_secret(cert_b))
        # Without the reload every new channel would still be given A, and this would time out.
        await wait_until(lambda: served_to_a_new_channel(target, cert_b), timeout=10 * RELOAD_INTERVAL,
                         interval=0.2, what="certificate B served to a new channel")

        await call(opened_with_a)  # its connection was kept: a new one would be given B and refused


async def test_a_key_that_does_not_match_keeps_the_old_certificate(
        target: str, secret_volume: SecretVolume, cert_a, cert_b, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.WARNING, logger="ferrymq.remoting.tls")
    secret_volume.publish(tls_secret(cert_b, key_of=cert_a))  # a half-done renewal: B's certificate, A's key

    async def refused_and_a_still_served() -> bool:  # the files are looked at on new handshakes
        return await served_to_a_new_channel(target, cert_a) and bool(refusals(caplog))
    await wait_until(refused_and_a_still_served, timeout=10 * RELOAD_INTERVAL, interval=0.2,
                     what="the renewal refused")

    secret_volume.publish(tls_secret(cert_b))  # the renewal completed: tried again because the files changed
    await wait_until(lambda: served_to_a_new_channel(target, cert_b), timeout=10 * RELOAD_INTERVAL,
                     interval=0.2, what="certificate B served to a new channel")
    assert len(refusals(caplog)) == 1, "a broken renewal is logged once"


def refusals(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == logging.WARNING and "not loaded" in r.getMessage()]
