"""Request-reply with FerryMQ's clients against a real broker: a request answered by a push
consumer's reply, the reply stored in the reply topic, a request nobody answers timing out,
and a reply whose requester is gone refused to the responder."""

from __future__ import annotations

import pytest

from ferrymq.client.errors import MQBrokerError, MQClientError
from ferrymq.client.producer import Producer
from ferrymq.client.push_consumer import PushConsumer
from ferrymq.client.request_reply import create_reply, reply_topic
from ferrymq.common.message import Message, MessageExt, Prop
from tests.consumer_support import cluster_with_topic, read_all


@pytest.fixture
async def cluster(tmp_path):
    async with cluster_with_topic(tmp_path / "store", "Quotes", 2) as c:
        yield c


async def test_a_request_gets_the_reply_its_responder_sends(cluster):
    ns = cluster.namesrv_addr
    async with Producer("responder-p", namesrv_addr=ns) as responder_producer:
        async def answer(msgs, context):
            for m in msgs:
                await responder_producer.send(create_reply(m, b"price of " + m.body))

        consumer = PushConsumer("quote-service", namesrv_addr=ns)
        consumer.subscribe("Quotes", "*").register_listener(answer)
        await consumer.start()
        try:
            async with Producer("requester", namesrv_addr=ns) as requester:
                replies = [await requester.request(Message("Quotes", f"item-{i}".encode()), timeout=10)
                           for i in range(3)]
        finally:
            await consumer.shutdown()
    assert [r.body for r in replies] == [b"price of item-0", b"price of item-1", b"price of item-2"]
    assert all(isinstance(r, MessageExt) and r.topic == reply_topic("DefaultCluster") for r in replies)
    assert len({r.properties[Prop.CORRELATION_ID] for r in replies}) == 3
    stored = await read_all(ns, reply_topic("DefaultCluster"))  # storeReplyMessageEnable=true
    assert sorted(m.body for m in stored) == sorted(r.body for r in replies)


async def test_a_request_nobody_answers_times_out(cluster):
    async with Producer("requester", namesrv_addr=cluster.namesrv_addr) as requester:
        with pytest.raises(MQClientError, match="no reply to the request to Quotes within 0.5 s"):
            await requester.request(Message("Quotes", b"anyone?"), timeout=0.5)


async def test_a_reply_to_a_requester_that_is_gone_is_refused(cluster):
    ns = cluster.namesrv_addr
    request = MessageExt(topic="Quotes", body=b"q", properties={
        Prop.CLUSTER: "DefaultCluster", Prop.REPLY_TO_CLIENT: "10.9.9.9@gone", Prop.CORRELATION_ID: "c-1"})
    async with Producer("responder-p", namesrv_addr=ns, retry_times=0) as responder_producer:
        with pytest.raises(MQBrokerError, match="channel of 10.9.9.9@gone not found"):
            await responder_producer.send(create_reply(request, b"too late"))
    with pytest.raises(MQClientError, match="not a request message"):
        create_reply(MessageExt(topic="Quotes", body=b"plain"), b"x")
