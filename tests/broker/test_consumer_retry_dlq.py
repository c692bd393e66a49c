"""Retries, delay levels and the dead-letter queue, end to end through a real broker.

The broker runs a shortened delay table (``messageDelayLevel``) so the schedule is seconds,
not minutes; the shapes (which level, how many attempts, where the message ends) are
RocketMQ's: a failed message comes back at level 3 + reconsumeTimes and, after
maxReconsumeTimes retries, lands in ``%DLQ%<group>``.
"""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import MQClientError
from ferrymq.client.listener import ConsumeConcurrentlyStatus
from ferrymq.client.pull_consumer import PullConsumer, PullStatus
from ferrymq.client.push_consumer import PushConsumer
from ferrymq.common.message import Prop
from ferrymq.common.protocol import dlq_topic
from tests.consumer_support import Recorder, create_topic, produce
from testkit.wait import wait_until
from tests.support import InProcessCluster

pytestmark = pytest.mark.integration

# level:     1    2    3    4    5    6    7
DELAYS = "1s 1s 1s 2s 1s 1s 1h"
LEVEL_SECONDS = [1, 1, 1, 2, 1, 1, 3600]


@pytest.fixture
async def delay_cluster(tmp_path):
    c = InProcessCluster(tmp_path / "store", settings={"messageDelayLevel": DELAYS})
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


async def pull_all(namesrv: str, topic: str, group: str = "inspector") -> list:
    async with PullConsumer(group, namesrv_addr=namesrv) as pc:
        out = []
        try:
            queues = await pc.fetch_queues(topic)
        except MQClientError:  # no route yet: a DLQ topic appears with its first dead letter
            return out
        for mq in queues:
            offset = 0
            while True:
                r = await pc.pull(mq, offset, max_nums=32)
                if r.status is not PullStatus.FOUND:
                    break
                out += r.messages
                offset = r.next_begin_offset
        return out


async def test_failed_message_is_redelivered_after_each_delay_level_then_dead_lettered(delay_cluster):
    ns = delay_cluster.namesrv_addr
    await create_topic(ns, "RetryT", 4)
    rec = Recorder()
    consumer = PushConsumer("retry-group", namesrv_addr=ns, max_reconsume_times=2)
    consumer.subscribe("RetryT", "*")
    consumer.register_listener(rec.listener("c1", fail=lambda m: m.keys[0] == "bad-0",
                                            result_on_fail=ConsumeConcurrentlyStatus.RECONSUME_LATER))
    await consumer.start()
    try:
        [sent] = await produce(ns, "RetryT", 1, prefix="bad")
        good = await produce(ns, "RetryT", 5, prefix="good")
        # 1 first delivery + maxReconsumeTimes (2) retries, then the DLQ
        await wait_until(lambda: len(rec.of("bad-0")) >= 3, 30, "three deliveries of the failing message")
        dead = []

        async def dead_lettered() -> bool:
            dead[:] = await pull_all(ns, dlq_topic("retry-group"))
            return bool(dead)

        await wait_until(dead_lettered, 20, "the failing message in the DLQ", interval=0.1)
    finally:
        await consumer.shutdown()

    assert len(good) == 5 and all(len(rec.of(f"good-{i}")) == 1 for i in range(5)), "the others: once each"
    assert len(dead) == 1, "only the failing message dead-letters"
    attempts = rec.of("bad-0")
    assert [a.reconsume_times for a in attempts] == [0, 1, 2], "no fourth delivery: the third failure dead-letters"
    # Each retry is the original topic to the listener, and comes after its level's delay
    # (level 3 + reconsumeTimes: 3 then 4).
    assert all(a.topic == "RetryT" for a in attempts)
    for previous, retry, level in zip(attempts, attempts[1:], (3, 4)):
        assert retry.at - previous.at >= LEVEL_SECONDS[level - 1] - 0.05, (level, retry.at - previous.at)
    assert attempts[1].msg.properties[Prop.RETRY_TOPIC] == "RetryT"
    assert attempts[1].msg.client_msg_id == sent.msg_id  # same UNIQ_KEY through the retry topic

    [letter] = dead
    assert letter.topic == dlq_topic("retry-group")
    assert letter.reconsume_times == 3
    assert letter.properties[Prop.RETRY_TOPIC] == "RetryT"
    assert letter.properties[Prop.ORIGIN_MESSAGE_ID] == sent.msg_id
    assert letter.body.startswith(b"bad-0:")
    assert {f"good-{i}" for i in range(5)} <= rec.keys()
    assert all(len(rec.of(f"good-{i}")) == 1 for i in range(5))


async def test_listener_chosen_delay_level_and_straight_to_dlq(delay_cluster):
    """context.delay_level_when_next_consume picks the level; a negative one dead-letters at once."""
    ns = delay_cluster.namesrv_addr
    await create_topic(ns, "LevelT", 2)
    rec = Recorder()

    def listen(msgs, context):
        rec.listener("c")(msgs, context)
        key = msgs[0].keys[0]
        if key == "later-0" and msgs[0].reconsume_times == 0:
            context.delay_level_when_next_consume = 4  # 2 s in this table
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        if key == "dead-0":
            context.delay_level_when_next_consume = -1
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return None

    consumer = PushConsumer("level-group", namesrv_addr=ns)
    consumer.subscribe("LevelT")
    consumer.register_listener(listen)
    await consumer.start()
    try:
        await produce(ns, "LevelT", 1, prefix="later")
        await produce(ns, "LevelT", 1, prefix="dead")
        await wait_until(lambda: len(rec.of("later-0")) == 2, 20, "the redelivery at level 4")
        await wait_until(lambda: pull_all(ns, dlq_topic("level-group")), 20, "the dead letter", interval=0.1)
    finally:
        await consumer.shutdown()
    first, second = rec.of("later-0")
    assert second.at - first.at >= LEVEL_SECONDS[4 - 1] - 0.05
    assert len(rec.of("dead-0")) == 1, "a negative level is not retried"
    [letter] = await pull_all(ns, dlq_topic("level-group"))
    assert letter.keys == ["dead-0"] and letter.reconsume_times == 1


async def test_client_resend_to_retry_topic_when_send_back_is_unavailable(delay_cluster):
    """The Java client's fallback: a copy sent straight to %RETRY%<group> with DELAY 3 + reconsumeTimes."""
    ns = delay_cluster.namesrv_addr
    await create_topic(ns, "ResendT", 1)
    rec = Recorder()
    consumer = PushConsumer("resend-group", namesrv_addr=ns)
    consumer.subscribe("ResendT")
    consumer.register_listener(rec.listener("c"))
    await consumer.start()
    try:
        [sent] = await produce(ns, "ResendT", 1, prefix="r")
        await wait_until(lambda: rec.of("r-0"), 10, "the first delivery")
        first = rec.of("r-0")[0].msg
        assert await consumer.send_back.send_to_retry_topic(first, reconsume_times=1, delay_level=3)
        await wait_until(lambda: len(rec.of("r-0")) == 2, 20, "the redelivery through the retry topic")
    finally:
        await consumer.shutdown()
    again = rec.of("r-0")[1]
    assert again.reconsume_times == 1 and again.topic == "ResendT"
    assert again.msg.client_msg_id == sent.msg_id
    assert again.msg.properties[Prop.ORIGIN_MESSAGE_ID] == sent.msg_id
    assert again.at - rec.of("r-0")[0].at >= LEVEL_SECONDS[3 - 1] - 0.05


async def test_producer_delay_level_and_delayed_messages_survive_a_clean_restart(delay_cluster):
    """DELAY on send: stored in SCHEDULE_TOPIC_XXXX, delivered when due; what was delivered
    before a restart is not delivered again, what was pending is delivered after it."""
    ns = delay_cluster.namesrv_addr
    await create_topic(ns, "DelayT", 2)
    await produce(ns, "DelayT", 1, prefix="hour", delay_level=7)  # 1 h: never due during the test
    await produce(ns, "DelayT", 5, prefix="soon", delay_level=1)  # 1 s
    await wait_until(lambda: _count(pull_all(ns, "DelayT"), 5), 15, "the level-1 messages", interval=0.1)
    await produce(ns, "DelayT", 5, prefix="later", delay_level=4)  # 2 s
    await delay_cluster.restart_broker()  # clean stop: progress persisted in delayOffset.json
    ns = delay_cluster.namesrv_addr
    await wait_until(lambda: _count(pull_all(ns, "DelayT"), 10), 20, "the level-4 messages after the restart",
                     interval=0.1)
    got = await pull_all(ns, "DelayT")
    store = delay_cluster.broker.store
    assert store.max_offset("SCHEDULE_TOPIC_XXXX", 6) == 1, "the 1 h message still waits"
    assert delay_cluster.broker.schedule.offsets.get(7, 0) == 0
    keys = sorted(k for m in got for k in m.keys)
    assert keys == sorted([f"soon-{i}" for i in range(5)] + [f"later-{i}" for i in range(5)]), keys
    for m in got:
        delay = 1000 if m.keys[0].startswith("soon") else 2000
        assert m.store_timestamp - m.born_timestamp >= delay - 50, (m.keys, m.store_timestamp - m.born_timestamp)
        assert Prop.DELAY not in m.properties and m.properties[Prop.REAL_TOPIC] == "DelayT"


async def _count(coro, n: int) -> bool:
    return len(await coro) >= n


async def test_delayed_messages_survive_kill_9(tmp_path, standalone_process):
    """SIGKILL with delayed messages pending: after a restart on the same data every one arrives."""
    settings = ["messageDelayLevel=1s 1s 3s"]
    first = standalone_process(tmp_path / "store", settings)
    ns, ports = first.namesrv_addr, dict(namesrv_port=first.namesrv_port, broker_port=first.broker_port)
    await create_topic(ns, "KillDelayT", 2)
    await produce(ns, "KillDelayT", 20, prefix="d", delay_level=3)
    first.kill()
    second = standalone_process(tmp_path / "store", settings, **ports)
    await wait_until(lambda: _count(pull_all(second.namesrv_addr, "KillDelayT"), 20), 30,
                     "all 20 delayed messages after kill -9", interval=0.2)
    got = await pull_all(second.namesrv_addr, "KillDelayT")
    # At least once: a crash right after a delivery may repeat it, never lose it.
    assert {k for m in got for k in m.keys} == {f"d-{i}" for i in range(20)}


async def test_a_listener_call_past_consume_timeout_is_sent_back_and_its_queue_moves_on(delay_cluster):
    ns = delay_cluster.namesrv_addr
    await create_topic(ns, "StuckT", 1)
    release = asyncio.Event()
    deliveries: list[tuple[str, int]] = []

    async def listener(msgs, context):
        for m in msgs:
            deliveries.append((m.keys[0], m.reconsume_times))
            if m.keys[0] == "stuck-0" and m.reconsume_times == 0:
                await release.wait()  # hangs far past the consume timeout

    consumer = PushConsumer("stuck-group", namesrv_addr=ns, consume_timeout=1 / 60)  # one second
    consumer.subscribe("StuckT", "*").register_listener(listener)
    await consumer.start()
    try:
        await produce(ns, "StuckT", 1, prefix="stuck")
        await produce(ns, "StuckT", 3, prefix="after")
        # sent back after ~1 s (delay level 3: 1 s here) and delivered again while the first call still hangs
        await wait_until(lambda: ("stuck-0", 1) in deliveries, 15, "the stuck message redelivered")
        assert {k for k, _ in deliveries} >= {"after-0", "after-1", "after-2"}
        async with AdminClient(namesrv_addr=ns) as admin:
            await wait_until(lambda: _lag(admin), 10, "the queue's offset past the stuck message")
    finally:
        release.set()
        await consumer.shutdown()
    assert deliveries.count(("stuck-0", 0)) == 1  # the late result of the first call changed nothing


async def _lag(admin) -> bool:
    stats = await admin.consume_stats("stuck-group", topic="StuckT")
    return sum(o.broker_offset - o.consumer_offset for o in stats.offset_table.values()) == 0
