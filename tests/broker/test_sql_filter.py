"""SQL92 subscriptions on a FerryMQ broker with enablePropertyFilter: exactly the matching
messages, offsets past the others, held pulls woken only by a match, refusals as RocketMQ's."""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.client.errors import MQBrokerError, MQClientError
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer, PullStatus
from ferrymq.client.push_consumer import PushConsumer
from ferrymq.common.message import Message
from ferrymq.common.protocol import MessageQueue
from tests.consumer_support import Recorder
from testkit.wait import wait_until
from tests.support import InProcessCluster

SQL = "region = 'eu' AND amount BETWEEN 10 AND 100"
ORDERS = [("eu", 5), ("eu", 10), ("us", 50), ("eu", 100), ("eu", 101), ("eu", "n/a"), (None, 50), ("eu", 55)]
MATCHING = {1, 3, 7}  # the indexes of ORDERS the selector lets through


@pytest.fixture
async def filtering(tmp_path):
    c = InProcessCluster(tmp_path / "store", settings={"enablePropertyFilter": "true"})
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


def order(i: int) -> Message:
    region, amount = ORDERS[i]
    props = {"amount": str(amount), "seq": str(i)}
    if region is not None:
        props["region"] = region
    m = Message("Orders", f"order {i}".encode(), properties=props)
    m.keys = [f"o{i}"]
    return m


async def send_orders(cluster, mq=None) -> None:
    async with Producer("sql-producer", namesrv_addr=cluster.namesrv_addr) as producer:
        for i in range(len(ORDERS)):
            await producer.send(order(i), queue=mq)


async def test_pull_with_sql_gets_exactly_the_matching_messages(filtering):
    mq = MessageQueue("Orders", "broker-a", 0)
    await send_orders(filtering, mq)
    async with PullConsumer("sql-pull", namesrv_addr=filtering.namesrv_addr) as consumer:
        result = await consumer.pull(mq, 0, sql=SQL)
        assert result.status is PullStatus.FOUND
        assert [int(m.properties["seq"]) for m in result.messages] == sorted(MATCHING)
        assert result.next_begin_offset == len(ORDERS)  # past the ones filtered out
        nothing = await consumer.pull(mq, 0, sql="region = 'apac'")
        assert nothing.status is PullStatus.NO_MATCHED_MSG and nothing.next_begin_offset == len(ORDERS)


async def test_push_consumer_with_sql_consumes_exactly_the_matching_messages(filtering):
    rec = Recorder()
    consumer = PushConsumer("sql-push", namesrv_addr=filtering.namesrv_addr)
    consumer.subscribe("Orders", sql=SQL)
    consumer.register_listener(rec.listener("c"))
    await send_orders(filtering)  # the topic exists before the consumer starts
    await consumer.start()
    try:
        await wait_until(lambda: rec.keys() >= {f"o{i}" for i in MATCHING}, 20, "the matching orders")
        await asyncio.sleep(0.5)
    finally:
        await consumer.shutdown()
    assert rec.keys() == {f"o{i}" for i in MATCHING}


async def test_a_held_sql_pull_wakes_only_for_a_match(filtering):
    mq = MessageQueue("Orders", "broker-a", 1)
    async with Producer("p", namesrv_addr=filtering.namesrv_addr) as producer, \
            PullConsumer("g", namesrv_addr=filtering.namesrv_addr) as consumer:
        await producer.send(order(0), queue=mq)
        pull = asyncio.create_task(consumer.pull(mq, 1, sql=SQL, suspend=10.0))
        await wait_until(lambda: filtering.broker.pull_waiters.held == 1)
        await producer.send(order(2), queue=mq)  # "us": not wanted
        await asyncio.sleep(0.3)
        assert not pull.done() and filtering.broker.pull_waiters.held == 1
        await producer.send(order(3), queue=mq)
        result = await asyncio.wait_for(pull, 5)
    assert [int(m.properties["seq"]) for m in result.messages] == [3]


async def test_a_broker_without_property_filters_refuses_sql_subscriptions(cluster):
    await send_orders(cluster)
    consumer = PushConsumer("sql-refused", namesrv_addr=cluster.namesrv_addr)
    consumer.subscribe("Orders", sql=SQL)
    consumer.register_listener(Recorder().listener("c"))
    with pytest.raises(MQClientError, match="The broker does not support consumer to filter message by SQL92"):
        await consumer.start()
    async with PullConsumer("sql-refused-pull", namesrv_addr=cluster.namesrv_addr) as pull:
        (mq, *_) = await pull.fetch_queues("Orders")
        with pytest.raises(MQBrokerError, match="does not support consumer to filter message by SQL92") as info:
            await pull.pull(mq, 0, sql=SQL)
    assert info.value.code == 1


def test_an_invalid_selector_fails_at_subscribe():
    with pytest.raises(MQClientError, match="expected a value or a property at position"):
        PushConsumer("g-invalid").subscribe("Orders", sql="amount > ")
