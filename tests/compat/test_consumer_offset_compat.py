"""What QUERY_CONSUMER_OFFSET answers for a group that never committed, FerryMQ beside Apache
RocketMQ 5.3.1 and 4.9.7: the offset a new group's consumer starts from, or (QUERY_NOT_FOUND) none,
when the client falls back to its consume-from-where setting.

Read in Apache's sources (session notes of 2026-12-01): 4.9.7 answers offset 0 when the queue's
minimum offset is 0 and offset 0 is not "on disk" only, which an empty queue satisfies; 5.x answers 0
only when offset 0 is in memory and QUERY_NOT_FOUND for an empty queue. FerryMQ answers as 5.x.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from ferrymq.client.admin import AdminClient
from ferrymq.client.producer import Producer
from ferrymq.common.message import Message
from ferrymq.common.protocol import MessageQueue

from testkit.apache import remoting_request

pytestmark = pytest.mark.compat

QUERY_CONSUMER_OFFSET = 14
SUCCESS, QUERY_NOT_FOUND = 0, 22


async def _topic_with_one_message_on_queue_1(server, topic: str) -> None:
    async with AdminClient(namesrv_addr=server.namesrv_addr) as admin:
        await admin.create_topic(topic, read_queues=2, write_queues=2)
        for _ in range(200):
            try:
                route = await admin.topic_route(topic)
                if route.queue_datas:
                    break
            except Exception:  # not routed yet
                pass
            await asyncio.sleep(0.1)
        broker_name = route.queue_datas[0].broker_name
    producer = Producer(f"OffsetCompatProducer_{uuid.uuid4().hex[:6]}", namesrv_addr=server.namesrv_addr)
    await producer.start()
    try:
        await producer.send(Message(topic, b"the one message"), queue=MessageQueue(topic, broker_name, 1))
    finally:
        await producer.close()


def _answers(server) -> dict[int, tuple[int, int | None]]:
    """(code, offset) per queue for a group that never committed: queue 0 empty, queue 1 one message."""
    topic = f"OffsetCompat_{uuid.uuid4().hex[:6]}"
    asyncio.run(_topic_with_one_message_on_queue_1(server, topic))
    group = f"NeverCommitted_{uuid.uuid4().hex[:6]}"
    answers = {}
    for queue_id in (0, 1):
        header, _ = remoting_request(server.broker_addr, QUERY_CONSUMER_OFFSET, {
            "consumerGroup": group, "topic": topic, "queueId": str(queue_id)})
        offset = header.get("extFields", {}).get("offset")
        answers[queue_id] = (header["code"], None if offset is None else int(offset))
    return answers


def test_a_group_without_offsets_is_answered_as_apache_5_answers(ferrymq, apache_rocketmq5, apache_rocketmq):
    ferry, apache5, apache4 = _answers(ferrymq), _answers(apache_rocketmq5), _answers(apache_rocketmq)
    # the queue holding a message: offset 0 on every broker (the new group reads it)
    assert ferry[1] == apache5[1] == apache4[1] == (SUCCESS, 0), (ferry, apache5, apache4)
    # the empty queue: 5.3.1 has no offset to give, and FerryMQ answers the same
    assert apache5[0][0] == QUERY_NOT_FOUND, apache5
    assert ferry[0][0] == QUERY_NOT_FOUND, ferry
    # 4.9.7 answers 0 there: its consumer starting before the first send reads from the start
    assert apache4[0] == (SUCCESS, 0), apache4
