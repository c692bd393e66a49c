"""Orderly push consumers: one batch at a time per queue, in offset order, under the queue's
broker lock; across a rebalance the queue moves only once its last batch is committed."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

import pytest

from ferrymq.client.listener import ConsumeOrderlyStatus
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer, PullStatus
from ferrymq.client.push_config import ConsumeFromWhere
from ferrymq.client.push_consumer import PushConsumer
from ferrymq.common.message import Message
from ferrymq.common.protocol import MessageQueue, dlq_topic
from tests.consumer_support import create_topic
from testkit.wait import wait_until

pytestmark = pytest.mark.integration


@dataclass
class Call:
    consumer: str
    queue_id: int
    offsets: list[int]
    keys: list[str]
    start: float
    end: float = 0.0


class OrderlyLog:
    """Records every listener call with its start and end (listeners run in threads)."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    def listener(self, name: str, pause: float = 0.0, suspend_key: str | None = None):
        def listen(msgs, context):
            call = Call(name, context.message_queue.queue_id, [m.queue_offset for m in msgs], [m.keys[0] for m in msgs],
                        time.monotonic())
            if pause:
                time.sleep(pause)
            call.end = time.monotonic()
            with self._lock:
                self.calls.append(call)
            if suspend_key and suspend_key in call.keys:
                return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            return ConsumeOrderlyStatus.SUCCESS

        return listen

    def per_queue(self) -> dict[int, list[Call]]:
        with self._lock:
            calls = sorted(self.calls, key=lambda c: c.start)
        out: dict[int, list[Call]] = {}
        for c in calls:
            out.setdefault(c.queue_id, []).append(c)
        return out

    def count(self) -> int:
        with self._lock:
            return sum(len(c.offsets) for c in self.calls)


async def send_round_robin(ns: str, topic: str, queues: int, per_queue: int, start: int = 0) -> None:
    async with Producer(f"{topic}-p", namesrv_addr=ns) as producer:
        for i in range(start, start + per_queue):
            for q in range(queues):
                m = Message(topic, f"{q}:{i}".encode())
                m.keys = [f"q{q}-{i}"]
                await producer.send(m, queue=MessageQueue(topic, "broker-a", q))


async def test_orderly_keeps_per_queue_order_across_rebalances(cluster):
    ns, topic = cluster.namesrv_addr, "OrderT"
    await create_topic(ns, topic, 4, order=True)
    log = OrderlyLog()
    common = dict(namesrv_addr=ns, consume_from_where=ConsumeFromWhere.FIRST_OFFSET, consume_message_batch_max_size=3)
    a = PushConsumer("order-group", **common)
    a.subscribe(topic).register_listener(log.listener("A", pause=0.003), orderly=True)
    await a.start()
    b = PushConsumer("order-group", **common)
    b.subscribe(topic).register_listener(log.listener("B", pause=0.003), orderly=True)
    try:
        await send_round_robin(ns, topic, 4, 40)
        await wait_until(lambda: log.count() >= 40, 20, "A consuming")
        await b.start()  # rebalance 1: A hands two queues to B while it is consuming them
        await send_round_robin(ns, topic, 4, 40, start=40)
        await wait_until(lambda: {c.consumer for c in log.calls} == {"A", "B"}, 30, "B consuming its share")
        await a.shutdown()  # rebalance 2: B takes every queue
        await send_round_robin(ns, topic, 4, 40, start=80)
        await wait_until(lambda: log.count() >= 4 * 120, 60, "all 480 messages")
    finally:
        await a.shutdown()
        await b.shutdown()

    for queue_id, calls in log.per_queue().items():
        offsets = [o for c in calls for o in c.offsets]
        assert offsets == list(range(120)), f"queue {queue_id} out of order or repeated: {offsets}"
        for earlier, later in zip(calls, calls[1:]):
            assert later.start >= earlier.end, f"queue {queue_id}: two listener calls at once ({earlier}, {later})"
        owners = [c.consumer for c in calls]
        assert owners[0] == "A" and owners[-1] == "B"
        # Ownership changed hands at most twice and never back and forth.
        changes = [i for i in range(1, len(owners)) if owners[i] != owners[i - 1]]
        assert len(changes) <= 1, (queue_id, changes)


async def test_orderly_failure_suspends_the_queue_then_dead_letters_in_order(cluster):
    ns, topic = cluster.namesrv_addr, "OrderFailT"
    await create_topic(ns, topic, 1, order=True)
    log = OrderlyLog()
    consumer = PushConsumer("order-fail-group", namesrv_addr=ns, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                            max_reconsume_times=2, suspend_current_queue_time_millis=200)
    consumer.subscribe(topic).register_listener(log.listener("C", suspend_key="q0-1"), orderly=True)
    await consumer.start()
    try:
        await send_round_robin(ns, topic, 1, 4)
        await wait_until(lambda: any("q0-3" in c.keys for c in log.calls), 20, "the queue moving past the failure")
    finally:
        await consumer.shutdown()
    keys = [k for c in log.per_queue()[0] for k in c.keys]
    assert keys == ["q0-0", "q0-1", "q0-1", "q0-1", "q0-2", "q0-3"], keys
    attempts = [c for c in log.per_queue()[0] if "q0-1" in c.keys]
    assert all(b.start - a.end >= 0.2 - 0.01 for a, b in zip(attempts, attempts[1:])), "paused between attempts"

    async with PullConsumer("inspect", namesrv_addr=ns) as pc:
        async def dead() -> list:
            queues = await pc.fetch_queues(dlq_topic("order-fail-group"))
            r = await pc.pull(queues[0], 0)
            return r.messages if r.status is PullStatus.FOUND else []

        await wait_until(lambda: _nonempty(dead()), 20, "the dead letter", interval=0.1)
        [letter] = await dead()
    assert letter.keys == ["q0-1"] and letter.reconsume_times == 2


async def _nonempty(coro) -> bool:
    try:
        return bool(await coro)
    except Exception:  # the DLQ topic may not be routed yet
        return False


async def test_async_orderly_listener(cluster):
    ns, topic = cluster.namesrv_addr, "OrderAsyncT"
    await create_topic(ns, topic, 2, order=True)
    seen: dict[int, list[int]] = {}

    async def listen(msgs, context):
        await asyncio.sleep(0)
        seen.setdefault(context.message_queue.queue_id, []).extend(m.queue_offset for m in msgs)

    consumer = PushConsumer("order-async-group", namesrv_addr=ns, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(topic).register_listener(listen, orderly=True)
    await consumer.start()
    try:
        await send_round_robin(ns, topic, 2, 30)
        await wait_until(lambda: sum(map(len, seen.values())) == 60, 20, "60 messages")
    finally:
        await consumer.shutdown()
    assert seen == {0: list(range(30)), 1: list(range(30))}
