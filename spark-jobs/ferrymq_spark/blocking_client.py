"""The Spark source's pull consumer for synchronous callers (its loop on a thread of its own:
loop_thread.py)."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Iterable, Iterator, TypeVar

from ferrymq.client.config import ClientConfig
from ferrymq.client.errors import MQClientError
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.common.protocol import MASTER_ID, MessageQueue

from ferrymq_spark.loop_thread import LoopThread
from ferrymq_spark.offsets import Offsets, QueueKey

T = TypeVar("T")


class BlockingConsumer:
    """A :class:`PullConsumer` for synchronous callers; use as a context manager."""

    def __init__(self, group: str, config: ClientConfig) -> None:
        self.group = group
        self._loop = LoopThread("ferrymq-spark-client")
        self.consumer = PullConsumer(group, config=config)
        self._closed = False
        try:
            self._call(self.consumer.start())
        except BaseException:
            self._loop.stop()
            raise

    def _call(self, coro: Awaitable[T]) -> T:
        return self._loop.call(coro)

    def pipelined(self, calls: Iterable[Callable[[PullConsumer], Awaitable[T]]], depth: int) -> Iterator[T]:
        """Results of ``call(consumer)`` for each call, in order, with up to ``depth`` of them
        running at once on the client's loop: the network and the broker work while the
        caller turns the previous result into rows."""
        return self._loop.pipelined(((lambda c=call: c(self.consumer)) for call in calls), depth)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._call(self.consumer.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> "BlockingConsumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ many queues at once

    def queues(self, topics: Iterable[str]) -> list[QueueKey]:
        """Every readable queue of the topics, fresh from the name server."""
        async def fetch() -> list[QueueKey]:
            out: list[QueueKey] = []
            for topic in topics:
                try:
                    mqs = await self.consumer.fetch_queues(topic)
                except MQClientError as e:
                    raise MQClientError(f"cannot read topic {topic}: {e}") from e
                out += [(mq.topic, mq.broker_name, mq.queue_id) for mq in mqs]
            return sorted(out)
        return self._call(fetch())

    def _each(self, keys: Iterable[QueueKey], call) -> Offsets:
        keys = list(keys)

        async def run() -> Offsets:
            values = await asyncio.gather(*(call(MessageQueue(*k)) for k in keys))
            return dict(zip(keys, values))
        return self._call(run())

    def min_offsets(self, keys: Iterable[QueueKey]) -> Offsets:
        return self._each(keys, self.consumer.min_offset)

    def max_offsets(self, keys: Iterable[QueueKey]) -> Offsets:
        return self._each(keys, self.consumer.max_offset)

    def committed_offsets(self, keys: Iterable[QueueKey]) -> Offsets:
        """The group's committed offsets; -1 where it has none."""
        return self._each(keys, self.consumer.committed)

    def offsets_for_timestamp(self, keys: Iterable[QueueKey], timestamp_ms: int) -> Offsets:
        """Per queue, the first offset whose message was stored at or after ``timestamp_ms``
        (the queue's end when there is none), as the Kafka source's startingTimestamp."""
        return self._each(keys, lambda mq: self._first_at_or_after(mq, timestamp_ms))

    async def _first_at_or_after(self, mq: MessageQueue, timestamp_ms: int) -> int:
        # SEARCH_OFFSET_BY_TIMESTAMP answers RocketMQ's "nearest" offset, and a batch shares one
        # store time, so bisect on the messages themselves (one-message pulls, ~log2(n) of them).
        lo, hi = await self.consumer.min_offset(mq), await self.consumer.max_offset(mq)
        while lo < hi:
            mid = (lo + hi) // 2
            result = await self.consumer.pull(mq, mid, max_nums=1)
            if not result.messages:  # removed under us: search above it
                lo = mid + 1
                continue
            m = result.messages[0]
            if m.store_timestamp >= timestamp_ms:
                hi = min(mid, m.queue_offset)
            else:
                lo = m.queue_offset + 1
        return lo

    def read_address(self, topic: str, broker_name: str) -> str:
        """The broker that serves reads of ``broker_name``'s queues of ``topic``: its master, or
        a slave while the master is not in the route (as the pull consumer chooses)."""
        addr, _ = self._call(self.consumer.instance.find_subscribe_addr(broker_name, MASTER_ID, topic))
        return addr

    def commit_offsets(self, offsets: Offsets) -> None:
        async def run() -> None:
            await asyncio.gather(*(self.consumer.commit(MessageQueue(*k), o) for k, o in offsets.items()))
        self._call(run())
