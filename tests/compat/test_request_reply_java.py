"""The official 4.9.7 client's request-reply through FerryMQ: Java requester and Java
responder (DefaultMQProducer.request, MessageUtil.createReplyMessage), and a Java requester
answered by FerryMQ's Python push consumer."""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest

from ferrymq.client.producer import Producer
from ferrymq.client.push_consumer import PushConsumer
from ferrymq.client.request_reply import create_reply
from tests.consumer_support import create_topic

from testkit.java_client import run_java_client

pytestmark = pytest.mark.compat

MAIN = "ferrymq.compat.RequestReply"


def request_reply(ns: str, topic: str, role: str, count: int = 5) -> list[dict]:
    asyncio.run(create_topic(ns, topic, 2))
    return run_java_client(["--namesrv", ns, "--topic", topic, "--role", role, "--count", str(count)], 120, main=MAIN)


def test_java_request_is_answered_by_a_java_responder(ferrymq):
    events = request_reply(ferrymq.namesrv_addr, f"FerryRR_{uuid.uuid4().hex[:8]}", "both")
    assert [(e["request"], e["reply"]) for e in events.of("reply")] == [
        (f"question-{i}", f"reply to question-{i}") for i in range(5)]


def test_java_request_is_answered_by_a_python_responder(ferrymq):
    ns, topic = ferrymq.namesrv_addr, f"FerryRR_{uuid.uuid4().hex[:8]}"
    ready, stop = threading.Event(), threading.Event()

    async def serve():
        async with Producer("py-replier", namesrv_addr=ns) as replier:
            async def answer(msgs, context):
                for m in msgs:
                    await replier.send(create_reply(m, b"python says " + m.body))

            consumer = PushConsumer(f"py-service-{topic}", namesrv_addr=ns)
            consumer.subscribe(topic, "*").register_listener(answer)
            await consumer.start()
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.05)
            await consumer.shutdown()

    asyncio.run(create_topic(ns, topic, 2))
    server = threading.Thread(target=asyncio.run, args=(serve(),))
    server.start()
    try:
        assert ready.wait(30)
        events = request_reply(ns, topic, "requester", count=3)
    finally:
        stop.set()
        server.join(30)
    assert [e["reply"] for e in events.of("reply")] == [f"python says question-{i}" for i in range(3)]
