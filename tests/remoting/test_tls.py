"""TLS on the remoting port: permissive and enforcing servers, verified and test-mode
clients, client certificates, and a whole cluster (name server and broker) behind TLS."""

from __future__ import annotations

import asyncio
import socket

import pytest

from ferrymq.client.config import ClientConfig
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common.config_loader import ConfigError
from ferrymq.common.message import Message
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.remoting.server import RemotingServer
from ferrymq.remoting.tls import ClientTls, ServerTls
from ferrymq.remoting.tls_listener import TlsListener
from testkit.certificates import make_test_certificates
from testkit.wait import wait_until
from tests.support import InProcessCluster


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_test_certificates(tmp_path_factory.mktemp("certs"))


async def _echo(request: RemotingCommand, connection) -> RemotingCommand:
    return request.response(ResponseCode.SUCCESS, remark="tls" if connection.secure else "plain")


async def _serve(tls: ServerTls | None) -> RemotingServer:
    server = RemotingServer("127.0.0.1", 0, tls=tls)
    server.register(RequestCode.HEART_BEAT, _echo)
    await server.start()
    return server


async def _ask(server: RemotingServer, tls: ClientTls | None) -> str:
    client = RemotingClient(tls=tls.context() if tls else None)
    try:
        response = await client.invoke(f"127.0.0.1:{server.port}", RemotingCommand.request(RequestCode.HEART_BEAT), 3)
        return response.remark
    finally:
        await client.close()


async def test_permissive_serves_tls_and_plaintext_on_one_port(certs):
    server = await _serve(ServerTls.build("permissive", certs["server_cert"], certs["server_key"]))
    try:
        assert await _ask(server, None) == "plain"
        assert await _ask(server, ClientTls(ca_file=certs["ca"])) == "tls"
        assert await _ask(server, ClientTls(insecure=True)) == "tls"  # RocketMQ's test mode
    finally:
        await server.stop()


async def test_enforcing_closes_plaintext_connections(certs):
    server = await _serve(ServerTls.build("enforcing", certs["server_cert"], certs["server_key"]))
    try:
        with pytest.raises(RemotingError):
            await _ask(server, None)
        assert await _ask(server, ClientTls(ca_file=certs["ca"])) == "tls"
        with pytest.raises(RemotingError, match="CERTIFICATE_VERIFY_FAILED"):
            await _ask(server, ClientTls())  # the system CAs do not know our test CA
    finally:
        await server.stop()


async def test_required_client_certificates(certs):
    server = await _serve(ServerTls.build("enforcing", certs["server_cert"], certs["server_key"], certs["ca"],
                                          "require"))
    try:
        with pytest.raises(RemotingError):
            await _ask(server, ClientTls(ca_file=certs["ca"]))
        assert await _ask(server, ClientTls(ca_file=certs["ca"], cert_file=certs["client_cert"],
                                            key_file=certs["client_key"])) == "tls"
    finally:
        await server.stop()


def test_bad_tls_settings_are_refused_clearly(certs, tmp_path):
    with pytest.raises(ConfigError, match="tlsMode must be"):
        ServerTls.build("strict")
    with pytest.raises(ConfigError, match="needs tlsServerCertPath"):
        ServerTls.build("enforcing")
    with pytest.raises(ConfigError, match="unusable"):
        ServerTls.build("enforcing", str(tmp_path / "missing.crt"), certs["server_key"])
    with pytest.raises(ConfigError, match="tlsServerTrustCertPath"):
        ServerTls.build("enforcing", certs["server_cert"], certs["server_key"], "", "require")


async def test_a_cluster_behind_tls(certs, tmp_path):
    settings = {"tlsMode": "enforcing", "tlsServerCertPath": certs["server_cert"],
                "tlsServerKeyPath": certs["server_key"], "useTLS": "true", "tlsClientTrustCertPath": certs["ca"]}
    cluster = InProcessCluster(tmp_path / "store", settings=settings)
    from ferrymq.namesrv.name_server import NamesrvConfig, NameServer

    cluster.namesrv = NameServer(NamesrvConfig(listen_port=0, tls_mode="enforcing",
                                               tls_server_cert_path=certs["server_cert"],
                                               tls_server_key_path=certs["server_key"]))
    await cluster.namesrv.start()
    try:
        await asyncio.wait_for(cluster.start_broker(), 15)  # registered over TLS
        config = ClientConfig(namesrv_addr=cluster.namesrv_addr, tls=ClientTls(ca_file=certs["ca"]))
        async with Producer("tls-producer", config=config) as producer:
            result = await producer.send(Message("TlsTopic", b"secret payload"))
        async with PullConsumer("tls-consumer", config=config) as consumer:
            mq = result.message_queue
            assert [m.body for m in (await consumer.pull(mq, 0)).messages] == [b"secret payload"]
    finally:
        await cluster.stop()


def test_client_tls_from_the_environment(monkeypatch, certs):
    monkeypatch.delenv("FERRYMQ_TLS", raising=False)
    assert ClientConfig().tls is None
    monkeypatch.setenv("FERRYMQ_TLS", "true")
    assert ClientConfig().tls == ClientTls(insecure=True)  # RocketMQ's test mode: any certificate
    monkeypatch.setenv("FERRYMQ_TLS_CA_FILE", certs["ca"])
    assert ClientConfig().tls == ClientTls(ca_file=certs["ca"])


def test_namesrv_command_with_tls_and_acl(certs, tmp_path):
    """`ferrymq namesrv --tls-mode enforcing --tls-cert --tls-key --acl-file`: TLS only, and
    the requests that change it need an admin signature."""
    from ferrymq.acl.signature import Credentials, sign_request
    from testkit.ports import free_port
    from testkit.processes import FerryProcess

    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text("accounts: [{accessKey: admin0001, secretKey: admin-secret, admin: true}]\n")
    port = free_port()
    proc = FerryProcess(["namesrv", "--port", str(port), "--tls-mode", "enforcing", "--tls-cert", certs["server_cert"],
                         "--tls-key", certs["server_key"], "--acl-file", str(acl_file)], "name server is ready",
                        tmp_path / "namesrv.log").start()

    async def scenario():
        client = RemotingClient(tls=ClientTls(ca_file=certs["ca"]).context())
        try:
            info = await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
            put = RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {"namespace": "n", "key": "k", "value": "v"})
            refused = await client.invoke(f"127.0.0.1:{port}", put)
            signed = RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {"namespace": "n", "key": "k", "value": "v"})
            sign_request(signed, Credentials("admin0001", "admin-secret"))
            accepted = await client.invoke(f"127.0.0.1:{port}", signed)
            return info.code, refused.remark, accepted.code
        finally:
            await client.close()

    try:
        info, refused, accepted = asyncio.run(scenario())
        assert info == 0 and accepted == 0 and refused == "AclException: No accessKey is configured"
        with pytest.raises(RemotingError):
            asyncio.run(_ask_plain(port))
    finally:
        proc.stop()


async def _ask_plain(port: int) -> None:
    client = RemotingClient()
    try:
        await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 3)
    finally:
        await client.close()


async def test_connections_the_tls_listener_accepts_send_small_writes_at_once(certs):
    """Nagle off (TCP_NODELAY) on TLS and plaintext connections alike: an answer written in several
    pieces (a gRPC stream's frames) must not wait for the client's delayed ACK (it made a 5.x
    SimpleConsumer ten times slower on a permissive port than on a plaintext one)."""
    transports: list[asyncio.BaseTransport] = []

    class Recorder(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            transports.append(transport)

    listener = TlsListener(ServerTls.build("permissive", certs["server_cert"], certs["server_key"]), Recorder, "test")
    port = await listener.start("127.0.0.1", 0)
    writers = []
    try:
        for tls in (None, ClientTls(insecure=True).context()):
            _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
            writer.write(b"x")
            writers.append(writer)
        await wait_until(lambda: len(transports) == 2, timeout=5, what="both connections accepted")
        assert [t.get_extra_info("sslcontext") is not None for t in transports] == [False, True]
        for transport in transports:
            assert transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        for writer in writers:
            writer.close()
        await listener.stop()
