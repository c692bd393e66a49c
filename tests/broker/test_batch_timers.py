"""Timers and delay levels on the messages of a batch (SEND_BATCH_MESSAGE) through a real
broker (docs/timers.md#batches): a message of a batch asking for a timer waits as a single send
would; the others are consumable at once; one refused message refuses the whole batch."""

from __future__ import annotations

import time

import pytest

from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import MQBrokerError
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer, PullStatus
from ferrymq.common.message import Message, encode_batch_body, encode_properties
from ferrymq.common.protocol import MessageQueue
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.request_headers import SendMessageHeader
from tests.support import InProcessCluster

pytestmark = pytest.mark.integration

TOO_FAR_SEC = 3 * 86_400 + 10  # past the default timerMaxDelaySec


def message(topic: str, key: str, **props) -> Message:
    m = Message(topic, key.encode(), properties={k: str(v) for k, v in props.items()})
    m.keys = [key]
    return m


async def pull_all(consumer: PullConsumer, mq: MessageQueue, offset: int, count: int) -> list:
    """``count`` messages from ``offset`` on, each pull held until something arrives."""
    got = []
    while len(got) < count:
        result = await consumer.pull(mq, offset, suspend=15)
        assert result.status is PullStatus.FOUND, f"only {len(got)} of {count} arrived"
        got += result.messages
        offset = result.next_begin_offset
    return got


async def test_a_batch_delivers_its_plain_messages_at_once_and_its_timed_ones_only_when_due(cluster):
    sent_ms = int(time.time() * 1000)
    async with Producer("p", namesrv_addr=cluster.namesrv_addr) as producer:
        sent = await producer.send_batch([
            message("BatchTimed", "plain-1", color="blue"),
            message("BatchTimed", "sec-3", TIMER_DELAY_SEC=3),
            message("BatchTimed", "plain-2"),
            message("BatchTimed", "deliver-2", TIMER_DELIVER_MS=sent_ms + 2000),
            message("BatchTimed", "past", TIMER_DELIVER_MS=sent_ms - 60_000),  # due already: at once
        ])
    # the answer names every message, and the plain ones' first offset in their queue
    assert len(sent.msg_id.split(",")) == len(set(sent.offset_msg_id.split(","))) == 5
    assert sent.queue_offset == 0
    async with PullConsumer("g", namesrv_addr=cluster.namesrv_addr) as consumer:
        at_once = await consumer.pull(sent.message_queue, 0)
        assert at_once.status is PullStatus.FOUND
        assert [m.keys[0] for m in at_once.messages] == ["plain-1", "plain-2", "past"]
        assert at_once.messages[0].properties["color"] == "blue"
        assert at_once.messages[0].client_msg_id == sent.msg_id.split(",")[0]

        later = await pull_all(consumer, sent.message_queue, at_once.next_begin_offset, 2)
        received_ms = int(time.time() * 1000)
    assert [m.keys[0] for m in later] == ["deliver-2", "sec-3"]
    due = {"deliver-2": sent_ms + 2000, "sec-3": sent_ms + 3000}
    for m in later:
        assert m.store_timestamp >= due[m.keys[0]], f"{m.keys[0]} stored {due[m.keys[0]] - m.store_timestamp} ms early"
        assert {"TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS"} <= set(m.properties)  # as a single send's
        assert (m.properties["REAL_TOPIC"], m.properties["REAL_QID"]) == ("BatchTimed", str(sent.message_queue.queue_id))
    assert received_ms >= due["sec-3"]
    assert {m.client_msg_id for m in later} == set(sent.msg_id.split(",")[1::2])


async def plain_send_lands_at_offset_zero(cluster, mq: MessageQueue) -> None:
    """Nothing of a refused batch was stored in its queue: the next send there gets offset 0."""
    async with Producer("p2", namesrv_addr=cluster.namesrv_addr) as producer:
        after = await producer.send(message(mq.topic, "after"), queue=mq)
    assert after.queue_offset == 0


async def timer_counts(cluster) -> dict:
    """Timers waiting per topic, as GET_TIMER_METRICS tells an operator."""
    async with AdminClient(namesrv_addr=cluster.namesrv_addr) as admin:
        return {t: m.count for t, m in (await admin.timer_metrics(cluster.broker_addr)).timing_count.items() if m.count}


async def test_a_batch_with_one_overlong_delay_is_refused_whole(cluster):
    async with Producer("p", namesrv_addr=cluster.namesrv_addr) as producer:
        mq = (await producer.send(message("BatchFar", "route"))).message_queue  # the topic exists
        mq = MessageQueue(topic="BatchFar", broker_name=mq.broker_name, queue_id=(mq.queue_id + 1) % 4)
        with pytest.raises(MQBrokerError) as refused:
            await producer.send_batch([message("BatchFar", "plain"), message("BatchFar", "soon", TIMER_DELAY_SEC=2),
                                       message("BatchFar", "far", TIMER_DELAY_SEC=TOO_FAR_SEC)], queue=mq)
    assert refused.value.code == ResponseCode.MESSAGE_ILLEGAL
    assert "timer message illegal, the delay time should not be bigger than the max delay 259200000ms" in str(
        refused.value)
    await plain_send_lands_at_offset_zero(cluster, mq)
    assert "BatchFar" not in await timer_counts(cluster)  # nor any of it under the timer topic


async def test_a_broker_without_timers_refuses_a_batch_with_a_timer_as_a_single_send(tmp_path):
    c = await InProcessCluster(tmp_path / "store", settings={"timerWheelEnable": "false"}).start()
    try:
        async with Producer("p", namesrv_addr=c.namesrv_addr) as producer:
            mq = (await producer.send(message("BatchNoWheel", "route"))).message_queue
            mq = MessageQueue(topic="BatchNoWheel", broker_name=mq.broker_name, queue_id=(mq.queue_id + 1) % 4)
            with pytest.raises(MQBrokerError) as refused:
                await producer.send_batch([message("BatchNoWheel", "plain"),
                                           message("BatchNoWheel", "timed", TIMER_DELAY_MS=1500)], queue=mq)
            plain = await producer.send_batch([message("BatchNoWheel", "a"), message("BatchNoWheel", "b")], queue=mq)
    finally:
        await c.stop()
    assert refused.value.code == ResponseCode.SYSTEM_ERROR
    assert "accurate timer message is not enabled, timerWheelEnable is false" in str(refused.value)
    assert plain.queue_offset == 0  # the refused batch stored nothing; a batch without timers goes as before


async def send_raw_batch(cluster, topic: str, msgs: list[Message], **batch_props) -> RemotingCommand:
    """SEND_BATCH_MESSAGE as any remoting client may send it (FerryMQ's and Apache's producers
    refuse a delay level in a batch before sending)."""
    for i, m in enumerate(msgs):
        m.properties.setdefault("UNIQ_KEY", f"{topic}-{i}-{time.time_ns()}")
    header = SendMessageHeader("p", topic, 0, born_timestamp=int(time.time() * 1000), batch=True,
                               properties=encode_properties({k: str(v) for k, v in batch_props.items()}))
    client = RemotingClient()
    try:
        request = RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, header.to_fields(), encode_batch_body(msgs))
        return await client.invoke(cluster.broker_addr, request, 10)
    finally:
        await client.close()


async def test_a_delay_level_on_a_message_of_a_batch_is_honoured_and_one_on_the_batch_refused(cluster):
    sent_ms = int(time.time() * 1000)
    answer = await send_raw_batch(cluster, "BatchLevel", [message("BatchLevel", "plain"),
                                                          message("BatchLevel", "level-1", DELAY=1)])
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    mq = MessageQueue(topic="BatchLevel", broker_name=cluster.broker.ctx.config.broker_name, queue_id=0)
    async with PullConsumer("g", namesrv_addr=cluster.namesrv_addr) as consumer:
        at_once = await consumer.pull(mq, 0)
        assert [m.keys[0] for m in at_once.messages] == ["plain"]
        [delayed] = await pull_all(consumer, mq, 1, 1)
    assert delayed.keys == ["level-1"] and delayed.store_timestamp >= sent_ms + 1000

    refused = await send_raw_batch(cluster, "BatchLevel", [message("BatchLevel", "on-the-batch")], DELAY=2)
    assert (refused.code, refused.remark) == (
        ResponseCode.MESSAGE_ILLEGAL, "the message is illegal, maybe msg body or properties length not matched. "
        "msg body length limit 4194304B, msg properties length limit 32KB.")  # Apache 5.3's words
