"""RocketMQ 5 timer messages through a real broker (docs/timers.md): TIMER_DELAY_SEC,
TIMER_DELAY_MS and TIMER_DELIVER_MS hold a message until its time, never before; refusals as
Apache 5.3 answers them."""

from __future__ import annotations

import asyncio
import json
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import MQBrokerError
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer, PullStatus
from ferrymq.common.message import Message
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from tests.support import InProcessCluster

from testkit.wait import wait_until

pytestmark = pytest.mark.integration


async def send(cluster, topic: str, **timer_props) -> tuple[object, float]:
    async with Producer("p", namesrv_addr=cluster.namesrv_addr) as producer:
        m = Message(topic, b"later", properties={"color": "blue", **{k: str(v) for k, v in timer_props.items()}})
        m.tags, m.keys = "TagT", ["order-7"]
        sent_at = time.time()
        return await producer.send(m), sent_at


async def test_a_message_with_timer_delay_sec_is_not_consumable_before_its_time_and_is_soon_after(cluster):
    sent, sent_at = await send(cluster, "Timed", TIMER_DELAY_SEC=3)
    async with PullConsumer("g", namesrv_addr=cluster.namesrv_addr) as consumer:
        early = await consumer.pull(sent.message_queue, 0, suspend=2.5)  # held: an arrival would wake it
        assert early.status is not PullStatus.FOUND, f"delivered {time.time() - sent_at:.2f} s after the send"
        result = await consumer.pull(sent.message_queue, 0, suspend=10)
        got_at = time.time()
    assert result.status is PullStatus.FOUND
    assert 3.0 <= got_at - sent_at < 4.6  # its second fires once over: up to 1 s late, never early
    got = result.messages[0]
    assert got.body == b"later" and got.tags == "TagT" and got.keys == ["order-7"]
    assert got.properties["color"] == "blue" and got.client_msg_id == sent.msg_id
    # as Apache 5 delivers it: what was asked, the due time, when the timer took it in and let it out
    assert got.properties["TIMER_DELAY_SEC"] == "3" and int(got.properties["TIMER_OUT_MS"]) >= sent_at * 1000 + 2990
    assert sent_at * 1000 - 5 <= int(got.properties["TIMER_ENQUEUE_MS"]) <= int(got.properties["TIMER_DEQUEUE_MS"]) \
        <= got_at * 1000 + 5
    assert "TIMER_ROLL_TIMES" not in got.properties
    assert (got.properties["REAL_TOPIC"], got.properties["REAL_QID"]) == ("Timed", str(sent.message_queue.queue_id))


async def test_timer_deliver_ms_and_timer_delay_ms(cluster):
    now_ms = int(time.time() * 1000)
    at, _ = await send(cluster, "TimedAt", TIMER_DELIVER_MS=now_ms + 2000)
    after, _ = await send(cluster, "TimedAfter", TIMER_DELAY_MS=1500)
    async with PullConsumer("g", namesrv_addr=cluster.namesrv_addr) as consumer:
        for sent, due_ms in ((at, now_ms + 2000), (after, now_ms + 1500)):
            result = await consumer.pull(sent.message_queue, 0, suspend=10)
            assert result.status is PullStatus.FOUND
            assert time.time() * 1000 >= due_ms


async def test_a_delivery_time_in_the_past_is_delivered_at_once(cluster):
    sent, _ = await send(cluster, "TimedPast", TIMER_DELIVER_MS=int(time.time() * 1000) - 60_000)
    async with PullConsumer("g", namesrv_addr=cluster.namesrv_addr) as consumer:
        result = await consumer.pull(sent.message_queue, 0)
    assert result.status is PullStatus.FOUND
    assert result.messages[0].properties["TIMER_DELIVER_MS"]  # stored as sent: no timer applied


async def test_a_delivery_time_beyond_timer_max_delay_sec_is_refused_as_apache_does(cluster):
    with pytest.raises(MQBrokerError) as refused:
        await send(cluster, "TimedFar", TIMER_DELAY_SEC=3 * 86_400 + 10)
    assert refused.value.code == ResponseCode.MESSAGE_ILLEGAL
    assert "timer message illegal, the delay time should not be bigger than the max delay 259200000ms" in str(
        refused.value)


async def test_an_unreadable_timer_property_is_refused(cluster):
    with pytest.raises(MQBrokerError) as refused:
        await send(cluster, "TimedBad", TIMER_DELAY_SEC="soon")
    assert refused.value.code == ResponseCode.MESSAGE_ILLEGAL


REPO = Path(__file__).resolve().parents[2]


def timers_cli(cluster, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ferrymq.cli.main", "admin", "broker", "timers",
                           "-b", cluster.broker_addr, "-n", cluster.namesrv_addr, *extra],
                          capture_output=True, text=True, cwd=REPO, timeout=60)


async def timers_json(cluster) -> dict[str, tuple[int, int]]:
    out = await asyncio.to_thread(timers_cli, cluster, "--json")
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    assert body["broker"] == cluster.broker_addr
    return {t["topic"]: (t["pending"], t["earliestDueMs"]) for t in body["topics"]}


def metric(cluster, name: str, **labels) -> float:
    text = generate_latest(cluster.broker.metrics_registry).decode()
    for line in text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_admin_and_metrics_show_pending_timers_per_topic_until_they_fire(cluster):
    now_ms = int(time.time() * 1000)
    later = now_ms + 600_000
    second = lambda ms: ms - ms % 1000  # noqa: E731 (shown to the timer precision)
    async with Producer("p", namesrv_addr=cluster.namesrv_addr) as producer:
        for due in (later, later + 60_000):
            await producer.send(Message("TimersA", b"a", properties={"TIMER_DELIVER_MS": str(due)}))
        for _ in range(3):
            await producer.send(Message("TimersB", b"b", properties={"TIMER_DELIVER_MS": str(later + 5000)}))

        expected = {"TimersA": (2, second(later)), "TimersB": (3, second(later + 5000))}
        assert await timers_json(cluster) == expected
        table = await asyncio.to_thread(timers_cli, cluster)
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        assert lines[0].split()[:2] == ["topic", "pending"]
        assert [line.split()[:2] for line in lines[2:]] == [["TimersA", "2"], ["TimersB", "3"]]
        assert metric(cluster, "ferrymq_broker_timers_pending", topic="TimersB") == 3

        soon = int(time.time() * 1000) + 2000
        sent = await producer.send(Message("TimersA", b"a", properties={"TIMER_DELIVER_MS": str(soon)}))
    async with AdminClient(namesrv_addr=cluster.namesrv_addr) as admin:  # in this process: well before it is due
        waiting = (await admin.timer_metrics(cluster.broker_addr)).timing_count["TimersA"]
    assert (waiting.count, waiting.earliest_due_ms) == (3, second(soon))
    assert metric(cluster, "ferrymq_broker_timers_scheduled_total") == 6

    async with PullConsumer("g", namesrv_addr=cluster.namesrv_addr) as consumer:
        result = await consumer.pull(sent.message_queue, 0, suspend=10)
    assert result.status is PullStatus.FOUND  # the soon one fired
    await wait_until(lambda: metric(cluster, "ferrymq_broker_timers_fired_total") == 1, what="the fire counted")
    assert await timers_json(cluster) == expected
    assert metric(cluster, "ferrymq_broker_timers_pending", topic="TimersA") == 2
    assert metric(cluster, "ferrymq_broker_timer_late_seconds_count") == 1
    assert metric(cluster, "ferrymq_broker_timer_late_seconds_bucket", le="5.0") == 1  # generous: due, not later


async def test_timers_admin_view_when_nothing_waits(cluster):
    out = await asyncio.to_thread(timers_cli, cluster)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"no timers pending on {cluster.broker_addr}"


async def test_the_timer_checkpoint_is_served_in_apache_5s_binary_form(cluster):
    """GET_TIMER_CHECK_POINT (60), what a slave (FerryMQ's or Apache 5.3's) copies: 56 bytes,
    big-endian longs lastReadTimeMs, lastTimerLogFlushPos, lastTimerQueueOffset,
    masterTimerQueueOffset, then the data version (stateVersion, timestamp, counter)."""
    for i in range(3):
        await send(cluster, "TimedCheckpoint", TIMER_DELAY_SEC=60 + i)
    answer = await ask_timer_checkpoint(cluster.broker_addr)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert len(answer.body) == 56
    read_ms, _, queue_offset, master_queue_offset, _, _, _ = struct.unpack(">7q", answer.body)
    now_ms = time.time() * 1000
    # fired up to about now (the current second's slot is taken as it begins): nothing was due
    assert now_ms - 30_000 < read_ms <= now_ms + 1000
    assert queue_offset == master_queue_offset == 3  # the three timers are indexed


async def ask_timer_checkpoint(broker_addr: str) -> RemotingCommand:
    client = RemotingClient()
    try:
        return await client.invoke(broker_addr, RemotingCommand.request(RequestCode.GET_TIMER_CHECK_POINT), 5)
    finally:
        await client.close()


async def test_a_broker_without_timers_refuses_the_timer_checkpoint(tmp_path):
    c = InProcessCluster(tmp_path / "store", settings={"timerWheelEnable": "false"})
    await c.start()
    try:
        answer = await ask_timer_checkpoint(c.broker_addr)
    finally:
        await c.stop()
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert "timerWheelEnable is false" in answer.remark


RETAINED = {"timerPrecisionMs": 100, "timerMaxDelaySec": 60, "timerRollWindowSlot": 4,  # a 0.4 s roll window
            "mappedFileSizeCommitLog": 64 * 1024, "fileReservedTime": 0,  # every full CommitLog file expired
            "deleteWhen": ";".join(f"{h:02d}" for h in range(24)), "diskMaxUsedSpaceRatio": 95,
            "diskSpaceCleanForciblyRatio": 100, "diskSpaceWarningLevelRatio": 100}


async def test_a_timer_due_after_the_commit_log_retention_is_delivered_with_its_body_after_retention_ran(tmp_path):
    """docs/timers.md#retention: the record of a timer due further ahead than the roll window is
    stored again when the window ends, so the CommitLog file holding the original can go."""
    from ferrymq.common.protocol import TIMER_TOPIC

    c = InProcessCluster(tmp_path / "store", settings=RETAINED)
    await c.start()
    try:
        store = c.broker.store
        due_ms = int(time.time() * 1000) + 4000
        async with Producer("p", namesrv_addr=c.namesrv_addr) as producer:
            sent = await producer.send(Message("TimedRetained", b"kept across retention",
                                               properties={"TIMER_DELIVER_MS": str(due_ms)}))
            original = await store.commit_log_offset(TIMER_TOPIC, 0, 0)
            for i in range(250):  # about four CommitLog files
                await producer.send(Message("Filler", b"f" * 1000))

        async def original_gone() -> bool:
            await store.clean()
            return store.min_phy_offset > original

        await wait_until(original_gone, what="the CommitLog file of the timer's first record deleted")
        assert [(t.topic, t.count) for t in store.pending_timers.by_topic()] == [("TimedRetained", 1)]  # not fired yet
        async with PullConsumer("g", namesrv_addr=c.namesrv_addr) as consumer:
            result = await consumer.pull(sent.message_queue, 0, suspend=10)
            assert time.time() * 1000 >= due_ms
            assert result.status is PullStatus.FOUND
            assert [m.body for m in result.messages] == [b"kept across retention"]
            await wait_until(lambda: not store.pending_timers.by_topic(), what="no timer pending")
            again = await consumer.pull(sent.message_queue, 1, suspend=0.5)
            assert again.status is not PullStatus.FOUND  # delivered once
    finally:
        await c.stop()


async def test_a_lost_timer_directory_after_rolls_delivers_the_timer_once(tmp_path):
    """The rebuild indexes a rolled timer's last copy only: the records it was stored from were
    fired (rolled) before the loss (docs/timers.md#a-lost-timer-directory)."""
    import shutil

    from ferrymq.common.protocol import TIMER_TOPIC

    c = InProcessCluster(tmp_path / "store", settings=dict(RETAINED, timerRollWindowSlot=20))  # 2 s
    await c.start()
    try:
        # stored at t, rolled at t+2 s to t+4 s (0.9 s would be left: more than a third of the window)
        due_ms = int(time.time() * 1000) + 5000
        async with Producer("p", namesrv_addr=c.namesrv_addr) as producer:
            sent = await producer.send(Message("TimedRebuilt", b"once", properties={"TIMER_DELIVER_MS": str(due_ms)}))
        store = c.broker.store
        stored_ms = await store.store_time(TIMER_TOPIC, 0, 0)
        roll_slot = (stored_ms + 2000) // 100 * 100  # where the window filed it

        async def rolled() -> bool:  # stored again, and its slot recorded as fired
            return (await store.timer_checkpoint())[0] > roll_slot

        await wait_until(rolled, what="the timer stored again at the window's end")
        assert store.max_offset(TIMER_TOPIC, 0) == 2  # the first record and its copy
        await c.broker.stop()
        shutil.rmtree(tmp_path / "store" / "timer")
        await c.start_broker()
        assert [(t.topic, t.count) for t in c.broker.store.pending_timers.by_topic()] == [("TimedRebuilt", 1)]
        async with PullConsumer("g", namesrv_addr=c.namesrv_addr) as consumer:
            result = await consumer.pull(sent.message_queue, 0, suspend=10)
            assert time.time() * 1000 >= due_ms
            assert [m.body for m in result.messages] == [b"once"]
            assert int(result.messages[0].properties["TIMER_ROLL_TIMES"]) >= 1  # its rolls, as Apache counts them
            await wait_until(lambda: not c.broker.store.pending_timers.by_topic(), what="no timer pending")
            again = await consumer.pull(sent.message_queue, 1, suspend=0.5)
            assert again.status is not PullStatus.FOUND  # delivered once
    finally:
        await c.stop()
