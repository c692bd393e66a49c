"""FerryMQ's Python client against a real Apache RocketMQ 4.9.7 name server and broker:
proves the client, not just our broker, speaks the protocol."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import MQBrokerError
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer, PullStatus
from ferrymq.common.message import Message
from ferrymq.common.protocol import MessageQueue

from testkit.apache import ApacheRocketMQ

pytestmark = pytest.mark.compat


async def create_routed_topic(namesrv: str, topic: str, queues: int) -> None:
    """Create ``topic`` on Apache's broker and wait until its name server routes it."""
    async with AdminClient(namesrv_addr=namesrv) as admin:
        await admin.create_topic(topic, read_queues=queues, write_queues=queues)
        for _ in range(100):
            try:
                await admin.topic_route(topic)
                return
            except Exception:
                await asyncio.sleep(0.1)


def test_admin_produce_and_pull_against_apache(apache_rocketmq: ApacheRocketMQ):
    ns = apache_rocketmq.namesrv_addr
    topic = f"PyOnApache_{uuid.uuid4().hex[:6]}"

    async def scenario():
        async with AdminClient(namesrv_addr=ns) as admin:
            created = await admin.create_topic(topic, read_queues=4, write_queues=4)
            assert created == [apache_rocketmq.broker_addr]

            async def route_ready():
                try:
                    return await admin.topic_route(topic)
                except Exception:
                    return None
            for _ in range(100):
                route = await route_ready()
                if route:
                    break
                await asyncio.sleep(0.1)
            assert route.queue_datas[0].write_queue_nums == 4
            assert topic in await admin.topic_list()
            info = await admin.cluster_info()
            assert apache_rocketmq.broker_name in info.broker_addr_table
            # Apache's broker fails this call until its stats sampler ran once (about 1 s after start).
            for _ in range(50):
                try:
                    runtime = await admin.broker_runtime_info(apache_rocketmq.broker_addr)
                    break
                except MQBrokerError:
                    await asyncio.sleep(0.1)
            assert runtime["brokerVersionDesc"] == "V4_9_7"

        sent = []
        async with Producer("py-on-apache", namesrv_addr=ns) as producer:
            for i in range(12):
                m = Message(topic, f"sync {i}".encode(), properties={"n": str(i)})
                m.tags, m.keys = "TagA", [f"k{i}"]
                sent.append(await producer.send(m))
            async_results = await asyncio.gather(*(producer.send_async(Message(topic, f"async {i}".encode())) for i in range(12)))
            batch_mq = MessageQueue(topic, apache_rocketmq.broker_name, 2)
            batch = await producer.send_batch([Message(topic, f"batch {i}".encode()) for i in range(8)], queue=batch_mq)
            for i in range(4):
                await producer.send_oneway(Message(topic, f"oneway {i}".encode()))
        assert all(r.status.name == "SEND_OK" for r in sent + list(async_results) + [batch])
        assert len(batch.offset_msg_id.split(",")) == 8

        async with PullConsumer("py-on-apache-pull", namesrv_addr=ns) as consumer:
            queues = await consumer.fetch_queues(topic)
            assert len(queues) == 4
            bodies: dict[bytes, object] = {}
            for _ in range(50):
                for mq in queues:
                    offset = 0
                    while True:
                        result = await consumer.pull(mq, offset, max_nums=32)
                        if result.status is not PullStatus.FOUND:
                            break
                        for m in result.messages:
                            bodies[m.body] = m
                        offset = result.next_begin_offset
                if len(bodies) == 36:
                    break
                await asyncio.sleep(0.1)  # oneway sends may still be landing
            expected = {f"{k} {i}".encode() for k, n in (("sync", 12), ("async", 12), ("batch", 8), ("oneway", 4)) for i in range(n)}
            assert set(bodies) == expected
            for r, i in zip(sent, range(12)):
                m = bodies[f"sync {i}".encode()]
                assert m.client_msg_id == r.msg_id and m.msg_id == r.offset_msg_id
                assert (m.tags, m.keys, m.properties["n"]) == ("TagA", [f"k{i}"], str(i))
            await consumer.commit(batch_mq, 5)
            assert await consumer.committed(batch_mq) == 5
            assert await consumer.max_offset(batch_mq) >= 8

    asyncio.run(scenario())


def test_python_push_consumer_against_apache(apache_rocketmq: ApacheRocketMQ):
    """Heartbeat, rebalance, long-polling pulls, offset commits and send-back, all answered
    by Apache's own broker."""
    from ferrymq.client.listener import ConsumeConcurrentlyStatus
    from ferrymq.client.push_config import ConsumeFromWhere
    from ferrymq.client.push_consumer import PushConsumer

    ns = apache_rocketmq.namesrv_addr
    topic = f"PyPushOnApache_{uuid.uuid4().hex[:6]}"
    group = f"py_push_{uuid.uuid4().hex[:6]}"

    async def scenario():
        await create_routed_topic(ns, topic, 4)
        received: dict[str, int] = {}
        failed_once: set[str] = set()
        done = asyncio.Event()

        def listener(messages, context):
            for m in messages:
                key = m.keys[0]
                if key == "k3" and key not in failed_once:
                    failed_once.add(key)  # fail once: redelivered through Apache's retry topic
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER
                received[key] = received.get(key, 0) + 1
            if len(received) == 20:
                done.set()
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        consumer = PushConsumer(group, namesrv_addr=ns, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        consumer.subscribe(topic, "*")
        consumer.register_listener(listener)
        await consumer.start()
        try:
            async with Producer("py-push-producer", namesrv_addr=ns) as producer:
                for i in range(20):
                    m = Message(topic, f"push {i}".encode())
                    m.keys = [f"k{i}"]
                    await producer.send(m)
            # Apache's first retry delay is level 3 (10 s).
            await asyncio.wait_for(done.wait(), 60)
        finally:
            await consumer.close()
        assert set(received) == {f"k{i}" for i in range(20)}
        assert "k3" in failed_once

    asyncio.run(scenario())


def test_transaction_producer_prepares_and_ends_many_one_by_one_on_a_broker_without_the_batch_requests(
        apache_rocketmq: ApacheRocketMQ):
    """prepare_many and end_many send FerryMQ's SEND_HALF_MESSAGES and END_TRANSACTIONS; Apache
    answers REQUEST_CODE_NOT_SUPPORTED and the producer stores and ends each half message on its
    own instead, each queue in order."""
    from ferrymq.client.pull_consumer import PullConsumer
    from ferrymq.client.transaction_producer import LocalTransactionState, TransactionProducer

    ns = apache_rocketmq.namesrv_addr
    topic = f"PyTxOnApache_{uuid.uuid4().hex[:6]}"

    async def scenario():
        await create_routed_topic(ns, topic, 2)
        async with TransactionProducer("py-tx-on-apache", namesrv_addr=ns,
                                       check_listener=lambda m: LocalTransactionState.UNKNOW) as p:
            queue = (await p.publish_queues(topic))[0]
            halves = await p.prepare_many([Message(topic, b"row %d" % i, properties={"n": str(i)}) for i in range(12)],
                                          queue=queue)
            await p.end_many(halves[:8][::-1], LocalTransactionState.COMMIT_MESSAGE, ordered=True)
            await p.end_many(halves[8:], LocalTransactionState.ROLLBACK_MESSAGE)
        async with PullConsumer(f"py_tx_reader_{uuid.uuid4().hex[:6]}", namesrv_addr=ns) as pc:
            got: list = []
            for _ in range(50):
                result = await pc.pull(queue, len(got), max_nums=32)
                if result.status is PullStatus.FOUND:
                    got += result.messages
                if len(got) >= 8:
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.5)
            assert (await pc.pull(queue, len(got), max_nums=32)).status is not PullStatus.FOUND
        assert [m.properties["n"] for m in got] == [str(i) for i in range(7, -1, -1)]

    asyncio.run(scenario())
