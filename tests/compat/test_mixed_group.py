"""One consumer group, two languages: the official RocketMQ 4.9.7 DefaultMQPushConsumer (in its
own JVM) and FerryMQ's Python PushConsumers share a topic's queues on a FerryMQ broker. Each
member computes its own share (AllocateMessageQueueAveragely over the same sorted member list),
so the shares only add up to every queue exactly once if both languages compute the same thing."""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.client.allocation import allocate_averagely
from ferrymq.client.push_config import ConsumeFromWhere
from ferrymq.client.push_consumer import PushConsumer
from ferrymq.common.protocol import MessageQueue
from tests.consumer_support import JsonEventsProcess, Recorder, create_topic, produce
from testkit.wait import wait_until

from testkit.java_client import java_client_command

pytestmark = pytest.mark.compat

TOPIC, GROUP, QUEUES = "MixedT", "mixed-group", 8


class JavaPushConsumer(JsonEventsProcess):
    @classmethod
    async def start(cls, namesrv: str, instance: str) -> "JavaPushConsumer":
        cmd = java_client_command(["--namesrv", namesrv, "--topic", TOPIC, "--group", GROUP, "--instance", instance,
                                   "--run-ms", "240000"], main="ferrymq.compat.PushConsumerRun")
        return await cls.spawn(*cmd, stderr=asyncio.subprocess.DEVNULL)

    def queues(self) -> set[int] | None:
        assigned = self.of("assigned")
        return {q[2] for q in assigned[-1]["queues"]} if assigned else None


def python_member(ns: str, name: str, rec: Recorder) -> PushConsumer:
    c = PushConsumer(GROUP, namesrv_addr=ns, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    c.client_config.instance_name = name
    c.subscribe(TOPIC).register_listener(rec.listener(name))
    return c


async def test_java_and_python_push_consumers_share_a_group_without_overlap(cluster, rocketmq_jars):
    ns = cluster.namesrv_addr
    await create_topic(ns, TOPIC, QUEUES)
    rec = Recorder()
    java = await JavaPushConsumer.start(ns, "java-member")
    py = [python_member(ns, f"py-member-{i}", rec) for i in range(2)]
    try:
        await wait_until(lambda: java.of("ready"), 60, "the Java consumer started")
        for c in py:
            await c.start()

        def shares() -> dict[str, set[int]] | None:
            java_share = java.queues()
            if java_share is None:
                return None
            out = {java.of("ready")[0]["clientId"]: java_share}
            out.update({c.client_id: {mq.queue_id for mq in c.rebalancer.owned(TOPIC)} for c in py})
            return out

        def partitioned() -> bool:
            s = shares()
            return s is not None and sorted(q for share in s.values() for q in share) == list(range(QUEUES))

        await wait_until(partitioned, 60, "8 queues split among the Java and the two Python members")
        s = shares()
        members = sorted(s)
        mq_all = [MessageQueue(TOPIC, "broker-a", q) for q in range(QUEUES)]
        assert {cid: {mq.queue_id for mq in allocate_averagely(GROUP, cid, mq_all, members)} for cid in members} == s, \
            "each member's share is exactly AllocateMessageQueueAveragely's"

        await produce(ns, TOPIC, 200, prefix="m")
        expected = {f"m-{i}" for i in range(200)}

        def all_keys() -> list[tuple[str, str, int]]:
            java_keys = [(e["key"], "java", e["queueId"]) for e in java.of("received")]
            return java_keys + [(e.key, e.consumer, e.queue_id) for e in rec.events]

        await wait_until(lambda: {k for k, _, _ in all_keys()} >= expected, 60, "all 200 consumed by the group")
        got = all_keys()
        assert len(got) == len(expected), f"{len(got) - len(expected)} message(s) consumed by two members"
        owner = {q: cid for cid, share in s.items() for q in share}
        java_cid = java.of("ready")[0]["clientId"]
        names = {c.client_config.instance_name: c.client_id for c in py} | {"java": java_cid}
        assert all(owner[q] == names[who] for _, who, q in got), "every message came from its member's own queues"
        assert any(who == "java" for _, who, _ in got) and any(who != "java" for _, who, _ in got)

        # The Java member leaves: the Python members take its queues and go on.
        assert await java.stop() == 0
        await wait_until(lambda: sorted(q for c in py for q in (mq.queue_id for mq in c.rebalancer.owned(TOPIC)))
                         == list(range(QUEUES)), 30, "the Python members owning all 8 queues")
        await produce(ns, TOPIC, 40, prefix="late")
        await wait_until(lambda: rec.keys() >= {f"late-{i}" for i in range(40)}, 30, "the late messages")
    finally:
        await java.stop()
        for c in py:
            await c.shutdown()


async def test_mqadmin_reads_ferrymq_consume_stats_connections_and_subscription_groups(cluster, rocketmq_jars):
    """The official mqadmin parses our GET_CONSUME_STATS (with its extra consumeEnable field),
    GET_CONSUMER_CONNECTION_LIST and UPDATE_AND_CREATE_SUBSCRIPTIONGROUP."""
    from testkit.java_client import run_mqadmin

    ns, topic, group = cluster.namesrv_addr, "AdmProgT", "adm-prog-group"
    await create_topic(ns, topic, 2)
    rec = Recorder()
    c = PushConsumer(group, namesrv_addr=ns, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    c.subscribe(topic).register_listener(rec.listener("c"))
    await c.start()
    try:
        await produce(ns, topic, 10, prefix="p")
        await wait_until(lambda: len(rec.keys()) == 10, 20, "10 consumed")
        # Offsets advance once the listener calls have returned, not when they start.
        await wait_until(lambda: c.consumed >= 10, 20, "10 consumptions finished")
        await c.offset_store.persist_all(set(c.rebalancer.process_queues), oneway=False)
        progress = await asyncio.to_thread(run_mqadmin, ns, "consumerProgress", "-g", group)
        connection = await asyncio.to_thread(run_mqadmin, ns, "consumerConnection", "-g", group)
    finally:
        await c.shutdown()
    assert topic in progress and "Diff Total: 0" in progress, progress
    assert c.client_id in connection and "PYTHON" in connection, connection

    await asyncio.to_thread(run_mqadmin, ns, "updateSubGroup", "-b", cluster.broker_addr, "-g", "adm-made-group",
                            "-r", "7", "-s", "false")
    made = cluster.broker.groups.get("adm-made-group")
    assert made is not None and made.retry_max_times == 7 and made.consume_enable is False


async def test_java_push_consumer_retries_and_dead_letters_through_ferrymq(tmp_path, rocketmq_jars):
    """The official client's CONSUMER_SEND_MSG_BACK against FerryMQ: redelivery through
    %RETRY%<group> after the delay level, then the DLQ after maxReconsumeTimes."""
    from ferrymq.common.protocol import dlq_topic
    from tests.support import InProcessCluster

    cluster = InProcessCluster(tmp_path / "store", settings={"messageDelayLevel": "1s 1s 1s 1s 1s"})
    await cluster.start()
    ns = cluster.namesrv_addr
    cmd = java_client_command(["--namesrv", ns, "--topic", "JavaRetryT", "--group", "java-retry-group",
                               "--fail-prefix", "bad", "--max-reconsume-times", "1"], main="ferrymq.compat.PushConsumerRun")
    java = None
    try:
        await create_topic(ns, "JavaRetryT", 2)
        proc = await asyncio.create_subprocess_exec(*cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.DEVNULL)
        java = JavaPushConsumer(proc)
        await wait_until(lambda: java.of("ready"), 60, "the Java consumer started")
        await produce(ns, "JavaRetryT", 1, prefix="bad")
        await produce(ns, "JavaRetryT", 3, prefix="good")

        def bad() -> list[dict]:
            return [e for e in java.of("received") if e["key"] == "bad-0"]

        await wait_until(lambda: len(bad()) >= 2, 60, "the failed message redelivered to the Java consumer")
        await wait_until(lambda: cluster.broker.store.max_offset(dlq_topic("java-retry-group"), 0) == 1,
                         30, "the message in the DLQ")
        assert await java.stop() == 0
    finally:
        if java is not None:
            await java.stop()
        await cluster.stop()
    assert [e["reconsumeTimes"] for e in bad()] == [0, 1]
    assert all(e["topic"] == "JavaRetryT" for e in bad()), "the Java client shows the original topic"
    assert {e["key"] for e in java.of("received")} >= {"good-0", "good-1", "good-2"}


async def test_java_and_python_orderly_consumers_share_locked_queues_in_order(cluster, rocketmq_jars):
    """Java's MessageListenerOrderly takes its queues through FerryMQ's LOCK_BATCH_MQ like ours do:
    the group's queues are split between them and each queue is consumed in offset order."""
    from ferrymq.client.producer import Producer
    from ferrymq.common.message import Message

    ns, topic, group = cluster.namesrv_addr, "MixedOrderT", "mixed-order-group"
    await create_topic(ns, topic, 4, order=True)
    cmd = java_client_command(["--namesrv", ns, "--topic", topic, "--group", group, "--instance", "java-orderly",
                               "--orderly", "true"], main="ferrymq.compat.PushConsumerRun")
    proc = await asyncio.create_subprocess_exec(*cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.DEVNULL)
    java = JavaPushConsumer(proc)
    rec = Recorder()
    py = PushConsumer(group, namesrv_addr=ns, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    py.subscribe(topic).register_listener(rec.listener("py"), orderly=True)
    try:
        await wait_until(lambda: java.of("ready"), 60, "the Java consumer started")
        await py.start()

        def split() -> bool:
            j, p = java.queues(), {mq.queue_id for mq in py.rebalancer.owned(topic)}
            return j is not None and len(j) == 2 and sorted(j | p) == [0, 1, 2, 3] and not j & p
        await wait_until(split, 60, "the four queues split two and two")
        held = {q: cluster.broker.locks.holder(group, MessageQueue(topic, "broker-a", q)) for q in range(4)}
        assert sorted(h.split("@")[1] for h in held.values()) == sorted(["java-orderly"] * 2 + [py.client_config.instance_name] * 2)

        async with Producer("mixed-order-p", namesrv_addr=ns) as producer:
            for i in range(30):
                for q in range(4):
                    m = Message(topic, f"{q}:{i}".encode())
                    m.keys = [f"q{q}-{i}"]
                    await producer.send(m, queue=MessageQueue(topic, "broker-a", q))
        await wait_until(lambda: len(java.of("received")) + len(rec.events) >= 120, 60, "all 120 consumed")
    finally:
        await java.stop()
        await py.shutdown()
    per_queue: dict[int, list[int]] = {}
    for e in java.of("received"):
        per_queue.setdefault(e["queueId"], []).append(e["queueOffset"])
    for e in sorted(rec.events, key=lambda e: e.at):
        per_queue.setdefault(e.queue_id, []).append(e.queue_offset)
    assert per_queue == {q: list(range(30)) for q in range(4)}, per_queue
