"""The console over HTTPS serves a certificate renewed on disk without a restart (issue 34):
started with certificate A from a Kubernetes-style Secret volume, the volume swapped to B
(another CA): a new connection is given B, a connection opened before keeps working on A; a
renewal whose key does not match keeps B served, with a warning. The session cookie is Secure."""

from __future__ import annotations

import asyncio
import logging
import ssl

import pytest

from ferrymq.console.server import ConsoleServer
from ferrymq.console.settings import ClusterSpec, ConsoleSettings
from testkit.certificates import SecretVolume, tls_secret
from testkit.wait import wait_until

pytestmark = pytest.mark.integration


def trusting(*certs: dict[str, str]) -> ssl.SSLContext:
    context = ssl.create_default_context()
    for c in certs:
        context.load_verify_locations(c["ca"])
    return context


async def served_ca(url: str, *trusted: dict[str, str]) -> str | None:
    """Which of ``trusted`` CAs signed what a new connection is given (its CA file), or None."""
    host, port = url.removeprefix("https://").split(":")
    for c in trusted:
        try:
            _, writer = await asyncio.open_connection(host, int(port), ssl=trusting(c), server_hostname=None)
        except (ssl.SSLError, OSError):
            continue
        writer.close()
        await writer.wait_closed()
        return c["ca"]
    return None


async def test_a_renewed_certificate_reaches_new_connections_and_open_ones_keep_working(
        cluster, secret_volume: SecretVolume, cert_a, cert_b, caplog):
    caplog.set_level(logging.INFO, logger="ferrymq.remoting.tls")  # the reloading ServerTls's
    server = ConsoleServer(ConsoleSettings([ClusterSpec("local", cluster.namesrv_addr)], host="127.0.0.1", port=0,
                                           sample_seconds=60, https_cert=secret_volume.path("tls.crt"),
                                           https_key=secret_volume.path("tls.key"), https_reload_seconds=0.2))
    await server.start()
    try:
        assert server.url.startswith("https://")
        host, port = server.url.removeprefix("https://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port), ssl=trusting(cert_a), server_hostname=None)
        try:
            assert await get_on(reader, writer, "/healthz") == 200
            assert await served_ca(server.url, cert_a, cert_b) == cert_a["ca"]

            secret_volume.publish(tls_secret(cert_b))
            await wait_until(lambda: _is(served_ca(server.url, cert_a, cert_b), cert_b["ca"]), 10,
                             "the renewed certificate served to a new connection")
            assert "TLS certificate reloaded for new connections" in caplog.text
            # the connection opened with A goes on (a new one could not: it trusts only A's CA)
            for _ in range(3):
                assert await get_on(reader, writer, "/healthz") == 200

            secret_volume.publish(tls_secret(cert_a, key_of=cert_b))  # A's certificate, B's key
            await wait_until(lambda: _logged(caplog, "renewed TLS files not loaded"), 10, "the refusal logged")
            assert await served_ca(server.url, cert_a, cert_b) == cert_b["ca"]
        finally:
            writer.close()
    finally:
        await server.stop()


async def get_on(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> int:
    """One HTTP/1.1 request on a connection kept open: its status."""
    writer.write(f"GET {path} HTTP/1.1\r\nHost: console\r\n\r\n".encode())
    await writer.drain()
    head = (await reader.readuntil(b"\r\n\r\n")).decode()
    length = int(next(line.split(":", 1)[1] for line in head.split("\r\n") if line.lower().startswith("content-length")))
    await reader.readexactly(length)
    return int(head.split()[1])


async def _is(awaitable, expected) -> bool:
    return await awaitable == expected


async def _logged(caplog, text: str) -> bool:
    return text in caplog.text


def test_https_needs_both_files_and_a_positive_reload_interval():
    from ferrymq.console.settings import SettingsError
    with pytest.raises(SettingsError, match="go together"):
        ConsoleSettings([ClusterSpec("c", "127.0.0.1:9876")], https_cert="/x.crt")
    with pytest.raises(SettingsError, match="must be positive"):
        ConsoleSettings([ClusterSpec("c", "127.0.0.1:9876")], https_cert="/x.crt", https_key="/x.key",
                        https_reload_seconds=0)
