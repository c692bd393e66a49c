"""kill -9 of a ``ferrymq standalone`` with pending timers (docs/timers.md): after restarts every
acknowledged timer message is delivered (at least once), none before its time. One kill while
every timer is pending, one while the timers are firing."""

from __future__ import annotations

import asyncio
import shutil
import time

import pytest

from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import MQClientError
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer, PullStatus
from ferrymq.common.message import Message
from ferrymq.common.protocol import MessageQueue
from ferrymq.store.checkpoint import read_checkpoint
from testkit.wait import wait_until

pytestmark = pytest.mark.integration

TOPIC = "TimedCrash"
QUEUES = 4
COUNT = 200


async def deliveries(proc) -> dict[str, list[int]]:
    """UNIQ_KEY -> store times of every copy of it in the topic, over every queue."""
    out: dict[str, list[int]] = {}
    async with PullConsumer("timer-check", namesrv_addr=proc.namesrv_addr) as consumer:
        for q in range(QUEUES):
            offset = 0
            while True:
                result = await consumer.pull(MessageQueue(TOPIC, "broker-a", q), offset)
                if result.status is not PullStatus.FOUND:
                    break
                for m in result.messages:
                    out.setdefault(m.client_msg_id, []).append(m.store_timestamp)
                offset = result.next_begin_offset
    return out


async def delivered(proc) -> dict[str, int]:
    """UNIQ_KEY -> store time of its (first) delivery, over every queue of the topic."""
    return {key: times[0] for key, times in (await deliveries(proc)).items()}


async def wait_for_deliveries(proc, wanted: int, timeout: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while True:
        got = await delivered(proc)
        if len(got) >= wanted or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.2)


async def test_kill_9_with_pending_timers_loses_none(standalone_process, tmp_path):
    store_dir = tmp_path / "store"
    proc = await asyncio.to_thread(standalone_process, store_dir)
    async with AdminClient(namesrv_addr=proc.namesrv_addr) as admin:
        await admin.create_topic(TOPIC, read_queues=QUEUES, write_queues=QUEUES, broker_addr=proc.broker_addr)
    due: dict[str, int] = {}  # UNIQ_KEY -> earliest time it may be delivered (ms)
    async with Producer("timer-crash", namesrv_addr=proc.namesrv_addr) as producer:
        for i in range(COUNT):
            delay_s = 5 + i % 6  # due 5..10 s after the send
            sent_at = int(time.time() * 1000)
            sent = await producer.send(Message(TOPIC, f"m{i}".encode(), properties={"TIMER_DELAY_SEC": str(delay_s)}))
            due[sent.msg_id] = sent_at + delay_s * 1000
    assert not await delivered(proc)  # nothing is due yet

    proc.kill()  # every timer pending
    await asyncio.to_thread(proc.start)
    some = await wait_for_deliveries(proc, COUNT // 3, timeout=30)
    assert 0 < len(some) < COUNT, "the second kill should land while the timers fire"

    proc.kill()  # while firing
    await asyncio.to_thread(proc.start)
    got = await wait_for_deliveries(proc, COUNT, timeout=30)
    missing = set(due) - set(got)
    assert not missing, f"{len(missing)} of {COUNT} acknowledged timer messages never delivered"
    early = {k: due[k] - t for k, t in got.items() if t < due[k]}
    assert not early, f"delivered before their time (ms early): {early}"


async def test_a_recalled_timer_stays_recalled_across_kill_9(standalone_process, tmp_path):
    """The recall marker is a CommitLog record: after kill -9 and restart (recovery re-dispatches
    what the timer files had not synced) the recalled timer still does not fire; its neighbour,
    due in the same second, does (docs/timers.md#recall)."""
    proc = await asyncio.to_thread(standalone_process, tmp_path / "store", ["recallMessageEnable=true"])
    async with AdminClient(namesrv_addr=proc.namesrv_addr) as admin:
        await admin.create_topic("TimedRecall", read_queues=1, write_queues=1, broker_addr=proc.broker_addr)
    mq = MessageQueue("TimedRecall", "broker-a", 0)
    due = int(time.time() * 1000) + 8000
    async with Producer("timer-recall", namesrv_addr=proc.namesrv_addr) as producer:
        recalled = await producer.send(Message("TimedRecall", b"recalled", properties={"TIMER_DELIVER_MS": str(due)}),
                                       queue=mq)
        await producer.send(Message("TimedRecall", b"kept", properties={"TIMER_DELIVER_MS": str(due)}), queue=mq)
        assert await producer.recall("TimedRecall", recalled.recall_handle) == recalled.msg_id
    assert time.time() * 1000 < due - 2000, "too slow: the kill must land before the timers are due"

    proc.kill()
    await asyncio.to_thread(proc.start)

    async def bodies() -> list[bytes]:
        async with PullConsumer("timer-recall-check", namesrv_addr=proc.namesrv_addr) as consumer:
            try:
                result = await consumer.pull(mq, 0)
            except MQClientError:  # the restarted broker's route is not at the name server yet
                return []
        return [m.body for m in result.messages] if result.status is PullStatus.FOUND else []

    got = await wait_until(bodies, timeout=30, what="the kept timer's delivery after the restart")
    assert got == [b"kept"] and time.time() * 1000 >= due


async def test_a_timer_directory_lost_in_a_kill_9_is_rebuilt_without_firing_twice(standalone_process, tmp_path):
    """docs/timers.md#a-lost-timer-directory: kill -9, `rm -r timer/`, restart: the pending
    timers still fire (not before their time) and the fired ones are not delivered again."""
    store_dir = tmp_path / "store"
    proc = await asyncio.to_thread(standalone_process, store_dir)
    async with AdminClient(namesrv_addr=proc.namesrv_addr) as admin:
        await admin.create_topic(TOPIC, read_queues=QUEUES, write_queues=QUEUES, broker_addr=proc.broker_addr)
    due: dict[str, int] = {}
    now = int(time.time() * 1000)
    early_due, late_due = now + 3000, now + 12_000
    async with Producer("timer-lost-dir", namesrv_addr=proc.namesrv_addr) as producer:
        for i in range(20):
            at = early_due if i % 2 else late_due
            sent = await producer.send(Message(TOPIC, f"m{i}".encode(), properties={"TIMER_DELIVER_MS": str(at)}))
            due[sent.msg_id] = at
    early = {k for k, at in due.items() if at == early_due}

    async def early_fired():
        return early <= set(await deliveries(proc)) and read_checkpoint(store_dir / "checkpoint")["timerFiredMs"] > early_due
    await wait_until(early_fired, 30, "the early timers delivered and their slot recorded as fired")
    proc.kill()
    shutil.rmtree(store_dir / "timer")
    await asyncio.to_thread(proc.start)

    async def all_delivered():
        got = await deliveries(proc)
        return got if set(due) <= set(got) else None
    got = await wait_until(all_delivered, 40, "every timer delivered after the restart", interval=0.2)
    twice = {k: len(times) for k, times in got.items() if len(times) > 1}
    assert not twice, f"delivered again after the rebuild: {twice}"
    too_early = {k: due[k] - times[0] for k, times in got.items() if times[0] < due[k]}
    assert not too_early, f"delivered before their time (ms early): {too_early}"
    assert "the timer directory was lost" in proc.log()
