"""TLS and plaintext on one gRPC port (the first byte decides), TLS only, and the
``authorization`` header (MQv2-HMAC-SHA1) checked against the broker's plain ACL accounts."""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid

import grpc
import pytest

from ferrymq.grpc.messages import to_duration
from ferrymq.grpc.protocol import Code, pb, rpc, spb
from testkit.certificates import make_test_certificates
from tests.support import InProcessCluster

pytestmark = pytest.mark.integration

ACL = """
accounts:
  - accessKey: writer1
    secretKey: writer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: ["Orders=PUB|SUB"]
  - accessKey: reader1
    secretKey: reader-secret
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
"""


def signed(access_key: str, secret_key: str) -> tuple[tuple[str, str], ...]:
    date_time = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    signature = hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()
    return (("x-mq-client-id", "acl-client@1"), ("x-mq-date-time", date_time),
            ("authorization", f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, "
                              f"Signature={signature}"))


def message(topic: str) -> pb.Message:
    return pb.Message(topic=pb.Resource(name=topic), body=b"x",
                      system_properties=pb.SystemProperties(message_id=uuid.uuid4().hex.upper()))


@pytest.fixture
async def secured(tmp_path):
    certs = make_test_certificates(tmp_path / "certs")
    (tmp_path / "plain_acl.yml").write_text(ACL)
    c = await InProcessCluster(tmp_path / "store", settings={
        "grpcListenPort": 0, "tlsServerCertPath": certs["server_cert"], "tlsServerKeyPath": certs["server_key"],
        "aclEnable": "true", "aclFile": str(tmp_path / "plain_acl.yml")}).start()
    try:
        yield c, certs
    finally:
        await c.stop()


async def send(channel, topic: str, md) -> int:
    response = await rpc.MessagingServiceStub(channel).SendMessage(spb.SendMessageRequest(messages=[message(topic)]),
                                                                   metadata=md, timeout=5)
    return response.status.code


async def test_tls_and_plaintext_on_one_port(secured):
    cluster, certs = secured
    target = f"127.0.0.1:{cluster.broker.grpc.port}"
    md = signed("writer1", "writer-secret")
    credentials = grpc.ssl_channel_credentials(root_certificates=open(certs["ca"], "rb").read())
    async with grpc.aio.secure_channel(target, credentials) as channel:
        assert await send(channel, "Orders", md) == Code.OK
    async with grpc.aio.insecure_channel(target) as channel:
        assert await send(channel, "Orders", md) == Code.OK


async def test_acl_signature_and_permissions(secured):
    cluster, _ = secured
    async with grpc.aio.insecure_channel(f"127.0.0.1:{cluster.broker.grpc.port}") as channel:
        assert await send(channel, "Orders", (("x-mq-client-id", "anonymous@1"),)) == Code.UNAUTHORIZED
        assert await send(channel, "Orders", signed("writer1", "wrong-secret")) == Code.UNAUTHORIZED
        assert await send(channel, "Orders", signed("nobody1", "x")) == Code.UNAUTHORIZED
        assert await send(channel, "Audit", signed("writer1", "writer-secret")) == Code.FORBIDDEN  # not listed: DENY
        assert await send(channel, "Orders", signed("reader1", "reader-secret")) == Code.FORBIDDEN  # SUB only
        assert await send(channel, "Orders", signed("writer1", "writer-secret")) == Code.OK
        receive = spb.ReceiveMessageRequest(
            group=pb.Resource(name="G"), message_queue=pb.MessageQueue(topic=pb.Resource(name="Orders"), id=-1),
            filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"), batch_size=4,
            invisible_duration=to_duration(10_000))
        stub = rpc.MessagingServiceStub(channel)
        denied = [r async for r in stub.ReceiveMessage(receive, metadata=(("x-mq-client-id", "a@1"),), timeout=5)]
        assert [r.status.code for r in denied] == [Code.UNAUTHORIZED]
        got = [r async for r in stub.ReceiveMessage(receive, metadata=signed("reader1", "reader-secret"), timeout=5)]
        assert got[0].status.code == Code.OK and [r.message.body for r in got if r.HasField("message")] == [b"x"]


async def test_enforcing_mode_refuses_plaintext(tmp_path):
    certs = make_test_certificates(tmp_path / "certs")
    c = await InProcessCluster(tmp_path / "store", settings={
        "grpcListenPort": 0, "grpcTlsMode": "enforcing", "tlsServerCertPath": certs["server_cert"],
        "tlsServerKeyPath": certs["server_key"]}).start()
    try:
        target = f"127.0.0.1:{c.broker.grpc.port}"
        md = (("x-mq-client-id", "c@1"),)
        credentials = grpc.ssl_channel_credentials(root_certificates=open(certs["ca"], "rb").read())
        async with grpc.aio.secure_channel(target, credentials) as channel:
            assert await send(channel, "Tls", md) == Code.OK
        async with grpc.aio.insecure_channel(target) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as failure:
                await send(channel, "Tls", md)
            assert failure.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await c.stop()


async def test_large_messages_pass_the_switch_both_ways(tmp_path):
    c = await InProcessCluster(tmp_path, settings={"grpcListenPort": 0}).start()  # permissive: relayed
    try:
        body = bytes(range(256)) * (3 * 4096)  # 3 MiB
        async with grpc.aio.insecure_channel(f"127.0.0.1:{c.broker.grpc.port}") as channel:
            stub = rpc.MessagingServiceStub(channel)
            m = message("Big")
            m.body = body
            sent = await stub.SendMessage(spb.SendMessageRequest(messages=[m]), metadata=(("x-mq-client-id", "b@1"),),
                                          timeout=20)
            assert sent.status.code == Code.OK
            request = spb.ReceiveMessageRequest(
                group=pb.Resource(name="BigGroup"), message_queue=pb.MessageQueue(topic=pb.Resource(name="Big"), id=-1),
                filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"), batch_size=1,
                invisible_duration=to_duration(10_000))
            got = [r async for r in stub.ReceiveMessage(request, metadata=(("x-mq-client-id", "b@1"),), timeout=20)]
            assert [r.message.body for r in got if r.HasField("message")] == [body]
    finally:
        await c.stop()
