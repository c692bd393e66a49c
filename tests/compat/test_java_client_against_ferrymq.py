"""The official RocketMQ 4.9.7 Java client, unchanged, against ``ferrymq standalone``.

The same programs and the same assertions as the reference run against Apache RocketMQ
(test_harness_against_apache.py): DefaultMQProducer sync, async and oneway, then a
DefaultMQPushConsumer that must receive every message. The Python Producer's messages
must reach the Java push consumer too, and Java-produced messages the Python consumer.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common.message import Message
from testkit.ports import free_port
from testkit.processes import FerryProcess, StandaloneProcess

from .checks import COUNT, MODES, check_produce_consume
from testkit.java_client import JavaClient, run_java_client, run_mqadmin

pytestmark = pytest.mark.compat


def test_java_producer_all_modes_and_push_consumer(ferrymq: StandaloneProcess, java_client: JavaClient):
    topic = f"FerryCompat_{uuid.uuid4().hex[:8]}"
    events = java_client.produce_consume(ferrymq.namesrv_addr, topic, count=COUNT, modes=MODES, tag="TagA",
                                         key_prefix="ref", timeout_ms=40000)
    check_produce_consume(topic, events)


def test_python_producer_to_java_push_consumer(ferrymq: StandaloneProcess, java_client: JavaClient):
    topic = f"FerryCompatPy_{uuid.uuid4().hex[:8]}"

    async def produce() -> dict[str, tuple[int, int]]:
        acks = {}
        async with Producer("py-compat-producer", namesrv_addr=ferrymq.namesrv_addr) as producer:
            for i in range(30):
                m = Message(topic, f"from python #{i}".encode(), properties={"origin": "python"})
                m.tags, m.keys = "TagP", [f"py-{i}"]
                r = await producer.send(m)
                acks[f"py-{i}"] = (r.message_queue.queue_id, r.queue_offset, r.msg_id)
            batch = [Message(topic, f"batch #{i}".encode()) for i in range(5)]
            for i, m in enumerate(batch):
                m.keys = [f"py-batch-{i}"]
            await producer.send_batch(batch)
        return acks

    acks = asyncio.run(produce())
    expected = list(acks) + [f"py-batch-{i}" for i in range(5)]
    events = java_client.consume(ferrymq.namesrv_addr, topic, expect_keys=expected, timeout_ms=40000)
    received = {e["key"]: e for e in events.of("received")}
    assert set(received) == set(expected)
    for key, (queue_id, offset, msg_id) in acks.items():
        r = received[key]
        i = int(key.split("-")[1])
        assert r["body"] == f"from python #{i}" and r["tags"] == "TagP"
        assert r["props"]["origin"] == "python"
        assert (r["queueId"], r["queueOffset"]) == (queue_id, offset)
        assert r["msgId"] == msg_id


def test_java_producer_to_python_consumer(ferrymq: StandaloneProcess, java_client: JavaClient):
    topic = f"FerryCompatJp_{uuid.uuid4().hex[:8]}"
    events = java_client.produce(ferrymq.namesrv_addr, topic, count=10, modes=("sync",), tag="TagJ", key_prefix="jp")
    sent = {e["key"]: e for e in events.of("sent")}
    assert len(sent) == 10

    async def consume() -> dict[str, Message]:
        got = {}
        async with PullConsumer("py-compat-consumer", namesrv_addr=ferrymq.namesrv_addr) as consumer:
            for mq in await consumer.fetch_queues(topic):
                result = await consumer.pull(mq, 0, max_nums=32)
                for m in result.messages:
                    got[m.keys[0]] = m
        return got

    got = asyncio.run(consume())
    assert set(got) == set(sent)
    for key, s in sent.items():
        m = got[key]
        assert m.client_msg_id == s["msgId"] and m.msg_id == s["offsetMsgId"]
        assert (m.queue_id, m.queue_offset) == (s["queueId"], s["queueOffset"])
        assert m.tags == "TagJ"


def test_mqadmin_sees_the_ferrymq_broker_and_topic_route(ferrymq: StandaloneProcess, java_client: JavaClient):
    topic = f"FerryCompatAdm_{uuid.uuid4().hex[:8]}"
    java_client.produce(ferrymq.namesrv_addr, topic, count=1, modes=("sync",))
    route = run_mqadmin(ferrymq.namesrv_addr, "topicRoute", "-t", topic)
    assert f'"{ferrymq.broker_addr}"' in route, route
    assert '"writeQueueNums":4' in route, route


def test_java_client_given_only_the_address_service_produces_and_consumes(ferrymq):
    """-Drocketmq.namesrv.domain pointing at `ferrymq nsaddr` and no name-server address."""
    port = free_port()
    service = FerryProcess(["nsaddr", "--port", str(port), "--namesrv", ferrymq.namesrv_addr],
                           "address service is ready", ferrymq.data_dir.parent / f"nsaddr-{port}.log").start()
    try:
        topic = f"FerryDomain_{uuid.uuid4().hex[:8]}"
        args = ["produce-consume", "--topic", topic, "--count", "10", "--modes", "sync", "--timeout-ms", "60000"]
        events = run_java_client(args, 120, jvm_args=[f"-Drocketmq.namesrv.domain=127.0.0.1:{port}"])
    finally:
        service.stop()
    assert events.done["ok"] and len(events.of("received")) >= 10, events


def test_java_client_on_the_vip_channel(ferrymq, java_client):
    """-Dcom.rocketmq.sendMessageWithVIPChannel=true: sends go to listenPort - 2, served as the main port."""
    topic = f"FerryVip_{uuid.uuid4().hex[:8]}"
    args = ["produce-consume", "--namesrv", ferrymq.namesrv_addr, "--topic", topic, "--count", "10",
            "--modes", "sync,async", "--timeout-ms", "60000"]
    events = run_java_client(args, 120, jvm_args=["-Dcom.rocketmq.sendMessageWithVIPChannel=true"])
    assert events.done["ok"] and len({e["key"] for e in events.of("received")}) == 20, events

    async def runtime_info_on_vip_port():
        from ferrymq.remoting.client import RemotingClient
        from ferrymq.remoting.codes import RequestCode
        from ferrymq.remoting.command import RemotingCommand
        client = RemotingClient()
        try:
            return await client.invoke(f"127.0.0.1:{ferrymq.broker_port - 2}",
                                       RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
        finally:
            await client.close()
    assert asyncio.run(runtime_info_on_vip_port()).code == 0
