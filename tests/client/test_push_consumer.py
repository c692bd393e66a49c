"""The push consumer against a real broker: filtering, where to start, offsets, broadcasting,
flow control, async listeners and offset resets."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from ferrymq.client.admin import AdminClient
from ferrymq.client.config import ClientConfig
from ferrymq.client.listener import ConsumeConcurrentlyStatus
from ferrymq.client.push_config import ConsumeFromWhere, MessageModel
from ferrymq.client.push_consumer import PushConsumer
from ferrymq.common.protocol import MessageQueue
from tests.consumer_support import Recorder, create_topic, produce
from testkit.wait import wait_until

pytestmark = pytest.mark.integration


async def test_tag_filter_consumes_only_subscribed_tags_and_commits_offsets(cluster):
    ns = cluster.namesrv_addr
    await create_topic(ns, "TagT", 4)
    rec = Recorder()
    consumer = PushConsumer("tag-group", namesrv_addr=ns)
    consumer.subscribe("TagT", "TagA || TagB")
    consumer.register_listener(rec.listener("c"))
    await consumer.start()
    try:
        await produce(ns, "TagT", 20, prefix="a", tags="TagA")
        await produce(ns, "TagT", 20, prefix="c", tags="TagC")
        await produce(ns, "TagT", 20, prefix="b", tags="TagB")
        expected = {f"{p}-{i}" for p in "ab" for i in range(20)}
        await wait_until(lambda: rec.keys() >= expected, 20, "TagA and TagB messages")
        # Everything (TagC included) is behind the group once the pulls caught up.
        await wait_until(lambda: sum(consumer.offset_store.table.get(MessageQueue("TagT", "broker-a", q), 0)
                                     for q in range(4)) == 60, 20, "offsets past the filtered messages")
    finally:
        await consumer.shutdown()
    assert rec.keys() == expected, "no TagC message reaches the listener"
    assert all(len(rec.of(k)) == 1 for k in expected)
    committed = {q: cluster.broker.offsets.query("tag-group", "TagT", q) for q in range(4)}
    assert sum(committed.values()) == 60, committed


async def test_a_consumer_started_before_its_topic_exists_consumes_it_without_waiting_for_a_heartbeat(cluster):
    """The topic is created after the consumer started (no route then): the broker the new
    route names hears the consumer's heartbeat when the route is read, so the group has a
    member there and the messages are consumed. The periodic heartbeat is off (an hour), so
    only that first heartbeat can make the broker know the group."""
    ns = cluster.namesrv_addr
    rec = Recorder()
    consumer = PushConsumer("late-topic-group", config=ClientConfig(namesrv_addr=ns, heartbeat_broker_interval=3600))
    consumer.subscribe("LateT").register_listener(rec.listener("c"))
    await consumer.start()
    try:
        await create_topic(ns, "LateT", 4)
        await produce(ns, "LateT", 20, prefix="late")
        await wait_until(lambda: rec.keys() >= {f"late-{i}" for i in range(20)}, 30, "the messages of the new topic")
    finally:
        await consumer.shutdown()


async def test_offsets_survive_a_consumer_restart_without_redelivery(cluster):
    ns = cluster.namesrv_addr
    await create_topic(ns, "ResumeT", 4)
    rec = Recorder()
    await produce(ns, "ResumeT", 40, prefix="one")
    first = PushConsumer("resume-group", namesrv_addr=ns, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    first.subscribe("ResumeT").register_listener(rec.listener("first"))
    await first.start()
    await wait_until(lambda: len(rec.keys()) == 40, 20, "the first 40")
    await first.shutdown()  # persists offsets (UPDATE_CONSUMER_OFFSET) and leaves the group
    await produce(ns, "ResumeT", 40, prefix="two")
    second = PushConsumer("resume-group", namesrv_addr=ns, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    second.subscribe("ResumeT").register_listener(rec.listener("second"))
    await second.start()
    try:
        await wait_until(lambda: len(rec.keys()) == 80, 20, "the next 40")
    finally:
        await second.shutdown()
    assert len(rec.events) == 80, "a clean hand-over redelivers nothing"
    assert {e.key for e in rec.events if e.consumer == "second"} == {f"two-{i}" for i in range(40)}


async def test_consume_from_last_first_and_timestamp_for_a_new_group(cluster):
    """Where a group without offsets starts. (A young queue whose first message is still in
    memory is read from 0 whatever the setting, as in RocketMQ; here the page cache is cold.)"""
    ns = cluster.namesrv_addr
    await create_topic(ns, "WhereT", 1)
    await produce(ns, "WhereT", 5, prefix="old")
    second = int(time.time())
    await wait_until(lambda: time.time() >= second + 2, 5, "the clock to move two seconds on")
    await produce(ns, "WhereT", 5, prefix="new")
    cluster.broker.store.is_in_memory = lambda phys: False  # cold page cache (asked by the broker's offset lookup)

    async def first_keys(where: ConsumeFromWhere, **settings) -> set[str]:
        rec = Recorder()
        c = PushConsumer(f"where-{where.name.lower()}", namesrv_addr=ns, consume_from_where=where, **settings)
        c.subscribe("WhereT").register_listener(rec.listener("c"))
        await c.start()
        try:
            await produce(ns, "WhereT", 1, prefix=f"probe-{where.name}")
            await wait_until(lambda: f"probe-{where.name}-0" in rec.keys(), 20, "the probe message")
        finally:
            await c.shutdown()
        return rec.keys() - {f"probe-{where.name}-0"}

    assert await first_keys(ConsumeFromWhere.FIRST_OFFSET) >= {f"old-{i}" for i in range(5)}
    assert await first_keys(ConsumeFromWhere.LAST_OFFSET) == set()
    stamp = time.strftime("%Y%m%d%H%M%S", time.localtime(second + 2))
    got = await first_keys(ConsumeFromWhere.TIMESTAMP, consume_timestamp=stamp)
    assert {f"new-{i}" for i in range(5)} <= got and not any(k.startswith("old") for k in got), got


async def test_broadcasting_every_member_gets_everything_and_keeps_local_offsets(cluster, tmp_path):
    ns = cluster.namesrv_addr
    await create_topic(ns, "BcastT", 4)
    recs = [Recorder(), Recorder()]
    members = []
    for i, rec in enumerate(recs):
        c = PushConsumer("bcast-group", namesrv_addr=ns, message_model=MessageModel.BROADCASTING,
                         consume_from_where=ConsumeFromWhere.FIRST_OFFSET, offset_store_dir=tmp_path / "offsets")
        c.client_config.instance_name = f"bcast-{i}"
        c.subscribe("BcastT").register_listener(rec.listener(f"m{i}"))
        members.append(await c.start())
    await produce(ns, "BcastT", 30, prefix="b")
    expected = {f"b-{i}" for i in range(30)}
    try:
        for rec in recs:
            await wait_until(lambda: rec.keys() == expected, 20, "every message at every member")
        assert all(len(m.rebalancer.owned("BcastT")) == 4 for m in members)
    finally:
        for m in members:
            await m.shutdown()
    offsets_files = sorted(p.relative_to(tmp_path / "offsets").parts[0] for p in (tmp_path / "offsets").rglob("offsets.json"))
    assert len(offsets_files) == 2, offsets_files
    # A restarted member resumes from its own file: nothing old again, the new ones arrive.
    again = Recorder()
    c = PushConsumer("bcast-group", namesrv_addr=ns, message_model=MessageModel.BROADCASTING,
                     consume_from_where=ConsumeFromWhere.FIRST_OFFSET, offset_store_dir=tmp_path / "offsets")
    c.client_config.instance_name = "bcast-0"
    c.subscribe("BcastT").register_listener(again.listener("again"))
    await c.start()
    try:
        await produce(ns, "BcastT", 5, prefix="late")
        await wait_until(lambda: again.keys() >= {f"late-{i}" for i in range(5)}, 20, "the late messages")
    finally:
        await c.shutdown()
    assert again.keys() == {f"late-{i}" for i in range(5)}


async def test_tag_hash_collisions_are_filtered_by_the_client(cluster):
    """"Aa" and "BB" have the same Java hashCode: the broker (which filters by hash) lets both
    through, the client checks the tag itself."""
    from ferrymq.common.java_hash import java_string_hash
    assert java_string_hash("Aa") == java_string_hash("BB")
    ns = cluster.namesrv_addr
    await create_topic(ns, "CollideT", 1)
    rec = Recorder()
    consumer = PushConsumer("collide-group", namesrv_addr=ns, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe("CollideT", "Aa").register_listener(rec.listener("c"))
    await produce(ns, "CollideT", 5, prefix="bb", tags="BB")
    await produce(ns, "CollideT", 5, prefix="aa", tags="Aa")
    await consumer.start()
    try:
        await wait_until(lambda: rec.keys() >= {f"aa-{i}" for i in range(5)}, 20, "the Aa messages")
        mq = MessageQueue("CollideT", "broker-a", 0)
        await wait_until(lambda: consumer.offset_store.table.get(mq) == 10, 20, "the offset past all ten")
    finally:
        await consumer.shutdown()
    assert rec.keys() == {f"aa-{i}" for i in range(5)}


@pytest.mark.parametrize("limit", ["count", "size", "span"])
async def test_flow_control_limits(cluster, limit):
    """Pulls pause (50 ms at a time) while a queue holds too many messages, too many MiB, or (concurrent
    listeners) too wide an offset span behind one stuck message."""
    ns, topic = cluster.namesrv_addr, f"Flow{limit}T"
    await create_topic(ns, topic, 1)
    stuck = threading.Event()
    rec = Recorder()
    inner = rec.listener("c")

    def listen(msgs, context):
        # span: the first two messages hold both listener threads, so the rest pile up behind
        # them. (The span is measured over messages still in memory, as in RocketMQ: with one
        # thread free, everything behind a single stuck message gets consumed, the span falls
        # back to 0 and pulling rightly resumes.)
        if limit != "span" or msgs[0].queue_offset in (0, 1):
            stuck.wait(30)
        return inner(msgs, context)

    settings = {"count": dict(pull_threshold_for_queue=20),
                "size": dict(pull_threshold_size_for_queue=1),
                "span": dict(consume_concurrently_max_span=40)}[limit]
    consumer = PushConsumer(f"flow-{limit}-group", namesrv_addr=ns, pull_batch_size=8, consume_thread_max=2,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **settings)
    consumer.subscribe(topic).register_listener(listen)
    await consumer.start()
    try:
        await produce(ns, topic, 200, prefix="f", body_size=32 * 1024 if limit == "size" else 100)
        pq = consumer.rebalancer.process_queues[MessageQueue(topic, "broker-a", 0)]
        await wait_until(lambda: consumer.flow_controlled >= 3, 20, f"pulls held back by the {limit} limit")
        if limit == "count":
            assert pq.msg_count <= 20 + 8
        elif limit == "size":
            assert pq.msg_size <= 1024 * 1024 + 8 * (32 * 1024 + 64)
        else:
            assert 40 < pq.max_span() <= 40 + 8, pq.max_span()  # held once over, by at most one pull
        assert pq.msg_count < 200, "not everything was pulled"
        stuck.set()
        await wait_until(lambda: len(rec.keys()) == 200, 30, "all 200 once the listener is free")
    finally:
        stuck.set()
        await consumer.shutdown()


async def test_offsets_are_persisted_periodically_while_consuming(cluster):
    ns = cluster.namesrv_addr
    await create_topic(ns, "PersistT", 2)
    rec = Recorder()
    consumer = PushConsumer("persist-group", namesrv_addr=ns, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                            persist_consumer_offset_interval=0.2)
    consumer.subscribe("PersistT").register_listener(rec.listener("c"))
    await consumer.start()
    try:
        await produce(ns, "PersistT", 30, prefix="p")
        offsets = cluster.broker.offsets
        await wait_until(lambda: offsets.query("persist-group", "PersistT", 0) + offsets.query("persist-group", "PersistT", 1)
                         == 30, 20, "offsets on the broker while the consumer runs")
    finally:
        await consumer.shutdown()


async def test_async_listener_and_batches(cluster):
    ns = cluster.namesrv_addr
    await create_topic(ns, "AsyncT", 2)
    seen: list[list[str]] = []

    async def listen(msgs, context):
        await asyncio.sleep(0)
        seen.append([m.keys[0] for m in msgs])
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("async-group", namesrv_addr=ns, consume_message_batch_max_size=4,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe("AsyncT").register_listener(listen)
    await produce(ns, "AsyncT", 40, prefix="x")
    await consumer.start()
    try:
        await wait_until(lambda: sum(map(len, seen)) == 40, 20, "40 messages")
    finally:
        await consumer.shutdown()
    assert max(map(len, seen)) > 1 and max(map(len, seen)) <= 4


async def test_admin_offset_reset_rewinds_an_online_group(cluster):
    ns = cluster.namesrv_addr
    await create_topic(ns, "ResetT", 2)
    rec = Recorder()
    consumer = PushConsumer("reset-group", namesrv_addr=ns, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe("ResetT").register_listener(rec.listener("c"))
    await consumer.start()
    try:
        await produce(ns, "ResetT", 20, prefix="r")
        await wait_until(lambda: len(rec.events) == 20, 20, "the first pass")
        async with AdminClient(namesrv_addr=ns) as admin:
            offsets = await admin.reset_offset("reset-group", "ResetT", timestamp=0)
        assert set(offsets.values()) == {0}
        await wait_until(lambda: len(rec.events) == 40, 20, "a second pass after the reset")
    finally:
        await consumer.shutdown()
    assert all(len(rec.of(f"r-{i}")) == 2 for i in range(20))


async def test_bad_setup_fails_with_a_clear_error(tmp_path):
    from ferrymq.client.errors import MQClientError
    from testkit.ports import free_port

    with pytest.raises(MQClientError, match="group"):
        PushConsumer("bad group!", namesrv_addr="127.0.0.1:1")
    with pytest.raises(TypeError):
        PushConsumer("g", namesrv_addr="127.0.0.1:1", no_such_setting=1)
    c = PushConsumer("g", namesrv_addr=f"127.0.0.1:{free_port()}")
    with pytest.raises(MQClientError, match="listener"):
        await c.start()
    c.register_listener(lambda msgs, ctx: None)
    with pytest.raises(MQClientError, match="subscription"):
        await c.start()
    c.subscribe("T")
    tasks_before = len(asyncio.all_tasks())
    with pytest.raises(MQClientError, match="name server"):
        await c.start()  # nothing listens there
    await asyncio.sleep(0)
    assert len(asyncio.all_tasks()) <= tasks_before, "a failed start leaves nothing running"
