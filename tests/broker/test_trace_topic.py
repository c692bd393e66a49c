"""traceTopicEnable / msgTraceTopicName (docs/trace.md#the-trace-topic) and reading a trace back
through the admin client (docs/trace.md#reading-a-trace)."""

from __future__ import annotations

from ferrymq.client.admin import AdminClient
from ferrymq.client.producer import Producer
from ferrymq.common.message import Message
from ferrymq.common.protocol import Perm
from tests.common.test_trace_data import CONSUME, MSG_ID, PUB
from tests.support import InProcessCluster


async def test_the_trace_topic_is_served_only_when_enabled(tmp_path):
    off = await InProcessCluster(tmp_path / "off").start()
    try:
        async with AdminClient(namesrv_addr=off.namesrv_addr) as admin:
            assert "RMQ_SYS_TRACE_TOPIC" not in await admin.topic_list()
    finally:
        await off.stop()

    on = await InProcessCluster(tmp_path / "on", settings={"traceTopicEnable": "true",
                                                           "msgTraceTopicName": "OPS_TRACE"}).start()
    try:
        async with AdminClient(namesrv_addr=on.namesrv_addr) as admin:
            (queues,) = (await admin.topic_route("OPS_TRACE")).queue_datas
            assert (queues.read_queue_nums, queues.write_queue_nums, queues.perm) == (1, 1, Perm.READ_WRITE)
            assert "RMQ_SYS_TRACE_TOPIC" not in await admin.topic_list()
            assert on.broker.ctx.topics.is_system_topic("OPS_TRACE")
    finally:
        await on.stop()


async def test_message_trace_reads_decodes_and_keeps_only_the_message_asked_for(tmp_path):
    c = await InProcessCluster(tmp_path / "store", settings={"traceTopicEnable": "true"}).start()
    try:
        async with AdminClient(namesrv_addr=c.namesrv_addr) as admin, \
                Producer("trace-writer", namesrv_addr=c.namesrv_addr) as producer:
            other = Message("RMQ_SYS_TRACE_TOPIC", PUB.replace(MSG_ID.encode(), b"OTHER" + MSG_ID[5:].encode()))
            for body in (CONSUME + other.body, PUB, b"Pub\x01not a trace\x02"):
                m = Message("RMQ_SYS_TRACE_TOPIC", body)
                m.keys = [MSG_ID, "k-sync-0"]
                await producer.send(m)
            trace = await admin.message_trace(MSG_ID)
    finally:
        await c.stop()
    assert [e.type for e in trace.events] == ["Pub", "SubBefore", "SubAfter"]
    assert all(e.msg_id == MSG_ID and e.client_host and e.client_host.startswith("127.0.0.1:") for e in trace.events)
    assert [e.topic for e in trace.events] == ["Cap"] * 3  # consume records take the published topic
    ((offset_msg_id, why),) = trace.undecodable
    assert len(offset_msg_id) == 32 and "Pub record has 2 fields" in why
