"""The official RocketMQ 5 Python client (``rocketmq-python-client`` from PyPI) and Node.js
client (``rocketmq-client-nodejs`` from npm), unchanged, against ``ferrymq standalone``'s gRPC
endpoint: producers (normal, FIFO, delay) and simple consumers; every message once, acks
stop redelivery, a changed invisible duration brings a message back."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from testkit.grpc_clients import ensure_node5, run_grpc_java, run_grpc_node, running_grpc_standalone, unique_names
from tests.support import require

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with running_grpc_standalone(tmp_path_factory.mktemp("grpc-py-node") / "store") as started:
        yield started


names = unique_names


def python_client():
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer
    return ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer


def receive_all(consumer, expect: int, deadline_s: float, *, ack: bool = True, invisible_s: int = 15) -> list:
    got, deadline = [], time.monotonic() + deadline_s
    while len(got) < expect and time.monotonic() < deadline:
        for m in consumer.receive(16, invisible_s):
            got.append(m)
            if ack:
                consumer.ack(m)
    return got


def test_python_producer_and_simple_consumer(broker):
    ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer = python_client()
    _, endpoint = broker
    topic, group = names("Py5")
    config = ClientConfiguration(endpoint, Credentials())
    producer = Producer(config, (topic,))
    producer.startup()
    sent = {}  # key -> (message id, sent at, delivery time)
    try:
        for i in range(12):
            m = Message()
            m.topic, m.body, m.tag, m.keys = topic, f"body-{i}".encode(), "TagA", f"k{i}"
            m.add_property("seq", str(i))
            if i % 3 == 1:
                m.message_group = f"g{i % 2}"
            elif i % 3 == 2:
                m.delivery_timestamp = int(time.time() * 1000) + 1500
            sent[f"k{i}"] = (producer.send(m).message_id, int(time.time() * 1000), m.delivery_timestamp)
    finally:
        producer.shutdown()
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("TagA")}, await_duration=5)
    consumer.startup()
    try:
        got, arrived = [], {}
        deadline = time.monotonic() + 40
        while len(got) < 12 and time.monotonic() < deadline:
            for m in consumer.receive(16, 15):
                got.append(m)
                arrived[next(iter(m.keys))] = int(time.time() * 1000)
                consumer.ack(m)
        assert sorted(next(iter(m.keys)) for m in got) == sorted(sent), "every message once"
        for m in got:
            key = next(iter(m.keys))
            message_id, _, delivery = sent[key]
            assert m.message_id == message_id and m.body == f"body-{key[1:]}".encode() and m.tag == "TagA"
            assert m.properties.get("seq") == key[1:]
            if delivery:
                assert arrived[key] >= delivery, f"{key} delivered before its delivery time"
        # acked: nothing comes back
        assert receive_all(consumer, 1, 6) == []
    finally:
        consumer.shutdown()


def test_python_change_invisible_duration_brings_a_message_back(broker):
    ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer = python_client()
    _, endpoint = broker
    topic, group = names("Py5Invisible")
    config = ClientConfiguration(endpoint, Credentials())
    producer = Producer(config, (topic,))
    producer.startup()
    try:
        m = Message()
        m.topic, m.body = topic, b"once more"
        message_id = producer.send(m).message_id
    finally:
        producer.shutdown()
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=5)
    consumer.startup()
    try:
        [first] = receive_all(consumer, 1, 20, ack=False, invisible_s=60)
        assert first.message_id == message_id and first.delivery_attempt == 1
        consumer.change_invisible_duration(first, 1)  # back in 1 s instead of 60
        [again] = receive_all(consumer, 1, 20)
        assert again.message_id == message_id and again.delivery_attempt == 2
    finally:
        consumer.shutdown()


@pytest.mark.slow  # 25 s or more (make test-slow)
def test_node_producer_and_simple_consumer(broker):
    require(ensure_node5)
    _, endpoint = broker
    topic, group = names("Node5")
    sent = run_grpc_node("produce", endpoints=endpoint, topic=topic, count=9, kind="fifo")
    ids = {e["key"]: e["id"] for e in sent.of("sent")}
    assert len(ids) == 9
    got = run_grpc_node("simple", endpoints=endpoint, topic=topic, group=group, expect=9, timeoutMs=40000)
    received = got.of("received")
    assert {e["key"]: e["id"] for e in received} == ids and len(received) == 9
    assert not any(e.get("corrupted") for e in received), "the body digest checks out"
    per_group = defaultdict(list)
    for e in received:
        per_group[e["group"]].append(int(e["seq"]))
    assert all(seqs == sorted(seqs) for seqs in per_group.values())
    again = run_grpc_node("simple", endpoints=endpoint, topic=topic, group=group, expect=1, timeoutMs=6000,
                          check=False)
    assert again.of("received") == []


def test_node_delay_message_reaches_a_java_consumer(broker):
    require(ensure_node5)
    _, endpoint = broker
    topic, group = names("Node5Delay")
    sent = run_grpc_node("produce", endpoints=endpoint, topic=topic, count=2, kind="delay", delayMs=2000)
    sent_at = {e["key"]: e["at"] for e in sent.of("sent")}
    got = run_grpc_java("simple", endpoints=endpoint, topic=topic, group=group, expect=2, timeoutMs=30000)
    assert {e["key"] for e in got.of("received")} == set(sent_at)
    for e in got.of("received"):
        assert e["at"] >= sent_at[e["key"]] + 2000 - 250
