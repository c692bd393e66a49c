"""The broker's gRPC endpoint spoken to with the v2 protocol's own generated stub (from the
official Python client's package): what an official client relies on, and the refusals a
client library would hide (each in the response's Status, never a gRPC error)."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import time
import uuid

import grpc
import pytest

from ferrymq.client.admin import AdminClient
from ferrymq.common.message import Prop
from ferrymq.grpc.messages import to_duration, to_timestamp
from ferrymq.grpc.protocol import Code, pb, rpc, spb
from tests.support import InProcessCluster

pytestmark = pytest.mark.integration

CLIENT = (("x-mq-client-id", "test-client@1"), ("x-mq-language", "PYTHON"), ("x-mq-protocol", "v2"))


@pytest.fixture
async def cluster(tmp_path):
    c = await InProcessCluster(tmp_path / "a", settings={"grpcListenPort": 0, "maxMessageSize": 65536}).start()
    try:
        yield c
    finally:
        await c.stop()


@pytest.fixture
async def stub(cluster):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{cluster.broker.grpc.port}") as channel:
        yield rpc.MessagingServiceStub(channel)


def message(topic: str, body: bytes = b"hello", **system) -> pb.Message:
    system.setdefault("message_id", uuid.uuid4().hex.upper())
    return pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=pb.SystemProperties(**system))


async def send(stub, msg: pb.Message) -> spb.SendMessageResponse:
    return await stub.SendMessage(spb.SendMessageRequest(messages=[msg]), metadata=CLIENT, timeout=5)


async def receive(stub, topic: str, group: str, *, invisible_ms: int = 10_000, poll_ms: int = 0,
                  expression: str = "*") -> list[spb.ReceiveMessageResponse]:
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
        filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression=expression), batch_size=16,
        invisible_duration=to_duration(invisible_ms), long_polling_timeout=to_duration(poll_ms))
    return [r async for r in stub.ReceiveMessage(request, metadata=CLIENT, timeout=poll_ms / 1000 + 5)]


def bodies(responses) -> list[pb.Message]:
    return [r.message for r in responses if r.HasField("message")]


async def test_route_names_the_brokers_grpc_endpoint_and_accepted_types(cluster, stub):
    topic = f"Route_{uuid.uuid4().hex[:6]}"
    route = await stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=CLIENT, timeout=5)
    assert route.status.code == Code.OK  # auto-created here, as a 4.x producer's first send would
    assert route.message_queues
    for mq in route.message_queues:
        assert [(a.host, a.port) for a in mq.broker.endpoints.addresses] == [("127.0.0.1", cluster.broker.grpc.port)]
        assert mq.broker.name == cluster.broker.config.broker_name and mq.broker.id == 0
        assert set(mq.accept_message_types) == {pb.MessageType.NORMAL, pb.MessageType.FIFO, pb.MessageType.DELAY,
                                                pb.MessageType.TRANSACTION}


async def test_unknown_topic_without_auto_create_is_topic_not_found(tmp_path):
    c = await InProcessCluster(tmp_path, settings={"grpcListenPort": 0, "autoCreateTopicEnable": "false"}).start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{c.broker.grpc.port}") as channel:
            route = await rpc.MessagingServiceStub(channel).QueryRoute(
                spb.QueryRouteRequest(topic=pb.Resource(name="NoSuchTopic")), metadata=CLIENT, timeout=5)
        assert route.status.code == Code.TOPIC_NOT_FOUND
    finally:
        await c.stop()


async def test_brokers_of_a_cluster_tell_clients_each_others_grpc_endpoints(tmp_path):
    a = await InProcessCluster(tmp_path / "a", settings={"grpcListenPort": 0}).start()
    b = InProcessCluster(tmp_path / "b", settings={"grpcListenPort": 0, "brokerName": "broker-b"})
    b.namesrv = a.namesrv
    try:
        await b.start_broker()
        topic = f"Both_{uuid.uuid4().hex[:6]}"
        async with AdminClient(namesrv_addr=a.namesrv_addr) as admin:
            await admin.create_topic(topic, read_queues=2, write_queues=2)
        assert await a.broker.grpc.wait_announced(10) and await b.broker.grpc.wait_announced(10)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{a.broker.grpc.port}") as channel:
            route = await rpc.MessagingServiceStub(channel).QueryRoute(
                spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=CLIENT, timeout=5)
        endpoints = {mq.broker.name: mq.broker.endpoints.addresses[0].port for mq in route.message_queues}
        assert endpoints == {"broker-a": a.broker.grpc.port, "broker-b": b.broker.grpc.port}
    finally:
        await b.broker.stop()
        await a.stop()


async def test_telemetry_answers_the_clients_settings_at_once(cluster, stub):
    async with AdminClient(namesrv_addr=cluster.namesrv_addr) as admin:
        await admin.create_group("FifoSettings", consume_message_orderly=True, retry_max_times=5)
    producer = pb.Settings(client_type=pb.ClientType.PRODUCER,
                           publishing=pb.Publishing(topics=[pb.Resource(name="T")]))
    consumer = pb.Settings(client_type=pb.ClientType.SIMPLE_CONSUMER,
                           subscription=pb.Subscription(group=pb.Resource(name="FifoSettings")))
    for sent in (producer, consumer):
        call = stub.Telemetry(metadata=CLIENT, timeout=10)
        started = time.monotonic()
        await call.write(spb.TelemetryCommand(settings=sent))
        answer = await call.read()
        await call.done_writing()
        assert time.monotonic() - started < 3, "clients give up after 3 s"
        assert answer.status.code == Code.OK
        if sent is producer:
            assert answer.settings.publishing.max_body_size == 65536
            assert answer.settings.publishing.validate_message_type
            assert answer.settings.backoff_policy.HasField("exponential_backoff")
        else:
            assert answer.settings.subscription.fifo
            assert answer.settings.backoff_policy.max_attempts == 6
            assert answer.settings.backoff_policy.HasField("customized_backoff")


async def test_send_refusals_travel_in_the_status(cluster, stub):
    topic = f"Refuse_{uuid.uuid4().hex[:6]}"
    cases = {
        Code.MESSAGE_CORRUPTED: message(topic, b"abc", body_digest=pb.Digest(type=pb.DigestType.MD5,
                                                                             checksum="0" * 32)),
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE: message(topic, message_group="g",
                                                          delivery_timestamp=to_timestamp(int(time.time() * 1000))),
        Code.MESSAGE_BODY_EMPTY: message(topic, b""),
        Code.ILLEGAL_MESSAGE_ID: message(topic, message_id=""),
        Code.MESSAGE_BODY_TOO_LARGE: message(topic, b"x" * 70_000),
        Code.ILLEGAL_DELIVERY_TIME: message(topic, delivery_timestamp=to_timestamp(
            int(time.time() * 1000) + 4 * 86400_000)),  # timerMaxDelaySec: 3 days
        Code.ILLEGAL_TOPIC: message("bad topic!"),
    }
    reserved = message(topic)
    reserved.user_properties[Prop.DELAY] = "3"
    cases[Code.ILLEGAL_MESSAGE_PROPERTY_KEY] = reserved
    for code, msg in cases.items():
        response = await send(stub, msg)
        assert response.status.code == code, (Code.Name(code), response.status)
    # control characters (Java's isISOControl, as Apache's proxy refuses them): 0x01 and 0x02 would
    # otherwise split the stored properties and make up new ones
    smuggled = message(topic)
    smuggled.user_properties["note"] = "x\x02DELAY\x013"
    for code, msg in [(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, smuggled), (Code.ILLEGAL_MESSAGE_TAG, message(topic, tag="a\x01b")),
                      (Code.ILLEGAL_MESSAGE_KEY, message(topic, keys=["k\n1"])),
                      (Code.ILLEGAL_MESSAGE_GROUP, message(topic, message_group="g\x7f")),
                      (Code.ILLEGAL_MESSAGE_ID, message(topic, message_id="ID\x02KEYS\x01k"))]:
        response = await send(stub, msg)
        assert response.status.code == code, (Code.Name(code), response.status)
        assert "control character" in response.status.message
    # nothing of that was stored
    assert bodies(await receive(stub, topic, "RefuseGroup")) == []


async def test_digest_and_gzip_are_honoured_and_a_message_round_trips(cluster, stub):
    topic = f"Gzip_{uuid.uuid4().hex[:6]}"
    plain = b"payload " * 100
    packed = gzip.compress(plain)
    msg = message(topic, packed, tag="TagZ", keys=["k1", "k2"], body_encoding=pb.Encoding.GZIP,
                  body_digest=pb.Digest(type=pb.DigestType.SHA1, checksum=hashlib.sha1(packed).hexdigest()))
    msg.user_properties["color"] = "blue"
    response = await send(stub, msg)
    assert response.status.code == Code.OK and response.entries[0].message_id == msg.system_properties.message_id
    got = await receive(stub, topic, "GzipGroup")
    assert got[0].status.code == Code.OK and any(r.HasField("delivery_timestamp") for r in got)
    [m] = bodies(got)
    assert m.body == plain and m.system_properties.body_encoding == pb.Encoding.IDENTITY
    assert m.system_properties.body_digest.checksum == hashlib.md5(plain).hexdigest().upper()
    assert m.system_properties.tag == "TagZ" and list(m.system_properties.keys) == ["k1", "k2"]
    assert dict(m.user_properties) == {"color": "blue"}
    assert m.system_properties.message_id == msg.system_properties.message_id
    assert m.system_properties.delivery_attempt == 1 and m.system_properties.receipt_handle


async def test_receive_with_nothing_waits_its_long_polling_time_then_message_not_found(cluster, stub):
    topic = f"Empty_{uuid.uuid4().hex[:6]}"
    await send(stub, message(topic, tag="Other"))  # exists, but nothing the filter wants
    started = time.monotonic()
    got = await receive(stub, topic, "EmptyGroup", poll_ms=1000, expression="TagA")
    assert [r.status.code for r in got] == [Code.MESSAGE_NOT_FOUND]
    assert time.monotonic() - started >= 0.9


async def test_held_receive_is_answered_when_a_message_arrives(cluster, stub):
    topic = f"Wake_{uuid.uuid4().hex[:6]}"
    await send(stub, message(topic, b"first"))
    assert len(bodies(await receive(stub, topic, "WakeGroup"))) == 1
    held = asyncio.ensure_future(receive(stub, topic, "WakeGroup", poll_ms=20_000))
    await asyncio.sleep(0.3)
    started = time.monotonic()
    await send(stub, message(topic, b"second"))
    got = await held
    assert [m.body for m in bodies(got)] == [b"second"]
    assert time.monotonic() - started < 5, "an arrival, not the long-polling timer, answered it"


async def test_ack_change_invisible_and_bad_handles(cluster, stub):
    topic, group = f"Ack_{uuid.uuid4().hex[:6]}", "AckGroup"
    await send(stub, message(topic, b"one"))
    [m] = bodies(await receive(stub, topic, group))
    handle = m.system_properties.receipt_handle
    changed = await stub.ChangeInvisibleDuration(spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name=group), topic=pb.Resource(name=topic), receipt_handle=handle,
        invisible_duration=to_duration(1000), message_id=m.system_properties.message_id), metadata=CLIENT, timeout=5)
    assert changed.status.code == Code.OK and changed.receipt_handle and changed.receipt_handle != handle
    ack = spb.AckMessageRequest(group=pb.Resource(name=group), topic=pb.Resource(name=topic), entries=[
        spb.AckMessageEntry(message_id=m.system_properties.message_id, receipt_handle=handle)])
    stale = await stub.AckMessage(ack, metadata=CLIENT, timeout=5)
    assert stale.status.code == Code.INVALID_RECEIPT_HANDLE  # replaced by the change
    [again] = bodies(await receive(stub, topic, group, poll_ms=5000))  # back after 1 s
    assert again.system_properties.delivery_attempt == 2
    ack.entries[0].receipt_handle = again.system_properties.receipt_handle
    assert (await stub.AckMessage(ack, metadata=CLIENT, timeout=5)).status.code == Code.OK
    ack.entries[0].receipt_handle = "not-a-handle"
    bogus = await stub.AckMessage(ack, metadata=CLIENT, timeout=5)
    assert bogus.status.code == Code.INVALID_RECEIPT_HANDLE and bogus.entries[0].status.code == Code.INVALID_RECEIPT_HANDLE
    bad_time = await receive(stub, topic, group, invisible_ms=10)
    assert [r.status.code for r in bad_time] == [Code.ILLEGAL_INVISIBLE_TIME]
    no_group = await receive(stub, topic, "")
    assert [r.status.code for r in no_group] == [Code.ILLEGAL_CONSUMER_GROUP]


async def test_assignments_normal_group_one_per_broker_fifo_group_every_queue(cluster, stub):
    topic = f"Assign_{uuid.uuid4().hex[:6]}"
    async with AdminClient(namesrv_addr=cluster.namesrv_addr) as admin:
        await admin.create_topic(topic, read_queues=4, write_queues=4)
        await admin.create_group("AssignFifo", consume_message_orderly=True)

    async def ids(group: str) -> list[int]:
        r = await stub.QueryAssignment(spb.QueryAssignmentRequest(topic=pb.Resource(name=topic),
                                                                  group=pb.Resource(name=group)),
                                       metadata=CLIENT, timeout=5)
        assert r.status.code == Code.OK
        return sorted(a.message_queue.id for a in r.assignments)

    assert await ids("AssignNormal") == [-1]
    assert await ids("AssignFifo") == [0, 1, 2, 3]


async def test_forward_to_dead_letter_queue_moves_it_and_ends_redelivery(cluster, stub):
    topic, group = f"Dlq_{uuid.uuid4().hex[:6]}", "DlqGroup"
    await send(stub, message(topic, b"poison"))
    [m] = bodies(await receive(stub, topic, group, invisible_ms=1000))
    r = await stub.ForwardMessageToDeadLetterQueue(spb.ForwardMessageToDeadLetterQueueRequest(
        group=pb.Resource(name=group), topic=pb.Resource(name=topic), receipt_handle=m.system_properties.receipt_handle,
        message_id=m.system_properties.message_id, delivery_attempt=1, max_delivery_attempts=1),
        metadata=CLIENT, timeout=5)
    assert r.status.code == Code.OK
    assert bodies(await receive(stub, topic, group, poll_ms=2000)) == []  # not back after its 1 s
    [dead] = bodies(await receive(stub, f"%DLQ%{group}", "DlqReader"))
    assert dead.body == b"poison"


async def test_transaction_commit_shows_the_message_rollback_never(cluster, stub):
    topic, group = f"Tx_{uuid.uuid4().hex[:6]}", "TxGroup"
    entries = {}
    for body in (b"commit-me", b"roll-me-back"):
        r = await send(stub, message(topic, body, message_type=pb.MessageType.TRANSACTION))
        assert r.status.code == Code.OK and r.entries[0].transaction_id
        entries[body] = r.entries[0]
    assert bodies(await receive(stub, topic, group)) == []  # half messages are invisible
    for body, resolution in ((b"commit-me", pb.TransactionResolution.COMMIT),
                             (b"roll-me-back", pb.TransactionResolution.ROLLBACK)):
        end = await stub.EndTransaction(spb.EndTransactionRequest(
            topic=pb.Resource(name=topic), message_id=entries[body].message_id,
            transaction_id=entries[body].transaction_id, resolution=resolution,
            source=pb.TransactionSource.SOURCE_CLIENT), metadata=CLIENT, timeout=5)
        assert end.status.code == Code.OK
    assert [m.body for m in bodies(await receive(stub, topic, group, poll_ms=1000))] == [b"commit-me"]
    forged = await stub.EndTransaction(spb.EndTransactionRequest(
        topic=pb.Resource(name=topic), message_id="x", transaction_id="nonsense",
        resolution=pb.TransactionResolution.COMMIT), metadata=CLIENT, timeout=5)
    assert forged.status.code == Code.INVALID_TRANSACTION_ID


async def test_a_heartbeat_without_client_id_is_refused_in_the_status(cluster, stub):
    h = await stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.ClientType.PRODUCER), timeout=5)
    assert h.status.code == Code.CLIENT_ID_REQUIRED


async def test_broker_stops_promptly_with_a_receive_held(tmp_path):
    c = await InProcessCluster(tmp_path, settings={"grpcListenPort": 0}).start()
    topic = f"Stop_{uuid.uuid4().hex[:6]}"
    async with grpc.aio.insecure_channel(f"127.0.0.1:{c.broker.grpc.port}") as channel:
        stub = rpc.MessagingServiceStub(channel)
        await send(stub, message(topic))
        assert len(bodies(await receive(stub, topic, "StopGroup"))) == 1
        held = asyncio.ensure_future(receive(stub, topic, "StopGroup", poll_ms=60_000))
        await asyncio.sleep(0.3)
        started = time.monotonic()
        await c.stop()
        assert time.monotonic() - started < 10, "a held receive must not keep the broker from stopping"
        try:
            answer = await asyncio.wait_for(held, 10)
            assert [r.status.code for r in answer] == [Code.MESSAGE_NOT_FOUND]
        except grpc.aio.AioRpcError as exc:  # or the connection ended with the server
            assert exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)


async def test_forward_to_dead_letter_queue_with_a_handle_from_before_a_restart(tmp_path):
    c = await InProcessCluster(tmp_path, settings={"grpcListenPort": 0}).start()
    topic, group = f"DlqRestart_{uuid.uuid4().hex[:6]}", "DlqRestartGroup"
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{c.broker.grpc.port}") as channel:
            stub = rpc.MessagingServiceStub(channel)
            await send(stub, message(topic, b"poison"))
            [m] = bodies(await receive(stub, topic, group, invisible_ms=60_000))
        await c.restart_broker()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{c.broker.grpc.port}") as channel:
            stub = rpc.MessagingServiceStub(channel)
            r = await stub.ForwardMessageToDeadLetterQueue(spb.ForwardMessageToDeadLetterQueueRequest(
                group=pb.Resource(name=group), topic=pb.Resource(name=topic),
                receipt_handle=m.system_properties.receipt_handle, message_id=m.system_properties.message_id,
                delivery_attempt=1, max_delivery_attempts=1), metadata=CLIENT, timeout=5)
            assert r.status.code == Code.OK
            [dead] = bodies(await receive(stub, f"%DLQ%{group}", "DlqReader"))
            assert dead.body == b"poison"
            bogus = await stub.ForwardMessageToDeadLetterQueue(spb.ForwardMessageToDeadLetterQueueRequest(
                group=pb.Resource(name=group), topic=pb.Resource(name=topic), receipt_handle="garbage"),
                metadata=CLIENT, timeout=5)
            assert bogus.status.code == Code.INVALID_RECEIPT_HANDLE
    finally:
        await c.stop()


async def test_a_delivery_timestamp_is_a_timer_to_the_second_not_a_delay_level(cluster, stub):
    """6 s ahead is no delay level (5 s, then 10 s): received from 6 s on and well before 10 s."""
    topic = f"Timer_{uuid.uuid4().hex[:6]}"
    due_ms = int(time.time() * 1000) + 6000
    sent = await send(stub, message(topic, b"at six", delivery_timestamp=to_timestamp(due_ms)))
    assert sent.status.code == Code.OK, sent.status
    got = []
    while not got and time.time() * 1000 < due_ms + 3900:
        got = bodies(await receive(stub, topic, "TimerGroup", poll_ms=1000))
    got_ms = time.time() * 1000
    assert [m.body for m in got] == [b"at six"]
    assert due_ms <= got_ms < due_ms + 3900, f"received {got_ms - due_ms:.0f} ms after its delivery time"
    assert got[0].system_properties.message_type == pb.MessageType.DELAY


async def test_a_delivery_timestamp_with_the_timer_wheel_off_is_refused(tmp_path):
    c = await InProcessCluster(tmp_path, settings={"grpcListenPort": 0, "timerWheelEnable": "false"}).start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{c.broker.grpc.port}") as channel:
            response = await send(rpc.MessagingServiceStub(channel), message(
                f"NoWheel_{uuid.uuid4().hex[:6]}", delivery_timestamp=to_timestamp(int(time.time() * 1000) + 5000)))
    finally:
        await c.stop()
    assert response.status.code == Code.INTERNAL_SERVER_ERROR
    assert "accurate timer message is not enabled, timerWheelEnable is false" in response.status.message
