"""Orderly consumption: each queue's messages reach the listener one batch at a time, in order.

Per queue at most one consume task runs (ProcessQueue.consuming), and in clustering mode
only while this client holds the queue's broker lock (renewed every 20 s). A batch is
taken, given to the listener and committed while holding the queue's consume lock, so a
rebalance that takes the queue away waits for the batch and persists an offset that covers
it. A failed batch is put back and retried after ``suspend_current_queue_time_millis``; once
a message reached maxReconsumeTimes it is sent to the retry topic (the broker dead-letters
it) and the queue moves on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Protocol

from ferrymq.client.consume_concurrently import call_listener, prepare_for_listener
from ferrymq.client.listener import ConsumeOrderlyContext, ConsumeOrderlyStatus, Listener
from ferrymq.client.process_queue import ProcessQueue
from ferrymq.client.offset_store import OffsetStore
from ferrymq.client.push_config import MessageModel, PushConsumerConfig
from ferrymq.client.send_back import SendBack
from ferrymq.common.message import MessageExt, Prop
from ferrymq.common.protocol import MessageQueue
from ferrymq.common.tasks import InFlight, TaskSet

log = logging.getLogger(__name__)

MAX_TIME_CONSUME_CONTINUOUSLY = 60.0  # then yield the worker to other queues


class QueueLocks(Protocol):
    """Broker-side locks of the queues an orderly member consumes (LOCK_BATCH_MQ)."""

    async def lock(self, mq: MessageQueue) -> bool: ...

    async def lock_all(self) -> None: ...


class OrderlyConsumeService:
    orderly = True

    def __init__(self, group: str, config: PushConsumerConfig, listener: Listener, *, send_back: SendBack,
                 offset_store: OffsetStore, on_consumed: Callable[[int], None], locks: QueueLocks) -> None:
        """``locks``: the broker-side queue locks (the rebalancer holds them)."""
        self.group = group
        self.send_back = send_back
        self.offset_store = offset_store
        self.on_consumed = on_consumed
        self.locks = locks
        self.listener = listener
        self.config = config
        self._slots = asyncio.Semaphore(self.config.consume_thread_max)
        self._executor = ThreadPoolExecutor(self.config.consume_thread_max, thread_name_prefix=f"consume-{group}")
        self._queue_locks: dict[MessageQueue, asyncio.Lock] = {}
        self._tasks = TaskSet(f"consumer {group}", log)
        self._in_flight = InFlight()
        self._stopped = False

    @property
    def _clustering(self) -> bool:
        return self.config.message_model is MessageModel.CLUSTERING

    def start(self) -> None:
        if self._clustering:
            self._spawn(self._renew_locks())

    async def shutdown(self) -> None:
        self._stopped = True
        await self._in_flight.wait_idle(self.config.await_termination)
        await self._tasks.close()
        self._executor.shutdown(wait=False)

    @property
    def backlog(self) -> int:
        return 0

    def _spawn(self, coro) -> None:
        if self._stopped:
            coro.close()
            return
        self._tasks.spawn(coro)

    async def _renew_locks(self) -> None:
        await asyncio.sleep(min(1.0, self.config.lock_interval))  # the first renewal soon, as Java (1 s)
        while True:
            await self.locks.lock_all()
            await asyncio.sleep(self.config.lock_interval)

    def submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, dispatch: bool = True) -> None:
        if dispatch:
            self._spawn(self._consume_queue(pq, mq))

    def _submit_later(self, pq: ProcessQueue, mq: MessageQueue, delay: float) -> None:
        self._spawn(self._consume_queue(pq, mq, delay))

    def _try_lock_later(self, pq: ProcessQueue, mq: MessageQueue, delay: float) -> None:
        async def relock() -> None:
            await asyncio.sleep(delay)
            ok = await self.locks.lock(mq)
            self._submit_later(pq, mq, 0.01 if ok else 3.0)

        self._spawn(relock())

    async def _consume_queue(self, pq: ProcessQueue, mq: MessageQueue, delay: float = 0.0) -> None:
        if delay:
            await asyncio.sleep(delay)
        if pq.dropped:
            return
        async with self._slots, self._queue_locks.setdefault(mq, asyncio.Lock()):
            if self._clustering and (not pq.locked or pq.lock_expired()):
                if not pq.dropped:
                    self._try_lock_later(pq, mq, 0.1)
                return
            started = time.monotonic()
            batch = max(1, self.config.consume_message_batch_max_size)
            while not pq.dropped and not self._stopped:
                if self._clustering and (not pq.locked or pq.lock_expired()):
                    self._try_lock_later(pq, mq, 0.01)
                    return
                if time.monotonic() - started > MAX_TIME_CONSUME_CONTINUOUSLY:
                    self._submit_later(pq, mq, 0.01)
                    return
                async with pq.consume_lock:
                    if pq.dropped:
                        return
                    msgs = pq.take(batch)
                    if not msgs:
                        return  # take() cleared pq.consuming: the next pull dispatches again
                    prepare_for_listener(msgs, self.group)
                    context = ConsumeOrderlyContext(mq)
                    with self._in_flight:
                        try:
                            status = await call_listener(self.listener, self._executor, msgs, context)
                        except Exception:
                            log.warning("orderly listener of group %s failed on %s offset %d; suspending the queue",
                                        self.group, mq, msgs[0].queue_offset, exc_info=True)
                            status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                        go_on = await self._process_result(msgs, status, context, pq, mq)
                if not go_on:
                    return

    async def _process_result(self, msgs: list[MessageExt], status, context: ConsumeOrderlyContext,
                              pq: ProcessQueue, mq: MessageQueue) -> bool:
        """Commit or schedule a retry; runs under the queue's consume lock. False: stop this round."""
        go_on = True
        suspend = status in (ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT,
                             ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT.value)
        if suspend and await self._must_retry(msgs, mq):
            pq.make_consume_again(msgs)
            pause = context.suspend_current_queue_time_millis
            if pause < 0:
                pause = self.config.suspend_current_queue_time_millis
            self._submit_later(pq, mq, pause / 1000)
            return False
        offset = pq.commit()
        if offset >= 0:
            # Also when dropped meanwhile: whoever takes the queue waits for this lock first.
            self.offset_store.update(mq, offset, increase_only=False)
            self.on_consumed(len(msgs))
        return go_on

    async def _must_retry(self, msgs: list[MessageExt], mq: MessageQueue) -> bool:
        """RocketMQ's checkReconsumeTimes: messages out of attempts go to the retry topic (and from
        there to the DLQ); True if any message must be consumed here again."""
        max_times = self.config.effective_max_reconsume_times(orderly=True)
        retry = False
        for m in msgs:
            if m.reconsume_times >= max_times:
                m.properties[Prop.RECONSUME_TIME] = str(m.reconsume_times)
                if not await self.send_back.send_to_retry_topic(m, reconsume_times=m.reconsume_times,
                                                               delay_level=3 + m.reconsume_times,
                                                               broker_name=mq.broker_name):
                    retry = True
                    m.reconsume_times += 1
            else:
                retry = True
                m.reconsume_times += 1
        return retry
