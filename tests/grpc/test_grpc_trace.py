"""Trace records the broker writes for gRPC traffic when ``traceTopicEnable`` is on
(docs/trace.md#rocketmq-5-grpc-clients), read back as ``ferrymq admin message trace`` reads them
(the admin client's ``message_trace``): a send, a simple consumer's receipt, more time and ack, a push
consumer's nack and dead-lettering, a transaction's end; none on a broker without it."""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

import grpc
import pytest

from ferrymq.cli.message_commands import run_trace
from ferrymq.client.admin import AdminClient
from ferrymq.client.producer import Producer
from ferrymq.common.message import Message
from ferrymq.common.trace_data import DEFAULT_TRACE_TOPIC, RECORDED_BY_BROKER, TraceEvent, decode_trace_data
from ferrymq.grpc.messages import to_duration
from ferrymq.grpc.protocol import Code, pb, rpc, spb
from ferrymq.grpc.trace import GrpcTrace
from ferrymq.remoting.codes import ResponseCode
from tests.grpc.test_grpc_endpoint import CLIENT, bodies, message, receive, send
from tests.support import InProcessCluster
from testkit.wait import wait_until

pytestmark = pytest.mark.integration

PUSH_CLIENT = (("x-mq-client-id", "push-client@2"), ("x-mq-language", "JAVA"), ("x-mq-protocol", "v2"))


@pytest.fixture
async def traced(tmp_path):
    c = await InProcessCluster(tmp_path / "a", settings={"grpcListenPort": 0, "traceTopicEnable": "true"}).start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{c.broker.grpc.port}") as channel, \
                AdminClient(namesrv_addr=c.namesrv_addr) as admin:
            yield c, rpc.MessagingServiceStub(channel), admin
    finally:
        await c.stop()


async def trace_of(admin: AdminClient, msg_id: str, types: list[str]):
    """The message's trace once it holds records of exactly ``types`` (in time order)."""
    async def found():
        trace = await admin.message_trace(msg_id)
        return trace if [e.type for e in trace.events] == types else None
    return await wait_until(found, timeout=20, what=f"trace records {types} of {msg_id}", interval=0.1)


async def test_send_receive_ack_write_pub_sub_before_and_sub_after(traced, capsys):
    cluster, stub, admin = traced
    topic, group = f"Trace_{uuid.uuid4().hex[:6]}", "TraceGroup"
    began = int(time.time() * 1000)
    sent = await send(stub, message(topic, b"traced body", tag="TagT", keys=["order-1"]))
    assert sent.status.code == Code.OK
    msg_id = sent.entries[0].message_id
    [m] = bodies(await receive(stub, topic, group))
    # a simple consumer asking for more time: the delivery goes on under the new handle
    more = await stub.ChangeInvisibleDuration(spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name=group), topic=pb.Resource(name=topic), receipt_handle=m.system_properties.receipt_handle,
        invisible_duration=to_duration(30_000), message_id=msg_id), metadata=CLIENT, timeout=5)
    assert more.status.code == Code.OK
    ack = await stub.AckMessage(spb.AckMessageRequest(group=pb.Resource(name=group), topic=pb.Resource(name=topic),
                                                      entries=[spb.AckMessageEntry(
                                                          message_id=msg_id, receipt_handle=more.receipt_handle)]),
                                metadata=CLIENT, timeout=5)
    assert ack.status.code == Code.OK
    acked = int(time.time() * 1000)

    pub, before, after = (await trace_of(admin, msg_id, ["Pub", "SubBefore", "SubAfter"])).events
    assert all(e.recorded_by == RECORDED_BY_BROKER and e.msg_id == msg_id for e in (pub, before, after))
    assert (pub.topic, pub.group, pub.tags, pub.keys, pub.success, pub.msg_type) == \
        (topic, "test-client@1", "TagT", "order-1", True, "Normal")
    assert pub.body_length == len(b"traced body") and pub.region_id == "DefaultRegion"
    assert pub.offset_msg_id and pub.store_host == m.system_properties.store_host
    assert pub.client_host.startswith("127.0.0.1:") and began <= pub.timestamp <= acked and pub.cost_ms >= 0
    assert (before.group, before.topic, before.retry_times, before.keys) == (group, topic, 0, "order-1")
    assert before.client_host.startswith("127.0.0.1:") and pub.timestamp <= before.timestamp <= acked
    assert (after.group, after.topic, after.success, after.request_id) == (group, topic, True, before.request_id)
    assert after.timestamp >= before.timestamp and after.cost_ms == after.timestamp - before.timestamp
    assert cluster.broker.grpc.service.trace.dropped == 0

    # the table of `ferrymq admin message trace` says who wrote each row
    code = await run_trace(argparse.Namespace(namesrv=cluster.namesrv_addr, msg_id=msg_id, trace_topic=DEFAULT_TRACE_TOPIC,
                                              max=64, begin=0, end=None, json=False))
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert code == 0 and rows[0][-1] == "recordedBy"
    assert [(r[0], r[-1]) for r in rows[1:] if r[0] in ("publish", "consume")] == \
        [("publish", "broker"), ("consume", "broker"), ("consume", "broker")]


async def test_a_full_queue_drops_records_counted_and_logged_never_waiting(caplog):
    """A trace write that does not finish (a stalled store) holds up no call: records beyond the
    queue's room are dropped at once, counted and logged; those queued are written later."""
    stalled = asyncio.Event()
    stored = []

    async def store(request, client):
        await stalled.wait()
        stored.append(decode_trace_data(request.body))
        return request.response(ResponseCode.SUCCESS)

    trace = GrpcTrace(topic=DEFAULT_TRACE_TOPIC, region=lambda: "DefaultRegion", send=store, max_pending=2)
    trace.start()
    for n in range(5):
        trace.published(TraceEvent("Pub", f"ID{n}", timestamp=n, topic="T", success=True), ("127.0.0.1", 5555), [])
    assert (trace.dropped, trace.written) == (3, 0)
    assert "3 trace record(s) dropped" not in caplog.text and "1 trace record(s) dropped so far" in caplog.text
    stalled.set()
    await trace.stop()
    assert [[e.msg_id for e in batch] for batch in stored] == [["ID0", "ID1"]] and trace.written == 2


async def test_push_consumer_nack_and_dead_letter_are_failed_deliveries(traced):
    _, stub, admin = traced
    topic, group = f"TraceNack_{uuid.uuid4().hex[:6]}", "TraceNackGroup"
    heartbeat = await stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.ClientType.PUSH_CONSUMER,
                                                          group=pb.Resource(name=group)), metadata=PUSH_CLIENT, timeout=5)
    assert heartbeat.status.code == Code.OK
    msg_id = (await send(stub, message(topic, b"fails"))).entries[0].message_id
    [first] = bodies(await receive(stub, topic, group))
    nack = await stub.ChangeInvisibleDuration(spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name=group), topic=pb.Resource(name=topic),
        receipt_handle=first.system_properties.receipt_handle, invisible_duration=to_duration(0),
        message_id=msg_id), metadata=PUSH_CLIENT, timeout=5)
    assert nack.status.code == Code.OK
    [second] = bodies(await receive(stub, topic, group, poll_ms=5000))
    dead = await stub.ForwardMessageToDeadLetterQueue(spb.ForwardMessageToDeadLetterQueueRequest(
        group=pb.Resource(name=group), topic=pb.Resource(name=topic),
        receipt_handle=second.system_properties.receipt_handle, message_id=msg_id, delivery_attempt=2,
        max_delivery_attempts=2), metadata=PUSH_CLIENT, timeout=5)
    assert dead.status.code == Code.OK

    trace = await trace_of(admin, msg_id, ["Pub", "SubBefore", "SubAfter", "SubBefore", "SubAfter"])
    _, before1, after1, before2, after2 = trace.events
    assert (before1.retry_times, before2.retry_times) == (0, 1)
    assert (after1.request_id, after2.request_id) == (before1.request_id, before2.request_id)
    assert (after1.success, after2.success) == (False, False) and after1.group == after2.group == group


async def test_end_transaction_writes_its_record(traced):
    _, stub, admin = traced
    topic = f"TraceTx_{uuid.uuid4().hex[:6]}"
    sent = (await send(stub, message(topic, b"tx", message_type=pb.MessageType.TRANSACTION))).entries[0]
    end = await stub.EndTransaction(spb.EndTransactionRequest(
        topic=pb.Resource(name=topic), message_id=sent.message_id, transaction_id=sent.transaction_id,
        resolution=pb.TransactionResolution.COMMIT, source=pb.TransactionSource.SOURCE_CLIENT),
        metadata=CLIENT, timeout=5)
    assert end.status.code == Code.OK
    pub, ended = (await trace_of(admin, sent.message_id, ["Pub", "EndTransaction"])).events
    assert pub.msg_type == "Trans" and ended.msg_type == "Trans"
    assert (ended.topic, ended.transaction_id, ended.transaction_state, ended.from_transaction_check) == \
        (topic, sent.transaction_id, "COMMIT_MESSAGE", False)


async def test_a_broker_without_trace_topic_enable_writes_none(tmp_path):
    c = await InProcessCluster(tmp_path / "off", settings={"grpcListenPort": 0}).start()
    try:
        async with AdminClient(namesrv_addr=c.namesrv_addr) as admin:
            # the trace topic made by a client's first trace send: still no records from the broker
            async with Producer("trace-client", namesrv_addr=c.namesrv_addr) as producer:
                await producer.send(Message("RMQ_SYS_TRACE_TOPIC", b"not about this message"))
            async with grpc.aio.insecure_channel(f"127.0.0.1:{c.broker.grpc.port}") as channel:
                stub = rpc.MessagingServiceStub(channel)
                topic, group = f"NoTrace_{uuid.uuid4().hex[:6]}", "NoTraceGroup"
                msg_id = (await send(stub, message(topic, b"plain"))).entries[0].message_id
                [m] = bodies(await receive(stub, topic, group))
                ack = await stub.AckMessage(spb.AckMessageRequest(
                    group=pb.Resource(name=group), topic=pb.Resource(name=topic),
                    entries=[spb.AckMessageEntry(message_id=msg_id, receipt_handle=m.system_properties.receipt_handle)]),
                    metadata=CLIENT, timeout=5)
                assert ack.status.code == Code.OK
            await c.broker.grpc.stop()  # whatever its calls left to write is written by now
            assert (await admin.message_trace(msg_id)).events == []
            assert await admin.query_messages("RMQ_SYS_TRACE_TOPIC", msg_id) == []
    finally:
        await c.stop()
