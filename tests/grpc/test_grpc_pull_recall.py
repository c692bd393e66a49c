"""RecallMessage, PullMessage and the offset calls of the broker's gRPC endpoint, spoken to with
the v2 protocol's generated stub (the official Java client 5.2.0 has no pull consumer); and every
call of the service either served or refused with a status naming it."""

from __future__ import annotations

import asyncio
import time
import uuid

import grpc
import pytest

from ferrymq.client.admin import AdminClient
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common.message import Message
from ferrymq.common.protocol import MessageQueue
from ferrymq.grpc.messages import to_duration, to_timestamp
from ferrymq.grpc.protocol import Code, pb, rpc, spb
from tests.support import InProcessCluster
from tests.grpc.test_grpc_endpoint import CLIENT, cluster, message, send, stub  # noqa: F401 (fixtures)

pytestmark = pytest.mark.integration


def queue(topic: str, queue_id: int = 0) -> pb.MessageQueue:
    return pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id)


async def pull(stub, topic: str, offset: int, *, group: str = "PullGroup", queue_id: int = 0, poll_ms: int = 0,
               tag: str = "*", batch: int = 32) -> tuple[pb.Status, list[pb.Message], int | None]:
    """One PullMessage: (its status, the messages, the next offset or None)."""
    request = spb.PullMessageRequest(group=pb.Resource(name=group), message_queue=queue(topic, queue_id),
                                     offset=offset, batch_size=batch,
                                     filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression=tag),
                                     long_polling_timeout=to_duration(poll_ms))
    responses = [r async for r in stub.PullMessage(request, metadata=CLIENT, timeout=poll_ms / 1000 + 5)]
    statuses = [r.status for r in responses if r.HasField("status")]
    assert len(statuses) == 1, responses
    offsets = [r.next_offset for r in responses if r.WhichOneof("content") == "next_offset"]
    return statuses[0], [r.message for r in responses if r.HasField("message")], (offsets or [None])[0]


async def one_queue_topic(cluster, prefix: str) -> str:
    topic = f"{prefix}_{uuid.uuid4().hex[:6]}"
    async with AdminClient(namesrv_addr=cluster.namesrv_addr) as admin:
        await admin.create_topic(topic, read_queues=1, write_queues=1)
    return topic


# ---------------------------------------------------------------------------------- recall


async def test_recall_message_cancels_a_pending_timer_and_refuses_as_apaches_proxy(cluster, stub):
    topic = await one_queue_topic(cluster, "GRecall")
    async with AdminClient(namesrv_addr=cluster.namesrv_addr) as admin:  # off by default, as Apache 5.3.2
        await admin.update_broker_config(cluster.broker.address, {"recallMessageEnable": "true"})
    due = int(time.time() * 1000) + 2500
    async with Producer("grpc-recall", namesrv_addr=cluster.namesrv_addr) as producer:
        doomed = await producer.send(Message(topic, b"recalled", properties={"TIMER_DELIVER_MS": str(due)}))
        await producer.send(Message(topic, b"kept", properties={"TIMER_DELIVER_MS": str(due)}))

    async def recall(topic_name: str, handle: str) -> spb.RecallMessageResponse:
        return await stub.RecallMessage(spb.RecallMessageRequest(topic=pb.Resource(name=topic_name),
                                                                 recall_handle=handle), metadata=CLIENT, timeout=5)

    refusals = {
        "malformed": (topic, "%%%", Code.INTERNAL_SERVER_ERROR, "recall handle is invalid"),
        "bad topic name": ("bad topic!", doomed.recall_handle, Code.ILLEGAL_TOPIC, None),
        "other topic": ("TBW102", doomed.recall_handle, Code.INTERNAL_SERVER_ERROR, "recall failed, topic not match"),
    }
    for name, (topic_name, handle, code, text) in refusals.items():
        answer = await recall(topic_name, handle)
        assert answer.status.code == code, name
        assert text is None or answer.status.message == text, name

    answer = await recall(topic, doomed.recall_handle)
    assert answer.status.code == Code.OK and answer.message_id == doomed.msg_id

    async def delivered():
        status, messages, _ = await pull(stub, topic, 0, poll_ms=1000)
        return [m.body for m in messages] if status.code == Code.OK else None

    deadline = time.monotonic() + 15
    while (got := await delivered()) is None and time.monotonic() < deadline:
        pass  # each pull is held until an arrival or its long-polling time
    assert got == [b"kept"]
    late = await recall(topic, doomed.recall_handle)
    assert (late.status.code, late.status.message) == (Code.INTERNAL_SERVER_ERROR, "recall failed, timestamp invalid")


async def test_recall_message_of_another_brokers_timer_is_relayed_to_that_broker(tmp_path):
    """Apache's proxy sends a recall to the broker the handle names; FerryMQ's endpoint, on one
    broker, relays it to the other over remoting."""
    a = await InProcessCluster(tmp_path / "a", settings={"grpcListenPort": 0}).start()
    b = InProcessCluster(tmp_path / "b", settings={"brokerName": "broker-b", "recallMessageEnable": "true"})
    b.namesrv = a.namesrv
    try:
        await b.start_broker()
        topic = f"GRecallB_{uuid.uuid4().hex[:6]}"
        async with AdminClient(namesrv_addr=a.namesrv_addr) as admin:
            await admin.create_topic(topic, read_queues=1, write_queues=1, broker_addr=b.broker.address)
        mq = MessageQueue(topic, "broker-b", 0)
        due = int(time.time() * 1000) + 2500
        async with Producer("grpc-recall-b", namesrv_addr=a.namesrv_addr) as producer:
            doomed = await producer.send(Message(topic, b"recalled", properties={"TIMER_DELIVER_MS": str(due)}),
                                         queue=mq)
            await producer.send(Message(topic, b"kept", properties={"TIMER_DELIVER_MS": str(due)}), queue=mq)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{a.broker.grpc.port}") as channel:
            answer = await rpc.MessagingServiceStub(channel).RecallMessage(spb.RecallMessageRequest(
                topic=pb.Resource(name=topic), recall_handle=doomed.recall_handle), metadata=CLIENT, timeout=5)
        assert (answer.status.code, answer.message_id) == (Code.OK, doomed.msg_id)
        async with PullConsumer("recall-b-check", namesrv_addr=a.namesrv_addr) as consumer:
            got = await consumer.pull(mq, 0, suspend=15)
        assert [m.body for m in got.messages] == [b"kept"]
    finally:
        await b.broker.stop()
        await a.stop()


RECALL_ACL = """
accounts:
  - accessKey: admin0001
    secretKey: admin-secret
    admin: true
  - accessKey: broker-inner
    secretKey: inner-secret
    admin: true
  - accessKey: orders-app
    secretKey: app-secret-1
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""


async def test_a_relayed_recall_is_signed_with_the_brokers_inner_credentials(tmp_path):
    """docs/timers.md#recall: with ACL on both brokers, broker A relays the recall of broker B's
    timer signed with its innerClientAuthenticationCredentials (Apache 5.3's key), and B takes it."""
    from ferrymq.acl.signature import Credentials
    from ferrymq.client.config import ClientConfig
    from tests.grpc.test_grpc_tls_acl import signed

    (tmp_path / "plain_acl.yml").write_text(RECALL_ACL)
    acl = {"aclEnable": "true", "aclFile": str(tmp_path / "plain_acl.yml")}
    a = await InProcessCluster(tmp_path / "a", settings={
        "grpcListenPort": 0, **acl,
        "innerClientAuthenticationCredentials": '{"accessKey": "broker-inner", "secretKey": "inner-secret"}'}).start()
    b = InProcessCluster(tmp_path / "b", settings={"brokerName": "broker-b", "recallMessageEnable": "true", **acl})
    b.namesrv = a.namesrv
    app = ClientConfig(namesrv_addr=a.namesrv_addr, credentials=Credentials("orders-app", "app-secret-1"))
    try:
        await b.start_broker()
        topic = f"GRecallAcl_{uuid.uuid4().hex[:6]}"
        admin_config = ClientConfig(namesrv_addr=a.namesrv_addr, credentials=Credentials("admin0001", "admin-secret"))
        async with AdminClient(config=admin_config) as admin:
            await admin.create_topic(topic, read_queues=1, write_queues=1, broker_addr=b.broker.address)
            shown = await admin.broker_config(a.broker.address)
        assert shown["innerClientAuthenticationCredentials"] == "***"  # the secret is not shown
        mq = MessageQueue(topic, "broker-b", 0)
        due = int(time.time() * 1000) + 4000
        async with Producer("grpc-recall-acl", config=app) as producer:
            doomed = await producer.send(Message(topic, b"recalled", properties={"TIMER_DELIVER_MS": str(due)}),
                                         queue=mq)
            await producer.send(Message(topic, b"kept", properties={"TIMER_DELIVER_MS": str(due)}), queue=mq)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{a.broker.grpc.port}") as channel:
            answer = await rpc.MessagingServiceStub(channel).RecallMessage(spb.RecallMessageRequest(
                topic=pb.Resource(name=topic), recall_handle=doomed.recall_handle),
                metadata=signed("orders-app", "app-secret-1"), timeout=5)
        assert (answer.status.code, answer.status.message, answer.message_id) == (Code.OK, "OK", doomed.msg_id)
        async with PullConsumer("recall-acl-check", config=app) as consumer:
            got = await consumer.pull(mq, 0, suspend=15)
        assert [m.body for m in got.messages] == [b"kept"]
    finally:
        await b.broker.stop()
        await a.stop()


# ---------------------------------------------------------------------------------- pull


async def test_pull_message_reads_a_queue_from_an_offset_with_filters_and_long_polling(cluster, stub):
    topic = await one_queue_topic(cluster, "GPull")
    for i in range(5):
        assert (await send(stub, message(topic, f"m{i}".encode(), tag="even" if i % 2 == 0 else "odd"))).status.code \
            == Code.OK

    status, messages, next_offset = await pull(stub, topic, 0)
    assert status.code == Code.OK and next_offset == 5
    assert [m.body for m in messages] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert [m.system_properties.queue_offset for m in messages] == [0, 1, 2, 3, 4]
    assert messages[0].system_properties.tag == "even" and messages[0].topic.name == topic

    status, messages, next_offset = await pull(stub, topic, 1, batch=2)
    assert (status.code, [m.body for m in messages], next_offset) == (Code.OK, [b"m1", b"m2"], 3)

    status, messages, _ = await pull(stub, topic, 0, tag="odd")
    assert status.code == Code.OK and [m.body for m in messages] == [b"m1", b"m3"]

    status, messages, next_offset = await pull(stub, topic, 5)  # at the end, no wait
    assert (status.code, messages, next_offset) == (Code.MESSAGE_NOT_FOUND, [], 5)

    status, _, next_offset = await pull(stub, topic, 50)  # past the end
    assert status.code == Code.ILLEGAL_OFFSET and next_offset == 5

    held = asyncio.ensure_future(pull(stub, topic, 5, poll_ms=10_000))
    await asyncio.sleep(0.5)  # let the pull be held (a later arrival must wake it)
    assert not held.done()
    started = time.monotonic()
    await send(stub, message(topic, b"late"))
    status, messages, next_offset = await held
    assert (status.code, [m.body for m in messages], next_offset) == (Code.OK, [b"late"], 6)
    assert time.monotonic() - started < 5, "an arrival wakes a held pull"


async def test_pull_refusals_travel_in_the_status(cluster, stub):
    topic = await one_queue_topic(cluster, "GPullBad")
    cases = {
        "unknown topic": (dict(topic="NoSuchTopic", offset=0), Code.TOPIC_NOT_FOUND),
        "bad group": (dict(topic=topic, offset=0, group="bad group!"), Code.ILLEGAL_CONSUMER_GROUP),
        "no such queue": (dict(topic=topic, offset=0, queue_id=7), Code.BAD_REQUEST),
        "negative offset": (dict(topic=topic, offset=-1), Code.ILLEGAL_OFFSET),
    }
    for name, (kw, code) in cases.items():
        status, messages, _ = await pull(stub, kw.pop("topic"), kw.pop("offset"), **kw)
        assert (status.code, messages) == (code, []), f"{name}: {status}"


# ---------------------------------------------------------------------------------- offsets


async def test_offsets_are_queried_updated_and_shared_with_remoting_consumers(cluster, stub):
    topic = await one_queue_topic(cluster, "GOffset")
    before = int(time.time() * 1000)
    for i in range(4):
        await send(stub, message(topic, f"o{i}".encode()))
    group = pb.Resource(name="OffsetGroup")

    async def query(policy, **kw) -> spb.QueryOffsetResponse:
        return await stub.QueryOffset(spb.QueryOffsetRequest(message_queue=queue(topic), query_offset_policy=policy,
                                                             **kw), metadata=CLIENT, timeout=5)

    assert (await query(pb.QueryOffsetPolicy.BEGINNING)).offset == 0
    assert (await query(pb.QueryOffsetPolicy.END)).offset == 4
    assert (await query(pb.QueryOffsetPolicy.TIMESTAMP, timestamp=to_timestamp(before - 60_000))).offset == 0
    assert (await query(pb.QueryOffsetPolicy.TIMESTAMP)).status.code == Code.BAD_REQUEST

    async def get() -> spb.GetOffsetResponse:
        return await stub.GetOffset(spb.GetOffsetRequest(group=group, message_queue=queue(topic)),
                                    metadata=CLIENT, timeout=5)

    async def update(offset: int) -> spb.UpdateOffsetResponse:
        return await stub.UpdateOffset(spb.UpdateOffsetRequest(group=group, message_queue=queue(topic), offset=offset),
                                       metadata=CLIENT, timeout=5)

    assert (await get()).status.code == Code.OFFSET_NOT_FOUND
    assert (await update(3)).status.code == Code.OK
    answer = await get()
    assert (answer.status.code, answer.offset) == (Code.OK, 3)
    assert (await update(9)).status.code == Code.ILLEGAL_OFFSET  # past the queue's end
    assert (await get()).offset == 3
    async with PullConsumer("OffsetGroup", namesrv_addr=cluster.namesrv_addr) as consumer:  # one table, both protocols
        assert await consumer.committed(MessageQueue(topic, "broker-a", 0)) == 3
    missing = await stub.QueryOffset(spb.QueryOffsetRequest(message_queue=queue("NoSuchTopic")), metadata=CLIENT,
                                     timeout=5)
    assert missing.status.code == Code.TOPIC_NOT_FOUND


# ---------------------------------------------------------------------------------- every call

REFUSED = {"SyncLiteSubscription": Code.UNSUPPORTED}  # the calls FerryMQ does not serve


async def test_every_call_of_the_service_is_served_or_refused_naming_it(cluster, stub):
    service = spb.DESCRIPTOR.services_by_name["MessagingService"]
    for method in service.methods:
        request = getattr(spb, method.input_type.name)()
        call = getattr(stub, method.name)
        try:
            if method.client_streaming:
                stream = call(metadata=CLIENT, timeout=5)
                await stream.write(request)
                await stream.done_writing()
                answers = [a async for a in stream]
            elif method.server_streaming:
                answers = [a async for a in call(request, metadata=CLIENT, timeout=5)]
            else:
                answers = [await call(request, metadata=CLIENT, timeout=5)]
        except grpc.aio.AioRpcError as exc:
            pytest.fail(f"{method.name}: gRPC error {exc.code()} instead of an answer in the Status")
        statuses = [a.status for a in answers if a.HasField("status")]
        assert statuses, f"{method.name}: no Status in {answers}"
        code = statuses[0].code
        if method.name in REFUSED:
            assert code == REFUSED[method.name] and method.name in statuses[0].message, method.name
        else:
            assert code not in (Code.NOT_IMPLEMENTED, Code.UNSUPPORTED), f"{method.name}: {statuses[0]}"
