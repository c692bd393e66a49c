"""Recalling a timer message before it fires (docs/timers.md#recall), through a real broker: the
send answer's recall handle, RECALL_MESSAGE (370) and its refusals as Apache 5.3.2 answers them,
and the marker a 5.3.1 producer sends itself (TIMER_DEL_UNIQKEY)."""

from __future__ import annotations

import asyncio
import base64
import time

import pytest

from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import MQBrokerError
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer, PullStatus
from ferrymq.common.message import Message
from ferrymq.common.protocol import MessageQueue
from ferrymq.common.recall_handle import RecallHandle
from ferrymq.remoting.codes import ResponseCode
from testkit.wait import wait_until

pytestmark = pytest.mark.integration

DELAY_MS = 2500
CREATE = b"create the topic"


async def delivered_timers(cluster, mq: MessageQueue) -> list[bytes]:
    """The bodies on ``mq`` but the message that created the topic."""
    async with PullConsumer("recall-check", namesrv_addr=cluster.namesrv_addr) as consumer:
        result = await consumer.pull(mq, 0)
    found = result.messages if result.status is PullStatus.FOUND else []
    return [m.body for m in found if m.body != CREATE]


async def send_pair(producer: Producer, topic: str, **extra) -> tuple:
    """Two timers due at the same moment on queue 0: the first to recall, the second to keep."""
    due = int(time.time() * 1000) + DELAY_MS
    mq = MessageQueue(topic, "broker-a", 0)
    first = await producer.send(Message(topic, b"recall me", properties={"TIMER_DELIVER_MS": str(due), **extra}),
                                queue=mq)
    second = await producer.send(Message(topic, b"keep me", properties={"TIMER_DELIVER_MS": str(due)}), queue=mq)
    return due, mq, first, second


async def enable_recall(cluster) -> None:
    """recallMessageEnable is off by default, as in Apache 5.3.2; a live setting."""
    async with AdminClient(namesrv_addr=cluster.namesrv_addr) as admin:
        await admin.update_broker_config(cluster.broker.address, {"recallMessageEnable": "true"})


async def test_a_recalled_timer_never_fires_and_its_neighbour_does(cluster):
    async with Producer("recaller", namesrv_addr=cluster.namesrv_addr) as producer:
        await producer.send(Message("Recall", CREATE))
        due, mq, first, second = await send_pair(producer, "Recall")
        handle = RecallHandle.decode(first.recall_handle)
        assert handle == RecallHandle("Recall", "broker-a", str(due + 1), first.msg_id)
        with pytest.raises(MQBrokerError) as off:  # the default
            await producer.recall("Recall", first.recall_handle)
        assert (off.value.code, off.value.remark) == (ResponseCode.NO_PERMISSION, "recall failed, operation is forbidden")
        await enable_recall(cluster)
        assert await producer.recall("Recall", first.recall_handle) == first.msg_id
        async with AdminClient(namesrv_addr=cluster.namesrv_addr) as admin:  # the marker is not a timer waiting
            assert (await admin.timer_metrics(cluster.broker_addr)).timing_count["Recall"].count == 2

        delivered = await wait_until(lambda: delivered_timers(cluster, mq), timeout=15,
                                     what="the kept timer's delivery")
        assert delivered == [b"keep me"]  # same slot, sent first: it would have come before
        assert time.time() * 1000 >= due
        async with AdminClient(namesrv_addr=cluster.namesrv_addr) as admin:  # fired and recalled: none waits
            assert "Recall" not in (await admin.timer_metrics(cluster.broker_addr)).timing_count

        with pytest.raises(MQBrokerError) as late:  # fired (or recalled) already
            await producer.recall("Recall", second.recall_handle)
        assert (late.value.code, late.value.remark) == (ResponseCode.ILLEGAL_OPERATION, "recall failed, timestamp invalid")


async def test_recall_refusals_are_apaches(cluster):
    await enable_recall(cluster)
    async with Producer("recaller", namesrv_addr=cluster.namesrv_addr) as producer:
        plain = await producer.send(Message("RecallNo", b"not a timer"))
        assert plain.recall_handle is None  # only a timer message gets one
        _, _, timed, _ = await send_pair(producer, "RecallNo")

        cases = {
            "malformed": ("RecallNo", "not base64 !", ResponseCode.ILLEGAL_OPERATION, "recall handle is invalid"),
            "not v1": ("RecallNo", base64.urlsafe_b64encode(b"v2 RecallNo broker-a 1 x").decode(),
                       ResponseCode.ILLEGAL_OPERATION, "recall handle is invalid"),
            "other topic": ("RecallOther", timed.recall_handle, ResponseCode.ILLEGAL_OPERATION,
                            "recall failed, topic not match"),
            "unknown topic": ("NoSuchTopic", timed.recall_handle, ResponseCode.TOPIC_NOT_EXIST,
                              "recall failed, the topic[NoSuchTopic] not exist"),
            "other broker": ("RecallNo", RecallHandle("RecallNo", "broker-z", str(int(time.time() * 1000) + 60_000),
                                                      "x").encode(),
                             ResponseCode.ILLEGAL_OPERATION, "recall failed, broker service not available"),
        }
        await producer.send(Message("RecallOther", CREATE))
        for name, (topic, handle, code, remark) in cases.items():
            with pytest.raises(MQBrokerError) as refused:
                await producer.recall(topic, handle, broker_name="broker-a")
            assert (refused.value.code, refused.value.remark) == (code, remark), name


async def test_a_marker_sent_as_apache_5_3_1_producers_do_cancels_the_timer(cluster):
    """5.3.1 has no RECALL_MESSAGE: a producer sends a message carrying TIMER_DEL_UNIQKEY (the
    message id) and the same TIMER_DELIVER_MS; the marker is stored, never delivered."""
    async with Producer("recaller", namesrv_addr=cluster.namesrv_addr) as producer:
        await producer.send(Message("RecallOld", CREATE))
        due, mq, first, _ = await send_pair(producer, "RecallOld")
        marker = await producer.send(Message("RecallOld", b"0", properties={
            "TIMER_DELIVER_MS": str(due), "TIMER_DEL_UNIQKEY": first.msg_id}), queue=mq)
        assert marker.recall_handle is None
        delivered = await wait_until(lambda: delivered_timers(cluster, mq), timeout=15,
                                     what="the kept timer's delivery")
        assert delivered == [b"keep me"]

        with pytest.raises(MQBrokerError) as refused:  # a marker for a time gone: Apache's illegal
            await producer.send(Message("RecallOld", b"0", properties={
                "TIMER_DELIVER_MS": str(int(time.time() * 1000) - 1000), "TIMER_DEL_UNIQKEY": first.msg_id}))
        assert refused.value.code == ResponseCode.MESSAGE_ILLEGAL


async def test_a_recall_within_the_seconds_of_its_slot_still_cancels_the_timer(cluster):
    """The service takes a slot when its second begins and delivers each message at its own
    time: a recall stored after that (its marker then filed in a later slot) must still stop a
    message of the slot being delivered."""
    await enable_recall(cluster)
    async with Producer("recaller", namesrv_addr=cluster.namesrv_addr) as producer:
        await producer.send(Message("RecallLate", CREATE))
        now = time.time()
        second = int(now) + 2  # a whole second ahead: the slot is not taken yet when sending
        due = second * 1000 + 800
        mq = MessageQueue("RecallLate", "broker-a", 0)
        doomed = await producer.send(Message("RecallLate", b"recall me", properties={"TIMER_DELIVER_MS": str(due)}),
                                     queue=mq)
        await producer.send(Message("RecallLate", b"keep me", properties={"TIMER_DELIVER_MS": str(due)}), queue=mq)
        await asyncio.sleep(second + 0.3 - time.time())  # the slot's second has begun: it is being delivered
        assert await producer.recall("RecallLate", doomed.recall_handle) == doomed.msg_id
        delivered = await wait_until(lambda: delivered_timers(cluster, mq), timeout=15,
                                     what="the kept timer's delivery")
        assert delivered == [b"keep me"]
        assert time.time() * 1000 >= due
