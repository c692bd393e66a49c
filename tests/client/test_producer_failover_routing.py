"""Node-failure findings (issue 30) in the producer's routing, with a real name server and real
brokers on 127.0.0.1: a route the name server no longer has, a master that fenced itself, a
topic created from the default topic TBW102 (docs/clients.md#routes-after-node-failures)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import MQBrokerError, MQClientError
from ferrymq.client.producer import Producer, SendStatus
from ferrymq.common.message import Message
from ferrymq.common.protocol import MessageQueue
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.headers import DeleteTopicFromNamesrvHeader
from tests.support import InProcessCluster
from testkit.wait import wait_until


@contextlib.asynccontextmanager
async def brokers(tmp_path, *settings: dict) -> AsyncIterator[list[InProcessCluster]]:
    """One name server and a broker per ``settings``, all registered."""
    first = InProcessCluster(tmp_path / "b0", settings=settings[0])
    await first.start()
    clusters = [first]
    try:
        for i, more in enumerate(settings[1:], 1):
            other = InProcessCluster(tmp_path / f"b{i}", settings=more, namesrv=first.namesrv)
            clusters.append(other)
            await other.start_broker()
        yield clusters
    finally:
        for c in reversed(clusters[1:]):
            if c.broker:
                await c.broker.stop()
        await first.stop()


async def route_brokers(namesrv: str, topic: str) -> set[str]:
    """The brokers of the topic's route on the name server (none when it has no route)."""
    async with AdminClient(namesrv_addr=namesrv) as admin:
        try:
            return {q.broker_name for q in (await admin.topic_route(topic)).queue_datas}
        except MQClientError:
            return set()


# ---------------------------------------------------------------- 1: a route the name server denies

async def test_a_topic_deleted_and_created_on_another_broker_is_sent_there_not_to_the_old_one(tmp_path):
    """The name server answered TOPIC_NOT_EXIST (the topic deleted) after the producer cached
    the route; the topic is then created on another broker. The next send goes there, not to
    the old broker, which would have created the topic again from TBW102."""
    async with brokers(tmp_path, {"brokerName": "broker-a"}, {"brokerName": "broker-b"}) as (a, b):
        async with AdminClient(namesrv_addr=a.namesrv_addr) as admin:
            await admin.create_topic("Moved", broker_addr=a.broker_addr, read_queues=2, write_queues=2)
            async with Producer("moved", namesrv_addr=a.namesrv_addr, retry_times=0) as producer:
                assert (await producer.send(Message("Moved", b"before"))).message_queue.broker_name == "broker-a"
                await admin.delete_topic("Moved")
                await producer.instance.refresh_routes()  # what the periodic refresh does: TOPIC_NOT_EXIST
                await admin.create_topic("Moved", broker_addr=b.broker_addr, read_queues=2, write_queues=2)
                await wait_until(lambda: route_brokers(a.namesrv_addr, "Moved"), 30, "the topic's route on broker-b")
                result = await producer.send(Message("Moved", b"after"))
        assert result.status is SendStatus.SEND_OK and result.message_queue.broker_name == "broker-b"
        assert await route_brokers(a.namesrv_addr, "Moved") == {"broker-b"}
        assert a.broker.topics.get("Moved") is None


async def test_a_route_the_name_server_lost_but_the_broker_still_serves_keeps_working(tmp_path):
    """The name server forgot the topic (it restarted, the broker has not registered again yet)
    while the broker still serves it, and nothing can create it from TBW102: sends go on over
    the cached route instead of failing."""
    async with brokers(tmp_path, {"autoCreateTopicEnable": "false"}) as (a,):
        async with AdminClient(namesrv_addr=a.namesrv_addr) as admin:
            await admin.create_topic("Kept", broker_addr=a.broker_addr, read_queues=2, write_queues=2)
        async with Producer("kept", namesrv_addr=a.namesrv_addr, retry_times=0) as producer:
            assert (await producer.send(Message("Kept", b"before"))).status is SendStatus.SEND_OK
            remoting = RemotingClient()
            try:
                answer = await remoting.invoke(a.namesrv_addr, DeleteTopicFromNamesrvHeader(topic="Kept").request(
                    RequestCode.DELETE_TOPIC_IN_NAMESRV), 3)
            finally:
                await remoting.close()
            assert answer.code == ResponseCode.SUCCESS
            await producer.instance.refresh_routes()
            results = [await producer.send(Message("Kept", f"after-{i}".encode())) for i in range(4)]
        assert {r.status for r in results} == {SendStatus.SEND_OK}


# ---------------------------------------------------------------- 2: a master that fenced itself

async def test_sends_to_a_fenced_master_wait_for_the_new_master_instead_of_failing(tmp_path):
    """The only master fences itself (refuses sends, SERVICE_NOT_AVAILABLE); a new master of the
    same broker name registers once the send has been refused. The send, with a send timeout to
    spare, is not failed by its retries being spent on the fenced master: it lands on the new one."""
    async with brokers(tmp_path, {}) as (old,):
        async with AdminClient(namesrv_addr=old.namesrv_addr) as admin:
            await admin.create_topic("Fenced", broker_addr=old.broker_addr, read_queues=2, write_queues=2)
            async with Producer("fenced", namesrv_addr=old.namesrv_addr, retry_times=2, send_timeout=60) as producer:
                assert (await producer.send(Message("Fenced", b"before"))).status is SendStatus.SEND_OK
                old.broker.replication.fence("test: no in-sync slave, the controller unreachable")
                send = asyncio.create_task(producer.send(Message("Fenced", b"during")))
                await wait_until(lambda: send.done() or not producer.faults.available("broker-a"), 30,
                                 "the send refused by the fenced master")
                new = InProcessCluster(tmp_path / "new", namesrv=old.namesrv)
                await new.start_broker()
                try:
                    await admin.create_topic("Fenced", broker_addr=new.broker_addr, read_queues=2, write_queues=2)
                    result = await asyncio.wait_for(send, 60)
                finally:
                    await new.broker.stop()
        assert result.status is SendStatus.SEND_OK
        assert result.offset_msg_id  # stored by the new master, not the fenced one:
        assert new.broker.stats.topics["Fenced"].messages_in == 1


async def test_a_fenced_master_is_avoided_while_another_broker_takes_the_sends(tmp_path):
    """Two brokers; one fences itself. With no retries to spare, every send still succeeds, on
    the other broker (the fenced one is avoided for a while, as sendLatencyFaultEnable does)."""
    async with brokers(tmp_path, {"brokerName": "broker-a"}, {"brokerName": "broker-b"}) as (a, b):
        async with AdminClient(namesrv_addr=a.namesrv_addr) as admin:
            for c in (a, b):
                await admin.create_topic("TwoBrokers", broker_addr=c.broker_addr, read_queues=2, write_queues=2)
        async with Producer("two", namesrv_addr=a.namesrv_addr, retry_times=0, send_timeout=30) as producer:
            await producer.send(Message("TwoBrokers", b"warm"))
            a.broker.replication.fence("test: fenced")
            results = [await producer.send(Message("TwoBrokers", f"m-{i}".encode())) for i in range(10)]
        assert {r.status for r in results} == {SendStatus.SEND_OK}
        assert {r.message_queue.broker_name for r in results} == {"broker-b"}


# ---------------------------------------------------------------- 3: a topic created from TBW102

async def test_a_new_topic_created_from_the_default_topic_gets_only_queues_the_broker_made(tmp_path):
    """The broker makes TBW102 with 2 queues (defaultTopicQueueNums=2), the producer asks for 8:
    sends to new topics through TBW102's route use only the 2 queues the broker creates."""
    async with brokers(tmp_path, {"defaultTopicQueueNums": "2"}) as (a,):
        async with Producer("auto", namesrv_addr=a.namesrv_addr, retry_times=0, default_topic_queue_nums=8) as producer:
            results = [await producer.send(Message(f"Auto{i % 3}", f"m-{i}".encode())) for i in range(9)]
        assert {r.status for r in results} == {SendStatus.SEND_OK}
        assert {r.message_queue.queue_id for r in results} == {0, 1}
        for i in range(3):
            created = a.broker.topics.get(f"Auto{i}")
            assert (created.read_queue_nums, created.write_queue_nums) == (2, 2)


async def test_an_illegal_queue_id_is_refused_with_a_plain_sentence(tmp_path):
    """Apache's remark, "request queueId[%d] is illegal, %s Producer: %s" with its TopicConfig
    rendered as Java does, never a Python repr."""
    async with brokers(tmp_path, {}) as (a,):
        async with AdminClient(namesrv_addr=a.namesrv_addr) as admin:
            await admin.create_topic("TwoQueues", broker_addr=a.broker_addr, read_queues=2, write_queues=2)
        async with Producer("illegal", namesrv_addr=a.namesrv_addr, retry_times=0) as producer:
            with pytest.raises(MQBrokerError) as refused:
                await producer.send(Message("TwoQueues", b"x"), queue=MessageQueue("TwoQueues", "broker-a", 7))
    assert refused.value.code == ResponseCode.SYSTEM_ERROR
    assert refused.value.remark == (
        "request queueId[7] is illegal, TopicConfig [topicName=TwoQueues, readQueueNums=2, writeQueueNums=2, "
        "perm=RW-, topicFilterType=SINGLE_TAG, topicSysFlag=0, order=false] Producer: 127.0.0.1")
