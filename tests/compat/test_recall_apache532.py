"""RECALL_MESSAGE (docs/timers.md#recall), the same scenario against ``ferrymq standalone`` and
against Apache's own 5.3.2 broker (the first with the request), with FerryMQ's Python client.

Two timers due at the same moment on one queue. Recall is refused while ``recallMessageEnable``
is off (the default on both), then turned on with the admin client's update_broker_config; the
first timer is recalled and never delivered, its neighbour is; recalling the fired neighbour,
a handle whose topic is not the request's and a garbage handle are refused. Each answer's code
and remark are asserted alike on both peers. Then the same through Apache's 5.3.2 remoting
client (``DefaultMQProducer.recallMessage``), one JVM per peer (``ferrymq.compat53.Recall``).
"""

from __future__ import annotations

import asyncio
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
from testkit.grpc_clients import unique_names
from testkit.java_client import ROCKETMQ532_VERSION, run_java_client
from testkit.wait import wait_until

pytestmark = pytest.mark.compat

DELAY_MS = 3000
CREATE = b"create the topic"
FORBIDDEN = (ResponseCode.NO_PERMISSION, "recall failed, operation is forbidden")
INVALID = (ResponseCode.ILLEGAL_OPERATION, "recall handle is invalid")
TOPIC_NOT_MATCH = (ResponseCode.ILLEGAL_OPERATION, "recall failed, topic not match")
TIMESTAMP_INVALID = (ResponseCode.ILLEGAL_OPERATION, "recall failed, timestamp invalid")


@pytest.fixture(scope="module", params=["ferrymq", "apache-5.3.2"])
def broker(request, rocketmq532_jars):
    """The peer under test: anything with ``namesrv_addr`` and ``broker_addr``."""
    return request.getfixturevalue("ferrymq" if request.param == "ferrymq" else "apache_rocketmq532")


async def refusal(producer: Producer, topic: str, handle: str, broker_name: str) -> tuple[int, str]:
    with pytest.raises(MQBrokerError) as refused:
        await producer.recall(topic, handle, broker_name=broker_name)
    return refused.value.code, refused.value.remark


async def enable_recall(broker) -> None:
    async with AdminClient(namesrv_addr=broker.namesrv_addr) as admin:  # a live setting on both
        await admin.update_broker_config(broker.broker_addr, {"recallMessageEnable": "true"})


async def delivered(broker, mq: MessageQueue, group: str) -> list[bytes]:
    """The bodies on ``mq`` but the message that created the topic."""
    async with PullConsumer(group, namesrv_addr=broker.namesrv_addr) as consumer:
        result = await consumer.pull(mq, 0)
    found = result.messages if result.status is PullStatus.FOUND else []
    return [m.body for m in found if m.body != CREATE]


async def test_recall_answers_alike(broker):
    topic, group = unique_names("Recall532")
    other = f"{topic}Other"
    async with Producer(group, namesrv_addr=broker.namesrv_addr) as producer:
        created = await producer.send(Message(topic, CREATE))
        await producer.send(Message(other, CREATE))
        mq = MessageQueue(topic, created.message_queue.broker_name, 0)
        due = int(time.time() * 1000) + DELAY_MS
        first = await producer.send(Message(topic, b"recall me", properties={"TIMER_DELIVER_MS": str(due)}), queue=mq)
        second = await producer.send(Message(topic, b"keep me", properties={"TIMER_DELIVER_MS": str(due)}), queue=mq)
        for sent in (first, second):  # the handle names the message; its time is the slot's (Apache floors it)
            handle = RecallHandle.decode(sent.recall_handle)
            assert (handle.topic, handle.broker_name, handle.message_id) == (topic, mq.broker_name, sent.msg_id)
            assert due - 1000 < handle.due_ms <= due

        assert await refusal(producer, topic, first.recall_handle, mq.broker_name) == FORBIDDEN  # the default
        await enable_recall(broker)
        assert await refusal(producer, other, first.recall_handle, mq.broker_name) == TOPIC_NOT_MATCH
        assert await refusal(producer, topic, "not base64 !", mq.broker_name) == INVALID
        assert await producer.recall(topic, first.recall_handle) == first.msg_id

        bodies = await wait_until(lambda: delivered(broker, mq, group), timeout=30,
                                  what="the kept timer's delivery")
        assert bodies == [b"keep me"]  # same slot, sent first: it would have come before
        assert time.time() * 1000 >= due
        assert await refusal(producer, topic, second.recall_handle, mq.broker_name) == TIMESTAMP_INVALID


def test_recall_from_the_5_3_2_java_client_answers_alike(broker):
    asyncio.run(enable_recall(broker))  # the client has no call for it; on already if the test above ran
    topic, group = unique_names("RecallJava")
    events = run_java_client(["--namesrv", broker.namesrv_addr, "--topic", topic, "--other", f"{topic}Other",
                              "--group", group, "--delay-ms", DELAY_MS, "--timeout-ms", 45000],
                             timeout=90, main="ferrymq.compat53.Recall", version=ROCKETMQ532_VERSION)
    sent = {e["body"]: e for e in events.of("sent")}
    assert all(RecallHandle.decode(e["recallHandle"]).message_id == e["msgId"] for e in sent.values())
    outcome = {e["case"]: (e.get("code"), e.get("remark"), e.get("msgId"), e.get("error")) for e in events.of("recall")}
    assert outcome == {
        "other-topic": (*TOPIC_NOT_MATCH, None, None),
        "garbage": (None, None, None, "recall handle is invalid"),  # the client's own refusal
        "recalled": (None, None, sent["recall me"]["msgId"], None),
        "fired": (*TIMESTAMP_INVALID, None, None),
    }
    assert [e["body"] for e in events.of("received")] == ["keep me"]
