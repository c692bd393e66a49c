"""Broker protection: a group reading far behind the head is disabled (consumeEnable=false,
persisted, counted), its pulls are refused with NO_PERMISSION and RocketMQ's remark, consume
stats show it, and re-enabling it through the admin client resumes consumption where it stopped."""

from __future__ import annotations

import json
import time

import pytest

from ferrymq.client.admin import AdminClient
from ferrymq.client.push_config import ConsumeFromWhere
from ferrymq.client.push_consumer import PushConsumer
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from tests.consumer_support import Recorder, create_topic, produce
from testkit.wait import wait_until
from tests.support import InProcessCluster

pytestmark = pytest.mark.integration

THRESHOLD = 64 * 1024


@pytest.fixture
async def protected(tmp_path):
    c = InProcessCluster(tmp_path / "store", settings={
        "disableConsumeIfConsumerReadSlowly": "true", "consumerFallbehindThreshold": THRESHOLD,
        "protectBrokerIntervalMillis": 200})
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


def slow_consumer(ns: str, rec: Recorder) -> PushConsumer:
    inner = rec.listener("slow")

    def listen(msgs, context):
        time.sleep(0.01)  # a consumer that reads its backlog slowly
        return inner(msgs, context)

    c = PushConsumer("slow-group", namesrv_addr=ns, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                     consume_thread_max=1, pull_threshold_for_queue=16, pull_batch_size=8)
    c.subscribe("ProtectT").register_listener(listen)
    return c


async def raw_pull(addr: str, group: str, topic: str) -> RemotingCommand:
    client = RemotingClient()
    try:
        return await client.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, {
            "consumerGroup": group, "topic": topic, "queueId": 0, "queueOffset": 0, "maxMsgNums": 1, "sysFlag": 4,
            "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0}))
    finally:
        await client.close()


async def test_slow_group_is_disabled_then_resumes_where_it_stopped_when_re_enabled(protected, tmp_path):
    ns, broker = protected.namesrv_addr, protected.broker
    await create_topic(ns, "ProtectT", 2)
    rec = Recorder()
    consumer = slow_consumer(ns, rec)
    await consumer.start()
    await produce(ns, "ProtectT", 20, prefix="early", body_size=1024)
    await wait_until(lambda: len(rec.keys()) == 20, 20, "the group keeping up at first")
    await consumer.shutdown()  # the group stops consuming ...

    await produce(ns, "ProtectT", 400, prefix="backlog", body_size=1024)  # ... while a producer writes
    consumer = slow_consumer(ns, rec)
    await consumer.start()  # it comes back and reads ~400 KiB behind the head, slowly
    admin = AdminClient(namesrv_addr=ns)
    try:
        await wait_until(lambda: not broker.groups.get("slow-group").consume_enable, 20, "the group disabled")
        assert broker.protection.groups_disabled == 1

        refused = await raw_pull(protected.broker_addr, "slow-group", "ProtectT")
        assert refused.code == ResponseCode.NO_PERMISSION
        assert refused.remark == "subscription group no permission, slow-group"

        stats = await admin.consume_stats("slow-group", topic="ProtectT")
        assert stats.consume_enable is False
        assert stats.total_lag() > 0 and len(stats.offset_table) == 2
        saved_file = tmp_path / "store" / "config" / "subscriptionGroup.json"

        def saved_disabled() -> bool:  # written by the protection pass right after it disabled the group
            saved = json.loads(saved_file.read_text()) if saved_file.exists() else {}
            return (saved.get("subscriptionGroupTable") or {}).get("slow-group", {}).get("consumeEnable") is False
        await wait_until(saved_disabled, 20, "the disabled group persisted")

        stopped_at = len(rec.events)
        assert stopped_at < 420, "disabled before it caught up"
        # The operator turns protection off for this broker and lets the group consume again.
        await admin.update_broker_config(protected.broker_addr, {"disableConsumeIfConsumerReadSlowly": "false"})
        await admin.enable_group("slow-group")
        assert (await admin.consume_stats("slow-group")).consume_enable is True
        await wait_until(lambda: len(rec.keys()) == 420, 60, "the backlog consumed after re-enabling")
    finally:
        await consumer.shutdown()
        await admin.close()
    expected = {f"early-{i}" for i in range(20)} | {f"backlog-{i}" for i in range(400)}
    assert rec.keys() == expected
    duplicates = len(rec.events) - len(expected)
    assert duplicates == 0, f"{duplicates} message(s) consumed twice: it resumed where it stopped, not earlier"


async def test_protection_off_by_default_and_fast_groups_untouched(cluster):
    """Default broker: disableConsumeIfConsumerReadSlowly=false, threshold 16 GiB, every 3 min."""
    config = cluster.broker.config
    assert config.disable_consume_if_consumer_read_slowly is False
    assert config.consumer_fallbehind_threshold == 16 * 1024**3
    assert config.protect_broker_interval_millis == 180_000
    cluster.broker.protection.record("g", "T", 0, 10**12)
    assert await cluster.broker.protection.check() == []


async def test_a_caught_up_group_is_not_disabled(cluster):
    ns, broker = cluster.namesrv_addr, cluster.broker
    await create_topic(ns, "FastT", 1)
    rec = Recorder()
    c = PushConsumer("fast-group", namesrv_addr=ns, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    c.subscribe("FastT").register_listener(rec.listener("fast"))
    await c.start()
    try:
        await produce(ns, "FastT", 200, prefix="f", body_size=1024)
        await wait_until(lambda: len(rec.keys()) == 200, 20, "all consumed")
        # Its pulls now wait at the head: recorded as 0 bytes behind, before the long poll.
        await wait_until(lambda: broker.protection.group_fall_behind("fast-group") == 0, 5, "a pull at the head")
        broker.config.disable_consume_if_consumer_read_slowly = True
        broker.config.consumer_fallbehind_threshold = THRESHOLD
        assert await broker.protection.check() == []
        assert broker.groups.get("fast-group").consume_enable
    finally:
        await c.shutdown()
